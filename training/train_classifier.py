"""Fine-tune a bi-encoder for text classification from N labelled examples per class, then classify with its
embeddings (kNN, zero-shot, centroid, logistic regression; ``ctxir.classify``).

Objectives (``--objective``):
    triplet     sentence-transformers' TripletLoss on (anchor, positive of the same class, negative of another):
                max(‖a−p‖ − ‖a−n‖ + margin, 0), Euclidean on the model's unit vectors; ``--iterations`` triplets per
                example, positives and negatives drawn at random (seeded)
    batch-hard  BatchHardTripletLoss on (text, label) rows: in each batch every anchor's farthest positive and
                nearest negative (GROUP_BY_LABEL batches, each with ≥ 2 texts of several classes)
    setfit      SetFit's contrastive pairs: per example and iteration one same-class pair (1) and one
                other-class pair (0), CosineSimilarityLoss (SetFit's default body loss)

Data: ``--data-dir``/agnews (AG News, 4 topics): ``--per-class`` N examples of each class drawn from
``train_subset.csv`` with ``--seed`` (-1 = all 8,000), the test set ``test.csv`` (7,600; ``--eval-max-test`` for a
quick look at its first N rows). Before and after training, on the test set: kNN-5 (k ≤ N) over the same N per class,
zero-shot (template and label projection chosen on those N per class, labels from ``--labels``), nearest centroid and
logistic regression; accuracy and macro-F1 each. The starting model's test embeddings come from ctxir's cache.

Examples:
    python training/train_classifier.py --per-class 8 --objective triplet --torch-threads 1
    python training/train_classifier.py --per-class 64 --objective setfit --iterations 5
    python training/train_classifier.py --per-class 4 --max-steps 2 --eval-max-test 40   # smoke run
Outputs in --output-dir: the model, metrics.json (time per run on this machine under "training"), train.log,
training_log.jsonl.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # `python training/train_classifier.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentence_transformers import SentenceTransformerTrainingArguments

from ctxir import kinds
from ctxir.classify import (
    TEMPLATES,
    ZeroShotClassifier,
    encode,
    evaluate_predictions,
    label_vectors_for,
    make_classifier,
    sample_per_class,
    select_zero_shot,
    word_projection,
)
from ctxir.data.labelled import load_labelled, load_labels
from ctxir.encoders import BiEncoder
from ctxir.types import CtxirError
from training.common import (
    TrainerRunArgs,
    check_not_empty,
    cli_main,
    data_folder,
    dataset_entry,
    trainer_setting,
)
from training.runner import ModelSpec, TaskData, train
from training.train_bi_encoder import (  # the same model kind: one loader, one trainer
    load,
    reload,
    trainer_classes,
)

LOSS_NAMES = {
    "triplet": "TripletLoss",
    "batch-hard": "BatchHardTripletLoss",
    "setfit": "CosineSimilarityLoss",
}
DEFAULT_LABELS = str(Path(__file__).resolve().parents[1] / "ctxir" / "assets" / "agnews_labels.csv")
# Published numbers shown next to ours on AG News test (docs/results.md names the sources).
ANCHORS = {
    ("agnews", "accuracy (knn-5)"): (0.831, "SetFit all-MiniLM-L6-v2, 8 per class"),
    ("agnews", "accuracy (zero-shot)"): (0.500, "BTZSC zero-shot, all-MiniLM-L6-v2"),
    ("agnews", "accuracy (logreg)"): (0.756, "MTEB NewsClassification, 8-shot LR"),
}
EVAL_METHODS = ("zero-shot", "knn-5", "centroid", "logreg")


@dataclass
class ClassifierArgs(TrainerRunArgs, SentenceTransformerTrainingArguments):
    """sentence-transformers' training arguments with ctxir's shared ones (training/common.py) and this script's
    objective and sampling; its batch size and the help of the two settings it does not use are its own."""

    objective: Literal["triplet", "batch-hard", "setfit"] = field(
        default="triplet", metadata={"help": "triplet, batch-hard (BatchHardTripletLoss) or setfit (pairs)"}
    )
    per_class: int = field(
        default=8, metadata={"help": "training examples per class (-1 = the whole subset)"}
    )
    iterations: int = field(default=20, metadata={"help": "triplets (or pairs of each kind) per example"})
    margin: float = field(
        default=0.5, metadata={"help": "triplet margin ε (Euclidean, unit vectors: 0 to 2)"}
    )
    labels: str = field(
        default=DEFAULT_LABELS, metadata={"help": "zero-shot labels file (names, descriptions)"}
    )
    output_dir: str = field(
        default="", metadata={"help": "default outputs/classifier-agnews-<objective>-<N>"}
    )
    max_samples: int = field(
        default=-1, metadata={"help": "unused (the runner's shared check); see --per-class"}
    )
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    eval_max_test: int = field(default=0, metadata={"help": "first N test rows only (0 = all 7,600)"})
    eval_steps: int = trainer_setting(
        "eval_steps", 0, "unused: no in-training evaluator (test is never seen)"
    )


# ---------------------------------------------------------------- data


def triplets(examples: list[tuple[str, str]], iterations: int, seed: int) -> list[tuple[str, str, str]]:
    """(anchor, positive, negative) × ``iterations`` per example: a random other text of the anchor's class and a
    random text of another class, seeded.

    >>> rows = triplets([("a1", "A"), ("a2", "A"), ("b1", "B")], iterations=2, seed=0)
    >>> len(rows), all(p.startswith(a[0]) and not n.startswith(a[0]) for a, p, n in rows)
    (6, True)
    """
    rng = random.Random(seed)
    by_class: dict[str, list[str]] = {}
    for text, label in examples:
        by_class.setdefault(label, []).append(text)
    rows = []
    for _ in range(iterations):
        for text, label in examples:
            same = [t for t in by_class[label] if t != text] or [text]
            other = [t for c, texts in by_class.items() if c != label for t in texts]
            rows.append((text, rng.choice(same), rng.choice(other)))
    return rows


def setfit_pairs(examples: list[tuple[str, str]], iterations: int, seed: int) -> list[tuple[str, str, float]]:
    """SetFit's pair generation: per example and iteration, one pair with a same-class text (1.0) and one with an
    other-class text (0.0).

    >>> [s for _, _, s in setfit_pairs([("a1", "A"), ("a2", "A"), ("b1", "B")], 1, seed=0)]
    [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    """
    return [pair for a, p, n in triplets(examples, iterations, seed) for pair in ((a, p, 1.0), (a, n, 0.0))]


def build_data(args: ClassifierArgs, model, device: str) -> TaskData:
    from datasets import Dataset

    folder = data_folder(args.data_dir, "agnews")
    pool = load_labelled(folder / "train_subset.csv")
    rows = (
        list(range(len(pool)))
        if args.per_class < 0
        else sample_per_class([y for _, y in pool], args.per_class, args.seed)
    )
    examples = [pool[i] for i in rows]
    check_not_empty(
        len(examples),
        f"--per-class {args.per_class} leaves no training example",
        "use a positive number (or -1 for all)",
    )
    test = load_labelled(folder / "test.csv")
    if args.eval_max_test > 0:
        test = test[: args.eval_max_test]
    classes = sorted({y for _, y in examples})
    if args.objective == "triplet":
        data = triplets(examples, args.iterations, args.seed)
        train = Dataset.from_dict(
            {
                "anchor": [a for a, _, _ in data],
                "positive": [p for _, p, _ in data],
                "negative": [n for _, _, n in data],
            }
        )
    elif args.objective == "setfit":
        data = setfit_pairs(examples, args.iterations, args.seed)
        train = Dataset.from_dict(
            {
                "sentence1": [a for a, _, _ in data],
                "sentence2": [b for _, b, _ in data],
                "score": [s for _, _, s in data],
            }
        )
    else:
        repeated = (
            examples * args.iterations
        )  # batch-hard mines inside each batch; repeats give it more batches
        train = Dataset.from_dict(
            {"sentence": [t for t, _ in repeated], "label": [classes.index(y) for _, y in repeated]}
        )
    datasets = [
        dataset_entry("agnews", "train_subset", "train", folder, len(examples)),
        dataset_entry("agnews", "test", "eval", folder, len(test)),
    ]
    extra = {
        "per_class": args.per_class,
        "train_examples": len(examples),
        "classes": classes,
        "training_rows": len(train),
        "train_rows_of_subset": rows if len(rows) <= 512 else f"{len(rows)} rows",
    }
    return TaskData(
        train, datasets, None, {"examples": examples, "test": test, "labels": load_labels(args.labels)}, extra
    )


# ---------------------------------------------------------------- loss & evaluation


def build_loss(args: ClassifierArgs, model, data: TaskData):
    from sentence_transformers.sentence_transformer import losses

    if args.objective == "triplet":
        return losses.TripletLoss(
            model, distance_metric=losses.TripletDistanceMetric.EUCLIDEAN, triplet_margin=args.margin
        )
    if args.objective == "batch-hard":
        return losses.BatchHardTripletLoss(model, margin=args.margin)
    return losses.CosineSimilarityLoss(model)


def evaluate(model, data: TaskData, args: ClassifierArgs, model_id: str) -> dict[tuple[str, str, str], float]:
    """Test accuracy and macro-F1 of each method, fitted (or, for zero-shot, its template chosen) on the N per class
    training examples only."""

    encoder = BiEncoder(model, batch_size=32)
    encoder.name = model_id
    examples, test, labels = data.test["examples"], data.test["test"], data.test["labels"]
    train_x, train_y = encode(encoder, [t for t, _ in examples]), [y for _, y in examples]
    test_x, test_y = encode(encoder, [t for t, _ in test]), [y for _, y in test]
    classes = sorted(set(train_y))
    vectors = label_vectors_for(encoder, labels, TEMPLATES)
    projection = word_projection(encoder)
    best, _ = select_zero_shot(encoder, labels, train_x, train_y, TEMPLATES, projection, vectors)
    classifiers = {
        "zero-shot": ZeroShotClassifier(
            encoder,
            labels,
            best["template"],
            projection if best["projection"] else None,
            vectors[best["template"]],
        )
    }
    k = min(5, max(1, len(examples) // len(classes)))
    for name in (f"knn-{k}", "centroid", "logreg"):
        classifiers[name] = make_classifier(name, encoder, "uniform", args.seed).fit_embeddings(
            train_x, train_y
        )
    scores = {}
    for name, classifier in classifiers.items():
        result = evaluate_predictions(test_y, classifier.predict_labels(test_x), classes)
        key = (
            "knn-5" if name.startswith("knn") else name
        )  # one metric name across runs, k ≤ N noted in config
        scores[("agnews", "test", f"accuracy ({key})")] = result["accuracy"]
        scores[("agnews", "test", f"macro-F1 ({key})")] = result["macro_f1"]
    print(f"zero-shot chose {best}")
    return scores


def describe(name: str, data: TaskData, args: ClassifierArgs) -> tuple[str, str]:
    n = len(data.test["examples"])
    return "classification", (
        f"{n} labelled examples ({args.per_class} per class) as kNN references / LR training "
        f"data / zero-shot template choice; {len(data.test['test'])} test texts"
    )


# ---------------------------------------------------------------- run


def check(args: ClassifierArgs) -> None:
    if args.iterations < 1:
        raise CtxirError(f"--iterations must be ≥ 1, got {args.iterations!r}")
    if args.per_class == 0 or args.per_class < -1:
        raise CtxirError(f"--per-class must be ≥ 1 (or -1 = the whole subset), got {args.per_class!r}")
    if args.per_class == 1 and args.objective != "setfit":
        raise CtxirError("--per-class 1 leaves no same-class positive for a triplet: use ≥ 2")
    if args.objective == "batch-hard" and (
        args.per_device_train_batch_size < 4 or args.per_device_train_batch_size % 2
    ):
        raise CtxirError(
            f"--objective batch-hard needs an even --batch-size ≥ 4, got {args.per_device_train_batch_size!r}"
        )
    if args.margin <= 0:
        raise CtxirError(f"--margin must be > 0, got {args.margin!r}")


def _training_options(args: ClassifierArgs) -> dict:
    from sentence_transformers.base.sampler import BatchSamplers

    sampler = BatchSamplers.GROUP_BY_LABEL if args.objective == "batch-hard" else BatchSamplers.BATCH_SAMPLER
    return {"batch_sampler": sampler, "dataloader_drop_last": False}


SPEC = ModelSpec(
    model_type=kinds.BI_ENCODER,
    script="train_classifier",
    default_output=lambda args: f"outputs/classifier-agnews-{args.objective}-{args.per_class}",
    data_names=lambda args: ["agnews"],
    check=check,
    load=load,
    build_data=build_data,
    build_loss=build_loss,
    evaluate=evaluate,
    describe=describe,
    save=lambda model, out, args: model.save_pretrained(str(out)),
    reload=reload,
    objective_name=lambda args: LOSS_NAMES[args.objective],
    trainer_classes=trainer_classes,
    anchors=ANCHORS,
    training_options=_training_options,
    extra=lambda args, model, data: {"max_seq_length": model.max_seq_length},
)


def run(args: ClassifierArgs) -> dict:
    return train(args, SPEC)


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClassifierArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
