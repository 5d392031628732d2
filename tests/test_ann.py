"""ctxir.retrieval.ann: recall against exact search, persistence, and rebuilding stale, truncated or corrupt files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxir.retrieval.ann import AnnIndex, AnnParams, meta_path
from ctxir.types import CtxirError, Hit

N, DIM, K = 3000, 64, 10


def clustered(n: int, seed: int, centres: int = 30) -> np.ndarray:
    """Unit vectors around ``centres`` random directions (~100 each), so the top 10 are real neighbours."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((centres, DIM)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    x = base[rng.integers(0, centres, n)] + np.float32(0.5 / np.sqrt(DIM)) * rng.standard_normal(
        (n, DIM), dtype=np.float32
    )
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def docs() -> np.ndarray:
    return clustered(N, 0)


@pytest.fixture(scope="module")
def queries() -> np.ndarray:
    return clustered(200, 1)  # same distribution, not in the corpus


@pytest.fixture(scope="module")
def built(docs) -> AnnIndex:
    return AnnIndex.build(docs, show_progress=False)


def exact(docs: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    return np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :k]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]))


def test_recall_at_default_settings(built, docs, queries):
    rows, scores = built.search(queries, K)
    assert rows.shape == scores.shape == (len(queries), K)
    assert recall(rows, exact(docs, queries)) >= 0.95
    # Re-scored: the scores are the exact float dot products, best first.
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ docs.T, rows, 1), rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 1e-7)


def test_without_rescoring_scores_are_approximate_cosines(docs, queries):
    index = AnnIndex.build(docs, AnnParams(rescore=0), show_progress=False)
    rows, scores = index.search(queries, K)
    exact_scores = np.take_along_axis(queries @ docs.T, rows, 1)
    assert np.abs(scores - exact_scores).max() < 0.05  # int8 rounding, not another metric
    assert recall(rows, exact(docs, queries)) >= 0.9  # ~0.98 here; re-scoring (the default) gives ~0.99


def test_single_query_and_k_beyond_corpus(docs):
    small = AnnIndex.build(docs[:5], show_progress=False)
    rows, scores = small.search(docs[0], 50)  # a 1-d query, k > documents
    assert rows.shape == (1, 5) and sorted(rows[0].tolist()) == [0, 1, 2, 3, 4]
    assert rows[0, 0] == 0 and scores[0, 0] == pytest.approx(1.0, abs=1e-5)


def test_hits_follow_the_dense_retriever_contract(built, docs):
    ids = [f"doc{i}" for i in range(N)]
    hits = built.search_hits(docs[:3], 5, ids)
    assert len(hits) == 3 and all(len(h) == 5 and all(isinstance(x, Hit) for x in h) for h in hits)
    assert [h[0].doc_id for h in hits] == ["doc0", "doc1", "doc2"]
    assert all(isinstance(x.score, float) for h in hits for x in h)
    assert all(h[i].score >= h[i + 1].score for h in hits for i in range(4))


def test_save_then_reopen_without_rebuilding(built, docs, queries, tmp_path, monkeypatch):
    path = tmp_path / "index.ann"
    built.save(path)
    assert meta_path(path).is_file() and not list(tmp_path.glob("*.tmp*"))
    monkeypatch.setattr(AnnIndex, "build", classmethod(lambda *a, **k: pytest.fail("rebuilt a valid index")))
    reopened = AnnIndex.open_or_build(path, docs, show_progress=False)
    assert reopened.status == "opened"
    want_rows, want_scores = built.search(queries, K)
    rows, scores = reopened.search(queries, K)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(scores, want_scores)


def test_memory_mapped_reopening_gives_the_same_results(built, docs, queries, tmp_path):
    path = tmp_path / "index.ann"
    built.save(path)
    mapped, why = AnnIndex.open(path, docs, mmap=True)
    assert why == "opened"
    np.testing.assert_array_equal(mapped.search(queries, K)[0], built.search(queries, K)[0])


def test_first_use_builds_saves_and_reopens(docs, tmp_path):
    path = tmp_path / "sub" / "index.ann"
    first = AnnIndex.open_or_build(path, docs[:500], show_progress=False)
    assert first.status == "built: no index yet" and path.is_file()
    assert AnnIndex.open_or_build(path, docs[:500], show_progress=False).status == "opened"


@pytest.mark.parametrize("change", ["other embeddings", "other build settings", "other key"])
def test_stale_fingerprint_is_rebuilt(docs, tmp_path, change):
    path = tmp_path / "index.ann"
    AnnIndex.open_or_build(path, docs[:500], show_progress=False, key="a")
    vectors, params, key = docs[:500], AnnParams(), "a"
    if change == "other embeddings":
        vectors = docs[500:1000]
    elif change == "other build settings":
        params = AnnParams(nlist=4)
    else:
        key = "b"
    index = AnnIndex.open_or_build(path, vectors, params, key=key, show_progress=False)
    assert index.status.startswith("built: stale")
    rows, _ = index.search(vectors[:3], 1)
    assert rows[:, 0].tolist() == [0, 1, 2]  # the new vectors, not the old file's
    assert AnnIndex.open_or_build(path, vectors, params, key=key, show_progress=False).status == "opened"


def test_search_settings_do_not_invalidate_the_file(docs, tmp_path):
    path = tmp_path / "index.ann"
    AnnIndex.open_or_build(path, docs[:500], show_progress=False)
    assert (
        AnnIndex.open_or_build(path, docs[:500], AnnParams(nprobe=3, rescore=8), show_progress=False).status
        == "opened"
    )


def test_truncated_file_is_detected_and_rebuilt(built, docs, queries, tmp_path):
    path = tmp_path / "index.ann"
    built.save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    index, why = AnnIndex.open(path, docs)
    assert index is None and "truncated" in why
    rebuilt = AnnIndex.open_or_build(path, docs, show_progress=False)
    assert rebuilt.status.startswith("built: index.ann is truncated")
    assert path.stat().st_size == len(data)
    assert recall(rebuilt.search(queries, K)[0], exact(docs, queries)) >= 0.95


@pytest.mark.parametrize(
    "damage", ["flipped bytes", "garbage meta", "meta of another format", "missing index"]
)
def test_corrupt_files_are_rebuilt_not_a_crash(docs, tmp_path, damage):
    path = tmp_path / "index.ann"
    AnnIndex.open_or_build(path, docs[:500], show_progress=False)
    if damage == "flipped bytes":
        data = bytearray(path.read_bytes())
        middle = slice(len(data) // 2, len(data) // 2 + 64)
        data[middle] = bytes(b ^ 0xFF for b in data[middle])  # same size, other content
        path.write_bytes(bytes(data))
    elif damage == "garbage meta":
        meta_path(path).write_bytes(b"\x80\x04not json")
    elif damage == "meta of another format":
        meta_path(path).write_text(json.dumps({"format": "pickle", "fingerprint": "x"}))
    else:
        path.unlink()
    index, why = AnnIndex.open(path, docs[:500])
    assert index is None and why
    assert AnnIndex.open_or_build(path, docs[:500], show_progress=False).status.startswith("built: ")
    assert AnnIndex.open_or_build(path, docs[:500], show_progress=False).status == "opened"


@pytest.mark.parametrize("offset", [0, 4, 8, 12], ids=["fourcc", "dimension", "count", "count-high"])
def test_header_damage_that_keeps_size_is_refused_before_faiss_reads_it(docs, tmp_path, offset):
    """faiss's read_index trusts its header's sizes; ctxir reads them first (before the hash, which is slower)."""
    path = tmp_path / "index.ann"
    AnnIndex.open_or_build(path, docs[:500], show_progress=False)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))
    index, why = AnnIndex.open(path, docs[:500])
    assert index is None and "damaged header" in why


@pytest.mark.parametrize(
    "bad", [np.zeros((0, 4), np.float32), np.zeros((3, 4), np.int8), np.zeros(4, np.float32)]
)
def test_bad_embeddings_are_refused_with_a_message(bad):
    with pytest.raises(CtxirError, match="embeddings must be"):
        AnnIndex.build(bad, show_progress=False)


def test_unknown_codes_are_refused(docs):
    with pytest.raises(CtxirError, match="codes 'q4'"):
        AnnIndex.build(docs[:10], AnnParams(codes="q4"), show_progress=False)
