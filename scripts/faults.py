"""Faults at the places ctxir writes and in the files it reads back: each one's outcome, printed as a table.

    python scripts/faults.py [--mutants 200] [--site SITE ...] [--kind KIND ...]

1. Full disk: at each write site the N-th write fails with ENOSPC (once, or from then on) for N = 1, 2, ... until
   the operation completes; a results file stops with one ``DiskFullError`` naming the folder, a cache write is
   skipped with one warning; the previous file is intact, no temporary is left, and the next run succeeds.
2. Damaged files: seeded mutants (truncations, bit flips) of each kind of file ctxir reads back, loaded in a
   subprocess: each gives verified content, rebuilds or refuses; a crash, a hang or a wrong result fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import logging.handlers
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python scripts/faults.py`: the repository's packages
    sys.path.insert(0, str(ROOT))
from ctxir.kinds import CLS_LR, CROSS_ENCODER  # noqa: E402
from scripts.fault_harness import each_failure, snapshot, stopped, tiny_bert  # noqa: E402


@contextlib.contextmanager
def said():
    """The warnings ctxir logs during a scenario (records, from ``said once`` afresh), counted instead of printed."""
    from ctxir import files

    files._warned.clear()
    handler, logger = logging.handlers.BufferingHandler(10**6), logging.getLogger("ctxir")
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield handler.buffer
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def dens(count: int, titled: bool = False) -> dict:
    """A corpus of ``count`` documents about otters' dens."""
    return {
        f"d{i}": {"title": f"Otters {i}" if titled else "", "text": f"otters {i} dig dens in the river bank"}
        for i in range(count)
    }


BANKS = {f"d{i}": {"title": "", "text": f"otters {i} river bank dens number {i}"} for i in range(40)}


def otter_report(path: Path, documents: int, queries: int, depth: int, shift: int = 1):
    """A failure report of ``queries`` queries, each judging one of ``documents`` and retrieving ``depth``."""
    from ctxir.evaluation.report import failure_cases, report_meta, write_report

    texts = {f"q{i}": f"river otters {i}" for i in range(queries)}
    qrels = {q: {f"d{i}": 1} for i, q in enumerate(texts)}
    run = {
        q: {f"d{(i + j + shift) % documents}": float(depth - j) for j in range(depth)}
        for i, q in enumerate(texts)
    }
    cases = failure_cases(qrels, run, dens(documents, titled=True), texts, worst=queries)
    return write_report(path, cases, report_meta(qrels, run, "nDCG@10", "bm25"))


def restore(folder: Path, files: dict[str, bytes]) -> None:
    """Put a ``snapshot`` back: the next failure point starts from the old files."""
    for name, data in files.items():
        (folder / name).write_bytes(data)


# ---------------------------------------------------------------- the write sites


def results_file(folder: Path, forever: bool) -> int:
    """A results/metrics JSON (``write_json``): one clear error, the old file kept."""
    from ctxir.files import write_json

    path = folder / "results" / "metrics.json"
    write_json(path, {"nDCG@10": 0.5})
    new = {"nDCG@10": 0.7, "per_query": {f"q{i}": i / 100 for i in range(300)}}

    def check(err, failed):
        stopped(err, failed, path.parent)
        assert json.loads(path.read_text()) == ({"nDCG@10": 0.5} if failed else new)

    return each_failure(lambda: write_json(path, new), check, folder, forever)


def embedding_cache(folder: Path, forever: bool) -> int:
    """The embedding cache: a write the disk cannot hold is skipped, said once; what is read is old or new."""
    from ctxir.encoders import EmbeddingCache

    cache = EmbeddingCache(folder / "embeddings")
    key = EmbeddingCache.key({"weights": "w"}, ["a", "b"])
    old, new = np.ones((2, 384), np.float32), np.full((2, 384), 2, np.float32)
    cache.put(key, old)

    def check(found, failed):
        assert found is not None and (np.array_equal(found, old) if failed else np.array_equal(found, new))
        cache.put(key, old)

    def operation():
        cache.put(key, new)  # never raises: the caller has its embeddings
        return cache.get(key)

    with said() as records:
        tried = each_failure(operation, check, folder, forever)
    told = [r.getMessage() for r in records if "embeddings not cached" in r.getMessage()]
    assert len(told) == 1 and "no space left on the disk holding" in told[0], told  # once, however often
    return tried


def bm25_cache(folder: Path, forever: bool) -> int:
    """The BM25 index cache: the index still searches; nothing partial is left; the next run caches it."""
    from ctxir.retrieval import BM25Retriever

    corpus, cached = BANKS, folder / "bm25"
    reference = [h.doc_id for h in BM25Retriever(corpus, cache=False).query("river otters 7", 5)]

    def check(retriever, failed):
        assert [h.doc_id for h in retriever.query("river otters 7", 5)] == reference
        if failed:
            assert not cached.exists() or not any(cached.iterdir()), "a partial index was left in the cache"
        else:
            assert BM25Retriever(corpus, cache=cached).cache_status == "loaded"

    with said() as records:
        tried = each_failure(lambda: BM25Retriever(corpus, cache=cached), check, folder, forever)
    assert tried == 0 or any("the BM25 index not cached" in r.getMessage() for r in records)
    return tried


def ann_index(folder: Path, forever: bool) -> int:
    """The ANN index: still searches from memory; the next start builds and saves it."""
    from ctxir.retrieval.ann import AnnIndex, AnnParams

    docs = unit_vectors(600, 32)
    path = folder / "ann" / "index.faiss"

    def open_or_build():
        return AnnIndex.open_or_build(path, docs, AnnParams(nlist=8), show_progress=False)

    def check(index, failed):
        assert index.search(docs[:3], 1)[0][:, 0].tolist() == [0, 1, 2]
        if failed:
            shutil.rmtree(path.parent, ignore_errors=True)
        else:
            assert open_or_build().status == "opened"

    return each_failure(open_or_build, check, folder, forever)


def failure_report(folder: Path, forever: bool) -> int:
    """The failure report (FILE.json, then FILE.html): each file the old one or a whole new one."""
    from ctxir.evaluation.report import load_report

    html = folder / "reports" / "report.html"

    def write(shift: int, path: Path = html):
        return otter_report(path, 30, 12, 10, shift)

    write(1)
    old = snapshot(html.parent)
    new_cases = load_report(write(2, folder / "reference" / "report.html")[1])["cases"]

    def check(err, failed):
        stopped(err, failed, html.parent)
        now = snapshot(html.parent)
        assert set(now) == set(old)
        if failed:
            html_now = now["report.html"]
            assert html_now == old["report.html"] or html_now.rstrip().endswith(b"</html>")
            assert now["report.json"] == old["report.json"] or load_report(html)["cases"] == new_cases
            restore(html.parent, old)
        else:
            assert load_report(html)["cases"] == new_cases

    return each_failure(lambda: write(2), check, folder, forever)


def app_outputs(folder: Path, forever: bool) -> int:
    """The app's output folder (HTML, PNG, plotly.js): a full disk refuses the request, never half-writes a file."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    from ctxir.app.outputs import Outputs

    real, tempfile.tempdir = tempfile.tempdir, str(folder)
    try:
        outputs = Outputs()
    finally:
        tempfile.tempdir = real
    first = Path(outputs.html("<html>served before</html>", "page"))
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1, 2], [1, 0, 1])
    page = "<html>" + "otters " * 20_000 + "</html>"

    def check(got, failed):
        stopped(got, failed, outputs.root)
        assert first.read_text() == "<html>served before</html>"
        for path in outputs.root.iterdir():  # whatever is there is whole
            if path.suffix == ".html" and path != first:
                assert path.read_text() == page
            elif path.suffix == ".png":
                assert imread(path).shape[0] > 0
            elif path.suffix == ".js":
                assert path.stat().st_size > 1_000_000
        assert not [p.name for p in outputs.root.iterdir() if p.name.startswith(".")]

    def operation():
        return [outputs.html(page, "page"), outputs.png(fig, "figure"), str(outputs.plotly_js())]

    try:
        return each_failure(operation, check, folder, forever)
    finally:
        shutil.rmtree(outputs.root, ignore_errors=True)


def hub_staging(folder: Path, forever: bool) -> int:
    """``ctxir hub stage`` over a previous staging: swapped in whole, so a full disk leaves the previous one."""
    from sentence_transformers import CrossEncoder

    from ctxir import kinds
    from ctxir.files import verify_checksums
    from ctxir.publish.staging import stage
    from tests.tiny_models import metrics_record

    src = folder / "run"
    CrossEncoder(str(tiny_bert(folder / "base")), num_labels=1, device="cpu").save_pretrained(str(src))
    record = metrics_record(kinds.CROSS_ENCODER, base=str(folder / "base"))
    (src / "metrics.json").write_text(json.dumps(record))
    dest = folder / "hub" / "ctxir--tiny"

    def operation():
        return stage(src, "ctxir/tiny", dest, base_model_id="hf-internal-testing/tiny-random-bert")

    operation()
    before = snapshot(dest)
    (src / "figures").mkdir()  # the new staging differs from the old: one figure more
    (src / "figures" / "curve.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))

    def check(got, failed):
        stopped(got, failed, dest.parent)
        if failed:
            assert snapshot(dest) == before
        else:  # config, weights, tokenizer…
            assert "figures/curve.png" in got.files and verify_checksums(dest) >= 5

    return each_failure(operation, check, folder, forever)


def ship(folder: Path, forever: bool) -> int:
    """``training/ship.py`` over the package folder's previous models: assembled beside them, swapped in whole."""
    import pytest
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir import kinds
    from ctxir.encoders import models
    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer
    from ctxir.encoders.models import DEFAULT_BI_ENCODER, packaged_minilm_path
    from ctxir.files import verify_checksums
    from ctxir.rerank import ClsLrRanker
    from tests.tiny_models import metrics_record
    from training import ship as shipping

    ce, cls, dest = folder / "ce-top", folder / kinds.CLS_LR, folder / "package" / "models"
    body = TopLayersTransformer(str(packaged_minilm_path()), transformer_task="feature-extraction")
    body.model.config.num_labels, body.max_seq_length = 1, 64
    body.freeze_below(4, DEFAULT_BI_ENCODER)
    model = CrossEncoder(
        modules=[body, SegmentCosineHead(384)], device="cpu", activation_fn=torch.nn.Identity()
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for param in (p for p in model.parameters() if p.requires_grad):
            param.add_(0.01 * torch.randn_like(param))
    model.save_pretrained(str(ce))
    (ce / "metrics.json").write_text(json.dumps(metrics_record(kinds.CROSS_ENCODER, base=DEFAULT_BI_ENCODER)))
    features = np.random.default_rng(0).normal(size=(40, 384)).astype(np.float32)
    ClsLrRanker.fit(str(ce), features, [0, 1] * 20, device="cpu", max_length=64).save(cls)
    (cls / "metrics.json").write_text(json.dumps(metrics_record(kinds.CLS_LR, base=str(ce))))
    args = shipping.ShipArgs(cross_encoder=str(ce), cls_lr=str(cls), dest=str(dest))
    (dest / "old-model").mkdir(parents=True)  # what the package folder held before
    (dest / "old-model" / "config.json").write_text('{"kept": true}')
    before = snapshot(dest)

    def clear():
        for cached in (models.resolve_model, models.load_cross_encoder, models.load_transformer):
            cached.cache_clear()  # the names resolve to what this try shipped

    def ship_once():
        clear()
        return shipping.run(args)

    def check(got, failed):
        stopped(got, failed, dest.parent)
        if failed:
            assert snapshot(dest) == before
        else:
            assert all(verify_checksums(p) > 0 for p in dest.iterdir() if p.name != "old-model")
        assert not list(dest.parent.glob(".ship-*"))

    with pytest.MonkeyPatch.context() as patch:  # the shipped names point into this package folder
        patch.setitem(models.SHIPPED_MODELS, models.SHIPPED_CROSS_ENCODER, dest / kinds.CROSS_ENCODER)
        patch.setitem(models.SHIPPED_MODELS, models.SHIPPED_CLS_LR, dest / kinds.CLS_LR)
        try:
            return each_failure(ship_once, check, folder, forever, sample=True)
        finally:
            clear()


def onnx_files(folder: Path, forever: bool) -> int:
    """The ONNX exports of ``--backend onnx-int8``: what is left is whole and checked; the next run completes."""
    from sentence_transformers import SentenceTransformer

    from ctxir.encoders import onnx_export
    from ctxir.encoders.onnx_backend import int8_model

    model = SentenceTransformer(str(tiny_bert(folder / "model")), device="cpu")
    out = folder / "onnx"

    def check(got, failed):
        stopped(got, failed, out)
        assert all(onnx_export.verified(p) for p in out.glob("*.onnx")), "an ONNX file without its checksum"
        assert failed or got == out / onnx_export.INT8_FILE
        if failed:
            shutil.rmtree(out, ignore_errors=True)

    return each_failure(lambda: int8_model(model, out, progress=False), check, folder, forever, sample=True)


def training_checkpoints(folder: Path, forever: bool) -> int:
    """A Trainer's checkpoint: the half-saved one is removed, checkpoint-2 is intact and ``--resume last`` takes it."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from training.common import resolve_resume, train_keeping_checkpoints

    base = tiny_bert(folder / "model")
    rows = {
        "anchor": [f"river otters {i}" for i in range(16)],
        "positive": [f"otters dig dens {i}" for i in range(16)],
    }
    out = folder / "checkpoints"

    def trainer(steps: int):
        model = SentenceTransformer(str(base), device="cpu")
        args = SentenceTransformerTrainingArguments(
            output_dir=str(out),
            max_steps=steps,
            per_device_train_batch_size=4,
            save_strategy="steps",
            save_steps=2,
            save_total_limit=2,
            logging_steps=100,
            report_to="none",
            use_cpu=True,
            seed=0,
            disable_tqdm=True,
        )
        loss = MultipleNegativesRankingLoss(model)
        return SentenceTransformerTrainer(
            model=model, args=args, train_dataset=Dataset.from_dict(rows), loss=loss
        )

    train_keeping_checkpoints(trainer(2), None, out)
    before = snapshot(out / "checkpoint-2")

    def check(err, failed):
        stopped(err, failed, out / "checkpoint-4")
        assert snapshot(out / "checkpoint-2") == before
        assert failed != (out / "checkpoint-4").is_dir()  # a half-saved checkpoint is not left to resume from
        assert resolve_resume("last", out) == str(out / ("checkpoint-2" if failed else "checkpoint-4"))
        assert not failed or "--resume last" in str(err)

    def resume():
        return train_keeping_checkpoints(trainer(4), str(out / "checkpoint-2"), out)

    return each_failure(resume, check, folder, forever, under=out, sample=True)


def classify_sample(folder: Path, forever: bool) -> int:
    """The classify tab's "load a sample" CSV: the CSV served before is untouched, no half CSV is left."""
    import csv

    from ctxir.app.classify_tab import sample_inputs

    out = folder / "outputs"
    out.mkdir()
    _, _, first = sample_inputs(out)
    written = Path(first).read_bytes()
    rows = list(csv.reader(written.decode("utf-8").splitlines()))
    assert rows[0] == ["text", "label"] and len(rows) > 2
    Path(first).write_bytes(b"served before\n")

    def check(got, failed):
        stopped(got, failed, out)
        assert Path(first).read_bytes() == (b"served before\n" if failed else written)
        assert [p.name for p in out.iterdir()] == [Path(first).name]
        if not failed:
            assert got[2] == first
            Path(first).write_bytes(b"served before\n")

    return each_failure(lambda: sample_inputs(out), check, folder, forever)


def _in_process_shards(job, todo, result) -> None:
    """``sharded._encode_shards`` without Ray (the faults are patched into this process only)."""
    from ctxir.encoders import sharded

    s = job.settings
    folder = str(job.folder.resolve())
    actor = sharded._ShardEncoder(
        job.worker_model, s.pooling, s.layer, "cpu", 1, s.batch_size, folder, s.document_prompt
    )
    for i, a, b in todo:
        texts, digest = job.texts[a:b], job.digests[i]
        batch = {"shard": [i], "start": [a], "ids": [job.ids[a:b]], "texts": [texts], "digest": [digest]}
        row = {key: values[0] for key, values in actor(batch).items()}
        result.encoded.append(int(row["shard"]))


def sharded_encoding(folder: Path, forever: bool) -> int:
    """``encode_sharded``: every shard with its .json is whole; the next run skips those and reads back the vectors."""
    import pytest

    from ctxir.encoders import BiEncoder, sharded
    from ctxir.encoders.shards import iter_shards, shard_names
    from ctxir.types import CtxirError

    model = str(tiny_bert(folder / "model"))
    corpus = dens(30)
    reference = BiEncoder(model, device="cpu", cache=False).encode_corpus(corpus)[1]  # (30, 32)
    out = folder / "shards"
    plan = 4  # 30 documents in shards of 8

    def encode():
        return sharded.encode_sharded(corpus, model, out, shard_size=8, num_workers=1)

    def check(got, failed):
        assert isinstance(got, CtxirError) == failed, got
        if failed:
            assert "no space left on the disk holding" in str(got) and str(out.resolve()) in str(got), got
        written = [i for i in range(plan) if (out / shard_names(i)[1]).is_file()]
        for i in written:  # a shard's .json is written last: with it, the shard is whole
            meta = json.loads((out / shard_names(i)[1]).read_text())
            vectors = np.load(out / shard_names(i)[0], allow_pickle=False)
            assert np.allclose(vectors, reference[meta["start"] : meta["start"] + meta["rows"]], atol=1e-5)
        again = encode()  # on a disk with room again: resumes from the shards already whole
        assert again.skipped == written and sorted(again.encoded + again.skipped) == list(range(plan))
        vectors = np.concatenate([v for _, v in iter_shards(out / sharded.MANIFEST_NAME)])
        assert np.allclose(vectors, reference, atol=1e-5)
        shutil.rmtree(out)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sharded, "_encode_shards", _in_process_shards)
        return each_failure(encode, check, folder, forever, CtxirError)


def cls_lr_save(folder: Path, forever: bool) -> int:
    """``ClsLrRanker.save`` over an earlier ranker: each of its two files is the old or the whole new one."""
    from ctxir.rerank import ClsLrRanker

    base = str(tiny_bert(folder / "model"))
    dest = folder / CLS_LR

    def ranker(value: float, C: float) -> ClsLrRanker:
        coef = np.full(32, value, dtype=np.float32)
        return ClsLrRanker(base, coef, value, max_length=64, device="cpu", metadata={"C": C})

    old, new = ranker(0.5, 1.0), ranker(-0.25, 4.0)
    old.save(dest)
    before = snapshot(dest)

    def state(r: ClsLrRanker) -> tuple:
        return r.coef.tolist(), r.intercept, r.metadata

    def check(err, failed):
        stopped(err, failed, dest)
        loaded = ClsLrRanker.load(dest, device="cpu")
        if failed:
            assert set(snapshot(dest)) == set(before)
            assert loaded.coef.tolist() in (old.coef.tolist(), new.coef.tolist())
            assert loaded.metadata in (old.metadata, new.metadata)
            restore(dest, before)
        else:
            assert state(loaded) == state(new)

    return each_failure(lambda: new.save(dest), check, folder, forever)


def head_save(folder: Path, forever: bool) -> int:
    """``save_cross_encoder`` over an earlier one: what is left is refused or scores as the earlier or the new one."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer, save_cross_encoder
    from ctxir.encoders.models import load_cross_encoder
    from ctxir.types import CtxirError

    base = str(tiny_bert(folder / "model"))

    def cross_encoder(term_weights: list[float], shift: float):
        body = TopLayersTransformer(base, transformer_task="feature-extraction")
        body.model.config.num_labels = 1
        body.freeze_below(1, base)
        head = SegmentCosineHead(32, term_match=True)
        with torch.no_grad():
            for name, parameter in body.model.named_parameters():
                if body._trained(name):  # the earlier model's top layers differ from the new one's
                    parameter.add_(shift)
            head.term_linear.weight.copy_(torch.tensor([term_weights]))
        return CrossEncoder(modules=[body, head], device="cpu", activation_fn=torch.nn.Identity())

    pairs = [("river otters", "otters dig dens in the river bank"), ("money", "the bank loan")]
    earlier = cross_encoder([-1.0, 0.0, 2.0, 0.0, 0.5], 0.01)
    model = cross_encoder([3.0, 0.5, 0.0, 0.0, -0.5], 0.0)
    scored = {"earlier": np.asarray(earlier.predict(pairs)), "new": np.asarray(model.predict(pairs))}
    dest, saved_before = folder / CROSS_ENCODER, folder / "saved-before"
    save_cross_encoder(earlier, saved_before)

    def start_over():  # copied outside the faults: copyfile counts writes
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(saved_before, dest)

    def check(err, failed):
        assert (err is not None) == failed, err
        load_cross_encoder.cache_clear()
        try:
            scores = np.asarray(load_cross_encoder(str(dest), "cpu").predict(pairs))
        except CtxirError:
            assert failed, "the whole saved folder was refused"
        else:
            which = [k for k, v in scored.items() if np.allclose(scores, v, atol=1e-3)]
            assert which in (["earlier"], ["new"]) and (failed or which == ["new"]), (scores, scored)
        finally:
            load_cross_encoder.cache_clear()
        start_over()

    def save():
        return save_cross_encoder(model, dest)

    start_over()
    tried = each_failure(save, check, folder, forever, OSError, sample=True)
    each_failure(save, check, folder, forever, OSError, under=dest / "1_SegmentCosineHead")
    return tried


WRITE_SITES = {
    "results / metrics JSON": results_file,
    "embedding cache": embedding_cache,
    "BM25 index cache": bm25_cache,
    "ANN index": ann_index,
    "failure report": failure_report,
    "app output folder": app_outputs,
    "classify sample CSV": classify_sample,
    "sharded encoding": sharded_encoding,
    "CLS-LR save": cls_lr_save,
    "cross-encoder head save": head_save,
    "hub staging": hub_staging,
    "ship": ship,
    "ONNX exports": onnx_files,
    "training checkpoints": training_checkpoints,
}
# the sites that load, export or train a model on each try: the default test run samples their failure points
SLOW_SITES = ("cross-encoder head save", "ship", "ONNX exports", "training checkpoints")
# what each site does when the disk is full, for the table
OUTCOMES = {
    "embedding cache": "skipped, said once; old file intact",
    "BM25 index cache": "skipped, said once; old file intact",
    "ANN index": "skipped, said once; old file intact",
    "cross-encoder head save": "OSError; a torn folder is refused on load or scores as saved, never used torn",
}


def unit_vectors(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


# ---------------------------------------------------------------- damaged files


FUZZ = """
import json, random, shutil, sys
from pathlib import Path
import numpy as np
from ctxir.types import CtxirError

kinds, root, count = sys.argv[1].split(","), Path(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)


def mutate(path):
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5 and len(data) > 1:
        del data[rng.randrange(len(data)):]  # truncated at a random offset
    else:
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)  # bit flips
    path.write_bytes(bytes(data))


def mutants(folder, source, pick, check, refusable=False):
    # {outcome: mutants}: each a copy of folder/source with the file pick(copy) chooses mutated, then check(copy)
    outcomes = {}
    rng.seed(0)  # each kind's mutants the same, alone or with others
    for i in range(count):
        work = folder / f"m{i}"
        shutil.copytree(folder / source, work)
        mutate(pick(work))
        try:
            got = check(work)
        except CtxirError:
            if not refusable:
                raise
            got = "refused"
        outcomes[got] = outcomes.get(got, 0) + 1
        shutil.rmtree(work)
    return outcomes


def faiss(folder):
    from ctxir.retrieval.ann import AnnIndex, AnnParams
    docs, params = np.load(folder / "docs.npy"), AnnParams(nlist=8)
    def nearest(index):
        return index.search(docs[:20], 1)[0][:, 0].tolist() == list(range(20))
    def check(work):
        path = work / "index.faiss"
        index, _ = AnnIndex.open(path, docs, params)
        if index is not None:  # opened: it must be the intact index (a mutation that changed nothing it reads)
            return "verified" if nearest(index) else "wrong"
        index = AnnIndex.open_or_build(path, docs, params, show_progress=False)  # what a start does: built, saved
        rebuilt = index.status.startswith("built") and AnnIndex.open(path, docs, params)[0] is not None
        return "rebuilt" if rebuilt and nearest(index) else "wrong"
    return mutants(folder, "ann", lambda w: rng.choice([w / "index.faiss"] * 2 + [w / "index.faiss.json"]), check)


def embeddings(folder):
    from ctxir.encoders import BiEncoder, EmbeddingCache
    good, texts = np.load(folder / "good.npy"), json.loads((folder / "texts.json").read_text())
    encoder = BiEncoder(str(folder / "model"), device="cpu")
    key = encoder.cache_key(texts)
    def check(work):
        encoder.cache = EmbeddingCache(work)
        hit = encoder.cache.get(key)
        got = encoder.encode_cached(texts)  # the read every corpus takes: a damaged file is encoded again
        if hit is not None and np.array_equal(hit, good):
            return "verified" if np.array_equal(got, good) else "wrong"
        fixed = EmbeddingCache(work).get(key)  # rebuilt: the cache holds the vectors whole for the next read
        whole = fixed is not None and np.allclose(fixed, good, atol=1e-6)
        return "rebuilt" if whole and np.allclose(got, good, atol=1e-6) else "wrong"
    return mutants(folder, "cache", lambda w: w / f"{key}.npy", check)  # its checksum is read by name only


def bm25(folder):
    from ctxir.retrieval import BM25Retriever
    corpus, expected = (json.loads((folder / name).read_text()) for name in ("corpus.json", "expected.json"))
    def check(work):
        retriever = BM25Retriever(corpus, cache=work)
        if [h.doc_id for h in retriever.query("river otters 7", 5)] != expected:
            return "wrong"
        return "rebuilt" if retriever.cache_status.startswith("built") else "verified"
    return mutants(folder, "bm25", lambda w: rng.choice(sorted(p for p in w.rglob("*") if p.is_file())), check)


def onnx(folder):
    from sentence_transformers import SentenceTransformer
    from ctxir.encoders.onnx_backend import OnnxEncoder, int8_model
    from ctxir.encoders.onnx_export import INT8_FILE, checksum_path, verified
    model = SentenceTransformer(str(folder / "model"), device="cpu")
    expected, texts = np.load(folder / "expected.npy"), json.loads((folder / "texts.json").read_text())
    exported = []
    def check(work):
        path = work / INT8_FILE
        if verified(path):
            got = OnnxEncoder(path, model, "mean", threads=1).encode(texts)
            return "verified" if np.array_equal(got, expected) else "wrong"
        if len(exported) == 2:  # int8_model exports it again: run for the first two (seconds each), the rest take its check
            return "rebuilt"
        exported.append(work)
        path = int8_model(model, work, progress=False)
        got = OnnxEncoder(path, model, "mean", threads=1).encode(texts)
        return "rebuilt" if verified(path) and np.allclose(got, expected, atol=1e-5) else "wrong"
    return mutants(folder, "onnx", lambda w: rng.choice([w / INT8_FILE] * 2 + [checksum_path(w / INT8_FILE)]), check)


def loaded(kind, folder):
    # a shipped model folder's file, read by the loader the product reads it with: verified or refused
    name = {"fusion.json": "fusion.json", "passages.json": "passages.json", "report JSON": "report.json"}.get(kind)
    def load(work):
        if kind == "model folder":  # the loader every model goes through (resolve_model, then sentence-transformers)
            from ctxir.encoders.models import load_cross_encoder
            load_cross_encoder.cache_clear()
            pairs = [("river otters", "otters dig dens in the river bank"), ("money", "the bank loan")]
            return np.asarray(load_cross_encoder(str(work), "cpu").predict(pairs)).tolist()
        if kind == "classifier":
            from ctxir.rerank import ClsLrRanker
            r = ClsLrRanker.load(work, device="cpu")
            return [r.base_model, r.coef.tolist(), r.intercept, r.layer, r.max_length, r.metadata]
        if kind == "fusion.json":
            from ctxir.rerank.stage_fusion import StageFusion
            return StageFusion.from_file(work / name).record()
        if kind == "passages.json":
            from ctxir.rerank.passages import Passages
            p = Passages.from_file(work / name)
            return None if p is None else [p.words, p.stride]
        from types import SimpleNamespace  # an uploaded failure report, drawn by the app's view
        from ctxir.app.report_tab import failure_report
        state = SimpleNamespace(config=SimpleNamespace(max_upload_mb=20.0, corpus=None), default_corpus="demo")
        return failure_report(state, work / name).data
    def pick(work):
        if kind == "report JSON":
            return work / name
        if name:  # the file itself, or the checksums that vouch for it
            return rng.choice([work / name, work / name, work / "checksums.json"])
        return rng.choice(sorted(p for p in work.rglob("*") if p.is_file() and p.suffix in (".json", ".safetensors")))
    source = "report" if kind == "report JSON" else "model"
    expected = json.loads(json.dumps(load(folder / source), default=str))  # the intact folder, read the same way
    def check(work):
        return "verified" if json.loads(json.dumps(load(work), default=str)) == expected else "wrong"
    return mutants(folder, source, pick, check, refusable=True)


RUNS = {"faiss": faiss, "embeddings": embeddings, "bm25": bm25, "onnx": onnx}
print(json.dumps({k: (RUNS[k] if k in RUNS else lambda f: loaded(k, f))(root / k.replace(" ", "-")) for k in kinds}))
"""


def fuzz_files(kind: str, folder: Path) -> None:
    """The intact files the mutants are made from."""
    if kind == "faiss":
        from ctxir.retrieval.ann import AnnIndex, AnnParams

        docs = unit_vectors(600, 32)
        np.save(folder / "docs.npy", docs)
        AnnIndex.open_or_build(folder / "ann" / "index.faiss", docs, AnnParams(nlist=8), show_progress=False)
    elif kind == "embeddings":
        from ctxir.encoders import BiEncoder, EmbeddingCache

        texts = [f"otters {i} dig dens in the river bank" for i in range(50)]
        encoder = BiEncoder(
            str(tiny_bert(folder / "model")), device="cpu", cache=EmbeddingCache(folder / "cache")
        )
        np.save(folder / "good.npy", encoder.encode_cached(texts))  # (50, 32), and its cache file
        (folder / "texts.json").write_text(json.dumps(texts))
    elif kind == "bm25":
        from ctxir.retrieval import BM25Retriever

        (folder / "corpus.json").write_text(json.dumps(BANKS))
        retriever = BM25Retriever(BANKS, cache=folder / "bm25")
        expected = [h.doc_id for h in retriever.query("river otters 7", 5)]
        (folder / "expected.json").write_text(json.dumps(expected))
    elif kind == "onnx":
        from sentence_transformers import SentenceTransformer

        from ctxir.encoders.onnx_backend import OnnxEncoder, int8_model

        model = SentenceTransformer(str(tiny_bert(folder / "model")), device="cpu")
        texts = [f"otters dig dens in the river bank {i}" for i in range(6)]
        path = int8_model(model, folder / "onnx", progress=False)
        np.save(folder / "expected.npy", OnnxEncoder(path, model, "mean", threads=1).encode(texts))
        (folder / "texts.json").write_text(json.dumps(texts))
    elif kind == "report JSON":  # and report.json beside it: what a visitor uploads
        otter_report(folder / "report" / "report.html", 8, 4, 5)
    else:  # a shipped-format model folder: what training/ship.py and `ctxir hub stage` write, checksums.json last
        from ctxir import kinds
        from ctxir.files import write_checksums

        model = folder / "model"
        if kind == "classifier":  # the packaged CLS-LR ranker
            shutil.copytree(ROOT / "ctxir" / "assets" / "models" / kinds.CLS_LR, model)
        elif kind == "model folder":
            from sentence_transformers import CrossEncoder

            base = tiny_bert(folder / "base")
            CrossEncoder(str(base), num_labels=1, device="cpu").save_pretrained(str(model))
        else:
            from ctxir.rerank.stage_fusion import StageFusion

            model.mkdir()
            fusion = StageFusion(
                "rrf", (1.5, 1.0), 60.0, "held-out training claims", (("hybrid", (3.0, 1.0)),)
            )
            (model / "fusion.json").write_text(json.dumps(fusion.record(), indent=2))
            (model / "passages.json").write_text(json.dumps({"method": "max", "words": 70, "stride": 50}))
        write_checksums(model)


def fuzz_many(kinds: list[str], folder: Path, count: int) -> dict[str, dict]:
    """{kind: {outcome: mutants}} of ``count`` mutants of each of ``kinds``, loaded in one subprocess."""
    for kind in kinds:  # each kind's files in a folder named as the script above names it
        (folder / kind.replace(" ", "-")).mkdir(parents=True, exist_ok=True)
        fuzz_files(kind, folder / kind.replace(" ", "-"))
    script = folder / "fuzz.py"
    script.write_text(FUZZ)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, str(script), ",".join(kinds), str(folder), str(count)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    # a segfault or abort is a negative return code; a hang, the timeout
    assert done.returncode == 0, f"the loader crashed (status {done.returncode}): {done.stderr[-2000:]}"
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for outcomes in found.values():
        assert sum(outcomes.values()) == count and "wrong" not in outcomes, found
    return found


# the kinds whose damaged copy is built again and checked; the others are refused with what to fetch or make again
REBUILT = ("faiss", "embeddings", "bm25", "onnx")
FILE_KINDS = (*REBUILT, "model folder", "classifier", "fusion.json", "passages.json", "report JSON")


# ---------------------------------------------------------------- the table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=200, help="mutants per kind of file")
    parser.add_argument("--site", action="append", choices=list(WRITE_SITES), help="only these write sites")
    parser.add_argument("--kind", action="append", choices=list(FILE_KINDS), help="only these kinds of file")
    args = parser.parse_args(argv)
    sites, kinds = args.site or list(WRITE_SITES), args.kind or list(FILE_KINDS)
    rows = ["| write site | fault | failure points tried | outcome |", "|---|---|---:|---|"]
    with tempfile.TemporaryDirectory() as scratch, said():  # the scenarios' warnings are counted, not printed
        for site in sites:
            for forever in (False, True):
                folder = Path(tempfile.mkdtemp(dir=scratch))
                tried = WRITE_SITES[site](folder, forever)
                mode = "every write from the N-th" if forever else "the N-th write, once"
                outcome = OUTCOMES.get(site, "stopped with DiskFullError; old file intact")
                rows.append(f"| {site} | {mode} | {tried} | {outcome}, no temporary left |")
        rows += [
            "",
            "| file | mutants | verified | rebuilt | refused | crashed | wrong |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        found = fuzz_many(kinds, Path(tempfile.mkdtemp(dir=scratch)), args.mutants)
        for kind in kinds:
            got = found[kind]
            counts = " | ".join(str(got.get(outcome, 0)) for outcome in ("verified", "rebuilt", "refused"))
            rows.append(f"| {kind} | {args.mutants} | {counts} | 0 | 0 |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
