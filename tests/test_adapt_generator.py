"""The query generator (``ctxir.adapt.generator``) on a tiny BERT: it trains, saves small, loads back the same, and
``ctxir adapt --query-kinds generated --generator DIR`` adapts on its queries; bad combinations get their message."""

from __future__ import annotations

import json

import pytest

from ctxir import testing
from ctxir.adapt import AdaptArgs, run
from ctxir.adapt.generator import (
    GENERATOR_CONFIG,
    build_generator,
    generate_queries,
    load_generator,
    save_generator,
)
from ctxir.adapt.queries import pseudo_queries
from ctxir.types import CtxirError

PASSAGES = {
    "otters": "otters dig dens in the river bank and eat fish at night",
    "bread": "bakers mix flour and water into dough and bake bread in a hot oven",
}
WANTED = {"otters": "where do otters live", "bread": "how is bread made"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny generator trained until it writes each passage's query, saved; (its folder, its base)."""
    import torch

    words = sorted({w for t in [*PASSAGES.values(), *WANTED.values()] for w in t.split()})
    base = testing.save_tiny_bert(
        tmp_path_factory.mktemp("tiny-base"), ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    )
    torch.manual_seed(0)
    model, tokenizer = build_generator(str(base), lora_rank=4, lora_alpha=8)
    batch = tokenizer(list(PASSAGES.values()), return_tensors="pt", padding=True)
    labels = tokenizer([WANTED[k] for k in PASSAGES], return_tensors="pt", padding=True)["input_ids"]
    labels[labels == tokenizer.pad_token_id] = -100
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    model.train()
    for _ in range(60):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    folder = tmp_path_factory.mktemp("generator")
    save_generator(model, folder, {"base": str(base), "lora_rank": 4, "lora_alpha": 8})
    return folder, base


def test_the_trained_generator_writes_its_queries_and_loads_back_the_same(trained):
    folder, base = trained
    model, tokenizer = load_generator(folder)
    texts = list(PASSAGES.values())
    # nucleus 0.01: the most likely query (a tiny model's distribution is too flat for GPL's 0.95 to land on it)
    got = generate_queries(model, tokenizer, texts, per_text=2, seed=0, top_p=0.01)
    assert got == [[WANTED["otters"]] * 2, [WANTED["bread"]] * 2]
    sampled = generate_queries(model, tokenizer, texts, per_text=2, seed=0)
    assert [len(g) for g in sampled] == [2, 2]
    assert generate_queries(model, tokenizer, texts, per_text=2, seed=0) == sampled  # seeded
    untrained, _ = build_generator(str(base), lora_rank=4, lora_alpha=8)
    untrained.eval()
    assert generate_queries(untrained, tokenizer, texts, per_text=1, seed=0, top_p=0.01) != [
        g[:1] for g in got
    ]
    # small: only the adapter and the head's transform are saved, the rest is rebuilt from the base
    assert (folder / "adapter_model.safetensors").stat().st_size < 200_000


def test_a_folder_without_its_config_is_refused(tmp_path):
    with pytest.raises(CtxirError, match=f"has no {GENERATOR_CONFIG}.*train_query_generator.py"):
        load_generator(tmp_path)


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


def test_adapt_trains_on_generated_queries(trained, tmp_path, monkeypatch):
    folder, base = trained
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path / "cache"))
    args = AdaptArgs(
        corpus=str(_corpus(tmp_path)), output=str(tmp_path / "adapted"), model=str(base), teacher="none",
        query_kinds="generated", generator=str(folder), max_queries=10, max_steps=2, batch_size=4,
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
    assert f"written by the query generator `{folder}`" in card and "cut from" not in card
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
