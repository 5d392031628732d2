"""The attention [CLS] pays to every token of ``[CLS] query [SEP] document [SEP]``, per layer: ``cls_attention``."""

from __future__ import annotations

import contextlib
import threading

from ctxir.encoders.internals import inspect_text
from ctxir.explain.integrated_gradients import check_pair_text
from ctxir.types import CtxirError

_ATTENTION_LOCK = threading.Lock()


def cls_attention(query: str, document: str, model, tokenizer=None) -> dict:
    """Attention paid by [CLS] to every token of ``[CLS] query [SEP] document [SEP]``: ``tokens`` and
    ``attention`` (layers, tokens), averaged over heads, each row summing to 1.

    model: a name or a loaded transformers model with its ``tokenizer`` (switched to eager attention for the pass).

    >>> name = "sentence-transformers/all-MiniLM-L6-v2"
    >>> out = cls_attention("river otters", "Otters dig dens.", name)  # doctest: +SKIP
    >>> len(out["attention"]), [round(sum(row), 4) for row in out["attention"]][:2]  # doctest: +SKIP
    (6, [1.0, 1.0])
    """

    query, document = check_pair_text(query, "query"), check_pair_text(document, "document")
    with _eager_attention(model):
        internals = inspect_text(query, document, model=model, tokenizer=tokenizer)
    attention = internals.attentions[:, :, 0, :].mean(axis=1)  # (layers, tokens)
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


def attention_report(query: str, document: str, model, tokenizer, tokens: list[str]) -> dict:
    """``cls_attention`` aligned with the scored ``tokens``, or why it is not shown."""
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
