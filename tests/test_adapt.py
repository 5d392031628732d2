"""``ctxir adapt`` end to end on a tiny corpus, a tiny BERT and a tiny teacher: the adapter loads everywhere a
bi-encoder does and changes its embeddings, caches are keyed by it, a rerun resumes, bad input gets its message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ctxir.adapt import MIN_DOCUMENTS, RECORD_FILE, AdaptArgs, run
from ctxir.adapt.cli import main
from ctxir.names import ADAPT_INCOMPLETE
from ctxir.types import CtxirError
from tests import tiny_models

TOPICS = {
    "otters": "Otters dig dens in the river bank. They eat fish and crabs at night. Their fur keeps them warm in cold water.",
    "banks": "Banks lend money to small firms. A loan is paid back with interest. Savers deposit money in the bank.",
    "bats": "Bats hunt moths over the river at night. They find insects by echoes. Many bats sleep in caves by day.",
    "python": "Python code is read by people more often than it is written. A snake is not a language. Tests check the code.",
    "bread": "Bakers mix flour and water into dough. The dough rises with yeast overnight. Bread bakes in a hot oven.",
    "comets": "Comets are balls of ice and dust. Near the sun they grow a bright tail. Some comets return every few years.",
}


def _corpus_rows(n_per_topic: int = 4) -> list[dict]:
    rows = []
    for topic, text in TOPICS.items():
        sentences = text.split(". ")
        for i in range(n_per_topic):
            body = ". ".join(sentences[i % 3 :] + sentences[: i % 3]).rstrip(".") + "."
            rows.append({"_id": f"{topic}{i}", "title": f"All about {topic} part {i}", "text": body})
    return rows


def _write_corpus(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(a tiny BERT over the corpus's words, a tiny cross-encoder teacher over it), saved like Hub downloads."""
    from sentence_transformers import CrossEncoder

    words = sorted(
        {w.strip(".,").lower() for r in _corpus_rows() for w in f"{r['title']} {r['text']}".split()}
    )
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *(str(d) for d in range(10)), *words]
    base = tiny_models.save_tiny_bert(tmp_path_factory.mktemp("tiny-base"), vocab)
    teacher = tmp_path_factory.mktemp("tiny-teacher")
    CrossEncoder(str(base), num_labels=1, device="cpu").save(str(teacher))
    return base, teacher


@pytest.fixture
def args(models, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path / "cache"))
    base, teacher = models
    corpus = _write_corpus(tmp_path / "corpus", _corpus_rows())

    def make(**changes) -> AdaptArgs:
        values = dict(
            corpus=str(corpus), output=str(tmp_path / "adapted"), model=str(base), teacher=str(teacher)
        )
        values |= dict(max_steps=4, batch_size=8, save_steps=2, learning_rate=1e-2, device="cpu", quiet=True)
        values |= dict(torch_threads=1, max_minutes=0.0, max_seq_length=16)
        return AdaptArgs(**(values | changes))

    return make


def _bi_encoder(name: str):
    from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache
    from ctxir.encoders.models import load_bi_encoder, resolve_model

    load_bi_encoder.cache_clear()  # the folder is rewritten between runs: load it as it is now
    resolve_model.cache_clear()
    return BiEncoder(name, device="cpu", cache=EmbeddingCache(Path(name).parent / "emb-cache"))


def test_adapt_end_to_end_loads_changes_embeddings_and_resumes(args, models, monkeypatch, capsys):
    from ctxir.adapt import train

    base, _ = models
    # 1. the budget runs out at step 2: that step is saved, the adapter written and usable, marked partial
    monkeypatch.setattr(train.BudgetCallback, "on_step_end", _budget_gone_after_step_1)
    first = run(args())
    monkeypatch.undo()
    out = Path(args().output)
    said = capsys.readouterr().out
    assert "reached: stopped at step 2 of 4" in said and "title:" in said and "sentence:" in said
    assert not first["complete"] and first["training"]["stopped_by_budget"]
    assert (out / "work" / "checkpoints" / "checkpoint-2").is_dir() and not (out / ADAPT_INCOMPLETE).exists()
    partial = _bi_encoder(str(out))

    # 2. the same command again continues from that checkpoint, reusing the queries, negatives and labels
    second = run(args())
    assert second["complete"] and second["training"]["resumed_from_step"] == 2
    assert second["training"]["steps_this_run"] == 2  # steps 3 and 4 only: not trained again from the start
    assert second["training"]["steps_done"] == 4 and "continuing the run" in capsys.readouterr().out
    assert not (out / "work").exists() and not (out / ADAPT_INCOMPLETE).exists()
    assert second["queries"]["total"] == first["queries"]["total"] > 0
    drawn = [k for k in ("title", "sentence", "span", "generated") if second["queries"].get(k)]
    # the default mix: no generated queries
    assert drawn == ["title", "sentence", "span"] == list(second["query_examples"])
    assert "documents themselves (titles, sentences and word spans)" in (out / "README.md").read_text()
    assert 0 < second["adapter_bytes"] <= 10 * 2**20
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    assert json.loads((out / RECORD_FILE).read_text())["teacher"].endswith(Path(args().teacher).name)

    # 3. it loads as a bi-encoder, changes the embeddings, and its cache key is its own
    texts = ["otters eat fish at night", "banks lend money to small firms"]
    adapted, plain = _bi_encoder(str(out)), _bi_encoder(str(base))
    assert not np.allclose(adapted.encode(texts), plain.encode(texts), atol=1e-4)
    keys = {adapted.cache_key(texts), plain.cache_key(texts), partial.cache_key(texts)}
    assert len(keys) == 3  # the base, the step-2 and the step-4 adapter never share cached vectors
    cached = adapted.encode_cached(texts)
    assert np.allclose(cached, adapted.encode(texts), atol=1e-5)

    # the app's inside views (`python app.py --bi-encoder DIR`) read the same adapted body
    from ctxir.encoders.models import load_transformer

    _, body = load_transformer(str(out), "cpu", attentions=False)
    weights = adapted.model[0].model.state_dict()  # the merged weights, which differ from the base's (above)
    assert all(np.allclose(v.numpy(), weights[k].numpy()) for k, v in body.state_dict().items())

    # 4. `ctxir evaluate --model DIR` takes it, in the hybrid too
    from ctxir.evaluation.evaluate import main as evaluate

    data = Path(args().corpus).parent
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "otters eat fish"}) + "\n")
    (data / "qrels").mkdir()
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\totters0\t1\n")
    result = data / "result.json"
    argv = ["--data", str(data), "--model", str(out), "--retriever", "hybrid", "--device", "cpu"]
    assert evaluate([*argv, "--output", str(result)]) == 0
    recorded = json.loads(result.read_text())
    assert (
        recorded["num_queries"] == 1
        and recorded["config"]["model"] == str(out)
        and "hybrid" in recorded["metrics"]
    )

    # 5. a folder a run is still writing (its marker) is refused, however complete its files look
    (out / ADAPT_INCOMPLETE).write_text("")
    with pytest.raises(CtxirError, match="is unfinished: `ctxir adapt` was writing it and did not complete"):
        _bi_encoder(str(out))
    (out / ADAPT_INCOMPLETE).unlink()

    # 6. a third run finds the adapter complete and does nothing
    assert run(args())["created"] == second["created"]


_on_step_end = __import__("ctxir.adapt.train").adapt.train.BudgetCallback.on_step_end


def _budget_gone_after_step_1(self, args, state, control, **kwargs):
    self.deadline = (
        float("-inf") if state.global_step >= 2 else None
    )  # the real check, with the time up at step 2
    return _on_step_end(self, args, state, control, **kwargs)


def test_budget_before_the_first_step_writes_no_adapter(args):
    out = Path(args().output)
    with pytest.raises(
        CtxirError, match=r"--max-minutes 1e-06 was reached before the first training step"
    ) as err:
        run(args(max_minutes=1e-6))
    assert "rerun the same command with a larger --max-minutes" in str(err.value)
    assert (out / ADAPT_INCOMPLETE).is_file() and not (out / "adapter_config.json").exists()
    with pytest.raises(CtxirError, match=r"has no config\.json, modules\.json, adapter_config\.json"):
        _bi_encoder(str(out))


@pytest.mark.parametrize(
    "rows, message",
    [
        ([], "contains no documents .* \\(adapting needs 20\\+ documents with text\\)"),
        (_corpus_rows()[:5], f"has 5 document\\(s\\) with text; adapting needs at least {MIN_DOCUMENTS}"),
        (
            [{"_id": f"e{i}", "title": "", "text": "  "} for i in range(30)],
            "corpus.jsonl line 1: .*add text or remove that line",
        ),
    ],
    ids=["empty", "too-small", "no-text"],
)
def test_bad_corpus_gets_a_message(args, tmp_path, rows, message, capsys):
    corpus = _write_corpus(tmp_path / "bad", rows)
    argv = [
        "--corpus",
        str(corpus),
        "--output",
        str(tmp_path / "never"),
        "--model",
        args().model,
        "--quiet",
        "true",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--corpus {str(corpus)!r}" in err and re.search(message, err), err
    assert not (tmp_path / "never").exists()


def test_documents_without_text_are_left_out_and_counted(capsys):
    from ctxir.adapt.cli import usable_corpus

    corpus = {r["_id"]: r for r in _corpus_rows()} | {f"e{i}": {"title": " ", "text": ""} for i in range(3)}
    assert len(usable_corpus(corpus, "c.jsonl")) == len(corpus) - 3
    assert "3 documents have no text and are left out (e.g. 'e0', 'e1', 'e2')" in capsys.readouterr().out
    with pytest.raises(
        CtxirError, match=r"'c.jsonl' has 19 document\(s\) with text; adapting needs at least 20"
    ):
        usable_corpus(dict(list(corpus.items())[:19]) | {"e9": {"title": "", "text": ""}}, "c.jsonl")


@pytest.mark.parametrize("teacher", ["hybrid", "complemnt"])
def test_a_teacher_that_is_no_teacher_is_refused_before_any_work(args, tmp_path, teacher):
    with pytest.raises(
        CtxirError, match=rf"--teacher '{teacher}' is neither 'complement', a cross-encoder folder"
    ):
        run(args(teacher=teacher))
    assert not (tmp_path / "adapted").exists()


def test_output_holding_other_files_is_refused(args, tmp_path):
    (tmp_path / "adapted").mkdir()
    (tmp_path / "adapted" / "notes.txt").write_text("mine")
    with pytest.raises(CtxirError, match="holds files that are not a ctxir adapt run"):
        run(args())
    assert (tmp_path / "adapted" / "notes.txt").read_text() == "mine"


def test_checkpoints_by_time_the_base_reading_length_and_a_changed_training_setting(args, tmp_path, capsys):
    out = tmp_path / "by-time"
    # checkpointed by time (every step here), whatever --save-steps says
    one = args(output=str(out), max_steps=2, save_steps=100, save_minutes=1e-9, keep_work=True)
    record = run(one)
    assert record["complete"] and record["loss"] == "MarginMSELoss" and record["training"]["steps_done"] == 2
    assert sorted(p.name for p in (out / "work" / "checkpoints").iterdir()) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    # trained with --max-seq-length 16, saved to read as the base does
    own = _bi_encoder(args().model).model.max_seq_length
    assert _bi_encoder(str(out)).model.max_seq_length == own != 16 == args().max_seq_length
    # a training setting changed: the queries and negatives are kept, training starts again
    queries = (out / "work" / "queries.jsonl").read_text()
    capsys.readouterr()
    again = run(args(output=str(out), max_steps=3, keep_work=True))
    assert "training settings changed (max_steps): training starts again" in capsys.readouterr().out
    assert (
        again["training"]["steps_this_run"] == 3 and (out / "work" / "queries.jsonl").read_text() == queries
    )


def test_the_same_command_twice_trains_the_same_adapter(args, tmp_path):
    """Reproducible: LoRA's initial weights are seeded, not drawn from whatever the process's RNG holds (docs/results.md's
    table is checked by a rerun, tests/test_adapt_slow.py)."""
    import torch

    runs = []
    for name in ("first", "second"):
        torch.rand(7)  # the process's RNG moved between the runs, as any earlier work moves it
        run(args(output=str(tmp_path / name), max_steps=1))
        runs.append((tmp_path / name / "adapter_model.safetensors").read_bytes())
    assert runs[0] == runs[1]


def test_the_hybrid_teachers_bm25_is_the_retrievers_on_indexed_documents():
    """The teacher's BM25 (any text, the corpus's statistics) gives an indexed document the score bm25s gives it."""
    from ctxir.adapt.negatives import HybridTeacher
    from ctxir.retrieval import BM25Retriever
    from ctxir.types import doc_text

    corpus = {r["_id"]: {"title": r["title"], "text": r["text"]} for r in _corpus_rows()}
    teacher = HybridTeacher(corpus, encoder=None)
    for query in ("river otters at night", "lending money to firms", "comets with a bright tail"):
        hits = BM25Retriever(corpus, cache=False).query(query, top_k=5)
        ours = teacher.bm25(query, [doc_text(corpus[h.doc_id]) for h in hits])
        assert np.allclose(ours, [h.score for h in hits], rtol=1e-4), (query, ours, hits)


def test_the_complement_teacher_labels_with_base_cosine_and_bm25_margins(args, tmp_path, capsys):
    out = tmp_path / "complement"
    record = run(args(teacher="complement", output=str(out), max_steps=2, keep_work=True))
    assert record["complete"] and record["teacher"].startswith("complement: ")
    assert record["loss"] == "MarginMSELoss" and "weights" in capsys.readouterr().out
    labels = [json.loads(line) for line in (out / "work" / "labels.jsonl").read_text().splitlines()]
    assert labels and all(len(row["scores"]) == 2 for row in labels)
    assert (
        np.isfinite([row["scores"] for row in labels]).all() and len({row["scores"][0] for row in labels}) > 1
    )
    assert not np.allclose(
        _bi_encoder(str(out)).encode(["otters"]), _bi_encoder(args().model).encode(["otters"])
    )


def test_the_hybrid_teacher_weighs_each_part_to_one_spread_of_margins():
    """calibrate: each part's margins (positive minus negative) get std 1 once weighted, so neither part outvotes the
    other because of its units (a cosine moves by tenths, BM25 by units)."""
    from ctxir.adapt.negatives import HybridTeacher

    class Encoder:  # a text's vector: its length in words, so cosines are ±1 and vary little
        name = "fake"

        def encode(self, texts, show_progress_bar=False, role=None):
            v = np.array([[len(t.split()), 1.0] for t in texts], dtype=np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    corpus = {r["_id"]: {"title": r["title"], "text": r["text"]} for r in _corpus_rows()}
    teacher = HybridTeacher(corpus, Encoder())
    groups = [(TOPICS[t].split(". ")[0], [TOPICS[t], TOPICS[u]]) for t in TOPICS for u in TOPICS if t != u]
    dense_w, bm25_w = teacher.calibrate(groups)
    margins = np.stack([p[0] - p[1] for p in teacher.parts(groups)])  # (groups, 2): cosine, BM25
    assert np.allclose((margins * [dense_w, bm25_w]).std(axis=0), 1.0)
    scores = teacher.score_groups(groups, [["dense"]] * len(groups))
    assert np.allclose([s[0] - s[1] for s in scores], margins @ [dense_w, bm25_w], rtol=1e-3, atol=1e-3)


def test_the_complement_teacher_labels_bm25_mined_negatives_by_the_cosine_alone():
    from ctxir.adapt.negatives import HybridTeacher

    class Encoder:  # a text's vector: its length in words and 1
        name = "fake"

        def encode(self, texts, show_progress_bar=False, role=None):
            v = np.array([[len(t.split()), 1.0] for t in texts], dtype=np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    corpus = {r["_id"]: {"title": r["title"], "text": r["text"]} for r in _corpus_rows()}
    teacher = HybridTeacher(corpus, Encoder())
    groups = [(TOPICS[t].split(". ")[0], [TOPICS[t], *(TOPICS[u] for u in TOPICS if u != t)]) for t in TOPICS]
    sources = (["bm25", "dense"] * len(TOPICS))[: len(TOPICS) - 1]  # each negative's mining source
    dense_w, bm25_w = teacher.calibrate(groups)
    for p, s in zip(
        teacher.parts(groups), teacher.score_groups(groups, [sources] * len(groups)), strict=True
    ):
        for i, source in enumerate(sources, start=1):
            both = (p[0] - p[i]) @ [dense_w, bm25_w]
            expected = dense_w * (p[0, 0] - p[i, 0]) if source == "bm25" else both
            assert np.isclose(s[0] - s[i], expected, rtol=1e-3, atol=1e-3), (source, s, p)
