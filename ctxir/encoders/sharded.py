"""``encode_sharded``: a Ray Data job whose workers encode a corpus into embedding shards (``shards.py``), each
written by its worker, the manifest by the driver; a rerun skips shards already written for the same texts and model."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_options
from ctxir.encoders.shards import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    encoder_fingerprint,
    shard_complete,
    shard_names,
    shard_plan,
    texts_digest,
)
from ctxir.files import atomic_path, file_sha256, read_json, write_json
from ctxir.types import Corpus, CtxirError, doc_text

INSTALL_HINT = "pip install pymilvus==3.0.2 milvus-lite==3.2.2 'ray[data]==2.60.0'"
# what a worker on another node needs to resolve models as this driver does
_FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "CTXIR_CACHE")


class _ShardEncoder:
    """Ray Data actor: loads the bi-encoder once, then encodes whole shards and writes each one's files."""

    def __init__(
        self,
        model,
        pooling,
        layer,
        device: str,
        threads: int,
        batch_size: int,
        output_dir: str,
        document_prompt: str | None = None,
    ):
        import torch

        from ctxir.encoders.bi_encoder import BiEncoder

        if threads > 0 and device == "cpu":
            torch.set_num_threads(threads)
        self.encoder = BiEncoder(
            model,
            pooling=pooling,
            layer=layer,
            device=device,
            cache=False,
            batch_size=batch_size,
            document_prompt=document_prompt,
        )
        self.fingerprint = encoder_fingerprint(self.encoder)
        self.output_dir = Path(output_dir)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        out: dict[str, list] = {key: [] for key in ("shard", "rows", "seconds", "worker", "fingerprint")}
        for index, start, ids, texts, digest in zip(
            batch["shard"], batch["start"], batch["ids"], batch["texts"], batch["digest"], strict=True
        ):
            ids, texts = [str(i) for i in ids], [str(t) for t in texts]
            began = time.perf_counter()
            vectors = self.encoder.encode(texts, role="document")
            npy, meta_name = shard_names(int(index))
            with atomic_path(self.output_dir / npy, suffix=".npy") as tmp:
                np.save(tmp, vectors, allow_pickle=False)
            # the meta file last: its presence marks the shard complete
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
                    "sha256": file_sha256(self.output_dir / npy),
                },
                indent=None,
            )
            row = (int(index), len(ids), time.perf_counter() - began, self.worker, self.fingerprint)
            for values, value in zip(out.values(), row, strict=True):
                values.append(value)
        return out


@dataclass
class ShardedEncoding:
    """What ``encode_sharded`` did: the manifest (also on disk), which shards it encoded and which it skipped."""

    manifest_path: Path
    manifest: dict
    encoded: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    docs_encoded: int = 0
    seconds: float = 0.0  # wall time of the Ray job, 0 if all skipped
    workers: dict[str, int] = field(default_factory=dict)  # "host:pid" → shards it encoded


def _ensure_ray(address: str | None, num_cpus: int, runtime_env: dict | None):
    try:
        import ray
    except ImportError as err:
        raise CtxirError(f"Ray is not installed: {INSTALL_HINT}") from err
    if ray.is_initialized():
        return ray  # the caller's Ray, as it is
    env = dict(runtime_env or {})
    # workers import ctxir from this copy, installed on the nodes or not
    env.setdefault("py_modules", [str(Path(__file__).resolve().parents[1])])
    forwarded = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
    env["env_vars"] = {**forwarded, **env.get("env_vars", {})}
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "warning"}
    cpus = {"num_cpus": num_cpus} if address is None else {}
    ray.init(address=address, runtime_env=env, **quiet, **cpus)
    return ray


@dataclass(frozen=True)
class ShardingSettings:
    """How ``encode_sharded`` runs: rows a file, each worker's GPU or CPU thread, the encoder's settings, Ray."""

    num_workers: int = 1
    batch_size: int = 32
    shard_size: int = 10_000
    use_gpu: bool = False
    pooling: str | None = None
    layer: int | None = None
    document_prompt: str | None = None
    ray_address: str | None = None
    runtime_env: dict | None = None
    show_progress: bool = True

    def __post_init__(self):
        for name in ("num_workers", "batch_size", "shard_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CtxirError(f"{name} must be a whole number ≥ 1, got {value!r}")


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
    plan: list[tuple[int, int, int]]  # (shard, first row, end row)
    digests: list[str]  # each shard's texts_digest
    fingerprint: str  # encoder_fingerprint(reference)

    def say(self, message: str) -> None:
        if self.settings.show_progress:
            print(f"[encode_sharded] {message}", file=sys.stderr, flush=True)


def encode_sharded(corpus: Corpus, model, output_dir: str | Path, **options) -> ShardedEncoding:
    """Encode ``corpus`` with Ray actors into ``output_dir``; ``model``: a name, ``BiEncoder`` or ``SentenceTransformer``."""
    job = _shard_job(corpus, model, Path(output_dir), check_options(ShardingSettings, options))
    todo = [
        (i, a, b)
        for i, a, b in job.plan
        if not shard_complete(job.folder, i, job.digests[i], job.fingerprint, b - a)
    ]
    result = ShardedEncoding(
        job.folder / MANIFEST_NAME, {}, skipped=sorted(set(range(len(job.plan))) - {i for i, _, _ in todo})
    )
    job.say(
        f"{len(job.ids):,} docs in {len(job.plan)} shards of ≤{job.settings.shard_size:,}; "
        f"{len(result.skipped)} already written, {len(todo)} to encode with {job.settings.num_workers} "
        f"worker(s) ({'1 GPU' if job.settings.use_gpu else '1 thread'} each)"
    )
    if todo:
        _encode_shards(job, todo, result)
    result.encoded.sort()
    result.manifest = _write_manifest(job, result.manifest_path)
    job.say(
        f"manifest {result.manifest_path}: {len(job.ids):,} docs, {len(result.encoded)} shard(s) encoded, "
        f"{len(result.skipped)} skipped"
        + (f", {result.docs_encoded / result.seconds:,.0f} docs/s" if result.seconds else "")
    )
    return result


def _shard_job(corpus: Corpus, model, folder: Path, settings: ShardingSettings) -> _ShardJob:
    from ctxir.encoders.bi_encoder import BiEncoder

    if not corpus:
        raise CtxirError("corpus is empty: nothing to encode")
    ids = [str(i) for i in corpus]
    texts = [doc_text(corpus[i]) for i in corpus]
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(model, BiEncoder):
        settings = replace(
            settings, pooling=model.pooling, layer=model.layer, document_prompt=model.document_prompt
        )
        worker_model, name, reference = model.model, model.name, model
    else:
        worker_model, name = model, model if isinstance(model, str) else type(model).__name__
        reference = BiEncoder(
            model,
            pooling=settings.pooling,
            layer=settings.layer,
            device="cpu",
            cache=False,
            document_prompt=settings.document_prompt,
        )
    plan = shard_plan(len(ids), settings.shard_size)
    digests = [texts_digest(ids[a:b], texts[a:b]) for _, a, b in plan]
    fingerprint = encoder_fingerprint(reference)
    return _ShardJob(folder, ids, texts, settings, worker_model, name, reference, plan, digests, fingerprint)


def _encode_shards(job: _ShardJob, todo: list[tuple[int, int, int]], result: ShardedEncoding) -> None:
    settings, fingerprint = job.settings, job.fingerprint
    _ensure_ray(settings.ray_address, max(os.cpu_count() or 1, settings.num_workers), settings.runtime_env)
    import ray.data

    began = time.perf_counter()
    context = ray.data.DataContext.get_current()
    progress_bars, context.enable_progress_bars = context.enable_progress_bars, False
    items = [
        {"shard": i, "start": a, "ids": job.ids[a:b], "texts": job.texts[a:b], "digest": job.digests[i]}
        for i, a, b in todo
    ]
    dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        _ShardEncoder,
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=min(settings.num_workers, len(items))),
        fn_constructor_kwargs={
            "model": job.worker_model,
            "pooling": settings.pooling,
            "layer": settings.layer,
            "document_prompt": settings.document_prompt,
            "device": "cuda" if settings.use_gpu else "cpu",
            "threads": 1,
            "batch_size": settings.batch_size,
            "output_dir": str(job.folder.resolve()),
        },
        **({"num_gpus": 1} if settings.use_gpu else {"num_cpus": 1}),
    )
    try:
        for row in dataset.iter_rows():
            if row["fingerprint"] != fingerprint:
                raise CtxirError(
                    f"worker {row['worker']} encoded with different weights (fingerprint "
                    f"{row['fingerprint']}, expected {fingerprint}): every node must resolve "
                    f"{job.model_name!r} to the same model"
                )
            result.encoded.append(int(row["shard"]))
            result.docs_encoded += int(row["rows"])
            result.workers[row["worker"]] = result.workers.get(row["worker"], 0) + 1
            job.say(
                f"shard {row['shard']} ({row['rows']:,} docs, {row['seconds']:.1f} s on {row['worker']}) · "
                f"{len(result.encoded)}/{len(todo)} done · "
                f"{result.docs_encoded / (time.perf_counter() - began):,.0f} docs/s"
            )
    except CtxirError:
        raise
    except Exception as err:
        raise CtxirError(
            f"the Ray encoding job failed ({type(err).__name__}): {str(err)[-2000:]}; "
            f"the shards written so far are kept and a rerun resumes from them"
        ) from err
    finally:
        context.enable_progress_bars = progress_bars
    result.seconds = time.perf_counter() - began


def _write_manifest(job: _ShardJob, path: Path) -> dict:
    """manifest.json over every shard of the plan, from the shards' own meta files."""
    shards = []
    for i, a, b in job.plan:
        npy, meta = shard_names(i)
        sha256 = read_json(job.folder / meta)["sha256"]
        record = {"shard": i, "file": npy, "meta": meta, "start": a, "rows": b - a, "sha256": sha256}
        shards.append({**record, "texts_sha256": job.digests[i]})
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
