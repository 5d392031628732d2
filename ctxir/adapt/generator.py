"""The query generator (doc2query, GPL's first step): a sequence-to-sequence model such as ``SEQ2SEQ_EXAMPLE``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ctxir.types import CtxirError

MAX_SOURCE_TOKENS = 192  # a SQuAD paragraph or an abstract's first part: a query is about what comes first
MAX_QUERY_TOKENS = 32
# docTTTTTquery's T5-base (MS MARCO), safetensors on main (GPL's BeIR/query-gen-msmarco-t5-base-v1 has none there)
SEQ2SEQ_EXAMPLE = "macavaney/doc2query-t5-base-msmarco"


def load_generator(source: str | Path) -> tuple[torch.nn.Module, object]:
    """(model in eval mode, tokenizer) of a doc2query model (Hub id or folder), safetensors only."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    from ctxir.encoders.models import resolve_model

    source = str(source)
    valid = f"pass a sequence-to-sequence doc2query model (e.g. {SEQ2SEQ_EXAMPLE!r}, docTTTTTquery's T5-base)"
    try:
        path = resolve_model(source)
    except CtxirError as err:
        raise CtxirError(f"--generator {source!r}: {err}. {valid[0].upper()}{valid[1:]}") from err
    config = AutoConfig.from_pretrained(path)
    if not getattr(config, "is_encoder_decoder", False):
        raise CtxirError(
            f"--generator {source!r} is a {config.model_type!r} model, not a query generator: {valid}"
        )
    if not any(Path(path).glob("*.safetensors")):
        raise CtxirError(
            f"--generator {source!r} has no .safetensors weights (ctxir never loads pickled ones): convert "
            "them (`safetensors` / the Hub's convert Space) or pick a generator that ships them"
        )
    model = AutoModelForSeq2SeqLM.from_pretrained(path, use_safetensors=True)
    return model.eval(), AutoTokenizer.from_pretrained(path)


@torch.inference_mode()
def generate_queries(
    model: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    per_text: int = 1,
    batch_size: int = 16,
    seed: int = 42,
    top_p: float = 0.95,
    show: Callable | None = None,
) -> list[list[str]]:
    """``per_text`` seeded top-p samples (GPL's) per text; torch's random state is left as it was."""
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    batches = range(0, len(texts), batch_size)
    out: list[list[str]] = []
    for start in show(batches) if show else batches:
        chunk = list(texts[start : start + batch_size])
        enc = tokenizer(
            chunk, truncation=True, max_length=MAX_SOURCE_TOKENS, padding=True, return_tensors="pt"
        )
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
            written = model.generate(
                **{k: enc[k].to(device) for k in ("input_ids", "attention_mask")},
                do_sample=True,
                top_p=top_p,
                top_k=25,  # GPL samples from the 25 likeliest tokens within top-p
                max_new_tokens=MAX_QUERY_TOKENS,
                num_return_sequences=per_text,
            )  # (passages × per_text, tokens)
        decoded = [
            " ".join(t.split()) for t in tokenizer.batch_decode(written.cpu(), skip_special_tokens=True)
        ]
        out += [decoded[i * per_text : (i + 1) * per_text] for i in range(len(chunk))]
    return out
