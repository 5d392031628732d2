"""Milvus collections: connecting (Milvus Lite for a local file, else a server), their schema, indexes and build."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ctxir.checks import check_choice
from ctxir.encoders.sharded import INSTALL_HINT
from ctxir.types import CtxirError, doc_text

INDEX_TYPES = ("FLAT", "HNSW", "IVF_FLAT", "AUTOINDEX")
# Milvus's cap on the bytes in a VARCHAR field.
MAX_VARCHAR = 65_535
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
    """A BM25 analyzer Milvus Lite and the server accept: words, lower-cased, English stop words (Lite cannot stem)."""
    from bm25s.stopwords import STOPWORDS_EN

    return {
        "tokenizer": "standard",
        "filter": ["lowercase", {"type": "stop", "stop_words": sorted(STOPWORDS_EN)}],
    }


def load_pymilvus():
    try:
        import pymilvus
    except ImportError as err:
        raise CtxirError(f"pymilvus is not installed: {INSTALL_HINT}") from err
    return pymilvus


def connect(uri: str, token: str | None = None):
    """A ``MilvusClient``: Milvus Lite in this process for a ``*.db`` file, else the server at the URL."""
    pymilvus = load_pymilvus()
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


@dataclass(frozen=True)
class CollectionSettings:
    """How ``build_collection`` lays out a collection: BM25 and its analyzer, the dense ``index_type``
    (``INDEX_TYPES``), the insert; ``overwrite`` replaces one built from another corpus, model or settings."""

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


def split_build_kwargs(kwargs: dict) -> tuple[CollectionSettings, dict]:
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
) -> bool:
    """Create ``collection`` (pk, title, content [+ BM25 sparse], dense) and insert ``batches`` of (ids, vectors);
    False when it was built from the same corpus, model and settings already."""
    settings = settings or CollectionSettings()
    meta = settings.meta(fingerprint, dim, corpus_digest, len(corpus))
    if client.has_collection(collection):
        properties = client.describe_collection(collection).get("properties") or {}
        old = json.loads(properties[META_PROPERTY]) if META_PROPERTY in properties else None
        if old == meta and int(client.get_collection_stats(collection)["row_count"]) == len(corpus):
            return False
        interrupted = (
            isinstance(old, dict) and old.get("complete") is False
        )  # ctxir's own build, killed half-way
        if not (settings.overwrite or interrupted):
            raise CtxirError(
                f"collection {collection!r} already exists and was built from another corpus, model or "
                "settings: pass overwrite=True to replace it, or choose another collection name"
            )
        client.drop_collection(collection)

    # the schema and its indexes; the meta is stored marked incomplete until every row is in
    pymilvus = load_pymilvus()
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
    params = {
        "HNSW": {"M": settings.hnsw_m, "efConstruction": settings.ef_construction},
        "IVF_FLAT": {"nlist": max(1, min(4096, int(np.sqrt(max(meta["rows"], 1)))))},
    }.get(settings.index_type, {})
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

    inserted, began, step = 0, time.perf_counter(), settings.insert_batch
    for ids, vectors in batches:
        if vectors.shape != (len(ids), int(dim)):
            raise CtxirError(f"got {vectors.shape} vectors for {len(ids)} ids of dimension {int(dim)}")
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
    if inserted != len(corpus):
        raise CtxirError(f"inserted {inserted:,} documents, the corpus holds {len(corpus):,}")
    client.flush(collection)
    # Marked complete only now: a build killed half-way is never taken for a finished one.
    client.alter_collection_properties(collection, properties={META_PROPERTY: json.dumps(meta)})
    return True
