"""``VectorDBRetriever``: dense, BM25 and hybrid (engine-side RRF) search in a Milvus collection, as ``list[Hit]``;
Milvus Lite for a local ``*.db`` file, else a server; the collections' schema, indexes and build."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_choice, check_corpus
from ctxir.encoders.bi_encoder import BiEncoder
from ctxir.encoders.sharded import INSTALL_HINT
from ctxir.encoders.shards import encoder_fingerprint, iter_shards, read_manifest, texts_digest
from ctxir.retrieval.fusion import DEFAULT_RRF_K
from ctxir.retrieval.retrievers import Retriever
from ctxir.types import Corpus, CtxirError, Doc, Hit, doc_text

INDEX_TYPES = ("FLAT", "HNSW", "IVF_FLAT", "AUTOINDEX")
# Milvus's cap on the bytes in a VARCHAR field.
MAX_VARCHAR = 65_535
ID_MAX_LENGTH = 512
META_PROPERTY = "ctxir.meta"
BM25_K1, BM25_B, INSERT_BATCH = 1.5, 0.75, 1000


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
        path = Path(uri).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        uri = str(path)
    return pymilvus.MilvusClient(uri=uri, token=token or "")


def _clip_utf8(text: str, limit: int = MAX_VARCHAR) -> str:
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def _row(doc_id: str, doc: Mapping, vector: np.ndarray) -> dict:
    if len(doc_id.encode("utf-8", "surrogatepass")) > ID_MAX_LENGTH:
        raise CtxirError(
            f"document id {doc_id[:40]!r}... is longer than {ID_MAX_LENGTH} bytes, Milvus's limit here"
        )
    title = (doc.get("title") or "").strip()
    return {
        "pk": doc_id,
        "title": _clip_utf8(title),
        "content": _clip_utf8(doc_text(doc)),
        "dense": vector.tolist(),
    }


@dataclass(frozen=True)
class CollectionSettings:
    """How ``build_collection`` lays out a collection; ``overwrite`` replaces one built from other settings."""

    bm25: bool = True
    index_type: str = "FLAT"
    overwrite: bool = False

    def __post_init__(self):
        check_choice(self.index_type, "index_type", INDEX_TYPES)

    def meta(self, fingerprint: str, dim: int, corpus_digest: str, rows: int) -> dict:
        """What the collection records of itself: a collection with the same meta is kept as it is."""
        bm25 = bool(self.bm25)
        return {
            "fingerprint": fingerprint,
            "dim": int(dim),
            "corpus_sha256": corpus_digest,
            "rows": rows,
            "bm25": bm25,
            "index_type": self.index_type,
            "metric": "COSINE",
            "bm25_k1": BM25_K1 if bm25 else None,
            "bm25_b": BM25_B if bm25 else None,
            "analyzer": json.dumps(default_analyzer(), sort_keys=True) if bm25 else None,
        }


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
    """Create ``collection`` and insert ``batches`` of (ids, vectors); False when it was already built alike."""
    settings = settings or CollectionSettings()
    meta = settings.meta(fingerprint, dim, corpus_digest, len(corpus))
    if client.has_collection(collection):
        old = _stored_meta(client, collection)
        if old == meta and int(client.get_collection_stats(collection)["row_count"]) == len(corpus):
            return False
        # ctxir's own build, killed half-way
        interrupted = isinstance(old, dict) and old.get("complete") is False
        if not (settings.overwrite or interrupted):
            raise CtxirError(
                f"collection {collection!r} already exists and was built from another corpus, model or "
                "settings: pass overwrite=True to replace it, or choose another collection name"
            )
        client.drop_collection(collection)

    # the schema and its indexes; the meta is stored marked incomplete until every row is in
    pymilvus = load_pymilvus()
    DataType = pymilvus.DataType
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=ID_MAX_LENGTH)
    schema.add_field("title", DataType.VARCHAR, max_length=MAX_VARCHAR)
    schema.add_field(
        "content",
        DataType.VARCHAR,
        max_length=MAX_VARCHAR,
        **({"enable_analyzer": True, "analyzer_params": default_analyzer()} if settings.bm25 else {}),
    )
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=meta["dim"])
    index = client.prepare_index_params()
    params = {
        "HNSW": {"M": 32, "efConstruction": 200},
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
            params={"bm25_k1": BM25_K1, "bm25_b": BM25_B},
        )
    client.create_collection(
        collection,
        schema=schema,
        index_params=index,
        consistency_level="Strong",
        properties={META_PROPERTY: json.dumps({**meta, "complete": False})},
    )

    inserted = 0
    for ids, vectors in batches:
        if vectors.shape != (len(ids), int(dim)):
            raise CtxirError(f"got {vectors.shape} vectors for {len(ids)} ids of dimension {int(dim)}")
        for start in range(0, len(ids), INSERT_BATCH):
            chunk = ids[start : start + INSERT_BATCH], vectors[start : start + INSERT_BATCH]
            client.insert(collection, [_row(i, corpus[i], v) for i, v in zip(*chunk, strict=True)])
            inserted += len(chunk[0])
    if inserted != len(corpus):
        raise CtxirError(f"inserted {inserted:,} documents, the corpus holds {len(corpus):,}")
    client.flush(collection)
    # Marked complete only now: a build killed half-way is never taken for a finished one.
    client.alter_collection_properties(collection, properties={META_PROPERTY: json.dumps(meta)})
    return True


ENGINE_MODES = ("dense", "bm25", "hybrid")
# Milvus caps: results per query, queries per request.
MAX_LIMIT, QUERY_CHUNK = 16_384, 256
# "hybrid" fuses each engine ranking's top HYBRID_DEPTH; HNSW searches at least EF_SEARCH candidates
HYBRID_DEPTH, EF_SEARCH = 100, 128


class EngineCorpus(Mapping):
    """The documents as the engine stores them, read back by id (recent ones cached, the hits' texts among them)."""

    def __init__(self, client, collection: str, cache_size: int = 10_000):
        self.client, self.collection, self.cache_size = client, collection, cache_size
        self._cache: OrderedDict[str, Doc] = OrderedDict()

    def remember(self, doc_id: str, title: str, content: str) -> None:
        """Cache a stored row as a document: doc_text() of it is the stored ``content``."""
        text = content[len(title) :].lstrip() if title and content.startswith(title) else content
        self._cache[doc_id] = {"title": title, "text": text}
        self._cache.move_to_end(doc_id)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def __getitem__(self, doc_id: str) -> Doc:
        if doc_id not in self._cache:
            for row in self.client.get(self.collection, ids=[doc_id], output_fields=["title", "content"]):
                self.remember(str(row["pk"]), row["title"], row["content"])
        if doc_id not in self._cache:
            raise KeyError(doc_id)
        self._cache.move_to_end(doc_id)
        return self._cache[doc_id]

    def __iter__(self) -> Iterator[str]:
        iterator = self.client.query_iterator(self.collection, batch_size=1000, output_fields=["pk"])
        try:
            while batch := iterator.next():
                yield from (str(row["pk"]) for row in batch)
        finally:
            iterator.close()

    def __len__(self) -> int:
        return int(self.client.get_collection_stats(self.collection)["row_count"])


class VectorDBRetriever(Retriever):
    """Dense, BM25 or hybrid search in a Milvus collection built by ``from_corpus`` or ``from_shards``."""

    name = "milvus"
    config_fields = ("engine", "collection", "mode", "index_type", "metric", "rrf_k", "depth")

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
    ):
        self.mode = check_choice(mode, "mode", ENGINE_MODES)
        self.uri, self.engine, self.collection = str(uri), engine_of(uri), collection
        self.client = client or connect(uri, token)
        self.meta = _stored_meta(self.client, collection) if self.client.has_collection(collection) else None
        if not isinstance(self.meta, dict) or self.meta.get("complete") is False:
            raise CtxirError(
                f"collection {collection!r} at {uri} does not exist, was not built by ctxir or its build was "
                "interrupted: build it with VectorDBRetriever.from_corpus or .from_shards"
            )
        self.index_type, self.metric = self.meta["index_type"], "COSINE"
        self.rrf_k, self.depth = DEFAULT_RRF_K, HYBRID_DEPTH
        if self.mode != "dense" and not self.meta.get("bm25"):
            raise CtxirError(
                f"collection {collection!r} was built without BM25: rebuild it with bm25=True for "
                f"mode {self.mode!r}, or use mode 'dense'"
            )
        self.encoder = None
        if self.mode != "bm25":
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
        # not Retriever.__init__: the ids need not be listed in this process
        self.corpus = check_corpus(corpus)

    @property
    def doc_ids(self) -> list[str]:
        return list(self.corpus)

    @property
    def config(self) -> dict:
        return {**super().config, **(self.encoder.config if self.encoder is not None else {})}

    @classmethod
    def from_corpus(
        cls,
        corpus: Corpus,
        encoder=None,
        uri: str = "ctxir.db",
        collection: str = "ctxir",
        mode: str = "dense",
        token: str | None = None,
        **settings,
    ) -> VectorDBRetriever:
        """Encode ``corpus`` here (cached) and load it into the collection; ``settings``: ``CollectionSettings``'."""
        check_corpus(corpus)
        encoder = encoder or BiEncoder()

        def batches():  # encoded only if the collection is built
            yield list(corpus), encoder.encode_corpus(corpus)[1]

        fingerprint, dim = encoder_fingerprint(encoder), encoder.dimension
        client = _build(corpus, uri, token, collection, batches(), fingerprint, dim, settings)
        return cls(corpus, encoder, uri, collection, mode, token=token, client=client)

    @classmethod
    def from_shards(
        cls,
        manifest: dict | str | Path,
        corpus: Corpus,
        encoder=None,
        uri: str = "ctxir.db",
        collection: str = "ctxir",
        mode: str = "dense",
        token: str | None = None,
        **settings,
    ) -> VectorDBRetriever:
        """Load ``encode_sharded``'s shards into the collection, one at a time; ``corpus`` supplies the texts."""
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

        fingerprint, dim = manifest["fingerprint"], manifest["dim"]
        client = _build(corpus, uri, token, collection, batches(), fingerprint, dim, settings)
        return cls(corpus, encoder, uri, collection, mode, token=token, client=client)

    def _limit(self, top_k: int) -> int:
        return max(1, min(top_k, self.rows, MAX_LIMIT))

    def _hits(self, rows, bm25: bool = False) -> list[Hit]:
        hits = []
        for row in rows:
            entity = row.get("entity") or {}
            if isinstance(self.corpus, EngineCorpus) and "content" in entity:
                self.corpus.remember(str(row["pk"]), entity.get("title", ""), entity["content"])
            # Milvus Lite reports BM25 as a negative distance, the server as a positive score: the score is its size.
            hits.append(Hit(str(row["pk"]), abs(float(row["distance"])) if bm25 else float(row["distance"])))
        return hits

    def _dense_request(self, vectors: np.ndarray, limit: int) -> dict:
        params: dict[str, Any] = {"metric_type": "COSINE"}
        if self.index_type == "HNSW":
            params["params"] = {"ef": max(EF_SEARCH, limit)}
        return {"data": vectors.tolist(), "anns_field": "dense", "param": params, "limit": limit}

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        results: list[list[Hit]] = []
        for start in range(0, len(texts), QUERY_CHUNK):
            chunk = texts[start : start + QUERY_CHUNK]
            vectors = None if self.mode == "bm25" else self.encoder.encode(chunk, False, role="query")
            results.extend(self.search_embeddings(vectors, top_k, chunk))
        return results

    def search_embeddings(
        self, query_embeddings: np.ndarray | None, top_k: int, texts: Sequence[str] | None = None
    ) -> list[list[Hit]]:
        """(queries, dim) normalised vectors → hits; ``texts`` too for "bm25" and "hybrid"."""
        limit = self._limit(top_k)
        fields = ["pk", "title", "content"] if isinstance(self.corpus, EngineCorpus) else ["pk"]

        def bm25(n: int) -> dict:
            return {"data": list(texts), "anns_field": "sparse", "param": {"metric_type": "BM25"}, "limit": n}

        if self.mode != "hybrid":
            request = bm25(limit) if self.mode == "bm25" else self._dense_request(query_embeddings, limit)
            params = request.pop("param")
            rows = self.client.search(self.collection, **request, search_params=params, output_fields=fields)
            if self.mode == "bm25":
                return [[h for h in self._hits(r, bm25=True) if h.score > 0] for r in rows]
            return [self._hits(r) for r in rows]
        pymilvus = load_pymilvus()
        depth = self._limit(max(self.depth, top_k))
        requests = [
            pymilvus.AnnSearchRequest(**self._dense_request(query_embeddings, depth)),
            pymilvus.AnnSearchRequest(**bm25(depth)),
        ]
        rows = self.client.hybrid_search(
            self.collection, requests, pymilvus.RRFRanker(self.rrf_k), limit=limit, output_fields=fields
        )
        return [self._hits(r) for r in rows]


def _stored_meta(client, collection: str) -> dict | None:
    """What ctxir recorded of ``collection`` when it built it (None: nothing readable)."""
    properties = client.describe_collection(collection).get("properties") or {}
    try:
        return json.loads(properties[META_PROPERTY])
    except (KeyError, TypeError, ValueError):
        return None


def _build(corpus, uri, token, collection, batches, fingerprint: str, dim: int, settings: dict):
    """A client of ``uri`` whose ``collection`` holds ``batches`` of (ids, vectors) of ``corpus``."""
    client = connect(uri, token)
    ids = list(corpus)
    digest = texts_digest(ids, [doc_text(corpus[i]) for i in ids])
    build_collection(
        client, collection, batches, corpus, fingerprint, dim, digest, CollectionSettings(**settings)
    )
    return client
