"""One training runner for every model kind: argument checks, Trainer set-up, save/reload, evaluation, metrics.json.

A model kind is a ``ModelSpec``: how to load its starting model, build its data and loss, evaluate it, and save and
reload it. ``train(args, spec)`` does the rest the same way for all of them, so a new kind costs a spec, not a copied
script. The two specs today live in ``train_bi_encoder.py`` and ``train_cross_encoder.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxir.encoders.models import pick_device
from ctxir.publish.metrics_file import write_metrics
from ctxir.types import CtxirError
from training.common import (
    check_common_args,
    data_folder,
    evaluation_row,
    jsonl_log_callback,
    resolve_resume,
    run_config,
    set_threads,
    tee_output,
    train_keeping_checkpoints,
    training_block,
)

Scores = dict[tuple[str, str, str], float]  # (dataset, split, metric) → value


@dataclass
class TaskData:
    """What a spec's data builder hands the runner."""

    train: Any  # datasets.Dataset, columns in the order the loss reads them
    datasets: list[dict]  # metrics.json "datasets" rows
    dev_evaluator: Any | None = None  # in-training evaluator (held-out data, never test)
    test: dict = field(default_factory=dict)  # what the spec's evaluate() needs
    extra: dict = field(default_factory=dict)  # recorded under metrics.json "extra"
    loss_options: dict = field(default_factory=dict)  # e.g. the BCE pos_weight the data implies


@dataclass(frozen=True)
class ModelSpec:
    """Everything that differs between model kinds; every callable takes ``args`` (the script's dataclass)."""

    model_type: str  # metrics.json model_type
    script: str  # printed at the top of train.log
    default_output: Callable[[Any], str]
    data_names: Callable[[Any], list[str]]  # dataset folders that must exist under --data-dir
    check: Callable[[Any], None]  # the kind's own argument checks (may normalise args, e.g. 'auto' → a loss)
    load: Callable[[Any, str], Any]  # (args, device) → the starting model
    build_data: Callable[[Any, Any, str], TaskData]  # (args, model, device)
    build_loss: Callable[[Any, Any, TaskData], Any]  # (args, model, data)
    evaluate: Callable[[Any, TaskData, Any, str], Scores]  # (model, data, args, model id) → test scores
    describe: Callable[[str, TaskData, Any], tuple[str, str]]  # (dataset, data, args) → (task, config text)
    save: Callable[[Any, Path, Any], None]  # (model, folder, args)
    reload: Callable[[Path, str], Any]  # (folder, device) → the model as a user loads it
    objective_name: Callable[[Any], str]  # metrics.json objective (the loss class)
    trainer_classes: Callable[
        [], tuple[type, type]
    ]  # (TrainingArguments class, Trainer class), imported lazily
    anchors: dict = field(
        default_factory=dict
    )  # (dataset, metric) → {value, name, source, queries, ...} (anchor_fields)
    training_options: Callable[[Any], dict] = (
        lambda args: {}
    )  # extra TrainingArguments (e.g. a batch sampler)
    extra: Callable[[Any, Any, TaskData], dict] = lambda args, model, data: {}  # (args, trained model, data)
    # (dataset, data, args) → what a test figure covers: queries (pairs), subset, first_stage, depth (metrics.json)
    coverage: Callable[[str, TaskData, Any], dict] = lambda name, data, args: {}


def anchor_fields(anchor, row: dict) -> dict:
    """The anchor's metrics.json fields for ``row``: an ``ANCHORS`` entry {value, name, source, queries[, first_stage,
    depth]} stands beside the row only when it was measured on as many queries (and, re-ranking, at the same depth):
    the card check (ctxir.publish.card_check.row_problems) refuses any other pair. A (value, name) pair is kept as
    written (the check then asks for its source)."""
    if anchor is None:
        return {}
    if not isinstance(anchor, dict):
        return {"anchor": anchor[0], "anchor_name": anchor[1]}
    same = row.get("queries") == anchor["queries"] and (
        row["task"] != "reranking" or row.get("depth") == anchor.get("depth")
    )
    if not same:
        return {}
    return {
        "anchor": anchor["value"],
        "anchor_name": anchor["name"],
        "anchor_source": anchor["source"],
        "anchor_queries": anchor["queries"],
        **({"anchor_first_stage": anchor["first_stage"]} if anchor.get("first_stage") else {}),
        **({"anchor_depth": anchor["depth"]} if anchor.get("depth") else {}),
    }


def evaluation_rows(spec: ModelSpec, before: Scores, after: Scores, data: TaskData, args) -> list[dict]:
    rows = []
    for (name, split, metric), value in after.items():
        task, config = spec.describe(name, data, args)
        row = evaluation_row(
            name, split, task, metric, before.get((name, split, metric)), value, config=config
        )
        row.update(spec.coverage(name, data, args))
        row.update(anchor_fields(spec.anchors.get((name, metric)), row))
        rows.append(row)
    return rows


def rounded(scores: dict) -> dict:
    return {k: round(float(v), 4) for k, v in scores.items()}


def trainer_arguments(args, spec: ModelSpec, out: Path, device: str, evaluator) -> Any:
    """The library's own training arguments for the kind's Trainer: every Trainer setting as ``args`` holds it
    (``args`` extends the same class), and the ones the run derives from ctxir's flags: checkpoints under
    ``out``/checkpoints, the dev evaluator every --eval-steps, --keep-checkpoints, --load-best, --device cpu, the
    evaluation batch = --batch-size, the data order seeded by --seed unless --data-seed is given, and the kind's
    own (``spec.training_options``, e.g. a batch sampler)."""
    training_args_class, _ = spec.trainer_classes()
    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(training_args_class) if f.init}
    settings.update(
        output_dir=str(out / "checkpoints"),
        per_device_eval_batch_size=args.per_device_train_batch_size,
        data_seed=args.seed if args.data_seed is None else args.data_seed,
        eval_strategy="steps" if evaluator is not None else "no",
        eval_steps=args.eval_steps or None,
        save_total_limit=None if args.keep_checkpoints else args.save_total_limit,
        resume_from_checkpoint=None,  # resolved by the runner ('last' → a checkpoint) and passed to train()
        # the Trainer places the model itself (over every GPU under torchrun): --device cpu must be forced on it
        use_cpu=args.use_cpu or device == "cpu",
        **best_model_options(args, evaluator),
        **spec.training_options(args),
    )
    return training_args_class(**settings)


def make_trainer(args, spec: ModelSpec, model, data: TaskData, out: Path, device: str):
    """The kind's sentence-transformers Trainer (``trainer_arguments``), the log history mirrored to
    ``out``/training_log.jsonl."""
    _, trainer_class = spec.trainer_classes()
    evaluator = data.dev_evaluator if args.eval_steps > 0 else None
    return trainer_class(
        model=model,
        args=trainer_arguments(args, spec, out, device, evaluator),
        train_dataset=data.train,
        loss=spec.build_loss(args, model, data),
        evaluator=evaluator,
        callbacks=[jsonl_log_callback(out / "training_log.jsonl")],
    )


def dev_metric_key(evaluator) -> str:
    """The key the Trainer logs the evaluator's primary metric under, less its "eval_" prefix: the evaluator's name
    then its metric (``scifact-train-heldout_ndcg@10``), as sentence-transformers' evaluators prefix their results."""
    primary, name = evaluator.primary_metric, getattr(evaluator, "name", "")
    return f"{name}_{primary}" if name and not primary.startswith(f"{name}_") else primary


def best_model_options(args, evaluator) -> dict:
    """--load-best: the Trainer keeps the dev-best checkpoint and loads it at the end (higher is better)."""
    if not getattr(args, "load_best", False):
        return {}
    if evaluator is None:
        raise CtxirError(
            "--load-best needs a dev evaluator during training: this run has none (no held-out data, "
            "or --eval-steps 0); drop --load-best or hold out dev data"
        )
    return {
        "load_best_model_at_end": True,
        "metric_for_best_model": dev_metric_key(evaluator),
        "greater_is_better": True,
    }


def best_checkpoint(trainer) -> dict | None:
    """The checkpoint --load-best ended on: its step, the metric and its dev value (None without --load-best)."""
    state = trainer.state
    if not trainer.args.load_best_model_at_end or not state.best_model_checkpoint:
        return None
    return {
        "step": int(state.best_model_checkpoint.rsplit("-", 1)[-1]),
        "metric": trainer.args.metric_for_best_model,
        "value": state.best_metric,
    }


@contextmanager
def best_load_failures() -> Iterator[list[str]]:
    """The messages of sentence-transformers' Trainer when it could not load the --load-best checkpoint.

    The Trainer logs that failure and goes on with the last step's weights, so without this a run would save the
    last step while metrics.json named the dev-best one as what was kept."""
    failures: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Could not load the best model"):
                failures.append(record.getMessage())

    handler, trainer_logger = Catch(logging.ERROR), logging.getLogger("sentence_transformers.base.trainer")
    trainer_logger.addHandler(handler)
    try:
        yield failures
    finally:
        trainer_logger.removeHandler(handler)


def metrics_record(args, spec: ModelSpec, data: TaskData, trainer, trained, run: dict, scores: dict) -> dict:
    """metrics.json: what was trained on what, how (the config), how long, and the scores before and after."""
    state = trainer.state
    return {
        "model_type": spec.model_type,
        "model_name": args.model_name or run["out"].name,
        "base_model": args.model,
        "objective": spec.objective_name(args),
        "datasets": data.datasets,
        "config": run_config(args),
        "training": {
            **training_block(
                run["train_output"],
                steps=state.global_step,
                epochs=state.epoch or 0.0,
                train_examples=len(data.train),
                batch_size=args.per_device_train_batch_size,
                learning_rate=args.learning_rate,
                wall_time_seconds=run["wall_time_seconds"],
                device=run["device"],
                seed=args.seed,
                log_history=state.log_history,
            ),
            "train_seconds": round(run["train_seconds"], 1),
            "resumed_from": run["resumed_from"],
        },
        "evaluations": evaluation_rows(spec, scores["before"], scores["after"], data, args),
        "extra": {
            **data.extra,
            **({"best_checkpoint": best} if (best := best_checkpoint(trainer)) else {}),
            "dev_before": rounded(scores["dev_before"]),
            "dev_after": rounded(scores["dev_after"]),
            "max_length": getattr(trained, "max_seq_length", None)
            or args.max_length,  # as used, after the cap
            **spec.extra(args, trained, data),
        },
    }


def train(args, spec: ModelSpec) -> dict:
    """Train one model as ``spec`` describes; returns the metrics.json record (empty on non-main processes)."""
    # 0. check the arguments and the data before anything heavy is loaded
    check_common_args(args)
    spec.check(args)
    for name in spec.data_names(args):
        data_folder(args.data_dir, name)
    out = Path(args.output_dir or spec.default_output(args))
    checkpoint_dir = out / "checkpoints"
    resume_from = resolve_resume(args.resume_from_checkpoint, checkpoint_dir)
    device = pick_device(args.run_device)
    set_threads(args.torch_threads)
    started = time.perf_counter()
    with tee_output(out / "train.log"):
        print(f"# {spec.script} {' '.join(sys.argv[1:])}\n{run_config(args)}")
        # 1. load the starting model
        model = spec.load(args, device)
        # 2. build the training data and the evaluators
        data = spec.build_data(args, model, device)
        print(f"training rows: {len(data.train)}, columns {data.train.column_names}")
        # 3. evaluate the starting model on the test splits
        before = spec.evaluate(model, data, args, args.model) if args.eval_before else {}
        print(f"before training: {before}")
        dev_before = data.dev_evaluator(model) if data.dev_evaluator is not None and args.eval_before else {}
        # 4. train with the kind's Trainer
        trainer = make_trainer(args, spec, model, data, out, device)
        train_start = time.perf_counter()
        with best_load_failures() as failures:
            train_output = train_keeping_checkpoints(trainer, resume_from, checkpoint_dir)
        train_seconds = time.perf_counter() - train_start
        if failures:  # the checkpoints stay: nothing trained is lost
            raise CtxirError(
                f"--load-best: {failures[0]} The run's checkpoints are kept in {str(checkpoint_dir)!r}; "
                "fix the cause and run again, or run without --load-best"
            )
        if not trainer.is_world_process_zero():
            return {}
        # 5. save, then reload from disk as every user will
        spec.save(model, out, args)
        if not args.keep_checkpoints:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
        print(f"saved model to {out}")
        trained = spec.reload(out, device)
        # 6. evaluate the trained model
        after = spec.evaluate(trained, data, args, str(out))
        dev_after = data.dev_evaluator(trained) if data.dev_evaluator is not None else {}
        print(f"after training: {after}")
        # 7. write metrics.json
        run = {
            "out": out,
            "device": device,
            "resumed_from": resume_from,
            "train_output": train_output,
            "train_seconds": train_seconds,
            "wall_time_seconds": time.perf_counter() - started,
        }
        metrics = metrics_record(
            args,
            spec,
            data,
            trainer,
            trained,
            run,
            {"before": before, "after": after, "dev_before": dev_before, "dev_after": dev_after},
        )
        path = write_metrics(out, metrics)
        print(f"wrote {out} (model), {path}")
    return metrics
