"""The failure report: a run's worst queries, what they missed, the pairs to explain; ``ctxir report RESULTS.json``."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from ctxir.cli import cli_main, flag
from ctxir.data.beir import load_beir
from ctxir.encoders.bi_encoder import BiEncoder
from ctxir.evaluation.compare import compare_systems
from ctxir.evaluation.metrics import METRICS, evaluate_run
from ctxir.evaluation.report_html import render_report
from ctxir.explain.failures import explain_failures, pipeline_explainers
from ctxir.files import read_json, write_atomic, write_json
from ctxir.rerank.registry import load_reranker
from ctxir.retrieval.registry import FIRST_STAGES
from ctxir.retrieval.retrievers import BM25Retriever
from ctxir.types import Corpus, CtxirError, Qrels, Queries, Run

REPORT_FORMAT = "ctxir-failure-report"
REPORT_VERSION = 1
SNIPPET_CHARS = 300


def metric_values(qrels: Qrels, run: Run, metric: str = "nDCG@10") -> dict[str, float]:
    """``{qid: value}`` of one metric label (``nDCG@10``, ``MAP``…) for every judged query (``evaluate_run``'s)."""
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
    """A run's documents for one query, best first, ties in listed order (as ``evaluate_run`` ranks them).

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
    """The ``worst`` queries by ``metric`` (lowest first, ties by qid) with a relevant document, as dicts.
    ``pairs``: (``winner`` = the best-ranked non-relevant document, ``relevant``) for each relevant one below it."""
    for name, value in (("worst", worst), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CtxirError(f"{name} must be a whole number ≥ 1, got {value!r}")
    values = metric_values(qrels, run, metric)  # checks the grades are whole numbers too
    grades = {str(q): {str(d): int(float(g)) for d, g in docs.items()} for q, docs in qrels.items()}
    runs, texts = {str(q): docs for q, docs in run.items()}, {str(q): t for q, t in queries.items()}
    candidates = sorted(
        (q for q in values if any(g > 0 for g in grades[q].values())), key=lambda q: (values[q], q)
    )
    cases = []
    for qid in candidates[:worst]:
        if qid not in texts:
            raise CtxirError(
                f"queries has no text for judged query {qid!r}: pass the queries the qrels belong to"
            )
        ranking, judged = ranked(runs.get(qid, {})), grades[qid]
        position = {doc: (rank, score) for rank, (doc, score) in enumerate(ranking, 1)}
        results = [
            {
                "rank": rank,
                "doc_id": doc,
                **_doc_fields(corpus, doc),
                "score": score,
                "grade": judged.get(doc),
            }
            for rank, (doc, score) in enumerate(ranking[:top], 1)
        ]
        rows = []
        for doc, grade in judged.items():
            rank, score = position.get(doc, (None, None))
            status = "missed" if rank is None else "top" if rank <= top else "low"
            fields = {"grade": grade, "rank": rank, "score": score, "status": status}
            rows += [{"doc_id": doc, **_doc_fields(corpus, doc), **fields}] if grade > 0 else []
        rows.sort(key=lambda r: (-r["grade"], r["rank"] is None, r["rank"] or 0, r["doc_id"]))
        # the winner: the best-ranked non-relevant document (judged ≤ 0 or unjudged), ranked as an answer without being one
        wrong = ((r, d, s) for r, (d, s) in enumerate(ranking, 1) if judged.get(d, 0) <= 0)
        winner = next(
            ({"doc_id": d, "rank": r, "score": s, "grade": judged.get(d)} for r, d, s in wrong), None
        )
        pairs = [
            {"winner": dict(winner), "relevant": {k: row[k] for k in ("doc_id", "rank", "score", "grade")}}
            for row in rows
            if winner and (row["rank"] is None or winner["rank"] < row["rank"])
        ]
        cases.append(
            {
                "qid": qid,
                "query": texts[qid],
                "metric": metric,
                "value": values[qid],
                "num_relevant": len(rows),
                "num_retrieved": len(ranking),
                "results": results,
                "relevant": rows,
                "pairs": pairs,
            }
        )
    return cases


def _doc_fields(corpus: Corpus, doc_id: str) -> dict:
    doc = corpus.get(doc_id)
    if doc is None:
        return {"title": "", "snippet": "", "in_corpus": False}
    text = (doc.get("text") or "").strip()
    snippet = text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " …"
    return {"title": (doc.get("title") or "").strip(), "snippet": snippet, "in_corpus": True}


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
    """(cases, meta) of ``system``'s run (default: the last) in a results JSON of ``ctxir evaluate``."""
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
    return cases, report_meta(qrels, runs[system], metric, system, config, compared)


def _comparison(qrels: Qrels, runs: Mapping[str, Run], metric: str) -> dict:
    """Every run against the first on ``metric``: per-query values and ``compare_systems``' p-values."""
    values = {name: metric_values(qrels, run, metric) for name, run in runs.items()}
    result = compare_systems(
        {name: {q: {metric: v} for q, v in by_query.items()} for name, by_query in values.items()}, [metric]
    )
    rows = result["comparisons"]
    return {
        "baseline": result["baseline"],
        "metric": metric,
        "test": result["test"],
        "correction": result["correction"],
        "per_query": values,
        "p": {row["system"]: row["p"] for row in rows},
        "p_adjusted": {row["system"]: row["p_adjusted"] for row in rows},
    }


def report_meta(qrels: Qrels, run: Run, metric: str, system: str, config=None, compare=None, **extra) -> dict:
    """The report's header: the system, the metric's mean, the data, the ``compare`` runs against the first."""
    values = metric_values(qrels, run, metric)
    config = dict(config or {})
    if len(compare or {}) > 1 and len(values) > 1:
        extra["comparison"] = _comparison(qrels, compare, metric)
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
    """sha256 of a report's ``meta`` and ``cases``: a report changed since it was written is refused, not drawn."""
    text = json.dumps(
        {"meta": content.get("meta"), "cases": content.get("cases")}, sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def check_report_checksum(data: Mapping, name: str) -> None:
    """Refuse a report JSON whose ``sha256`` (if any) does not match its content."""
    if "sha256" in data and data["sha256"] != report_checksum(data):
        raise CtxirError(
            f"{name} was changed or damaged after ctxir wrote it (the checksum of its meta and cases differs "
            "from its sha256): use the .json ctxir wrote, unchanged, or write the report again"
        )


def load_report(path: str | Path) -> dict:
    """``{"meta", "cases"}`` from a report's JSON (FILE.json, or FILE.html: the JSON beside it)."""
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


def make_report(
    path: str | Path,
    cases: list[dict],
    meta: dict,
    corpus: Corpus,
    explainers: Mapping | None = None,
) -> tuple[Path, Path]:
    """Explain ``cases`` with ``explainers`` (``explain_failures`` keywords), write both files and say so."""
    report_paths(path)  # a wrong name fails before minutes of explaining
    explainers = {k: v for k, v in (explainers or {}).items() if v is not None}
    if explainers:
        cases = explain_failures(cases, corpus, show_progress=True, **explainers)
        names = {
            k: getattr(v, "model_name", None) or getattr(v, "name", None) or getattr(v, "base_model", "")
            for k, v in explainers.items()
        }
        meta = {**meta, "explained_with": [f"{k} ({n})" if n and n != k else k for k, n in names.items()]}
    html_path, json_path = write_report(path, cases, meta)
    print(f"wrote {html_path} and {json_path}")
    return html_path, json_path


def report_for_pipeline(
    path: str | Path,
    pipeline,
    run: Run,
    system: str,
    corpus: Corpus,
    queries: Queries,
    qrels: Qrels,
    *,
    config: Mapping | None = None,
    worst: int = 10,
    top: int = 10,
    compare: Mapping[str, Run] | None = None,
) -> tuple[Path, Path]:
    """The report of one of ``pipeline``'s runs by nDCG@10, explained with its models (``ctxir evaluate --report``)."""
    cases = failure_cases(qrels, run, corpus, queries, worst=worst, top=top)
    meta = report_meta(qrels, run, "nDCG@10", system, config, compare)
    return make_report(path, cases, meta, corpus, pipeline_explainers(pipeline))


def explainers_from_config(config: Mapping, corpus: Corpus, system: str, device: str = "auto") -> dict:
    """Rebuild the models a results JSON's ``config`` names, for ``explain_failures`` (the corpus is not encoded)."""
    retriever = config.get("retriever", "")
    stage = FIRST_STAGES.get(retriever)  # a first stage no longer registered: nothing of it is explained
    found: dict = {}
    if stage is not None and stage.uses_bm25:
        found["bm25"] = BM25Retriever(corpus)
    if stage is not None and stage.uses_bi_encoder:
        pooling = config.get("pooling", "model")
        found["bi_encoder"] = BiEncoder(
            config["model"],
            pooling=None if pooling == "model" else pooling,
            layer=config.get("layer", -1),
            device=device,
            cache=False,
            query_prompt=config.get("query_prompt"),
            document_prompt=config.get("document_prompt"),
        )
    if config.get("rerank", "none") != "none" and system != retriever:
        found["reranker"] = load_reranker(config["rerank"], config.get("reranker_model", ""), device)
    return found


@dataclass
class ReportArgs:
    results: str = flag(help="results JSON written by ctxir evaluate (it holds the runs)")
    output: str = flag("", "report .html, its JSON beside it (default: the results path with -report.html)")
    data: str = flag("", "BEIR folder (default: the one the results were made on)")
    split: str = flag("", "qrels split (default: the results' own)")
    worst: int = flag(10, "how many of the worst queries to show")
    explain: Literal["auto", "none"] = flag(
        "auto", "auto = load the models the results name and explain one pair per query; none = no model"
    )
    device: str = flag("auto", "auto, cpu, cuda, mps")


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
    data, split = args.data or config.get("data", ""), args.split or config.get("split", "test")
    if not data:
        raise CtxirError("the results JSON names no data folder: pass --data BEIR_FOLDER")
    corpus, queries, qrels = load_beir(data, split)
    cases, meta = report_from_results(results, corpus, queries, qrels, worst=args.worst)
    meta.update(data=data, split=split)
    explainers = (
        explainers_from_config(config, corpus, meta["system"], args.device) if args.explain == "auto" else {}
    )
    make_report(output, cases, meta, corpus, explainers)
    return meta


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-"):  # the results JSON may come first, without --results
        argv = ["--results", *argv]
    return cli_main(ReportArgs, run, argv)
