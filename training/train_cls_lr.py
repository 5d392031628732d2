"""Train the CLS-LR ranker: logistic regression on a cross-encoder's [CLS] vector of ``[CLS] query [SEP] document [SEP]``.

Positives: the qrels' documents; negatives: BM25's best others; C and the threshold: query-grouped cross-validation.

    python -m training.train_cls_lr --base-model outputs/cross-encoder-scifact --output-dir outputs/cls-lr
Writes to --output-dir: cls_lr.safetensors, cls_lr_config.json, metrics.json, train.log.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/train_cls_lr.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from scipy.special import expit
from sklearn.metrics import log_loss

from ctxir import kinds
from ctxir.cli import flag
from ctxir.data import load_beir
from ctxir.encoders import weights_fingerprint
from ctxir.encoders.lengths import set_max_length
from ctxir.encoders.models import (
    DEFAULT_BI_ENCODER,
    load_cross_encoder,
    pick_device,
    resolve_model,
)
from ctxir.encoders.reranker_heads import cls_lr_logit
from ctxir.files import machine_info, read_json
from ctxir.publish.metrics_file import write_metrics
from ctxir.rerank import ClsLrRanker
from ctxir.retrieval import BM25Retriever
from ctxir.types import doc_text
from training import cls_lr, common
from training.common import RunArgs, check_not_empty, cli_main, data_folder, take, tee_output


@dataclass
class ClsLrArgs(RunArgs):
    base_model: str = flag(DEFAULT_BI_ENCODER, "the cross-encoder whose [CLS] is read (a folder or Hub id)")
    output_dir: str = flag("outputs/cls-lr", "ranker folder to write")
    layer: int = flag(-1, "hidden layer of the [CLS] vector (0 = embeddings, -1 = last)")
    max_length: int = flag(0, "tokens per pair (0 = the cross-encoder's own max_seq_length)")
    negatives_per_positive: int = flag(4, "hard negatives (BM25's best non-relevant documents) per positive")
    negative_depth: int = flag(100, "BM25 depth the hard negatives are drawn from")
    heldout_queries: str = flag("random", "held-out queries: random (--heldout-fraction) or base-unseen")
    heldout_fraction: float = flag(0.2, "share of the train queries held out for the classification report")
    max_samples: int = flag(-1, "use a seeded subset of this many train queries (-1 = all)")
    c_grid: str = flag("0.0001,0.0003,0.001,0.003,0.01,0.1,1,10", "LogisticRegression C values tried")
    cv_metric: str = flag("average-precision", "cross-validation maximises: average-precision or ndcg")
    cv_folds: int = flag(5, "query-grouped folds on the fit queries for C and threshold")
    rerank_depth: int = flag(100, "BM25 candidates re-ranked per SciFact test query")
    max_test_queries: int = flag(-1, "re-rank a seeded subset of test queries; -1 = all")
    verify_queries: int = flag(2, "test queries re-ranked again by the saved ranker, to check they match")
    score_feature: bool = flag(False, "also feed the cross-encoder's own score to the regression")
    score_emphasis: str = flag("1,10,100", "--score-feature: grid of how much less the score is penalised")
    general: str = flag("", "also fit on <data-dir>/general/ pairs: a comma list of squad, wikiqa, msmarco")
    general_queries: int = flag(300, "--general: questions drawn per source, seeded (-1 = all unseen)")
    batch_size: int = flag(16, "pairs per forward pass")
    cache_dir: str = flag("~/.cache/ctxir/cls-lr", "[CLS] feature cache ('' = no cache)")
    model_name: str = flag("ctxir-cls-lr-scifact", "short name for metrics.json")


def run(args: ClsLrArgs) -> dict:
    total_start = time.perf_counter()
    # 0. check the arguments and the data before anything is loaded; split the train queries into fit and held-out
    c_grid, emphases = cls_lr.check_args(args)
    scifact = data_folder(args.data_dir, "scifact")
    corpus, train_queries, train_qrels = load_beir(scifact, "train")
    _, test_queries, test_qrels = load_beir(scifact, "test")
    train_qids = [q for q in train_queries if any(g > 0 and d in corpus for d, g in train_qrels[q].items())]
    check_not_empty(
        len(train_qids),
        f"no query in {scifact / 'qrels' / 'train.tsv'} has a relevant document (grade > 0) that is in corpus.jsonl",
        "check that the qrels belong to this corpus",
    )
    base_path = resolve_model(args.base_model)
    base_config = read_json(Path(base_path) / "metrics.json").get("config", {})
    base_unseen = args.heldout_queries == "base-unseen"
    qids = take(train_qids, args.max_samples, args.seed)
    unseen = cls_lr.base_unseen_queries(base_path, qids) if base_unseen else None
    fit_qids, heldout_qids = cls_lr.split_queries(qids, unseen, args.heldout_fraction, args.seed)
    test_qids = take(sorted(test_queries), args.max_test_queries, args.seed)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    with tee_output(output / "train.log"):
        print(f"=== train_cls_lr {time.strftime('%F %T %Z')} ===\nconfig: {json.dumps(asdict(args))}")

        # 1. load the cross-encoder whose [CLS] is read (a plain body gets a fresh head, seeded)
        torch.manual_seed(args.seed)
        device = pick_device(args.device)
        cross_encoder = load_cross_encoder(base_path, device)
        max_length = set_max_length(cross_encoder, args.max_length, name="--max-length")  # the library's rule
        fingerprint = weights_fingerprint(cross_encoder)
        features = cls_lr.FeatureCache(args.cache_dir, fingerprint, args.layer, max_length)
        print(f"cross-encoder {args.base_model!r} on {device}, max_length {max_length}, layer {args.layer}")

        # 2. build the pairs: each fit and held-out query's relevant documents and BM25's best non-relevant ones
        bm25 = BM25Retriever(corpus)
        queries = {q: train_queries[q] for q in fit_qids + heldout_qids}
        pairs, ratio = cls_lr.build_pairs(
            corpus, queries, train_qrels, bm25, args.negatives_per_positive, args.negative_depth
        )
        fit_rows = pairs.rows(set(fit_qids))
        y = pairs.labels[fit_rows]
        check_not_empty(int(y.sum()), "the fit queries have no relevant pairs", "raise --max-samples")
        hint = "raise --negative-depth"
        check_not_empty(int((1 - y).sum()), "BM25 found no non-relevant document for the fit queries", hint)
        eligible = {q for q in heldout_qids if ratio.get(q, 0) >= 3}  # reported: ≥ 3 negatives per positive
        report_rows = pairs.rows(eligible)
        y_report = pairs.labels[report_rows]
        parts, general = [(pairs.pairs, "train pairs")], {}
        if args.general:  # all fit on
            sources = [s.strip() for s in args.general.split(",") if s.strip()]
            extra, general = cls_lr.general_pairs(
                *(args.data_dir, sources, args.general_queries, base_config, args.seed),
                *(args.negatives_per_positive, args.negative_depth, args.base_model),
            )
            fit_rows = np.concatenate([fit_rows, len(pairs) + np.arange(len(extra))])
            parts.append((extra.pairs, "general pairs"))
            pairs = cls_lr.PairSet.concat([pairs, extra])
        check_not_empty(
            len(report_rows),
            f"none of the {len(heldout_qids)} held-out queries has ≥ 3 hard negatives per positive",
            "raise --negatives-per-positive / --negative-depth or --max-samples",
        )
        print(
            f"queries: {len(fit_qids)} fit, {len(heldout_qids)} held-out ({len(eligible)} with ≥ 3 negatives per "
            f"positive), {len(test_qids)} test; pairs: {len(y)} fit ({int(y.sum())} relevant), "
            f"{len(report_rows)} held-out ({int(y_report.sum())} relevant)"
        )

        # 3. embed: [CLS] (+ the cross-encoder's own score) of every pair, one pass (or the feature cache)
        fit_start = time.perf_counter()
        read = [
            features.read(cross_encoder, p, desc, args.batch_size, args.score_feature) for p, desc in parts
        ]
        x, ce = np.concatenate([x for x, _ in read]), np.concatenate([ce for _, ce in read])

        # 4. fit: C (and the score's emphasis) and the F1-maximising threshold by query-grouped cross-validation on
        # the fit queries only, then the fit on all of them
        x_fit, y_fit, g_fit = x[fit_rows], pairs.labels[fit_rows], pairs.groups[fit_rows]
        metric = cls_lr.CV_METRICS[args.cv_metric]
        (best_c, emphasis), cv = cls_lr.choose_c(
            x_fit, y_fit, g_fit, c_grid, emphases, "balanced", args.cv_folds, args.seed, metric
        )
        threshold, oof_f1 = cls_lr.best_f1_threshold(y_fit, cv[best_c, emphasis]["oof"])
        ce_threshold = cls_lr.best_f1_threshold(y_fit, ce[fit_rows])[0]
        print(
            f"chosen {cls_lr.setting_name(best_c, emphasis)}; out-of-fold F1-maximising threshold {threshold:.4f} "
            f"(probability {expit(threshold):.4f}, F1 {oof_f1:.4f})"
        )
        coef, intercept, model = cls_lr.fit_logistic(x_fit, y_fit, best_c, "balanced", args.seed, emphasis)
        fit_seconds = time.perf_counter() - fit_start
        final_loss = float(log_loss(y_fit, model.predict_proba(x_fit)[:, 1], labels=[0, 1]))

        # 5. save the ranker (safetensors + JSON), base_model relative to it
        base_ref = cls_lr.base_reference(args.base_model, base_path, output)
        meta = {"C": best_c, "score_emphasis": emphasis, "class_weight": "balanced"}
        meta.update(
            standardised_then_folded=True, threshold=threshold, threshold_probability=float(expit(threshold))
        )
        meta.update(
            threshold_chosen_on="out-of-fold scores of the fit queries (max F1)", train_pairs=len(y_fit)
        )
        meta.update(train_positives=int(y_fit.sum()), base_model_given=args.base_model)
        settings = (args.layer, max_length, device, args.batch_size, meta, args.score_feature)
        ranker = ClsLrRanker(base_path, coef, intercept, *settings)
        ranker.base_model = base_ref
        ranker.save(output)
        print(f"saved {output / 'cls_lr.safetensors'} and cls_lr_config.json (base_model {base_ref!r})")

        # 6. classification reports on the fit (in-sample) and held-out queries, the cross-encoder's beside them
        s_fit, s_report = cls_lr_logit(x_fit, coef, intercept), cls_lr_logit(x[report_rows], coef, intercept)
        reports = {
            "train_queries@0.5": cls_lr.classification(y_fit, s_fit, 0.0),
            "train_queries@tuned": cls_lr.classification(y_fit, s_fit, threshold),
            "heldout_queries@0.5": cls_lr.classification(y_report, s_report, 0.0),
            "heldout_queries@tuned": cls_lr.classification(y_report, s_report, threshold),
            "cross_encoder_heldout@tuned": cls_lr.classification(y_report, ce[report_rows], ce_threshold),
        }
        for name, rep in reports.items():
            print(f"--- {name} (score ≥ {rep['threshold']:.4f}) ---\n{rep.pop('text')}")

        # 7. SciFact test's BM25 candidates re-ranked by the cross-encoder and CLS-LR (one shared pass)
        queries = {q: test_queries[q] for q in test_qids}
        candidates = bm25.search(queries, args.rerank_depth)
        test_pairs = [(queries[q], doc_text(corpus[h.doc_id])) for q in test_qids for h in candidates[q]]
        x_test, ce_test = features.read(
            cross_encoder, test_pairs, "test candidates", args.batch_size, args.score_feature
        )
        scores = {kinds.CROSS_ENCODER: ce_test, kinds.CLS_LR: ranker.score_features(x_test)}
        retrieval = cls_lr.rerank_test(candidates, scores, test_qrels, args.rerank_depth)
        check = cls_lr.verify_ranker(
            output, cross_encoder, test_pairs, scores, args.verify_queries, args.batch_size, device
        )

        # 8. metrics.json
        ndcg = {name: agg["nDCG@10"] for name, agg in retrieval.items()}
        heldout_how = f"a seeded {args.heldout_fraction:g} of the train queries"
        heldout_how = "train queries the cross-encoder never trained on" if base_unseen else heldout_how
        f1_config = (
            f"held-out SciFact train queries ({heldout_how}) with ≥ 3 BM25 hard negatives per positive "
            f"({len(eligible)} queries, {len(y_report)} pairs); threshold chosen on fit queries"
        )
        tuned, ce_tuned = (
            reports[k]["report"] for k in ("heldout_queries@tuned", "cross_encoder_heldout@tuned")
        )
        heldout = ("scifact", "train (held-out queries)", "classification")
        iterations = int(model[-1].n_iter_[0])
        metrics = {
            "model_type": kinds.CLS_LR,
            "model_name": args.model_name,
            "base_model": args.base_model,
            "objective": "LogisticRegression (scikit-learn) on the cross-encoder's [CLS] vector"
            + (" and its own score of the pair" if args.score_feature else ""),
            "datasets": [
                common.dataset_entry("scifact", "train", "train", scifact, len(y)),
                common.dataset_entry("scifact", "train (held-out queries)", "eval", scifact, len(y_report)),
                common.dataset_entry("scifact", "test", "eval", scifact, len(test_pairs)),
                *common.general_entries(args.data_dir, general),
            ],
            "config": asdict(args),
            # no gradient training: steps/epochs are L-BFGS iterations, batch_size the feature-extraction batch;
            # the wall time covers feature extraction of the train pairs, the C search and the fit
            "training": {
                "steps": iterations,
                "epochs": float(iterations),
                "train_examples": len(y_fit),
                "batch_size": args.batch_size,
                "learning_rate": None,
                "wall_time_seconds": round(fit_seconds, 1),
                "examples_per_second": round(len(y_fit) / fit_seconds, 2) if fit_seconds > 0 else None,
                "device": device,
                "hardware": machine_info()["hardware"],
                "final_loss": round(final_loss, 6),
                "seed": args.seed,
            },
            "evaluations": [
                common.evaluation_row(
                    *(*heldout, "F1 (relevant class)", ce_tuned["relevant"]["f1-score"]),
                    tuned["relevant"]["f1-score"],
                    config=f1_config + "; before = the cross-encoder's own score, thresholded the same way",
                ),
                common.evaluation_row(
                    *heldout, "accuracy", ce_tuned["accuracy"], tuned["accuracy"], config=f1_config
                ),
                common.evaluation_row(
                    *("scifact", "test", "reranking", "nDCG@10", ndcg[kinds.BM25], ndcg[kinds.CLS_LR]),
                    anchor=round(ndcg[kinds.CROSS_ENCODER], 4),
                    anchor_name=f"cross-encoder {args.base_model} re-ranking the same candidates",
                    config=f"re-rank BM25 top-{args.rerank_depth}, {len(test_qids)} test queries; before = BM25 alone",
                ),
            ],
            "extra": {
                "classification_reports": reports,
                "c_selection": {
                    cls_lr.setting_name(*k): {m: round(v[m], 4) for m in cls_lr.CV_METRICS.values()}
                    for k, v in cv.items()
                },
                "chosen_C": best_c,
                "features": "[CLS] + the cross-encoder's score" if args.score_feature else "[CLS]",
                "general": general,
                "queries": {
                    "fit": len(fit_qids),
                    "heldout": len(heldout_qids),
                    "heldout_reported": len(eligible),
                    "test": len(test_qids),
                },
                "heldout_queries": heldout_how,
                "reranking": {
                    name: {k: round(v, 4) for k, v in agg.items()} for name, agg in retrieval.items()
                },
                "max_length": max_length,
                "feature_extraction": features.timings,
                "verification": check,
                "total_wall_time_seconds": round(time.perf_counter() - total_start, 1),
            },
        }
        print(
            f"wrote {write_metrics(output, metrics)} (total {metrics['extra']['total_wall_time_seconds']:.1f} s)"
        )
    return metrics


def main(argv: list[str] | None = None) -> int:
    return cli_main(ClsLrArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
