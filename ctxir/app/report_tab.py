"""Failure report tab (/failure_report, /failure_report_sample): a saved report or results JSON, drawn."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code, md_literal, plural, uploaded
from ctxir.app.ui import Ui, exports, guard, show
from ctxir.checks import check_int
from ctxir.data.beir import load_beir, load_qrels, load_queries
from ctxir.data.demo import ASSETS, demo_corpus
from ctxir.evaluation import report as reports
from ctxir.evaluation.report_html import render_report
from ctxir.explain.failures import explain_failures
from ctxir.retrieval.retrievers import BM25Retriever
from ctxir.types import CtxirError, run_from_hits
from ctxir.viz.attention import iframe
from ctxir.viz.differences import comparison_differences, format_p

MAX_WORST = 50  # worst queries a report drawn here shows: the input's maximum and the views' check
HOW = (
    "a failure report's .json (`ctxir evaluate … --report FILE.html` or `ctxir report "
    "RESULTS.json` write it beside the .html) or a results JSON of `ctxir evaluate`"
)


def failure_report(state: AppState, path: str | Path | None, worst: int = 10) -> ViewResult:
    """A failure report from an uploaded file: a saved report's JSON, or a results JSON of the app's corpus."""
    if not path:
        raise CtxirError(f"no file was uploaded: choose {HOW}")
    worst = check_int(worst, "worst queries", 1, MAX_WORST)
    fix = "use fewer --report-queries, or open the .html the command wrote"
    path = uploaded(path, state.config.max_upload_mb, "reads report files", fix)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CtxirError(f"{path.name} is not a JSON file ({err}): upload {HOW}") from None
    if not isinstance(raw, dict):
        raise CtxirError(f"{path.name} holds a JSON {type(raw).__name__}, not an object: upload {HOW}")
    if raw.get("format") == reports.REPORT_FORMAT:
        if not isinstance(raw.get("version"), int) or raw["version"] > reports.REPORT_VERSION:
            raise CtxirError(
                f"{path.name} is report version {raw.get('version')!r}; this ctxir reads versions up to "
                f"{reports.REPORT_VERSION}: upgrade ctxir, or make the report again with this one"
            )
        reports.check_report_checksum(raw, path.name)
        cases, meta, kind, note = raw.get("cases"), raw.get("meta"), "report", ""
        if not isinstance(cases, list) or not isinstance(meta, dict):
            raise CtxirError(
                f'{path.name} has no list of "cases" and object "meta": upload the .json ctxir wrote, unchanged'
            )
    elif "runs" in raw or "per_query" in raw:  # judged by the qrels of the BEIR folder the app was started on
        config = raw.get("config") if isinstance(raw.get("config"), dict) else {}
        folder = Path(state.config.corpus) if state.config.corpus else None
        made_on, name = str(config.get("data") or ""), path.name
        if folder is None or not (folder / "qrels").is_dir():
            raise CtxirError(
                f"{name} is a results JSON: it needs the qrels it was made on, and this app was started on "
                f"{state.default_corpus!r}, which has no qrels. Start the app with `--corpus "
                f"{made_on or 'BEIR_FOLDER'}`, or run `ctxir report {name}` and upload the .json it writes"
            )
        if made_on and Path(made_on).name != folder.name:
            raise CtxirError(
                f"{name} was made on {made_on!r} but this app serves {str(folder)!r}: start the app with "
                f"`--corpus {made_on}`, or run `ctxir report {name}` and upload its .json"
            )
        split = str(config.get("split") or "test")
        corpus, queries, qrels = load_beir(folder, split)
        cases, meta = reports.report_from_results(raw, corpus, queries, qrels, worst=worst)
        meta, kind = {**meta, "data": str(folder), "split": split}, "results"
        note = (
            "Drawn from the results JSON without model explanations (each takes minutes on a CPU): "
            f"`ctxir report {md_literal(path.name)}` adds them. Click a query for its results."
        )
    else:
        raise CtxirError(
            f'{path.name} is neither a ctxir failure report (no "format": {reports.REPORT_FORMAT!r}) nor a '
            f'results JSON (no "runs"): upload {HOW}'
        )
    return _shown(cases, meta, kind, path.name, f"from {md_code(path.name)}", note)


def _shown(cases: list, meta: dict, kind: str, source: str, where: str, note: str = "") -> ViewResult:
    """A report drawn as the tab's answer: a summary line (and ``note``), the page, and the numbers."""
    try:
        page = render_report(cases, meta)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise CtxirError(
            f"{source} is not a report this app can draw ({type(err).__name__}: {err}): upload the "
            ".json ctxir wrote, unchanged"
        ) from None
    metric = meta.get("metric") or "nDCG@10"
    queries = meta.get("num_queries")
    queries = plural(queries, "query", "queries") if isinstance(queries, int) else "? queries"
    lines = [
        f"**{plural(len(cases), 'worst query', 'worst queries')}** of {md_code(meta.get('system') or 'the run')} "
        f"by {md_literal(metric)}"
        + (f" · mean {meta['mean']:.4f} over {queries}" if isinstance(meta.get("mean"), int | float) else "")
        + f" · {where}",
    ]
    comparison = meta.get("comparison")
    if comparison:  # each system's wins and losses against the baseline, and p
        each = [
            f"{md_code(d.system)} {plural(d.wins, 'win')}, {plural(d.losses, 'loss', 'losses')}"
            + (f" (p = {format_p(d.p)})" if d.p is not None else "")
            for d in comparison_differences(comparison)
        ]
        lines.append(
            f"Query by query against {md_code(comparison['baseline'])} ({md_literal(comparison['metric'])}, "
            f"the figure above the cases): {'; '.join(each)}"
        )
    lines += [note] if note else []
    data = {"kind": kind, "file": source, "meta": meta, "cases": cases}
    return ViewResult(data=data, html=page, text="\n\n".join(lines))


def sample_report(state: AppState, worst: int = 10) -> ViewResult:
    """The tab tried out of the box: BM25 over the demo corpus that ships with ctxir."""
    worst = check_int(worst, "worst queries", 1, MAX_WORST)
    corpus = demo_corpus()
    queries = load_queries(ASSETS / "demo_queries.jsonl")
    qrels = load_qrels(ASSETS / "demo_qrels.tsv")
    bm25 = BM25Retriever(corpus, cache=False)
    run = run_from_hits(bm25.search(queries, top_k=100))
    cases = reports.failure_cases(qrels, run, corpus, queries, worst=worst)
    cases = explain_failures(cases, corpus, bm25=bm25)
    made_on = {"data": "ctxir demo corpus", "split": "demo_qrels.tsv"}
    meta = reports.report_meta(qrels, run, "nDCG@10", bm25.name, made_on, explained_with=[bm25.name])
    note = (
        f"The sample: BM25 over the demo corpus ({plural(len(corpus), 'document')}), judged by the "
        f"{plural(len(qrels), 'query', 'queries')} of `demo_qrels.tsv` that ship with ctxir; upload your own "
        "report or results JSON to see yours."
    )
    return _shown(cases, meta, "sample", "demo_qrels.tsv", "BM25 on the demo corpus", note)


def build(ui: Ui) -> None:
    """The Failure report tab (inside an open gr.Tab); event /failure_report."""
    state, out = ui.state, ui.out

    def answer(r: ViewResult, stem: str) -> tuple:
        ui.visitor()
        shown = iframe(r.html, "max(78vh, 420px)", "failure report", sandbox=True)
        return r.text, shown, out.html(r.html, stem), r.data

    @guard
    def do_report(file, worst):
        return answer(failure_report(state, file, worst), "failure-report")

    @guard
    def do_sample_report(worst):
        return answer(sample_report(state, worst), "failure-report-sample")

    def after_report(data, page):
        return show(), show(exports(out, "failure-report", data=data, files=[page]))

    ui.tab_intro(
        "Which queries a system failed on, and why: the worst queries by nDCG@10, their top results (relevant "
        "ones marked), the relevant documents it missed, and what made the wrong document win. Try the sample "
        "(BM25 on the demo corpus, judged by its shipped qrels), or upload a report's .json or a results JSON "
        "of `ctxir evaluate`."
    )
    with gr.Row(equal_height=True):
        report_file = gr.File(
            label="Report or results JSON",
            file_types=[".json"],
            scale=3,
            min_width=240,
            elem_id="report-file",
        )
        with gr.Column(scale=1, min_width=180):
            worst = gr.Number(10, step=1, label=f"worst queries (1–{MAX_WORST}; sample, results JSON)")
            sample_button = gr.Button("Try the sample", variant="primary", elem_id="report-sample-button")
            report_button = gr.Button("Show my report", variant="secondary", elem_id="report-button")
    report_summary = ui.summary("report-summary")
    report_view = gr.HTML(visible=False, elem_id="report-view", label="report_view", show_label=False)
    report_page = ui.returned("report_html")  # the standalone page
    report_files = ui.downloads("standalone HTML, JSON")
    report_json = ui.numbers()

    outputs = [report_summary, report_view, report_page, report_json]
    after = (after_report, [report_json, report_page], [report_view, report_files])
    options = {"empty": [report_summary], "hide": [report_view], "after": after, "after_queue": False}
    for button, view, inputs, api in (
        (report_button, do_report, [report_file, worst], "failure_report"),
        (sample_button, do_sample_report, [worst], "failure_report_sample"),
    ):
        ui.view_event(button.click, view, inputs, outputs, api, **options)
