"""Shared pieces of the training scripts: metrics.json rows, logs, checks, data paths, arguments."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ctxir.cli import RECIPE_HELP, flag
from ctxir.cli import cli_main as _cli_main
from ctxir.encoders.models import DEFAULT_BI_ENCODER
from ctxir.files import DiskFullError, is_disk_full
from ctxir.publish.licenses import DATA_LICENSES
from ctxir.publish.metrics_file import json_default
from ctxir.types import CtxirError

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
TRAINING_DIR = REPO_ROOT / "training"
RECIPES_DIR = TRAINING_DIR / "recipes"
DEFAULT_DATA_DIR = str(REPO_ROOT.parent / "shared" / "data")

# SQuAD questions a re-ranker's fused mode is chosen on (--fusion-dev squad); other scripts keep them out
SQUAD_DEV_QUERIES = 100
# each dataset's folder under --data-dir and what it must hold
DATA_FOLDERS = {
    "scifact": ("scifact", "corpus.jsonl, queries.jsonl and qrels/{train,test}.tsv"),
    "stsb": ("stsbenchmark", "sts-train.csv, sts-dev.csv and sts-test.csv"),
    "msmarco": ("msmarco_sample", "corpus.jsonl, queries.jsonl and qrels/test.tsv"),
    "med": ("classic/med_beir", "corpus.jsonl, queries.jsonl and qrels/test.tsv"),
    "npl": ("classic/npl_beir", "corpus.jsonl, queries.jsonl and qrels/test.tsv"),
    "lisa": ("classic/lisa_beir", "corpus.jsonl, queries.jsonl and qrels/test.tsv"),
}


def dataset_entry(name: str, split: str, role: str, path: str | os.PathLike, num_examples: int) -> dict:
    """One row of metrics.json "datasets" (``role`` train or eval); ``name`` is a key of ``DATA_LICENSES``."""
    row = {"name": name, "split": split, "role": role, "path": str(path), "license": DATA_LICENSES.get(name)}
    return {**row, "num_examples": int(num_examples)}


def general_entries(data_dir: str | os.PathLike, record: dict) -> list[dict]:
    """metrics.json "datasets" rows of the --general sources trained on (``record``: the run's ``extra.general``)."""
    from ctxir.data.general import GENERAL_FILES, general_file

    return [
        dataset_entry(
            source,
            GENERAL_FILES[source][1],
            "train",
            general_file(data_dir, source).parent,
            stats.get("pairs", stats["queries"]),
        )
        for source, stats in record.items()
    ]


def evaluation_row(
    dataset: str, split: str, task: str, metric: str, before: float | None, after: float, **more
) -> dict:
    """One metrics.json "evaluations" row (metrics_file.REQUIRED_EVAL); ``more``: anchor, anchor_name, config."""
    row = {"dataset": dataset, "split": split, "task": task, "metric": metric}
    row.update(before=None if before is None else round(float(before), 4), after=round(float(after), 4))
    return {**row, "anchor": None, "anchor_name": None, "config": "", **more}


def cli_main(args_class: type, run, argv: list[str] | None = None) -> int:
    """``ctxir.cli.cli_main`` with a relative ``--recipe`` also looked up under training/."""
    return _cli_main(args_class, run, argv, recipe_dirs=(TRAINING_DIR,))


def data_folder(root: str | os.PathLike, name: str, arg: str = "--data-dir") -> Path:
    """``root/<folder of name>``, or a CtxirError naming the argument and what the folder must hold."""
    folder, contents = DATA_FOLDERS[name]
    base = Path(root)
    if not base.is_dir():
        raise CtxirError(
            f"{arg} {str(root)!r} does not exist: pass the benchmark data folder "
            f"(default {DEFAULT_DATA_DIR!r}) holding {', '.join(f for f, _ in DATA_FOLDERS.values())}/"
        )
    path = base / folder
    if not path.is_dir():
        raise CtxirError(f"{arg} {str(root)!r} has no {folder}/ folder: {name} needs {path} with {contents}")
    return path


def first_test_queries(folder: Path, max_queries: int) -> tuple[dict, dict]:
    """(queries, qrels) of the BEIR folder's test split, the first ``max_queries`` in file order (0 = all)."""
    from ctxir.data import load_beir

    _, queries, qrels = load_beir(folder, "test")
    if max_queries > 0:
        queries = dict(list(queries.items())[:max_queries])
        qrels = {q: qrels[q] for q in queries}
    return queries, qrels


def columns(rows: Sequence[Sequence], names: Sequence[str]):
    """A ``datasets.Dataset`` of ``rows`` (tuples), one column per name, in the order the loss reads them."""
    from datasets import Dataset

    return Dataset.from_dict({name: [row[i] for row in rows] for i, name in enumerate(names)})


def check_not_empty(n: int, what: str, hint: str) -> None:
    """Stop before any training when the training set is empty."""
    if n <= 0:
        raise CtxirError(f"the training set is empty: {what} — {hint}")


def take(items: Sequence[T], max_samples: int, seed: int) -> list[T]:
    """A seeded random subset of ``max_samples`` items (-1 = all, kept in order)."""
    items = list(items)
    if max_samples < 0 or max_samples >= len(items):
        return items
    rng = random.Random(seed)
    keep = sorted(rng.sample(range(len(items)), max_samples))
    return [items[i] for i in keep]


def take_train(items: Sequence[T], max_samples: int, seed: int, what: str) -> list[T]:
    """``take`` for a training set: none left stops the run, naming --max-samples."""
    kept = take(items, max_samples, seed)
    hint = "use --max-samples -1 (all) or a positive number"
    check_not_empty(len(kept), f"--max-samples {max_samples} leaves no {what}", hint)
    return kept


def untrained_questions(data, source: str, config: dict, default_seed: int = 42) -> list[str]:
    """The answered questions of --general ``source`` a run did not train on: its draw made again from ``config``."""
    answered = sorted(q for q in data.queries if data.qrels[q])
    if source not in [s.strip() for s in str(config.get("general", "")).split(",")]:
        return answered
    seed = int(config.get("seed", default_seed))
    trained = set(take(answered, int(config.get("general_queries", -1)), seed))
    return [q for q in answered if q not in trained]


def heldout_queries(qids: Sequence[str], n: int, seed: int) -> list[str]:
    """The ``n`` training queries held out, seeded: the same claims in every script."""
    qids = sorted(qids)
    return sorted(random.Random(seed).sample(qids, min(n, len(qids) - 1))) if n > 0 else []


def unseen_heldout_queries(positives: dict[str, set[str]], n: int, seed: int) -> list[str]:
    """``n`` training queries whose relevant documents no other training query cites, seeded: a dev set of documents
    the model never saw as a positive.

    >>> unseen_heldout_queries({"a": {"d1"}, "b": {"d1"}, "c": {"d2"}, "d": {"d3", "d1"}, "e": {"d4"}}, 5, 0)
    ['c', 'e']
    """
    cited = Counter(d for docs in positives.values() for d in docs)
    candidates = sorted(q for q, docs in positives.items() if docs and all(cited[d] == 1 for d in docs))
    if n <= 0 or not candidates:
        return []
    # never hold out every training query: something must remain to train on
    return sorted(random.Random(seed).sample(candidates, min(n, len(candidates), len(positives) - 1)))


def resolve_resume(resume: str, checkpoint_dir: Path) -> str | None:
    """--resume '' → None; 'last' → the newest complete checkpoint-N (its trainer_state.json, written last, parses)."""
    value = (resume or "").strip()
    if value.lower() in ("", "false", "no", "none"):
        return None
    if value.lower() not in ("last", "true", "yes"):
        if not Path(value).is_dir():
            raise CtxirError(
                f"--resume {resume!r} is not a checkpoint folder: pass 'last' or a path such as "
                f"{str(checkpoint_dir / 'checkpoint-500')!r}"
            )
        if not _complete_checkpoint(Path(value)):
            raise CtxirError(
                f"--resume {resume!r} was saved only in part (no readable trainer_state.json): pass 'last' "
                "to take the newest complete checkpoint, or an earlier checkpoint-N"
            )
        return value
    numbered = (p for p in Path(checkpoint_dir).glob("checkpoint-*") if p.name.split("-")[-1].isdigit())
    found = sorted(numbered, key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    complete = [p for p in found if _complete_checkpoint(p)]
    if not complete:
        torn = f" ({len(found)} torn: {', '.join(p.name for p in found)})" if found else ""
        raise CtxirError(
            f"--resume {resume!r}: no complete checkpoint-N folder in {str(checkpoint_dir)!r}{torn}; "
            "run without --resume, or point --output-dir at the interrupted run's folder"
        )
    torn = [p.name for p in found[: found.index(complete[0])]]  # newer than the one resumed from
    if torn:
        print(
            f"resume: skipping {', '.join(torn)} (saved only in part: the run was stopped while writing it)"
        )
    return str(complete[0])


def train_keeping_checkpoints(trainer, resume_from: str | None, checkpoint_dir: Path):
    """``trainer.train``; a full disk while saving removes the half-saved checkpoint and raises ``DiskFullError``."""
    checkpoint_dir = Path(checkpoint_dir)
    try:
        return trainer.train(resume_from_checkpoint=resume_from)
    except OSError as err:
        if not is_disk_full(err):
            raise
        # the Trainer names a checkpoint by the step it saves at, and saves it in place
        torn = checkpoint_dir / f"checkpoint-{trainer.state.global_step}"
        if torn.is_dir() and str(torn) != str(resume_from):
            shutil.rmtree(torn, ignore_errors=True)
        kept = sorted(
            (p.name for p in checkpoint_dir.glob("checkpoint-*") if _complete_checkpoint(p)),
            key=lambda name: int(name.split("-")[-1]) if name.split("-")[-1].isdigit() else -1,
        )
        again = f"continues from {kept[-1]}" if kept else "starts again: no checkpoint was complete"
        raise DiskFullError(
            f"no space left on the disk holding {str(torn.resolve())!r} while saving a checkpoint "
            f"({os.strerror(err.errno) if err.errno else 'a short write'}): free space there (df -h "
            f"{checkpoint_dir}) or train into another disk (--output-dir), then run again with --resume last (it "
            f"{again}); the checkpoints saved before are unchanged",
            torn,
        ) from err


def _complete_checkpoint(folder: Path) -> bool:
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True


def check_common_args(args) -> None:
    """Argument checks shared by the scripts, before anything is loaded."""
    if args.per_device_train_batch_size < 1:
        raise CtxirError(f"--batch-size must be ≥ 1, got {args.per_device_train_batch_size!r}")
    if args.num_train_epochs <= 0 and args.max_steps <= 0:
        raise CtxirError(f"--epochs must be > 0 (or set --max-steps), got {args.num_train_epochs!r}")
    if args.learning_rate <= 0:
        raise CtxirError(f"--learning-rate must be > 0, got {args.learning_rate!r}")
    if args.max_samples < -1:
        raise CtxirError(f"--max-samples must be -1 (all) or ≥ 0, got {args.max_samples!r}")
    if getattr(args, "load_best", False):
        eval_steps, save_steps = args.eval_steps, args.save_steps
        if eval_steps <= 0 or save_steps <= 0 or save_steps % eval_steps:
            raise CtxirError(
                f"--load-best picks among the checkpoints the dev evaluator scored: set --eval-steps ≥ 1 "
                f"and --save-steps a multiple of it (got --eval-steps {eval_steps!r}, --save-steps "
                f"{save_steps!r}), e.g. both 110"
            )


class _Tee:
    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.log.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


@contextlib.contextmanager
def tee_output(path: str | os.PathLike) -> Iterator[None]:
    """Copy everything printed (stdout and stderr, incl. progress bars) into ``path``, appending on resume."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(old_out, log), _Tee(old_err, log)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = old_out, old_err


def jsonl_log_callback(path: str | os.PathLike):
    """A ``transformers.TrainerCallback`` appending each Trainer log dict (loss, lr, eval scores) as JSON."""
    from transformers import TrainerCallback

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    class JsonlLogCallback(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            row = {"step": state.global_step, "epoch": state.epoch, **(logs or {})}
            if state.is_world_process_zero and logs:
                with path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row, default=json_default) + "\n")

    return JsonlLogCallback()


@dataclass
class CommonArgs:
    """What every training script takes; a script redeclares a field only for a default or help of its own."""

    data_dir: str = flag(DEFAULT_DATA_DIR, "benchmark data root (../shared/data)")
    output_dir: str = flag("", "the folder to write (default: one named after the run, under outputs/)")
    torch_threads: int = flag(0, "CPU threads for torch (0 = torch's default; 1 is faster on a shared CPU)")
    model_name: str = flag("", "short name for metrics.json / the model card")
    recipe: str = flag("", f'{RECIPE_HELP} (training/recipes/; recorded in metrics.json "config")')


@dataclass
class RunArgs(CommonArgs):
    """A script without the HF Trainer (train_cls_lr.py): the shared arguments, the device and the seed."""

    device: str = flag("auto", "auto, cpu or cuda")
    seed: int = 42


# Trainer settings with ctxir's default or flag spelling (HfArgumentParser reads "aliases" from the metadata)
TRAINER_FLAGS: dict[str, dict] = {
    "num_train_epochs": {"aliases": ["--epochs"], "help": "passes over the training data"},
    "per_device_train_batch_size": {
        "aliases": ["--batch-size", "--batch_size"],
        "help": "training batch per device; the evaluators' batch too",
    },
    "learning_rate": {"help": "peak learning rate (linear warm-up, then linear decay)"},
    "warmup_steps": {
        "aliases": ["--warmup"],
        "help": "warm-up: a fraction of the steps when < 1, else steps",
    },
    "eval_steps": {"help": "run the dev evaluator every N steps (0 = only before and after training)"},
    "save_steps": {"help": "checkpoint every N steps (for --resume)"},
    "logging_steps": {"help": "log the loss and learning rate every N steps"},
    "logging_first_step": {"help": "also log the first step"},
    "save_total_limit": {"help": "checkpoints kept while training (--keep-checkpoints keeps all)"},
    "resume_from_checkpoint": {
        "aliases": ["--resume"],
        "help": "'last' = newest complete checkpoint in --output-dir/checkpoints, or a checkpoint path",
    },
}


def trainer_setting(name: str, default: Any, help: str = "") -> Any:
    """A field redeclaring the Trainer's setting ``name`` (a key of TRAINER_FLAGS) with a script's own default."""
    return flag(default, **{**TRAINER_FLAGS[name], **({"help": help} if help else {})})


@dataclass
class TrainerRunArgs(CommonArgs):
    """What a Trainer script adds to sentence-transformers' training arguments (``--device`` sets ``run_device``)."""

    run_device: str = flag("auto", "auto, cpu or cuda (cpu = the Trainer's use_cpu)", aliases=["--device"])
    model: str = flag(DEFAULT_BI_ENCODER, "starting model: Hub id or local folder")
    max_samples: int = flag(-1, "use N training examples, seeded (-1 = all)")
    max_length: int = flag(0, "tokens per text (0 = the model's own max_seq_length)")
    eval_before: bool = flag(True, "also evaluate the starting model")
    keep_checkpoints: bool = flag(False, "keep checkpoints/ after a finished run")
    load_best: bool = flag(
        False, "end with the dev-best checkpoint; needs --eval-steps, and --save-steps a multiple of it"
    )
    # the Trainer's own settings, ctxir's defaults
    num_train_epochs: float = trainer_setting("num_train_epochs", 1.0)
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 32)
    learning_rate: float = trainer_setting("learning_rate", 2e-5)
    warmup_steps: float = trainer_setting("warmup_steps", 0.1)
    eval_steps: int = trainer_setting("eval_steps", 0)
    logging_steps: int = trainer_setting("logging_steps", 10)
    logging_first_step: bool = trainer_setting("logging_first_step", True)
    save_steps: int = trainer_setting("save_steps", 200)
    save_total_limit: int = trainer_setting("save_total_limit", 2)
    resume_from_checkpoint: str = trainer_setting("resume_from_checkpoint", "")

    def __post_init__(self):
        # --device cpu before the library sets up its devices (its __post_init__), so args.device agrees
        if self.run_device == "cpu":
            self.use_cpu = True
        super().__post_init__()


def run_config(args) -> dict:
    """metrics.json "config": every setting ctxir declares, and each other Trainer setting off its default."""
    library = ("transformers.", "sentence_transformers.")
    ctxir_fields = {
        name
        for klass in type(args).__mro__
        if not klass.__module__.startswith(library)
        for name in vars(klass).get("__annotations__", {})
    }
    default = type(args)()
    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(args)
        if f.init and (f.name in ctxir_fields or getattr(args, f.name) != getattr(default, f.name))
    }
