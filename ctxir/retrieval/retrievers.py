"""First-stage retrieval: BM25 (bm25s), dense (exact or ``ctxir.retrieval.ann``) and hybrid fusion; each answers
``search(queries, top_k) -> {qid: [Hit, ...]}`` and ``query(text, top_k)``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ctxir import kinds
from ctxir.checks import check_choice, check_corpus, check_queries, check_query, check_top_k
from ctxir.encoders.bi_encoder import BiEncoder, cache_root, hash_texts
from ctxir.files import (
    DiskFullError,
    cache_not_written,
    disk_full,
    file_sha256,
    is_disk_full,
    remove_temporaries,
    temporary_prefix,
    write_json,
)
from ctxir.retrieval.ann import AnnIndex
from ctxir.retrieval.fusion import FUSIONS, check_weights, fuse
from ctxir.types import Corpus, CtxirError, Hit, Queries, doc_text

DENSE_INDEXES = ("auto", "exact", "ann")
# "auto" uses the ANN index from this many documents up: below it exact search costs less than encoding the query.
AUTO_ANN_THRESHOLD = 100_000
# BM25Retriever(cache=None) persists its index from this many documents up; below it rebuilding is cheaper.
BM25_CACHE_MIN_DOCS = 20_000
BM25_FORMAT = "ctxir-bm25/1"


class Retriever(ABC):
    """Base: subclasses implement ``_search`` over a batch of query texts; ``config`` reads ``config_fields``.

    >>> class LastFirst(Retriever):  # a toy retriever: every query gets the documents in reverse order
    ...     name = "last-first"
    ...     def _search(self, texts, top_k):
    ...         return [[Hit(d, 1.0) for d in self.doc_ids[::-1][:top_k]] for _ in texts]
    >>> corpus = {"d1": {"title": "", "text": "Otters swim."}, "d2": {"title": "", "text": "Banks lend."}}
    >>> LastFirst(corpus).search({"q1": "otters"}, top_k=1)
    {'q1': [Hit(doc_id='d2', score=1.0)]}
    """

    name: str = "retriever"
    config_fields: tuple[str, ...] = ()

    def __init__(self, corpus: Corpus):
        self.corpus = check_corpus(corpus)
        self.doc_ids = list(corpus)

    @abstractmethod
    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]: ...

    def search(self, queries: Queries, top_k: int = 100) -> dict[str, list[Hit]]:
        top_k, queries = check_top_k(top_k), check_queries(queries)
        return dict(zip(queries, self._search(list(queries.values()), top_k), strict=True))

    def query(self, text: str, top_k: int = 10) -> list[Hit]:
        return self._search([check_query(text)], check_top_k(top_k))[0]

    @property
    def config(self) -> dict:
        """The settings that decide this retriever's rankings (written into evaluation results)."""
        return {"retriever": self.name, **{name: getattr(self, name) for name in self.config_fields}}


class BM25Retriever(Retriever):
    """Lucene-variant BM25 (bm25s) over title + text, with English stop words and Snowball stemming (None: plain bm25s).

    >>> corpus = {"d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
    ...           "d2": {"title": "Banks", "text": "Banks lend money to savers."},
    ...           "d3": {"title": "", "text": "Bats hunt moths over the river at night."}}
    >>> bm25 = BM25Retriever(corpus)
    >>> [(h.doc_id, round(h.score, 3)) for h in bm25.query("river otters", top_k=3)]  # d2 shares no word: no hit
    [('d1', 0.733), ('d3', 0.183)]
    >>> results = bm25.search({"q1": "lending", "q2": "moth"})  # stemmed: "lending" matches "lend", "moth" "moths"
    >>> {qid: [h.doc_id for h in hits] for qid, hits in results.items()}
    {'q1': ['d2'], 'q2': ['d3']}
    """

    name = kinds.BM25
    config_fields = ("k1", "b", "method", "stemmer", "stopwords")
    method, stopwords = "lucene", "en"  # bm25s's Lucene variant, its English stop words

    def __init__(
        self,
        corpus: Corpus,
        k1: float = 1.5,
        b: float = 0.75,
        stemmer: str | None = "english",
        show_progress: bool = False,
        cache: str | Path | bool | None = None,
    ):
        """``cache``: a folder for the index, True = ``cache_root()/bm25``, False = never, None = that from
        ``BM25_CACHE_MIN_DOCS`` documents up. ``cache_status``: "loaded", "built" or "built: <why not loaded>"."""
        import bm25s
        from bm25s.tokenization import Tokenizer

        super().__init__(corpus)
        stem = None
        if stemmer:
            import Stemmer

            if stemmer not in Stemmer.algorithms():
                raise CtxirError(
                    f"stemmer {stemmer!r} is not known: use one of {', '.join(Stemmer.algorithms())}, "
                    "or none for no stemming"
                )
            stem = Stemmer.Stemmer(stemmer)
        self.k1, self.b, self.stemmer = k1, b, stemmer
        self.tokenizer = Tokenizer(stemmer=stem, stopwords=self.stopwords)
        texts = [doc_text(corpus[i]) for i in self.doc_ids]
        folder = self._cache_folder(cache, texts)
        why = self._load(folder) if folder is not None else ""
        if why == "loaded":
            self.cache_status = "loaded"
            return
        tokens = self.tokenizer.tokenize(texts, return_as="ids", show_progress=show_progress)
        self.index = bm25s.BM25(k1=k1, b=b, method=self.method)
        self.index.index(tokens, show_progress=show_progress)
        self.cache_status = f"built: {why}" if why else "built"
        if folder is not None:
            try:
                self._save(folder)
            except DiskFullError as err:
                cache_not_written("the BM25 index", err)

    def _cache_folder(self, cache: str | Path | bool | None, texts: list[str]) -> Path | None:
        """``<root>/<key>``: key = sha256 of the format, bm25s version, settings, and every (id, text)."""
        import bm25s

        if cache is False or (cache is None and len(texts) < BM25_CACHE_MIN_DOCS):
            return None
        root = cache_root() / "bm25" if cache is None or cache is True else Path(cache)
        settings = {f: getattr(self, f) for f in self.config_fields}  # k1, b, method, stemmer, stopwords
        settings.update(format=BM25_FORMAT, bm25s=bm25s.__version__)
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
        hash_texts(digest, [part for pair in zip(self.doc_ids, texts, strict=True) for part in pair])
        return root / digest.hexdigest()[:32]

    def _load(self, folder: Path) -> str:
        """ "loaded" when ``folder`` holds an intact index of this corpus and these settings, else why not."""
        import bm25s

        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except FileNotFoundError:
            return "no cached index yet"
        except (OSError, ValueError):
            return "unreadable manifest.json"
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != BM25_FORMAT
            or manifest.get("documents") != len(self.doc_ids)
            or not isinstance(manifest.get("files"), dict)
        ):
            return f"manifest.json is not a {BM25_FORMAT} record of {len(self.doc_ids):,} documents"
        for name, (size, sha) in manifest["files"].items():
            path = folder / name
            if not path.is_file() or path.stat().st_size != size or file_sha256(path) != sha:
                return f"{name} is missing, truncated or corrupt"
        try:
            index = bm25s.BM25.load(folder, mmap=False, load_vocab=True, show_progress=False)
            self.tokenizer.load_vocab(folder)
        except (OSError, ValueError, KeyError) as err:
            return f"bm25s could not read it ({str(err).splitlines()[0][:120] if str(err) else type(err).__name__})"
        self.index = index
        return "loaded"

    def _save(self, folder: Path) -> None:
        """Write into a temporary folder beside ``folder``, the manifest last, then rename it into place."""
        tmp: Path | None = None
        vocab = self.index.vocab_dict
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            # what writers killed mid-save left, of any index (a live writer's stays)
            remove_temporaries(folder.parent)
            tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(folder), suffix=".tmp", dir=folder.parent))
            # bm25s's JSON writer refuses its id → id vocabulary's int keys; as text keys it reads back the same
            self.index.vocab_dict = {str(k): v for k, v in vocab.items()}
            self.index.save(tmp, show_progress=False)
            self.tokenizer.save_vocab(tmp)
            files = {p.name: [p.stat().st_size, file_sha256(p)] for p in sorted(tmp.iterdir()) if p.is_file()}
            write_json(
                tmp / "manifest.json",
                {"format": BM25_FORMAT, "documents": len(self.doc_ids), "files": files},
                indent=1,
            )
            if folder.exists():  # only ever a damaged copy: an intact one was loaded instead of building
                shutil.rmtree(folder)
            with contextlib.suppress(OSError):  # another process put the same index there first
                os.rename(tmp, folder)
        except OSError as err:
            if is_disk_full(err):
                raise disk_full(folder / "manifest.json", err) from err
            raise
        finally:
            self.index.vocab_dict = vocab
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        k = min(top_k, len(self.doc_ids))
        tokens = self.tokenizer.tokenize(texts, update_vocab=False, return_as="ids", show_progress=False)
        indices, scores = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        # bm25s pads with zero-score documents when fewer than k match; those are not hits.
        return [
            [Hit(self.doc_ids[int(i)], float(s)) for i, s in zip(row_i, row_s, strict=True) if s > 0]
            for row_i, row_s in zip(indices, scores, strict=True)
        ]


class DenseRetriever(Retriever):
    """Cosine search over a bi-encoder's (cached) corpus embeddings: ``index`` "exact", "ann" (``AnnIndex``) or
    "auto" ("ann" from ``AUTO_ANN_THRESHOLD`` documents up).

    >>> from ctxir import BiEncoder
    >>> corpus = {"d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
    ...           "d2": {"title": "Banks", "text": "Banks lend money to savers."},
    ...           "d3": {"title": "", "text": "Bats hunt moths over the river at night."}}
    >>> dense = DenseRetriever(corpus, BiEncoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu"))  # doctest: +SKIP
    >>> [h.doc_id for h in dense.query("where do otters live?", top_k=2)], dense.index_kind  # doctest: +SKIP
    (['d1', 'd3'], 'exact')
    """

    name = kinds.DENSE
    config_fields = ("index_choice", "index_kind", "ann_settings")

    def __init__(
        self,
        corpus: Corpus,
        encoder: BiEncoder | None = None,
        index: str = "auto",
        show_progress: bool | None = None,
        ann_params=None,
    ):
        super().__init__(corpus)
        self.index_choice = check_choice(index, "index", DENSE_INDEXES)
        self.encoder = encoder or BiEncoder()
        texts = [doc_text(corpus[i]) for i in self.doc_ids]
        # the embedding cache key (hashes every text): also the ANN index's file name and part of its fingerprint
        self.cache_key = self.encoder.cache_key(texts, "document") if self.encoder.cache is not None else ""
        # (docs, dim) float32 unit rows; read-only memory-mapped when they came from the cache
        self.embeddings = self.encoder.encode_cached(
            texts, show_progress, mmap=True, key=self.cache_key, role="document"
        )
        auto = "ann" if len(self.doc_ids) >= AUTO_ANN_THRESHOLD else "exact"
        self.index_kind = auto if self.index_choice == "auto" else self.index_choice
        self.ann = None
        if self.index_kind == "ann":
            # a bar when asked, or unasked from 100k documents up (a build there takes tens of seconds to minutes)
            show = bool(show_progress) if show_progress is not None else len(self.doc_ids) >= 100_000
            if self.ann_path is None:  # no cache (e.g. an upload): built in memory for this corpus only
                self.ann = AnnIndex.build(self.embeddings, ann_params, key=self.cache_key, show_progress=show)
            else:
                self.ann = AnnIndex.open_or_build(
                    self.ann_path, self.embeddings, ann_params, key=self.cache_key, show_progress=show
                )
        self._matrix = None  # (docs, dim)
        if self.ann is None:  # a memory map is copied: exact search reads every row per query
            self._matrix = torch.from_numpy(np.require(self.embeddings, requirements="W"))

    @property
    def config(self) -> dict:
        return {**super().config, **self.encoder.config}

    @property
    def ann_settings(self) -> dict | None:
        """The ANN settings that decide the rankings (None for exact search)."""
        if self.ann is None:
            return None
        p = self.ann.params
        shown = {k: getattr(p, k) for k in ("nlist", "nprobe", "rescore", "train_size", "seed")}
        return {"type": f"IVF{p.nlist},{p.codes}", **shown}

    @property
    def ann_path(self) -> Path | None:
        """The ANN index's file, beside the embedding cache (None without a cache)."""
        if self.encoder.cache is None or not self.cache_key:
            return None
        return Path(self.encoder.cache.root) / f"{self.cache_key}.ann.faiss"

    def search_embeddings(self, query_embeddings: np.ndarray, top_k: int) -> list[list[Hit]]:
        """The model-free core: (queries, dim) normalised vectors → ranked hits."""
        k = min(top_k, len(self.doc_ids))
        if self.ann is not None:
            return self.ann.search_hits(query_embeddings, k, self.doc_ids)
        queries = torch.from_numpy(np.ascontiguousarray(np.atleast_2d(query_embeddings), dtype=np.float32))
        block = max(1, 2**25 // len(self.doc_ids))  # queries per block: (block, docs) scores within 128 MB
        hits = []
        for begin in range(0, len(queries), block):
            scores, rows = torch.topk(queries[begin : begin + block] @ self._matrix.T, k, dim=1)  # (block, k)
            hits += [
                [Hit(self.doc_ids[int(i)], float(v)) for i, v in zip(ri, rv, strict=True)]
                for ri, rv in zip(rows.tolist(), scores.tolist(), strict=True)
            ]
        return hits

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        vectors = self.encoder.encode(texts, show_progress_bar=len(texts) > 256, role="query")
        return self.search_embeddings(vectors, top_k)


class HybridRetriever(Retriever):
    """Fuse several retrievers (e.g. BM25 + dense); each contributes its top ``depth`` hits.

    >>> from ctxir import BiEncoder
    >>> corpus = {"d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
    ...           "d2": {"title": "Banks", "text": "Banks lend money to savers."},
    ...           "d3": {"title": "", "text": "Bats hunt moths over the river at night."}}
    >>> bm25 = BM25Retriever(corpus)
    >>> dense = DenseRetriever(corpus, BiEncoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu"))  # doctest: +SKIP
    >>> hybrid = HybridRetriever([bm25, dense], fusion="rrf", k=60)  # doctest: +SKIP
    >>> [h.doc_id for h in hybrid.query("where do otters live?", top_k=2)], hybrid.parts  # doctest: +SKIP
    (['d1', 'd3'], ['bm25', 'dense'])
    """

    name = kinds.HYBRID
    config_fields = ("fusion", "k", "weights", "depth", "parts")

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        fusion: str = "rrf",
        k: float = 60.0,
        weights: Sequence[float] | None = None,
        depth: int = 100,
    ):
        if len(retrievers) < 2:
            raise CtxirError("hybrid retrieval needs at least two retrievers (e.g. bm25 and dense)")
        super().__init__(retrievers[0].corpus)
        self.fusion = check_choice(fusion, "fusion", FUSIONS)
        self.retrievers, self.k, self.depth = list(retrievers), k, check_top_k(depth)
        self.weights = check_weights(weights, len(retrievers))

    @property
    def parts(self) -> list[str]:
        return [r.name for r in self.retrievers]

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        per_retriever = [r._search(texts, max(self.depth, top_k)) for r in self.retrievers]
        return [
            fuse(rankings, self.fusion, self.k, self.weights)[:top_k]
            for rankings in zip(*per_retriever, strict=True)
        ]
