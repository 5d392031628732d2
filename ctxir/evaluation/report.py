"""Per-query failure drill-down: the worst queries of a run, what they retrieved, the relevant
documents that were missed or ranked low, and why the document above each of them won.

* ``failure_cases`` — pure (qrels, run and texts, no model): the worst queries by a metric, each with its top
  results, its relevant documents and the (winner, relevant) pairs to explain.
* ``explain_failures`` — model-aware: adds to each case's first pair(s) an explanation per model given — BM25 term
  scores (exact), a mean-pooled bi-encoder's query-token × document-token split of the cosine (exact; Integrated
  Gradients for other poolings), a re-ranker's Integrated Gradients (approximate, completeness error shown).
* ``render_report`` — one self-contained HTML page (no script, no external resource; every text escaped);
  ``write_report`` writes it and the same data as JSON beside it; ``load_report`` reads the JSON back (the app's
  view); ``report_from_results`` builds the cases from a saved results JSON (its "runs").

``ctxir evaluate … --report FILE.html`` writes a report after evaluating; ``ctxir report
RESULTS.json --output FILE.html`` makes one later from the results JSON, without re-running the retrieval.
"""

from __future__ import annotations

import html
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from markupsafe import Markup

from ctxir.checks import grouped_options
from ctxir.cli import cli_main
from ctxir.data.loaders import load_beir, load_corpus_any, load_qrels, load_queries
from ctxir.encoders.bi_encoder import BiEncoder
from ctxir.evaluation.metrics import METRICS, evaluate_run
from ctxir.explain.attributions import DEFAULT_IG_STEPS, explain_bi_encoder
from ctxir.files import read_json, write_atomic, write_json
from ctxir.rerank.registry import kind_of, load_reranker
from ctxir.retrieval.retrievers import BM25Retriever, DenseRetriever, HybridRetriever
from ctxir.types import Corpus, CtxirError, Qrels, Queries, Run, doc_text

REPORT_FORMAT = "ctxir-failure-report"
REPORT_VERSION = 1
SNIPPET_CHARS = 300
MAX_TERMS_SHOWN = 12  # rows of a query-term table in the HTML (the JSON keeps all)
TOP_PAIRS = 8  # query-token × document-token pairs listed per document (bi-encoder, exact split)
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "<s>", "</s>")
# One colour convention for attributions everywhere ctxir draws them (this report, the app's highlighted text and
# figures, their exported pages): Gradio's HighlightedText colours a score > 0 with the first and < 0 with the second
RAISES_RGB = (239, 68, 60)  # red: the word raised the score
LOWERS_RGB = (128, 90, 213)  # violet: the word lowered it
ATTRIBUTION_LEGEND = "red = raised the score, violet = lowered it"

__all__ = [
    "ReportOptions",
    "explain_failures",
    "failure_cases",
    "load_report",
    "make_report",
    "metric_values",
    "pipeline_explainers",
    "render_report",
    "report_for_pipeline",
    "report_from_results",
    "report_meta",
    "write_report",
]


# ---------------------------------------------------------------------------------------------------------------
# Cases (pure)


def metric_values(qrels: Qrels, run: Run, metric: str = "nDCG@10") -> dict[str, float]:
    """``{qid: value}`` of one metric label (``nDCG@10``, ``MRR@10``, ``Recall@100``, ``P@10``, ``MAP``…) for every
    judged query, computed by ``evaluate_run`` (a judged query the run lacks scores 0).

    >>> metric_values({"q1": {"d2": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}, "MRR@10")
    {'q1': 0.5}
    """

    families = {label: key for key, (label, _) in METRICS.items()}
    name, _, k = str(metric).partition("@")
    if name not in families or (k and not k.isdigit()) or (not k and name != "MAP") or k == "0":
        raise CtxirError(
            f"metric {metric!r} is not known: use a label like nDCG@10, MRR@10, Recall@100, P@10, "
            "MAP@100 or MAP"
        )
    result = evaluate_run(qrels, run, k_values=(int(k) if k else 10,), metrics=(families[name],))
    return {qid: values[metric] for qid, values in result.per_query.items()}


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """A run's documents for one query, best first, in trec_eval's order (ties: doc id descending), so ranks
    agree with the metrics.

    >>> ranked({"a": 1.0, "b": 1.0, "c": 2.0})
    [('c', 2.0), ('b', 1.0), ('a', 1.0)]
    """
    by_id = sorted(((str(d), float(s)) for d, s in scores.items()), reverse=True)
    return sorted(by_id, key=lambda item: -item[1])


def failure_cases(
    qrels: Qrels,
    run: Run,
    corpus: Corpus,
    queries: Queries,
    metric: str = "nDCG@10",
    worst: int = 10,
    top: int = 10,
) -> list[dict]:
    """The ``worst`` queries by ``metric`` (lowest first, ties by query id), as JSON-able dicts.

    Each case: ``qid``, ``query``, ``value``; ``results`` — the top ``top`` (rank, doc_id, title, snippet, score,
    grade: the qrels grade or None when unjudged); ``relevant`` — every relevant document (grade > 0) with its
    rank and score (None when not retrieved) and ``status``: "top" (within the top ``top``), "low" (retrieved
    lower) or "missed" (not retrieved); ``pairs`` — for each relevant document ranked below a non-relevant one
    (or not retrieved), the pair (``winner``, ``relevant``) to explain, most important first (highest grade, then
    best rank). The winner is the highest-ranked non-relevant document: the one that most cost the metric.
    Queries judged with no relevant document are left out: nothing was missed.

    >>> qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}
    >>> run = {"q1": {"d1": 3.0, "d2": 1.0}, "q2": {"d2": 2.0, "d3": 1.0}}
    >>> corpus = {d: {"title": d.upper(), "text": ""} for d in ("d1", "d2", "d3")}
    >>> [case] = failure_cases(qrels, run, corpus, {"q1": "a", "q2": "b"}, worst=1)
    >>> case["qid"], round(case["value"], 4), [(p["winner"]["doc_id"], p["relevant"]["doc_id"]) for p in case["pairs"]]
    ('q2', 0.6309, [('d2', 'd3')])
    """
    for name, value in (("worst", worst), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CtxirError(f"{name} must be a whole number ≥ 1, got {value!r}")
    values = metric_values(qrels, run, metric)
    judged = {str(q): docs for q, docs in qrels.items()}
    runs, texts = {str(q): docs for q, docs in run.items()}, {str(q): t for q, t in queries.items()}
    relevant = {
        q: {str(d): _grade(g) for d, g in docs.items() if _grade(g) > 0} for q, docs in judged.items()
    }
    candidates = sorted((q for q in values if relevant.get(q)), key=lambda q: (values[q], q))
    cases = []
    for qid in candidates[:worst]:
        if qid not in texts:
            raise CtxirError(
                f"queries has no text for judged query {qid!r}: pass the queries the qrels belong to"
            )
        cases.append(
            _case(qid, texts[qid], values[qid], metric, judged[qid], ranked(runs.get(qid, {})), corpus, top)
        )
    return cases


def _grade(value) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError) as err:
        raise CtxirError(f"qrels grade {value!r} is not a whole number: grades are 0, 1, 2, …") from err


def _case(
    qid: str,
    query: str,
    value: float,
    metric: str,
    judged: Mapping,
    ranking: list[tuple[str, float]],
    corpus: Corpus,
    top: int,
) -> dict:
    grades = {str(d): _grade(g) for d, g in judged.items()}
    relevant = {doc: grade for doc, grade in grades.items() if grade > 0}
    position = {doc: (rank, score) for rank, (doc, score) in enumerate(ranking, 1)}
    results = [
        {"rank": rank, "doc_id": doc, **_doc_fields(corpus, doc), "score": score, "grade": grades.get(doc)}
        for rank, (doc, score) in enumerate(ranking[:top], 1)
    ]
    rows = []
    for doc, grade in relevant.items():
        rank, score = position.get(doc, (None, None))
        status = "missed" if rank is None else "top" if rank <= top else "low"
        rows.append(
            {
                "doc_id": doc,
                **_doc_fields(corpus, doc),
                "grade": grade,
                "rank": rank,
                "score": score,
                "status": status,
            }
        )
    rows.sort(key=lambda r: (-r["grade"], r["rank"] is None, r["rank"] or 0, r["doc_id"]))
    # non-relevant = judged ≤ 0 or unjudged: it was ranked as an answer without being one
    wrong = [(rank, doc, score) for rank, (doc, score) in enumerate(ranking, 1) if grades.get(doc, 0) <= 0]
    pairs = []
    for row in rows:
        if wrong and (row["rank"] is None or wrong[0][0] < row["rank"]):
            rank, doc, score = wrong[0]
            pairs.append(
                {
                    "winner": {"doc_id": doc, "rank": rank, "score": score, "grade": grades.get(doc)},
                    "relevant": {k: row[k] for k in ("doc_id", "rank", "score", "grade")},
                }
            )
    return {
        "qid": qid,
        "query": query,
        "metric": metric,
        "value": value,
        "num_relevant": len(relevant),
        "num_retrieved": len(ranking),
        "results": results,
        "relevant": rows,
        "pairs": pairs,
    }


def _doc_fields(corpus: Corpus, doc_id: str) -> dict:
    doc = corpus.get(doc_id)
    if doc is None:
        return {"title": "", "snippet": "", "in_corpus": False}
    text = (doc.get("text") or "").strip()
    snippet = text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " …"
    return {"title": (doc.get("title") or "").strip(), "snippet": snippet, "in_corpus": True}


# ---------------------------------------------------------------------------------------------------------------
# Explanations (model-aware)


def explain_failures(
    cases: Sequence[dict],
    corpus: Corpus,
    *,
    bm25=None,
    bi_encoder=None,
    reranker=None,
    pairs_per_query: int = 1,
    n_steps: int | None = None,
    show_progress: bool = False,
) -> list[dict]:
    """Copies of ``cases`` whose first ``pairs_per_query`` pairs carry ``explanations``: why the winner scored
    above the relevant document, one entry per model given.

    bm25: a ``BM25Retriever`` (the term scores of its bm25s index: exact). bi_encoder: a ``BiEncoder``,
    ``SentenceTransformer`` or name (``explain_bi_encoder``: exact for mean pooling, else Integrated Gradients).
    reranker: a ``CrossEncoderReranker``/``CrossEncoder`` or a ``ClsLrRanker`` (Integrated Gradients, about 1–2 s
    per document on a CPU, so keep ``len(cases) × pairs_per_query`` small).
    Each explanation: ``model``, ``method``, ``exact``, ``about``, ``score_name``, ``winner`` / ``relevant``
    (``score`` and ``tokens``: [token, contribution] pairs of the document), ``terms`` (per query term: its
    contribution to each score and the difference, largest difference first) and ``difference`` of the scores.
    """
    # lazy: the progress bar is needed only here
    from tqdm.auto import tqdm

    if bm25 is None and bi_encoder is None and reranker is None:
        raise CtxirError(
            "explain_failures needs a model: pass bm25=, bi_encoder= and/or reranker= "
            "(pipeline_explainers(pipeline) gives those of a Pipeline)"
        )
    if isinstance(pairs_per_query, bool) or not isinstance(pairs_per_query, int) or pairs_per_query < 0:
        raise CtxirError(f"pairs_per_query must be a whole number ≥ 0, got {pairs_per_query!r}")
    explainers = []
    if reranker is not None:
        explainers.append(_reranker_explainer(reranker, n_steps or DEFAULT_IG_STEPS, corpus))
    if bi_encoder is not None:
        explainers.append(_BiEncoderExplainer(bi_encoder, n_steps or DEFAULT_IG_STEPS))
    if bm25 is not None:
        explainers.append(_BM25Explainer(bm25))
    out = []
    for case in tqdm(cases, desc="explaining failures", disable=not show_progress):
        case = {**case, "pairs": [dict(p) for p in case["pairs"]]}
        for pair in case["pairs"][:pairs_per_query]:
            winner, relevant = pair["winner"]["doc_id"], pair["relevant"]["doc_id"]
            absent = [d for d in (winner, relevant) if d not in corpus]
            if absent:
                pair["explanations"] = []
                pair["note"] = f"document {absent[0]!r} is not in the corpus: nothing to explain"
                continue
            docs = {
                "winner": (winner, doc_text(corpus[winner])),
                "relevant": (relevant, doc_text(corpus[relevant])),
            }
            pair["explanations"] = [explainer(case["query"], docs) for explainer in explainers]
        out.append(case)
    return out


def pipeline_explainers(pipeline) -> dict:
    """The models a ``Pipeline`` already holds, as ``explain_failures`` keywords: its BM25 index, its (first)
    bi-encoder and its re-ranker."""

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
    """Join word-pieces ("ct", "##cf" → "ctcf") and add their contributions: the splits are additive, and a
    table of whole words reads better than one of pieces."""
    words, index = _word_index(tokens)
    sums = [[0.0] * len(words) for _ in values]
    for total, vals in zip(sums, values, strict=True):
        for i, value in enumerate(vals):
            total[index[i]] += value
    return (words, *sums)


def _word_index(tokens: list[str]) -> tuple[list[str], list[int]]:
    """(whole words, the word each token belongs to)."""
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
    """The largest (query word, document word) terms of an exact split, summed over their occurrences: a word
    the document repeats weighs as much as all its occurrences together do in the cosine."""
    q_words, q_index = _word_index(query_tokens)
    d_words, d_index = _word_index(document_tokens)
    sums: dict[tuple[str, str], float] = {}
    for i, row in enumerate(pairs):
        for j, value in enumerate(row):
            key = (q_words[q_index[i]], d_words[d_index[j]])
            sums[key] = sums.get(key, 0.0) + value
    best = sorted(sums.items(), key=lambda item: -item[1])[:TOP_PAIRS]
    return [[q, d, _short(value)] for (q, d), value in best]


def _terms(query_tokens: list[str], winner: list[float], relevant: list[float]) -> list[dict]:
    rows = [
        {"term": t, "winner": _short(w), "relevant": _short(r), "difference": _short(w - r)}
        for t, w, r in zip(query_tokens, winner, relevant, strict=True)
    ]
    return sorted(rows, key=lambda row: -row["difference"])


class _BM25Explainer:
    """BM25 = Σ over query terms (repeats counted) of the term's weight in the document; bm25s keeps those weights
    per (term, document) in its index, so the split is exact."""

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
        scores = self.index.scores
        start, end = int(scores["indptr"][column]), int(scores["indptr"][column + 1])
        hits = (scores["indices"][start:end] == self.position[doc_id]).nonzero()[0]
        return float(scores["data"][start + hits[0]]) if len(hits) else 0.0

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
        sides = {}
        for side, (doc, text) in docs.items():
            weights = {i: self._weight(i, doc) * n for i, n in counts.items()}
            sides[side] = {
                "score": float(sum(weights.values())),
                "tokens": self._segments(text, weights),
                "weights": weights,
            }
        names = []
        for i in counts:
            written = ", ".join(dict.fromkeys(w.lower() for w in shown[i]))
            stem = "" if written == self.term[i] else f" → {self.term[i]}"
            names.append(f"{written}{stem}" + (f" ×{counts[i]}" if counts[i] > 1 else ""))
        terms = _terms(
            names,
            [sides["winner"]["weights"][i] for i in counts],
            [sides["relevant"]["weights"][i] for i in counts],
        )
        terms += [
            {"term": f"{word} (in no document)", "winner": 0.0, "relevant": 0.0, "difference": 0.0}
            for word in dict.fromkeys(unknown)
        ]
        for side in sides.values():
            side.pop("weights")
        return {
            "model": "bm25",
            "method": "bm25-terms",
            "exact": True,
            "score_name": "BM25 score",
            "about": "BM25 term weights from the bm25s index (exact: a document's score is their sum over the "
            "query's terms, after stop-word removal and stemming)",
            **sides,
            "terms": terms,
            "difference": sides["winner"]["score"] - sides["relevant"]["score"],
        }


class _BiEncoderExplainer:
    def __init__(self, model, n_steps: int):
        self.model, self.n_steps = model, n_steps
        st = getattr(model, "model", model)
        self.max_length = getattr(st, "max_seq_length", None)

    def __call__(self, query: str, docs: Mapping[str, tuple[str, str]]) -> dict:
        runs = {
            side: explain_bi_encoder(self.model, query, text, n_steps=self.n_steps)
            for side, (_, text) in docs.items()
        }
        method = runs["winner"]["method"]
        exact = method == "exact"
        sides = {side: self._side(r) for side, r in runs.items()}
        same_query = runs["winner"]["query_tokens"] == runs["relevant"]["query_tokens"]
        terms = (
            _terms(
                *_whole_words(
                    runs["winner"]["query_tokens"],
                    runs["winner"]["query_contributions"],
                    runs["relevant"]["query_contributions"],
                )
            )
            if same_query
            else []
        )
        about = (
            "exact split of the cosine of mean-pooled embeddings into query-token × document-token terms; a "
            "query token's contribution is its row sum"
            if exact
            else "Integrated Gradients of the cosine over each text's word-pieces (approximate: see the "
            "completeness error)"
        )
        result = {
            "model": "bi-encoder",
            "method": method,
            "exact": exact,
            "score_name": "cosine",
            "about": about,
            **sides,
            "terms": terms,
            "difference": sides["winner"]["score"] - sides["relevant"]["score"],
        }
        if runs["winner"].get("note"):
            result["note"] = runs["winner"]["note"]
        return result

    def _side(self, run: dict) -> dict:
        words, values = _whole_words(run["document_tokens"], run["document_contributions"])
        side = {
            "score": run["cosine"],
            "tokens": [[w, _short(v)] for w, v in zip(words, values, strict=True)],
        }
        if run.get("pair_contributions") is not None:
            side["top_pairs"] = _top_pairs(
                run["query_tokens"], run["document_tokens"], run["pair_contributions"]
            )
        if self.max_length and len(run["document_tokens"]) >= self.max_length:
            side["truncated"] = (
                f"the model reads only the first {self.max_length} word-pieces of this document"
            )
        for key in ("completeness_error", "n_steps"):
            if key in run:
                side[key] = run[key]
        return side


def _reranker_explainer(reranker, n_steps: int, corpus: Mapping | None = None):
    kind = kind_of(reranker)  # its entry in ctxir.rerank.registry: how it is explained, what it is called
    explain, name = kind.explain, kind.name

    def split(run: dict) -> tuple[list[str], list[float], list[list]]:
        start = run.get("sentence_b_start") or len(run["tokens"])  # no segment ids: all shown as the document
        words, values = _whole_words(run["tokens"][start:], run["attributions"][start:])
        return (
            run["tokens"][:start],
            run["attributions"][:start],
            [[w, _short(v)] for w, v in zip(words, values, strict=True)],
        )

    def explainer(query: str, docs: Mapping[str, tuple[str, str]]) -> dict:
        # the title: where a window-reading re-ranker cuts the document, as it did when it ranked it
        runs = {
            side: explain(
                reranker,
                query,
                text,
                n_steps=n_steps,
                attention=False,
                title=((corpus or {}).get(doc_id) or {}).get("title") or "",
            )
            for side, (doc_id, text) in docs.items()
        }
        sides, query_parts = {}, {}
        for side, run in runs.items():
            q_tokens, q_values, doc_tokens = split(run)
            query_parts[side] = (q_tokens, q_values)
            sides[side] = {
                "score": run["score"],
                "baseline_score": run["baseline_score"],
                "tokens": doc_tokens,
                "completeness_error": run["completeness_error"],
                "n_steps": run["n_steps"],
            }
        (q_w, v_w), (q_r, v_r) = query_parts["winner"], query_parts["relevant"]
        return {
            "model": name,
            "method": "integrated-gradients",
            "exact": False,
            "score_name": runs["winner"]["score_kind"],
            "about": "Integrated Gradients over the word-pieces of [CLS] query [SEP] document [SEP] (approximate:"
            " they add up to score − baseline score within the completeness error shown; the query's"
            " words are attributed in each pair separately)",
            **sides,
            "terms": _terms(*_whole_words(q_w, v_w, v_r)) if q_w == q_r else [],
            "difference": sides["winner"]["score"] - sides["relevant"]["score"],
        }

    return explainer


# ---------------------------------------------------------------------------------------------------------------
# From a results JSON (ctxir evaluate writes "runs")


def report_from_results(
    results: Mapping,
    corpus: Corpus,
    queries: Queries,
    qrels: Qrels,
    system: str = "",
    metric: str = "nDCG@10",
    worst: int = 10,
    top: int = 10,
) -> tuple[list[dict], dict]:
    """(cases, meta) from a results JSON written by ``ctxir evaluate`` (its "runs"); ``system`` picks
    the run (default: the stage evaluated last). Models are not loaded: pass the cases to ``explain_failures``."""
    runs = results.get("runs")
    if not runs:
        raise CtxirError(
            "this results JSON holds no runs (only per-query values): evaluate again with a current "
            "`ctxir evaluate` (it saves the top-k runs), or add --report to that command"
        )
    system = system or list(runs)[-1]
    if system not in runs:
        raise CtxirError(
            f"system {system!r} is not in this results JSON: use one of {', '.join(map(repr, runs))}"
        )
    cases = failure_cases(qrels, runs[system], corpus, queries, metric, worst, top)
    return cases, report_meta(qrels, runs[system], metric, system=system, config=results.get("config", {}))


def report_meta(
    qrels: Qrels, run: Run, metric: str, system: str, config: Mapping | None = None, **extra
) -> dict:
    """What the report's header shows: the system, the metric's mean over every judged query, the data."""
    values = metric_values(qrels, run, metric)
    config = dict(config or {})
    return {
        "system": system,
        "metric": metric,
        "mean": sum(values.values()) / len(values),
        "num_queries": len(values),
        "zero": sum(v == 0 for v in values.values()),
        "data": config.get("data", ""),
        "split": config.get("split", ""),
        "config": config,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        **extra,
    }


def explainers_from_config(config: Mapping, corpus: Corpus, system: str, device: str = "auto") -> dict:
    """Rebuild the models a results JSON's ``config`` names, for ``explain_failures`` (BM25 is re-indexed, the
    bi-encoder and re-ranker loaded; the corpus is not encoded)."""

    retriever = config.get("retriever", "")
    found: dict = {}
    if retriever in ("bm25", "hybrid"):
        stemmer = config.get("bm25_stemmer", "english")
        found["bm25"] = BM25Retriever(
            corpus,
            k1=config.get("bm25_k1", 1.5),
            b=config.get("bm25_b", 0.75),
            stemmer=None if str(stemmer).lower() == "none" else stemmer,
        )
    if retriever in ("dense", "hybrid"):
        pooling = config.get("pooling", "model")
        found["bi_encoder"] = BiEncoder(
            config["model"],
            pooling=None if pooling == "model" else pooling,
            layer=config.get("layer", -1),
            device=device,
            cache=False,
        )
    if config.get("rerank", "none") != "none" and system != retriever:
        found["reranker"] = load_reranker(config["rerank"], config.get("reranker_model", ""), device)
    return found


# ---------------------------------------------------------------------------------------------------------------
# Files


def report_paths(path: str | Path) -> tuple[Path, Path]:
    """FILE.html → (FILE.html, FILE.json)."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise CtxirError(
            f"report path {str(path)!r} must end in .html (the same data is written beside it as "
            ".json), e.g. results/scifact-report.html"
        )
    return path, path.with_suffix(".json")


def write_report(path: str | Path, cases: Sequence[dict], meta: Mapping) -> tuple[Path, Path]:
    """Write FILE.html (``render_report``) and FILE.json (what ``load_report`` reads); returns both paths."""

    html_path, json_path = report_paths(path)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    write_json(
        json_path,
        {"format": REPORT_FORMAT, "version": REPORT_VERSION, "meta": dict(meta), "cases": list(cases)},
        indent=1,
        default=str,
    )
    write_atomic(html_path, render_report(cases, meta))
    return html_path, json_path


def load_report(path: str | Path) -> dict:
    """``{"meta", "cases"}`` from a report's JSON (FILE.json, or FILE.html: the JSON beside it) — for the app's
    view, which can pass them to ``render_report(cases, meta, standalone=False)``."""

    path = Path(path)
    json_path = path.with_suffix(".json") if path.suffix.lower() in (".html", ".htm") else path
    if not json_path.is_file():
        raise CtxirError(
            f"report {str(json_path)!r} does not exist: write one with `ctxir evaluate … "
            "--report FILE.html` or `ctxir report RESULTS.json --output FILE.html`"
        )
    data = read_json(json_path)
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise CtxirError(
            f'{str(json_path)!r} is not a ctxir failure report (no "format": {REPORT_FORMAT!r}): '
            "pass the .json written beside a --report .html"
        )
    if data.get("version", 0) > REPORT_VERSION:
        raise CtxirError(
            f"{str(json_path)!r} is report version {data['version']}, newer than this ctxir reads "
            f"({REPORT_VERSION}): upgrade ctxir"
        )
    return {"meta": data.get("meta", {}), "cases": data.get("cases", [])}


# ---------------------------------------------------------------------------------------------------------------
# HTML

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"  # shipped as package data (pyproject.toml)


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _finalize(value):
    """Every ``{{ expression }}`` of the template is HTML-escaped; only the template's own macros (``|safe``) are not."""

    return value if isinstance(value, Markup) else _e(value)


def _num(value, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _colour(value: float, scale: float) -> str:
    """Red for a contribution that raises the score, violet for one that lowers it (``ATTRIBUTION_LEGEND``); opacity
    by size."""
    if not value or not scale:
        return ""
    alpha = min(1.0, abs(value) / scale) ** 2 * 0.8  # squared: the few largest stand out of a long document
    rgb = ",".join(map(str, RAISES_RGB if value > 0 else LOWERS_RGB))
    return f"background:rgba({rgb},{alpha:.2f})"


def _terms_scale(terms: Sequence[Mapping]) -> float:
    return max(abs(t["difference"]) for t in terms) or 1.0


def _tokens_scale(sides: Sequence[Mapping], words: bool) -> float:
    """One colour scale for both documents, so their highlights compare; specials carry no meaning of their own."""
    return max(
        (abs(v) for side in sides for t, v in side["tokens"] if not (words and t in SPECIAL_TOKENS)),
        default=0.0,
    )


def _what_happened(case: Mapping) -> str:
    rows = case["relevant"]
    found = [r for r in rows if r["rank"] is not None]
    missed = len(rows) - len(found)
    parts = []
    if found:
        best = min(found, key=lambda r: r["rank"])
        parts.append(f"first relevant at rank {best['rank']}")
    else:
        parts.append("no relevant document retrieved")
    if missed and found:
        parts.append(f"{missed} of {len(rows)} not retrieved")
    return "; ".join(parts)


def _main_reason(case: Mapping) -> str:
    """The first explanation's largest difference, for the summary table."""
    for pair in case["pairs"]:
        for ex in pair.get("explanations", []):
            terms = [t for t in ex.get("terms", []) if t["difference"] > 0]
            if terms:
                return f'{ex["model"]}: "{terms[0]["term"]}" {terms[0]["difference"]:+.3g} for the winner'
            return f"{ex['model']}: {ex['score_name']} {ex['difference']:+.3g} for the winner"
    return ""


def _template():
    # lazy: jinja2 is needed only to render
    import jinja2

    # autoescape stays off because _finalize escapes every expression with html.escape, as this module always has.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(
        num=_num,
        colour=_colour,
        percent=lambda v: f"{v:.2%}",
        what_happened=_what_happened,
        main_reason=_main_reason,
        terms_scale=_terms_scale,
        tokens_scale=_tokens_scale,
        terms_matched=lambda terms: any(t["winner"] or t["relevant"] for t in terms),
        special_tokens=SPECIAL_TOKENS,
        max_terms=MAX_TERMS_SHOWN,
    )
    return env.get_template("report.html.j2")


def render_report(cases: Sequence[Mapping], meta: Mapping, standalone: bool = True) -> str:
    """The report as HTML: a summary table of the worst queries, then per query its top results (relevant ones
    marked), the relevant documents missed or ranked low, and each explanation with token highlights.

    Self-contained: inline CSS, no script, no external resource; every text from the data is HTML-escaped.
    standalone=False gives a ``<div>`` (with its scoped style) to embed in a page, e.g. the app's.
    The page is ``ctxir/templates/report.html.j2``; this function only gathers what it shows.
    """
    metric = meta.get("metric", cases[0]["metric"] if cases else "nDCG@10")
    raises, lowers = (",".join(map(str, rgb)) for rgb in (RAISES_RGB, LOWERS_RGB))
    return _template().render(
        cases=cases,
        meta=meta,
        metric=metric,
        standalone=standalone,
        raises=raises,
        lowers=lowers,
        title_text=f"Failure report — {meta.get('system', 'run')}",
    )


# ---------------------------------------------------------------------------------------------------------------
# Glue used by ctxir evaluate and ctxir report


def make_report(
    path: str | Path,
    cases: list[dict],
    meta: dict,
    corpus: Corpus,
    explainers: Mapping | None = None,
    pairs_per_query: int = 1,
    show_progress: bool = True,
) -> tuple[Path, Path]:
    """Explain ``cases`` with ``explainers`` (``explain_failures`` keywords; none: no explanation) and write both
    files."""
    report_paths(path)  # a wrong name fails before minutes of explaining
    explainers = {k: v for k, v in (explainers or {}).items() if v is not None}
    if explainers:
        cases = explain_failures(
            cases, corpus, pairs_per_query=pairs_per_query, show_progress=show_progress, **explainers
        )
        meta = {**meta, "explained_with": [_model_name(k, v) for k, v in explainers.items()]}
    return write_report(path, cases, meta)


@dataclass(frozen=True)
class ReportOptions:
    """What a report shows: ``config`` the settings printed in its header (the run's CLI arguments), the ``worst``
    queries by ``metric``, ``top`` results per query."""

    config: Mapping | None = None
    worst: int = 10
    metric: str = "nDCG@10"
    top: int = 10


def report_for_pipeline(
    path: str | Path,
    pipeline,
    run: Run,
    system: str,
    corpus: Corpus,
    queries: Queries,
    qrels: Qrels,
    options: ReportOptions | None = None,
    **option_keywords,
) -> tuple[Path, Path]:
    """The report of one of ``pipeline``'s runs, explained with the models the pipeline already holds (what
    ``ctxir evaluate --report`` calls). ``option_keywords``: the :class:`ReportOptions` fields as
    keywords (``worst=5``), as before they were grouped; they override ``options``'."""
    options = _report_options(options, option_keywords)
    cases = failure_cases(qrels, run, corpus, queries, options.metric, options.worst, options.top)
    meta = report_meta(qrels, run, options.metric, system, options.config)
    html_path, json_path = make_report(path, cases, meta, corpus, pipeline_explainers(pipeline))
    print(f"wrote {html_path} and {json_path}")
    return html_path, json_path


def _report_options(options, keywords: dict) -> ReportOptions:
    """``options`` with ``keywords`` applied. A mapping in its place is the ``config`` it used to be (the 8th
    positional argument), with a DeprecationWarning; anything else, or an unknown keyword, is a TypeError."""
    if isinstance(options, Mapping):
        warnings.warn(
            "report_for_pipeline: pass the config as config=... or ReportOptions(config=...), not as the "
            "8th positional argument",
            DeprecationWarning,
            stacklevel=3,
        )
        options = ReportOptions(config=options)
    return grouped_options(ReportOptions, options, keywords, "report_for_pipeline", "options")


def _model_name(kind: str, model) -> str:
    name = (
        getattr(model, "model_name", None) or getattr(model, "name", None) or getattr(model, "base_model", "")
    )
    return f"{kind} ({name})" if name and name != kind else kind


@dataclass
class ReportArgs:
    results: str = field(metadata={"help": "results JSON written by ctxir evaluate (it holds the runs)"})
    output: str = field(
        default="",
        metadata={
            "help": "report .html (the JSON is written beside it; default: the "
            "results path with -report.html)"
        },
    )
    data: str = field(
        default="", metadata={"help": "BEIR folder (default: the one the results were made on)"}
    )
    split: str = field(default="", metadata={"help": "qrels split (default: the results' own)"})
    corpus: str = field(
        default="", metadata={"help": "a user corpus file instead of --data (needs --queries and --qrels)"}
    )
    queries: str = field(default="", metadata={"help": "queries.jsonl for --corpus"})
    qrels: str = field(default="", metadata={"help": "qrels .tsv (query-id, corpus-id, score) for --corpus"})
    system: str = field(
        default="", metadata={"help": "which run of the results (default: the stage evaluated last)"}
    )
    metric: str = "nDCG@10"
    worst: int = field(default=10, metadata={"help": "how many of the worst queries to show"})
    top: int = field(default=10, metadata={"help": "results shown per query"})
    explain: Literal["auto", "none"] = field(
        default="auto",
        metadata={
            "help": "auto = load the models the results name (BM25, bi-encoder, re-ranker) and explain one pair per "
            "query; none = no model"
        },
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda, mps"})


def run(args: ReportArgs) -> dict:
    if not Path(args.results).is_file():
        raise CtxirError(f"--results {args.results!r} is not a file: pass the JSON ctxir evaluate wrote")
    results = read_json(args.results)
    config = results.get("config", {})
    output = args.output or str(Path(args.results).with_suffix("")) + "-report.html"
    if report_paths(output)[1].resolve() == Path(args.results).resolve():
        raise CtxirError(
            f"--output {output!r} would write the report's JSON over the results {args.results!r}: "
            "give the report another name"
        )
    if args.corpus:
        if not (args.queries and args.qrels):
            raise CtxirError("--corpus needs --queries and --qrels: a report needs judged queries")
        corpus, qrels = load_corpus_any(args.corpus), load_qrels(args.qrels)
        queries = load_queries(args.queries)
        source = {"data": args.corpus, "split": Path(args.qrels).stem}
    else:
        data, split = args.data or config.get("data", ""), args.split or config.get("split", "test")
        if not data:
            raise CtxirError(
                "the results JSON names no data folder: pass --data BEIR_FOLDER (or --corpus, "
                "--queries and --qrels)"
            )
        corpus, queries, qrels = load_beir(data, split)
        source = {"data": data, "split": split}
    cases, meta = report_from_results(
        results, corpus, queries, qrels, args.system, args.metric, args.worst, args.top
    )
    meta.update(source)
    explainers = (
        explainers_from_config(config, corpus, meta["system"], args.device) if args.explain == "auto" else {}
    )
    html_path, json_path = make_report(output, cases, meta, corpus, explainers)
    print(f"wrote {html_path} and {json_path}")
    return meta


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-"):  # the results JSON may come first, without --results
        argv = ["--results", *argv]
    return cli_main(ReportArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
