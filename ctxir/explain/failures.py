"""Why a document ranked above a relevant one won: BM25, bi-encoder and re-ranker explanations of report pairs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from ctxir import kinds
from ctxir.explain.bi_encoder import explain_bi_encoder
from ctxir.explain.integrated_gradients import DEFAULT_IG_STEPS
from ctxir.explain.rerankers import explainer_for
from ctxir.rerank.registry import kind_of
from ctxir.retrieval.retrievers import BM25Retriever, DenseRetriever, HybridRetriever
from ctxir.types import Corpus, CtxirError, doc_text

TOP_PAIRS = 8  # query-token × document-token pairs listed per document (bi-encoder, exact split)


def explain_failures(
    cases: Sequence[dict],
    corpus: Corpus,
    *,
    bm25=None,
    bi_encoder=None,
    reranker=None,
    n_steps: int | None = None,
    show_progress: bool = False,
) -> list[dict]:
    """Copies of ``cases`` whose first pair carries ``explanations`` (``_report``'s), one per model given."""
    from tqdm.auto import tqdm

    if bm25 is None and bi_encoder is None and reranker is None:
        raise CtxirError(
            "explain_failures needs a model: pass bm25=, bi_encoder= and/or reranker= "
            "(pipeline_explainers(pipeline) gives those of a Pipeline)"
        )
    n_steps = n_steps or DEFAULT_IG_STEPS
    explainers = [_reranker_explainer(reranker, n_steps, corpus)] if reranker is not None else []
    explainers += [_bi_encoder_explainer(bi_encoder, n_steps)] if bi_encoder is not None else []
    explainers += [_BM25Explainer(bm25)] if bm25 is not None else []
    out = []
    for case in tqdm(cases, desc="explaining failures", disable=not show_progress):
        case = {**case, "pairs": [dict(p) for p in case["pairs"]]}
        for pair in case["pairs"][:1]:
            ids = {side: pair[side]["doc_id"] for side in ("winner", "relevant")}
            absent = [d for d in ids.values() if d not in corpus]
            if absent:
                pair["explanations"] = []
                pair["note"] = f"document {absent[0]!r} is not in the corpus: nothing to explain"
                continue
            docs = {side: (doc, doc_text(corpus[doc])) for side, doc in ids.items()}
            pair["explanations"] = [explainer(case["query"], docs) for explainer in explainers]
        out.append(case)
    return out


def pipeline_explainers(pipeline) -> dict:
    """The models a ``Pipeline`` holds (its BM25, first bi-encoder, re-ranker) as ``explain_failures`` keywords."""
    first = pipeline.first_stage
    parts = first.retrievers if isinstance(first, HybridRetriever) else [first]
    found: dict = {}
    for part in parts:
        if isinstance(part, BM25Retriever):
            found.setdefault("bm25", part)
        elif isinstance(part, DenseRetriever):
            found.setdefault("bi_encoder", part.encoder)
    if pipeline.reranker is not None:
        found["reranker"] = pipeline.reranker
    return found


def _short(value: float) -> float:
    return float(f"{value:.5g}")


def _whole_words(tokens: list[str], *values: list[float]) -> tuple[list[str], ...]:
    """Join word-pieces ("ct", "##cf" → "ctcf") and add their contributions."""
    words, index = _word_index(tokens)
    return (words, *(np.bincount(index, weights=v, minlength=len(words)).tolist() for v in values))


def _word_values(tokens: list[str], values: list[float]) -> list[list]:
    """[word, contribution] of whole words."""
    return [[w, _short(v)] for w, v in zip(*_whole_words(tokens, values), strict=True)]


def _query_terms(winner: tuple[list, list], relevant: tuple[list, list]) -> list[dict]:
    """``_terms`` of the query's whole words where both sides read the same query tokens, else []."""
    return _terms(*_whole_words(winner[0], winner[1], relevant[1])) if winner[0] == relevant[0] else []


def _word_index(tokens: list[str]) -> tuple[list[str], list[int]]:
    words: list[str] = []
    index = []
    for token in tokens:
        if token.startswith("##") and words:
            words[-1] += token[2:]
        else:
            words.append(token)
        index.append(len(words) - 1)
    return words, index


def _top_pairs(query_tokens: list[str], document_tokens: list[str], pairs: list[list[float]]) -> list[list]:
    """The largest (query word, document word) terms of an exact split, summed over their occurrences."""
    q_words, q_index = _word_index(query_tokens)
    d_words, d_index = _word_index(document_tokens)
    sums: dict[tuple[str, str], float] = {}
    for i, row in enumerate(pairs):
        for j, value in enumerate(row):
            key = (q_words[q_index[i]], d_words[d_index[j]])
            sums[key] = sums.get(key, 0.0) + value
    best = sorted(sums.items(), key=lambda item: -item[1])[:TOP_PAIRS]
    return [[q, d, _short(value)] for (q, d), value in best]


def _report(model: str, method: str, score_name: str, about: str, sides: dict, terms: list[dict]) -> dict:
    """One model's explanation of a pair: both sides, the query terms, the score difference."""
    difference = sides["winner"]["score"] - sides["relevant"]["score"]
    return {
        "model": model,
        "method": method,
        "exact": method != "integrated-gradients",
        "score_name": score_name,
        "about": about,
        **sides,
        "terms": terms,
        "difference": difference,
    }


def _terms(query_tokens: list[str], winner: list[float], relevant: list[float]) -> list[dict]:
    rows = [
        {"term": t, "winner": _short(w), "relevant": _short(r), "difference": _short(w - r)}
        for t, w, r in zip(query_tokens, winner, relevant, strict=True)
    ]
    return sorted(rows, key=lambda row: -row["difference"])


class _BM25Explainer:
    """BM25's exact split: each query term's weight in the document, read from the bm25s index."""

    def __init__(self, bm25):
        if not isinstance(bm25, BM25Retriever):
            raise CtxirError(f"bm25 must be a ctxir.BM25Retriever, got {type(bm25).__name__!r}")
        self.bm25, self.tokenizer, self.index = bm25, bm25.tokenizer, bm25.index
        self.position = {doc: i for i, doc in enumerate(bm25.doc_ids)}
        self.term = {i: t for t, i in self.tokenizer.get_vocab_dict().items()}
        # the tokenizer's own word pattern, used on the original text to keep each word's place in it
        self.words = getattr(self.tokenizer.splitter, "__self__", re.compile(r"(?u)\b\w\w+\b"))

    def _ids(self, words: list[str]) -> list[list[int]]:
        if not words:
            return []
        ids = self.tokenizer.tokenize(words, update_vocab=False, return_as="ids", show_progress=False)
        return [[i for i in row if self.term.get(i)] for row in ids]  # "" is bm25s's empty-text token

    def _weight(self, term_id: int, doc_id: str) -> float:
        column = self.index.vocab_dict.get(term_id)
        if column is None or doc_id not in self.position:
            return 0.0
        return float(self.index.get_scores_from_ids([column])[self.position[doc_id]])

    def _segments(self, text: str, weights: dict[int, float]) -> list[list]:
        segments: list[list] = []
        end = 0
        matches = list(self.words.finditer(text))
        for match, ids in zip(matches, self._ids([m.group(0) for m in matches]), strict=True):
            value = sum(weights.get(i, 0.0) for i in set(ids))
            if value:
                segments.append([text[end : match.start()], 0.0])
                segments.append([match.group(0), _short(value)])
                end = match.end()
        segments.append([text[end:], 0.0])
        return [s for s in segments if s[0]]

    def __call__(self, query: str, docs: Mapping[str, tuple[str, str]]) -> dict:
        words = self.words.findall(query)
        counts: dict[int, int] = {}
        shown: dict[int, list[str]] = {}
        stopwords = set(self.tokenizer.stopwords or ())
        unknown = []  # a word of the query no document holds: worth seeing, it can never match
        for word, ids in zip(words, self._ids(words), strict=True):
            if not ids and word.lower() not in stopwords:
                unknown.append(word.lower())
            for i in ids:
                counts[i] = counts.get(i, 0) + 1
                shown.setdefault(i, []).append(word)
        weights = {
            side: {i: self._weight(i, doc) * n for i, n in counts.items()} for side, (doc, _) in docs.items()
        }
        sides = {
            side: {"score": float(sum(weights[side].values())), "tokens": self._segments(text, weights[side])}
            for side, (_, text) in docs.items()
        }
        names = []
        for i in counts:
            written = ", ".join(dict.fromkeys(w.lower() for w in shown[i]))
            stem = "" if written == self.term[i] else f" → {self.term[i]}"
            names.append(f"{written}{stem}" + (f" ×{counts[i]}" if counts[i] > 1 else ""))
        terms = _terms(names, list(weights["winner"].values()), list(weights["relevant"].values()))
        terms += [
            {"term": f"{word} (in no document)", "winner": 0.0, "relevant": 0.0, "difference": 0.0}
            for word in dict.fromkeys(unknown)
        ]
        about = (
            "BM25 term weights from the bm25s index (exact: a document's score is their sum over the query's terms, "
            "after stop-word removal and stemming)"
        )
        return _report(kinds.BM25, "bm25-terms", "BM25 score", about, sides, terms)


def _bi_encoder_explainer(model, n_steps: int):
    max_length = getattr(getattr(model, "model", model), "max_seq_length", None)

    def side(run: dict) -> dict:
        side = {
            "score": run["cosine"],
            "tokens": _word_values(run["document_tokens"], run["document_contributions"]),
        }
        if run.get("pair_contributions") is not None:
            side["top_pairs"] = _top_pairs(
                run["query_tokens"], run["document_tokens"], run["pair_contributions"]
            )
        if max_length and len(run["document_tokens"]) >= max_length:
            side["truncated"] = f"the model reads only the first {max_length} word-pieces of this document"
        return side | {key: run[key] for key in ("completeness_error", "n_steps") if key in run}

    def explainer(query: str, docs: Mapping[str, tuple[str, str]]) -> dict:
        runs = {s: explain_bi_encoder(model, query, text, n_steps=n_steps) for s, (_, text) in docs.items()}
        winner, relevant = ((r["query_tokens"], r["query_contributions"]) for r in runs.values())
        method = runs["winner"]["method"]
        about = (
            "exact split of the cosine of mean-pooled embeddings into query-token × document-token terms; a "
            "query token's contribution is its row sum"
        )
        if method != "exact":
            about = "Integrated Gradients of the cosine over each text's word-pieces (approximate: see the completeness error)"
        sides = {s: side(r) for s, r in runs.items()}
        result = _report(kinds.BI_ENCODER, method, "cosine", about, sides, _query_terms(winner, relevant))
        return result | ({"note": runs["winner"]["note"]} if runs["winner"].get("note") else {})

    return explainer


def _reranker_explainer(reranker, n_steps: int, corpus: Mapping):
    kind = kind_of(reranker)
    explain = explainer_for(kind)
    keys = ("score", "baseline_score", "completeness_error", "n_steps")

    def explainer(query: str, docs: Mapping[str, tuple[str, str]]) -> dict:
        # the title: where a window-reading re-ranker cuts the document
        runs = {
            side: explain(
                reranker,
                query,
                text,
                n_steps=n_steps,
                attention=False,
                title=(corpus.get(doc_id) or {}).get("title") or "",
            )
            for side, (doc_id, text) in docs.items()
        }
        sides, query_parts = {}, []
        for side, run in runs.items():
            # no segment ids: all shown as the document
            start = run.get("sentence_b_start") or len(run["tokens"])
            query_parts.append((run["tokens"][:start], run["attributions"][:start]))
            tokens = _word_values(run["tokens"][start:], run["attributions"][start:])
            sides[side] = {"tokens": tokens, **{key: run[key] for key in keys}}
        about = (
            "Integrated Gradients over the word-pieces of [CLS] query [SEP] document [SEP] (approximate: they add up to "
            "score − baseline score within the completeness error shown; the query's words are attributed in each "
            "pair separately)"
        )
        terms = _query_terms(*query_parts)
        return _report(kind.name, "integrated-gradients", runs["winner"]["score_kind"], about, sides, terms)

    return explainer
