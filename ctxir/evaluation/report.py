"""The failure report's data: a run's worst queries, what they missed, the (winner, relevant) pairs to explain.

``failure_cases`` is pure; ``write_report`` writes the HTML and the same data as JSON; ``load_report`` reads it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ctxir.evaluation.compare import compare_systems
from ctxir.evaluation.metrics import METRICS, evaluate_run
from ctxir.evaluation.report_html import render_report
from ctxir.explain.failures import explain_failures, pipeline_explainers
from ctxir.files import read_json, write_atomic, write_json
from ctxir.types import Corpus, CtxirError, Qrels, Queries, Run

REPORT_FORMAT = "ctxir-failure-report"
REPORT_VERSION = 1
SNIPPET_CHARS = 300

__all__ = [
    "ReportOptions",
    "failure_cases",
    "load_report",
    "make_report",
    "metric_values",
    "report_comparison",
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
    """A run's documents for one query, best first, equal scores in the order the run lists them (``evaluate_run``'s
    default tie rule), so ranks agree with the metrics.

    >>> ranked({"a": 1.0, "b": 1.0, "c": 2.0})
    [('c', 2.0), ('a', 1.0), ('b', 1.0)]
    """
    return sorted(((str(d), float(s)) for d, s in scores.items()), key=lambda item: -item[1])


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
    config = results.get("config", {})
    baseline = config.get("retriever") if config.get("retriever") in runs else next(iter(runs))
    compared = {baseline: runs[baseline], **{name: run for name, run in runs.items() if name != baseline}}
    comparison = report_comparison(qrels, compared, metric)
    extra = {"comparison": comparison} if comparison else {}
    return cases, report_meta(qrels, runs[system], metric, system=system, config=config, **extra)


def report_comparison(qrels: Qrels, runs: Mapping[str, Run], metric: str) -> dict | None:
    """Every run of ``runs`` against the first (the baseline) on ``metric``, query by query: each one's value per
    judged query and the paired test's p (``compare_systems``: randomization, Holm) — what the report's figure of
    per-query differences draws. None for fewer than 2 runs or 2 judged queries: nothing to compare."""
    if len(runs) < 2:
        return None
    values = {name: metric_values(qrels, run, metric) for name, run in runs.items()}
    baseline = next(iter(values))
    if len(values[baseline]) < 2:
        return None
    result = compare_systems(
        {name: {q: {metric: v} for q, v in by_query.items()} for name, by_query in values.items()}, [metric]
    )
    rows = result["comparisons"]
    return {
        "baseline": baseline,
        "metric": metric,
        "test": result["test"],
        "correction": result["correction"],
        "per_query": values,
        "p": {row["system"]: row["p"] for row in rows},
        "p_adjusted": {row["system"]: row["p_adjusted"] for row in rows},
    }


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
    # as a reader will see them (values JSON cannot hold become text), so that the checksum is of what is read back
    content = json.loads(json.dumps({"meta": dict(meta), "cases": list(cases)}, default=str))
    write_json(
        json_path,
        {"format": REPORT_FORMAT, "version": REPORT_VERSION, **content, "sha256": report_checksum(content)},
        indent=1,
    )
    write_atomic(html_path, render_report(cases, meta))
    return html_path, json_path


def report_checksum(content: Mapping) -> str:
    """sha256 of a report's ``meta`` and ``cases`` (sorted keys, compact): written into the report's JSON, so that a
    report changed or damaged since (an upload to the app included) is refused, not drawn with wrong numbers."""
    text = json.dumps(
        {"meta": content.get("meta"), "cases": content.get("cases")}, sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def check_report_checksum(data: Mapping, name: str) -> None:
    """Refuse a report JSON whose ``sha256`` (written by ``write_report``) does not match its content; a report
    written before ctxir wrote one has nothing to check."""
    if "sha256" in data and data["sha256"] != report_checksum(data):
        raise CtxirError(
            f"{name} was changed or damaged after ctxir wrote it (the checksum of its meta and cases differs "
            "from its sha256): use the .json ctxir wrote, unchanged, or write the report again"
        )


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
    check_report_checksum(data, repr(str(json_path)))
    return {"meta": data.get("meta", {}), "cases": data.get("cases", [])}


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
    queries by ``metric``, ``top`` results per query; ``compare`` the runs its header compares query by query, the
    baseline first (``report_comparison``; ``ctxir evaluate``: each stage's run, the first stage first)."""

    config: Mapping | None = None
    worst: int = 10
    metric: str = "nDCG@10"
    top: int = 10
    compare: Mapping[str, Run] | None = None


def report_for_pipeline(
    path: str | Path,
    pipeline,
    run: Run,
    system: str,
    corpus: Corpus,
    queries: Queries,
    qrels: Qrels,
    options: ReportOptions | None = None,
) -> tuple[Path, Path]:
    """The report of one of ``pipeline``'s runs, explained with the models the pipeline already holds (what
    ``ctxir evaluate --report`` calls); ``options`` (:class:`ReportOptions`) say which queries and how many."""
    options = options or ReportOptions()
    cases = failure_cases(qrels, run, corpus, queries, options.metric, options.worst, options.top)
    comparison = report_comparison(qrels, options.compare or {}, options.metric)
    extra = {"comparison": comparison} if comparison else {}
    meta = report_meta(qrels, run, options.metric, system, options.config, **extra)
    html_path, json_path = make_report(path, cases, meta, corpus, pipeline_explainers(pipeline))
    print(f"wrote {html_path} and {json_path}")
    return html_path, json_path


def _model_name(kind: str, model) -> str:
    name = (
        getattr(model, "model_name", None) or getattr(model, "name", None) or getattr(model, "base_model", "")
    )
    return f"{kind} ({name})" if name and name != kind else kind
