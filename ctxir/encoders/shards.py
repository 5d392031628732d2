"""Embedding shards on disk: ``shard-00000.npy`` (float32, unit rows) + ``shard-00000.json`` (ids, digests, the model
fingerprint; written last: its presence means the shard is complete), and ``manifest.json`` over them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ctxir.encoders.bi_encoder import hash_texts
from ctxir.files import file_sha256, read_json
from ctxir.types import CtxirError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ctxir-embedding-shards/1"


def shard_plan(rows: int, shard_size: int) -> list[tuple[int, int, int]]:
    """(shard, first row, end row) of each shard: never depends on the worker count."""
    if shard_size < 1:
        raise CtxirError(f"shard_size must be ≥ 1, got {shard_size!r}")
    return [(i, start, min(start + shard_size, rows)) for i, start in enumerate(range(0, rows, shard_size))]


def texts_digest(ids: Sequence[str], texts: Sequence[str]) -> str:
    """sha256 of (id, text) pairs in order: ties a shard's vectors to the exact texts that made them."""
    digest = hashlib.sha256()
    hash_texts(digest, [part for pair in zip(ids, texts, strict=True) for part in pair])
    return digest.hexdigest()


def encoder_fingerprint(encoder) -> str:
    """What decides the documents' vectors (not the model's name nor the query prompt), hashed."""
    settings = {
        k: v for k, v in encoder.config.items() if k not in ("model", "query_prompt", "document_prompt")
    }
    if encoder.config.get("document_prompt"):
        settings["document_prompt"] = encoder.config["document_prompt"]
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def shard_names(index: int) -> tuple[str, str]:
    return f"shard-{index:05d}.npy", f"shard-{index:05d}.json"


def shard_complete(folder: Path, index: int, digest: str, fingerprint: str, rows: int) -> bool:
    """A shard written by an earlier run for the same texts and model, with its vectors intact."""
    npy, meta_name = shard_names(index)
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
            and file_sha256(folder / npy) == meta.get("sha256")
        )
    except (OSError, ValueError, CtxirError):
        return False


def read_manifest(path: str | Path) -> dict:
    """A manifest written by ``encode_sharded`` (the file or its folder), checked for completeness."""
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
        if verify and file_sha256(path) != shard["sha256"]:
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
