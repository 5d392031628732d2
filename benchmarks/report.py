"""The other benchmarks' JSON records rendered into docs/results.md, with a PNG per kind and a copy of each JSON.

python -m benchmarks.report --inputs results/bench/*.json --markdown docs/results.md   # tables + PNGs
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import app, encode, rerank, search, train, views
from benchmarks.common import main_for
from ctxir import CtxirError
from ctxir.cli import flag
from ctxir.files import write_atomic

FORMATTERS = {
    "search": search.format_table,
    "encode": encode.format_encode,
    "rerank": rerank.format_rerank,
    "app": app.format_app,
    "train": train.format_train,
    "views": views.format_views,
}
PLOTS = {
    "search": search.plot,
    "encode": encode.plot_encode,
    "rerank": rerank.plot_rerank,
    "app": app.plot_app,
    "train": train.plot_train,
}
TITLES = {
    "encode": "Encoding throughput and fast paths",
    "search": "Search latency and memory vs corpus size",
    "rerank": "Re-ranking latency vs candidates",
    "app": "End-to-end app latency (gradio_client)",
    "train": "Cross-encoder training throughput",
    "views": "The app's views in process, per device",
}
REPORT_BEGIN, REPORT_END = "<!-- ctxir.bench report: begin -->", "<!-- ctxir.bench report: end -->"


@dataclass
class ReportArgs:
    inputs: list[str] = field(
        metadata={"help": "JSON files written by search, encode, rerank, app and train"}
    )
    markdown: str = flag("", "write the tables into this page between its report markers, the rest kept")
    figures: str = flag("docs", "with --markdown: folder for performance-<kind>.png and bench/ JSON copies")


def kind_of(record: dict) -> str:
    return record.get("kind", "search")


MAX_WORDS = 40  # a sentence of the page no longer than this (tests/test_docs_prose.py)


def _split(text: str, separators: tuple[str, ...]) -> list[str]:
    """``text`` cut at each separator outside parentheses (one not followed by a ")" before any "(").

    >>> _split("a (b; c); d", ("; ",))
    ['a (b; c)', 'd']
    """
    pattern = "|".join(map(re.escape, separators))
    return [p.strip() for p in re.split(f"(?:{pattern})(?![^(]*\\))", text) if p.strip()]


def _words(text: str) -> int:
    return len(text.split())


def clauses(text: str) -> list[str]:
    """``text`` as clauses of at most ``MAX_WORDS`` words: cut at sentences and semicolons, then ", and ", then commas.

    >>> clauses("timed (p50; p95); one at a time")
    ['timed (p50; p95)', 'one at a time']
    >>> [len(c.split()) for c in clauses(" ".join(["w"] * 30) + ", and " + ", ".join(["v"] * 50))]
    [30, 40, 10]
    """

    def shorter(pieces: list[str], separator: str) -> list[str]:
        return [q for p in pieces for q in (_split(p, (separator,)) if _words(p) > MAX_WORDS else [p])]

    out = []
    for clause in shorter(_split(text, (". ", "; ")), ", and "):
        chunk: list[str] = []
        for part in shorter([clause], ", "):
            if chunk and _words(", ".join([*chunk, part])) > MAX_WORDS:
                out.append(", ".join(chunk))
                chunk = []
            chunk.append(part)
        out.append(", ".join(chunk))
    return out


def timing_lines(timing: str) -> list[str]:
    """The record's timing: one line, or a list of its clauses where a sentence of it is over ``MAX_WORDS``."""
    if all(_words(s) <= MAX_WORDS for s in timing.split(". ")):
        return [f"Timing: {timing}.  "]
    return ["", "Timing:", "", *(line for c in clauses(timing) for line in (f"- {c}", ""))]


def describe(record: dict, json_link: str = "") -> str:
    """The command, the machine and the load of one record, as the lines above its table."""
    m = record["machine"]
    flags = ", ".join(m.get("simd_flags", [])) or "unknown"
    link = f" ([JSON]({json_link}))" if json_link else ""
    lines = [
        "```bash",
        record["command"],
        "```",
        "",
        f"Recorded {record['date']}{link}: {m['cores']} cores ({m.get('cpu')}; {flags}), {m.get('ram_gb', '?')} GB; "
        f"load average {record['load_average_before']} → {record['load_average_after']}; {record['wall_s']} s.  ",
    ]
    data = record.get("data", {})
    for key, value in data.items():
        if isinstance(value, str) and key not in ("construction", "source", "queries"):
            names = {"ndcg": "nDCG@10", "flops": "FLOPs", "app": "App"}
            label = names.get(key, key.replace("_", " ").capitalize())
            lines.append(f"{label}: {value}.  ")
    if kind_of(record) == "search":
        lines += [
            f"Data: {data['source']}.  ",
            f"{data['synthetic_docs']:,} synthetic documents.  ",
            f"How they are made: {data['construction']}.  ",
            f"Queries: {data['queries']}.  ",
        ]
    if kind_of(record) == "encode":
        lines.append(encode.describe_sgemm(record))
    if record.get("timing"):
        lines += timing_lines(record["timing"])
    return "\n".join(lines).rstrip("\n")


def read_records(paths: list[str]) -> list[dict]:
    records = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise CtxirError(f"{path!r} is not a readable bench JSON file ({err})") from err
        if not isinstance(record, dict) or "results" not in record or kind_of(record) not in FORMATTERS:
            raise CtxirError(
                f"{path!r} was not written by a benchmark (python -m benchmarks."
                f"{{{','.join(FORMATTERS)}}}): pass the JSON files those commands wrote"
            )
        record["_path"] = path
        records.append(record)
    return records


def copy_record(record: dict, figures: Path, docs: Path | None) -> str:
    """Copy the record's JSON into ``figures``/bench/ (unless it is there already); the link to it from ``docs``."""
    copy = figures / "bench" / Path(record["_path"]).name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if Path(record["_path"]).resolve() != copy.resolve():
        shutil.copyfile(record["_path"], copy)
    return os.path.relpath(copy, docs) if docs else str(copy)


def render(records: list[dict], figures: Path | None, docs: Path | None) -> str:
    """The Markdown of every record, grouped by kind; PNGs (and JSON copies) written under ``figures``."""
    parts = []
    for kind in ("encode", "search", "rerank", "app", "train", "views"):
        group = [r for r in records if kind_of(r) == kind]
        if kind == "search":
            group.sort(key=lambda r: r["data"]["num_docs"])
        if not group:
            continue
        parts.append(f"## {TITLES[kind]}\n")
        if figures is not None and kind in PLOTS:  # views: tables only
            png = figures / f"performance-{kind}.png"
            PLOTS[kind](group, str(png))
            parts.append(f"![{TITLES[kind]}]({os.path.relpath(png, docs) if docs else png})\n")
        for record in group:
            link = copy_record(record, figures, docs) if figures is not None else ""
            if kind == "search":
                d = record["data"]
                parts.append(f"### {d['num_docs']:,} documents ({d['real_docs']:,} real)\n")
            parts.append(describe(record, link) + "\n")
            parts.append(FORMATTERS[kind](record) + "\n")
            if kind == "encode":
                parts.append(encode.decisions(record))
    return "\n".join(parts)


def write_section(markdown: Path, body: str) -> None:
    """Put ``body`` between the report markers of ``markdown``, leaving the rest of the page as it is."""
    section = (
        f"{REPORT_BEGIN}\n<!-- written by `python -m benchmarks.report`; edit the commands, not the numbers "
        f"-->\n\n{body}\n{REPORT_END}"
    )
    text = markdown.read_text(encoding="utf-8") if markdown.is_file() else "# Performance\n\n"
    if REPORT_BEGIN in text and REPORT_END in text:
        head, rest = text.split(REPORT_BEGIN, 1)
        text = head + section + rest.split(REPORT_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    write_atomic(markdown, text)


def run_report(args: ReportArgs, argv: list[str] | None = None) -> None:
    records = read_records(args.inputs)
    docs = Path(args.markdown).parent if args.markdown else None
    figures = Path(args.figures) if args.markdown else None
    body = render(records, figures, docs)
    print(body)
    if args.markdown:
        write_section(Path(args.markdown), body)
        print(f"\nwrote {args.markdown} and its figures in {figures}")


def main(argv: list[str] | None = None) -> int:
    return main_for("report", ReportArgs, run_report, argv)


if __name__ == "__main__":
    sys.exit(main())
