"""Rewrite docs/results.md's training tables from the shipped models' committed metrics.json and evaluation.json.

    python scripts/results_training.py [--doc docs/results.md]

Only runs whose files are committed have a row; each command rebuilds its row's files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.cli import command_line  # noqa: E402
from scripts import results_targets  # noqa: E402
from scripts.results_tables import SHIPPED_CROSS_ENCODER, fmt, write_block  # noqa: E402

START, END = "<!-- training:start -->", "<!-- training:end -->"
# (table title, [(label, committed folder, the script that trained it)])
TRAINING_RUNS = {
    "STS-B test Spearman": [
        ("pair scorer (shipped): LoRA r16 + segment-cosine head, the silver-pair model one more epoch on STS-B "
         "train with each pair also as (b, a), scored as the mean of both orders, lr 4e-4",
         "ctxir/assets/models/sts-cross-encoder", "train_pair_scorer")
    ]
}  # fmt: skip
# the re-rankers' table: metrics.json (training command) and evaluation.json (training/evaluate_reranker.py)
RERANKERS = [
    (SHIPPED_CROSS_ENCODER, "ctxir/assets/models/cross-encoder", "train_cross_encoder"),
    ("shipped CLS-LR (on the stage-7 cross-encoder, C chosen by ranking)", "ctxir/assets/models/cls-lr",
     "train_cls_lr"),
]  # fmt: skip
SCRIPT_ARGS = {
    "train_bi_encoder": ("training.train_bi_encoder", "BiEncoderArgs"),
    "train_cross_encoder": ("training.train_cross_encoder", "CrossEncoderArgs"),
    "train_cls_lr": ("training.train_cls_lr", "ClsLrArgs"),
    "train_pair_scorer": ("training.train_pair_scorer", "PairScorerArgs"),
}
SHOWN = ("nDCG@10", "spearman", "F1 (relevant class)", "accuracy")  # metrics.json keeps the rest


def training_command(metrics: dict, script: str) -> str:
    """The command that rebuilds a run from the config its metrics.json records."""
    module, name = SCRIPT_ARGS[script]
    args_class = getattr(importlib.import_module(module), name)
    always = ("task",) if "task" in metrics["config"] else ()
    # the data root is a path on the machine that trained it: the reader's own default applies
    config = {k: v for k, v in metrics["config"].items() if k != "data_dir"}
    return command_line(
        f"python training/{script}.py", args_class, config, always, replace={str(ROOT) + "/": ""}
    )


def wall_time(metrics: dict) -> str:
    """The whole script's wall time (CLS-LR's training block times only the fit)."""
    seconds = metrics.get("extra", {}).get("total_wall_time_seconds")
    seconds = seconds or metrics["training"].get("wall_time_seconds")
    return "" if seconds is None else f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def training_table(title: str, runs: list[tuple[str, str, str]]) -> list[str]:
    lines = [
        f"**{title}**",
        "",
        "| Run | Metric | Start | After training | Anchor | Wall time | Examples/s | Command |",
        "|---|---|---:|---:|---|---:|---:|---|",
    ]
    for label, folder, script in runs:
        metrics = json.loads((ROOT / folder / "metrics.json").read_text(encoding="utf-8"))
        command = training_command(metrics, script)
        speed = metrics["training"].get("examples_per_second") or ""
        # a row with a "source" was measured by another script (scripts/hub_user_figures.py), not by this run
        for row in (r for r in metrics["evaluations"] if r["metric"] in SHOWN and not r.get("source")):
            anchor = f"{row['anchor_name']} {row['anchor']}" if row.get("anchor") is not None else ""
            lines.append(
                f"| {label} | {row['metric']} ({row['split']}) | {fmt(row['before'])} | **{fmt(row['after'])}** | "
                f"{anchor} | {wall_time(metrics)} | {speed} | `{command}` |"
            )
    return [*lines, ""]


def pvalue(value) -> str:
    """A p-value as evaluation.json records it (4 decimals): 0.0 there means below 0.0001."""
    if value is None:
        return ""
    return "< 0.0001" if value < 0.0001 else f"{value:.2g}"


def versus(block: dict) -> str:
    """'0.6863 → 0.7162 (+0.0299, 67/21, p = 0.0009)': first stage → fused, from evaluation.json."""
    test = block.get("fused_vs_first_stage", {})
    p = pvalue(test.get("t_pvalue"))
    return (
        f"{fmt(block['first_stage'].get('nDCG@10'))} → {fmt(block['fused'].get('nDCG@10'))} "
        f"({test.get('delta', 0):+.4f}, {test.get('wins')}/{test.get('losses')}, p {p if p.startswith('<') else '= ' + p})"
    )


def reranker_rows(label: str, folder: Path, script: str) -> tuple[list[str], dict]:
    """One row per SciFact depth in the folder's evaluation.json."""
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    evaluation = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    fusion = evaluation.get("fusion") or {}
    fused_how = f"{fusion['method']} k = {fusion['k']}, weights {fusion['weights']}" if fusion else ""
    # fusion.json (same script, --choose-fusion) holds what the choice was made on: the held-out training claims
    if (folder / "fusion.json").is_file():
        dev = json.loads((folder / "fusion.json").read_text(encoding="utf-8")).get("dev") or {}
        fused_how += (
            f"; dev nDCG@10 fused {fmt(dev.get('fused'))}, BM25 {fmt(dev.get('first_stage'))}, "
            f"alone {fmt(dev.get('alone'))}"
        )
    commands = f"train: `{training_command(metrics, script)}`; evaluate: `{evaluation.get('command', '')}`"
    rows = []
    for depth, block in ((k, v) for k, v in evaluation["scifact_test"].items() if k.startswith("bm25@")):
        all_, unseen = block["all"], block.get("unseen", {})
        top = depth.split("@")[1]
        others = [
            f"{title} {stage.split('@')[0]}: {versus(v)}"
            for name, title in (("msmarco", "MS MARCO sample"), ("demo", "demo corpus"))
            for stage, v in evaluation.get(name, {}).items()
            if stage.endswith("@" + top)
        ]
        rows.append(
            f"| {label} | BM25 top {top} | {fmt(all_['first_stage'].get('nDCG@10'))} | "
            f"{fmt(all_['alone'].get('nDCG@10'))} / {fmt(unseen.get('alone', {}).get('nDCG@10'))} | "
            f"**{fmt(all_['fused'].get('nDCG@10'))}** / {fmt(unseen.get('fused', {}).get('nDCG@10'))} | "
            f"{pvalue(all_.get('fused_vs_first_stage', {}).get('t_pvalue'))} / "
            f"{pvalue(unseen.get('fused_vs_first_stage', {}).get('t_pvalue'))} | {fused_how} | "
            f"{'; '.join(others)} | {wall_time(metrics)} | {commands} |"
        )
    return rows, evaluation


def reranker_table() -> list[str]:
    """The re-rankers' table, and a summary sentence for the shipped cross-encoder (the prose cites it)."""
    lines = [
        "**Re-rankers: SciFact test nDCG@10, BM25 → re-ranked**, from each folder's `evaluation.json` (written by "
        '`training/evaluate_reranker.py`). "Unseen" claims cite no abstract a training claim cites; p is a paired '
        "t-test of fused vs BM25 over the claims. Dev is the held-out training claims in `fusion.json` that the "
        "fusion was chosen on. The evaluate command is the last one that wrote `evaluation.json`, which keeps what "
        "earlier runs of it wrote, such as MS MARCO and demo.",
        "",
        "| Re-ranker | Candidates | BM25 | Alone (all / unseen) | Fused (all / unseen) | p fused vs BM25 "
        "(all / unseen) | Fusion (chosen on held-out training claims) | Elsewhere: first stage → fused "
        "(Δ, wins/losses, p) | Training wall time | Commands |",
        "|---|---|---:|---|---|---|---|---|---:|---|",
    ]
    summary = ""
    for label, folder, script in RERANKERS:
        rows, evaluation = reranker_rows(label, ROOT / folder, script)
        lines += rows
        if label == SHIPPED_CROSS_ENCODER:
            top = evaluation["scifact_test"]["bm25@20"]["all"]
            summary = (
                f"SciFact test over BM25's top 20, the {label}. Fused with BM25 (its default mode), nDCG@10 "
                f"{versus(top)}; alone, {fmt(top['alone'].get('nDCG@10'))}."
            )
    return [*lines, "", summary, ""]


def training_block() -> str:
    tables = [line for title, runs in TRAINING_RUNS.items() for line in training_table(title, runs)]
    return "\n".join(
        [
            "Generated by `python scripts/results_training.py` from the shipped models' committed `metrics.json` "
            "and `evaluation.json` (`ctxir/assets/models/`); each command rebuilds its row's files. Hardware and "
            "timings are those recorded in each file (`training.hardware`). Runs without a committed record have "
            "no row here; docs/lab.md tells their story.",
            "",
            *tables,
            *reranker_table(),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    doc = Path(parser.parse_args(argv).doc)
    write_block(doc, f"{START}\n{training_block()}\n{END}")
    results_targets.write(doc)
    print(f"wrote {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
