"""Train the CLS-LR ranker: logistic regression on a cross-encoder's [CLS] vector (the seed's "Bert Search Model").

Each (query, document) pair is read as in next-sentence prediction, ``[CLS] query [SEP] document [SEP]``, by
the cross-encoder; its [CLS] vector from ``--layer`` (default the last) is the feature row. Positives are the
qrels' relevant documents; hard negatives are BM25's best-ranked non-relevant documents
(``--negatives-per-positive`` per positive). SciFact's train queries are split by query into a fit part and
held-out "test queries" for the classification report. The regularisation C and the decision threshold are
chosen on the fit queries only (grouped cross-validation), never on held-out or test queries.
The ranking score is ``coef · CLS + intercept``; it is saved without pickle (safetensors + JSON) by
``ClsLrRanker.save`` and loads back with ``ctxir.rerank.ClsLrRanker.load`` as a re-ranker.

Then the ranker and the cross-encoder it reads both re-rank BM25's top ``--rerank-depth`` on SciFact's test
queries: nDCG@10 for BM25 alone (before), the cross-encoder (anchor) and CLS-LR (after).

    python -m training.train_cls_lr --base-model outputs/cross-encoder-scifact --output-dir outputs/cls-lr

Writes to --output-dir: cls_lr.safetensors, cls_lr_config.json, metrics.json, pr_curve.png, train.log.

This file runs the steps (``run``) and writes the record. Beside it: ``training/cls_lr_args.py`` (the flags),
``training/cls_lr_data.py`` (the labelled pairs and the held-out split), ``training/cls_lr_features.py`` (the one
cross-encoder pass per pair, cached) and ``training/cls_lr_fit.py`` (the regression, its threshold and report).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (
    None,
    "",
):  # `python training/train_cls_lr.py` as well as `python -m training.train_cls_lr`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from ctxir import kinds
from ctxir.checks import check_choice
from ctxir.data import load_beir
from ctxir.encoders.models import load_cross_encoder, pick_device, resolve_model
from ctxir.encoders.reranker_heads import cls_lr_logit
from ctxir.evaluation import evaluate_run
from ctxir.publish.metrics_file import write_metrics
from ctxir.rerank import ClsLrRanker, CrossEncoderReranker
from ctxir.rerank.pipeline import Pipeline
from ctxir.retrieval import BM25Retriever
from ctxir.types import Corpus, CtxirError, Qrels, Queries, doc_text
from training.cls_lr_args import CV_METRICS, ClsLrArgs
from training.cls_lr_data import (
    PairSet,
    base_unseen_queries,
    build_pairs,
    concat_pairs,
    general_pairs,
    split_queries,
)
from training.cls_lr_features import FeatureCache, Pair, features, folder_fingerprint, with_score
from training.cls_lr_fit import (
    PrecomputedReranker,
    best_f1_threshold,
    classification,
    fit_logistic,
    out_of_fold_scores,
    pr_curve_png,
    sigmoid,
)
from training.common import (
    check_not_empty,
    cli_main,
    data_folder,
    dataset_entry,
    evaluation_row,
    general_entries,
    machine_info,
    set_threads,
    take,
    tee_output,
)

# ---------------------------------------------------------------- checks


def check_args(args: ClsLrArgs) -> list[float]:
    if args.negatives_per_positive < 1:
        raise CtxirError(f"--negatives-per-positive must be ≥ 1, got {args.negatives_per_positive!r}")
    if args.negative_depth < args.negatives_per_positive:
        raise CtxirError(
            f"--negative-depth ({args.negative_depth!r}) must be ≥ --negatives-per-positive "
            f"({args.negatives_per_positive!r}): negatives are drawn from that many BM25 hits"
        )
    if not 0 < args.heldout_fraction < 1:
        raise CtxirError(f"--heldout-fraction must be between 0 and 1, got {args.heldout_fraction!r}")
    for name in ("rerank_depth", "batch_size"):
        if getattr(args, name) < 1:
            raise CtxirError(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(args, name)!r}")
    for name in ("max_samples", "max_test_queries", "max_fit_queries", "general_queries"):
        if getattr(args, name) < -1 or getattr(args, name) == 0:
            raise CtxirError(
                f"--{name.replace('_', '-')} must be -1 (all) or ≥ 1, got {getattr(args, name)!r}"
            )
    if args.heldout_queries not in ("random", "base-unseen"):
        raise CtxirError(
            f"--heldout-queries {args.heldout_queries!r} is not known: use 'random' or 'base-unseen'"
        )
    check_choice(args.cv_metric, "--cv-metric", CV_METRICS)
    if args.cv_folds < 2:
        raise CtxirError(f"--cv-folds must be ≥ 2, got {args.cv_folds!r}")
    if args.class_weight not in ("balanced", "none"):
        raise CtxirError(f"--class-weight {args.class_weight!r} is not known: use 'balanced' or 'none'")
    if args.max_length < 0:
        raise CtxirError(f"--max-length must be ≥ 0 (0 = the cross-encoder's own), got {args.max_length!r}")
    grid = positive_grid("--c-grid", args.c_grid, "0.01,0.1,1", "C")
    pick_device(args.device)
    set_threads(args.torch_threads)
    emphasis_grid(args)  # a bad --score-emphasis stops here, before any loading
    return grid


# ---------------------------------------------------------------- run


@dataclass
class Inputs:
    """Step 1's result: SciFact's splits, the train queries split into fit and held-out, the cross-encoder's path."""

    scifact: Path
    corpus: Corpus
    train_queries: Queries
    train_qrels: Qrels
    test_queries: Queries
    test_qrels: Qrels
    fit_qids: list[str]
    heldout_qids: list[str]
    test_qids: list[str]
    base_path: str


def run(args: ClsLrArgs) -> dict:
    total_start = time.perf_counter()
    # 1. check arguments and data before anything is loaded or trained
    c_grid = check_args(args)
    inputs = load_inputs(args)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    with tee_output(output / "train.log"):
        print(
            f"=== train_cls_lr {time.strftime('%Y-%m-%d %H:%M:%S %Z')} ===\nconfig: {json.dumps(asdict(args))}"
        )
        result = _run(_Run(args, c_grid, inputs, output, total_start))
    return result


def load_inputs(args: ClsLrArgs) -> Inputs:
    """SciFact's train and test splits, and which train queries are fit on and which held out (``--heldout-queries``)."""
    scifact = data_folder(args.data_dir, "scifact")
    corpus, train_queries, train_qrels = load_beir(scifact, "train")
    _, test_queries, test_qrels = load_beir(scifact, "test")
    train_qids = [q for q in train_queries if any(g > 0 and d in corpus for d, g in train_qrels[q].items())]
    check_not_empty(
        len(train_qids),
        f"no query in {scifact / 'qrels' / 'train.tsv'} has a relevant document "
        "(grade > 0) that is in corpus.jsonl",
        "check that the qrels belong to this corpus",
    )
    base_path = resolve_model(args.base_model)
    unseen = None
    if args.heldout_queries == "base-unseen":
        positives = {q: {d for d, g in train_qrels[q].items() if g > 0 and d in corpus} for q in train_qids}
        unseen = base_unseen_queries(base_path, train_qids, positives)
    train_qids = take(train_qids, args.max_samples, args.seed)
    if unseen is None:
        fit_qids, heldout_qids = split_queries(train_qids, args.heldout_fraction, args.seed)
    else:
        fit_qids = [q for q in train_qids if q not in unseen]
        heldout_qids = [q for q in train_qids if q in unseen]
        if not fit_qids or not heldout_qids:
            raise CtxirError(
                f"--heldout-queries base-unseen leaves {len(fit_qids)} fit and {len(heldout_qids)} "
                "held-out queries: both must be non-empty (raise --max-samples)"
            )
    fit_qids = take(fit_qids, args.max_fit_queries, args.seed)
    test_qids = take(sorted(test_queries), args.max_test_queries, args.seed)
    return Inputs(
        scifact,
        corpus,
        train_queries,
        train_qrels,
        test_queries,
        test_qrels,
        fit_qids,
        heldout_qids,
        test_qids,
        base_path,
    )


def emphasis_grid(args: ClsLrArgs) -> list[float]:
    """--score-emphasis as numbers where the score is a feature; [1] (nothing to emphasise) otherwise."""
    if not args.score_feature:
        return [1.0]
    return positive_grid("--score-emphasis", args.score_emphasis, "1,10,100", "value")


def positive_grid(flag: str, value: str, example: str, what: str) -> list[float]:
    """A comma list of numbers > 0, or a CtxirError naming ``flag``."""
    try:
        grid = [float(v) for v in value.split(",") if v.strip()]
    except ValueError as err:
        raise CtxirError(f"{flag} {value!r} must be comma-separated numbers like '{example}'") from err
    if not grid or any(v <= 0 for v in grid):
        raise CtxirError(f"{flag} {value!r} must list at least one {what} > 0")
    return grid


def setting_name(c: float, emphasis: float) -> str:
    return f"C={c:g}" if emphasis == 1 else f"C={c:g}, score×{emphasis:g}"


def per_query_ndcg(y: np.ndarray, scores: np.ndarray, groups: np.ndarray, k: int = 10) -> float:
    """The mean over queries (``groups``) of nDCG@k of each query's own pairs ranked by ``scores`` (labels ``y``,
    1 = relevant), through ctxir's metrics; queries without a relevant pair are left out.

    Query a ranks its relevant pair 2nd (1 / log2(3) = 0.6309), query b 1st (1): the mean is 0.8155.

    >>> y, scores = np.array([1, 0, 0, 1]), np.array([0.2, 0.9, 0.5, 0.8])
    >>> round(per_query_ndcg(y, scores, np.array(["a", "a", "b", "b"])), 4)
    0.8155
    """
    from ctxir.evaluation import evaluate_run

    qrels, run = {}, {}
    for i, (label, score, group) in enumerate(zip(y, scores, groups, strict=True)):
        run.setdefault(str(group), {})[str(i)] = float(score)
        if label:
            qrels.setdefault(str(group), {})[str(i)] = 1
    run = {q: docs for q, docs in run.items() if q in qrels}
    return float(evaluate_run(qrels, run, [k]).aggregate[f"nDCG@{k}"])


def choose_c(
    x_fit: np.ndarray, y_fit: np.ndarray, g_fit: np.ndarray, c_grid: Sequence[float], args: ClsLrArgs
) -> tuple[tuple[float, float], dict]:
    """The C (and, with --score-feature, the score's emphasis) with the best out-of-fold ``--cv-metric``, folds
    grouped by query (a query's pairs never straddle folds) → ((C, emphasis), {(C, emphasis): {"average_precision",
    "ndcg", "oof" scores}})."""
    from sklearn.metrics import average_precision_score

    class_weight = None if args.class_weight == "none" else args.class_weight
    folds = min(args.cv_folds, len(set(g_fit)))
    if folds < 2:
        raise CtxirError(
            f"need at least 2 fit queries for cross-validation, got {len(set(g_fit))}: raise --max-samples"
        )
    cv = {}
    for c in c_grid:
        for emphasis in emphasis_grid(args):
            oof = out_of_fold_scores(x_fit, y_fit, g_fit, c, class_weight, folds, args.seed, emphasis)
            ap = float(average_precision_score(y_fit, oof))
            ndcg = per_query_ndcg(y_fit, oof, g_fit)
            cv[c, emphasis] = {"average_precision": ap, "ndcg": ndcg, "oof": oof}
            print(
                f"{setting_name(c, emphasis)}: out-of-fold average precision {ap:.4f}, per-query nDCG@10 "
                f"{ndcg:.4f} ({folds} folds by query)"
            )
    key = CV_METRICS[args.cv_metric]
    return max(cv, key=lambda setting: cv[setting][key]), cv


def rerank_test(
    bm25, scores: dict[str, np.ndarray], pairs: Sequence[Pair], queries: dict, qrels: dict, depth: int
) -> dict[str, dict]:
    """BM25's top-``depth`` re-ranked by each ranker's precomputed ``scores`` (aligned with ``pairs``) through the
    library's Pipeline and metrics → {"bm25" | ranker name: aggregate metrics}."""
    runs = {}
    for name, values in scores.items():
        stage_runs = Pipeline(bm25, PrecomputedReranker(name, pairs, values), depth=depth).run(
            queries, show_progress=False
        )
        runs[kinds.BM25], runs[name] = stage_runs["first_stage"], stage_runs["rerank"]
    k_values = sorted({1, 3, 5, 10, depth, 100})
    retrieval = {name: evaluate_run(qrels, r, k_values).aggregate for name, r in runs.items()}
    for name, agg in retrieval.items():
        print(
            f"{name:>14}: nDCG@10 {agg['nDCG@10']:.4f}  MRR@10 {agg['MRR@10']:.4f}  "
            f"Recall@{depth} {agg[f'Recall@{depth}']:.4f}"
        )
    return retrieval


@dataclass
class Labelled:
    """Step 2's result: the train pairs, which of them are fit on, and which the held-out report is stated on."""

    pairs: PairSet
    fit_rows: np.ndarray
    report_rows: np.ndarray
    eligible: set[str]  # held-out queries with ≥ 3 hard negatives per positive
    n_scifact: int = 0  # the first n pairs are SciFact's; the rest --general's (all fit on)
    general: dict = field(default_factory=dict)  # what metrics.json records of --general

    @property
    def y_fit(self) -> np.ndarray:
        return self.pairs.labels[self.fit_rows]

    @property
    def y_report(self) -> np.ndarray:
        return self.pairs.labels[self.report_rows]


@dataclass
class Fitted:
    """Steps 4–5: the C and thresholds chosen on the fit queries, and the fitted weights."""

    best_c: float
    cv: dict
    threshold: float
    oof_f1: float
    ce_threshold: float
    ce_fit_f1: float
    class_weight: str | None
    coef: np.ndarray
    intercept: float
    sk_model: Any
    seconds: float  # feature extraction of all train pairs + C search + fit
    base_ref: str = ""
    emphasis: float = 1.0  # the score feature's standardised column × this in the fit (--score-emphasis)


@dataclass
class RerankSet:
    """Step 7: BM25's candidates for the test queries as (query, document) pairs, and both rankers' one-pass
    scores of them."""

    qids: list[str]
    queries: Queries
    candidates: dict
    pairs: list[Pair]
    cls_scores: np.ndarray
    ce_logits: np.ndarray


@dataclass
class _Run:
    """One run's state, filled step by step (the numbered steps of ``_run``)."""

    args: ClsLrArgs
    c_grid: list[float]
    inputs: Inputs
    output: Path
    total_start: float
    timings: dict = field(default_factory=dict)
    labelled: Labelled | None = None
    device: str = ""
    max_length: int = 0
    cross_encoder: Any = None
    cache: FeatureCache | None = None
    x_all: np.ndarray | None = None  # [CLS] of every train pair
    ce_all: np.ndarray | None = None  # the cross-encoder's own logit of every train pair
    fitted: Fitted | None = None
    reports: dict = field(default_factory=dict)
    test: RerankSet | None = None
    retrieval: dict = field(default_factory=dict)
    verification: dict = field(default_factory=dict)


def _run(run: _Run) -> dict:
    args = run.args
    # 2. BM25 over the corpus: hard negatives for train queries, candidates for test queries
    bm25 = BM25Retriever(run.inputs.corpus)
    run.labelled = label_pairs(run, bm25)
    # 3. load the cross-encoder (a plain body gets a fresh head, seeded) and read [CLS] + its own score
    load_reader(run)
    train_start = time.perf_counter()
    parts = {"train pairs": run.labelled.pairs.pairs[: run.labelled.n_scifact]}
    if args.general:
        parts["general pairs"] = run.labelled.pairs.pairs[run.labelled.n_scifact :]
    read = [
        features(
            run.cross_encoder,
            run.cache,
            pairs,
            args.layer,
            args.batch_size,
            run.max_length,
            desc,
            run.timings,
        )
        for desc, pairs in parts.items()
    ]
    run.ce_all = np.concatenate([logits for _, logits in read])
    run.x_all = with_score(np.concatenate([cls for cls, _ in read]), run.ce_all, args.score_feature)
    # 4. choose C and the decision threshold on the fit queries only (query-grouped cross-validation)
    # 5. fit on all fit queries; save coef/intercept (safetensors + JSON) through ClsLrRanker
    run.fitted = fit(run, train_start)
    ranker = save_ranker(run)
    # 6. classification reports: fit queries (in-sample) and held-out queries, at p = 0.5 and the tuned threshold
    run.reports = classification_reports(run)
    # 7. re-rank BM25's top candidates on SciFact test queries: BM25, the cross-encoder, CLS-LR (one shared pass)
    run.test = rerank_candidates(run, bm25, ranker)
    test = run.test
    run.retrieval = rerank_test(
        bm25,
        {kinds.CROSS_ENCODER: test.ce_logits, kinds.CLS_LR: test.cls_scores},
        test.pairs,
        test.queries,
        {q: run.inputs.test_qrels[q] for q in test.qids},
        args.rerank_depth,
    )
    # 8. the saved ranker, loaded back, and a CrossEncoderReranker score like the one-pass scores
    run.verification = _verify(run.output, args, run.cross_encoder, run.inputs.corpus, test, run.device)
    # 9. metrics.json
    metrics = metrics_record(run)
    path = write_metrics(run.output, metrics)
    print(f"wrote {path} (total {metrics['extra']['total_wall_time_seconds']:.1f} s)")
    return metrics


def label_pairs(run: _Run, bm25) -> Labelled:
    """The fit and held-out queries' pairs (relevant + BM25 hard negatives), checked non-empty."""
    args, inputs = run.args, run.inputs
    fit_qids, heldout_qids = inputs.fit_qids, inputs.heldout_qids
    pairs, ratio = build_pairs(
        inputs.corpus,
        {q: inputs.train_queries[q] for q in fit_qids + heldout_qids},
        inputs.train_qrels,
        bm25,
        args.negatives_per_positive,
        args.negative_depth,
    )
    fit_rows = pairs.rows(set(fit_qids))
    y_fit = pairs.labels[fit_rows]
    check_not_empty(int(y_fit.sum()), "the fit queries have no relevant pairs", "raise --max-samples")
    check_not_empty(
        int((1 - y_fit).sum()),
        "BM25 found no non-relevant document for the fit queries",
        "raise --negative-depth",
    )
    # The target is stated on held-out queries with ≥ 3 hard negatives per positive.
    eligible = {q for q in heldout_qids if ratio.get(q, 0) >= 3}
    labelled = Labelled(pairs, fit_rows, pairs.rows(eligible), eligible, len(pairs))
    if args.general:
        extra, labelled.general = general_pairs(args, inputs.base_path)
        labelled.pairs = concat_pairs([pairs, extra])
        labelled.fit_rows = np.concatenate([fit_rows, len(pairs) + np.arange(len(extra))])
    check_not_empty(
        len(labelled.report_rows),
        f"none of the {len(heldout_qids)} held-out queries has ≥ 3 hard negatives per positive",
        "raise --negatives-per-positive / --negative-depth or --max-samples",
    )
    print(
        f"queries: {len(fit_qids)} fit, {len(heldout_qids)} held-out ({len(eligible)} with ≥ 3 negatives per "
        f"positive), {len(inputs.test_qids)} test; pairs: {len(fit_rows)} fit ({int(y_fit.sum())} relevant), "
        f"{len(labelled.report_rows)} held-out ({int(labelled.y_report.sum())} relevant)"
    )
    return labelled


def load_reader(run: _Run) -> None:
    """The cross-encoder whose [CLS] is read, its token limit, and the feature cache keyed by its files."""
    args, base_path = run.args, run.inputs.base_path
    torch.manual_seed(args.seed)
    run.device = pick_device(args.device)
    cross_encoder = load_cross_encoder(base_path, run.device)
    positions = getattr(cross_encoder.model.config, "max_position_embeddings", 512)
    run.max_length = min(args.max_length or cross_encoder.max_seq_length or positions, positions)
    # The anchor cross-encoder reads exactly the tokens CLS-LR reads (and CrossEncoderReranker agrees).
    cross_encoder.max_seq_length = run.max_length
    run.cross_encoder = cross_encoder
    run.cache = FeatureCache(args.cache_dir, folder_fingerprint(base_path), args.layer, run.max_length)
    print(
        f"cross-encoder {args.base_model!r} ({base_path}) on {run.device}, max_length {run.max_length}, "
        f"layer {args.layer}"
    )


def fit(run: _Run, train_start: float) -> Fitted:
    """C by grouped cross-validation and the F1-maximising thresholds, on the fit queries; then the final fit."""
    args, labelled = run.args, run.labelled
    y_fit, g_fit = labelled.y_fit, labelled.pairs.groups[labelled.fit_rows]
    x_fit = run.x_all[labelled.fit_rows]  # (fit pairs, hidden)
    (best_c, emphasis), cv = choose_c(x_fit, y_fit, g_fit, run.c_grid, args)
    threshold, oof_f1 = best_f1_threshold(y_fit, cv[best_c, emphasis]["oof"])
    ce_threshold, ce_fit_f1 = best_f1_threshold(y_fit, run.ce_all[labelled.fit_rows])
    print(
        f"chosen {setting_name(best_c, emphasis)}; F1-maximising threshold on fit queries (out-of-fold): score {threshold:.4f} "
        f"(probability {sigmoid(threshold):.4f}, F1 {oof_f1:.4f})"
    )
    class_weight = None if args.class_weight == "none" else args.class_weight
    coef, intercept, sk_model = fit_logistic(x_fit, y_fit, best_c, class_weight, args.seed, emphasis)
    return Fitted(
        best_c,
        cv,
        threshold,
        oof_f1,
        ce_threshold,
        ce_fit_f1,
        class_weight,
        coef,
        intercept,
        sk_model,
        time.perf_counter() - train_start,
        emphasis=emphasis,
    )


def save_ranker(run: _Run) -> ClsLrRanker:
    """The ranker (coef/intercept + what it was chosen on) saved through ClsLrRanker: safetensors + JSON."""
    args, fitted, y_fit = run.args, run.fitted, run.labelled.y_fit
    fitted.base_ref = _base_reference(args.base_model, run.inputs.base_path, run.output, args.bundle_base)
    ranker = ClsLrRanker(
        run.inputs.base_path,
        fitted.coef,
        fitted.intercept,
        layer=args.layer,
        max_length=run.max_length,
        device=run.device,
        batch_size=args.batch_size,
        score_feature=args.score_feature,
        metadata={
            "C": fitted.best_c,
            "score_emphasis": fitted.emphasis,
            "class_weight": fitted.class_weight,
            "standardised_then_folded": True,
            "threshold": fitted.threshold,
            "threshold_probability": float(sigmoid(fitted.threshold)),
            "threshold_chosen_on": "out-of-fold scores of the fit queries (max F1)",
            "train_pairs": len(y_fit),
            "train_positives": int(y_fit.sum()),
            "base_model_given": args.base_model,
        },
    )
    ranker.base_model = fitted.base_ref
    ranker.save(run.output)
    print(
        f"saved {run.output / 'cls_lr.safetensors'} and cls_lr_config.json (base_model {fitted.base_ref!r})"
    )
    return ranker


def classification_reports(run: _Run) -> dict:
    """Fit (in-sample) and held-out reports at p = 0.5 and at the tuned threshold, the cross-encoder's beside them;
    printed, and the held-out precision–recall curves drawn to pr_curve.png."""
    fitted, labelled = run.fitted, run.labelled
    y_fit, y_report = labelled.y_fit, labelled.y_report
    s_fit = cls_lr_logit(run.x_all[labelled.fit_rows], fitted.coef, fitted.intercept)
    s_report = cls_lr_logit(run.x_all[labelled.report_rows], fitted.coef, fitted.intercept)
    ce_report = run.ce_all[labelled.report_rows]
    reports = {
        "train_queries@0.5": classification(y_fit, s_fit, 0.0),
        "train_queries@tuned": classification(y_fit, s_fit, fitted.threshold),
        "heldout_queries@0.5": classification(y_report, s_report, 0.0),
        "heldout_queries@tuned": classification(y_report, s_report, fitted.threshold),
        "cross_encoder_heldout@tuned": classification(y_report, ce_report, fitted.ce_threshold),
    }
    for name, rep in reports.items():
        print(f"--- {name} (score ≥ {rep['threshold']:.4f}) ---\n{rep['text']}")
    pr_curve_png(
        run.output / "pr_curve.png",
        y_report,
        {"CLS-LR": (s_report, fitted.threshold), "cross-encoder score": (ce_report, fitted.ce_threshold)},
        f"Held-out SciFact train queries ({len(labelled.eligible)} queries, {int(y_report.sum())} relevant "
        "pairs)",
    )
    return reports


def rerank_candidates(run: _Run, bm25, ranker: ClsLrRanker) -> RerankSet:
    """BM25's top --rerank-depth for each test query, read once by the cross-encoder: both rankers' scores."""
    inputs = run.inputs
    queries = {q: inputs.test_queries[q] for q in inputs.test_qids}
    candidates = bm25.search(queries, run.args.rerank_depth)
    pairs = [(queries[q], doc_text(inputs.corpus[h.doc_id])) for q in inputs.test_qids for h in candidates[q]]
    x_test, ce_test = features(
        run.cross_encoder,
        run.cache,
        pairs,
        run.args.layer,
        run.args.batch_size,
        run.max_length,
        "test candidates",
        run.timings,
    )
    x_test = with_score(x_test, ce_test, run.args.score_feature)
    return RerankSet(inputs.test_qids, queries, candidates, pairs, ranker.score_features(x_test), ce_test)


def metrics_record(run: _Run) -> dict:
    """metrics.json (docs/reference/formats.md's contract); CLS-LR's "training" block in the Trainer scripts' keys."""
    args, inputs, fitted, labelled = run.args, run.inputs, run.fitted, run.labelled
    ndcg = {name: agg["nDCG@10"] for name, agg in run.retrieval.items()}
    y_fit, y_report = labelled.y_fit, labelled.y_report
    general_pairs_count = sum(int(g.get("pairs", 0)) for g in labelled.general.values())
    heldout_tuned, ce_heldout = (
        run.reports["heldout_queries@tuned"]["report"],
        run.reports["cross_encoder_heldout@tuned"],
    )
    heldout_how = (
        "train queries the cross-encoder never trained on"
        if args.heldout_queries == "base-unseen"
        else f"a seeded {args.heldout_fraction:g} of the train queries"
    )
    f1_config = (
        f"held-out SciFact train queries ({heldout_how}) with ≥ 3 BM25 hard negatives per positive "
        f"({len(labelled.eligible)} queries, {len(y_report)} pairs); threshold chosen on fit queries"
    )
    seconds = fitted.seconds
    return {
        "model_type": kinds.CLS_LR,
        "model_name": args.model_name,
        "base_model": args.base_model,
        "objective": "LogisticRegression (scikit-learn) on the cross-encoder's [CLS] vector"
        + (" and its own score of the pair" if args.score_feature else ""),
        "datasets": [
            # fit rows hold the --general pairs too; they get rows of their own
            dataset_entry("scifact", "train", "train", inputs.scifact, len(y_fit) - general_pairs_count),
            dataset_entry("scifact", "train (held-out queries)", "eval", inputs.scifact, len(y_report)),
            dataset_entry("scifact", "test", "eval", inputs.scifact, len(run.test.pairs)),
            *general_entries(args.data_dir, labelled.general),
        ],
        "config": asdict(args),
        "training": {
            "steps": int(fitted.sk_model[-1].n_iter_[0]),
            "epochs": float(fitted.sk_model[-1].n_iter_[0]),
            "train_examples": len(y_fit),
            "batch_size": args.batch_size,
            "learning_rate": None,
            "wall_time_seconds": round(seconds, 1),
            "examples_per_second": round(len(y_fit) / seconds, 2) if seconds > 0 else None,
            "device": run.device,
            "hardware": machine_info()["hardware"],
            "final_loss": _log_loss(fitted.sk_model, run.x_all[labelled.fit_rows], y_fit),
            "seed": args.seed,
        },
        "evaluations": [
            evaluation_row(
                "scifact",
                "train (held-out queries)",
                "classification",
                "F1 (relevant class)",
                ce_heldout["report"]["relevant"]["f1-score"],
                heldout_tuned["relevant"]["f1-score"],
                config=f1_config + "; before = the cross-encoder's own score, thresholded the same way",
            ),
            evaluation_row(
                "scifact",
                "train (held-out queries)",
                "classification",
                "accuracy",
                ce_heldout["report"]["accuracy"],
                heldout_tuned["accuracy"],
                config=f1_config,
            ),
            evaluation_row(
                "scifact",
                "test",
                "reranking",
                "nDCG@10",
                ndcg[kinds.BM25],
                ndcg[kinds.CLS_LR],
                anchor=round(ndcg[kinds.CROSS_ENCODER], 4),
                anchor_name=f"cross-encoder {args.base_model} re-ranking the same candidates",
                config=f"re-rank BM25 top-{args.rerank_depth}, {len(run.test.qids)} test queries; "
                "before = BM25 alone",
            ),
        ],
        "extra": extra_record(run, heldout_how),
    }


def extra_record(run: _Run, heldout_how: str) -> dict:
    """metrics.json "extra": every report and threshold, the C search, timings and the verification."""
    fitted, inputs, reports, timings = run.fitted, run.inputs, run.reports, run.timings
    extraction_pairs = sum(t["pairs"] for t in timings.values() if not t["cached"])
    extraction_seconds = sum(t["seconds"] for t in timings.values() if not t["cached"])
    return {
        "classification_reports": {
            k: {kk: vv for kk, vv in v.items() if kk != "text"} for k, v in reports.items()
        },
        "classification_reports_text": {k: v["text"] for k, v in reports.items()},
        "thresholds": {
            "cls_lr_score": fitted.threshold,
            "cls_lr_probability": float(sigmoid(fitted.threshold)),
            "cls_lr_fit_oof_f1": fitted.oof_f1,
            "cross_encoder_logit": fitted.ce_threshold,
            "cross_encoder_fit_f1": fitted.ce_fit_f1,
            "note": "'@0.5' = probability 0.5 (score 0); '@tuned' = the F1-maximising threshold "
            "chosen on out-of-fold scores of the fit queries, never on held-out or test",
        },
        "c_selection": {
            setting_name(*k): round(v[CV_METRICS[run.args.cv_metric]], 4) for k, v in fitted.cv.items()
        },
        "c_selection_metric": run.args.cv_metric,
        "c_selection_both": {
            setting_name(*k): {
                "average_precision": round(v["average_precision"], 4),
                "ndcg@10": round(v["ndcg"], 4),
            }
            for k, v in fitted.cv.items()
        },
        "chosen_C": fitted.best_c,
        "chosen_score_emphasis": fitted.emphasis,
        "features": "[CLS] + the cross-encoder's score" if run.args.score_feature else "[CLS]",
        "general": run.labelled.general,
        "queries": {
            "fit": len(inputs.fit_qids),
            "heldout": len(inputs.heldout_qids),
            "heldout_reported": len(run.labelled.eligible),
            "test": len(inputs.test_qids),
        },
        "heldout_queries": heldout_how,
        "reranking": {name: {k: round(v, 4) for k, v in agg.items()} for name, agg in run.retrieval.items()},
        "pr_curve": "pr_curve.png",
        "max_length": run.max_length,
        "layer": run.args.layer,
        "base_model_path": inputs.base_path,
        "base_model_reference": fitted.base_ref,
        "feature_extraction": timings,
        "feature_extraction_pairs_per_second": round(extraction_pairs / extraction_seconds, 2)
        if extraction_seconds > 0
        else None,
        # the whole run up to writing metrics.json (data loading, both feature passes, reports, verification)
        "total_wall_time_seconds": round(time.perf_counter() - run.total_start, 1),
        "verification": run.verification,
        "notes": "CLS-LR has no gradient training: 'steps'/'epochs' are L-BFGS iterations (each one full pass "
        "over the fit features), learning_rate is null, batch_size is the feature-extraction batch. "
        "wall_time_seconds covers feature extraction of all train pairs + C search + fit; "
        "examples_per_second = fit pairs / that time.",
    }


def _log_loss(sk_model, x: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import log_loss

    return round(float(log_loss(y, sk_model.predict_proba(x)[:, 1], labels=[0, 1])), 6)


def _base_reference(given: str, base_path: str, output: Path, bundle: bool) -> str:
    """What cls_lr_config.json names as base_model: '.' when bundled, a path relative to the ranker folder for
    a local cross-encoder (ClsLrRanker.load resolves it there), else the Hub id as given."""
    if bundle:
        for item in Path(base_path).iterdir():
            if item.name in (
                "README.md",
                "metrics.json",
                "train.log",
                "training_log.jsonl",
            ) or item.name.startswith("checkpoint"):
                continue
            target = output / item.name
            if item.is_dir():
                shutil.copytree(item, target, dirs_exist_ok=True)
            else:
                shutil.copy2(item, target)
        return "."
    if Path(given).expanduser().exists():
        return os.path.relpath(Path(base_path).resolve(), output.resolve())
    return given


def _verify(
    output: Path, args: ClsLrArgs, cross_encoder, corpus: Corpus, test: RerankSet, device: str
) -> dict:
    """Re-rank a few test queries for real (loaded ranker, CrossEncoderReranker) and compare with one-pass scores."""
    if args.verify_queries <= 0:
        return {"queries": 0}
    loaded = ClsLrRanker.load(output, device=device, batch_size=args.batch_size)
    reference = CrossEncoderReranker(cross_encoder, batch_size=args.batch_size)
    precomputed = PrecomputedReranker(kinds.CLS_LR, test.pairs, test.cls_scores)
    lookup = {pair: i for i, pair in enumerate(test.pairs)}
    activation = getattr(cross_encoder, "activation_fn", None) or torch.nn.Sigmoid()
    cls_diff, ce_diff, same_order = 0.0, 0.0, True
    for qid in test.qids[: args.verify_queries]:
        query, hits = test.queries[qid], test.candidates[qid]
        texts = [doc_text(corpus[h.doc_id]) for h in hits]
        rows = [lookup[(query, t)] for t in texts]
        got = loaded.score_pairs(query, texts)
        cls_diff = max(cls_diff, float(np.abs(got - test.cls_scores[rows]).max()))
        # the cross-encoder's own activation: sigmoid for a classifier head, identity for ctxir's segment-cosine head
        expected = activation(torch.from_numpy(test.ce_logits[rows])).numpy()
        ce_diff = max(ce_diff, float(np.abs(reference.score_pairs(query, texts) - expected).max()))
        same_order &= [h.doc_id for h in loaded.rerank(query, hits, corpus)] == [
            h.doc_id for h in precomputed.rerank(query, hits, corpus)
        ]
    checked = min(args.verify_queries, len(test.qids))
    print(
        f"verification on {checked} test queries: loaded ClsLrRanker vs one-pass "
        f"max |Δscore| {cls_diff:.2e}; CrossEncoderReranker vs one-pass max |Δ| {ce_diff:.2e}; "
        f"same CLS-LR order: {same_order}"
    )
    if cls_diff > 1e-3 or ce_diff > 1e-3:
        raise CtxirError(
            f"the loaded ranker or the cross-encoder disagrees with the one-pass scores (CLS-LR "
            f"{cls_diff:.2e}, cross-encoder {ce_diff:.2e}): the reported numbers would be wrong"
        )
    return {
        "queries": checked,
        "cls_lr_max_abs_diff": cls_diff,
        "cross_encoder_max_abs_prob_diff": ce_diff,
        "cls_lr_same_order": bool(same_order),
    }


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClsLrArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
