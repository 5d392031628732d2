"""Why a re-ranker scored a pair: Integrated Gradients of its score over tokens, and [CLS]'s attention."""

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
    """Integrated Gradients of a cross-encoder's score (as ``score_pairs`` reports it, or the raw ``logit``) over the
    tokens of ``[CLS] query [SEP] document [SEP]``; a window-reading re-ranker's best ``window`` (after ``title``).

    Below, MiniLM with a fresh one-logit head, which shows the contract (not a meaningful score):

    >>> from sentence_transformers import CrossEncoder
    >>> from ctxir.encoders.models import DEFAULT_BI_ENCODER, resolve_model
    >>> _ = torch.manual_seed(0)  # the fresh head's weights
    >>> ce = CrossEncoder(resolve_model(DEFAULT_BI_ENCODER), num_labels=1, device="cpu")  # doctest: +SKIP
    >>> out = explain_cross_encoder(ce, "river otters", "Otters dig dens in the river bank.")  # doctest: +SKIP
    >>> out["tokens"][:4], len(out["attributions"]) == len(out["tokens"])  # doctest: +SKIP
    (['[CLS]', 'river', 'otter', '##s'], True)
    >>> out["completeness_error"] <= 0.01  # doctest: +SKIP
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

    def score(inputs: dict) -> torch.Tensor:
        scores = ce({**inputs, **{k: v for k, v in features.items() if not isinstance(v, torch.Tensor)}})[
            "scores"
        ]
        if activation is not None:
            scores = activation(scores)
        return scores[:, -1]  # (batch,): a multi-label head's last column is "relevant"

    score_kind = "logit"
    if activation is not None:
        score_kind = f"{type(activation).__name__}(logit), as CrossEncoderReranker.score_pairs reports it"
    steps = (n_steps, max_steps, baseline)
    result = _explained(score, hf, ce.tokenizer, enc, steps, (query, document) if attention else None)
    result.update(model_kind=CROSS_ENCODER.name, score_kind=score_kind)
    if getattr(ce[-1], "term_match", False):
        result["term_match"] = _term_match_report(ce, enc, result["tokens"])
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
    return result | ({"window": window} if window is not None else {})


def explain_cls_lr(
    ranker,
    query: str,
    document: str,
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
    attention: bool = True,
    title: str = "",
) -> dict:
    """Integrated Gradients of a CLS-LR ranker's logit (its ``score_pairs``); ``title`` unused (it reads the start).

    >>> from ctxir.encoders.models import load_transformer
    >>> from ctxir.rerank import ClsLrRanker, cls_features
    >>> name = "sentence-transformers/all-MiniLM-L6-v2"
    >>> tokenizer, body = load_transformer(name, "cpu", attentions=False)  # doctest: +SKIP
    >>> pairs = [("river otters", "Otters dig dens in the river bank."), ("river otters", "Banks approve loans.")]
    >>> ranker = ClsLrRanker.fit(name, cls_features(body, tokenizer, pairs), [1, 0], device="cpu")  # doctest: +SKIP
    >>> out = explain_cls_lr(ranker, *pairs[0])  # doctest: +SKIP
    >>> round(out["score"], 4) == round(float(ranker.score_pairs(pairs[0][0], [pairs[0][1]])[0]), 4)  # doctest: +SKIP
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
    )  # as cls_features tokenises

    def score(inputs: dict) -> torch.Tensor:
        out = body(**inputs, output_hidden_states=ranker.layer != -1)
        return ranker.score_tensor(inputs, out)  # (batch,): coef · features + b, as score_pairs reports it

    steps = (n_steps, max_steps, baseline)
    result = _explained(score, body, ranker.tokenizer, enc, steps, (query, document) if attention else None)
    return result | {
        "model_kind": CLS_LR.name,
        "score_kind": "logit coef·CLS + b, as ClsLrRanker.score_pairs reports it",
    }


def _explained(score, body, tokenizer, enc: dict, steps: tuple, pair: tuple[str, str] | None) -> dict:
    """``pair_integrated_gradients`` over ``body``'s word embeddings, with [CLS]'s attention over ``pair`` if given."""
    result = pair_integrated_gradients(score, body.get_input_embeddings(), tokenizer, enc, *steps)
    return result | (attention_report(*pair, body, tokenizer, result["tokens"]) if pair else {})


def best_window(model, query: str, document: str, title: str = "") -> tuple[str, dict | None]:
    """(the window a window-reading re-ranker scored ``document`` by, which window) — ``(document, None)`` otherwise."""
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
    """A term-match head's exact share per query token: the part of the score that reads token ids."""
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


# kind name → (model, query, document, n_steps=, max_steps=, baseline=, attention=, title=) → dict
EXPLAINERS: dict[str, Callable[..., dict]] = {
    CROSS_ENCODER.name: explain_cross_encoder,
    CLS_LR.name: explain_cls_lr,
    STS_CROSS_ENCODER.name: explain_cross_encoder,
}


def explainer_for(kind: RerankerKind) -> Callable[..., dict]:
    """The explainer of ``kind``: its own ``explain``, else the one in ``EXPLAINERS``.

    >>> explainer_for(CROSS_ENCODER) is explain_cross_encoder
    True
    """
    explainer = kind.explain or EXPLAINERS.get(kind.name)
    if explainer is None:
        raise CtxirError(
            f"the {kind.label} re-ranker has no explainer: give its registry entry one (RerankerKind(explain=...)), "
            f"or add it to ctxir.explain.rerankers.EXPLAINERS[{kind.name!r}]"
        )
    return explainer
