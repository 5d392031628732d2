"""How many tokens a model reads per input: one rule (``max_length_for``) behind every ``max_length`` /
``--max-length`` in ctxir, the position embeddings' limit it never passes (``position_limit``), and the rule applied
to a sentence-transformers model (``set_max_length``)."""

from __future__ import annotations

from ctxir.types import CtxirError

# Position ids of these start after the padding index, so max_position_embeddings (514 for roberta-base) holds
# pad_token_id + 1 fewer tokens (512).
_OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "data2vec-text"})
# A tokenizer without a limit of its own reports transformers' VERY_LARGE_INTEGER (1e30) as model_max_length.
_UNBOUNDED = 10**9


def position_limit(config) -> int | None:
    """Most tokens a model's position embeddings hold, from its config; ``None`` if it has no absolute positions.

    >>> from types import SimpleNamespace as Config
    >>> position_limit(Config(model_type="bert", max_position_embeddings=512))
    512
    >>> position_limit(Config(model_type="roberta", max_position_embeddings=514, pad_token_id=1))
    512
    """
    positions = getattr(config, "max_position_embeddings", None)
    if not positions:
        return None
    if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
        positions -= (getattr(config, "pad_token_id", None) or 0) + 1
    return int(positions)


def max_length_for(
    requested: int | None, own: int | None = None, positions: int | None = None, *, name: str = "max_length"
) -> int | None:
    """Tokens per input a model reads: THE rule behind every ``max_length`` / ``--max-length`` in ctxir.

    - ``None`` or 0: the model's own limit ``own`` (sentence-transformers' ``max_seq_length``, else the
      tokenizer's ``model_max_length``);
    - a number: that many tokens, shorter or longer than the model's own;
    - either way never beyond the position embeddings (``positions``, see ``position_limit``): a longer input
      would index past them.
    Returns ``None`` only when nothing is known (no request, no own limit, no positions): keep the model's setting.
    The scripts spell "the model's own" as ``--max-length 0``; ``set_max_length`` applies the rule to a model.

    >>> max_length_for(None, own=256, positions=512)
    256
    >>> max_length_for(128, own=256, positions=512), max_length_for(384, own=256, positions=512)
    (128, 384)
    >>> max_length_for(1024, own=256, positions=512)  # capped at the position embeddings
    512
    >>> max_length_for(0, own=10**30, positions=512)  # a tokenizer with no limit of its own reports 1e30
    512
    >>> max_length_for(-1, own=256, name="--max-length")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: --max-length must be a whole number of tokens ≥ 1, or 0 / None for the model's own limit; got -1
    """
    if requested is not None and (
        isinstance(requested, bool) or not isinstance(requested, int) or requested < 0
    ):
        raise CtxirError(
            f"{name} must be a whole number of tokens ≥ 1, or 0 / None for the model's own limit; "
            f"got {requested!r}"
        )
    length = requested or (own if own and own < _UNBOUNDED else None)
    if positions:
        length = min(length, positions) if length else positions
    return length


def set_max_length(model, requested: int | None, *, name: str = "max_length") -> int | None:
    """Apply ``max_length_for`` to a sentence-transformers ``SentenceTransformer`` or ``CrossEncoder``: sets and
    returns its ``max_seq_length`` (the model's own limit, the request, capped at its position embeddings)."""
    config = getattr(getattr(model[0], "model", None), "config", None)
    length = max_length_for(requested, model.max_seq_length, position_limit(config), name=name)
    if length is not None:
        model.max_seq_length = length
    return length
