"""``ctxir classify``: ``run`` scores the chosen methods on a labelled test file (metrics, McNemar, few-shot curve)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ctxir.classify.classifiers import (
    CV_FOLDS,
    K_GRID,
    TEMPLATES,
    WEIGHTS,
    ZeroShotClassifier,
    choose_k,
    encode,
    label_vectors_for,
    make_classifier,
    sample_per_class,
    select_zero_shot,
    word_projection,
)
from ctxir.cli import cli_main, flag
from ctxir.data.labelled import Label, load_folder, load_labelled, load_labels
from ctxir.types import CtxirError

METHODS = ("zero-shot", "knn", "centroid", "logreg")


@dataclass
class ClassifyArgs:
    """ctxir classify: evaluate embedding classifiers on a labelled test file."""

    train: str = flag("", "labelled training file (.csv/.tsv text,label or .jsonl)")
    test: str = flag("", "labelled test file")
    data: str = flag("", "a folder of train*.csv and test.csv (instead of --train/--test)")
    method: str = flag("all", "comma list of zero-shot, knn, centroid, logreg; or all")
    labels: str = flag(
        "",
        "zero-shot labels file (.txt, or .csv/.jsonl with label and optional description); default: the "
        "train file's labels. Descriptions help: on AG News test the label names alone gave 0.6796 accuracy, "
        "names with short descriptions (ctxir/assets/agnews_labels.csv) 0.7714 (docs/results.md, "
        "Classification with embeddings)",
    )
    templates: str = flag("", "zero-shot templates separated by '||'; the best on --train is used")
    projection: str = flag("auto", "zero-shot label projection: auto, on, off")
    projection_words: int = flag(5000, "vocabulary words the projection is fitted on")
    k: str = flag(
        "auto",
        f"kNN neighbour count: auto chooses one of {','.join(map(str, K_GRID))} by {CV_FOLDS}-fold "
        "stratified cross-validation accuracy on --train, then fits on all of --train; or a comma list "
        "(1,5,15) to report each k",
    )
    weights: str = flag("uniform", "kNN vote: uniform or distance")
    shots: str = flag("", "also run few-shot with N training examples per class; 8,16,32 gives a curve")
    seeds: int = flag(5, "few-shot: seeds (samples of N per class)")
    few_shot_methods: str = flag("knn-5,logreg", "methods run few-shot")
    max_test: int = flag(0, "first N test rows only (0 = all; for quick checks)")
    model: str = flag("sentence-transformers/all-MiniLM-L6-v2", "bi-encoder id/folder")
    device: str = "auto"
    batch_size: int = 32
    torch_threads: int = flag(0, "CPU threads for torch (0 = default)")
    cache_dir: str = flag("", "cache root (default $CTXIR_CACHE or ~/.cache/ctxir)")
    output: str = flag("metrics.json", "where the metrics JSON is written")


def run(args: ClassifyArgs) -> dict:
    """Evaluate the chosen methods on --test; returns and writes the metrics record."""
    import torch

    from ctxir.checks import check_choice, check_int
    from ctxir.encoders.models import set_threads
    from ctxir.files import machine_info, write_json

    # 0. check the arguments before anything heavy is loaded
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    methods = list(METHODS) if methods == ["all"] else methods
    for name in methods or [""]:
        if name not in METHODS:
            what = f"--method {name!r} is not known" if name else "--method is empty"
            raise CtxirError(f"{what}: use a comma list of {', '.join(METHODS)}, or all")
    ks = None  # --k auto: k chosen on --train by choose_k
    if str(args.k).strip().lower() != "auto":
        parts = [part.strip() for part in str(args.k).split(",")]
        if not all(part.isascii() and part.isdigit() and 1 <= int(part) <= 10_000 for part in parts):
            raise CtxirError(
                f"--k {args.k!r} is not valid: use auto (k chosen by cross-validation on --train) or a comma "
                "list of whole numbers from 1 to 10000, e.g. --k 5 or --k 1,5,15"
            )
        ks = [int(part) for part in parts]
    check_choice(args.weights, "--weights", WEIGHTS)
    check_choice(args.projection, "--projection", ("auto", "on", "off"))
    templates = [t.strip() for t in args.templates.split("||") if t.strip()] or list(TEMPLATES)
    if args.data and (args.train or args.test):
        raise CtxirError("give either --data FOLDER or --train/--test files, not both")
    train_path, test_path = load_folder(args.data) if args.data else (args.train, args.test)
    if not test_path:
        raise CtxirError("--test is missing: pass a labelled test file (text,label) or --data FOLDER")
    shots = [check_int(n.strip(), "--shots", 0, 1_000_000) for n in str(args.shots).split(",") if n.strip()]
    shots = [n for n in shots if n > 0]
    needs_train = [m for m in methods if m != "zero-shot"] or ([] if args.labels else ["zero-shot"])
    if not train_path and (needs_train or shots):
        raise CtxirError(
            f"--train is missing: {', '.join(needs_train) or 'few-shot'} needs labelled examples "
            "(zero-shot alone runs with --labels and no --train)"
        )
    if args.seeds < 1:
        raise CtxirError(f"--seeds must be ≥ 1, got {args.seeds!r}")
    set_threads(args.torch_threads)

    # 1. load the data; every test label must be a known class
    train = load_labelled(train_path) if train_path else []
    test = load_labelled(test_path)[: args.max_test or None]
    train_y, test_y = [y for _, y in train], [y for _, y in test]
    labels = load_labels(args.labels) if args.labels else [Label(c) for c in sorted(set(train_y))]
    label_names = {label.name for label in labels}
    classes = sorted(set(train_y)) if train else [label.name for label in labels]
    known = set(classes) | label_names
    for row, y in enumerate(test_y, 1):
        if y not in known:
            raise CtxirError(
                f"{test_path}: test label {y!r} (row {row}) is not among the training/labels-file classes "
                f"{sorted(known)!r}"
            )
    if "zero-shot" in methods and train and set(classes) - label_names:
        raise CtxirError(
            f"--labels names {[label.name for label in labels]!r} but the training data has "
            f"classes {classes!r}: name every class in the labels file"
        )

    # 2. load the encoder and embed (cached: a second run reads the vectors from disk)
    encoder, sample, encode_seconds, train_x, test_x = _embed(args, train, test)

    # 3. classify the test set with every method
    record: dict = {
        "model": args.model,
        "weights": encoder.config["weights"],
        "config": asdict(args),
        "data": {
            "train": str(train_path),
            "test": str(test_path),
            "train_rows": len(train),
            "test_rows": len(test),
            "classes": classes,
        },
        "methods": {},
        "throughput": {},
    }
    predictions: dict[str, list[str]] = {}
    classify_seconds: dict[str, float] = {}
    for method in methods:
        if method == "zero-shot":
            fitted = _zero_shot(args, encoder, labels, templates, train_x, train_y)
        else:
            k_choice: dict = {}
            if method == "knn" and ks is None:
                k, table = choose_k(train_x, train_y, weights=args.weights)
                print(
                    "knn: k chosen by cross-validation on --train (accuracy): "
                    + ", ".join(f"k={r['k']} {r['cv_accuracy']:.4f}" for r in table)
                    + f" → k={k}",
                    flush=True,
                )
                k_choice = {
                    "k": k,
                    "chosen_on": f"{table[0]['folds']}-fold stratified cross-validation accuracy on --train",
                    "candidates": table,
                }
            variants = [f"knn-{k}" for k in ks or [k_choice["k"]]] if method == "knn" else [method]
            config = {"weights": args.weights, **k_choice} if method == "knn" else {}
            fitted = {v: (make_classifier(v, encoder, args.weights), config) for v in variants}
        for name, (classifier, config) in fitted.items():
            started = time.perf_counter()  # fitting and predicting: choosing k or a template is not timed
            if method != "zero-shot":
                classifier.fit_embeddings(train_x, train_y)
            predictions[name] = classifier.predict_labels(test_x)
            classify_seconds[name] = time.perf_counter() - started
            result = {**evaluate_predictions(test_y, predictions[name], classes), "config": config}
            record["methods"][name] = result
            print(f"{name}: accuracy {result['accuracy']:.4f}, macro-F1 {result['macro_f1']:.4f}", flush=True)

    # 4. paired comparisons (exact McNemar) between every two methods
    record["paired"] = [
        {"a": a, "b": b, **mcnemar(test_y, predictions[a], predictions[b])}
        for a, b in itertools.combinations(predictions, 2)
    ]
    # 5. few-shot: N per class, mean ± std over seeds
    few_shot_methods = [m.strip() for m in args.few_shot_methods.split(",") if m.strip()]
    record["few_shot"] = []
    for n in shots:
        curve = few_shot(train_x, train_y, test_x, test_y, few_shot_methods, n, args.seeds, args.weights)
        record["few_shot"].append(curve)
        for name, result in curve["methods"].items():
            accuracy = result["accuracy"]
            print(f"{n}-shot {name}: accuracy {accuracy['mean']:.4f} ± {accuracy['std']:.4f}", flush=True)
    # 6. throughput and the machine, then write
    record["throughput"] = {
        "encode_texts": sample,
        "encode_seconds": round(encode_seconds, 2),
        "encode_texts_per_second": round(sample / max(encode_seconds, 1e-9), 1),
        "torch_threads": torch.get_num_threads(),
        "classify_texts_per_second": {
            m: round(len(test) / max(s, 1e-9), 1) for m, s in classify_seconds.items()
        },
    }
    record["machine"] = machine_info()["hardware"]
    write_json(Path(args.output), record)
    print(f"wrote {args.output}")
    return record


def _embed(args: ClassifyArgs, train: list, test: list):
    """(encoder, texts timed, seconds, train vectors, test vectors): speed timed uncached on ≤ 256 test texts."""
    from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache, cache_root

    cache = EmbeddingCache(cache_root(args.cache_dir or None) / "embeddings")
    encoder = BiEncoder(args.model, device=args.device, cache=cache, batch_size=args.batch_size)
    sample = [t for t, _ in test[:256]]
    started = time.perf_counter()
    encoder.encode(sample)  # uncached: the encoding speed on this machine
    encode_seconds = time.perf_counter() - started
    train_x = (
        encode(encoder, [t for t, _ in train]) if train else np.zeros((0, encoder.dimension), np.float32)
    )
    return encoder, len(sample), encode_seconds, train_x, encode(encoder, [t for t, _ in test])


def _zero_shot(args: ClassifyArgs, encoder, labels, templates, train_x, train_y) -> dict:
    """{"zero-shot": (the classifier, its config)}: template and projection chosen on --train accuracy, never test."""
    train = bool(train_y)
    # auto with no training data to choose on keeps the projection off: nothing to fit it for
    wanted = args.projection == "on" or (args.projection == "auto" and train)
    projection = word_projection(encoder, args.projection_words) if wanted else None
    vectors = label_vectors_for(encoder, labels, templates)
    if train and (len(vectors) > 1 or args.projection == "auto"):
        best, table = select_zero_shot(labels, train_x, train_y, vectors, projection)
        if args.projection == "on":
            best = max((r for r in table if r["projection"]), key=lambda r: r["train_accuracy"])
    else:
        best, table = {"template": next(iter(vectors)), "projection": args.projection == "on"}, []
    template, used = best["template"], projection if best["projection"] else None
    classifier = ZeroShotClassifier(encoder, labels, template, used, vectors[template])
    chosen = {
        "template": best["template"],
        "projection": best["projection"],
        "chosen_on": "train accuracy" if table else "first template (no --train)",
        "candidates": table,
    }
    return {"zero-shot": (classifier, chosen)}


def evaluate_predictions(y_true: Sequence[str], y_pred: Sequence[str], classes: Sequence[str]) -> dict:
    """accuracy, macro_f1, scikit-learn's per-class report and confusion matrix (rows = true, columns = predicted)."""
    from sklearn.metrics import accuracy_score, classification_report, confusion_matrix, f1_score

    classes = list(classes)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=classes, average="macro", zero_division=0)),
        "n": len(y_true),
        "report": classification_report(y_true, y_pred, labels=classes, output_dict=True, zero_division=0),
        "confusion_matrix": {
            "labels": classes,
            "matrix": confusion_matrix(y_true, y_pred, labels=classes).tolist(),
        },
    }


def mcnemar(y_true: Sequence[str], pred_a: Sequence[str], pred_b: Sequence[str]) -> dict:
    """Exact McNemar test: of the texts exactly one classifier gets right, is the split 50/50 (two-sided binomial)?"""
    from scipy.stats import binomtest

    right_a = np.asarray(pred_a) == np.asarray(y_true)
    right_b = np.asarray(pred_b) == np.asarray(y_true)
    a_only, b_only = int((right_a & ~right_b).sum()), int((right_b & ~right_a).sum())
    return {
        "test": "McNemar exact (binomial)",
        "n": len(right_a),
        "accuracy_a": float(right_a.mean()),
        "accuracy_b": float(right_b.mean()),
        "a_only": a_only,
        "b_only": b_only,
        "pvalue": float(binomtest(a_only, a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0,
    }


def few_shot(
    train_x: np.ndarray,
    train_y: Sequence[str],
    test_x: np.ndarray,
    test_y: Sequence[str],
    methods: Sequence[str],
    shots: int,
    seeds: int,
    weights: str = "uniform",
) -> dict:
    """Each method fitted on ``shots`` examples per class for each seed; per seed and mean ± std."""
    from sklearn.metrics import accuracy_score, f1_score

    results = {}
    for method in methods:
        per_seed = []
        for seed in range(seeds):
            rows = sample_per_class(train_y, shots, seed)
            classifier = make_classifier(method, None, weights, seed)
            predicted = classifier.fit_embeddings(train_x[rows], [train_y[i] for i in rows]).predict_labels(
                test_x
            )
            per_seed.append(
                {
                    "seed": seed,
                    "accuracy": float(accuracy_score(test_y, predicted)),
                    "macro_f1": float(f1_score(test_y, predicted, average="macro", zero_division=0)),
                }
            )
        results[method] = {}
        for metric in ("accuracy", "macro_f1"):
            values = [r[metric] for r in per_seed]
            std = round(float(np.std(values, ddof=1)), 4) if seeds > 1 else 0.0
            results[method][metric] = {"mean": round(float(np.mean(values)), 4), "std": std}
        results[method]["per_seed"] = per_seed
    return {"shots": shots, "seeds": seeds, "methods": results}


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClassifyArgs, run, argv)
