"""First-stage retrieval: BM25 (bm25s), dense (exact or HNSW via faiss) and hybrid fusion.

Every retriever answers ``search(queries, top_k) -> {qid: [Hit, ...]}`` and ``query(text, top_k)``.
The fusion functions are pure over ranked lists so tests and the app call them without models.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

from ctxir.checks import check_corpus, check_queries, check_query, check_top_k
from ctxir.encoders import BiEncoder
from ctxir.fusion import FUSIONS, check_weights, fuse
from ctxir.types import Corpus, CtxirError, Hit, Queries, doc_text

DENSE_INDEXES = ("exact", "hnsw", "auto")
# Above this many documents "auto" switches from exact search to an HNSW graph.
AUTO_ANN_THRESHOLD = 200_000


class Retriever(ABC):
    """Base: subclasses implement ``_search`` over a batch of query texts.

    ``config`` is read from the attributes named in ``config_fields``, so a setting changed in place (tuning) is
    what the run record shows; there is no second copy to keep in step.

    >>> class LastFirst(Retriever):  # a toy retriever: every query gets the documents in reverse order
    ...     name = "last-first"
    ...     def _search(self, texts, top_k):
    ...         return [[Hit(d, 1.0) for d in self.doc_ids[::-1][:top_k]] for _ in texts]
    >>> corpus = {"d1": {"title": "", "text": "Otters swim."}, "d2": {"title": "", "text": "Banks lend."}}
    >>> LastFirst(corpus).search({"q1": "otters"}, top_k=1)
    {'q1': [Hit(doc_id='d2', score=1.0)]}
    >>> LastFirst(corpus).query("  ")  # search and query check their input, so _search never has to
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: query is empty: type a few words to search for
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
    """Lucene-variant BM25 (bm25s) over title + text, with English stop words and Snowball stemming.

    The stemming is ctxir's choice, not bm25s's default (bm25s does not stem unless given a stemmer): it helps on
    scientific text (SciFact nDCG@10 0.6863 stemmed, see docs/results.md). ``stemmer=None`` gives plain bm25s.

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

    name = "bm25"
    config_fields = ("k1", "b", "method", "stemmer", "stopwords")

    def __init__(self, corpus: Corpus, k1: float = 1.5, b: float = 0.75, method: str = "lucene",
                 stemmer: str | None = "english", stopwords: str | None = "en", show_progress: bool = False):
        import bm25s
        from bm25s.tokenization import Tokenizer

        super().__init__(corpus)
        stem = None
        if stemmer:
            import Stemmer

            if stemmer not in Stemmer.algorithms():
                raise CtxirError(f"stemmer {stemmer!r} is not known: use one of {', '.join(Stemmer.algorithms())}, "
                                 "or none for no stemming")
            stem = Stemmer.Stemmer(stemmer)
        self.k1, self.b, self.method, self.stemmer, self.stopwords = k1, b, method, stemmer, stopwords
        self.tokenizer = Tokenizer(stemmer=stem, stopwords=stopwords or [])
        tokens = self.tokenizer.tokenize([doc_text(corpus[i]) for i in self.doc_ids], return_as="ids",
                                         show_progress=show_progress)
        self.index = bm25s.BM25(k1=k1, b=b, method=method)
        self.index.index(tokens, show_progress=show_progress)

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        k = min(top_k, len(self.doc_ids))
        tokens = self.tokenizer.tokenize(texts, update_vocab=False, return_as="ids", show_progress=False)
        indices, scores = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        # bm25s pads with zero-score documents when fewer than k match; those are not hits.
        return [[Hit(self.doc_ids[int(i)], float(s)) for i, s in zip(row_i, row_s, strict=True) if s > 0]
                for row_i, row_s in zip(indices, scores, strict=True)]


class DenseRetriever(Retriever):
    """Cosine search over a bi-encoder's corpus embeddings (cached on disk by ``BiEncoder``).

    index="exact" scores every document (sentence-transformers' ``semantic_search``);
    "hnsw" builds a faiss HNSW graph for corpora too large for that; "auto" picks by size.

    >>> from ctxir import BiEncoder
    >>> corpus = {"d1": {"title": "Otters", "text": "Otters dig dens in the river bank."},
    ...           "d2": {"title": "Banks", "text": "Banks lend money to savers."},
    ...           "d3": {"title": "", "text": "Bats hunt moths over the river at night."}}
    >>> dense = DenseRetriever(corpus, BiEncoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu"))  # doctest: +SKIP
    >>> [h.doc_id for h in dense.query("where do otters live?", top_k=2)], dense.index_kind  # doctest: +SKIP
    (['d1', 'd3'], 'exact')
    """

    name = "dense"
    config_fields = ("index_kind",)

    def __init__(self, corpus: Corpus, encoder: BiEncoder | None = None, index: str = "auto",
                 show_progress: bool | None = None, hnsw_m: int = 32, ef_search: int = 128):
        super().__init__(corpus)
        if index not in DENSE_INDEXES:
            raise CtxirError(f"index {index!r} is not known: use one of {', '.join(DENSE_INDEXES)}")
        self.encoder = encoder or BiEncoder()
        _, self.embeddings = self.encoder.encode_corpus(corpus, show_progress_bar=show_progress)  # (docs, dim)
        if index == "auto":
            index = "hnsw" if len(self.doc_ids) > AUTO_ANN_THRESHOLD else "exact"
        self.index_kind = index
        self.ann = self._build_hnsw(hnsw_m, ef_search) if index == "hnsw" else None

    @property
    def config(self) -> dict:
        return {**super().config, **self.encoder.config}

    def _build_hnsw(self, m: int, ef_search: int):
        import faiss

        ann = faiss.IndexHNSWFlat(self.embeddings.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        ann.hnsw.efSearch = ef_search
        ann.add(np.ascontiguousarray(self.embeddings, dtype=np.float32))
        return ann

    def search_embeddings(self, query_embeddings: np.ndarray, top_k: int) -> list[list[Hit]]:
        """The model-free core: (queries, dim) normalised vectors → ranked hits."""
        k = min(top_k, len(self.doc_ids))
        if self.ann is not None:
            scores, indices = self.ann.search(np.ascontiguousarray(query_embeddings, dtype=np.float32), k)
            return [[Hit(self.doc_ids[int(i)], float(s)) for i, s in zip(ri, rs, strict=True) if i >= 0]
                    for ri, rs in zip(indices, scores, strict=True)]
        from sentence_transformers.util import semantic_search

        results = semantic_search(torch.from_numpy(query_embeddings), torch.from_numpy(self.embeddings),
                                  top_k=k, corpus_chunk_size=50_000)
        return [[Hit(self.doc_ids[r["corpus_id"]], float(r["score"])) for r in row] for row in results]

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        return self.search_embeddings(self.encoder.encode(texts, show_progress_bar=len(texts) > 256), top_k)


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
    >>> HybridRetriever([bm25])
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: hybrid retrieval needs at least two retrievers (e.g. bm25 and dense)
    """

    name = "hybrid"
    config_fields = ("fusion", "k", "weights", "depth", "parts")

    def __init__(self, retrievers: Sequence[Retriever], fusion: str = "rrf", k: float = 60.0,
                 weights: Sequence[float] | None = None, depth: int = 100):
        if len(retrievers) < 2:
            raise CtxirError("hybrid retrieval needs at least two retrievers (e.g. bm25 and dense)")
        if fusion not in FUSIONS:
            raise CtxirError(f"fusion {fusion!r} is not known: use one of {', '.join(FUSIONS)}")
        super().__init__(retrievers[0].corpus)
        self.retrievers, self.fusion, self.k, self.depth = list(retrievers), fusion, k, check_top_k(depth)
        self.weights = check_weights(weights, len(retrievers))

    @property
    def parts(self) -> list[str]:
        return [r.name for r in self.retrievers]

    def fuse(self, rankings: Sequence[Sequence[Hit]]) -> list[Hit]:
        return fuse(rankings, self.fusion, self.k, self.weights)

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        depth = max(self.depth, top_k)
        per_retriever = [r._search(texts, depth) for r in self.retrievers]
        return [self.fuse([parts[i] for parts in per_retriever])[:top_k] for i in range(len(texts))]
