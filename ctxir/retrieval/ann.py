"""A persistent faiss ``IVF{nlist},SQ8`` index over normalised float32 embeddings, exact-rescored: ``PATH`` and
``PATH.json`` (fingerprint of the embeddings and settings, size and sha256), rebuilt when stale or damaged."""

from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_choice
from ctxir.files import (
    DiskFullError,
    atomic_path,
    cache_lock,
    cache_not_written,
    file_sha256,
    remove_temporaries,
    write_json,
)
from ctxir.types import CtxirError, Hit

FORMAT = "ctxir-ann/2"
# How each document is stored in its cell: 8-bit or 16-bit scalar codes, or the float32 vector itself.
CODES = {"sq8": "SQ8", "fp16": "SQfp16", "flat": "Flat"}


@dataclass(frozen=True)
class AnnParams:
    """Build settings (part of the fingerprint) and search settings (not); 0 = chosen from the corpus size."""

    nlist: int = 0  # cells; 0 = 4·√N rounded to a power of two (4096 at 1M), at most N/39
    codes: str = "sq8"  # sq8, fp16 or flat
    train_size: int = 0  # k-means sample; 0 = 64 × nlist (all rows if fewer)
    seed: int = 0
    nprobe: int = 0  # cells scanned per query; 0 = max(64, nlist/32), at most nlist (128 at 1M)
    rescore: int = 4  # re-score the top rescore × k with exact float dots (0 or 1 = off)

    def resolved(self, n: int) -> AnnParams:
        """These settings with every 0 replaced by its value for a corpus of ``n`` documents."""
        nlist = self.nlist or 2 ** round(math.log2(max(1.0, 4 * math.sqrt(n))))
        nlist = max(1, min(nlist, n // 39)) if not self.nlist else nlist  # faiss: ≥ 39 points a cell
        return replace(
            self,
            nlist=nlist,
            train_size=min(n, self.train_size or 64 * nlist),
            nprobe=min(nlist, self.nprobe or max(64, nlist // 32)),
        )


def _check_embeddings(embeddings: np.ndarray) -> np.ndarray:
    if not isinstance(embeddings, np.ndarray) or embeddings.ndim != 2 or embeddings.shape[0] == 0:
        shape = getattr(embeddings, "shape", None)
        raise CtxirError(f"embeddings must be a non-empty (documents, dim) array, got shape {shape}")
    if not np.issubdtype(embeddings.dtype, np.floating):
        raise CtxirError(f"embeddings must be floating-point (normalised) vectors, got {embeddings.dtype}")
    return embeddings if embeddings.dtype == np.float32 else embeddings.astype(np.float32)


def _check_params(params: AnnParams | None, n: int) -> AnnParams:
    params = (params or AnnParams()).resolved(n)
    check_choice(params.codes, "codes", tuple(CODES))
    if params.nlist < 1 or params.nlist > n or params.nprobe < 1:
        raise CtxirError(
            f"nlist must be 1 to the number of documents ({n:,}) and nprobe ≥ 1, got nlist "
            f"{params.nlist}, nprobe {params.nprobe}"
        )
    return params


def fingerprint(embeddings: np.ndarray, params: AnnParams, key: str = "") -> str:
    """sha256 of the shape, the (resolved) build settings, ``key`` and a strided sample of rows."""
    n, dim = embeddings.shape
    rows = np.unique(np.linspace(0, n - 1, min(n, 4096)).astype(np.int64))
    build = {k: getattr(params, k) for k in ("nlist", "codes", "train_size", "seed")}  # not nprobe, rescore
    record = {"format": FORMAT, "shape": [n, dim], "build": build, "key": key}
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(embeddings[rows], dtype=np.float32).tobytes())
    return digest.hexdigest()[:32]


def _header_matches(path: Path, count: int, dim: int) -> bool:
    """An IVF index header of ``count`` × ``dim``: faiss's read_index trusts it (a damaged one can crash)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] not in (b"IwSq", b"IwFl"):
        return False
    d, ntotal = struct.unpack("<iq", head[4:16])
    return d == dim and ntotal == count


def meta_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".json")


@dataclass(eq=False, repr=False)
class AnnIndex:
    """IVF + 8-bit codes (faiss) over the rows of ``embeddings`` (kept by reference, to re-score)."""

    index: Any  # the faiss index
    embeddings: np.ndarray | None
    params: AnnParams
    fingerprint: str
    build_s: float = 0.0
    status: str = "built"

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def memory_bytes(self) -> int:
        """Codes + ids + cell centroids: what the index holds in memory (unless opened with ``mmap=True``)."""
        return len(self) * (int(self.index.code_size) + 8) + self.params.nlist * self.dim * 4

    @classmethod
    def build(
        cls,
        embeddings: np.ndarray,
        params: AnnParams | None = None,
        key: str = "",
        threads: int = 0,
        show_progress: bool = True,
    ) -> AnnIndex:
        """k-means on a sample, then add every row (id = row number); ``threads`` 0 = all cores."""
        import faiss
        from threadpoolctl import threadpool_limits  # faiss's OpenMP threads, as they were afterwards
        from tqdm.auto import tqdm

        embeddings = _check_embeddings(embeddings)
        n, dim = embeddings.shape
        params = _check_params(params, n)
        chunk = max(10_000, n // 100)
        start, factory = time.perf_counter(), f"IVF{params.nlist},{CODES[params.codes]}"
        desc = f"ANN index ({factory}): k-means on {params.train_size:,}, then add"
        with (
            threadpool_limits(threads or None, user_api="openmp"),
            tqdm(total=n, unit="vec", disable=not show_progress, mininterval=1.0, desc=desc) as bar,
        ):
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
            rows = np.sort(np.random.default_rng(params.seed).choice(n, params.train_size, replace=False))
            index.train(np.ascontiguousarray(embeddings[rows], dtype=np.float32))  # (train_size, dim)
            for begin in range(0, n, chunk):
                block = np.ascontiguousarray(embeddings[begin : begin + chunk], dtype=np.float32)
                index.add(block)
                bar.update(len(block))
        return cls(
            index, embeddings, params, fingerprint(embeddings, params, key), time.perf_counter() - start
        )

    def save(self, path: str | Path) -> None:
        """Write ``path`` then ``path.json``, each atomically."""
        import faiss

        path = Path(path)
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))
            size, sha = tmp.stat().st_size, file_sha256(tmp)
        write_json(
            meta_path(path),
            {
                "format": FORMAT,
                "fingerprint": self.fingerprint,
                "count": len(self),
                "dim": self.dim,
                "params": asdict(self.params),
                "index_bytes": size,
                "index_sha256": sha,
                "build_s": round(self.build_s, 3),
                "backend": f"faiss {faiss.__version__}",
            },
            indent=1,
        )

    @classmethod
    def open(
        cls,
        path: str | Path,
        embeddings: np.ndarray,
        params: AnnParams | None = None,
        key: str = "",
        mmap: bool = False,
    ) -> tuple[AnnIndex | None, str]:
        """(index, "opened") when ``path`` holds an intact index of these embeddings and settings, else (None, why)."""
        import faiss

        path, embeddings = Path(path), _check_embeddings(embeddings)
        params = _check_params(params, embeddings.shape[0])
        meta_file = meta_path(path)
        try:
            meta = json.loads(meta_file.read_text())
        except FileNotFoundError:
            return None, "no index yet"
        except (OSError, ValueError):
            return None, f"unreadable {meta_file.name}"
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return None, f"{meta_file.name} is not a {FORMAT} record"
        if meta.get("fingerprint") != fingerprint(embeddings, params, key):
            return None, "stale (built from other embeddings or settings)"
        try:
            size = path.stat().st_size
        except OSError:
            return None, f"{path.name} is missing"
        if size != meta.get("index_bytes"):
            return None, f"{path.name} is truncated or was replaced ({size:,} bytes)"
        if not _header_matches(path, *embeddings.shape):
            return None, f"{path.name} has a damaged header (not an IVF index of {embeddings.shape} vectors)"
        if file_sha256(path) != meta.get("index_sha256"):
            return None, f"{path.name} is corrupt (sha256 differs)"
        try:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0)
        except RuntimeError as err:
            return None, f"{path.name} could not be read by faiss ({str(err).splitlines()[0][:120]})"
        return cls(
            index, embeddings, params, meta["fingerprint"], float(meta.get("build_s", 0.0)), "opened"
        ), "opened"

    @classmethod
    def open_or_build(
        cls,
        path: str | Path,
        embeddings: np.ndarray,
        params: AnnParams | None = None,
        key: str = "",
        show_progress: bool = True,
    ) -> AnnIndex:
        """Reopen ``path`` if it is this index, else build and save it; ``status``: "opened" or "built: <why>"."""
        remove_temporaries(Path(path).parent, Path(path).name)
        found, why = cls.open(path, embeddings, params, key)
        if found is not None:
            return found
        with cache_lock(path):  # a second process building the same index waits, then opens the first one's
            found, why = cls.open(path, embeddings, params, key)
            if found is not None:
                return found
            if show_progress:
                print(f"building the ANN index {path} ({why})", flush=True)
            built = cls.build(embeddings, params, key, show_progress=show_progress)
            try:
                built.save(path)
            except DiskFullError as err:  # searched from memory this time; the next start builds it again
                cache_not_written("the ANN index", err)
        built.status = f"built: {why}"
        return built

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores), each (queries, min(k, len)); rows -1 / score -inf where fewer were found."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if len(queries) > 256:  # bounds the (queries, candidates, dim) block gathered for re-scoring
            parts = [self.search(queries[i : i + 256], k) for i in range(0, len(queries), 256)]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        k = min(int(k), len(self))
        rescore = self.embeddings is not None and self.params.rescore > 1
        count = min(len(self), k * self.params.rescore) if rescore else k
        self.index.nprobe = self.params.nprobe
        scores, rows = self.index.search(queries, count)
        found = rows >= 0
        if rescore:
            scores = np.einsum("qcd,qd->qc", self.embeddings[np.maximum(rows, 0)], queries, dtype=np.float32)
        scores = np.where(found, scores, -np.inf).astype(np.float32)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(rows, order, 1), np.take_along_axis(scores, order, 1)

    def search_hits(self, queries: np.ndarray, k: int, doc_ids: list[str]) -> list[list[Hit]]:
        """The DenseRetriever contract: per query, ``Hit(doc_id, score)`` best first."""
        rows, scores = self.search(queries, k)
        return [
            [Hit(doc_ids[int(r)], float(s)) for r, s in zip(rr, rs, strict=True) if r >= 0]
            for rr, rs in zip(rows, scores, strict=True)
        ]
