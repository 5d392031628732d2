"""Teachers without a cross-encoder: ``HybridTeacher`` (``--teacher hybrid``), ``w_dense * cos_base + w_bm25 * bm25``
with each weight 1 / the std of that part's margins; its ``complement`` variant (the default), whose BM25-mined
negatives are labelled by the cosine alone, so dense keeps its own view of BM25's look-alikes; ``SourceTeacher``.

BM25 is computed here (the retriever's tokenizer and parameters, the corpus's statistics) because a positive is its
document with the query cut out, which no index holds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ctxir.types import Corpus, doc_text

HYBRID_TEACHER = "hybrid"
COMPLEMENT_TEACHER = "complement"
CALIBRATION_ROWS = 256


class HybridTeacher:
    """Scores (query, texts) groups as the hybrid would weigh them; ``calibrate`` sets the two weights first."""

    def __init__(
        self,
        corpus: Corpus,
        encoder,
        k1: float = 1.5,
        b: float = 0.75,
        show_progress: bool = False,
        bm25_blind: Sequence[str] = (),
    ):
        import Stemmer
        from bm25s.tokenization import Tokenizer

        self.encoder, self.k1, self.b = encoder, k1, b
        self.bm25_blind = tuple(bm25_blind)  # mining sources whose negatives' labels have no BM25 part
        base = getattr(encoder, "name", "the base")
        self.model_name = f"hybrid: {base} cosine + BM25"
        if self.bm25_blind:
            blind = ", ".join(self.bm25_blind)
            self.model_name = (
                f"{COMPLEMENT_TEACHER}: {base} cosine + BM25, cosine alone on {blind}-mined negatives"
            )
        self.tokenizer = Tokenizer(stemmer=Stemmer.Stemmer("english"), stopwords="en")
        docs = self._tokens([doc_text(doc) for doc in corpus.values()], show_progress)
        self.documents = len(docs)
        self.df = Counter(term for tokens in docs for term in set(tokens))
        self.mean_length = max(1e-9, sum(map(len, docs)) / max(1, len(docs)))
        self.weights: tuple[float, float] | None = None

    def _tokens(self, texts: Sequence[str], show_progress: bool = False) -> list[list[str]]:
        return self.tokenizer.tokenize(
            list(texts), update_vocab=True, return_as="string", show_progress=show_progress
        )

    def _idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1 + (self.documents - df + 0.5) / (df + 0.5))

    def bm25(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(len(texts),) Lucene BM25 of ``query`` against each text, with this corpus's statistics."""
        terms = Counter(self._tokens([query])[0])
        scores = np.zeros(len(texts), dtype=np.float64)
        for i, tokens in enumerate(self._tokens(texts)):
            tf, norm = Counter(tokens), self.k1 * (1 - self.b + self.b * len(tokens) / self.mean_length)
            scores[i] = sum(
                self._idf(t) * tf[t] / (tf[t] + norm) * count for t, count in terms.items() if t in tf
            )
        return scores

    def parts(self, groups: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
        """Per group a (len(texts), 2) array: the base's cosine and BM25 of each text; encoded in one batch."""
        return [
            np.stack([cosine, self.bm25(query, texts)], axis=1)
            for cosine, (query, texts) in zip(cosines(self.encoder, groups), groups, strict=True)
        ]

    def calibrate(self, groups: Sequence[tuple[str, Sequence[str]]]) -> tuple[float, float]:
        """The weights: 1 / std of each part's margins (text 0, the positive, minus each other text) over ``groups``;
        a part whose margins do not vary gets weight 0."""
        margins = np.concatenate([p[0] - p[1:] for p in self.parts(groups) if len(p) > 1])  # (rows, 2)
        spread = margins.std(axis=0) if len(margins) else np.zeros(2)
        self.weights = tuple(float(1 / s) if s > 0 else 0.0 for s in spread)
        return self.weights

    def score_groups(
        self, groups: Sequence[tuple[str, Sequence[str]]], sources: Sequence[Sequence[str]] | None = None
    ) -> list[np.ndarray]:
        """Per group the (len(texts),) weighted sums; ``sources``: per group the mining source of each negative (text
        1 on), and a negative whose source is in ``bm25_blind`` gets the positive's BM25, so its label (a margin)
        is the cosine's alone."""
        if self.weights is None:
            raise RuntimeError("HybridTeacher.calibrate must run before score_groups")
        weights = np.asarray(self.weights)
        parts = self.parts(groups)
        if self.bm25_blind:
            if sources is None:
                raise ValueError("HybridTeacher with bm25_blind needs each negative's mining source")
            for p, mined in zip(parts, sources, strict=True):
                blind = [i + 1 for i, source in enumerate(mined) if source in self.bm25_blind]
                p[blind, 1] = p[0, 1]
        return [(p @ weights).astype(np.float32) for p in parts]


SOURCE_TEACHER = "source"


class SourceTeacher:
    """The base bi-encoder's cosine, each query's positive read whole (the query still in it): the student, which sees
    it with the query cut out, learns to find it from the rest (inverse cloze), anchored to the base's margins."""

    full_positive = True

    def __init__(self, encoder):
        self.encoder = encoder
        self.model_name = (
            f"source: {getattr(encoder, 'name', 'the base')} cosine, the whole source as positive"
        )

    def score_groups(
        self, groups: Sequence[tuple[str, Sequence[str]]], sources: Sequence[Sequence[str]] | None = None
    ) -> list[np.ndarray]:
        """Per group the (len(texts),) cosines; ``sources`` (the negatives' mining sources) does not matter here."""
        return [cosine.astype(np.float32) for cosine in cosines(self.encoder, groups)]


def cosines(encoder, groups: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
    """Per group the (len(texts),) cosines of ``encoder``'s (normalised) vectors of its query and each text; the
    queries encoded in one batch (after the query prompt), every text in another (after the document prompt)."""
    queries = encoder.encode([query for query, _ in groups], show_progress_bar=False, role="query")  # (G, D)
    flat = [text for _, texts in groups for text in texts]
    vectors = encoder.encode(flat, show_progress_bar=False, role="document")  # (sum of texts, D)
    found, start = [], 0
    for g, (_, texts) in enumerate(groups):
        found.append(vectors[start : start + len(texts)] @ queries[g])
        start += len(texts)
    return found
