"""Query generators (doc2query, GPL's first step): MiniLM read as a prefix language model (UniLM's seq2seq mask: the
passage attends both ways, each query token to the passage and the query's earlier ones; training/
train_query_generator.py trains it), or a sequence-to-sequence doc2query model (``SEQ2SEQ_EXAMPLE``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ctxir.types import CtxirError

GENERATOR_CONFIG = "query_generator.json"
WEIGHTS_FILE = "model.safetensors"
MAX_SOURCE_TOKENS = 192  # a SQuAD paragraph or an abstract's first part: a query is about what comes first
MAX_QUERY_TOKENS = 32
# docTTTTTquery's T5-base (MS MARCO), safetensors on main (GPL's BeIR/query-gen-msmarco-t5-base-v1 has none there)
SEQ2SEQ_EXAMPLE = "macavaney/doc2query-t5-base-msmarco"
PASSAGE, QUERY = 0, 1  # token type ids: BERT's two segments


class QueryGenerator(torch.nn.Module):
    """MiniLM (``bert``, a decoder so it can cache) + an output head: ``transform`` (dense, GELU, LayerNorm: MiniLM
    ships without its MLM head) and ``bias``, scored against the frozen word embeddings (tied)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert
        hidden = bert.config.hidden_size
        self.transform = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.GELU(), torch.nn.LayerNorm(hidden)
        )
        with torch.no_grad():  # identity start: a token's top-layer state already resembles its embedding
            self.transform[0].weight.copy_(torch.eye(hidden))
            self.transform[0].bias.zero_()
        self.bias = torch.nn.Parameter(torch.zeros(bert.config.vocab_size))
        bert.embeddings.word_embeddings.weight.requires_grad_(False)

    @classmethod
    def build(cls, base: str | None = None) -> tuple[QueryGenerator, object]:
        """The untrained generator over ``base`` (a BERT folder or id; default the packaged MiniLM), and its tokenizer."""
        from transformers import AutoTokenizer, BertConfig, BertModel, logging

        from ctxir.encoders.models import DEFAULT_BI_ENCODER, resolve_model

        path = resolve_model(base or DEFAULT_BI_ENCODER)
        logging.set_verbosity_error()  # its load report lists the pooler it leaves out: expected
        config = BertConfig.from_pretrained(path, is_decoder=True)
        bert = BertModel.from_pretrained(path, config=config, add_pooling_layer=False)
        return cls(bert), AutoTokenizer.from_pretrained(path)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, hidden) → (batch, tokens, vocabulary)."""
        return self.transform(hidden) @ self.bert.embeddings.word_embeddings.weight.T + self.bias

    def forward(self, input_ids, attention_mask, token_type_ids, labels=None):
        """``attention_mask``: (batch, 1, tokens, tokens) bool, ``prefix_lm_batch``'s; ``labels``: the next token at
        each position (-100 where none is predicted)."""
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        logits = self.logits(hidden)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return out


def prefix_lm_batch(tokenizer, sources: Sequence[str], queries: Sequence[str]) -> dict[str, torch.Tensor]:
    """[CLS] passage [SEP] query [SEP], right-padded; the seq2seq mask; labels: at the passage's [SEP] the query's
    first token, at each query token the next (its last: [SEP])."""
    src = tokenizer(list(sources), truncation=True, max_length=MAX_SOURCE_TOKENS)["input_ids"]
    tgt = tokenizer(list(queries), truncation=True, max_length=MAX_QUERY_TOKENS, add_special_tokens=False)[
        "input_ids"
    ]
    length = max(len(s) + len(t) + 1 for s, t in zip(src, tgt, strict=True))
    ids = torch.full((len(src), length), tokenizer.pad_token_id)
    types = torch.full((len(src), length), QUERY)
    mask = torch.zeros(len(src), 1, length, length, dtype=torch.bool)
    labels = torch.full((len(src), length), -100)
    for row, (s, t) in enumerate(zip(src, tgt, strict=True)):
        t = [*t, tokenizer.sep_token_id]
        n, m = len(s), len(t)
        ids[row, : n + m] = torch.tensor(s + t)
        types[row, :n] = PASSAGE
        mask[row, 0, : n + m, :n] = True  # every token reads the whole passage
        # the query, left to right
        mask[row, 0, n : n + m, n : n + m] = torch.ones(m, m, dtype=torch.bool).tril()
        mask[row, 0, n + m :, 0] = True  # padding reads [CLS]: no row of the softmax is empty
        labels[row, n - 1 : n - 1 + m] = torch.tensor(t)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels}


def save_generator(model: QueryGenerator, folder: str | Path, record: dict) -> None:
    """The weights (not the word embeddings, which are the base's) and ``GENERATOR_CONFIG`` into ``folder``."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if "word_embeddings" not in k}
    save_file(state, folder / WEIGHTS_FILE)
    (folder / GENERATOR_CONFIG).write_text(json.dumps(record, indent=2) + "\n")


def load_generator(source: str | Path) -> tuple[torch.nn.Module, object]:
    """(model in eval mode, tokenizer) for ``source``: a folder ``save_generator`` wrote, or a sequence-to-sequence
    doc2query model (Hub id or folder). Safetensors weights only; no code from the model is run."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    from ctxir.encoders.models import resolve_model

    source = str(source)
    folder = Path(source).expanduser()
    config_file = folder / GENERATOR_CONFIG
    if not config_file.is_file():  # a Hub or local sequence-to-sequence model (T5's doc2query and the like)
        valid = (
            f"pass the folder training/train_query_generator.py wrote, or a sequence-to-sequence doc2query model "
            f"(e.g. {SEQ2SEQ_EXAMPLE!r}, docTTTTTquery's T5-base)"
        )
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
    if not (folder / WEIGHTS_FILE).is_file():
        raise CtxirError(
            f"--generator {str(source)!r} has {GENERATOR_CONFIG} but no {WEIGHTS_FILE}: its training was stopped "
            "before it saved; rerun training/train_query_generator.py (--resume last goes on from its checkpoint)"
        )
    model, tokenizer = QueryGenerator.build(json.loads(config_file.read_text()).get("base"))
    found = model.load_state_dict(load_file(folder / WEIGHTS_FILE), strict=False)
    wrong = found.unexpected_keys + [k for k in found.missing_keys if "word_embeddings" not in k]
    if wrong:
        raise CtxirError(f"--generator {str(source)!r}: its weights do not fit its base ({wrong[:3]})")
    return model.eval(), tokenizer


@torch.inference_mode()
def _sample(model: QueryGenerator, enc, per_text: int, top_p: float, generator, sep: int) -> list[list[int]]:
    """Token ids of ``per_text`` queries for each passage of ``enc``, each ending before its ``sep``."""
    from transformers import TopPLogitsWarper

    device = model.bias.device
    ids = enc["input_ids"].repeat_interleave(per_text, 0)  # (rows, n)
    pad = enc["attention_mask"].repeat_interleave(per_text, 0).bool()  # (rows, n)
    rows, n = ids.shape
    lengths = pad.sum(1)  # (rows,)
    ids, pad, lengths = ids.to(device), pad.to(device), lengths.to(device)
    mask = pad[:, None, None, :].expand(rows, 1, n, n)  # the passage reads itself both ways
    out = model.bert(
        input_ids=ids, attention_mask=mask, token_type_ids=torch.full_like(ids, PASSAGE), use_cache=True
    )
    cache = out.past_key_values
    last = out.last_hidden_state[torch.arange(rows), lengths - 1]  # (rows, hidden): each passage's [SEP]
    warp = TopPLogitsWarper(top_p) if top_p < 1 else None
    keys = pad  # (rows, keys so far): which cached keys are real tokens
    written: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    for step in range(MAX_QUERY_TOKENS):
        scores = model.logits(last[:, None])[:, 0]  # (rows, vocabulary)
        if warp is not None:
            scores = warp(None, scores)
        # drawn on the CPU with one seeded generator: the same queries on any device
        token = torch.multinomial(scores.softmax(-1).float().cpu(), 1, generator=generator)[:, 0]  # (rows,)
        for row, t in enumerate(token.tolist()):
            done[row] = done[row] or t == sep
            if not done[row]:
                written[row].append(t)
        if all(done):
            break
        token = token.to(device)
        keys = torch.cat([keys, torch.ones(rows, 1, dtype=torch.bool, device=device)], 1)
        out = model.bert(
            input_ids=token[:, None],
            # (rows, 1, 1, keys): the real passage tokens, the query so far
            attention_mask=keys[:, None, None, :],
            token_type_ids=torch.full((rows, 1), QUERY, device=device),
            position_ids=(lengths + step)[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        cache, last = out.past_key_values, out.last_hidden_state[:, 0]
    return written


@torch.inference_mode()
def _sample_seq2seq(model, enc, per_text: int, top_p: float, generator) -> list[list[int]]:
    """``per_text`` seeded top-p samples per passage from a seq2seq model (GPL's settings)."""
    device = next(model.parameters()).device
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        out = model.generate(
            input_ids=enc["input_ids"].to(device),
            attention_mask=enc["attention_mask"].to(device),
            do_sample=True,
            top_p=top_p,
            top_k=25,  # GPL samples from the 25 likeliest tokens within top-p
            max_new_tokens=MAX_QUERY_TOKENS,
            num_return_sequences=per_text,
        )  # (passages × per_text, tokens)
    return out.cpu().tolist()


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
    """``per_text`` seeded, nucleus-sampled queries for each of ``texts``; ``show`` wraps the batches."""
    generator = torch.Generator().manual_seed(seed)
    batches = range(0, len(texts), batch_size)
    out: list[list[str]] = []
    for start in show(batches) if show else batches:
        chunk = list(texts[start : start + batch_size])
        enc = tokenizer(
            chunk, truncation=True, max_length=MAX_SOURCE_TOKENS, padding=True, return_tensors="pt"
        )
        if isinstance(model, QueryGenerator):
            written = _sample(model, enc, per_text, top_p, generator, tokenizer.sep_token_id)
        else:
            written = _sample_seq2seq(model, enc, per_text, top_p, generator)
        decoded = [" ".join(t.split()) for t in tokenizer.batch_decode(written, skip_special_tokens=True)]
        out += [decoded[i * per_text : (i + 1) * per_text] for i in range(len(chunk))]
    return out
