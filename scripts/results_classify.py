"""Run the AG News classification commands and rewrite docs/results.md's classification tables from their records.

    python scripts/results_classify.py [--data ../shared/data/agnews] [--doc docs/results.md] [--rerun]

Each record is ``docs/bench/classify/<name>.json``, written by the command printed in its row (run where missing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.classify.cli import ClassifyArgs  # noqa: E402
from scripts.results_tables import fmt, write_block  # noqa: E402

START, END = "<!-- classify:start -->", "<!-- classify:end -->"
LABELS = "ctxir/assets/agnews_labels.csv"
RECORDS = "docs/bench/classify"
HEADING = (
    "## Classification with embeddings (AG News)\n\nZero-shot, nearest-neighbour, centroid and logistic-regression "
    "classifiers over the bi-encoder (`ctxir.classify`)."
)
# record → the ClassifyArgs that make it (besides --data and --output)
RUNS = {
    "agnews.json": {"labels": LABELS, "k": "1,5,15", "shots": "8,16,32,64", "seeds": 5,
                    "few_shot_methods": "knn-5,centroid,logreg"},
    "agnews-names.json": {"method": "zero-shot"},
    "agnews-bare-name.json": {"method": "zero-shot", "templates": "{label}", "projection": "off"},
    "agnews-about-label.json": {"method": "zero-shot", "templates": "This text is about {label}.", "projection": "off"},
}  # fmt: skip
# Published numbers on AG News test, as quoted in issue #22 (all-MiniLM-L6-v2 unless said).
ANCHORS = [
    ("zero-shot", "BTZSC zero-shot, all-MiniLM-L6-v2", "0.500"),
    ("8 per class", "MTEB NewsClassification, 8-shot logistic regression", "0.756"),
    ("8 per class", "SetFit, all-MiniLM-L6-v2", "0.831 ± 0.024"),
    ("8 per class", "frozen paraphrase-mpnet + logistic regression (SetFit paper)", "0.743"),
    ("64 per class", "SetFit, mpnet", "0.880"),
]


def run_all(data: str, records: str, rerun: bool) -> dict[str, dict]:
    """Each record of ``RUNS``, made first where it is missing (or ``rerun``)."""
    out = {}
    for name, changes in RUNS.items():
        path = Path(records) / name
        if rerun or not path.is_file():
            from ctxir.classify.cli import run

            print(f"# {name}", flush=True)
            run(ClassifyArgs(data=data, output=f"{records}/{name}", torch_threads=1, **changes))
        out[name] = json.loads(path.read_text(encoding="utf-8"))
    return out


def command(record: dict) -> str:
    """The command that reproduces a record: ``--data`` and the flags differing from the defaults, shell-quoted."""
    defaults = {f.name: f.default for f in dataclasses.fields(ClassifyArgs)}
    parts = ["ctxir classify"]
    for key, value in record["config"].items():
        if key not in defaults or (value == defaults[key] and key != "data"):
            continue
        value = str(value).lower() if isinstance(value, bool) else str(value)
        parts.append(f"--{key.replace('_', '-')} {shlex.quote(value)}")
    return " ".join(parts)


def methods_table(runs: dict[str, dict]) -> list[str]:
    main = runs["agnews.json"]
    rows = []  # (label, the method's figures, its setting, the record it is from)
    for label, name in (
        ("zero-shot, bare label names, fixed template", "agnews-bare-name.json"),
        ("zero-shot, label names, fixed prompt", "agnews-about-label.json"),
        ("zero-shot, label names; template and projection chosen on the train subset", "agnews-names.json"),
        (
            "zero-shot, names + descriptions (ctxir/assets/agnews_labels.csv); chosen on the train subset",
            "agnews.json",
        ),
    ):
        m = runs[name]["methods"]["zero-shot"]
        c = m["config"]
        how = f"template `{c['template']}`, projection {'on' if c['projection'] else 'off'}"
        rows.append((label, m, how + (" (chosen on train)" if c["candidates"] else " (fixed)"), runs[name]))
    for name in ("knn-1", "knn-5", "knn-15", "centroid", "logreg"):
        how = "cosine, uniform vote" if name.startswith("knn") else ""
        rows.append(
            (
                f"{name}, all {main['data']['train_rows']:,} train-subset rows",
                main["methods"][name],
                how,
                main,
            )
        )
    lines = [
        "| method (frozen all-MiniLM-L6-v2) | accuracy | macro-F1 | setting | command |",
        "|---|---|---|---|---|",
    ]
    previous = None
    for label, m, how, record in rows:
        cmd = command(record)
        shown = "same run" if cmd == previous else f"`{cmd}`"
        lines.append(f"| {label} | **{fmt(m['accuracy'])}** | {fmt(m['macro_f1'])} | {how} | {shown} |")
        previous = cmd
    return lines


def curve_table(main: dict) -> list[str]:
    methods = list(main["few_shot"][0]["methods"]) if main.get("few_shot") else []
    lines = ["| examples per class | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for point in main.get("few_shot", []):
        cells = [
            f"{r['accuracy']['mean']:.4f} ± {r['accuracy']['std']:.4f}" for r in point["methods"].values()
        ]
        lines.append(f"| {point['shots']} ({point['seeds']} seeds) | " + " | ".join(cells) + " |")
    cells = [fmt(main["methods"].get(m, {}).get("accuracy")) for m in methods]
    lines.append(f"| all ({main['data']['train_rows']:,}) | " + " | ".join(cells) + " |")
    return lines


def targets_table(runs: dict[str, dict]) -> list[str]:
    main = runs["agnews.json"]
    zero = max((r["methods"]["zero-shot"]["accuracy"], name) for name, r in runs.items())
    full = max((m["accuracy"], name) for name, m in main["methods"].items() if name != "zero-shot")

    def row(setting: str, must: float, goal: float, best: tuple[float, str]) -> str:
        verdict = "goal met" if best[0] >= goal else "must met" if best[0] >= must else "below must"
        return f"| {setting} | {must} | {goal} | **{fmt(best[0])}** | {best[1]} | {verdict} |"

    # "ours" is the best row of its group on test (several methods, and runs): an optimistic pick, said so below
    return [
        "| setting (issue #22 targets) | must | goal | ours | where | |",
        "|---|---|---|---|---|---|",
        row("zero-shot (no labelled example)", 0.65, 0.75, zero),
        row("the whole train subset, best method (frozen)", 0.897, 0.91, full),
    ]


def paired_table(main: dict) -> list[str]:
    wanted = [("zero-shot", "logreg"), ("knn-5", "logreg"), ("knn-5", "knn-15"), ("knn-1", "knn-5"),
              ("centroid", "logreg")]  # fmt: skip
    lines = [
        "| A | B | accuracy A | accuracy B | only A right | only B right | McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in main["paired"]:
        if (row["a"], row["b"]) in wanted:
            lines.append(
                f"| {row['a']} | {row['b']} | {fmt(row['accuracy_a'])} | {fmt(row['accuracy_b'])} | "
                f"{row['a_only']} | {row['b_only']} | {row['pvalue']:.2g} |"
            )
    return lines


def throughput(main: dict) -> list[str]:
    t = main["throughput"]
    per = ", ".join(f"{m} {v:,.0f}" for m, v in t["classify_texts_per_second"].items())
    return [
        f"- Encoding: **{t['encode_texts_per_second']} texts/s** ({t['encode_texts']} AG News test texts, "
        f"uncached, {t['torch_threads']} torch thread, {main['machine']}, a machine shared with other jobs).",
        "",
        f"- Classifying {main['data']['test_rows']:,} texts given their embeddings (texts/s): {per}.",
    ]


def classify_block(runs: dict[str, dict]) -> str:
    main_run = runs["agnews.json"]
    return "\n".join(
        [
            START,
            f"Generated by `python scripts/results_classify.py` from `{RECORDS}/*.json`, each written by the command "
            "in its row. AG News test: all 7,600 texts; labelled examples come from the 8,000-row train subset only; "
            "zero-shot templates are chosen on the train subset, never on test.",
            "",
            "**Against the targets**",
            "",
            *targets_table(runs),
            "",
            "“ours” is the best row of its group on the test set (methods × runs), so it is an optimistic pick; "
            "every row is listed below.",
            "",
            "**Every method, frozen encoder**",
            "",
            *methods_table(runs),
            "",
            "**Published anchors** (as quoted in issue #22; not re-run here)",
            "",
            "| setting | source | accuracy |",
            "|---|---|---|",
            *[f"| {s} | {src} | {v} |" for s, src, v in ANCHORS],
            "",
            "**Few-shot curve** (N examples per class drawn with seeds 0–4; test accuracy mean ± sample std)",
            "",
            *curve_table(main_run),
            "",
            "**Paired comparisons** on the same 7,600 texts (exact McNemar test)",
            "",
            *paired_table(main_run),
            "",
            "**Throughput**",
            "",
            *throughput(main_run),
            "",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/agnews", help="AG News, relative to the checkout")
    parser.add_argument("--records", default=RECORDS, help="the records' folder, relative to the checkout")
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    parser.add_argument("--rerun", action="store_true", help="run every command, even where its record is")
    opts = parser.parse_args(argv)
    doc = Path(opts.doc).resolve()
    os.chdir(ROOT)  # the records' paths and the printed commands are relative to the checkout
    write_block(doc, classify_block(run_all(opts.data, opts.records, opts.rerun)), HEADING)
    print(f"wrote {opts.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
