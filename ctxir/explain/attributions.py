"""Why a model scored one (query, document) pair as it did: per-token explanations of a score.

Bi-encoder with mean pooling — exact. The query and the document are encoded separately; with mean pooling
over every non-padding token ([CLS] and [SEP] included, as sentence-transformers' ``Pooling`` does) and any
normalisation after it, the cosine splits into query-token × document-token terms::

    cos(q̄, d̄) = Σᵢⱼ qᵢ·dⱼ / (n·m·‖q̄‖·‖d̄‖)

``mean_pooling_contributions`` is that pure tensor core (tested without a model); ``explain_bi_encoder`` runs
the model once per text and checks the terms add up to the model's own cosine. For CLS or max pooling no such
split exists: ``explain_bi_encoder`` says so and (method="auto") falls back to Integrated Gradients.

Cross-encoder and CLS-LR — Integrated Gradients (Captum's ``LayerIntegratedGradients`` on the word embeddings
of ``[CLS] q [SEP] d [SEP]``). The baseline keeps [CLS]/[SEP] and replaces every query and document token by
[PAD] (``baseline="mask"``: by [MASK]); position and segment embeddings are the same in both, so only the words
are attributed and the special tokens get exactly 0. The report carries the completeness error,
``|Σ attributions − (score − baseline_score)| / |score − baseline_score|``; if it is above 1 % at the default
number of steps the steps are doubled up to a cap, and the number used is reported. A cross-encoder is
explained through the score its re-ranker reports (its activation, e.g. sigmoid, applied; ``logit=True``
attributes the raw logit); a CLS-LR ranker through the logit ``coef · CLS + b`` that ``ClsLrRanker.score_pairs``
reports (not the ``predict_proba`` sigmoid). ``cls_attention`` adds the attention from [CLS] per layer.

``explain`` assembles everything into one JSON-able dict (the ``/explain`` answer).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping

import numpy as np
import torch

from ctxir.encoders.bi_encoder import BiEncoder, LayerPooling
from ctxir.encoders.internals import inspect_text
from ctxir.encoders.models import DEFAULT_BI_ENCODER, load_bi_encoder, load_cross_encoder
from ctxir.rerank.rankers import ClsLrRanker, CrossEncoderReranker
from ctxir.rerank.registry import get_reranker
from ctxir.types import CtxirError

BASELINES = ("pad", "mask")
BI_ENCODER_METHODS = ("auto", "exact", "integrated-gradients")
# Gauss–Legendre IG: 32 steps keep the completeness error under 1 % on MiniLM pairs, 16 do not always
# (measured in docs/explanations.md).
DEFAULT_IG_STEPS = 32
MAX_IG_STEPS = 128
COMPLETENESS_TOLERANCE = 0.01  # relative: |Σ attributions − Δ| ≤ 1 % of |Δ|, Δ = score − baseline_score
# Below this absolute gap the relative error means nothing (Δ ≈ 0): the attributions are then accepted as is.
COMPLETENESS_ATOL = 1e-5
# The exact split is checked against the model's own cosine; a larger gap means the pipeline is not a plain mean.
EXACT_CHECK_ATOL = 1e-4
_ATTENTION_LOCK = threading.Lock()


# ---------------------------------------------------------------------------------------------------------------
# Bi-encoder: the exact split (pure tensor core)


def mean_pooling_contributions(
    query_tokens: torch.Tensor | np.ndarray, document_tokens: torch.Tensor | np.ndarray
) -> torch.Tensor:
    """(n, hidden) query token vectors + (m, hidden) document token vectors → (n, m) contributions.

    Entry (i, j) = qᵢ·dⱼ / (n·m·‖q̄‖·‖d̄‖), where q̄, d̄ are the means of the rows; the entries sum to
    cos(q̄, d̄), the cosine of the mean-pooled (and then normalised, which changes no cosine) embeddings.
    Pass every token the pooling averages (specials included, padding excluded). Computed in float64.

    >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # 2 query tokens; mean (0.5, 0.5)
    >>> d = torch.tensor([[1.0, 0.0]])  # 1 document token
    >>> contributions = mean_pooling_contributions(q, d)  # (2, 1): query token × document token
    >>> contributions.squeeze(1).tolist(), round(float(contributions.sum()), 4)  # sums to cos(q̄, d̄) = 1/√2
    ([0.7071067811865475, 0.0], 0.7071)
    """
    q = _as_tokens(query_tokens, "query_tokens")  # (n, hidden)
    d = _as_tokens(document_tokens, "document_tokens")  # (m, hidden)
    if q.shape[1] != d.shape[1]:
        raise CtxirError(
            f"query_tokens have hidden size {q.shape[1]} but document_tokens {d.shape[1]}: "
            "pass token vectors from the same model"
        )
    q_norm, d_norm = q.mean(0).norm(), d.mean(0).norm()
    if q_norm == 0 or d_norm == 0:
        raise CtxirError(
            "a mean-pooled embedding is the zero vector, so its cosine is undefined: "
            "pass non-zero token vectors"
        )
    scale = q.shape[0] * d.shape[0] * q_norm * d_norm
    return (q @ d.T) / scale  # (n, m)


def _as_tokens(tokens, name: str) -> torch.Tensor:
    tokens = torch.as_tensor(tokens).detach().to("cpu", torch.float64)
    if tokens.ndim != 2 or tokens.shape[0] == 0:
        raise CtxirError(
            f"{name} must be a (tokens, hidden) matrix with at least one token, "
            f"got shape {tuple(tokens.shape)!r}"
        )
    return tokens


# ---------------------------------------------------------------------------------------------------------------
# Bi-encoder: model-aware wrapper


def explain_bi_encoder(
    model,
    query: str,
    document: str,
    method: str = "auto",
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
) -> dict:
    """Split a bi-encoder's cosine(query, document) over tokens.

    model: a ``SentenceTransformer``, a ``ctxir.BiEncoder`` (its pooling and layer are used) or a name.
    method: "exact" (mean pooling only; anything else raises), "integrated-gradients" (Captum IG on the word
    embeddings of both texts, for any pooling) or "auto" (exact where it exists, otherwise IG).
    Returns a JSON-able dict: ``cosine``, ``query_tokens``, ``document_tokens``, ``pair_contributions``
    (rows = query tokens; None for IG), ``query_contributions`` / ``document_contributions`` (per token:
    the row / column sums, or the IG attributions), ``method``, ``pooling`` and, for IG, the completeness report.

    >>> out = explain_bi_encoder("sentence-transformers/all-MiniLM-L6-v2", "river otters",
    ...                          "Otters dig dens in the river bank.")  # doctest: +SKIP
    >>> out["method"], out["query_tokens"]  # doctest: +SKIP
    ('exact', ['[CLS]', 'river', 'otter', '##s', '[SEP]'])
    >>> abs(sum(map(sum, out["pair_contributions"])) - out["cosine"]) < 1e-5  # doctest: +SKIP
    True
    """
    query, document = _check_text(query, "query"), _check_text(document, "document")
    if method not in BI_ENCODER_METHODS:
        raise CtxirError(f"method {method!r} is not known: use one of {', '.join(BI_ENCODER_METHODS)}")
    st = _sentence_transformer(model)
    pooling, reason = _exact_split_support(st)
    if method == "exact" and reason:
        raise CtxirError(
            f"no exact split of the cosine exists for this bi-encoder: {reason}. Use "
            "method='integrated-gradients' (or 'auto') for an approximate attribution"
        )
    if method == "integrated-gradients" or reason:
        result = _bi_encoder_ig(st, query, document, n_steps, max_steps, baseline)
        result["pooling"] = pooling
        if reason:
            result["note"] = f"no exact split exists ({reason}); Integrated Gradients used instead"
        return result

    st.eval()
    with torch.no_grad():
        q_out = st.encode(query, output_value=None, convert_to_numpy=False)  # dict for one text
        d_out = st.encode(document, output_value=None, convert_to_numpy=False)
    q_tokens, d_tokens = _pooled_tokens(st, q_out), _pooled_tokens(st, d_out)  # (n, hidden), (m, hidden)
    pairs = mean_pooling_contributions(q_tokens, d_tokens)  # (n, m)
    cosine = float(
        torch.nn.functional.cosine_similarity(
            q_out["sentence_embedding"].double(), d_out["sentence_embedding"].double(), dim=0
        )
    )
    total = float(pairs.sum())
    if abs(total - cosine) > EXACT_CHECK_ATOL:
        raise CtxirError(
            f"the token contributions sum to {total:.6f} but the model's cosine is {cosine:.6f}: "
            "this bi-encoder does more than mean pooling; use method='integrated-gradients'"
        )
    tokenizer = st.tokenizer
    return {
        "method": "exact",
        "pooling": pooling,
        "cosine": cosine,
        "query_tokens": tokenizer.convert_ids_to_tokens(q_out["input_ids"].tolist()),
        "document_tokens": tokenizer.convert_ids_to_tokens(d_out["input_ids"].tolist()),
        "pair_contributions": pairs.tolist(),  # (n, m): rows = query tokens
        "query_contributions": pairs.sum(1).tolist(),  # (n,)
        "document_contributions": pairs.sum(0).tolist(),  # (m,)
        "contributions_sum": total,
    }


def _sentence_transformer(model):
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers import SentenceTransformer

    if isinstance(model, str):
        return load_bi_encoder(model, "auto")
    if isinstance(model, BiEncoder):
        return model._encoder  # the pipeline that really encodes: its pooling/layer choice included
    if isinstance(model, SentenceTransformer):
        return model
    raise CtxirError(
        f"bi_encoder must be a SentenceTransformer, a ctxir.BiEncoder or a model name, "
        f"got {type(model).__name__!r}"
    )


def _exact_split_support(st) -> tuple[str, str]:
    """(pooling name, reason no exact split exists or "")."""
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers.base.modules import Normalize

    modules = list(st)
    if len(modules) < 2 or not hasattr(modules[0], "auto_model"):
        return "unknown", "the model is not a transformer followed by a pooling module"
    pooler = modules[1]
    if isinstance(pooler, LayerPooling):
        pooling = pooler.mode
    else:
        pooling = getattr(pooler, "pooling_mode", None)
        if not isinstance(pooling, str):
            return "unknown", f"its second module is {type(pooler).__name__}, not a pooling"
        if not getattr(pooler, "include_prompt", True):
            return pooling, "its pooling leaves prompt tokens out of the mean"
    if pooling != "mean":
        return pooling, f"it uses {pooling!r} pooling, which is not linear in the token vectors"
    extra = [type(m).__name__ for m in modules[2:] if not isinstance(m, Normalize)]
    if extra:
        return pooling, f"the pooled vector goes through {', '.join(extra)} before the cosine"
    return pooling, ""


def _pooled_tokens(st, out: dict) -> torch.Tensor:
    """The token vectors the pooling averages: the last layer's, or the layer a LayerPooling reads."""

    pooler = st[1]
    if isinstance(pooler, LayerPooling) and pooler.layer != -1:
        # encode() strips the batch dimension from token_embeddings but not from the hidden states
        tokens = out["all_layer_embeddings"][pooler.layer]  # (1, tokens, hidden) for one text
        return tokens[0][out["attention_mask"].bool()]  # (tokens, hidden)
    return out["token_embeddings"]  # (tokens, hidden), padding already stripped


def _sentence_embedder(st):
    """``embed(word_vectors, enc)``: the sentence embeddings (batch, dim) of ``st`` computed from word embeddings
    (batch, n, hidden) instead of token ids, so Integrated Gradients can interpolate them; ``enc`` gives the
    attention mask (and token types) of the one tokenised text, repeated over the batch."""
    hf = st[0].auto_model
    needs_layers = any(getattr(m, "layer", -1) != -1 for m in list(st)[1:])

    def embed(word_vectors: torch.Tensor, enc: dict) -> torch.Tensor:
        batch = word_vectors.shape[0]
        mask = enc["attention_mask"].expand(batch, -1)
        kwargs = (
            {"token_type_ids": enc["token_type_ids"].expand(batch, -1)} if "token_type_ids" in enc else {}
        )
        out = hf(inputs_embeds=word_vectors, attention_mask=mask, output_hidden_states=needs_layers, **kwargs)
        features = {"token_embeddings": out.last_hidden_state, "attention_mask": mask}
        if needs_layers:
            features["all_layer_embeddings"] = out.hidden_states
        for module in list(st)[1:]:
            features = module(features)
        return features["sentence_embedding"]  # (batch, dim)

    return embed


def _bi_encoder_ig(st, query: str, document: str, n_steps: int, max_steps: int, baseline: str) -> dict:
    """Captum IG on the word embeddings of both texts at once; the target is their cosine."""
    # lazy: captum is needed only for Integrated Gradients
    from captum.attr import IntegratedGradients

    _check_steps(n_steps, max_steps)
    st.eval()
    tokenizer = st.tokenizer
    q_enc = _single_features(st, query)
    d_enc = _single_features(st, document)
    words = st[0].auto_model.get_input_embeddings()
    q_words, d_words = (
        words(q_enc["input_ids"]).detach(),
        words(d_enc["input_ids"]).detach(),
    )  # (1, n|m, hidden)
    q_base = words(_baseline_ids(tokenizer, q_enc["input_ids"], baseline)).detach()
    d_base = words(_baseline_ids(tokenizer, d_enc["input_ids"], baseline)).detach()
    embed = _sentence_embedder(st)

    def forward(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:  # (batch, n, h), (batch, m, h) → (batch,)
        return torch.nn.functional.cosine_similarity(embed(q, q_enc), embed(d, d_enc), dim=-1)

    with torch.no_grad():
        cosine = float(forward(q_words, d_words)[0])
        own = st.encode([query, document], convert_to_tensor=True, normalize_embeddings=True)
        own_cosine = float(own[0] @ own[1])
        baseline_cosine = float(forward(q_base, d_base)[0])
    if abs(cosine - own_cosine) > EXACT_CHECK_ATOL:
        raise CtxirError(
            f"could not reproduce this bi-encoder's cosine ({own_cosine:.6f}) from its word "
            f"embeddings (got {cosine:.6f}): its first module is not a plain transformer"
        )

    def attribute(steps: int):
        ig = IntegratedGradients(forward)
        (q_attr, d_attr), delta = ig.attribute(
            (q_words, d_words), baselines=(q_base, d_base), n_steps=steps, return_convergence_delta=True
        )
        return (q_attr.sum(-1)[0], d_attr.sum(-1)[0]), float(delta[0])  # (n,), (m,) summed over hidden

    (q_scores, d_scores), report = _adaptive(attribute, cosine - baseline_cosine, n_steps, max_steps)
    return {
        "method": "integrated-gradients",
        "cosine": own_cosine,
        "query_tokens": tokenizer.convert_ids_to_tokens(q_enc["input_ids"][0].tolist()),
        "document_tokens": tokenizer.convert_ids_to_tokens(d_enc["input_ids"][0].tolist()),
        "pair_contributions": None,  # IG attributes each text's tokens, not pairs of them
        "query_contributions": q_scores.tolist(),
        "document_contributions": d_scores.tolist(),
        "baseline": baseline,
        "baseline_cosine": baseline_cosine,
        **report,
    }


def _single_features(st, text: str) -> dict:
    """Tokenised like ``encode`` does it (the model's max_seq_length truncation), batch of one."""
    features = st.preprocess([text]) if hasattr(st, "preprocess") else st.tokenize([text])
    device = next(st.parameters()).device
    return {k: v.to(device) for k, v in features.items() if isinstance(v, torch.Tensor)}


# ---------------------------------------------------------------------------------------------------------------
# Cross-encoder and CLS-LR: Integrated Gradients


def explain_cross_encoder(
    model,
    query: str,
    document: str,
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
    logit: bool = False,
    attention: bool = True,
    title: str = "",
) -> dict:
    """Integrated Gradients of a cross-encoder's score over the tokens of ``[CLS] query [SEP] document [SEP]``.

    model: a sentence-transformers ``CrossEncoder``, a ``ctxir.CrossEncoderReranker`` or a model name.
    The score is the one ``CrossEncoderReranker.score_pairs`` reports (the model's activation applied);
    logit=True explains the raw logit instead. attention=True adds ``cls_attention`` (layers × tokens).
    A ``CrossEncoderReranker`` that reads long documents by their best window (``passages``, MaxP) is explained on
    that window, the one whose score ranked the document; ``window`` says which (``title``: the document's title,
    when ``document`` starts with it, so the windows are cut as ``score_documents`` cuts a corpus document's).
    Usually ``model`` is a trained re-ranker (``"cross-encoder/ms-marco-MiniLM-L6-v2"``, a training output
    folder); below, MiniLM with a fresh one-logit head, which shows the contract (not a meaningful score):

    >>> from sentence_transformers import CrossEncoder
    >>> from ctxir.encoders.models import resolve_model  # a Hub id → the packaged copy, offline
    >>> _ = torch.manual_seed(0)  # the fresh head's weights
    >>> ce = CrossEncoder(resolve_model(DEFAULT_BI_ENCODER), num_labels=1, device="cpu")  # doctest: +SKIP
    >>> out = explain_cross_encoder(ce, "river otters", "Otters dig dens in the river bank.")  # doctest: +SKIP
    >>> out["tokens"][:4], len(out["attributions"]) == len(out["tokens"])  # doctest: +SKIP
    (['[CLS]', 'river', 'otter', '##s'], True)
    >>> out["completeness_error"] <= 0.01  # Σ attributions = score − baseline score within 1 %  # doctest: +SKIP
    True
    """
    query, document = _check_text(query, "query"), _check_text(document, "document")
    _check_steps(n_steps, max_steps)
    document, window = best_window(model, query, document, title)
    ce = _cross_encoder(model)
    ce.eval()
    hf = ce[0].auto_model
    features = ce.preprocess([(query, document)])  # exactly what predict() feeds the model
    device = next(ce.parameters()).device
    enc = {k: v.to(device) for k, v in features.items() if isinstance(v, torch.Tensor)}
    activation = None if logit else getattr(ce, "activation_fn", None)

    def score(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None):
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            **{k: v for k, v in features.items() if not isinstance(v, torch.Tensor)},
        }
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        scores = ce(batch)["scores"]  # (batch, labels)
        if activation is not None:
            scores = activation(scores)
        return scores[
            :, -1
        ]  # (batch,): a multi-label head's last column is "relevant", as in CrossEncoderReranker

    result = _explain_pair(score, hf.get_input_embeddings(), ce.tokenizer, enc, n_steps, max_steps, baseline)
    if getattr(ce[-1], "term_match", False):
        result["term_match"] = _term_match_report(ce, enc, result["tokens"])
    activation_name = "none (logit)" if activation is None else type(activation).__name__
    result.update(
        model_kind="cross-encoder",
        score_kind="logit"
        if activation is None
        else f"{activation_name}(logit), as CrossEncoderReranker.score_pairs reports it",
    )
    if getattr(model, "backend", "torch") == "onnx-int8":  # the explanation needs gradients: torch, float32
        result["score_kind"] += (
            "; computed in torch float32, while this re-ranker ranks with backend onnx-int8 "
            "(its base layers in int8), whose score for the pair differs slightly"
        )
    if getattr(model, "both_orders", False):  # attributions follow one joint pass: the order given
        result["score_kind"] += (
            "; of the (query, document) order, while this scorer's pair score is the mean of "
            "both orders (its pair_orders.json), which differs slightly"
        )
    if window is not None:
        result["window"] = window
    if attention:
        result.update(_attention_report(query, document, hf, ce.tokenizer, result["tokens"]))
    return result


def explain_cls_lr(
    ranker,
    query: str,
    document: str,
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
    attention: bool = True,
) -> dict:
    """Integrated Gradients of a CLS-LR ranker's logit ``coef · CLS(query, document) + intercept``.

    That logit is what ``ClsLrRanker.score_pairs`` reports (``predict_proba`` is its sigmoid).
    ranker: a ``ctxir.ClsLrRanker`` or a folder / shipped name ``ClsLrRanker.load`` accepts.

    >>> from ctxir.encoders.models import load_transformer
    >>> from ctxir.rerank import ClsLrRanker, cls_features
    >>> name = "sentence-transformers/all-MiniLM-L6-v2"
    >>> tokenizer, body = load_transformer(name, "cpu", attentions=False)  # doctest: +SKIP
    >>> pairs = [("river otters", "Otters dig dens in the river bank."), ("river otters", "Banks approve loans.")]
    >>> ranker = ClsLrRanker.fit(name, cls_features(body, tokenizer, pairs), [1, 0], device="cpu")  # doctest: +SKIP
    >>> out = explain_cls_lr(ranker, *pairs[0])  # doctest: +SKIP
    >>> round(out["score"], 4) == round(float(ranker.score_pairs(pairs[0][0], [pairs[0][1]])[0]), 4)  # doctest: +SKIP
    True
    >>> out["completeness_error"] <= 0.01  # doctest: +SKIP
    True
    """

    query, document = _check_text(query, "query"), _check_text(document, "document")
    _check_steps(n_steps, max_steps)
    if isinstance(ranker, str):
        ranker = ClsLrRanker.load(ranker)
    if not isinstance(ranker, ClsLrRanker):
        raise CtxirError(
            f"cls_lr must be a ctxir.ClsLrRanker or a ranker folder, got {type(ranker).__name__!r}"
        )
    body = ranker.model.eval()
    device = next(body.parameters()).device
    enc = dict(
        ranker.tokenizer(
            query, document, truncation="longest_first", max_length=ranker.max_length, return_tensors="pt"
        ).to(device)
    )  # tokenised exactly as cls_features does
    coef = torch.as_tensor(ranker.coef, device=device)  # (hidden,)
    layer = ranker.layer

    def score(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None):
        kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        out = body(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=layer != -1, **kwargs
        )
        hidden = out.last_hidden_state if layer == -1 else out.hidden_states[layer]  # (batch, tokens, hidden)
        return hidden[:, 0].float() @ coef + ranker.intercept  # (batch,)

    result = _explain_pair(
        score, body.get_input_embeddings(), ranker.tokenizer, enc, n_steps, max_steps, baseline
    )
    result.update(model_kind="cls-lr", score_kind="logit coef·CLS + b, as ClsLrRanker.score_pairs reports it")
    if attention:
        result.update(_attention_report(query, document, body, ranker.tokenizer, result["tokens"]))
    return result


def best_window(model, query: str, document: str, title: str = "") -> tuple[str, dict | None]:
    """(the text a window-reading re-ranker scored ``document`` by, which window it is) — ``(document, None)`` for a
    model that reads the first tokens, or for a document of one window. The windows are cut as the re-ranker cuts
    them: after ``title`` when ``document`` starts with it (a corpus document), else from the text alone."""
    passages = getattr(model, "passages", None)
    if passages is None:
        return document, None
    titled = bool(title.strip()) and document.startswith(title.strip())
    text = document[len(title.strip()) :] if titled else document
    windows, scores = model.window_scores(query, text, title if titled else "")
    if len(windows) < 2:
        return document, None
    best = int(np.argmax(scores))
    return windows[best], {
        "index": best + 1,
        "of": len(windows),
        "words": passages.words,
        "stride": passages.stride,
        "score": float(scores[best]),
        "text": windows[best],
    }


def _cross_encoder(model):
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers import CrossEncoder

    if isinstance(model, str):
        return load_cross_encoder(model, "auto")
    if isinstance(model, CrossEncoderReranker):
        model = model.model
    if isinstance(model, CrossEncoder):
        return model
    raise CtxirError(
        f"cross_encoder must be a CrossEncoder, a ctxir.CrossEncoderReranker or a model name, "
        f"got {type(model).__name__!r}"
    )


def _term_match_report(ce, enc: dict, tokens: list[str]) -> dict:
    """A term-match head's exact share per query token (ctxir.encoders.heads): the part of the score that reads
    token ids, which Integrated Gradients over word vectors cannot attribute (it stays in ``baseline_score``)."""
    with torch.no_grad():
        features = ce[0](dict(enc))
        shares = ce[-1].term_match_scores(features)[0]  # (tokens,): zero outside the query
    query = [i for i, t in enumerate(enc["token_type_ids"][0].tolist()) if t == 0]
    return {
        "score": float(shares.sum()),
        "tokens": [{"index": i, "token": tokens[i], "contribution": float(shares[i])} for i in query],
        "note": "each query token's part of the head's term-match term (exact matches and cosine bands in the "
        "document, weighted by the token's learned importance); it sums to the term. Integrated "
        "Gradients attribute the rest of the score; this part reads the token ids and stays in "
        "baseline_score",
    }


def _explain_pair(
    score: Callable,
    word_embeddings: torch.nn.Module,
    tokenizer,
    enc: dict,
    n_steps: int,
    max_steps: int,
    baseline: str,
) -> dict:
    """Captum LayerIntegratedGradients of ``score(input_ids, attention_mask, token_type_ids) -> (batch,)``."""
    # lazy: captum is needed only for Integrated Gradients
    from captum.attr import LayerIntegratedGradients

    input_ids = enc["input_ids"]  # (1, tokens)
    base_ids = _baseline_ids(tokenizer, input_ids, baseline)  # (1, tokens): [CLS]/[SEP] kept
    extra = (enc["attention_mask"], enc.get("token_type_ids"))
    with torch.no_grad():
        value = float(score(input_ids, *extra)[0])
        # the baseline is the start of Captum's path: the baseline's word vectors under the input's ids. A model that
        # reads ids only through these vectors scores it as the baseline ids; one that also reads the ids themselves
        # (a term-match head's exact matches) keeps that part in the baseline score, so completeness still holds
        base_vectors = word_embeddings(base_ids)  # (1, tokens, hidden)
        handle = word_embeddings.register_forward_hook(lambda module, args, output: base_vectors)
        try:
            baseline_value = float(score(input_ids, *extra)[0])
        finally:
            handle.remove()

    def attribute(steps: int):
        lig = LayerIntegratedGradients(score, word_embeddings)
        attributions, delta = lig.attribute(
            input_ids,
            baselines=base_ids,
            additional_forward_args=extra,
            n_steps=steps,
            return_convergence_delta=True,
        )
        return attributions.sum(-1)[0], float(delta[0])  # (1, tokens, hidden) → (tokens,)

    token_scores, report = _adaptive(attribute, value - baseline_value, n_steps, max_steps)
    ids = input_ids[0].tolist()
    sequence_b = (
        enc["token_type_ids"][0].tolist().index(1)
        if "token_type_ids" in enc and 1 in enc["token_type_ids"][0].tolist()
        else None
    )
    return {
        "score": value,
        "baseline_score": baseline_value,
        "tokens": tokenizer.convert_ids_to_tokens(ids),
        "sentence_b_start": sequence_b,  # index of the document's first token
        "attributions": token_scores.tolist(),  # (tokens,), summed over the hidden dimension
        "baseline": baseline,
        **report,
    }


def _adaptive(attribute: Callable, gap: float, n_steps: int, max_steps: int):
    """Run ``attribute(steps)``, doubling the steps while the completeness error is above the tolerance.

    gap = score − baseline_score as reported; the error is measured against it (Captum's own convergence delta,
    from its own forward passes, agrees to float precision and is reported as ``convergence_delta``).
    """
    steps = n_steps
    while True:
        scores, captum_delta = attribute(steps)
        parts = tuple(p.detach().cpu().double() for p in (scores if isinstance(scores, tuple) else (scores,)))
        total = float(sum(part.sum() for part in parts))
        error = abs(total - gap)
        relative = error / abs(gap) if gap != 0 else None  # undefined when score == baseline_score
        converged = error <= COMPLETENESS_ATOL or (
            relative is not None and relative <= COMPLETENESS_TOLERANCE
        )
        if converged or steps >= max_steps:
            break
        steps = min(2 * steps, max_steps)
    return parts if isinstance(scores, tuple) else parts[0], {
        "completeness_error": relative,  # |Σ attributions − Δ| / |Δ|, Δ = score − baseline_score
        "completeness_error_abs": error,
        "attributions_sum": total,
        "convergence_delta": captum_delta,  # Captum's Σ attributions − (F(x) − F(baseline))
        "n_steps": steps,
        "converged": converged,
        "integration": "Captum integrated gradients, Gauss-Legendre",
    }


def _baseline_ids(tokenizer, input_ids: torch.Tensor, baseline: str) -> torch.Tensor:
    """input_ids with every non-special token replaced by [PAD] or [MASK]; [CLS]/[SEP] stay."""
    _check_baseline(baseline)
    token_id = tokenizer.pad_token_id if baseline == "pad" else tokenizer.mask_token_id
    if token_id is None:
        raise CtxirError(
            f"this tokenizer has no {baseline.upper()} token: use the other baseline "
            f"({', '.join(b for b in BASELINES if b != baseline)})"
        )
    special = torch.tensor(
        [
            tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True)
            for row in input_ids.tolist()
        ],
        dtype=torch.bool,
        device=input_ids.device,
    )
    return input_ids.masked_fill(~special, token_id)


# ---------------------------------------------------------------------------------------------------------------
# Attention from [CLS]


def cls_attention(query: str, document: str, model, tokenizer=None) -> dict:
    """Attention paid by [CLS] to every token of ``[CLS] query [SEP] document [SEP]``, per layer.

    model: a name (loaded with eager attention by ``ctxir.encoders.internals``) or a loaded transformers model
    with its ``tokenizer``; a model loaded with sdpa attention is switched to eager for this one pass.
    Returns ``tokens`` and ``attention``: (layers, tokens), averaged over heads; each row sums to 1.

    >>> name = "sentence-transformers/all-MiniLM-L6-v2"
    >>> out = cls_attention("river otters", "Otters dig dens.", name)  # doctest: +SKIP
    >>> len(out["attention"]), [round(sum(row), 4) for row in out["attention"]][:2]  # doctest: +SKIP
    (6, [1.0, 1.0])
    """

    query, document = _check_text(query, "query"), _check_text(document, "document")
    with _eager_attention(model):
        internals = inspect_text(query, document, model=model, tokenizer=tokenizer)
    attention = internals.attentions[:, :, 0, :].mean(
        axis=1
    )  # (layers, heads, tokens, tokens) → (layers, tokens)
    return {"tokens": internals.tokens, "attention": attention.astype(float).tolist()}


@contextlib.contextmanager
def _eager_attention(model):
    """sdpa kernels return no attention weights: switch a loaded model to eager for one pass, then back."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if config is None or current in (None, "eager") or not hasattr(model, "set_attn_implementation"):
        yield
        return
    with _ATTENTION_LOCK:
        model.set_attn_implementation("eager")
        try:
            yield
        finally:
            model.set_attn_implementation(current)


def _attention_report(query: str, document: str, model, tokenizer, tokens: list[str]) -> dict:
    try:
        report = cls_attention(query, document, model, tokenizer)
    except CtxirError as err:
        return {"cls_attention": None, "cls_attention_note": str(err)}
    if report["tokens"] != tokens:  # the pair was truncated to the model's max length for scoring
        return {
            "cls_attention": None,
            "cls_attention_note": "the pair is longer than the model's maximum "
            "length, so the scored tokens are a truncation: attention is not shown",
        }
    return {"cls_attention": report["attention"]}  # (layers, tokens), aligned with "tokens"


# ---------------------------------------------------------------------------------------------------------------
# Everything at once: the /explain answer


def explain(
    query: str,
    document: str,
    bi_encoder=DEFAULT_BI_ENCODER,
    cross_encoder=None,
    cls_lr=None,
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
    attention: bool = True,
    rerankers: Mapping[str, object] | None = None,
    title: str = "",
) -> dict:
    """Explain one (query, document) pair with every model given; a JSON-able dict.

    ``bi_encoder`` (always): ``cosine``, ``query_tokens``, ``document_tokens``, ``pair_contributions`` (rows =
    query tokens) and per-token sums — see ``explain_bi_encoder``. Re-rankers: ``rerankers`` maps a kind of
    ``ctxir.rerank.registry.RERANKERS`` to its model (``cross_encoder=`` and ``cls_lr=`` are the same for those two
    kinds); each is explained by its kind's explainer under the kind's key ("cross_encoder", "cls_lr", ...):
    ``score``, ``tokens``, ``attributions``, ``completeness_error`` and more — see ``explain_cross_encoder``.
    ``cross_encoder`` always holds the first re-ranker's explanation (the cross-encoder's, or the CLS-LR one when
    only a CLS-LR ranker is given): the key readers of one re-ranker's explanation read. ``title``: the
    document's title when ``document`` is a corpus document's title + text (a re-ranker that reads long documents
    by their best window cuts the windows after it, as it did when it ranked the document).
    """

    query, document = _check_text(query, "query"), _check_text(document, "document")
    if bi_encoder is None:
        raise CtxirError(
            "bi_encoder is None: pass a SentenceTransformer, a ctxir.BiEncoder or a model name "
            f"such as {DEFAULT_BI_ENCODER!r}"
        )
    _check_steps(n_steps, max_steps)
    _check_baseline(baseline)
    given = {
        kind: model
        for kind, model in (("cross-encoder", cross_encoder), ("cls-lr", cls_lr))
        if model is not None
    }
    given.update({kind: model for kind, model in (rerankers or {}).items() if model is not None})
    kinds = [get_reranker(kind) for kind in given]  # an unknown kind fails before any model runs
    options = {"n_steps": n_steps, "max_steps": max_steps, "baseline": baseline}
    result = {
        "query": query,
        "document": document,
        "bi_encoder": explain_bi_encoder(bi_encoder, query, document, **options),
    }
    for kind in kinds:
        result[kind.key] = kind.explain(
            given[kind.name], query, document, attention=attention, title=title, **options
        )
        result.setdefault("cross_encoder", result[kind.key])
    return result


def _check_text(text, name: str) -> str:
    if not isinstance(text, str):
        raise CtxirError(f"{name} must be a string, got {type(text).__name__!r}")
    if not text.strip():
        raise CtxirError(f"{name} is empty: type a few words to explain")
    return text


def _check_baseline(baseline: str) -> None:
    if baseline not in BASELINES:
        raise CtxirError(f"baseline {baseline!r} is not known: use one of {', '.join(BASELINES)}")


def _check_steps(n_steps: int, max_steps: int) -> None:
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise CtxirError(
            f"n_steps must be a positive integer, got {n_steps!r}: the default is {DEFAULT_IG_STEPS}"
        )
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < n_steps:
        raise CtxirError(
            f"max_steps must be an integer ≥ n_steps ({n_steps}), got {max_steps!r}: "
            f"the default is {MAX_IG_STEPS}"
        )
