"""The data contract shared by every stage (BEIR's, typed).

corpus {doc_id: {"title", "text"}}  ·  queries {qid: text}  ·  qrels/run {qid: {doc_id: score}}
Every retriever and re-ranker returns ``list[Hit]``, best first.

>>> corpus: Corpus = {"d1": {"title": "River otters", "text": "Otters dig dens in the river bank."},
...                   "d2": {"title": "", "text": "Banks approve loans."}}
>>> queries: Queries = {"q1": "where do otters live?"}
>>> qrels: Qrels = {"q1": {"d1": 1}}  # integer relevance grades; 0 = judged non-relevant
>>> run: Run = run_from_hits({"q1": [Hit("d1", 12.5), Hit("d2", 0.3)]})  # higher score = more relevant
>>> run
{'q1': {'d1': 12.5, 'd2': 0.3}}
>>> doc_text(corpus["d1"])  # what a model reads: title, then text
'River otters Otters dig dens in the river bank.'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np


class Doc(TypedDict):
    title: str
    text: str


Corpus = dict[str, Doc]
Queries = dict[str, str]
Qrels = dict[str, dict[str, float]]
# A run has the shape of qrels: higher score = more relevant.
Run = dict[str, dict[str, float]]


class CtxirError(ValueError):
    """A problem with the user's input, worded so the user can fix it (the app shows it, the CLI prints it).

    >>> from ctxir.checks import check_top_k
    >>> check_top_k(0)  # a ValueError too
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: top_k must be a whole number ≥ 1, got 0
    """


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked document: its id and the score that ranked it (higher = better).

    >>> Hit("d1", 12.5)
    Hit(doc_id='d1', score=12.5)
    """

    doc_id: str
    score: float


@dataclass(frozen=True)
class Internals:
    """What one forward pass shows (``inspect_text``), read by every figure; here by hand with MiniLM-L6's shapes.

    >>> import numpy as np
    >>> shown = Internals(tokens=["[CLS]", "otter", "##s", "[SEP]"], token_ids=[101, 22279, 2015, 102],
    ...                   token_type_ids=[0, 0, 0, 0], hidden_states=np.zeros((7, 4, 384)),
    ...                   attentions=np.full((6, 12, 4, 4), 0.25))
    >>> shown.cls.shape, bool(np.allclose(shown.attentions.sum(axis=-1), 1))
    ((384,), True)
    """

    tokens: list[str]
    token_ids: list[int]
    token_type_ids: list[int]
    hidden_states: np.ndarray  # (layers+1, tokens, hidden); index 0 is the embedding layer
    attentions: np.ndarray  # (layers, heads, tokens, tokens); each row sums to 1
    sentence_b_start: int | None = None  # index of the first token of text_pair, if any

    @property
    def cls(self) -> np.ndarray:
        """Last-layer [CLS] vector, (hidden,)."""
        return self.hidden_states[-1, 0]


def doc_text(doc: Doc) -> str:
    """The text a model reads for a document: title and body, as BEIR's dense models do."""
    title = (doc.get("title") or "").strip()
    text = (doc.get("text") or "").strip()
    return f"{title} {text}".strip() if title else text


def run_from_hits(hits: dict[str, list[Hit]]) -> Run:
    """{qid: [Hit, ...]} → run {qid: {doc_id: score}}, in the list's order (``evaluate_run`` keeps it for ties)."""
    return {qid: {h.doc_id: float(h.score) for h in hs} for qid, hs in hits.items()}
