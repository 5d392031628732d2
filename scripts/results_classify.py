"""Rewrite the classification section of docs/results.md: every method on AG News test, the few-shot curve, the
fine-tuned encoders and throughput — run here (embeddings cached) or read from the runs' own files.

    python scripts/results_classify.py [--data ../shared/data/agnews] [--outputs outputs] [--results results]

1. runs ``ctxir classify`` for each row group below (in-process; the first run encodes the 15,600 texts,
   ~10 minutes on a 2-core CPU, later runs read ctxir's embedding cache), writing ``results/classify-*.json``;
2. reads the fine-tuning runs' ``metrics.json`` (``training/train_classifier.py``; missing runs are listed as not
   run);
3. writes the tables between the ``classify`` markers of docs/results.md, and nothing else of the file.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
from pathlib import Path

from ctxir.classify.cli import ClassifyArgs

ROOT = Path(__file__).resolve().parents[1]
# ctxir is installed (requirements-dev.txt); training/ is not: a file run as `python scripts/x.py` finds it here
sys.path.insert(0, str(ROOT))

START, END = "<!-- classify:start -->", "<!-- classify:end -->"
LABELS = "ctxir/assets/agnews_labels.csv"
# result file → the ClassifyArgs that make it (besides --data and --output)
RUNS = {
    "classify-agnews.json": {
        "labels": LABELS,
        "k": "1,5,15",
        "shots": "8,16,32,64",
        "seeds": 5,
        "few_shot_methods": "knn-5,centroid,logreg",
    },
    "classify-agnews-names.json": {"method": "zero-shot"},
    "classify-agnews-bare-name.json": {"method": "zero-shot", "templates": "{label}", "projection": "off"},
    "classify-agnews-about-label.json": {
        "method": "zero-shot",
        "templates": "This text is about {label}.",
        "projection": "off",
    },
}
# (label, run folder under --outputs) for training/train_classifier.py runs
FINE_TUNED = [
    ("TripletLoss, 8 per class, 20 triplets per example", "classifier-agnews-triplet-8"),
    (
        "SetFit-style pairs (CosineSimilarityLoss), 8 per class, 20 pairs of each kind per example",
        "classifier-agnews-setfit-8",
    ),
    ("TripletLoss, 64 per class, 5 triplets per example", "classifier-agnews-triplet-64"),
    ("BatchHardTripletLoss, 64 per class", "classifier-agnews-batch-hard-64"),
    (
        "TripletLoss, the whole 8,000-row subset, one triplet per example (stopped at --max-steps when the command "
        "says so)",
        "classifier-agnews-triplet--1",
    ),
]
# Published numbers on AG News test, as quoted in issue #22 (all-MiniLM-L6-v2 unless said).
ANCHORS = [
    ("zero-shot", "BTZSC zero-shot, all-MiniLM-L6-v2", "0.500"),
    ("8 per class", "MTEB NewsClassification, 8-shot logistic regression", "0.756"),
    ("8 per class", "SetFit, all-MiniLM-L6-v2", "0.831 ± 0.024"),
    ("8 per class", "frozen paraphrase-mpnet + logistic regression (SetFit paper)", "0.743"),
    ("64 per class", "SetFit, mpnet", "0.880"),
]


def fmt(x) -> str:
    return "n/a" if x is None else f"{float(x):.4f}"


def run_all(data: str, results: Path, rerun: bool) -> dict[str, dict]:
    from ctxir.classify.cli import run

    out = {}
    for name, changes in RUNS.items():
        path = results / name
        args = ClassifyArgs(data=data, output=str(path), torch_threads=1, **changes)
        if rerun or not path.is_file():
            print(f"# {name}", flush=True)
            run(args)
        out[name] = json.loads(path.read_text())
    return out


def shell_command(prefix: str, args_class, config: dict, always: tuple = ()) -> str:
    """The command that reproduces ``config`` (flags differing from the defaults, values shell-quoted, checkout
    paths made relative)."""
    defaults = {f.name: f.default for f in dataclasses.fields(args_class)}
    parts = [prefix]
    for key, value in config.items():
        if key not in defaults or (value == defaults[key] and key not in always):
            continue
        value = str(value).lower() if isinstance(value, bool) else str(value)
        value = value.replace(str(ROOT) + "/", "").replace(str(ROOT.parent) + "/", "../")
        parts.append(f"--{key.replace('_', '-')} {shlex.quote(value)}")
    return " ".join(parts)


def command(record: dict) -> str:
    return shell_command("ctxir classify", ClassifyArgs, record["config"], always=("data",))


def methods_table(runs: dict[str, dict]) -> list[str]:
    main, names = runs["classify-agnews.json"], runs["classify-agnews-names.json"]
    bare, about = runs["classify-agnews-bare-name.json"], runs["classify-agnews-about-label.json"]
    rows = []

    def zero(label, record):
        m = record["methods"]["zero-shot"]
        c = m["config"]
        how = f"template `{c['template']}`, projection {'on' if c['projection'] else 'off'}"
        rows.append(
            (
                label,
                m["accuracy"],
                m["macro_f1"],
                how + (" (chosen on train)" if c["candidates"] else " (fixed)"),
                command(record),
            )
        )

    zero("zero-shot, bare label names, fixed template", bare)
    zero("zero-shot, label names, fixed prompt", about)
    zero("zero-shot, label names; template and projection chosen on the train subset", names)
    zero("zero-shot, names + descriptions (ctxir/assets/agnews_labels.csv); chosen on the train subset", main)
    n_train = main["data"]["train_rows"]
    for name in ("knn-1", "knn-5", "knn-15", "centroid", "logreg"):
        m = main["methods"][name]
        rows.append(
            (
                f"{name}, all {n_train:,} train-subset rows",
                m["accuracy"],
                m["macro_f1"],
                "cosine, uniform vote" if name.startswith("knn") else "",
                command(main),
            )
        )
    lines = [
        "| method (frozen all-MiniLM-L6-v2) | accuracy | macro-F1 | setting | command |",
        "|---|---|---|---|---|",
    ]
    previous = None
    for label, acc, f1, how, cmd in rows:
        lines.append(
            f"| {label} | **{fmt(acc)}** | {fmt(f1)} | {how} | {'same run' if cmd == previous else f'`{cmd}`'} |"
        )
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
    full = {"knn-5": "knn-5", "centroid": "centroid", "logreg": "logreg"}
    cells = [fmt(main["methods"].get(full.get(m, m), {}).get("accuracy")) for m in methods]
    lines.append(f"| all ({main['data']['train_rows']:,}) | " + " | ".join(cells) + " |")
    return lines


def fine_tuned_table(outputs: Path) -> list[str]:
    from training.train_classifier import ClassifierArgs

    lines = ["| run | method | before | after | Δ | train time | command |", "|---|---|---|---|---|---|---|"]
    for label, folder in FINE_TUNED:
        path = outputs / folder / "metrics.json"
        if not path.is_file():
            lines.append(f"| {label} | not run | | | | | |")
            continue
        metrics = json.loads(path.read_text())
        config = {
            k: v
            for k, v in metrics["config"].items()
            if k in {f.name for f in dataclasses.fields(ClassifierArgs)}
        }
        cmd = shell_command(
            "python training/train_classifier.py", ClassifierArgs, config, always=("objective", "per_class")
        )
        t = metrics["training"]
        time = (
            f"{t['wall_time_seconds'] / 60:.1f} min total, {t.get('train_seconds', 0) / 60:.1f} min training "
            f"({t['steps']} steps; {t['hardware']}, {t.get('torch_threads', '?')} thread)"
        )
        for i, row in enumerate(r for r in metrics["evaluations"] if r["metric"].startswith("accuracy")):
            delta = row["after"] - row["before"] if row["before"] is not None else None
            method = row["metric"][len("accuracy (") : -1]
            lines.append(
                f"| {label if i == 0 else ''} | {method} | {fmt(row['before'])} | **{fmt(row['after'])}** | "
                f"{'' if delta is None else f'{delta:+.4f}'} | {time if i == 0 else ''} | "
                f"{f'`{cmd}`' if i == 0 else ''} |"
            )
    return lines


def best_after(outputs: Path, folders: list[str]) -> tuple[float | None, str]:
    """The best test accuracy after fine-tuning among the runs in ``folders`` (any method), and which it was."""
    best, where = None, "not run"
    for folder in folders:
        path = outputs / folder / "metrics.json"
        if not path.is_file():
            continue
        for row in json.loads(path.read_text())["evaluations"]:
            if row["metric"].startswith("accuracy") and (best is None or row["after"] > best):
                best, where = row["after"], f"{folder}, {row['metric'][len('accuracy (') : -1]}"
    return best, where


def targets_table(runs: dict[str, dict], outputs: Path) -> list[str]:
    main = runs["classify-agnews.json"]
    zero = max((r["methods"]["zero-shot"]["accuracy"], name) for name, r in runs.items())
    eight, eight_where = best_after(outputs, ["classifier-agnews-triplet-8", "classifier-agnews-setfit-8"])
    full = max((m["accuracy"], name) for name, m in main["methods"].items() if name != "zero-shot")
    tuned_all, tuned_where = best_after(outputs, ["classifier-agnews-triplet--1"])

    def verdict(value, must, goal):
        if value is None:
            return "not run"
        return "goal met" if value >= goal else "must met" if value >= must else "below must"

    # "ours" is the best row of its group on test (several methods, and runs): an optimistic pick, said so below
    return [
        "| setting (issue #22 targets) | must | goal | ours | where | |",
        "|---|---|---|---|---|---|",
        f"| zero-shot (no labelled example) | 0.65 | 0.75 | **{fmt(zero[0])}** | {zero[1]} | "
        f"{verdict(zero[0], 0.65, 0.75)} |",
        f"| 8 per class, fine-tuned on CPU | 0.774 | 0.831 | **{fmt(eight)}** | {eight_where} | "
        f"{verdict(eight, 0.774, 0.831)} |",
        f"| the whole train subset, best method (frozen) | 0.897 | 0.91 | **{fmt(full[0])}** | {full[1]} | "
        f"{verdict(full[0], 0.897, 0.91)} |",
        f"| the whole train subset, after triplet fine-tuning | 0.897 | 0.91 | **{fmt(tuned_all)}** | "
        f"{tuned_where} | {verdict(tuned_all, 0.897, 0.91)} |",
    ]


def paired_table(main: dict) -> list[str]:
    wanted = [
        ("zero-shot", "logreg"),
        ("knn-5", "logreg"),
        ("knn-5", "knn-15"),
        ("knn-1", "knn-5"),
        ("centroid", "logreg"),
    ]
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
        f"uncached, {t['torch_threads']} torch thread, {main['machine']}, shared with a training job).",
        f"- Classifying {main['data']['test_rows']:,} texts given their embeddings (texts/s): {per}.",
    ]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "agnews"))
    parser.add_argument("--outputs", default=str(ROOT / "outputs"))
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    parser.add_argument("--rerun", action="store_true", help="run the commands even where their JSON exists")
    opts = parser.parse_args()
    # 1. run (or read) the classification commands
    Path(opts.results).mkdir(parents=True, exist_ok=True)
    runs = run_all(opts.data, Path(opts.results), opts.rerun)
    main_run = runs["classify-agnews.json"]
    # 2. the tables
    block = [
        START,
        "Generated by `python scripts/results_classify.py` from `results/classify-*.json` (each written "
        "by the command in its row) and the fine-tuning runs' `metrics.json`. AG News test: all 7,600 texts; "
        "labelled examples come from the 8,000-row train subset only; zero-shot templates are chosen on the "
        "train subset, never on test.",
        "",
        "**Against the targets**",
        "",
        *targets_table(runs, Path(opts.outputs)),
        "",
        "“ours” is the best row of its group on the test set (methods × runs), so it is an optimistic pick; "
        "every row is listed below. Fine-tuned runs use one draw of N per class (seed 42), where SetFit reports "
        "a mean over draws.",
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
        "**Fine-tuned encoders** (`training/train_classifier.py`; N per class drawn with seed 42; kNN-5 uses "
        "k = min(5, N); zero-shot's template is re-chosen on the N per class; test = all 7,600 texts)",
        "",
        *fine_tuned_table(Path(opts.outputs)),
        "",
        "**Throughput**",
        "",
        *throughput(main_run),
        "",
        END,
    ]
    # 3. write them between the markers, leaving the rest of the doc as it is
    doc = Path(opts.doc)
    text = doc.read_text()
    if START not in text:
        text += (
            "\n## Classification with embeddings (AG News)\n\nZero-shot, nearest-neighbour, centroid and "
            "logistic-regression classifiers over the bi-encoder (`ctxir.classify`), and the encoder "
            f"fine-tuned for them (`training/train_classifier.py`).\n\n{START}\n{END}\n"
        )
    doc.write_text(
        re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: "\n".join(block), text, flags=re.S)
    )
    print(f"wrote {doc}")


if __name__ == "__main__":
    main()
