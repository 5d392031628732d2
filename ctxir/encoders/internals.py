"""One accessor for what a forward pass shows (tokens, hidden states per layer, attentions); figures take its result."""

from __future__ import annotations

import numpy as np
import torch

from ctxir.checks import check_text
from ctxir.encoders.models import DEFAULT_BI_ENCODER, load_transformer
from ctxir.types import CtxirError, Internals

MAX_TOKENS = 512


@torch.no_grad()
def inspect_text(
    text: str,
    text_pair: str | None = None,
    model=DEFAULT_BI_ENCODER,
    tokenizer=None,
    max_tokens: int = MAX_TOKENS,
    device: str = "auto",
) -> Internals:
    """Run ``text`` (and ``text_pair`` as segment B) through the encoder once; longer than ``max_tokens`` is refused.

    ``model``: a name (loaded with eager attention) or a loaded ``PreTrainedModel`` with its ``tokenizer``.

    >>> shown = inspect_text("I sat on the river bank.", device="cpu")  # doctest: +SKIP
    >>> shown.tokens  # doctest: +SKIP
    ['[CLS]', 'i', 'sat', 'on', 'the', 'river', 'bank', '.', '[SEP]']
    >>> shown.hidden_states.shape, shown.attentions.shape  # doctest: +SKIP
    ((7, 9, 384), (6, 12, 9, 9))
    >>> word_vectors(shown, "bank").shape  # doctest: +SKIP
    (7, 384)
    """
    check_text(text, "text", hint="type a sentence to inspect")
    if text_pair is not None and not text_pair.strip():
        text_pair = None
    if isinstance(model, str):
        tokenizer, model = load_transformer(model, device, attentions=True)
    elif tokenizer is None:
        raise CtxirError("pass the tokenizer that belongs to the model you passed")
    enc = tokenizer(text, text_pair, return_tensors="pt", truncation=False)
    n_tokens = int(enc["input_ids"].shape[1])
    limit = min(max_tokens, getattr(model.config, "max_position_embeddings", max_tokens))
    if n_tokens > limit:
        raise CtxirError(
            f"input has {n_tokens} tokens but at most {limit} can be inspected: shorten the text"
        )
    out = model(**enc.to(next(model.parameters()).device), output_hidden_states=True, output_attentions=True)
    if not out.attentions:
        raise CtxirError("the model returned no attention weights: load it with attn_implementation='eager'")
    ids = enc["input_ids"][0].tolist()
    types = enc["token_type_ids"][0].tolist() if "token_type_ids" in enc else [0] * len(ids)
    sentence_b_start = (
        None if text_pair is None else next((i for i, s in enumerate(enc.sequence_ids(0)) if s == 1), None)
    )
    return Internals(  # hidden_states (layers+1, tokens, hidden), attentions (layers, heads, tokens, tokens)
        tokens=tokenizer.convert_ids_to_tokens(ids),
        token_ids=ids,
        token_type_ids=types,
        hidden_states=torch.stack(out.hidden_states)[:, 0].float().cpu().numpy(),
        attentions=torch.stack(out.attentions)[:, 0].float().cpu().numpy(),
        sentence_b_start=sentence_b_start,
    )


def word_positions(tokens: list[str], word: str) -> list[int]:
    """Indices of the word-pieces that spell ``word`` (first occurrence)."""
    word = check_text(word, "word", hint="type the word to follow across layers").lower()
    starts = [i for i, token in enumerate(tokens) if not token.startswith("##")]
    for start, end in zip(starts, [*starts[1:], len(tokens)], strict=True):
        if "".join(t.removeprefix("##") for t in tokens[start:end]).lower() == word:
            return list(range(start, end))
    raise CtxirError(
        f"word {word!r} is not in the tokenized text {' '.join(tokens)!r}: pick a word that appears"
    )


def word_vectors(internals: Internals, word: str) -> np.ndarray:
    """(layers+1, hidden): the mean of ``word``'s word-pieces at every layer."""
    return internals.hidden_states[:, word_positions(internals.tokens, word)].mean(axis=1)
