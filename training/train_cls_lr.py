"""Train the CLS-LR ranker: logistic regression on a cross-encoder's [CLS] vector of ``[CLS] query [SEP] document [SEP]``.

Positives are the qrels' documents, negatives BM25's best non-relevant ones; C and the threshold are chosen by
query-grouped cross-validation on the fit queries only. Then BM25, the cross-encoder and CLS-LR re-rank SciFact test.

    python -m training.train_cls_lr --base-model outputs/cross-encoder-scifact --output-dir outputs/cls-lr
Writes to --output-dir: cls_lr.safetensors, cls_lr_config.json, metrics.json, pr_curve.png, train.log.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # `python training/train_cls_lr.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from ctxir import kinds
from ctxir.files import machine_info
from ctxir.publish.metrics_file import write_metrics
from ctxir.rerank import ClsLrRanker
from ctxir.retrieval import BM25Retriever
from training.cls_lr_args import CV_METRICS, ClsLrArgs, check_args
from training.cls_lr_data import Inputs, Labelled, label_pairs, load_inputs
from training.cls_lr_features import Reader, load_reader
from training.cls_lr_fit import (
    Fitted,
    RerankSet,
    classification_reports,
    fit,
    rerank_candidates,
    rerank_test,
    setting_name,
    sigmoid,
    verify_ranker,
)
from training.common import (
    cli_main,
    dataset_entry,
    evaluation_row,
    general_entries,
    tee_output,
)


def run(args: ClsLrArgs) -> dict:
    total_start = time.perf_counter()
    # 0. check the arguments and the data before anything is loaded or trained
    c_grid = check_args(args)
    inputs = load_inputs(args)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    with tee_output(output / "train.log"):
        print(
            f"=== train_cls_lr {time.strftime('%Y-%m-%d %H:%M:%S %Z')} ===\nconfig: {json.dumps(asdict(args))}"
        )
        # 1. the data: relevant + BM25 hard-negative pairs of the fit and held-out queries (BM25 over the corpus
        # gives the test queries' candidates too)
        bm25 = BM25Retriever(inputs.corpus)
        labelled = label_pairs(args, inputs, bm25)
        # 2. load the model: the cross-encoder (a plain body gets a fresh head, seeded) whose [CLS] is read
        reader = load_reader(args, inputs.base_path)
        # 3. features: [CLS] (+ the cross-encoder's own score) of every train pair, one pass
        train_start = time.perf_counter()
        pairs, n = labelled.pairs.pairs, labelled.n_scifact
        parts = [(pairs[:n], "train pairs")] + ([(pairs[n:], "general pairs")] if args.general else [])
        read = [reader.read(part, desc, args.score_feature) for part, desc in parts]
        x_all, ce_all = np.concatenate([x for x, _ in read]), np.concatenate([ce for _, ce in read])
        # 4. train: C and the decision threshold chosen on the fit queries only (query-grouped cross-validation),
        # then the fit on all fit queries
        fitted = fit(x_all, ce_all, labelled, c_grid, args, train_start)
        # 5. save coef/intercept (safetensors + JSON) through ClsLrRanker
        ranker = save_ranker(fitted, labelled.y_fit, args, inputs.base_path, output, reader)
        # 6. evaluate: classification reports on the fit (in-sample) and held-out queries; then BM25's top candidates
        # of SciFact's test queries re-ranked by BM25, the cross-encoder and CLS-LR (one shared pass)
        reports = classification_reports(fitted, x_all, ce_all, labelled, output)
        test = rerank_candidates(bm25, inputs, ranker, reader, args)
        retrieval = rerank_test(bm25, test, inputs.test_qrels, args.rerank_depth)
        # 7. the saved ranker, loaded back, and a CrossEncoderReranker score like the one-pass scores
        verification = verify_ranker(output, args, reader.cross_encoder, inputs.corpus, test, reader.device)
        # 8. metrics.json
        metrics = metrics_record(args, inputs, labelled, fitted, reports, test, retrieval, reader)
        metrics["extra"]["verification"] = verification
        # the whole run up to writing metrics.json (data loading, both feature passes, reports, verification)
        metrics["extra"]["total_wall_time_seconds"] = round(time.perf_counter() - total_start, 1)
        path = write_metrics(output, metrics)
        print(f"wrote {path} (total {metrics['extra']['total_wall_time_seconds']:.1f} s)")
    return metrics


def save_ranker(
    fitted: Fitted, y_fit: np.ndarray, args: ClsLrArgs, base_path: str, output: Path, reader: Reader
) -> ClsLrRanker:
    """The ranker (coef/intercept + what it was chosen on) saved through ClsLrRanker: safetensors + JSON."""
    fitted.base_ref = _base_reference(args.base_model, base_path, output, args.bundle_base)
    ranker = ClsLrRanker(
        base_path,
        fitted.coef,
        fitted.intercept,
        layer=args.layer,
        max_length=reader.max_length,
        device=reader.device,
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
    ranker.save(output)
    print(f"saved {output / 'cls_lr.safetensors'} and cls_lr_config.json (base_model {fitted.base_ref!r})")
    return ranker


def metrics_record(
    args: ClsLrArgs,
    inputs: Inputs,
    labelled: Labelled,
    fitted: Fitted,
    reports: dict,
    test: RerankSet,
    retrieval: dict,
    reader: Reader,
) -> dict:
    """metrics.json (docs/reference/formats.md's contract); CLS-LR's "training" block in the Trainer scripts' keys,
    its "extra" every report and threshold, the C search and the feature passes' timings."""
    timings = reader.timings
    extraction_pairs = sum(t["pairs"] for t in timings.values() if not t["cached"])
    extraction_seconds = sum(t["seconds"] for t in timings.values() if not t["cached"])
    ndcg = {name: agg["nDCG@10"] for name, agg in retrieval.items()}
    y_fit, y_report = labelled.y_fit, labelled.y_report
    general_pairs_count = sum(int(g.get("pairs", 0)) for g in labelled.general.values())
    heldout_tuned = reports["heldout_queries@tuned"]["report"]
    ce_heldout = reports["cross_encoder_heldout@tuned"]
    heldout_how = (
        "train queries the cross-encoder never trained on"
        if args.heldout_queries == "base-unseen"
        else f"a seeded {args.heldout_fraction:g} of the train queries"
    )
    f1_config = (
        f"held-out SciFact train queries ({heldout_how}) with ≥ 3 BM25 hard negatives per positive "
        f"({len(labelled.eligible)} queries, {len(y_report)} pairs); threshold chosen on fit queries"
    )
    seconds, iterations = fitted.seconds, int(fitted.sk_model[-1].n_iter_[0])
    heldout = ("scifact", "train (held-out queries)", "classification")
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
            dataset_entry("scifact", "test", "eval", inputs.scifact, len(test.pairs)),
            *general_entries(args.data_dir, labelled.general),
        ],
        "config": asdict(args),
        "training": {
            "steps": iterations,
            "epochs": float(iterations),
            "train_examples": len(y_fit),
            "batch_size": args.batch_size,
            "learning_rate": None,
            "wall_time_seconds": round(seconds, 1),
            "examples_per_second": round(len(y_fit) / seconds, 2) if seconds > 0 else None,
            "device": reader.device,
            "hardware": machine_info()["hardware"],
            "final_loss": fitted.final_loss,
            "seed": args.seed,
        },
        "evaluations": [
            evaluation_row(
                *heldout,
                "F1 (relevant class)",
                ce_heldout["report"]["relevant"]["f1-score"],
                heldout_tuned["relevant"]["f1-score"],
                config=f1_config + "; before = the cross-encoder's own score, thresholded the same way",
            ),
            evaluation_row(
                *heldout,
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
                config=f"re-rank BM25 top-{args.rerank_depth}, {len(test.qids)} test queries; before = BM25 alone",
            ),
        ],
        "extra": {
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
                setting_name(*k): round(v[CV_METRICS[args.cv_metric]], 4) for k, v in fitted.cv.items()
            },
            "c_selection_metric": args.cv_metric,
            "c_selection_both": {
                setting_name(*k): {
                    "average_precision": round(v["average_precision"], 4),
                    "ndcg@10": round(v["ndcg"], 4),
                }
                for k, v in fitted.cv.items()
            },
            "chosen_C": fitted.best_c,
            "chosen_score_emphasis": fitted.emphasis,
            "features": "[CLS] + the cross-encoder's score" if args.score_feature else "[CLS]",
            "general": labelled.general,
            "queries": {
                "fit": len(inputs.fit_qids),
                "heldout": len(inputs.heldout_qids),
                "heldout_reported": len(labelled.eligible),
                "test": len(inputs.test_qids),
            },
            "heldout_queries": heldout_how,
            "reranking": {name: {k: round(v, 4) for k, v in agg.items()} for name, agg in retrieval.items()},
            "pr_curve": "pr_curve.png",
            "max_length": reader.max_length,
            "layer": args.layer,
            "base_model_path": inputs.base_path,
            "base_model_reference": fitted.base_ref,
            "feature_extraction": timings,
            "feature_extraction_pairs_per_second": round(extraction_pairs / extraction_seconds, 2)
            if extraction_seconds > 0
            else None,
            "notes": "CLS-LR has no gradient training: 'steps'/'epochs' are L-BFGS iterations (each one full pass "
            "over the fit features), learning_rate is null, batch_size is the feature-extraction batch. "
            "wall_time_seconds covers feature extraction of all train pairs + C search + fit; "
            "examples_per_second = fit pairs / that time.",
        },
    }


# the base cross-encoder's run records, left out when --bundle-base copies its model into the ranker folder
NOT_BUNDLED = ("README.md", "metrics.json", "train.log", "training_log.jsonl")


def _base_reference(given: str, base_path: str, output: Path, bundle: bool) -> str:
    """What cls_lr_config.json names as base_model: '.' when bundled, a path relative to the ranker folder for
    a local cross-encoder (ClsLrRanker.load resolves it there), else the Hub id as given."""
    if bundle:
        for item in Path(base_path).iterdir():
            if item.name in NOT_BUNDLED or item.name.startswith("checkpoint"):
                continue
            if item.is_dir():
                shutil.copytree(item, output / item.name, dirs_exist_ok=True)
            else:
                shutil.copy2(item, output / item.name)
        return "."
    if Path(given).expanduser().exists():
        return os.path.relpath(Path(base_path).resolve(), output.resolve())
    return given


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClsLrArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
