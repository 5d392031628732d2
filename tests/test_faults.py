"""Faults at the places ctxir writes: the N-th write fails with ENOSPC (once, or from then on), for N = 1, 2, ...
until the operation completes without meeting it, as SQLite tests its I/O; and one real full disk (a 1 MB tmpfs).

After each failure: a cache write is skipped with one warning and the run goes on; a results file stops with one
``DiskFullError`` naming the folder; either way the previous file is intact, no temporary file is left behind, and
the next run (the disk freed) succeeds.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxir.files import DiskFullError, write_json

ROOT = Path(__file__).resolve().parents[1]
MAX_WRITES = 400  # more than any operation below needs: a loop that never completes is a failure


class WriteFaults:
    """Counts every data write made through Python file objects (``open``, ``io.open``, so ``np.save``,
    ``json.dump``, ``Path.write_text``) and native writers patched in (``faiss.write_index``); the ``n``-th one
    raises ENOSPC, and with ``forever`` every later one too."""

    def __init__(self, n: int, forever: bool = False):
        self.n, self.forever, self.count, self.failed = n, forever, 0, 0

    def hit(self) -> None:
        self.count += 1
        if self.count == self.n or (self.forever and self.count > self.n):
            self.failed += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def wrap(self, real_open):
        faults = self

        class Faulty:
            def __init__(self, handle):
                self._handle = handle

            def write(self, data):
                faults.hit()
                return self._handle.write(data)

            def writelines(self, lines):
                faults.hit()
                return self._handle.writelines(lines)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self._handle.__exit__(*exc)

            def __iter__(self):
                return iter(self._handle)

            def __getattr__(self, name):
                return getattr(self._handle, name)

        def faulty_open(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            return Faulty(handle) if any(c in mode for c in "wax+") else handle

        return faulty_open

    def install(self, monkeypatch) -> None:
        opener = self.wrap(io.open)
        monkeypatch.setattr(builtins, "open", opener)
        monkeypatch.setattr(io, "open", opener)
        try:
            import faiss
        except ImportError:
            return
        real = faiss.write_index

        def write_index(*args, **kwargs):
            self.hit()
            return real(*args, **kwargs)

        monkeypatch.setattr(faiss, "write_index", write_index)


def each_failure(operation, check, forever: bool):
    """Run ``operation(faults)`` with the 1st, 2nd, ... write failing until one run meets no failure; ``check``
    after every run (``failed``: whether the fault fired). Returns how many failure points were tried."""
    for n in range(1, MAX_WRITES):
        with pytest.MonkeyPatch.context() as patch:
            faults = WriteFaults(n, forever)
            faults.install(patch)
            outcome = operation(faults)
        check(outcome, faults.failed > 0)
        if not faults.failed:
            return n - 1
    raise AssertionError(f"the operation still wrote after {MAX_WRITES} writes")


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name)


@pytest.fixture(autouse=True)
def _fresh_warnings():
    from ctxir import files

    files._warned.clear()
    yield
    files._warned.clear()


# ---------------------------------------------------------------- results files: one clear error, nothing lost


@pytest.mark.parametrize("forever", [False, True], ids=["once", "forever"])
def test_a_results_file_on_a_full_disk_stops_cleanly_and_keeps_the_old_one(tmp_path, forever):
    path = tmp_path / "results" / "metrics.json"
    write_json(path, {"nDCG@10": 0.5})
    new = {"nDCG@10": 0.7, "per_query": {f"q{i}": i / 100 for i in range(300)}}

    def operation(faults):
        try:
            write_json(path, new)
        except DiskFullError as err:
            return err
        return None

    def check(err, failed):
        assert (err is not None) == failed
        if failed:
            assert "no space left on the disk holding" in str(err) and str(path.parent) in str(err)
            assert "free space there" in str(err) and json.loads(path.read_text()) == {"nDCG@10": 0.5}
        else:
            assert json.loads(path.read_text()) == new
        assert leftovers(tmp_path) == []

    tried = each_failure(operation, check, forever)
    assert tried >= 1


# ---------------------------------------------------------------- caches: skipped, said once, the run goes on


@pytest.mark.parametrize("forever", [False, True], ids=["once", "forever"])
def test_the_embedding_cache_skips_a_write_the_disk_cannot_hold(tmp_path, forever, caplog):
    from ctxir.encoders import EmbeddingCache

    cache = EmbeddingCache(tmp_path / "embeddings")
    key = EmbeddingCache.key({"weights": "w"}, ["a", "b"])
    old, new = np.ones((2, 384), np.float32), np.full((2, 384), 2, np.float32)
    cache.put(key, old)

    def operation(faults):
        with caplog.at_level(logging.WARNING, logger="ctxir"):
            cache.put(key, new)  # never raises: the caller has its embeddings
        return cache.get(key)

    def check(found, failed):
        assert found is not None and (np.array_equal(found, old) if failed else np.array_equal(found, new))
        assert leftovers(tmp_path) == []
        cache.put(key, old)  # back to the old file for the next failure point

    each_failure(operation, check, forever)
    said = [r.getMessage() for r in caplog.records if "embeddings not cached" in r.getMessage()]
    assert len(said) == 1 and "no space left on the disk holding" in said[0]  # once, however often it failed


def test_a_bm25_index_that_cannot_be_cached_still_searches_and_caches_next_time(tmp_path, caplog):
    from ctxir.retrieval import BM25Retriever

    corpus = {f"d{i}": {"title": "", "text": f"otters {i} river bank dens number {i}"} for i in range(40)}
    folder = tmp_path / "bm25"
    reference = [h.doc_id for h in BM25Retriever(corpus, cache=False).query("river otters 7", 5)]

    def operation(faults):
        with caplog.at_level(logging.WARNING, logger="ctxir"):
            retriever = BM25Retriever(corpus, cache=folder)
        return retriever

    def check(retriever, failed):
        assert [h.doc_id for h in retriever.query("river otters 7", 5)] == reference
        assert leftovers(tmp_path) == []
        if failed:
            assert not folder.exists() or not any(folder.iterdir()), "a partial index was left in the cache"
        else:
            assert BM25Retriever(corpus, cache=folder).cache_status == "loaded"

    tried = each_failure(operation, check, forever=True)
    assert tried >= 3  # several files: the index arrays, its vocabulary, the manifest
    assert any("the BM25 index not cached" in r.getMessage() for r in caplog.records)


def test_an_ann_index_that_cannot_be_saved_still_searches_and_is_built_next_time(tmp_path):
    pytest.importorskip("faiss")
    from ctxir.retrieval.ann import AnnIndex, AnnParams

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((600, 32)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    path = tmp_path / "ann" / "index.faiss"
    params = AnnParams(nlist=8)

    def operation(faults):
        return AnnIndex.open_or_build(path, docs, params, show_progress=False)

    def check(index, failed):
        rows, _ = index.search(docs[:3], 1)
        assert rows[:, 0].tolist() == [0, 1, 2]
        assert leftovers(tmp_path) == []
        if failed:
            shutil.rmtree(path.parent, ignore_errors=True)  # the next failure point starts from no index
        else:
            assert AnnIndex.open_or_build(path, docs, params, show_progress=False).status == "opened"

    assert each_failure(operation, check, forever=False) >= 2  # the faiss file, then its JSON


# ---------------------------------------------------------------- one real full disk


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MB tmpfs, where this machine lets the tests mount one (root, a kernel that allows it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(
            "a real full disk needs root to mount a 1 MB tmpfs; the write-fault tests above still run"
        )
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"this machine refuses a tmpfs mount ({done.stderr.decode().strip()[:120]})")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_evaluate_with_its_cache_on_a_full_disk_finishes_without_a_traceback(tmp_path, tiny_disk, write_beir):
    """The issue's case: `ctxir evaluate --retriever hybrid` with the cache folder on a 1 MB filesystem ended in
    ``OSError: 560640 requested and 262112 written`` from the embedding cache."""
    rng = np.random.default_rng(1)
    words = [
        "otter",
        "river",
        "bank",
        "loan",
        "bat",
        "night",
        "insect",
        "den",
        "rate",
        "money",
        "water",
        "cave",
    ]
    docs = {
        f"d{i}": " ".join(rng.choice(words, 60)) for i in range(800)
    }  # 800 × 384 float32: 1.2 MB > the disk
    queries = {f"q{i}": " ".join(rng.choice(words, 3)) for i in range(6)}
    qrels = {"test": {q: {f"d{i}": 1} for i, q in enumerate(queries)}}
    write_beir(tmp_path / "beir", queries, qrels, docs)
    out = tmp_path / "out"
    env = {**os.environ, "CTXIR_CACHE": str(tiny_disk), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ctxir", "evaluate", "--data", str(tmp_path / "beir"), "--split", "test",
         "--retriever", "hybrid", "--output", str(out / "r.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "not cached, this run goes on without it" in done.stderr
    assert leftovers(tiny_disk) == []


# ---------------------------------------------------------------- two processes, one cache folder

TWO_PROCESSES = """
import sys, time
import numpy as np
from ctxir.encoders import BiEncoder, EmbeddingCache
encoder = BiEncoder(sys.argv[1], cache=EmbeddingCache(sys.argv[2]))
texts = [f"otters dig dens along the river bank, number {i}" for i in range(400)]
calls = []
real = encoder.encode
encoder.encode = lambda *a, **k: calls.append(1) or real(*a, **k)
vectors = encoder.encode_cached(texts)
np.save(sys.argv[3], np.asarray(vectors))
print("encoded" if calls else "read the other process's file")
"""


def test_two_processes_encoding_one_corpus_into_one_cache_encode_it_once(tmp_path, minilm_path):
    """The app and an evaluation (or two evaluations) starting on the same corpus: one encodes, the other waits
    for it and reads its file; both get the same vectors, and the cache holds one whole file."""
    script = tmp_path / "encode.py"
    script.write_text(TWO_PROCESSES)
    cache = tmp_path / "cache"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.Popen([sys.executable, str(script), str(minilm_path), str(cache), str(tmp_path / f"{i}.npy")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]  # fmt: skip
    said = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-2000:]
        said.append(out.strip())
    assert sorted(said) == ["encoded", "read the other process's file"]
    assert np.array_equal(np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy"))
    assert len(list(cache.glob("*.npy"))) == 1 and leftovers(cache) == []


# ---------------------------------------------------------------- damaged files, fuzzed, in a subprocess

MUTANTS = int(os.environ.get("CTXIR_MUTANTS", "200"))  # per kind of file; -m slow runs more
FUZZ = """
import json, random, shutil, sys
from pathlib import Path
import numpy as np

kind, folder, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
outcomes = {}


def mutate(path):
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5 and len(data) > 1:
        del data[rng.randrange(len(data)):]  # truncated at a random offset
        how = "truncated"
    else:
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)  # bit flips
        how = "flipped"
    path.write_bytes(bytes(data))
    return how


def tally(result):
    outcomes[result] = outcomes.get(result, 0) + 1


if kind == "faiss":
    from ctxir.retrieval.ann import AnnIndex, AnnParams
    docs = np.load(folder / "docs.npy")
    for i in range(count):
        work = folder / f"m{i}"
        shutil.copytree(folder / "ann", work)
        target = rng.choice([work / "index.faiss", work / "index.faiss", work / "index.faiss.json"])
        mutate(target)
        index, why = AnnIndex.open(work / "index.faiss", docs, AnnParams(nlist=8))
        if index is None:
            tally("refused")
        else:  # opened: it must be the intact index (a mutation that changed nothing the checks read)
            rows, _ = index.search(docs[:20], 1)
            tally("verified" if rows[:, 0].tolist() == list(range(20)) else "WRONG")
        shutil.rmtree(work)
elif kind == "npy":
    from ctxir.encoders import BiEncoder, EmbeddingCache
    from ctxir.encoders.bi_encoder import _looks_encoded
    good = np.load(folder / "good.npy")
    for i in range(count):
        cache = EmbeddingCache(folder / f"m{i}")
        cache.root.mkdir()
        shutil.copy(folder / "good.npy", cache.root / "k.npy")
        mutate(cache.root / "k.npy")
        hit = cache.get("k")
        if hit is None or not _looks_encoded(hit, *good.shape):
            tally("rebuilt")  # what encode_cached does with it: encodes again
        else:
            tally("verified" if np.allclose(hit, good, atol=1e-2) else "WRONG")
        shutil.rmtree(cache.root)
elif kind == "bm25":
    from ctxir.retrieval import BM25Retriever
    corpus = json.loads((folder / "corpus.json").read_text())
    expected = json.loads((folder / "expected.json").read_text())
    for i in range(count):
        cache = folder / f"m{i}"
        shutil.copytree(folder / "bm25", cache)
        files = [p for p in cache.rglob("*") if p.is_file()]
        mutate(rng.choice(files))
        retriever = BM25Retriever(corpus, cache=cache)
        got = [h.doc_id for h in retriever.query("river otters 7", 5)]
        tally(("rebuilt" if retriever.cache_status.startswith("built") else "verified")
              if got == expected else "WRONG")
        shutil.rmtree(cache)
print(json.dumps(outcomes))
"""


def fuzz(kind: str, folder: Path) -> dict:
    script = folder / "fuzz.py"
    script.write_text(FUZZ)
    done = subprocess.run(
        [sys.executable, str(script), kind, str(folder), str(MUTANTS)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    # a segfault or abort is a negative return code; a hang, the timeout
    assert done.returncode == 0, f"the loader crashed (status {done.returncode}): {done.stderr[-2000:]}"
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    assert sum(outcomes.values()) == MUTANTS and "WRONG" not in outcomes, outcomes
    return outcomes


def test_damaged_faiss_indexes_are_refused_before_faiss_reads_them(tmp_path):
    pytest.importorskip("faiss")
    from ctxir.retrieval.ann import AnnIndex, AnnParams

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((600, 32)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    np.save(tmp_path / "docs.npy", docs)
    AnnIndex.open_or_build(tmp_path / "ann" / "index.faiss", docs, AnnParams(nlist=8), show_progress=False)
    outcomes = fuzz("faiss", tmp_path)
    assert outcomes.get("refused", 0) >= MUTANTS * 0.9


def test_damaged_cached_embeddings_are_encoded_again_never_used(tmp_path):
    rng = np.random.default_rng(0)
    good = rng.standard_normal((50, 384)).astype(np.float32)
    np.save(tmp_path / "good.npy", good / np.linalg.norm(good, axis=1, keepdims=True))
    outcomes = fuzz("npy", tmp_path)
    assert outcomes.get("rebuilt", 0) >= MUTANTS * 0.5


def test_a_damaged_bm25_cache_is_rebuilt_with_the_same_results(tmp_path):
    from ctxir.retrieval import BM25Retriever

    corpus = {f"d{i}": {"title": "", "text": f"otters {i} river bank dens number {i}"} for i in range(40)}
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    retriever = BM25Retriever(corpus, cache=tmp_path / "bm25")
    (tmp_path / "expected.json").write_text(
        json.dumps([h.doc_id for h in retriever.query("river otters 7", 5)])
    )
    outcomes = fuzz("bm25", tmp_path)
    assert outcomes.get("rebuilt", 0) >= MUTANTS * 0.9
