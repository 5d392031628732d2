"""The data contract shared by every stage (BEIR's, typed).

corpus {doc_id: {"title", "text"}}  ·  queries {qid: text}  ·  qrels/run {qid: {doc_id: score}}
Every retriever and re-ranker returns ``list[Hit]``, best first.
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
    """A problem with the user's input, worded so the user can fix it.

    Raised instead of letting a library traceback escape; the app shows it as ``gr.Error``
    and the CLI prints it without a traceback.
    """


@dataclass(frozen=True, slots=True)
class Hit:
    doc_id: str
    score: float


@dataclass(frozen=True)
class Internals:
    """What one forward pass shows; produced by ``ctxir.internals.inspect``, read by every figure."""

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
    """{qid: [Hit, ...]} → run {qid: {doc_id: score}}."""
    return {qid: {h.doc_id: float(h.score) for h in hs} for qid, hs in hits.items()}
