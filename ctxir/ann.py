"""A persistent approximate nearest-neighbour index over L2-normalised float32 embeddings.

``AnnIndex`` is an HNSW graph (usearch) whose vectors are stored as int8 scalars (384 bytes per 384-d vector
instead of 1,536), saved to one file and memory-mapped when reopened, so a million-document corpus starts in
seconds instead of being re-indexed. The top ``rescore × k`` graph candidates are re-scored with exact float
dot products against the caller's float32 embeddings, so the returned scores are exact cosines and the int8
rounding does not reorder the top k.

The file is keyed to what it was built from: a fingerprint of the embeddings (shape, a hash of a sample of rows,
and the caller's ``key``, e.g. the embedding cache key that covers every text) and of the build parameters.
``open_or_build`` rebuilds a stale index (different fingerprint), a truncated one (size differs from the
sidecar's record) and a corrupt one (sha256 differs, or usearch refuses it) instead of failing; writes go to a
temporary file first and are moved into place with ``os.replace``, so a reader never sees half a file.
Nothing is unpickled: the sidecar is JSON and the index is usearch's own binary format.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> vectors = rng.standard_normal((500, 16)).astype(np.float32)
>>> vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
>>> index = AnnIndex.build(vectors, show_progress=False)
>>> rows, scores = index.search(vectors[:2], 3)
>>> rows[:, 0].tolist()
[0, 1]

Files: ``PATH`` (usearch index) and ``PATH.json`` (fingerprint, parameters, size and sha256 of ``PATH``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ctxir.types import CtxirError, Hit

FORMAT = "ctxir-ann/1"
SCALARS = ("i8", "f16", "f32")
# Rows hashed into the fingerprint (evenly spaced, first and last included): catches a different corpus or model
# without reading a million rows; pass ``key`` (e.g. the embedding cache key) for a guarantee over every row.
FINGERPRINT_ROWS = 4096


@dataclass(frozen=True)
class AnnParams:
    """Build and search settings. Build settings are part of the fingerprint; search settings are not."""

    connectivity: int = 16  # HNSW "M": graph edges per node and layer
    expansion_add: int = 128  # "efConstruction"
    expansion_search: int = 128  # "ef": candidates visited per query (raised to the candidate count if smaller)
    scalar: str = "i8"  # how vectors are stored in the graph: i8, f16 or f32
    rescore: int = 4  # re-score the top rescore × k graph hits with exact float dots (0 or 1 = off)

    def build_settings(self) -> dict:
        return {"connectivity": self.connectivity, "expansion_add": self.expansion_add, "scalar": self.scalar}


def _check_embeddings(embeddings: np.ndarray) -> np.ndarray:
    if not isinstance(embeddings, np.ndarray) or embeddings.ndim != 2 or embeddings.shape[0] == 0:
        shape = getattr(embeddings, "shape", None)
        raise CtxirError(f"embeddings must be a non-empty (documents, dim) array, got shape {shape}")
    if not np.issubdtype(embeddings.dtype, np.floating):
        raise CtxirError(f"embeddings must be floating-point (normalised) vectors, got {embeddings.dtype}")
    return embeddings if embeddings.dtype == np.float32 else embeddings.astype(np.float32)


def fingerprint(embeddings: np.ndarray, params: AnnParams, key: str = "") -> str:
    """sha256 of the shape, the build settings, ``key`` and a strided sample of rows."""
    n, dim = embeddings.shape
    rows = np.unique(np.linspace(0, n - 1, min(n, FINGERPRINT_ROWS)).astype(np.int64))
    digest = hashlib.sha256(json.dumps({"format": FORMAT, "shape": [n, dim], "build": params.build_settings(),
                                        "key": key}, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(embeddings[rows], dtype=np.float32).tobytes())
    return digest.hexdigest()[:32]


def file_sha256(path: Path, chunk: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _usearch():
    try:
        from usearch.index import Index
    except ImportError as err:  # pragma: no cover - usearch is in requirements.txt
        raise CtxirError("the persistent ANN index needs usearch: pip install -r requirements.txt") from err
    return Index


class AnnIndex:
    """HNSW (usearch, int8 scalars by default) over the rows of ``embeddings``; search returns row numbers.

    Build with ``build``, persist with ``save``, reopen with ``open`` (memory-mapped) or use ``open_or_build``.
    ``embeddings`` (float32, normalised; an np.memmap is fine) are kept by reference for re-scoring only.
    """

    def __init__(self, index, embeddings: np.ndarray | None, params: AnnParams, fingerprint: str,
                 build_s: float = 0.0, status: str = "built"):
        self.index, self.embeddings, self.params = index, embeddings, params
        self.fingerprint, self.build_s, self.status = fingerprint, build_s, status
        self.index.expansion_search = params.expansion_search

    def __len__(self) -> int:
        return len(self.index)

    @property
    def dim(self) -> int:
        return int(self.index.ndim)

    @property
    def memory_bytes(self) -> int:
        """usearch's own count of the graph + stored vectors (a viewed index maps them from its file)."""
        return int(self.index.memory_usage)

    @classmethod
    def build(cls, embeddings: np.ndarray, params: AnnParams | None = None, key: str = "", threads: int = 0,
              show_progress: bool = True, chunk: int = 0) -> AnnIndex:
        """Insert every row (key = row number) with ``threads`` workers (0 = all cores), a progress bar per chunk."""
        from tqdm.auto import tqdm

        embeddings, params = _check_embeddings(embeddings), params or AnnParams()
        if params.scalar not in SCALARS:
            raise CtxirError(f"scalar {params.scalar!r} is not known: use one of {', '.join(SCALARS)}")
        n, dim = embeddings.shape
        index = _usearch()(ndim=dim, metric="cos", dtype=params.scalar, connectivity=params.connectivity,
                           expansion_add=params.expansion_add, expansion_search=params.expansion_search)
        chunk = chunk or max(10_000, n // 100)
        start = time.perf_counter()
        with tqdm(total=n, unit="vec", desc=f"ANN index (HNSW {params.scalar}, M={params.connectivity})",
                  disable=not show_progress, mininterval=1.0) as bar:
            for begin in range(0, n, chunk):
                block = np.ascontiguousarray(embeddings[begin:begin + chunk], dtype=np.float32)
                index.add(np.arange(begin, begin + len(block), dtype=np.uint64), block, threads=threads)
                bar.update(len(block))
        return cls(index, embeddings, params, fingerprint(embeddings, params, key), time.perf_counter() - start)

    def save(self, path: str | Path) -> None:
        """Write ``path`` then ``path.json``, each to a temporary file moved into place (``os.replace``)."""
        from ctxir.files import atomic_path, write_json

        path = Path(path)
        with atomic_path(path) as tmp:
            self.index.save(str(tmp))
            size, sha = tmp.stat().st_size, file_sha256(tmp)
        write_json(meta_path(path), {
            "format": FORMAT, "fingerprint": self.fingerprint, "count": len(self), "dim": self.dim,
            "params": asdict(self.params), "index_bytes": size, "index_sha256": sha,
            "build_s": round(self.build_s, 3), "backend": f"usearch {_usearch_version()}"}, indent=1)

    @classmethod
    def open(cls, path: str | Path, embeddings: np.ndarray, params: AnnParams | None = None, key: str = "",
             view: bool = True, verify: bool = True) -> tuple[AnnIndex | None, str]:
        """(index, "opened") when ``path`` holds an intact index of these embeddings and settings, else (None, why).

        ``view`` memory-maps the file (no copy); ``verify`` re-hashes it (about 1 s per 400 MB) to catch a
        corrupt file, besides the size check that always catches a truncated one.
        """
        path, params = Path(path), params or AnnParams()
        embeddings = _check_embeddings(embeddings)
        try:
            meta = json.loads(meta_path(path).read_text())
        except FileNotFoundError:
            return None, "no index yet"
        except (OSError, ValueError):
            return None, f"unreadable {meta_path(path).name}"
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return None, f"{meta_path(path).name} is not a {FORMAT} record"
        if meta.get("fingerprint") != fingerprint(embeddings, params, key):
            return None, "stale (built from other embeddings or settings)"
        try:
            size = path.stat().st_size
        except OSError:
            return None, f"{path.name} is missing"
        if size != meta.get("index_bytes"):
            return None, f"{path.name} is truncated or was replaced ({size:,} bytes, expected {meta.get('index_bytes')})"
        if verify and file_sha256(path) != meta.get("index_sha256"):
            return None, f"{path.name} is corrupt (sha256 differs)"
        Index = _usearch()
        try:
            index = Index.restore(str(path), view=view)
        except (RuntimeError, ValueError, OSError) as err:
            return None, f"{path.name} could not be read by usearch ({err})"
        if index is None or len(index) != embeddings.shape[0] or index.ndim != embeddings.shape[1]:
            return None, f"{path.name} holds another shape than the embeddings"
        return cls(index, embeddings, params, meta["fingerprint"], float(meta.get("build_s", 0.0)), "opened"), \
            "opened"

    @classmethod
    def open_or_build(cls, path: str | Path, embeddings: np.ndarray, params: AnnParams | None = None,
                      key: str = "", show_progress: bool = True, threads: int = 0, verify: bool = True) -> AnnIndex:
        """Reopen ``path`` if it is this index, else build, save and reopen it memory-mapped.

        ``status`` says which: "opened", or "built: <why the file was not used>".
        """
        found, why = cls.open(path, embeddings, params, key, verify=verify)
        if found is not None:
            return found
        if show_progress:
            print(f"building the ANN index {path} ({why})", flush=True)
        built = cls.build(embeddings, params, key, threads=threads, show_progress=show_progress)
        built.save(path)
        reopened, reason = cls.open(path, embeddings, params, key, verify=False)
        result = reopened or built  # reopened maps the file instead of holding a second copy in memory
        result.build_s, result.status = built.build_s, f"built: {why}"
        if reopened is None:
            result.status += f" (saved copy unreadable: {reason})"
        return result

    def search(self, queries: np.ndarray, k: int, threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores), each (queries, k'), k' = min(k, len); rows -1 / score -inf where fewer were found.

        With re-scoring the scores are exact float dot products (cosines for normalised vectors).
        """
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if len(queries) > 256:  # bounds the (queries, candidates, dim) block gathered for re-scoring
            parts = [self.search(queries[i:i + 256], k, threads) for i in range(0, len(queries), 256)]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        k = min(int(k), len(self))
        rescore = self.embeddings is not None and self.params.rescore > 1
        count = min(len(self), k * self.params.rescore) if rescore else k
        if self.index.expansion_search < count:
            self.index.expansion_search = count
        matches = self.index.search(queries, count, threads=threads)
        # One query gives Matches (only the hits found); a batch gives BatchMatches (padded, with counts).
        counts = np.asarray(getattr(matches, "counts", [len(matches.keys)])).reshape(-1, 1)
        keys = np.zeros((len(queries), count), dtype=np.int64)
        distances = np.ones((len(queries), count), dtype=np.float32)
        width = min(count, np.asarray(matches.keys).reshape(len(queries), -1).shape[1])
        keys[:, :width] = np.asarray(matches.keys).reshape(len(queries), -1)[:, :width]
        distances[:, :width] = np.asarray(matches.distances).reshape(len(queries), -1)[:, :width]
        found = np.arange(count)[None, :] < counts
        keys = np.where(found, keys, -1)
        if rescore:
            scores = np.einsum("qcd,qd->qc", self.embeddings[np.maximum(keys, 0)], queries, dtype=np.float32)
        else:
            scores = 1.0 - distances
        scores = np.where(found, scores, -np.inf).astype(np.float32)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(keys, order, 1), np.take_along_axis(scores, order, 1)

    def search_hits(self, queries: np.ndarray, k: int, doc_ids: list[str]) -> list[list[Hit]]:
        """The DenseRetriever contract: per query, ``Hit(doc_id, score)`` best first."""
        rows, scores = self.search(queries, k)
        return [[Hit(doc_ids[int(r)], float(s)) for r, s in zip(rr, rs, strict=True) if r >= 0]
                for rr, rs in zip(rows, scores, strict=True)]


def _usearch_version() -> str:
    import usearch

    return str(getattr(usearch, "__version__", "?"))
