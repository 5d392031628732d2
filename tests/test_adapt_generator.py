"""The experimental query generator (``ctxir.adapt.generator``): a sequence-to-sequence doc2query model (a tiny T5)
writes seeded queries; ``ctxir adapt --query-kinds generated --generator DIR`` adapts on them; bad combinations and
folders get their message."""

from __future__ import annotations

import json

import pytest
import torch

from ctxir.adapt import AdaptArgs, run
from ctxir.adapt.generator import generate_queries, load_generator
from ctxir.adapt.queries import pseudo_queries
from ctxir.types import CtxirError
from tests import tiny_models

PASSAGES = {
    "otters": "otters dig dens in the river bank and eat fish at night",
    "bread": "bakers mix flour and water into dough and bake bread in a hot oven",
}
WANTED = {"otters": "where do otters live", "bread": "how is bread made"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    words = sorted({w for t in [*PASSAGES.values(), *WANTED.values()] for w in t.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    return tiny_models.save_tiny_bert(tmp_path_factory.mktemp("tiny-base"), vocab)


@pytest.fixture(scope="module")
def seq2seq(base, tmp_path_factory):
    """A tiny T5 (a doc2query model's architecture, as ``hf download`` leaves one: config, safetensors, tokenizer)
    trained until it writes each passage's query: its folder."""
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    model = T5ForConditionalGeneration(config)
    source = tokenizer(list(PASSAGES.values()), padding=True, return_tensors="pt")
    labels = tokenizer([WANTED[k] for k in PASSAGES], padding=True, return_tensors="pt")["input_ids"][
        :, 1:
    ].contiguous()
    labels[labels == tokenizer.pad_token_id] = -100  # [CLS] off; [SEP] is T5's end of sequence
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(60):
        model(**source, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    folder = tmp_path_factory.mktemp("seq2seq")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_sequence_to_sequence_generator_writes_its_queries_seeded_leaving_the_random_state(seq2seq):
    model, tokenizer = load_generator(seq2seq)
    assert model.config.is_encoder_decoder
    texts = list(PASSAGES.values())
    got = generate_queries(model, tokenizer, texts, per_text=2, seed=0, top_p=1e-9)
    assert got == [[WANTED["otters"]] * 2, [WANTED["bread"]] * 2]
    state = torch.get_rng_state()
    sampled = generate_queries(model, tokenizer, texts, per_text=3, seed=0)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's draws are not moved
    assert [len(g) for g in sampled] == [3, 3]
    assert generate_queries(model, tokenizer, texts, per_text=3, seed=0) == sampled
    assert generate_queries(model, tokenizer, texts, per_text=3, seed=1) != sampled


def test_a_folder_that_is_no_generator_is_refused(tmp_path, base, seq2seq):
    valid = "ass a sequence-to-sequence doc2query model"  # "Pass" after a sentence, "pass" after a colon
    with pytest.raises(CtxirError, match=f"has no config.json.*P{valid}"):
        load_generator(tmp_path)
    with pytest.raises(CtxirError, match=f"is a 'bert' model, not a query generator: p{valid}"):
        load_generator(base)
    unweighted = tmp_path / "unweighted"  # a copy without its weights (a pickled Hub repo: test below)
    unweighted.mkdir()
    for f in seq2seq.iterdir():
        if f.suffix != ".safetensors":
            (unweighted / f.name).write_bytes(f.read_bytes())
    with pytest.raises(CtxirError, match=r"has a config but no weights.*sequence-to-sequence doc2query"):
        load_generator(unweighted)
    (unweighted / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(CtxirError, match=r"holds pickle file.*ctxir loads safetensors only"):
        load_generator(unweighted)


def test_generated_queries_take_the_whole_document_as_positive_and_drop_too_short_ones():
    corpus = {d: {"title": "", "text": t} for d, t in PASSAGES.items()}
    found = pseudo_queries(
        corpus, 1, ["generated"], generated={"otters": ["where do otters live"], "bread": ["bread"]}
    )
    assert [(q.kind, q.text, q.doc_id, q.positive) for q in found] == [
        ("generated", "where do otters live", "otters", PASSAGES["otters"])
    ]
    with pytest.raises(CtxirError, match="needs a query generator: pass --generator"):
        pseudo_queries(corpus, 1, ["generated"])


def _corpus(tmp_path):
    rows = [
        {"_id": f"{k}{i}", "title": "", "text": f"{t} {' '.join(['and more'] * i)}"}
        for k, t in PASSAGES.items()
        for i in range(12)
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_hub_doc2query_model_loads_offline_from_the_cache_and_pickled_ones_are_refused(
    seq2seq, tmp_path, monkeypatch
):
    from huggingface_hub import constants

    from ctxir.encoders.models import resolve_model
    from tests import tiny_models

    cache = tmp_path / "hub"
    tiny_models.lay_into_hf_cache(seq2seq, cache, "test-org/tiny-doc2query")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for f in seq2seq.iterdir():
        if f.suffix != ".safetensors":
            (pickled / f.name).write_bytes(f.read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    tiny_models.lay_into_hf_cache(pickled, cache, "test-org/pickled-doc2query", revision="1" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    resolve_model.cache_clear()
    try:
        model, tokenizer = load_generator("test-org/tiny-doc2query")
        got = generate_queries(model, tokenizer, [PASSAGES["otters"]], seed=0, top_p=1e-9)
        assert got == [[WANTED["otters"]]]
        with pytest.raises(
            CtxirError, match=r"has no \.safetensors weights \(ctxir never loads pickled ones\)"
        ):
            load_generator("test-org/pickled-doc2query")
        with pytest.raises(
            CtxirError, match=r"not in the local Hugging Face cache.*sequence-to-sequence doc2query"
        ):
            load_generator("test-org/no-such-generator")
    finally:
        resolve_model.cache_clear()


def test_adapt_trains_on_generated_queries(seq2seq, base, tmp_path, monkeypatch):
    trained = seq2seq
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path / "cache"))
    args = AdaptArgs(
        corpus=str(_corpus(tmp_path)), output=str(tmp_path / "adapted"), model=str(base),
        query_kinds="generated", generator=str(trained), max_queries=10, max_steps=2, batch_size=4,
        device="cpu", quiet=True, torch_threads=1, max_seq_length=16, keep_work=True,
    )  # fmt: skip
    record = run(args)
    # one query for each of 10 documents drawn; a sampled one of under 3 words is dropped
    assert 5 <= record["queries"]["generated"] == record["queries"]["total"] <= 10
    corpus = {r["_id"]: r["text"].strip() for r in map(json.loads, _corpus(tmp_path).open())}
    rows = [json.loads(line) for line in (tmp_path / "adapted" / "work" / "queries.jsonl").open()]
    assert len(rows) == record["queries"]["total"]
    assert all(r["kind"] == "generated" and r["positive"] == corpus[r["doc_id"]] for r in rows)
    assert record["query_examples"]["generated"]
    card = " ".join((tmp_path / "adapted" / "README.md").read_text().split())
    assert f"written by the query generator `{trained}`" in card and "cut from" not in card
    assert (tmp_path / "adapted" / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"query_kinds": "title,generated"}, "asks for 'generated' but --generator is empty"),
        ({"generator": "some/folder"}, "has no 'generated': add it"),
    ],
)
def test_generated_and_generator_go_together(tmp_path, changes, message):
    args = AdaptArgs(corpus=str(_corpus(tmp_path)), output=str(tmp_path / "out"), **changes)
    with pytest.raises(CtxirError, match=message):
        run(args)
    assert not (tmp_path / "out").exists()
