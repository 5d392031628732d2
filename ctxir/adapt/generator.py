"""A small query generator (doc2query) over the packaged MiniLM: GPL's first step, trainable on this CPU.

GPL generates its pseudo-queries with a T5 model trained on MS MARCO; none is available offline. This one is a
BERT2BERT encoder–decoder (Rothe et al. 2020) warm-started from the bi-encoder's own MiniLM on both sides: the encoder
is MiniLM as it is (frozen); the decoder is MiniLM read left to right, its cross-attention started as a copy of each
layer's self-attention, its output layer tied to the word embeddings. Only LoRA adapters on the decoder's attention
and the output head's transform are trained, so what is saved is small (``ADAPTER_FILE``, under 2 MB) and everything
else is rebuilt from the packaged MiniLM, offline.

``build_generator(base)`` → (model, tokenizer), untrained; ``load_generator(folder)`` → the trained one;
``generate_queries(model, tokenizer, texts, per_text, ...)`` → ``per_text`` queries for each text.
``training/train_query_generator.py`` trains and saves it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxir.types import CtxirError

GENERATOR_CONFIG = "query_generator.json"
# the decoder's attention (self and cross; query, key, value, output) in every layer; the encoder is left as it is
LORA_TARGETS = (
    r"decoder\.bert\.encoder\.layer\.\d+\.(attention|crossattention)\.(self\.(query|key|value)|output\.dense)"
)
# the LM head's transform (dense + LayerNorm, (384, 384)): MiniLM ships without the MLM head, so it is new
SAVED_MODULES = ["transform"]
MAX_SOURCE_TOKENS = 192  # a SQuAD paragraph or an abstract's first part: a query is about what comes first
MAX_QUERY_TOKENS = 32


def build_generator(base: str | None = None, lora_rank: int = 8, lora_alpha: int = 16):
    """The untrained generator over ``base`` (a BERT folder; default the packaged MiniLM): (PeftModel, tokenizer).
    Deterministic: every weight not in MiniLM is set here, not drawn, so a saved adapter always finds the same base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertLMHeadModel,
        BertModel,
        EncoderDecoderModel,
        logging,
    )

    from ctxir.encoders.models import DEFAULT_BI_ENCODER, resolve_model

    path = resolve_model(base or DEFAULT_BI_ENCODER)
    logging.set_verbosity_error()  # its load report lists the new weights set below as "missing": expected
    tokenizer = AutoTokenizer.from_pretrained(path)
    encoder = BertModel.from_pretrained(path, add_pooling_layer=False)
    config = BertConfig.from_pretrained(path, is_decoder=True, add_cross_attention=True)
    decoder = BertLMHeadModel.from_pretrained(path, config=config)
    with torch.no_grad():
        for layer in decoder.bert.encoder.layer:
            # attending to the source as to its own prefix: a start that already reads it, instead of noise
            layer.crossattention.load_state_dict(layer.attention.state_dict())
        transform = decoder.cls.predictions.transform
        transform.dense.weight.copy_(torch.eye(transform.dense.weight.shape[0]))
        transform.dense.bias.zero_()
        transform.LayerNorm.weight.fill_(1.0)
        transform.LayerNorm.bias.zero_()
        decoder.cls.predictions.bias.zero_()
    model = EncoderDecoderModel(encoder=encoder, decoder=decoder)
    model.config.decoder_start_token_id = tokenizer.cls_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.sep_token_id
    model.generation_config.decoder_start_token_id = tokenizer.cls_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.sep_token_id
    for p in model.parameters():
        p.requires_grad_(False)
    lora = LoraConfig(
        r=lora_rank, lora_alpha=lora_alpha, target_modules=LORA_TARGETS, modules_to_save=SAVED_MODULES
    )
    return get_peft_model(model, lora), tokenizer


def save_generator(model, folder: str | Path, record: dict) -> None:
    """The adapter and ``GENERATOR_CONFIG`` (how it was built and trained) into ``folder``."""
    folder = Path(folder)
    model.save_pretrained(folder)
    (folder / GENERATOR_CONFIG).write_text(json.dumps(record, indent=2) + "\n")


def load_generator(folder: str | Path):
    """A generator ``save_generator`` wrote: (model in eval mode, tokenizer). Offline: its base is the packaged
    MiniLM (or the folder ``query_generator.json`` names)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(folder)
    config_file = folder / GENERATOR_CONFIG
    if not config_file.is_file():
        raise CtxirError(
            f"--generator {str(folder)!r} has no {GENERATOR_CONFIG}: pass the folder "
            "training/train_query_generator.py wrote"
        )
    record = json.loads(config_file.read_text())
    model, tokenizer = build_generator(record.get("base"), record["lora_rank"], record["lora_alpha"])
    result = set_peft_model_state_dict(model, load_file(folder / "adapter_model.safetensors"))
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k or "transform" in k]
    if missing:
        raise CtxirError(f"--generator {str(folder)!r}: its adapter does not fit its base ({missing[:3]})")
    model.eval()
    return model, tokenizer


def generate_queries(
    model,
    tokenizer,
    texts: Sequence[str],
    per_text: int = 1,
    batch_size: int = 16,
    seed: int = 42,
    top_p: float = 0.95,
    show: Callable | None = None,
) -> list[list[str]]:
    """``per_text`` queries for each of ``texts``, sampled with nucleus sampling (GPL's top-p 0.95, so one document
    gets different queries); seeded, so the same texts give the same queries. ``show`` wraps the batches (a bar)."""
    import torch

    torch.manual_seed(seed)
    batches = range(0, len(texts), batch_size)
    out: list[list[str]] = []
    device = next(model.parameters()).device
    for start in show(batches) if show else batches:
        chunk = list(texts[start : start + batch_size])
        enc = tokenizer(
            chunk, truncation=True, max_length=MAX_SOURCE_TOKENS, padding=True, return_tensors="pt"
        ).to(device)
        with torch.inference_mode():
            ids = model.generate(
                **enc,
                do_sample=True,
                top_p=top_p,
                top_k=0,
                max_new_tokens=MAX_QUERY_TOKENS,
                num_return_sequences=per_text,
            )  # (len(chunk) * per_text, tokens)
        decoded = [" ".join(t.split()) for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
        out += [decoded[i * per_text : (i + 1) * per_text] for i in range(len(chunk))]
    return out
