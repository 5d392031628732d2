"""Finish a run on one of its kept checkpoints (the dev-best step chosen after the run): its model files and metrics.json.

python -m training.finish_checkpoint --run outputs/ce-match-stage4 --step 550 --output-dir outputs/ce-550
"""

from __future__ import annotations

import filecmp
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/finish_checkpoint.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.cli import flag
from ctxir.files import read_json
from ctxir.publish.metrics_file import write_metrics
from ctxir.types import CtxirError
from training.common import cli_main
from training.evaluate_reranker import EVALUATION_FILE, evaluation_rows


@dataclass
class FinishCheckpointArgs:
    run: str = flag("", "the training run's folder: metrics.json and checkpoints/")
    step: int = flag(0, "the checkpoint to finish on (checkpoints/checkpoint-<step>)")
    output_dir: str = flag("", "the folder to write (default: <run>-<step>)")
    metric: str = flag(
        "ndcg@10", "the dev metric recorded when the run recorded none (the shortest key ending in it)"
    )


def run(args: FinishCheckpointArgs) -> dict:
    # 1. the run, its checkpoint and the dev evaluation logged at that step
    run_dir = Path(args.run)
    if not (run_dir / "metrics.json").is_file():
        raise CtxirError(
            f"--run {args.run!r} has no metrics.json: pass the folder a finished training run wrote "
            "(train_cross_encoder.py / train_bi_encoder.py --output-dir)"
        )
    checkpoint = run_dir / "checkpoints" / f"checkpoint-{args.step}"
    if not (checkpoint / "trainer_state.json").is_file():
        names = [p.name.rsplit("-", 1)[-1] for p in (run_dir / "checkpoints").glob("checkpoint-*")]
        raise CtxirError(
            f"--step {args.step!r}: {run_dir / 'checkpoints'} holds checkpoints at steps "
            f"{sorted(int(n) for n in names if n.isdigit()) or 'none'}; pass one of them (the run must be trained "
            "with --keep-checkpoints true)"
        )
    state = read_json(checkpoint / "trainer_state.json")
    log = state.get("log_history", [])
    dev = dev_scores(log, args.step)
    if not dev:
        raise CtxirError(
            f"--step {args.step}: the run logged no dev evaluation at that step (trainer_state.json); "
            "finish on a step the dev evaluator scored (a multiple of the run's --eval-steps)"
        )
    run_metrics = read_json(run_dir / "metrics.json")
    extra = run_metrics.get("extra", {})
    key = metric_key(dev, args.metric, extra.get("best_checkpoint", {}).get("metric", ""))
    out = Path(args.output_dir or f"{run_dir}-{args.step}")
    # 2. the model files, never the Trainer's pickles
    copied = copy_model_files(checkpoint, out, run_dir)
    # 3. metrics.json: the run's record at this step, with the test rows of this folder's own evaluation
    training = dict(run_metrics["training"])
    whole_run = {
        k: training.get(k)
        for k in ("steps", "epochs", "final_loss", "wall_time_seconds", "train_loop_seconds")
    }
    losses = [row["loss"] for row in log if "loss" in row and row.get("step", 0) <= args.step]
    training.update(
        steps=args.step,
        epochs=round(float(state.get("epoch") or 0.0), 4),
        final_loss=round(float(losses[-1]), 6) if losses else None,
        finished_from={"run": str(run_dir), "checkpoint": checkpoint.name, "whole_run": whole_run},
    )
    evaluation = read_json(out / EVALUATION_FILE)
    metrics = {
        **run_metrics,
        "model_name": out.name,
        "training": training,
        "evaluations": evaluation_rows(evaluation) if evaluation else [],
        "extra": {
            **extra,
            "best_checkpoint": {
                "step": args.step,
                "metric": key,
                "value": dev[key],
                "chosen": "after the run",
            },
            "dev_after": {k: round(v, 4) for k, v in dev.items()},
        },
    }
    path = write_metrics(out, metrics)
    print(
        f"finished {run_dir} at step {args.step} ({key} {dev[key]:.4f}): {len(copied)} files -> {out}, {path}"
    )
    return metrics


def dev_scores(log_history: list[dict], step: int) -> dict[str, float]:
    """The dev evaluator's scores logged at ``step``, less the ``eval_`` prefix and the timing entries.

    >>> dev_scores([{"step": 2, "loss": 1.0}, {"step": 2, "eval_dev_ndcg@10": 0.5, "eval_runtime": 3.0}], 2)
    {'dev_ndcg@10': 0.5}
    """
    noise = ("runtime", "samples_per_second", "steps_per_second", "epoch")  # logged beside every dev score
    return {
        k.removeprefix("eval_"): float(v)
        for row in log_history
        if row.get("step") == step
        for k, v in row.items()
        if k.startswith("eval_") and not k.endswith(noise)
    }


def metric_key(dev: dict[str, float], metric: str, recorded: str = "") -> str:
    """The dev key to record among those that are ``metric`` or end in ``_metric``: the one the run's --load-best
    chose by (``recorded``), else the shortest (the dev evaluator's own score; a longer one such as
    ``…_base_ndcg@10`` is a baseline it logs beside it).

    >>> metric_key({"dev_base_ndcg@10": 0.4, "dev_ndcg@10": 0.5, "dev_mrr@10": 0.3}, "ndcg@10")
    'dev_ndcg@10'
    """
    keys = sorted((k for k in dev if k == metric or k.endswith(f"_{metric}")), key=len)
    if recorded in keys:
        return recorded
    if not keys or (len(keys) > 1 and len(keys[0]) == len(keys[1])):
        raise CtxirError(
            f"--metric {metric!r} matches {keys or 'none'} of the dev scores logged at that step "
            f"({', '.join(sorted(dev))}): name one of them"
        )
    return keys[0]


def copy_model_files(checkpoint: Path, out: Path, run_dir: Path) -> dict[Path, Path]:
    """The checkpoint's model files the run's own saved model has, under ``out`` (never over others)."""
    # what ctxir's loaders read, never a pickle, of the files the run's own saved model has
    files = {
        p.relative_to(checkpoint): p
        for p in sorted(checkpoint.rglob("*"))
        if p.suffix in (".json", ".safetensors", ".txt") and (run_dir / p.relative_to(checkpoint)).is_file()
    }
    if not any(p.suffix == ".safetensors" for p in files):
        raise CtxirError(
            f"--run {str(run_dir)!r} holds no saved model beside its metrics.json to take the layout "
            "from: pass the folder of a finished run"
        )
    clashes = [
        str(f) for f, p in files.items() if (out / f).is_file() and not filecmp.cmp(p, out / f, shallow=False)
    ]
    if clashes:
        raise CtxirError(
            f"--output-dir {str(out)!r} already holds other files named {clashes}: pass a new folder, "
            "or the copy of this very checkpoint"
        )
    for f, p in files.items():
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, out / f)
    return files


def main(argv: list[str] | None = None) -> int:
    return cli_main(FinishCheckpointArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
