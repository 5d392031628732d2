"""The pieces of training/train_cls_lr.py: labelled pairs, the one cross-encoder pass (each pair's [CLS] and score,
cached as .npy), the query-grouped cross-validated logistic regression, and the checks of the saved ranker."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ctxir import kinds
from ctxir.checks import check_choice
from ctxir.encoders import EmbeddingCache
from ctxir.encoders.models import pick_device, set_threads
from ctxir.encoders.reranker_heads import cls_lr_logit
from ctxir.evaluation import evaluate_run
from ctxir.rerank import ClsLrRanker, CrossEncoderReranker, head_scores
from ctxir.types import Corpus, CtxirError, Hit, Qrels, Queries, doc_text, run_from_hits
from training.common import SQUAD_DEV_QUERIES, check_not_empty, take, untrained_questions

Pair = tuple[str, str]
CV_METRICS = {"average-precision": "average_precision", "ndcg": "ndcg"}  # --cv-metric → choose_c's key


def check_args(args) -> tuple[list[float], list[float]]:
    """The argument checks, before anything is loaded → the --c-grid and --score-emphasis values."""
    lows = {"negatives_per_positive": 1, "rerank_depth": 1, "batch_size": 1, "cv_folds": 2, "max_length": 0}
    for name, low in lows.items():
        if getattr(args, name) < low:
            raise CtxirError(f"--{name.replace('_', '-')} must be ≥ {low}, got {getattr(args, name)!r}")
    if args.negative_depth < args.negatives_per_positive:
        raise CtxirError(
            f"--negative-depth ({args.negative_depth!r}) must be ≥ --negatives-per-positive "
            f"({args.negatives_per_positive!r}): negatives are drawn from that many BM25 hits"
        )
    if not 0 < args.heldout_fraction < 1:
        raise CtxirError(f"--heldout-fraction must be between 0 and 1, got {args.heldout_fraction!r}")
    for name in ("max_samples", "max_test_queries", "general_queries"):
        if getattr(args, name) < -1 or getattr(args, name) == 0:
            raise CtxirError(
                f"--{name.replace('_', '-')} must be -1 (all) or ≥ 1, got {getattr(args, name)!r}"
            )
    check_choice(args.heldout_queries, "--heldout-queries", ("random", "base-unseen"))
    check_choice(args.cv_metric, "--cv-metric", CV_METRICS)
    c_grid = positive_grid("--c-grid", args.c_grid, "0.01,0.1,1", "C")
    pick_device(args.device)
    set_threads(args.torch_threads)
    emphases = positive_grid("--score-emphasis", args.score_emphasis, "1,10,100", "value")
    return c_grid, emphases if args.score_feature else [1.0]


def positive_grid(name: str, value: str, example: str, what: str) -> list[float]:
    """A comma list of numbers > 0, or a CtxirError naming the flag ``name``."""
    try:
        grid = [float(v) for v in value.split(",") if v.strip()]
    except ValueError as err:
        raise CtxirError(f"{name} {value!r} must be comma-separated numbers like '{example}'") from err
    if not grid or any(v <= 0 for v in grid):
        raise CtxirError(f"{name} {value!r} must list at least one {what} > 0")
    return grid


def base_reference(given: str, base_path: str, output: Path) -> str:
    """cls_lr_config.json's base_model: a local cross-encoder relative to ``output``, else the Hub id."""
    if Path(given).expanduser().exists():
        return os.path.relpath(Path(base_path).resolve(), output.resolve())
    return given


@dataclass
class PairSet:
    """Labelled (query, document) pairs; ``groups`` is the query id of each pair (for splitting by query)."""

    pairs: list[Pair]
    labels: np.ndarray  # (pairs,) 1 = relevant
    groups: np.ndarray  # (pairs,) query id

    def __len__(self) -> int:
        return len(self.pairs)

    def rows(self, qids: set[str]) -> np.ndarray:
        """Indices of the pairs of ``qids``."""
        return np.array([i for i, g in enumerate(self.groups) if g in qids], dtype=np.int64)

    @staticmethod
    def concat(parts: Sequence[PairSet]) -> PairSet:
        return PairSet(
            [pair for part in parts for pair in part.pairs],
            np.concatenate([part.labels for part in parts]),
            np.concatenate([part.groups for part in parts]),
        )


def build_pairs(
    corpus: Corpus, queries: Queries, qrels: Qrels, bm25, negatives_per_positive: int, depth: int
) -> tuple[PairSet, dict[str, float]]:
    """Each query's relevant documents, then its BM25 hard negatives; also {qid: negatives per positive}."""
    qids = [q for q in queries if any(g > 0 and d in corpus for d, g in qrels.get(q, {}).items())]
    hits = bm25.search({q: queries[q] for q in qids}, depth) if qids else {}
    pairs, labels, groups, ratio = [], [], [], {}
    for qid in qids:
        positives = [d for d, g in qrels[qid].items() if g > 0 and d in corpus]
        # judged non-relevant documents (grade 0) are no hard negatives BM25 found
        negatives = [h.doc_id for h in hits[qid] if h.doc_id not in qrels[qid]]
        negatives = negatives[: negatives_per_positive * len(positives)]
        ratio[qid] = len(negatives) / len(positives)
        pairs += [(queries[qid], doc_text(corpus[d])) for d in positives + negatives]
        labels += [1] * len(positives) + [0] * len(negatives)
        groups += [qid] * (len(positives) + len(negatives))
    return PairSet(pairs, np.array(labels, dtype=np.int64), np.array(groups, dtype=object)), ratio


def split_queries(
    qids: Sequence[str], unseen: set[str] | None, heldout_fraction: float, seed: int
) -> tuple[list[str], list[str]]:
    """(fit, held-out) queries: those of ``unseen`` held out (--heldout-queries base-unseen), else a seeded share."""
    from sklearn.model_selection import train_test_split

    if unseen is not None:
        fit, heldout = [q for q in qids if q not in unseen], [q for q in qids if q in unseen]
        if not fit or not heldout:
            raise CtxirError(
                f"--heldout-queries base-unseen leaves {len(fit)} fit and {len(heldout)} "
                "held-out queries: both must be non-empty (raise --max-samples)"
            )
        return fit, heldout
    if len(qids) < 2:
        raise CtxirError(
            f"need at least 2 train queries with a relevant document to split into fit and held-out "
            f"parts, got {len(qids)}: raise --max-samples or check qrels/train.tsv"
        )
    fit, heldout = train_test_split(sorted(qids), test_size=heldout_fraction, random_state=seed)
    return list(fit), list(heldout)


def base_unseen_queries(base_path: str, all_qids: Sequence[str]) -> set[str]:
    """The SciFact train queries the cross-encoder never trained on (its ``extra.train_query_ids``)."""
    path = Path(base_path) / "metrics.json"
    if not path.is_file():
        raise CtxirError(
            f"--heldout-queries base-unseen needs {str(path)!r} (written by "
            "training/train_cross_encoder.py) to know which queries the cross-encoder trained on; "
            "use --heldout-queries random for other cross-encoders"
        )
    metrics = json.loads(path.read_text())
    config, extra = metrics.get("config", {}), metrics.get("extra", {})
    if metrics.get("model_type") != kinds.CROSS_ENCODER or config.get("task") != "scifact":
        raise CtxirError(
            f"{str(path)!r} is not a SciFact cross-encoder's metrics.json (model_type "
            f"{metrics.get('model_type')!r}, task {config.get('task')!r}): use --heldout-queries random"
        )
    if "train_query_ids" not in extra:
        raise CtxirError(
            f"{str(path)!r} names no extra.train_query_ids (the queries the cross-encoder trained on): train it again "
            "with training/train_cross_encoder.py, which records them, or use --heldout-queries random"
        )
    return set(all_qids) - set(extra["train_query_ids"])


def general_pairs(
    data_dir, sources, per_source, base_config: dict, seed, negatives_per_positive, depth, base_model: str
) -> tuple[PairSet, dict]:
    """--general's pairs (ids ``<source>:``) of questions the cross-encoder never saw, and their record."""
    from ctxir.data.general import load_general
    from ctxir.retrieval import BM25Retriever
    from training.fusion_choice import squad_dev

    parts, record = [], {}
    for source, data in load_general(data_dir, sources).items():
        unseen = untrained_questions(data, source, base_config, seed)
        if source == "squad":  # the fused mode's dev questions (evaluate_reranker.py --fusion-dev squad)
            dev = squad_dev(base_config, data_dir, SQUAD_DEV_QUERIES)[1]
            unseen = [q for q in unseen if f"squad:{q}" not in dev]
        chosen = take(unseen, per_source, seed)
        check_not_empty(
            len(chosen),
            f"--general {source}: every question of it was seen by the cross-encoder {base_model!r}",
            f"drop {source!r} from --general",
        )
        queries = {q: data.queries[q] for q in chosen}
        bm25 = BM25Retriever(data.corpus)
        pairs, _ = build_pairs(data.corpus, queries, data.qrels, bm25, negatives_per_positive, depth)
        pairs.groups = np.array([f"{source}:{g}" for g in pairs.groups], dtype=object)
        parts.append(pairs)
        record[source] = {"queries": len(chosen), "unseen_by_base": len(unseen), "pairs": len(pairs)}
        record[source].update(positives=int(pairs.labels.sum()), passages=len(data.corpus))
        print(f"general {source}: {len(chosen)} of {len(unseen)} unseen questions, {len(pairs)} pairs")
    return PairSet.concat(parts), record


@torch.no_grad()
def cross_encoder_pass(
    cross_encoder, pairs: Sequence[Pair], layer: int, max_length: int, batch_size: int, desc: str = "features"
) -> tuple[np.ndarray, np.ndarray]:
    """One forward pass per pair → ([CLS] of ``layer`` (N, hidden), the cross-encoder's own logit (N,))."""
    model, tokenizer = cross_encoder.model.eval(), cross_encoder.tokenizer
    cls = np.zeros((len(pairs), model.config.hidden_size), np.float32)  # (N, hidden)
    logits = np.zeros(len(pairs), np.float32)
    # longest first, batched by length: padding is wasted compute on CPU; results go back to input order
    order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
    for start in tqdm(range(0, len(order), batch_size), desc=desc, mininterval=10, disable=len(order) < 200):
        idx = order[start : start + batch_size]
        enc = tokenizer(
            *([pairs[i][side] for i in idx] for side in (0, 1)),
            padding=True,
            truncation="longest_first",
            max_length=max_length,
            return_tensors="pt",
        ).to(next(model.parameters()).device)
        out = model(**enc, output_hidden_states=True)
        cls[idx] = out.hidden_states[layer][:, 0].float().cpu().numpy()  # (batch, tokens, hidden) → [CLS]
        if (
            getattr(out, "logits", None) is not None
        ):  # a sequence-classification head: last label = "relevant"
            scores = out.logits[:, -1]
        else:  # a modular head (mean pooling → Dense, segment-cosine): the cross-encoder's own modules
            scores = head_scores(list(cross_encoder)[1:], dict(enc), out.last_hidden_state)  # (batch,)
        logits[idx] = scores.float().cpu().numpy()
    return cls, logits


class FeatureCache:
    """Pairs' [CLS] and logit as one .npy in an ``EmbeddingCache``; ``timings``: each read's seconds."""

    def __init__(self, root: str, model_key: str, layer: int, max_length: int):
        self.store = EmbeddingCache(Path(root).expanduser()) if root else None
        self.prefix, self.layer, self.max_length = f"{model_key}:{layer}:{max_length}", layer, max_length
        self.timings: dict[str, dict] = {}

    def key(self, pairs: Sequence[Pair]) -> str:
        digest = hashlib.sha256(self.prefix.encode())
        for q, d in pairs:
            digest.update(q.encode() + b"\x00" + d.encode() + b"\x01")
        return digest.hexdigest()[:32]

    def read(self, cross_encoder, pairs: Sequence[Pair], desc: str, batch_size: int, score_feature: bool):
        """(features: [CLS] (+ the score as last column), logits (N,)), from the cache or one pass."""
        start, key = time.perf_counter(), self.key(pairs)
        found = self.store.get(key) if self.store is not None else None  # (N, hidden + 1): [CLS], logit
        self.timings[desc] = {"pairs": len(pairs), "cached": found is not None}
        if found is None:
            cls, logits = cross_encoder_pass(
                cross_encoder, pairs, self.layer, self.max_length, batch_size, desc
            )
            found = np.concatenate([cls, logits[:, None]], 1)
            if self.store is not None:
                self.store.put(key, found)
        self.timings[desc]["seconds"] = seconds = round(time.perf_counter() - start, 1)
        print(f"{desc}: {len(pairs)} pairs in {seconds} s{' (feature cache)' * self.timings[desc]['cached']}")
        return (found if score_feature else found[:, :-1]), found[:, -1]


def fit_logistic(
    x: np.ndarray, y: np.ndarray, c: float, class_weight: str | None, seed: int, emphasis: float = 1.0
):
    """Standardised LogisticRegression → (coef (features,), intercept) on the *raw* features, the model."""
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


def per_query_ndcg(y: np.ndarray, scores: np.ndarray, groups: np.ndarray, k: int = 10) -> float:
    """The mean over queries (``groups``) with a relevant pair of nDCG@k of their own pairs ranked by ``scores``."""
    qrels, run = {}, {}
    for i, (label, score, group) in enumerate(zip(y, scores, groups, strict=True)):
        run.setdefault(str(group), {})[str(i)] = float(score)
        if label:
            qrels.setdefault(str(group), {})[str(i)] = 1
    run = {q: docs for q, docs in run.items() if q in qrels}
    return float(evaluate_run(qrels, run, [k]).aggregate[f"nDCG@{k}"])


def setting_name(c: float, emphasis: float) -> str:
    return f"C={c:g}" if emphasis == 1 else f"C={c:g}, score×{emphasis:g}"


def choose_c(
    x, y, groups, c_grid, emphases, class_weight: str | None, folds: int, seed: int, metric: str
) -> tuple[tuple[float, float], dict]:
    """The (C, emphasis) whose query-grouped out-of-fold scores have the best ``metric``, and every one's."""
    from sklearn.metrics import average_precision_score
    from sklearn.model_selection import GroupKFold

    folds = min(folds, len(set(groups)))
    if folds < 2:
        raise CtxirError(
            f"need at least 2 fit queries for cross-validation, got {len(set(groups))}: raise --max-samples"
        )
    cv = {}
    for c in c_grid:
        for emphasis in emphases:
            oof = np.zeros(len(y), np.float64)  # each pair's score from a model that never saw its query
            for train, val in GroupKFold(n_splits=folds).split(x, y, groups):
                if len(set(y[train])) < 2:
                    raise CtxirError(
                        "a cross-validation fold has only one class: too few fit queries — raise --max-samples "
                        "or lower --cv-folds"
                    )
                coef, intercept, _ = fit_logistic(x[train], y[train], c, class_weight, seed, emphasis)
                oof[val] = cls_lr_logit(x[val], coef, intercept)
            ap, ndcg = float(average_precision_score(y, oof)), per_query_ndcg(y, oof, groups)
            cv[c, emphasis] = {"average_precision": ap, "ndcg": ndcg, "oof": oof}
            print(f"{setting_name(c, emphasis)}: out-of-fold AP {ap:.4f}, per-query nDCG@10 {ndcg:.4f}")
    return max(cv, key=lambda setting: cv[setting][metric]), cv


def best_f1_threshold(y: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """The score threshold maximising F1 of the positive class on (y, scores): (threshold, F1)."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(y, scores)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    best = int(np.argmax(f1))
    return float(thresholds[best]), float(f1[best])


def classification(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict:
    """sklearn's classification_report at ``score ≥ threshold`` (per class + accuracy), and its text."""
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


def rerank_test(candidates: dict, scores: dict[str, np.ndarray], qrels: Qrels, depth: int) -> dict:
    """BM25's ``candidates`` re-ranked by each of ``scores`` ({name: (pairs,)}) → {name: aggregate}."""
    runs, qrels = {kinds.BM25: run_from_hits(candidates)}, {q: qrels[q] for q in candidates}
    for name, values in scores.items():
        flat = iter(values)
        scored = {q: [Hit(h.doc_id, float(next(flat))) for h in hits] for q, hits in candidates.items()}
        runs[name] = run_from_hits(
            {q: sorted(h, key=lambda h: (-h.score, h.doc_id)) for q, h in scored.items()}
        )
    cutoffs = sorted({1, 3, 5, 10, depth, 100})
    retrieval = {name: evaluate_run(qrels, r, cutoffs).aggregate for name, r in runs.items()}
    for name, agg in retrieval.items():
        print(f"{name:>14}: nDCG@10 {agg['nDCG@10']:.4f}  Recall@{depth} {agg[f'Recall@{depth}']:.4f}")
    return retrieval


def verify_ranker(
    folder: Path, cross_encoder, pairs: list[Pair], scores: dict, queries: int, batch_size: int, device: str
) -> dict:
    """The saved ranker and the cross-encoder score the first ``queries`` test queries as the one pass did."""
    rows: dict[str, list[int]] = {}
    for i, (query, _) in enumerate(pairs):  # in test order
        rows.setdefault(query, []).append(i)
    rows = dict(list(rows.items())[: max(queries, 0)])
    if not rows:
        return {"queries": 0}
    loaded = ClsLrRanker.load(folder, device=device, batch_size=batch_size)
    reference = CrossEncoderReranker(cross_encoder, batch_size=batch_size)
    # the cross-encoder's own activation: sigmoid for a classifier head, identity for ctxir's segment-cosine head
    activation = getattr(cross_encoder, "activation_fn", None) or torch.nn.Sigmoid()
    cls_diff = ce_diff = 0.0
    for query, idx in rows.items():
        docs = [pairs[i][1] for i in idx]
        cls_diff = max(
            cls_diff, float(np.abs(loaded.score_pairs(query, docs) - scores[kinds.CLS_LR][idx]).max())
        )
        expected = activation(torch.from_numpy(scores[kinds.CROSS_ENCODER][idx])).numpy()
        ce_diff = max(ce_diff, float(np.abs(reference.score_pairs(query, docs) - expected).max()))
    print(
        f"verification on {len(rows)} test queries: max |Δscore| CLS-LR {cls_diff:.2e}, cross-encoder {ce_diff:.2e}"
    )
    if cls_diff > 1e-3 or ce_diff > 1e-3:
        raise CtxirError(
            f"the loaded ranker or the cross-encoder disagrees with the one-pass scores (CLS-LR "
            f"{cls_diff:.2e}, cross-encoder {ce_diff:.2e}): the reported numbers would be wrong"
        )
    return {"queries": len(rows), "cls_lr_max_abs_diff": cls_diff, "cross_encoder_max_abs_prob_diff": ce_diff}
