"""The steps every Trainer script takes the same way, each with explicit parameters."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxir.encoders.models import pick_device, set_threads
from ctxir.files import machine_info
from ctxir.publish.metrics_file import write_metrics
from ctxir.types import CtxirError
from training import common

Scores = dict[tuple[str, str, str], float]  # (dataset, split, metric) → value


@dataclass
class TaskData:
    """What a script's data step hands the rest."""

    train: Any  # datasets.Dataset, columns in the order the loss reads them
    datasets: list[dict]  # metrics.json "datasets" rows
    dev_evaluator: Any | None = None  # in-training evaluator (held-out data, never test)
    test: dict = field(default_factory=dict)  # what the script's test step reads
    extra: dict = field(default_factory=dict)  # recorded under metrics.json "extra"


def trainer_arguments(training_args_class: type, args, out: Path, device: str, evaluator, **options) -> Any:
    """The library's training arguments: the Trainer settings ``args`` holds, those ctxir's flags imply, ``options``."""
    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(training_args_class) if f.init}
    settings.update(
        output_dir=str(out / "checkpoints"),
        per_device_eval_batch_size=args.per_device_train_batch_size,
        data_seed=args.seed if args.data_seed is None else args.data_seed,
        eval_strategy="steps" if evaluator is not None else "no",
        eval_steps=args.eval_steps or None,
        save_total_limit=None if args.keep_checkpoints else args.save_total_limit,
        resume_from_checkpoint=None,  # resolved by Run ('last' → a checkpoint) and passed to train()
        use_cpu=args.use_cpu or device == "cpu",
        **options,
    )
    if args.load_best:
        if evaluator is None:
            raise CtxirError(
                "--load-best needs a dev evaluator during training: this run has none (no held-out data, "
                "or --eval-steps 0); drop --load-best or hold out dev data"
            )
        best = dev_metric_key(evaluator)
        settings.update(load_best_model_at_end=True, metric_for_best_model=best, greater_is_better=True)
    return training_args_class(**settings)


def dev_metric_key(evaluator) -> str:
    """The evaluator's primary metric as the Trainer logs it, less "eval_": ``<name>_<metric>``."""
    primary, name = evaluator.primary_metric, getattr(evaluator, "name", "")
    return f"{name}_{primary}" if name and not primary.startswith(f"{name}_") else primary


class Run:
    """One run's folder and clock: train.log, --resume, the Trainer run and metrics.json's "training"."""

    def __init__(self, out: Path, script: str, config: dict, resume: str, run_device: str, threads: int):
        self.out, self.script, self.config = Path(out), script, config
        self.checkpoints = self.out / "checkpoints"
        self.resume_from = common.resolve_resume(resume, self.checkpoints)
        self.device = pick_device(run_device)
        set_threads(threads)
        self.started = time.perf_counter()
        self.train_output, self.train_seconds = None, 0.0
        self._log = contextlib.ExitStack()

    def __enter__(self) -> Run:
        self._log.enter_context(common.tee_output(self.out / "train.log"))
        print(f"# {self.script} {' '.join(sys.argv[1:])}\n{self.config}")
        return self

    def __exit__(self, *exc) -> None:
        self._log.close()

    def train(self, trainer_class: type, settings, model, train_dataset, loss, evaluator=None):
        """The trained Trainer (its log mirrored to training_log.jsonl); a failed --load-best stops the run."""
        trainer = trainer_class(
            model=model,
            args=settings,
            train_dataset=train_dataset,
            loss=loss,
            evaluator=evaluator,
            callbacks=[common.jsonl_log_callback(self.out / "training_log.jsonl")],
        )
        # the Trainer logs that it could not load the --load-best checkpoint and goes on with the last step's
        failures, trainer_logger = [], logging.getLogger("sentence_transformers.base.trainer")

        def catch(record: logging.LogRecord) -> bool:
            if record.getMessage().startswith("Could not load the best model"):
                failures.append(record.getMessage())
            return True

        start = time.perf_counter()
        trainer_logger.addFilter(catch)
        try:
            self.train_output = common.train_keeping_checkpoints(trainer, self.resume_from, self.checkpoints)
        finally:
            trainer_logger.removeFilter(catch)
        self.train_seconds = time.perf_counter() - start
        if failures:  # the checkpoints stay: nothing trained is lost
            raise CtxirError(
                f"--load-best: {failures[0]} The run's checkpoints are kept in {str(self.checkpoints)!r}; "
                "fix the cause and run again, or run without --load-best"
            )
        return trainer

    def saved(self, keep_checkpoints: bool) -> None:
        """The model is saved in ``out``: its checkpoints go unless --keep-checkpoints."""
        if not keep_checkpoints:
            shutil.rmtree(self.checkpoints, ignore_errors=True)
        print(f"saved model to {self.out}")

    def training(self, trainer, train_examples: int) -> dict:
        """metrics.json "training": steps, epochs, batch, learning rate, times (the Trainer's own), device, seed."""
        state, settings = trainer.state, trainer.args
        losses = [row["loss"] for row in state.log_history if "loss" in row]
        metrics = getattr(self.train_output, "metrics", {}) or {}
        machine = machine_info()
        return {
            "steps": int(state.global_step),
            "epochs": round(float(state.epoch or 0.0), 4),
            "train_examples": int(train_examples),
            "batch_size": int(settings.per_device_train_batch_size),
            "learning_rate": float(settings.learning_rate),
            "wall_time_seconds": round(time.perf_counter() - self.started, 1),
            "train_loop_seconds": round(float(metrics.get("train_runtime", 0.0)), 1),
            "examples_per_second": round(float(metrics.get("train_samples_per_second", 0.0)), 2),
            "device": self.device,
            "hardware": machine["hardware"],
            "torch_threads": machine["torch_threads"],
            "final_loss": round(float(losses[-1]), 6) if losses else None,
            "seed": int(settings.seed),
            "train_seconds": round(self.train_seconds, 1),
            "resumed_from": self.resume_from,
        }


def anchor_fields(anchor, row: dict) -> dict:
    """The anchor's metrics.json fields for ``row``: only when measured on as many queries (and depth)."""
    if anchor is None:
        return {}
    if not isinstance(anchor, dict):
        return {"anchor": anchor[0], "anchor_name": anchor[1]}
    same_depth = row["task"] != "reranking" or row.get("depth") == anchor.get("depth")
    if row.get("queries") != anchor["queries"] or not same_depth:
        return {}
    named = {
        f"anchor_{key}": anchor[key]
        for key in ("source", "queries", "first_stage", "depth")
        if anchor.get(key)
    }
    return {"anchor": anchor["value"], "anchor_name": anchor["name"], **named}


def evaluation_rows(before: Scores, after: Scores, tasks: dict, coverage: dict, anchors: dict) -> list[dict]:
    """metrics.json "evaluations": a row per test score; ``tasks``: {dataset: (task, config text)}, ``coverage``: {dataset:
    row fields}, ``anchors``: {(dataset, metric): published figure}."""
    rows = []
    for (name, split, metric), value in after.items():
        task, config = tasks[name]
        row = common.evaluation_row(
            name, split, task, metric, before.get((name, split, metric)), value, config=config
        )
        row.update(coverage.get(name, {}))
        row.update(anchor_fields(anchors.get((name, metric)), row))
        rows.append(row)
    return rows


def dev_record(trainer, dev_before: dict, dev_after: dict) -> dict:
    """metrics.json "extra" of the dev evaluator: the --load-best checkpoint, the dev scores before and after."""
    state, record = trainer.state, {}
    if trainer.args.load_best_model_at_end and state.best_model_checkpoint:
        step = int(state.best_model_checkpoint.rsplit("-", 1)[-1])
        metric = trainer.args.metric_for_best_model
        record["best_checkpoint"] = {"step": step, "metric": metric, "value": state.best_metric}
    return {
        **record,
        "dev_before": {k: round(float(v), 4) for k, v in dev_before.items()},
        "dev_after": {k: round(float(v), 4) for k, v in dev_after.items()},
    }


def write_run_metrics(
    out: Path, args, *, model_type, objective, datasets, training, evaluations, extra
) -> dict:
    """Write metrics.json: what was trained on what, how (``args``' config), how long, and the scores."""
    metrics = {
        "model_type": model_type,
        "model_name": args.model_name or Path(out).name,
        "base_model": args.model,
        "objective": objective,
        "datasets": datasets,
        "config": common.run_config(args),
        "training": training,
        "evaluations": evaluations,
        "extra": extra,
    }
    print(f"wrote {out} (model), {write_metrics(out, metrics)}")
    return metrics
