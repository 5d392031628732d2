"""Fine-tune a bi-encoder for AG News classification from N examples per class (triplet, batch-hard or setfit),
then classify with its embeddings (``ctxir.classify``).

    python training/train_classifier.py --per-class 8 --objective triplet --torch-threads 1
    python training/train_classifier.py --per-class 4 --max-steps 2 --eval-max-test 40   # smoke run
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
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
from ctxir.cli import flag
from ctxir.data.labelled import load_labelled, load_labels
from ctxir.encoders import BiEncoder
from ctxir.types import CtxirError
from training.common import (
    TrainerRunArgs,
    check_common_args,
    check_not_empty,
    cli_main,
    columns,
    data_folder,
    dataset_entry,
    run_config,
    trainer_setting,
)
from training.steps import (
    Run,
    Scores,
    check_data,
    dev_record,
    evaluation_rows,
    trainer_arguments,
    write_run_metrics,
)
from training.train_bi_encoder import load  # the same model kind: one loader

DEFAULT_LABELS = str(Path(__file__).resolve().parents[1] / "ctxir" / "assets" / "agnews_labels.csv")
# Published numbers shown next to ours on AG News test (docs/results.md names the sources).
ANCHORS = {
    ("agnews", "accuracy (knn-5)"): (0.831, "SetFit all-MiniLM-L6-v2, 8 per class"),
    ("agnews", "accuracy (zero-shot)"): (0.500, "BTZSC zero-shot, all-MiniLM-L6-v2"),
    ("agnews", "accuracy (logreg)"): (0.756, "MTEB NewsClassification, 8-shot LR"),
}


@dataclass
class ClassifierArgs(TrainerRunArgs, SentenceTransformerTrainingArguments):
    objective: Literal["triplet", "batch-hard", "setfit"] = flag(
        "triplet", "triplet, batch-hard (BatchHardTripletLoss) or setfit (pairs)"
    )
    per_class: int = flag(8, "training examples per class (-1 = the whole subset)")
    iterations: int = flag(20, "triplets (or pairs of each kind) per example")
    margin: float = flag(0.5, "triplet margin ε (Euclidean, unit vectors: 0 to 2)")
    labels: str = flag(DEFAULT_LABELS, "zero-shot labels file (names, descriptions)")
    output_dir: str = flag("", "default outputs/classifier-agnews-<objective>-<N>")
    max_samples: int = flag(-1, "unused (the scripts' shared check); see --per-class")
    per_device_train_batch_size: int = trainer_setting("per_device_train_batch_size", 16)
    eval_max_test: int = flag(0, "first N test rows only (0 = all 7,600)")
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


def build_classification_task(args: ClassifierArgs) -> tuple[object, list[dict], dict, dict]:
    """(the training rows, metrics.json "datasets", what the test step reads, "extra")."""
    folder = data_folder(args.data_dir, "agnews")
    pool = load_labelled(folder / "train_subset.csv")
    labels = [y for _, y in pool]
    rows = (
        list(range(len(pool))) if args.per_class < 0 else sample_per_class(labels, args.per_class, args.seed)
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
        train = columns(triplets(examples, args.iterations, args.seed), ["anchor", "positive", "negative"])
    elif args.objective == "setfit":
        train = columns(
            setfit_pairs(examples, args.iterations, args.seed), ["sentence1", "sentence2", "score"]
        )
    else:  # batch-hard mines inside each batch; repeats give it more batches
        train = columns([(t, classes.index(y)) for t, y in examples * args.iterations], ["sentence", "label"])
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
    return train, datasets, {"examples": examples, "test": test, "labels": load_labels(args.labels)}, extra


# ---------------------------------------------------------------- loss & evaluation


def build_loss(args: ClassifierArgs, model):
    from sentence_transformers.sentence_transformer import losses

    if args.objective == "triplet":
        return losses.TripletLoss(
            model, distance_metric=losses.TripletDistanceMetric.EUCLIDEAN, triplet_margin=args.margin
        )
    if args.objective == "batch-hard":
        return losses.BatchHardTripletLoss(model, margin=args.margin)
    return losses.CosineSimilarityLoss(model)


def evaluate(model, test: dict, seed: int, model_id: str) -> Scores:
    """Test accuracy and macro-F1 of each method, fitted (or, for zero-shot, its template chosen) on the N per class
    training examples only."""
    encoder = BiEncoder(model, batch_size=32)
    encoder.name = model_id
    examples, test, labels = test["examples"], test["test"], test["labels"]
    train_x, train_y = encode(encoder, [t for t, _ in examples]), [y for _, y in examples]
    test_x, test_y = encode(encoder, [t for t, _ in test]), [y for _, y in test]
    classes = sorted(set(train_y))
    vectors = label_vectors_for(encoder, labels, TEMPLATES)
    projection = word_projection(encoder)
    best, _ = select_zero_shot(encoder, labels, train_x, train_y, TEMPLATES, projection, vectors)
    chosen = (best["template"], projection if best["projection"] else None, vectors[best["template"]])
    classifiers = {"zero-shot": ZeroShotClassifier(encoder, labels, *chosen)}
    k = min(5, max(1, len(examples) // len(classes)))
    for name in (f"knn-{k}", "centroid", "logreg"):
        classifiers[name] = make_classifier(name, encoder, "uniform", seed).fit_embeddings(train_x, train_y)
    scores = {}
    for name, classifier in classifiers.items():
        result = evaluate_predictions(test_y, classifier.predict_labels(test_x), classes)
        # one metric name across runs, k ≤ N noted in config
        key = "knn-5" if name.startswith("knn") else name
        scores[("agnews", "test", f"accuracy ({key})")] = result["accuracy"]
        scores[("agnews", "test", f"macro-F1 ({key})")] = result["macro_f1"]
    print(f"zero-shot chose {best}")
    return scores


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


def run(args: ClassifierArgs) -> dict:
    """Train one bi-encoder for classification; returns the metrics.json record (empty on non-main processes)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer

    # 0. check the arguments and the data before anything heavy is loaded; the run's folder and log
    check_common_args(args)
    check(args)
    check_data(args.data_dir, ["agnews"])
    out = Path(args.output_dir or f"outputs/classifier-agnews-{args.objective}-{args.per_class}")
    config, resume = run_config(args), args.resume_from_checkpoint
    with Run(out, "train_classifier", config, resume, args.run_device, args.torch_threads) as run:
        # 1. load the model
        model = load(args, run.device)
        # 2. load the data
        train, datasets, test, extra = build_classification_task(args)
        print(f"training rows: {len(train)}, columns {train.column_names}")
        # 3. loss
        loss = build_loss(args, model)
        # 4. evaluator: none during training (test is never seen); the starting model's test scores
        before = evaluate(model, test, args.seed, args.model) if args.eval_before else {}
        print(f"before training: {before}")
        # 5. train: batch-hard mines inside each batch, so its batches group texts by label
        sampler = (
            BatchSamplers.GROUP_BY_LABEL if args.objective == "batch-hard" else BatchSamplers.BATCH_SAMPLER
        )
        options = {"batch_sampler": sampler, "dataloader_drop_last": False}
        settings = trainer_arguments(
            SentenceTransformerTrainingArguments, args, out, run.device, None, **options
        )
        trainer = run.train(SentenceTransformerTrainer, settings, model, train, loss)
        if not trainer.is_world_process_zero():
            return {}
        # 6. save, then reload from disk as every user will
        model.save_pretrained(str(out))
        run.saved(args.keep_checkpoints)
        trained = SentenceTransformer(str(out), device=run.device)
        # 7. evaluate the trained model
        after = evaluate(trained, test, args.seed, str(out))
        print(f"after training: {after}")
        # 8. metrics.json
        task = (
            "classification",
            f"{len(test['examples'])} labelled examples ({args.per_class} per class) as kNN references / LR "
            f"training data / zero-shot template choice; {len(test['test'])} test texts",
        )
        return write_run_metrics(
            out,
            args,
            model_type=kinds.BI_ENCODER,
            objective=type(loss).__name__,
            datasets=datasets,
            training=run.training(trainer, len(train)),
            evaluations=evaluation_rows(before, after, {"agnews": task}, anchors=ANCHORS),
            extra={
                **extra,
                **dev_record(trainer, {}, {}),
                "max_length": trained.max_seq_length,
                "max_seq_length": trained.max_seq_length,
            },
        )


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClassifierArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
