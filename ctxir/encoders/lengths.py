"""How many tokens a model reads per input: one rule (``max_length_for``) behind every ``max_length`` in ctxir."""

from __future__ import annotations

from ctxir.types import CtxirError

# position ids of these start after the padding index: pad_token_id + 1 fewer tokens
_OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "data2vec-text"})


def position_limit(config) -> int | None:
    """Most tokens a model's position embeddings hold; ``None`` without absolute positions."""
    positions = getattr(config, "max_position_embeddings", None)
    if not positions:
        return None
    if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
        positions -= (getattr(config, "pad_token_id", None) or 0) + 1
    return int(positions)


def max_length_for(
    requested: int | None, own: int | None = None, positions: int | None = None, *, name: str = "max_length"
) -> int | None:
    """Tokens per input: ``requested``, or the model's own ``own`` for None or 0; never beyond ``positions``."""
    if requested is not None and (
        isinstance(requested, bool) or not isinstance(requested, int) or requested < 0
    ):
        raise CtxirError(
            f"{name} must be a whole number of tokens ≥ 1, or 0 / None for the model's own limit; "
            f"got {requested!r}"
        )
    length = requested or (own if own and own < 10**9 else None)  # no limit of its own: 1e30
    if positions:
        length = min(length, positions) if length else positions
    return length


def set_max_length(model, requested: int | None, *, name: str = "max_length") -> int | None:
    """Apply ``max_length_for`` to a ``SentenceTransformer`` or ``CrossEncoder``: sets and returns its ``max_seq_length``."""
    config = getattr(getattr(model[0], "model", None), "config", None)
    length = max_length_for(requested, model.max_seq_length, position_limit(config), name=name)
    if length is not None:
        model.max_seq_length = length
    return length
