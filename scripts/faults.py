"""Faults at the places ctxir writes and in the files it reads back: the figures of docs/reliability.md, "Faults".

    python scripts/faults.py [--mutants 200]

1. Full disk: for each write site, the N-th write fails with ENOSPC (once, or from then on) for N = 1, 2, ...
   until the operation completes without meeting it (as SQLite tests its I/O). After each run: a results file
   stops with one ``DiskFullError`` naming the folder; a cache write is skipped with one warning and the run
   goes on; the previous file is intact, no temporary file is left, and the next run succeeds.
2. Damaged files: seeded mutants (truncations at random offsets, bit flips) of each kind of file ctxir reads
   back, loaded in a subprocess: each load gives verified content, or rebuilds, or refuses; a crash (a negative
   exit status), a hang (the timeout) or a wrong result used silently fails.

tests/test_faults.py runs the same scenarios (``CTXIR_MUTANTS`` mutants per kind, 200 by default).
"""

from __future__ import annotations

import argparse
import builtins
import errno
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MAX_WRITES = 400  # more than any operation below needs: a loop that never completes is a failure


# ---------------------------------------------------------------- the write-fault harness


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

    def opener(self, real_open):
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

    def install(self, patch) -> None:
        """``patch``: a ``pytest.MonkeyPatch``, undone when its context ends."""
        opener = self.opener(io.open)
        patch.setattr(builtins, "open", opener)
        patch.setattr(io, "open", opener)
        try:
            import faiss
        except ImportError:
            return
        real = faiss.write_index

        def write_index(*args, **kwargs):
            self.hit()
            return real(*args, **kwargs)

        patch.setattr(faiss, "write_index", write_index)


def each_failure(operation, check, forever: bool) -> int:
    """Run ``operation()`` with the 1st, 2nd, ... write failing until one run meets no failure; ``check(outcome,
    failed)`` after every run. Returns the failure points tried."""
    import pytest

    for n in range(1, MAX_WRITES):
        with pytest.MonkeyPatch.context() as patch:
            faults = WriteFaults(n, forever)
            faults.install(patch)
            outcome = operation()
        check(outcome, faults.failed > 0)
        if not faults.failed:
            return n - 1
    raise AssertionError(f"the operation still wrote after {MAX_WRITES} writes")


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name)


class Said(logging.Handler):
    """The warnings ctxir logs during a scenario."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        from ctxir import files

        files._warned.clear()  # "said once" counts from here
        logger = logging.getLogger("ctxir")
        logger.addHandler(self)
        self._propagate, logger.propagate = logger.propagate, False  # counted here, not printed
        return self

    def __exit__(self, *exc):
        logger = logging.getLogger("ctxir")
        logger.removeHandler(self)
        logger.propagate = self._propagate


# ---------------------------------------------------------------- the write sites


def results_file(folder: Path, forever: bool) -> int:
    """A results/metrics JSON (``write_json``): one clear error, the old file kept."""
    from ctxir.files import DiskFullError, write_json

    path = folder / "results" / "metrics.json"
    write_json(path, {"nDCG@10": 0.5})
    new = {"nDCG@10": 0.7, "per_query": {f"q{i}": i / 100 for i in range(300)}}

    def operation():
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
        assert leftovers(folder) == []

    return each_failure(operation, check, forever)


def embedding_cache(folder: Path, forever: bool) -> int:
    """The embedding cache: a write the disk cannot hold is skipped, said once; what is read is old or new."""
    from ctxir.encoders import EmbeddingCache

    cache = EmbeddingCache(folder / "embeddings")
    key = EmbeddingCache.key({"weights": "w"}, ["a", "b"])
    old, new = np.ones((2, 384), np.float32), np.full((2, 384), 2, np.float32)
    cache.put(key, old)

    def check(found, failed):
        assert found is not None and (np.array_equal(found, old) if failed else np.array_equal(found, new))
        assert leftovers(folder) == []
        cache.put(key, old)  # back to the old file for the next failure point

    def operation():
        cache.put(key, new)  # never raises: the caller has its embeddings
        return cache.get(key)

    with Said() as said:
        tried = each_failure(operation, check, forever)
    told = [m for m in said.messages if "embeddings not cached" in m]
    assert len(told) == 1 and "no space left on the disk holding" in told[0], told  # once, however often
    return tried


def bm25_cache(folder: Path, forever: bool) -> int:
    """The BM25 index cache: the index still searches; nothing partial is left; the next run caches it."""
    from ctxir.retrieval import BM25Retriever

    corpus = {f"d{i}": {"title": "", "text": f"otters {i} river bank dens number {i}"} for i in range(40)}
    cached = folder / "bm25"
    reference = [h.doc_id for h in BM25Retriever(corpus, cache=False).query("river otters 7", 5)]

    def check(retriever, failed):
        assert [h.doc_id for h in retriever.query("river otters 7", 5)] == reference
        assert leftovers(folder) == []
        if failed:
            assert not cached.exists() or not any(cached.iterdir()), "a partial index was left in the cache"
        else:
            assert BM25Retriever(corpus, cache=cached).cache_status == "loaded"

    with Said() as said:
        tried = each_failure(lambda: BM25Retriever(corpus, cache=cached), check, forever)
    assert tried == 0 or any("the BM25 index not cached" in m for m in said.messages)
    return tried


def ann_index(folder: Path, forever: bool) -> int:
    """The ANN index: still searches from memory; the next start builds and saves it."""
    from ctxir.retrieval.ann import AnnIndex, AnnParams

    docs = unit_vectors(600, 32)
    path = folder / "ann" / "index.faiss"
    params = AnnParams(nlist=8)

    def check(index, failed):
        rows, _ = index.search(docs[:3], 1)
        assert rows[:, 0].tolist() == [0, 1, 2]
        assert leftovers(folder) == []
        if failed:
            shutil.rmtree(path.parent, ignore_errors=True)  # the next failure point starts from no index
        else:
            assert AnnIndex.open_or_build(path, docs, params, show_progress=False).status == "opened"

    return each_failure(
        lambda: AnnIndex.open_or_build(path, docs, params, show_progress=False), check, forever
    )


WRITE_SITES = {
    "results / metrics JSON": results_file,
    "embedding cache": embedding_cache,
    "BM25 index cache": bm25_cache,
    "ANN index": ann_index,
}


def unit_vectors(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


# ---------------------------------------------------------------- damaged files


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
    else:
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)  # bit flips
    path.write_bytes(bytes(data))


def tally(result):
    outcomes[result] = outcomes.get(result, 0) + 1


if kind == "faiss":
    from ctxir.retrieval.ann import AnnIndex, AnnParams
    docs = np.load(folder / "docs.npy")
    for i in range(count):
        work = folder / f"m{i}"
        shutil.copytree(folder / "ann", work)
        mutate(rng.choice([work / "index.faiss", work / "index.faiss", work / "index.faiss.json"]))
        index, why = AnnIndex.open(work / "index.faiss", docs, AnnParams(nlist=8))
        if index is None:
            tally("refused")
        else:  # opened: it must be the intact index (a mutation that changed nothing the checks read)
            rows, _ = index.search(docs[:20], 1)
            tally("verified" if rows[:, 0].tolist() == list(range(20)) else "wrong")
        shutil.rmtree(work)
elif kind == "embeddings":
    from ctxir.encoders import EmbeddingCache
    from ctxir.encoders.bi_encoder import _looks_encoded
    good = np.load(folder / "good.npy")
    for i in range(count):
        cache = EmbeddingCache(folder / f"m{i}")
        shutil.copytree(folder / "cache", cache.root)
        mutate(cache.root / "k.npy")  # its checksum is read by name only
        hit = cache.get("k")
        if hit is None or not _looks_encoded(hit, *good.shape):
            tally("rebuilt")  # what encode_cached does with it: encodes again
        else:
            tally("verified" if np.array_equal(hit, good) else "wrong")
        shutil.rmtree(cache.root)
elif kind == "bm25":
    from ctxir.retrieval import BM25Retriever
    corpus = json.loads((folder / "corpus.json").read_text())
    expected = json.loads((folder / "expected.json").read_text())
    for i in range(count):
        cache = folder / f"m{i}"
        shutil.copytree(folder / "bm25", cache)
        mutate(rng.choice(sorted(p for p in cache.rglob("*") if p.is_file())))
        retriever = BM25Retriever(corpus, cache=cache)
        got = [h.doc_id for h in retriever.query("river otters 7", 5)]
        tally(("rebuilt" if retriever.cache_status.startswith("built") else "verified")
              if got == expected else "wrong")
        shutil.rmtree(cache)
print(json.dumps(outcomes))
"""


def fuzz_files(kind: str, folder: Path) -> None:
    """The intact files the mutants are made from."""
    if kind == "faiss":
        from ctxir.retrieval.ann import AnnIndex, AnnParams

        docs = unit_vectors(600, 32)
        np.save(folder / "docs.npy", docs)
        AnnIndex.open_or_build(folder / "ann" / "index.faiss", docs, AnnParams(nlist=8), show_progress=False)
    elif kind == "embeddings":
        from ctxir.encoders import EmbeddingCache

        good = unit_vectors(50, 384)
        np.save(folder / "good.npy", good)
        EmbeddingCache(folder / "cache").put("k", good)
    elif kind == "bm25":
        from ctxir.retrieval import BM25Retriever

        corpus = {f"d{i}": {"title": "", "text": f"otters {i} river bank dens number {i}"} for i in range(40)}
        (folder / "corpus.json").write_text(json.dumps(corpus))
        retriever = BM25Retriever(corpus, cache=folder / "bm25")
        expected = [h.doc_id for h in retriever.query("river otters 7", 5)]
        (folder / "expected.json").write_text(json.dumps(expected))


def fuzz(kind: str, folder: Path, count: int) -> dict:
    """{outcome: mutants} of ``count`` mutants of ``kind`` loaded in one subprocess; a crash or a wrong result
    raises AssertionError."""
    fuzz_files(kind, folder)
    script = folder / "fuzz.py"
    script.write_text(FUZZ)
    done = subprocess.run(
        [sys.executable, str(script), kind, str(folder), str(count)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    # a segfault or abort is a negative return code; a hang, the timeout
    assert done.returncode == 0, f"the loader crashed (status {done.returncode}): {done.stderr[-2000:]}"
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    assert sum(outcomes.values()) == count and "wrong" not in outcomes, outcomes
    return outcomes


FILE_KINDS = ("faiss", "embeddings", "bm25")


# ---------------------------------------------------------------- the table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=200, help="mutants per kind of file")
    args = parser.parse_args(argv)
    rows = ["| write site | fault | failure points tried | outcome |", "|---|---|---:|---|"]
    with tempfile.TemporaryDirectory() as scratch, Said():  # the scenarios' warnings are counted, not printed
        for site, scenario in WRITE_SITES.items():
            for forever in (False, True):
                folder = Path(tempfile.mkdtemp(dir=scratch))
                tried = scenario(folder, forever)
                mode = "every write from the N-th" if forever else "the N-th write, once"
                outcome = "stopped with DiskFullError" if site.startswith("results") else "skipped, said once"
                rows.append(f"| {site} | {mode} | {tried} | {outcome}; old file intact, no temporary left |")
        rows += [
            "",
            "| file | mutants | verified | rebuilt | refused | crashed | wrong |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in FILE_KINDS:
            got = fuzz(kind, Path(tempfile.mkdtemp(dir=scratch)), args.mutants)
            rows.append(
                f"| {kind} | {args.mutants} | {got.get('verified', 0)} | {got.get('rebuilt', 0)} | "
                f"{got.get('refused', 0)} | 0 | 0 |"
            )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
