"""Fitting CLS-LR's logistic regression (grouped cross-validation, threshold), its report, and the test re-ranking."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ctxir import kinds
from ctxir.encoders.reranker_heads import cls_lr_logit
from ctxir.evaluation import evaluate_run
from ctxir.rerank import ClsLrRanker, CrossEncoderReranker, Reranker
from ctxir.rerank.pipeline import Pipeline
from ctxir.types import Corpus, CtxirError, Queries, doc_text
from training.cls_lr_args import CV_METRICS, emphasis_grid
from training.cls_lr_features import Pair

if TYPE_CHECKING:
    from training.cls_lr_args import ClsLrArgs
    from training.cls_lr_data import Inputs, Labelled
    from training.cls_lr_features import Reader


def fit_logistic(
    x: np.ndarray, y: np.ndarray, c: float, class_weight: str | None, seed: int, emphasis: float = 1.0
):
    """Standardise then fit LogisticRegression: (coef (features,), intercept) on the *raw* features, + the model.

    Scaling makes one C mean the same on every base model; ``emphasis`` scales the last standardised column."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    weights = np.ones(x.shape[1])
    weights[-1] = emphasis
    model = make_pipeline(
        StandardScaler(),
        FunctionTransformer(lambda z: z * weights),
        LogisticRegression(C=c, class_weight=class_weight, max_iter=5000, random_state=seed),
    )
    model.fit(x, y)
    scaler, lr = model[0], model[-1]
    coef = lr.coef_[0] * weights / scaler.scale_
    intercept = float(lr.intercept_[0] - np.dot(coef, scaler.mean_))
    return coef.astype(np.float32), intercept, model


def out_of_fold_scores(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    c: float,
    class_weight: str | None,
    folds: int,
    seed: int,
    emphasis: float = 1.0,
) -> np.ndarray:
    """Decision scores of each fit pair from a model that never saw its query (GroupKFold by query)."""
    from sklearn.model_selection import GroupKFold

    scores = np.zeros(len(y), np.float64)
    for train_idx, val_idx in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[train_idx])) < 2:
            raise CtxirError(
                "a cross-validation fold has only one class: too few fit queries — raise --max-samples "
                "or lower --cv-folds"
            )
        coef, intercept, _ = fit_logistic(x[train_idx], y[train_idx], c, class_weight, seed, emphasis)
        scores[val_idx] = cls_lr_logit(x[val_idx], coef, intercept)
    return scores


def best_f1_threshold(y: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """The score threshold maximising F1 of the positive class on (y, scores): (threshold, F1)."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(y, scores)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    best = int(np.argmax(f1))
    return float(thresholds[best]), float(f1[best])


def classification(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict:
    """sklearn's classification_report at ``score ≥ threshold`` (dict, per class + accuracy) and the text."""
    from sklearn.metrics import average_precision_score, classification_report

    predicted = (scores >= threshold).astype(int)
    options = {"labels": [0, 1], "target_names": ["non-relevant", "relevant"], "zero_division": 0}
    return {
        "threshold": threshold,
        "report": classification_report(y, predicted, output_dict=True, **options),
        "text": classification_report(y, predicted, digits=4, **options),
        "positives": int(y.sum()),
        "negatives": int((1 - y).sum()),
        "average_precision": float(average_precision_score(y, scores)) if 0 < y.sum() < len(y) else None,
    }


def pr_curve_png(path: Path, y: np.ndarray, curves: dict[str, tuple[np.ndarray, float]], title: str) -> None:
    """Precision–recall curves of several scorers on the same pairs; the dot marks each tuned threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import PrecisionRecallDisplay

    fig, ax = plt.subplots(figsize=(5.6, 5.2), dpi=120)
    for i, (name, (scores, threshold)) in enumerate(curves.items()):
        display = PrecisionRecallDisplay.from_predictions(
            y, scores, name=name, ax=ax, plot_chance_level=i == 0
        )
        predicted = scores >= threshold
        tp = float((predicted & (y == 1)).sum())
        ax.plot(tp / max(y.sum(), 1), tp / max(predicted.sum(), 1), "o", color=display.line_.get_color())
    ax.set(xlabel="recall (relevant class)", ylabel="precision", xlim=(0, 1.01), ylim=(0, 1.02), title=title)
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------- re-ranking


class PrecomputedReranker(Reranker):
    """Looks scores up by (query, document text): lets Pipeline re-rank with scores from the one shared pass."""

    def __init__(self, name: str, pairs: Sequence[Pair], scores: np.ndarray):
        self.name = name
        self.table = {pair: float(s) for pair, s in zip(pairs, scores, strict=True)}

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        try:
            return np.array([self.table[(query, t)] for t in texts], dtype=np.float32)
        except KeyError as err:
            raise CtxirError(f"no precomputed {self.name} score for a candidate of query {query!r}") from err


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


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


@dataclass
class Fitted:
    """Steps 4–5: the C and thresholds chosen on the fit queries, and the fitted weights."""

    best_c: float
    emphasis: float  # the score feature's standardised column × this in the fit (--score-emphasis)
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
    final_loss: float  # log loss of the final fit on the fit pairs
    base_ref: str = ""


def fit(
    x_all: np.ndarray,
    ce_all: np.ndarray,
    labelled: Labelled,
    c_grid: list[float],
    args: ClsLrArgs,
    start: float,
) -> Fitted:
    """C by grouped cross-validation and the F1-maximising thresholds, on the fit queries; then the final fit."""
    from sklearn.metrics import log_loss

    y_fit, g_fit = labelled.y_fit, labelled.pairs.groups[labelled.fit_rows]
    x_fit = x_all[labelled.fit_rows]  # (fit pairs, hidden)
    (best_c, emphasis), cv = choose_c(x_fit, y_fit, g_fit, c_grid, args)
    threshold, oof_f1 = best_f1_threshold(y_fit, cv[best_c, emphasis]["oof"])
    ce_threshold, ce_fit_f1 = best_f1_threshold(y_fit, ce_all[labelled.fit_rows])
    print(
        f"chosen {setting_name(best_c, emphasis)}; F1-maximising threshold on fit queries (out-of-fold): score "
        f"{threshold:.4f} (probability {sigmoid(threshold):.4f}, F1 {oof_f1:.4f})"
    )
    class_weight = None if args.class_weight == "none" else args.class_weight
    coef, intercept, sk_model = fit_logistic(x_fit, y_fit, best_c, class_weight, args.seed, emphasis)
    seconds = time.perf_counter() - start
    loss = round(float(log_loss(y_fit, sk_model.predict_proba(x_fit)[:, 1], labels=[0, 1])), 6)
    return Fitted(
        *(best_c, emphasis, cv, threshold, oof_f1, ce_threshold, ce_fit_f1, class_weight),
        *(coef, intercept, sk_model, seconds, loss),
    )


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


def rerank_candidates(
    bm25, inputs: Inputs, ranker: ClsLrRanker, reader: Reader, args: ClsLrArgs
) -> RerankSet:
    """BM25's top --rerank-depth for each test query, read once by the cross-encoder: both rankers' scores."""
    queries = {q: inputs.test_queries[q] for q in inputs.test_qids}
    candidates = bm25.search(queries, args.rerank_depth)
    pairs = [(queries[q], doc_text(inputs.corpus[h.doc_id])) for q in inputs.test_qids for h in candidates[q]]
    x_test, ce_test = reader.read(pairs, "test candidates", args.score_feature)
    return RerankSet(inputs.test_qids, queries, candidates, pairs, ranker.score_features(x_test), ce_test)


def rerank_test(bm25, test: RerankSet, qrels: dict, depth: int) -> dict[str, dict]:
    """BM25's top-``depth`` re-ranked by the cross-encoder's and CLS-LR's precomputed scores of ``test``'s pairs
    through the library's Pipeline and metrics → {"bm25" | ranker name: aggregate metrics}."""
    runs = {}
    qrels = {q: qrels[q] for q in test.qids}
    for name, values in {kinds.CROSS_ENCODER: test.ce_logits, kinds.CLS_LR: test.cls_scores}.items():
        reranker = PrecomputedReranker(name, test.pairs, values)
        stage_runs = Pipeline(bm25, reranker, depth=depth).run(test.queries, show_progress=False)
        runs[kinds.BM25], runs[name] = stage_runs["first_stage"], stage_runs["rerank"]
    k_values = sorted({1, 3, 5, 10, depth, 100})
    retrieval = {name: evaluate_run(qrels, r, k_values).aggregate for name, r in runs.items()}
    for name, agg in retrieval.items():
        print(
            f"{name:>14}: nDCG@10 {agg['nDCG@10']:.4f}  MRR@10 {agg['MRR@10']:.4f}  "
            f"Recall@{depth} {agg[f'Recall@{depth}']:.4f}"
        )
    return retrieval


def classification_reports(
    fitted: Fitted, x_all: np.ndarray, ce_all: np.ndarray, labelled: Labelled, output: Path
) -> dict:
    """Fit (in-sample) and held-out reports at p = 0.5 and at the tuned threshold, the cross-encoder's beside them;
    printed, and the held-out precision–recall curves drawn to pr_curve.png."""
    y_fit, y_report = labelled.y_fit, labelled.y_report
    s_fit = cls_lr_logit(x_all[labelled.fit_rows], fitted.coef, fitted.intercept)
    s_report = cls_lr_logit(x_all[labelled.report_rows], fitted.coef, fitted.intercept)
    ce_report = ce_all[labelled.report_rows]
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
        output / "pr_curve.png",
        y_report,
        {"CLS-LR": (s_report, fitted.threshold), "cross-encoder score": (ce_report, fitted.ce_threshold)},
        f"Held-out SciFact train queries ({len(labelled.eligible)} queries, {int(y_report.sum())} relevant "
        "pairs)",
    )
    return reports


def verify_ranker(
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
