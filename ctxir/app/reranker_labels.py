"""The app's words for each re-ranker kind: table headers, chart legends, its flag and environment variable.

The library's registry (``ctxir.rerank.registry.RERANKERS``) says what a kind does; how the app names it lives here.
A kind registered with no label here still shows, under its registry ``label``.

>>> from ctxir.rerank.registry import CLS_LR, STS_CROSS_ENCODER
>>> short_name(CLS_LR), rank_header(CLS_LR), pair_legend(STS_CROSS_ENCODER)
('LR', 'LR rank', 'STS similarity score')
>>> setting(STS_CROSS_ENCODER), flag(STS_CROSS_ENCODER), env(STS_CROSS_ENCODER)
('sts_cross_encoder', '--sts-cross-encoder', 'CTXIR_STS_CROSS_ENCODER')
"""

from __future__ import annotations

from ctxir.rerank.registry import CLS_LR, CROSS_ENCODER, STS_CROSS_ENCODER, RerankerKind

# kind name → its short name in a table's headers ("CE" → "CE rank", "CE P(rel)"), so every score column fits
# beside the document on a laptop
SHORT_NAMES: dict[str, str] = {CROSS_ENCODER.name: "CE", CLS_LR.name: "LR", STS_CROSS_ENCODER.name: "STS"}


def register_short_name(kind: str, short: str) -> str:
    """The app's short name for re-rankers of ``kind`` (a name of ``ctxir.rerank.registry.RERANKERS``) from now on."""
    SHORT_NAMES[kind] = short
    return short


def short_name(kind: RerankerKind) -> str:
    """Its short name in table headers: the one registered here, else its registry label."""
    return SHORT_NAMES.get(kind.name) or kind.label


def rank_header(kind: RerankerKind) -> str:
    return f"{short_name(kind)} rank"


def pair_legend(kind: RerankerKind) -> str:
    """What a chart calls its pair scores: "cross-encoder score", "CLS-LR probability"."""
    return f"{kind.label} {kind.pair_value}"


def setting(kind: RerankerKind) -> str:
    """Its model setting: the ``AppConfig`` field (where it has one) and app.py's flag, e.g. ``cls_lr``."""
    return kind.key


def flag(kind: RerankerKind) -> str:
    """app.py's flag for its model, e.g. ``--cls-lr``."""
    return "--" + setting(kind).replace("_", "-")


def env(kind: RerankerKind) -> str:
    """The environment variable that sets its model, e.g. ``CTXIR_CLS_LR``."""
    return "CTXIR_" + setting(kind).upper()


def unavailable_hint(kind: RerankerKind) -> str:
    """How to give the app one (said after why it is not available)."""
    return (
        f"To provide one, {kind.how_to_get} and restart the app with `{flag(kind)} <its output folder>` (or set "
        f"{env(kind)}), or pass a Hub id that is in the local cache"
    )
