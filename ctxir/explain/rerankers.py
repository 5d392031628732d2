"""Why a re-ranker scored a pair: Integrated Gradients of a cross-encoder's or a CLS-LR ranker's score over tokens.

A cross-encoder is explained through the score its re-ranker reports (its activation, e.g. sigmoid, applied;
``logit=True`` attributes the raw logit), on the window it ranked a long document by; a CLS-LR ranker through the
logit ``coef · CLS + b`` that ``ClsLrRanker.score_pairs`` reports (not the ``predict_proba`` sigmoid). The
Integrated Gradients themselves: ``ctxir.explain.integrated_gradients``; the attention from [CLS] added to both:
``ctxir.explain.attention``.

``EXPLAINERS`` names the explainer of each kind of the re-ranker registry (``ctxir.rerank.registry``);
``explainer_for(kind)`` is what the app, ``explain`` and the failure report call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ctxir.encoders.models import load_cross_encoder
from ctxir.explain.attention import attention_report
from ctxir.explain.integrated_gradients import (
    DEFAULT_IG_STEPS,
    MAX_IG_STEPS,
    check_pair_text,
    check_steps,
    pair_integrated_gradients,
)
from ctxir.rerank.cls_lr import ClsLrRanker
from ctxir.rerank.rankers import CrossEncoderReranker
from ctxir.rerank.registry import CLS_LR, CROSS_ENCODER, STS_CROSS_ENCODER, RerankerKind
from ctxir.types import CtxirError


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
    >>> from ctxir.encoders.models import DEFAULT_BI_ENCODER, resolve_model  # a Hub id → the packaged copy, offline
    >>> _ = torch.manual_seed(0)  # the fresh head's weights
    >>> ce = CrossEncoder(resolve_model(DEFAULT_BI_ENCODER), num_labels=1, device="cpu")  # doctest: +SKIP
    >>> out = explain_cross_encoder(ce, "river otters", "Otters dig dens in the river bank.")  # doctest: +SKIP
    >>> out["tokens"][:4], len(out["attributions"]) == len(out["tokens"])  # doctest: +SKIP
    (['[CLS]', 'river', 'otter', '##s'], True)
    >>> out["completeness_error"] <= 0.01  # Σ attributions = score − baseline score within 1 %  # doctest: +SKIP
    True
    """
    query, document = check_pair_text(query, "query"), check_pair_text(document, "document")
    check_steps(n_steps, max_steps)
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

    result = pair_integrated_gradients(
        score, hf.get_input_embeddings(), ce.tokenizer, enc, n_steps, max_steps, baseline
    )
    if getattr(ce[-1], "term_match", False):
        result["term_match"] = _term_match_report(ce, enc, result["tokens"])
    activation_name = "none (logit)" if activation is None else type(activation).__name__
    result.update(
        model_kind=CROSS_ENCODER.name,
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
        result.update(attention_report(query, document, hf, ce.tokenizer, result["tokens"]))
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
    """Integrated Gradients of a CLS-LR ranker's logit ``coef · CLS(query, document) + intercept`` (with the
    cross-encoder's own score as one more feature where the ranker has ``score_feature``).

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

    query, document = check_pair_text(query, "query"), check_pair_text(document, "document")
    check_steps(n_steps, max_steps)
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

    def score(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        out = body(**inputs, output_hidden_states=ranker.layer != -1)
        return ranker.score_tensor(inputs, out)  # (batch,): coef · features + b, as score_pairs reports it

    result = pair_integrated_gradients(
        score, body.get_input_embeddings(), ranker.tokenizer, enc, n_steps, max_steps, baseline
    )
    result.update(
        model_kind=CLS_LR.name, score_kind="logit coef·CLS + b, as ClsLrRanker.score_pairs reports it"
    )
    if attention:
        result.update(attention_report(query, document, body, ranker.tokenizer, result["tokens"]))
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
        importance = ce[-1].term_importance(features["token_embeddings"])[0]  # (tokens,)
    query = [i for i, t in enumerate(enc["token_type_ids"][0].tolist()) if t == 0]
    return {
        "score": float(shares.sum()),
        "tokens": [
            {
                "index": i,
                "token": tokens[i],
                "contribution": float(shares[i]),
                "importance": float(importance[i]),
            }
            for i in query
        ],
        "note": "each query token's part of the head's term-match term (exact matches and cosine bands in the "
        "document, weighted by the token's learned importance, also given); it sums to the term. Integrated "
        "Gradients attribute the rest of the score; this part reads the token ids and stays in "
        "baseline_score",
    }


# ---------------------------------------------------------------- each re-ranker kind's explainer


def _explain_cls_lr_document(ranker, query: str, document: str, title: str = "", **options) -> dict:
    # the ranker reads the first tokens of a document, title included: no windows to cut after the title
    return explain_cls_lr(ranker, query, document, **options)


# kind name → (model, query, document, n_steps=, max_steps=, baseline=, attention=, title=) → dict
EXPLAINERS: dict[str, Callable[..., dict]] = {
    CROSS_ENCODER.name: explain_cross_encoder,
    CLS_LR.name: _explain_cls_lr_document,
    STS_CROSS_ENCODER.name: explain_cross_encoder,
}


def register_explainer(kind: str, explainer: Callable[..., dict]) -> Callable[..., dict]:
    """How re-rankers of ``kind`` (a name of ``ctxir.rerank.registry.RERANKERS``) are explained from now on."""
    EXPLAINERS[kind] = explainer
    return explainer


def explainer_for(kind: RerankerKind) -> Callable[..., dict]:
    """The explainer of ``kind``: its own ``explain`` where the entry brings one, else the one registered here.

    >>> explainer_for(CROSS_ENCODER) is explain_cross_encoder
    True
    """
    explainer = kind.explain or EXPLAINERS.get(kind.name)
    if explainer is None:
        raise CtxirError(
            f"the {kind.label} re-ranker has no explainer: register one with "
            f"ctxir.explain.rerankers.register_explainer({kind.name!r}, function), or give its registry entry one"
        )
    return explainer
