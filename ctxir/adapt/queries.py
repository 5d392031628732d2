"""Pseudo-queries from a corpus alone (title, sentence, span or generated), the positive the rest of the document.

The query is cut out of its positive, not copied (inverse cloze, Lee et al. 2019; Contriever's cropping)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxir.types import Corpus, CtxirError, doc_text

# the default mix, taken in this order one each in turn (title, sentence, span, then more sentences)
QUERY_KINDS = ("title", "sentence", "span")
ALL_KINDS = (*QUERY_KINDS, "generated")
MIN_QUERY_WORDS = 3  # fewer says too little (a heading "Abstract")
MAX_QUERY_WORDS = 48  # more is a passage
MIN_POSITIVE_WORDS = 8  # a positive left with fewer carries no evidence for its query
SPAN_WORDS = (6, 16)  # the cropped query's length in words, drawn uniformly
KIND_NAMES = {
    "title": "titles",
    "sentence": "sentences",
    "span": "word spans",
    "generated": "generated queries",
}
# a sentence ends at . ! ? followed by space and a capital, digit, bracket or quote (not "e.g. the", "Fig. 2" mostly)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


@dataclass(frozen=True)
class PseudoQuery:
    """One training query: ``text`` cut from document ``doc_id`` by ``kind``; ``positive`` is the rest of it."""

    qid: str
    kind: str
    text: str
    doc_id: str
    positive: str


def _fits(query: str, positive: str) -> bool:
    """A query of a useful length, and enough of its document left to be evidence for it."""
    return (
        MIN_QUERY_WORDS <= len(query.split()) <= MAX_QUERY_WORDS
        and len(positive.split()) >= MIN_POSITIVE_WORDS
    )


def pseudo_queries(
    corpus: Corpus,
    per_doc: int = 3,
    kinds: Sequence[str] = QUERY_KINDS,
    max_queries: int = 0,
    seed: int = 42,
    generated: dict[str, list[str]] | None = None,
) -> list[PseudoQuery]:
    """Up to ``per_doc`` queries per document, ``kinds`` in turn, then ``max_queries`` (0 = all) drawn; seeded."""
    for kind in kinds:
        if kind not in ALL_KINDS:
            raise CtxirError(
                f"--query-kinds {kind!r} is not known: use a comma list of {', '.join(ALL_KINDS)}"
            )
    if "generated" in kinds and generated is None:
        raise CtxirError("--query-kinds 'generated' needs a query generator: pass --generator DIR")
    rng = random.Random(seed)
    found: list[PseudoQuery] = []
    for doc_id in sorted(corpus):
        doc = corpus[doc_id]
        # kind → its (query, positive) pairs, in the order taken
        offers: dict[str, list[tuple[str, str]]] = {}
        title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
        for kind in kinds:
            if kind == "title":
                offers[kind] = [(title, text)] if _fits(title, text) else []
            elif kind == "sentence":  # one sentence, the positive the title and the other sentences
                sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
                rests = [
                    " ".join([title, *sentences[:i], *sentences[i + 1 :]]).strip()
                    for i in range(len(sentences))
                ]
                offers[kind] = [(q, rest) for q, rest in zip(sentences, rests, strict=True) if _fits(q, rest)]
                rng.shuffle(offers[kind])
            elif kind == "generated":
                whole = doc_text(doc)
                offers[kind] = [(q, whole) for q in (generated or {}).get(doc_id, []) if _fits(q, whole)]
            else:  # SPAN_WORDS consecutive words, the positive the title and the words around them
                words, length = text.split(), rng.randint(*SPAN_WORDS)
                offers[kind] = []
                if len(words) >= length + MIN_POSITIVE_WORDS:
                    start = rng.randrange(len(words) - length + 1)
                    rest = " ".join([title, *words[:start], *words[start + length :]]).strip()
                    offers[kind] = [(" ".join(words[start : start + length]), rest)]
        # one of each kind in turn (title, sentence, span, then more sentences): the kinds stay balanced
        picked: list[tuple[str, tuple[str, str]]] = []
        while len(picked) < per_doc and any(offers.values()):
            for kind in kinds:
                if offers[kind] and len(picked) < per_doc:
                    picked.append((kind, offers[kind].pop(0)))
        for kind, (text, positive) in picked:
            found.append(PseudoQuery(f"{doc_id}#{len(found)}", kind, text, doc_id, positive))
    if max_queries and len(found) > max_queries:
        found = sorted(rng.sample(found, max_queries), key=lambda q: (q.doc_id, q.qid))
    return found


def kinds_phrase(counts: dict[str, int]) -> str:
    """The kinds with a count in ``counts`` (adapt.json's queries), in words, in ``ALL_KINDS``' order."""
    names = [KIND_NAMES[k] for k in ALL_KINDS if counts.get(k)]
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def describe(queries: Sequence[PseudoQuery], examples: int = 2) -> list[str]:
    """Lines that say how many queries of each kind there are, with ``examples`` of each (the run prints them)."""
    lines = []
    for kind in ALL_KINDS:
        of_kind = [q for q in queries if q.kind == kind]
        if of_kind:
            lines.append(f"  {kind}: {len(of_kind):,} queries, e.g.")
            lines += [f"    {q.text[:120]!r}  (from document {q.doc_id!r})" for q in of_kind[:examples]]
    return lines
