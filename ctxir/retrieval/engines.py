"""Past one machine: Ray Data encodes a corpus on many workers into sharded embeddings; Milvus holds and searches them.

Two existing engines, no home-made one (docs/distributed.md says why these two, and what was measured):

* ``encode_sharded`` — a Ray Data job: the corpus is cut into fixed shards, a pool of ``num_workers`` actors (each
  holding the bi-encoder, on a CPU thread budget or one GPU) encodes them, and each worker writes its shard itself:
  ``shard-00000.npy`` (float32, L2-normalised, loaded without pickle) + ``shard-00000.json`` (ids, digests, the
  model fingerprint; written last, so its presence means the shard is complete). The driver writes
  ``manifest.json``. A rerun skips the shards already written for the same texts and model. The same call runs on a
  cluster after ``ray.init(address=...)`` (or with ``ray_address=``); ``output_dir`` must then be a folder every
  node can write (a shared mount).
* ``VectorDBRetriever`` — a ``Retriever`` over Milvus through ``pymilvus.MilvusClient``: ``uri="ctxir.db"`` (a
  local file) is Milvus Lite, embedded in this process, for tests and laptops; ``uri="http://host:19530"`` is a
  Milvus server or cluster, with no other change. Dense (cosine), BM25 (Milvus's own full-text ``Function``) and
  hybrid (both, fused inside the engine by ``RRFRanker``) search. It answers ``list[Hit]`` like every ctxir
  retriever, so ``Pipeline``, re-rankers, ``evaluate_run`` and the app take it unchanged.

>>> shard_plan(5, 2)  # (shard, first row, end row): fixed by corpus size and shard size, never by the worker count
[(0, 0, 2), (1, 2, 4), (2, 4, 5)]
>>> engine_of("ctxir.db"), engine_of("http://milvus.internal:19530")
('milvus-lite', 'milvus')
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_choice, check_corpus
from ctxir.files import atomic_path, read_json, write_json
from ctxir.retrieval.retrievers import Retriever
from ctxir.types import Corpus, CtxirError, Doc, Hit, doc_text

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ctxir-embedding-shards/1"
INSTALL_HINT = "pip install pymilvus==3.0.2 milvus-lite==3.2.2 'ray[data]==2.60.0'"
# Environment a worker on another node needs to resolve models the way this driver does.
_FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "CTXIR_CACHE")


# ------------------------------------------------------------------------------------------------ sharded encoding


def shard_plan(rows: int, shard_size: int) -> list[tuple[int, int, int]]:
    """``[(shard, start, stop)]`` covering ``rows`` rows in order, ``shard_size`` rows each (the last may be short)."""
    if shard_size < 1:
        raise CtxirError(f"shard_size must be ≥ 1, got {shard_size!r}")
    return [(i, start, min(start + shard_size, rows)) for i, start in enumerate(range(0, rows, shard_size))]


def texts_digest(ids: Sequence[str], texts: Sequence[str]) -> str:
    """sha256 of (id, text) pairs in order: ties a shard's vectors to the exact texts that made them."""
    digest = hashlib.sha256()
    for doc_id, text in zip(ids, texts, strict=True):
        for part in (doc_id, text):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
    return digest.hexdigest()


def encoder_fingerprint(encoder) -> str:
    """What decides the vectors (weights, pooling, layer, max length, normalisation), hashed; not the model's name."""
    settings = {k: v for k, v in encoder.config.items() if k != "model"}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _shard_names(index: int) -> tuple[str, str]:
    return f"shard-{index:05d}.npy", f"shard-{index:05d}.json"


def _source_rows(source) -> tuple[list[str], list[str]]:
    """(ids, texts) from a corpus mapping, a BEIR corpus file/folder, a list of texts, or (id, text) pairs."""
    if isinstance(source, str | Path):
        from ctxir.data.loaders import load_corpus_any

        source = load_corpus_any(source)
    if isinstance(source, Mapping):
        ids = [str(i) for i in source]
        return ids, [
            doc_text(source[i]) if isinstance(source[i], Mapping) else str(source[i]) for i in source
        ]
    rows = list(source)
    if all(isinstance(r, str) for r in rows):
        return [str(i) for i in range(len(rows))], rows
    if all(isinstance(r, tuple | list) and len(r) == 2 for r in rows):
        return [str(r[0]) for r in rows], [str(r[1]) for r in rows]
    raise CtxirError(
        "source must be a corpus {doc_id: {title, text}}, a corpus file or folder, a list of texts, "
        "or a list of (doc_id, text) pairs"
    )


def _shard_complete(folder: Path, index: int, digest: str, fingerprint: str, rows: int) -> bool:
    """A shard written by an earlier run for the same texts and model, with its vectors intact."""
    npy, meta_name = _shard_names(index)
    try:
        meta = read_json(folder / meta_name)
        if not (
            isinstance(meta, dict)
            and meta.get("texts_sha256") == digest
            and meta.get("fingerprint") == fingerprint
            and meta.get("rows") == rows
        ):
            return False
        vectors = np.load(folder / npy, mmap_mode="r", allow_pickle=False)
        return (
            vectors.shape == (rows, meta.get("dim"))
            and vectors.dtype == np.float32
            and _file_sha256(folder / npy) == meta.get("sha256")
        )
    except (OSError, ValueError, CtxirError):
        return False


class _ShardEncoder:
    """Ray Data actor: loads the bi-encoder once, then encodes whole shards and writes each one's files itself."""

    def __init__(self, model, pooling, layer, device: str, threads: int, batch_size: int, output_dir: str):
        import torch

        from ctxir.encoders.bi_encoder import BiEncoder

        if threads > 0 and device == "cpu":
            torch.set_num_threads(threads)
        self.encoder = BiEncoder(
            model, pooling=pooling, layer=layer, device=device, cache=False, batch_size=batch_size
        )
        self.fingerprint = encoder_fingerprint(self.encoder)
        self.output_dir = Path(output_dir)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        out: dict[str, list] = {"shard": [], "rows": [], "seconds": [], "worker": [], "fingerprint": []}
        for index, start, ids, texts, digest in zip(
            batch["shard"], batch["start"], batch["ids"], batch["texts"], batch["digest"], strict=True
        ):
            ids, texts = [str(i) for i in ids], [str(t) for t in texts]
            began = time.perf_counter()
            vectors = self.encoder.encode(texts)
            npy, meta_name = _shard_names(int(index))
            with atomic_path(self.output_dir / npy, suffix=".npy") as tmp:
                np.save(tmp, vectors, allow_pickle=False)
            # The meta file is written last: its presence marks the shard complete.
            write_json(
                self.output_dir / meta_name,
                {
                    "shard": int(index),
                    "start": int(start),
                    "rows": len(ids),
                    "dim": int(vectors.shape[1]),
                    "ids": ids,
                    "texts_sha256": str(digest),
                    "fingerprint": self.fingerprint,
                    "sha256": _file_sha256(self.output_dir / npy),
                },
                indent=None,
            )
            out["shard"].append(int(index))
            out["rows"].append(len(ids))
            out["seconds"].append(time.perf_counter() - began)
            out["worker"].append(self.worker)
            out["fingerprint"].append(self.fingerprint)
        return out


@dataclass
class ShardedEncoding:
    """What ``encode_sharded`` did: the manifest (also on disk), which shards it encoded and which it skipped."""

    manifest_path: Path
    manifest: dict
    encoded: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    docs_encoded: int = 0
    seconds: float = (
        0.0  # wall time of the Ray job (actors' start-up and model loading included), 0 if all skipped
    )
    ray_start_seconds: float = 0.0  # starting (or joining) Ray, when this call did it; not in ``seconds``
    workers: dict[str, int] = field(default_factory=dict)  # "host:pid" → shards it encoded
    shard_seconds: dict[int, float] = field(default_factory=dict)  # a worker's encoding time of each shard
    first_shard_seconds: float = (
        0.0  # job start → first shard back: mostly the actors' start-up and model loading
    )

    @property
    def docs_per_second(self) -> float:
        """End to end: encoded documents / ``seconds`` (start-up included)."""
        return self.docs_encoded / self.seconds if self.seconds > 0 else 0.0


def _ensure_ray(address: str | None, num_cpus: int, runtime_env: dict | None):
    try:
        import ray
    except ImportError as err:
        raise CtxirError(f"Ray is not installed: {INSTALL_HINT}") from err
    if ray.is_initialized():
        return ray  # the caller's Ray (e.g. ray.init(address="auto") with its own runtime_env): used as it is
    import ctxir

    env = dict(runtime_env or {})
    # Workers import ctxir from this copy: the package travels with the job, installed on the nodes or not.
    env.setdefault("py_modules", [str(Path(ctxir.__file__).parent)])
    forwarded = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
    env["env_vars"] = {**forwarded, **env.get("env_vars", {})}
    kwargs: dict[str, Any] = {
        "runtime_env": env,
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": "warning",
    }
    if address is None:
        kwargs["num_cpus"] = num_cpus  # a local Ray: enough CPU slots for the workers asked for
    ray.init(address=address, **kwargs)
    return ray


@dataclass(frozen=True)
class ShardingSettings:
    """How ``encode_sharded`` runs: the work's cut (``shard_size`` rows a file), each worker's resources, and Ray.

    ``batch_size`` is texts per forward pass. ``use_gpu=True`` gives each worker one GPU; otherwise
    ``threads_per_worker`` torch threads (1 suits a small shared CPU). ``pooling``/``layer`` apply when the model is
    a name or a ``SentenceTransformer`` (a ``BiEncoder`` brings its own). ``ray_address`` joins a running cluster
    ("auto" on a node); ``runtime_env`` is merged into the one that ships ctxir to the workers.
    """

    num_workers: int = 1
    batch_size: int = 32
    shard_size: int = 10_000
    use_gpu: bool = False
    threads_per_worker: int = 1
    pooling: str | None = None
    layer: int | None = None
    ray_address: str | None = None
    runtime_env: dict | None = None
    show_progress: bool = True

    def __post_init__(self):
        for name in ("num_workers", "batch_size", "shard_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CtxirError(f"{name} must be a whole number ≥ 1, got {value!r}")

    @property
    def resources(self) -> str:
        return "1 GPU" if self.use_gpu else f"{self.threads_per_worker} thread(s)"


def _settings(kind: type, settings, options: dict, argument: str):
    """``settings`` (an instance of ``kind``, or None for the defaults) with ``options`` (its field names) applied:
    the keyword form of the old signatures keeps working beside the dataclass."""
    if settings is not None and not isinstance(settings, kind):
        raise CtxirError(
            f"{argument} must be a {kind.__name__} or None, got {settings!r}: pass the other options "
            f"by keyword (e.g. num_workers=2), or as {kind.__name__}(...)"
        )
    valid = [f.name for f in fields(kind)]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise CtxirError(f"unknown option(s) {', '.join(map(repr, unknown))}: valid are {', '.join(valid)}")
    return replace(settings, **options) if settings is not None else kind(**options)


@dataclass
class _ShardJob:
    """One ``encode_sharded`` call's fixed facts: the rows, their cut into shards, and the model's identity."""

    folder: Path
    ids: list[str]
    texts: list[str]
    settings: ShardingSettings
    worker_model: Any  # what each worker loads: a name/folder, or the model object Ray ships to it
    model_name: str
    reference: Any  # a BiEncoder in this process: its fingerprint and dimension are the job's
    plan: list[tuple[int, int, int]] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        return encoder_fingerprint(self.reference)

    def say(self, message: str) -> None:
        if self.settings.show_progress:
            print(f"[encode_sharded] {message}", file=sys.stderr, flush=True)


def encode_sharded(
    source, model, output_dir: str | Path, settings: ShardingSettings | None = None, **options
) -> ShardedEncoding:
    """Encode ``source`` with ``num_workers`` Ray actors into ``output_dir``; return what was done.

    ``source``: a corpus ``{doc_id: {title, text}}`` (title + text are encoded, as ``BiEncoder.encode_corpus``
    does), a BEIR corpus file or folder, a list of texts (ids "0", "1", ...) or (doc_id, text) pairs. ``model``: a
    name or folder every worker can resolve, or a ``BiEncoder``/``SentenceTransformer`` (shipped to the workers by
    Ray). ``settings`` (``ShardingSettings``), or its fields by keyword (``num_workers=2, shard_size=30``), say how
    it runs. The files and their values do not depend on ``num_workers``: shards are cut by row, and each is
    encoded whole by one worker.

    Ray is started here if it is not running (locally, or joining ``ray_address``, e.g. "auto" on a cluster node),
    with ctxir shipped to the workers through ``runtime_env``; a Ray the caller started is used as is.
    """
    job = _shard_job(
        source, model, Path(output_dir), _settings(ShardingSettings, settings, options, "settings")
    )
    fingerprint = job.fingerprint
    todo = [
        (i, a, b)
        for i, a, b in job.plan
        if not _shard_complete(job.folder, i, job.digests[i], fingerprint, b - a)
    ]
    result = ShardedEncoding(
        job.folder / MANIFEST_NAME, {}, skipped=sorted(set(range(len(job.plan))) - {i for i, _, _ in todo})
    )
    job.say(
        f"{len(job.ids):,} docs in {len(job.plan)} shards of ≤{job.settings.shard_size:,}; "
        f"{len(result.skipped)} already written, {len(todo)} to encode with {job.settings.num_workers} "
        f"worker(s) ({job.settings.resources} each)"
    )
    if todo:
        _encode_shards(job, todo, result)
    result.encoded.sort()
    result.manifest = _write_manifest(job, result.manifest_path)
    job.say(
        f"manifest {result.manifest_path}: {len(job.ids):,} docs, {len(result.encoded)} shard(s) encoded, "
        f"{len(result.skipped)} skipped"
        + (f", {result.docs_per_second:,.0f} docs/s" if result.seconds else "")
    )
    return result


def _shard_job(source, model, folder: Path, settings: ShardingSettings) -> _ShardJob:
    """Read and check the rows, resolve the model here once (its fingerprint and dimension), cut the shards."""
    from ctxir.encoders.bi_encoder import BiEncoder

    ids, texts = _source_rows(source)
    if not ids:
        raise CtxirError("source is empty: nothing to encode")
    if len(set(ids)) != len(ids):
        raise CtxirError("source has repeated document ids: each id must be unique")
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(model, BiEncoder):
        # The BiEncoder's own pooling and layer are the ones the workers must use.
        settings = replace(settings, pooling=model.pooling, layer=model.layer)
        job = _ShardJob(folder, ids, texts, settings, model.model, model.name, model)
    else:
        name = model if isinstance(model, str) else type(model).__name__
        reference = BiEncoder(
            model, pooling=settings.pooling, layer=settings.layer, device="cpu", cache=False
        )
        job = _ShardJob(folder, ids, texts, settings, model, name, reference)
    job.plan = shard_plan(len(ids), settings.shard_size)
    job.digests = [texts_digest(ids[a:b], texts[a:b]) for _, a, b in job.plan]
    return job


def _encode_shards(job: _ShardJob, todo: list[tuple[int, int, int]], result: ShardedEncoding) -> None:
    """The Ray Data job: one item a shard, a pool of ``_ShardEncoder`` actors; fills ``result`` as shards come back."""
    settings, fingerprint = job.settings, job.fingerprint
    began = time.perf_counter()
    _ensure_ray(
        settings.ray_address,
        max(os.cpu_count() or 1, settings.num_workers * max(settings.threads_per_worker, 1)),
        settings.runtime_env,
    )
    import ray.data

    result.ray_start_seconds = time.perf_counter() - began
    began = time.perf_counter()
    context = ray.data.DataContext.get_current()
    progress_bars, context.enable_progress_bars = context.enable_progress_bars, False
    items = [
        {"shard": i, "start": a, "ids": job.ids[a:b], "texts": job.texts[a:b], "digest": job.digests[i]}
        for i, a, b in todo
    ]
    resources = {"num_gpus": 1} if settings.use_gpu else {"num_cpus": max(settings.threads_per_worker, 1)}
    dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        _ShardEncoder,
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=min(settings.num_workers, len(items))),
        fn_constructor_kwargs={
            "model": job.worker_model,
            "pooling": settings.pooling,
            "layer": settings.layer,
            "device": "cuda" if settings.use_gpu else "cpu",
            "threads": settings.threads_per_worker,
            "batch_size": settings.batch_size,
            "output_dir": str(job.folder.resolve()),
        },
        **resources,
    )
    try:
        for row in dataset.iter_rows():
            if row["fingerprint"] != fingerprint:
                raise CtxirError(
                    f"worker {row['worker']} encoded with different weights (fingerprint "
                    f"{row['fingerprint']}, expected {fingerprint}): every node must resolve "
                    f"{job.model_name!r} to the same model"
                )
            _record_shard(result, row, time.perf_counter() - began)
            job.say(
                f"shard {row['shard']} ({row['rows']:,} docs, {row['seconds']:.1f} s on {row['worker']}) · "
                f"{len(result.encoded)}/{len(todo)} done · "
                f"{result.docs_encoded / (time.perf_counter() - began):,.0f} docs/s"
            )
    except Exception as err:
        if isinstance(err, CtxirError):
            raise
        raise CtxirError(
            f"the Ray encoding job failed ({type(err).__name__}): {str(err)[-2000:]}; "
            f"the shards written so far are kept and a rerun resumes from them"
        ) from err
    finally:
        context.enable_progress_bars = progress_bars
    result.seconds = time.perf_counter() - began


def _record_shard(result: ShardedEncoding, row: dict, elapsed: float) -> None:
    result.encoded.append(int(row["shard"]))
    result.docs_encoded += int(row["rows"])
    result.workers[row["worker"]] = result.workers.get(row["worker"], 0) + 1
    result.shard_seconds[int(row["shard"])] = float(row["seconds"])
    result.first_shard_seconds = result.first_shard_seconds or elapsed


def _write_manifest(job: _ShardJob, path: Path) -> dict:
    """manifest.json over every shard of the plan (encoded now or before), from the shards' own meta files."""
    shards = []
    for i, a, b in job.plan:
        npy, meta_name = _shard_names(i)
        meta = read_json(job.folder / meta_name)
        shards.append(
            {
                "shard": i,
                "file": npy,
                "meta": meta_name,
                "start": a,
                "rows": b - a,
                "sha256": meta["sha256"],
                "texts_sha256": job.digests[i],
            }
        )
    ids_sha256 = hashlib.sha256("\x00".join(job.ids).encode("utf-8", "surrogatepass")).hexdigest()
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": str(job.model_name),
        "fingerprint": job.fingerprint,
        "encoder": {k: v for k, v in job.reference.config.items() if k != "model"},
        "dim": job.reference.dimension,
        "dtype": "float32",
        "normalized": True,
        "rows": len(job.ids),
        "shard_size": job.settings.shard_size,
        "ids_sha256": ids_sha256,
        "shards": shards,
    }
    write_json(path, manifest)
    return manifest


def read_manifest(path: str | Path) -> dict:
    """A manifest written by ``encode_sharded`` (the file, or the folder holding it), checked for completeness."""
    path = Path(path)
    path = path / MANIFEST_NAME if path.is_dir() else path
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise CtxirError(f"{path} is not a ctxir shard manifest (format {MANIFEST_FORMAT!r})")
    manifest = dict(manifest, folder=str(path.parent))
    missing = [s["file"] for s in manifest["shards"] if not (path.parent / s["file"]).is_file()]
    if missing:
        raise CtxirError(
            f"{path} names {len(missing)} shard file(s) that are missing, e.g. {missing[0]}: "
            "rerun encode_sharded into the same folder to write them"
        )
    return manifest


def iter_shards(manifest: dict | str | Path, verify: bool = True) -> Iterator[tuple[list[str], np.ndarray]]:
    """(ids, vectors) per shard in order, one shard in memory at a time; ``verify`` checks each file's sha256."""
    manifest = read_manifest(manifest) if not isinstance(manifest, dict) else manifest
    folder = Path(manifest["folder"])
    for shard in manifest["shards"]:
        path = folder / shard["file"]
        if verify and _file_sha256(path) != shard["sha256"]:
            raise CtxirError(
                f"{path} does not match its manifest (sha256): rerun encode_sharded to rewrite it"
            )
        vectors = np.load(path, allow_pickle=False)
        meta = read_json(folder / shard["meta"])
        if vectors.shape != (shard["rows"], manifest["dim"]) or len(meta["ids"]) != shard["rows"]:
            raise CtxirError(
                f"{path} holds {vectors.shape} vectors, the manifest says ({shard['rows']}, "
                f"{manifest['dim']}): rerun encode_sharded to rewrite it"
            )
        yield [str(i) for i in meta["ids"]], vectors


# ------------------------------------------------------------------------------------------------ Milvus retrieval

ENGINE_MODES = ("dense", "bm25", "hybrid")
INDEX_TYPES = ("FLAT", "HNSW", "IVF_FLAT", "AUTOINDEX")
# Milvus caps: results per query, queries per request, bytes in a VARCHAR field.
MAX_LIMIT, QUERY_CHUNK, MAX_VARCHAR = 16_384, 256, 65_535
ID_MAX_LENGTH = 512
META_PROPERTY = "ctxir.meta"


def engine_of(uri: str) -> str:
    """'milvus-lite' for a local ``*.db`` file (embedded), 'milvus' for a server URL; anything else is an error."""
    uri = str(uri)
    if uri.startswith(("http://", "https://", "tcp://", "unix:")):
        return "milvus"
    if uri.endswith(".db"):
        return "milvus-lite"
    raise CtxirError(
        f"uri {uri!r} is neither a local Milvus Lite file (ending .db, e.g. 'ctxir.db') nor a Milvus "
        "server URL (e.g. 'http://localhost:19530')"
    )


def default_analyzer() -> dict:
    """BM25 analyzer both Milvus Lite and the server accept: words, lower-cased, bm25s's English stop words.

    No stemming: Milvus Lite has no stemmer filter (the server has ``{"type": "stemmer", "language": "english"}``;
    pass it in ``analyzer_params`` for a server-only collection). ctxir's own BM25Retriever stems.
    """
    from bm25s.stopwords import STOPWORDS_EN

    return {
        "tokenizer": "standard",
        "filter": ["lowercase", {"type": "stop", "stop_words": sorted(STOPWORDS_EN)}],
    }


def _pymilvus():
    try:
        import pymilvus
    except ImportError as err:
        raise CtxirError(f"pymilvus is not installed: {INSTALL_HINT}") from err
    return pymilvus


def connect(uri: str, token: str | None = None):
    """A ``MilvusClient``: Milvus Lite in this process for a ``*.db`` file, else the server at the URL."""
    pymilvus = _pymilvus()
    if engine_of(uri) == "milvus-lite":
        try:
            import milvus_lite  # noqa: F401
        except ImportError as err:
            raise CtxirError(
                f"milvus-lite is not installed (needed for the local file {uri!r}): {INSTALL_HINT}"
            ) from err
        Path(uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        uri = str(Path(uri).expanduser().resolve())
    return pymilvus.MilvusClient(uri=uri, token=token or "")


def _clip_utf8(text: str, limit: int = MAX_VARCHAR) -> str:
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def _row(doc_id: str, doc: Mapping, vector: np.ndarray | None) -> dict:
    if len(doc_id.encode("utf-8", "surrogatepass")) > ID_MAX_LENGTH:
        raise CtxirError(
            f"document id {doc_id[:40]!r}... is longer than {ID_MAX_LENGTH} bytes, Milvus's limit here"
        )
    title = (doc.get("title") or "").strip()
    row = {"pk": doc_id, "title": _clip_utf8(title), "content": _clip_utf8(doc_text(doc))}
    if vector is not None:
        row["dense"] = vector.tolist()
    return row


class EngineCorpus(Mapping):
    """The documents as the engine stores them (title, title + text), read back by id: a re-ranker or the app can use
    the corpus without this process holding it. Recent look-ups are cached; ``VectorDBRetriever`` fills the cache with
    the texts of the hits it returns, so a re-ranker's look-ups cost no round trip."""

    def __init__(self, client, collection: str, cache_size: int = 10_000):
        self.client, self.collection, self.cache_size = client, collection, cache_size
        self._cache: OrderedDict[str, Doc] = OrderedDict()

    @staticmethod
    def doc(title: str, content: str) -> Doc:
        text = content[len(title) :].lstrip() if title and content.startswith(title) else content
        return {"title": title, "text": text}  # doc_text() of this is the stored content

    def remember(self, doc_id: str, doc: Doc) -> None:
        self._cache[doc_id] = doc
        self._cache.move_to_end(doc_id)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def fetch(self, ids: Iterable[str]) -> None:
        missing = [i for i in dict.fromkeys(ids) if i not in self._cache]
        for start in range(0, len(missing), 1000):
            rows = self.client.get(
                self.collection, ids=missing[start : start + 1000], output_fields=["title", "content"]
            )
            for row in rows:
                self.remember(str(row["pk"]), self.doc(row["title"], row["content"]))

    def __getitem__(self, doc_id: str) -> Doc:
        if doc_id not in self._cache:
            self.fetch([doc_id])
        if doc_id not in self._cache:
            raise KeyError(doc_id)
        self._cache.move_to_end(doc_id)
        return self._cache[doc_id]

    def __contains__(self, doc_id) -> bool:
        try:
            self[doc_id]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        iterator = self.client.query_iterator(self.collection, batch_size=1000, output_fields=["pk"])
        try:
            while batch := iterator.next():
                yield from (str(row["pk"]) for row in batch)
        finally:
            iterator.close()

    def __len__(self) -> int:
        return int(self.client.get_collection_stats(self.collection)["row_count"])


@dataclass(frozen=True)
class EngineSearchSettings:
    """How ``VectorDBRetriever`` searches: ``rrf_k``, the constant of the engine's RRF in "hybrid"; ``depth``, the
    candidates each side (dense, BM25) brings to that fusion; ``ef_search``, an HNSW index's search breadth (at
    least the results asked for)."""

    rrf_k: float = 60.0
    depth: int = 100
    ef_search: int = 128


class VectorDBRetriever(Retriever):
    """Dense, BM25 or hybrid search in a Milvus collection; ``uri`` picks Milvus Lite (a ``*.db`` file) or a server.

    Build a collection with ``from_corpus`` (encodes here, through the embedding cache) or ``from_shards`` (vectors
    from ``encode_sharded``); open an existing one with the constructor. The collection records the encoder's
    fingerprint and the corpus digest, and opening it with another model, or another corpus, is refused.

    Scores: cosine for "dense" (FLAT index: exact, the same ranking as ``DenseRetriever(index="exact")``), Milvus's
    BM25 for "bm25", the engine's RRF (Σ 1/(k + rank)) for "hybrid". ``corpus=None`` reads documents back from the
    engine (``EngineCorpus``) instead of holding them.

    Usage (a model is needed, so not a doctest; tests/test_engines.py runs it with a tiny one)::

        retriever = VectorDBRetriever.from_corpus(corpus, BiEncoder(), uri="ctxir.db", mode="hybrid")  # builds
        retriever = VectorDBRetriever(None, BiEncoder(), uri="http://milvus:19530", mode="hybrid")  # opens
        Pipeline(retriever, CrossEncoderReranker()).search("where do otters live?")
    """

    name = "milvus"
    config_fields = (
        "engine",
        "collection",
        "mode",
        "index_type",
        "metric",
        "rrf_k",
        "depth",
        "bm25_k1",
        "bm25_b",
        "analyzer",
    )

    def __init__(
        self,
        corpus: Corpus | None,
        encoder=None,
        uri: str = "ctxir.db",
        collection: str = "ctxir",
        mode: str = "dense",
        *,
        token: str | None = None,
        client=None,
        settings: EngineSearchSettings | None = None,
        **options,
    ):
        """``settings`` (``EngineSearchSettings``), or its fields by keyword (``rrf_k=60, depth=100,
        ef_search=128``), say how the engine searches."""
        settings = _settings(EngineSearchSettings, settings, options, "settings")
        self.mode = check_choice(mode, "mode", ENGINE_MODES)
        self.uri, self.engine, self.collection = str(uri), engine_of(uri), collection
        self.client = client or connect(uri, token)
        if not self.client.has_collection(collection):
            raise CtxirError(
                f"collection {collection!r} does not exist at {uri}: build it with "
                "VectorDBRetriever.from_corpus(...) or .from_shards(...)"
            )
        self.meta = self._read_meta()
        if self.meta.get("complete") is False:
            raise CtxirError(
                f"collection {collection!r} was not finished (its build was interrupted): build it again "
                "with from_corpus or from_shards"
            )
        self.index_type, self.metric = self.meta["index_type"], "COSINE"
        self.bm25_k1, self.bm25_b, self.analyzer = (
            self.meta.get("bm25_k1"),
            self.meta.get("bm25_b"),
            self.meta.get("analyzer"),
        )
        self.rrf_k, self.depth, self.ef_search = (
            float(settings.rrf_k),
            int(settings.depth),
            int(settings.ef_search),
        )
        if self.mode != "dense" and not self.meta.get("bm25"):
            raise CtxirError(
                f"collection {collection!r} was built without BM25: rebuild it with bm25=True for "
                f"mode {self.mode!r}, or use mode 'dense'"
            )
        self.encoder = None
        if self.mode != "bm25":
            from ctxir.encoders.bi_encoder import BiEncoder

            self.encoder = encoder or BiEncoder()
            if encoder_fingerprint(self.encoder) != self.meta["fingerprint"]:
                raise CtxirError(
                    f"collection {collection!r} holds vectors of another model or pooling (fingerprint "
                    f"{self.meta['fingerprint']}, this encoder's {encoder_fingerprint(self.encoder)}): "
                    "pass the encoder it was built with, or rebuild it with overwrite=True"
                )
        self.client.load_collection(collection)
        self.rows = int(self.client.get_collection_stats(collection)["row_count"])
        if corpus is None:
            corpus = EngineCorpus(self.client, collection)
        elif len(corpus) != self.rows:
            raise CtxirError(
                f"collection {collection!r} holds {self.rows:,} documents, the corpus {len(corpus):,}: "
                "rebuild it with overwrite=True, or pass corpus=None to read documents from the engine"
            )
        self.corpus = check_corpus(
            corpus
        )  # not Retriever.__init__: the ids need not be listed in this process

    @property
    def doc_ids(self) -> list[str]:
        return list(self.corpus)

    @property
    def config(self) -> dict:
        return {**super().config, **(self.encoder.config if self.encoder is not None else {})}

    def _read_meta(self) -> dict:
        properties = self.client.describe_collection(self.collection).get("properties") or {}
        try:
            return json.loads(properties[META_PROPERTY])
        except (KeyError, TypeError, ValueError) as err:
            raise CtxirError(
                f"collection {self.collection!r} was not built by ctxir (no {META_PROPERTY} property): "
                "build it with VectorDBRetriever.from_corpus or .from_shards"
            ) from err

    # ---------------------------------------------------------------- building

    @classmethod
    def from_corpus(
        cls,
        corpus: Corpus,
        encoder=None,
        uri: str = "ctxir.db",
        collection: str = "ctxir",
        mode: str = "dense",
        **kwargs,
    ) -> VectorDBRetriever:
        """Encode ``corpus`` here (``BiEncoder.encode_corpus``: cached on disk) and load it into the collection.

        ``kwargs``: the constructor's (token, rrf_k, depth, ef_search) and ``build_collection``'s (bm25,
        index_type, overwrite, analyzer_params, bm25_k1, bm25_b, insert_batch, hnsw_m, ef_construction).
        """
        from ctxir.encoders.bi_encoder import BiEncoder

        check_corpus(corpus)
        encoder = encoder or BiEncoder()
        build, open_kwargs = _split_build_kwargs(kwargs)
        client = connect(uri, open_kwargs.get("token"))
        ids = list(corpus)
        digest = texts_digest(ids, [doc_text(corpus[i]) for i in ids])

        def batches():
            _, vectors = encoder.encode_corpus(corpus)
            yield ids, vectors

        build_collection(
            client,
            collection,
            batches(),
            corpus,
            encoder_fingerprint(encoder),
            encoder.dimension,
            digest,
            build,
        )
        return cls(corpus, encoder, uri, collection, mode, client=client, **open_kwargs)

    @classmethod
    def from_shards(
        cls,
        manifest: dict | str | Path,
        corpus: Corpus,
        encoder=None,
        uri: str = "ctxir.db",
        collection: str = "ctxir",
        mode: str = "dense",
        keep_corpus: bool = True,
        **kwargs,
    ) -> VectorDBRetriever:
        """Load ``encode_sharded``'s shards into the collection, one shard in memory at a time.

        ``corpus`` supplies the texts (for BM25 and re-ranking); each shard's texts must be those it was encoded
        from. ``encoder`` (for queries) must be the model of the manifest. ``keep_corpus=False`` returns a retriever
        that reads documents back from the engine instead of holding ``corpus``.
        """
        from ctxir.encoders.bi_encoder import BiEncoder

        manifest = read_manifest(manifest) if not isinstance(manifest, dict) else manifest
        encoder = encoder or BiEncoder()
        if encoder_fingerprint(encoder) != manifest["fingerprint"]:
            raise CtxirError(
                f"the shards were encoded by another model or pooling (fingerprint "
                f"{manifest['fingerprint']}, this encoder's {encoder_fingerprint(encoder)}): pass the "
                f"query encoder for {manifest['model']!r}"
            )
        if len(corpus) != manifest["rows"]:
            raise CtxirError(f"the manifest holds {manifest['rows']:,} documents, the corpus {len(corpus):,}")
        build, open_kwargs = _split_build_kwargs(kwargs)
        client = connect(uri, open_kwargs.get("token"))
        ids = list(corpus)
        digest = texts_digest(ids, [doc_text(corpus[i]) for i in ids])

        def batches():
            for shard, (shard_ids, vectors) in zip(manifest["shards"], iter_shards(manifest), strict=True):
                missing = [i for i in shard_ids if i not in corpus]
                if missing:
                    raise CtxirError(
                        f"shard {shard['file']} names documents the corpus lacks, e.g. {missing[0]!r}"
                    )
                if texts_digest(shard_ids, [doc_text(corpus[i]) for i in shard_ids]) != shard["texts_sha256"]:
                    raise CtxirError(
                        f"shard {shard['file']} was encoded from other texts than this corpus holds: "
                        "rerun encode_sharded on this corpus"
                    )
                yield shard_ids, vectors

        build_collection(
            client, collection, batches(), corpus, manifest["fingerprint"], manifest["dim"], digest, build
        )
        return cls(
            corpus if keep_corpus else None, encoder, uri, collection, mode, client=client, **open_kwargs
        )

    # ---------------------------------------------------------------- search

    def _limit(self, top_k: int) -> int:
        return max(1, min(top_k, self.rows, MAX_LIMIT))

    def _output_fields(self) -> list[str]:
        return ["pk", "title", "content"] if isinstance(self.corpus, EngineCorpus) else ["pk"]

    def _hits(self, rows, bm25: bool = False) -> list[Hit]:
        hits = []
        for row in rows:
            entity = row.get("entity") or {}
            if isinstance(self.corpus, EngineCorpus) and "content" in entity:
                self.corpus.remember(
                    str(row["pk"]), EngineCorpus.doc(entity.get("title", ""), entity["content"])
                )
            # Milvus Lite reports BM25 as a negative distance, the server as a positive score: the score is its size.
            hits.append(Hit(str(row["pk"]), abs(float(row["distance"])) if bm25 else float(row["distance"])))
        return hits

    def _dense_request(self, vectors: np.ndarray, limit: int) -> dict:
        params: dict[str, Any] = {"metric_type": "COSINE"}
        if self.index_type == "HNSW":
            params["params"] = {"ef": max(self.ef_search, limit)}
        return {"data": vectors.tolist(), "anns_field": "dense", "param": params, "limit": limit}

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        results: list[list[Hit]] = []
        for start in range(0, len(texts), QUERY_CHUNK):
            results.extend(self._search_chunk(texts[start : start + QUERY_CHUNK], top_k))
        return results

    def _search_chunk(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        vectors = (
            None if self.mode == "bm25" else self.encoder.encode(texts, show_progress_bar=len(texts) > 256)
        )
        return self.search_embeddings(vectors, top_k, texts)

    def search_embeddings(
        self, query_embeddings: np.ndarray | None, top_k: int, texts: Sequence[str] | None = None
    ) -> list[list[Hit]]:
        """The model-free core, as ``DenseRetriever.search_embeddings``: (queries, dim) normalised vectors → hits;
        ``texts`` too for "bm25" and "hybrid" (the engine tokenises them). Up to 16,384 queries a call."""
        limit, fields = self._limit(top_k), self._output_fields()
        if self.mode == "bm25":
            rows = self.client.search(
                self.collection,
                data=list(texts),
                anns_field="sparse",
                limit=limit,
                search_params={"metric_type": "BM25"},
                output_fields=fields,
            )
            return [[h for h in self._hits(r, bm25=True) if h.score > 0] for r in rows]
        if self.mode == "dense":
            request = self._dense_request(query_embeddings, limit)
            rows = self.client.search(
                self.collection,
                data=request["data"],
                anns_field="dense",
                limit=limit,
                search_params=request["param"],
                output_fields=fields,
            )
            return [self._hits(r) for r in rows]
        pymilvus = _pymilvus()
        depth = self._limit(max(self.depth, top_k))
        requests = [
            pymilvus.AnnSearchRequest(**self._dense_request(query_embeddings, depth)),
            pymilvus.AnnSearchRequest(
                data=list(texts), anns_field="sparse", param={"metric_type": "BM25"}, limit=depth
            ),
        ]
        rows = self.client.hybrid_search(
            self.collection, requests, pymilvus.RRFRanker(self.rrf_k), limit=limit, output_fields=fields
        )
        return [self._hits(r) for r in rows]

    def search_parts(self, texts: list[str], top_k: int) -> dict[str, list[list[Hit]]]:
        """The engine's dense and BM25 rankings separately (what "hybrid" fuses), e.g. to fuse with
        ctxir.retrieval.fusion."""
        out = {}
        for mode in ("dense", "bm25"):
            saved, self.mode = self.mode, mode
            try:
                out[mode] = self._search(texts, top_k)
            finally:
                self.mode = saved
        return out


@dataclass(frozen=True)
class CollectionSettings:
    """How ``build_collection`` lays out a collection: the BM25 field and its analyzer, the dense index, the insert.

    ``index_type``: one of ``INDEX_TYPES`` (FLAT is exact; HNSW takes ``hnsw_m`` and ``ef_construction``).
    ``overwrite=True`` replaces a collection built from another corpus, model or settings.
    """

    bm25: bool = True
    index_type: str = "FLAT"
    overwrite: bool = False
    analyzer_params: dict | None = None
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    insert_batch: int = 1000
    hnsw_m: int = 32
    ef_construction: int = 200
    show_progress: bool = False

    def __post_init__(self):
        check_choice(self.index_type, "index_type", INDEX_TYPES)

    def meta(self, fingerprint: str, dim: int, corpus_digest: str, rows: int) -> dict:
        """What the collection records of itself: a collection with the same meta is kept as it is."""
        analyzer = self.analyzer_params or default_analyzer()
        return {
            "fingerprint": fingerprint,
            "dim": int(dim),
            "corpus_sha256": corpus_digest,
            "rows": rows,
            "bm25": bool(self.bm25),
            "index_type": self.index_type,
            "metric": "COSINE",
            "bm25_k1": self.bm25_k1 if self.bm25 else None,
            "bm25_b": self.bm25_b if self.bm25 else None,
            "analyzer": json.dumps(analyzer, sort_keys=True) if self.bm25 else None,
        }


_BUILD_KEYS = tuple(f.name for f in fields(CollectionSettings))
_OPEN_KEYS = ("token", "rrf_k", "depth", "ef_search")


def _split_build_kwargs(kwargs: dict) -> tuple[CollectionSettings, dict]:
    """``from_corpus``/``from_shards`` options → (the build's settings, the constructor's options)."""
    build = {k: kwargs.pop(k) for k in list(kwargs) if k in _BUILD_KEYS}
    unknown = set(kwargs) - set(_OPEN_KEYS)
    if unknown:
        raise CtxirError(
            f"unknown option(s) {', '.join(sorted(unknown))}: use {', '.join(_BUILD_KEYS)}, "
            f"{', '.join(_OPEN_KEYS)}"
        )
    return CollectionSettings(**build), kwargs


def build_collection(
    client,
    collection: str,
    batches: Iterable[tuple[list[str], np.ndarray]],
    corpus: Mapping,
    fingerprint: str,
    dim: int,
    corpus_digest: str,
    settings: CollectionSettings | None = None,
    **options,
) -> bool:
    """Create ``collection`` (pk, title, content [+ BM25 sparse], dense) and insert ``batches`` of (ids, vectors).

    ``settings`` (``CollectionSettings``), or its fields by keyword (``bm25=False, index_type="HNSW"``), lay it out.
    An existing collection built from the same corpus, model and settings is kept as it is (returns False: nothing
    inserted); one built otherwise is replaced only with ``overwrite=True``.
    """
    settings = _settings(CollectionSettings, settings, options, "settings")
    meta = settings.meta(fingerprint, dim, corpus_digest, len(corpus))
    if client.has_collection(collection):
        if _is_built(client, collection, meta, len(corpus), settings.overwrite):
            return False
        client.drop_collection(collection)
    _create_collection(client, collection, meta, settings)
    inserted = _insert(client, collection, batches, corpus, int(dim), settings)
    if inserted != len(corpus):
        raise CtxirError(f"inserted {inserted:,} documents, the corpus holds {len(corpus):,}")
    client.flush(collection)
    # Marked complete only now: a build killed half-way is never taken for a finished one.
    client.alter_collection_properties(collection, properties={META_PROPERTY: json.dumps(meta)})
    return True


def _is_built(client, collection: str, meta: dict, rows: int, overwrite: bool = False) -> bool:
    """True when the existing collection is this build; False when it may be replaced; otherwise an error."""
    properties = client.describe_collection(collection).get("properties") or {}
    old = json.loads(properties[META_PROPERTY]) if META_PROPERTY in properties else None
    if old == meta and int(client.get_collection_stats(collection)["row_count"]) == rows:
        return True
    interrupted = isinstance(old, dict) and old.get("complete") is False  # ctxir's own build, killed half-way
    if not (overwrite or interrupted):
        raise CtxirError(
            f"collection {collection!r} already exists and was built from another corpus, model or "
            "settings: pass overwrite=True to replace it, or choose another collection name"
        )
    return False


def _create_collection(client, collection: str, meta: dict, settings: CollectionSettings) -> None:
    """The schema and its indexes; the meta is stored marked incomplete until every row is in."""
    pymilvus = _pymilvus()
    DataType = pymilvus.DataType
    analyzer = settings.analyzer_params or default_analyzer()
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=ID_MAX_LENGTH)
    schema.add_field("title", DataType.VARCHAR, max_length=MAX_VARCHAR)
    schema.add_field(
        "content",
        DataType.VARCHAR,
        max_length=MAX_VARCHAR,
        **({"enable_analyzer": True, "analyzer_params": analyzer} if settings.bm25 else {}),
    )
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=meta["dim"])
    index = client.prepare_index_params()
    params = (
        {"M": settings.hnsw_m, "efConstruction": settings.ef_construction}
        if settings.index_type == "HNSW"
        else {}
    )
    if settings.index_type == "IVF_FLAT":
        params = {"nlist": max(1, min(4096, int(np.sqrt(max(meta["rows"], 1)))))}
    index.add_index("dense", index_type=settings.index_type, metric_type="COSINE", params=params)
    if settings.bm25:
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            pymilvus.Function(
                name="content_bm25",
                function_type=pymilvus.FunctionType.BM25,
                input_field_names=["content"],
                output_field_names=["sparse"],
            )
        )
        index.add_index(
            "sparse",
            index_type="SPARSE_INVERTED_INDEX",
            metric_type="BM25",
            params={"bm25_k1": settings.bm25_k1, "bm25_b": settings.bm25_b},
        )
    client.create_collection(
        collection,
        schema=schema,
        index_params=index,
        consistency_level="Strong",
        properties={META_PROPERTY: json.dumps({**meta, "complete": False})},
    )


def _insert(
    client,
    collection: str,
    batches: Iterable[tuple[list[str], np.ndarray]],
    corpus: Mapping,
    dim: int,
    settings: CollectionSettings,
) -> int:
    """Insert (ids, vectors) batches in chunks of ``insert_batch`` rows; the number of rows inserted."""
    inserted, began, step = 0, time.perf_counter(), settings.insert_batch
    for ids, vectors in batches:
        if vectors.shape != (len(ids), dim):
            raise CtxirError(f"got {vectors.shape} vectors for {len(ids)} ids of dimension {dim}")
        for start in range(0, len(ids), step):
            chunk = [
                _row(i, corpus[i], v)
                for i, v in zip(ids[start : start + step], vectors[start : start + step], strict=True)
            ]
            client.insert(collection, chunk)
            inserted += len(chunk)
        if settings.show_progress:
            print(
                f"[milvus] {inserted:,}/{len(corpus):,} inserted ({inserted / (time.perf_counter() - began):,.0f}/s)",
                file=sys.stderr,
                flush=True,
            )
    return inserted
