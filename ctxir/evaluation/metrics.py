"""Retrieval (pytrec_eval; ties in listed order, a missing judged query scores 0) and similarity metrics."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pytrec_eval

from ctxir.types import CtxirError, Qrels, Run

# metric name accepted by evaluate_run -> (output label, pytrec_eval measure family)
METRICS: dict[str, tuple[str, str]] = {
    "ndcg": ("nDCG", "ndcg_cut"),
    "mrr": ("MRR", "recip_rank"),
    "map": ("MAP", "map_cut"),
    "recall": ("Recall", "recall"),
    "precision": ("P", "P"),
}


@dataclass(frozen=True)
class EvalResult:
    """Metrics for one run. ``aggregate`` is the mean of ``per_query`` over the evaluated queries.

    A judged query the run has no results for scores 0, counts in the mean and is listed in ``missing_queries``:

    >>> qrels = {"q1": {"d2": 1}, "q2": {"d9": 1}}
    >>> result = evaluate_run(qrels, {"q1": {"d1": 9.0, "d2": 7.5}}, k_values=(10,), metrics=("ndcg",))
    >>> round(result.per_query["q1"]["nDCG@10"], 4), result.per_query["q2"]["nDCG@10"]
    (0.6309, 0.0)
    >>> round(result.aggregate["nDCG@10"], 4), result.num_queries, result.missing_queries
    (0.3155, 2, ('q2',))
    """

    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]]
    num_queries: int
    missing_queries: tuple[str, ...] = field(default=())  # judged qids the run had no results for

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        return {**asdict(self), "missing_queries": list(self.missing_queries)}


def _check_k_values(k_values: Iterable[Any]) -> list[int]:
    ks = list(k_values)
    if not ks:
        raise CtxirError("k_values is empty; give at least one cutoff, e.g. (1, 10, 100).")
    for k in ks:  # bool is an int subclass; numpy integers are not int but are fine
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise CtxirError(f"invalid cutoff k={k!r}: every k must be an integer >= 1, e.g. (1, 10, 100).")
    return sorted({int(k) for k in ks})


def _check_metrics(metrics: Iterable[str]) -> list[str]:
    ms = [str(m).lower() for m in metrics]
    if not ms:
        raise CtxirError(f"no metrics requested; choose from {sorted(METRICS)}.")
    unknown = [m for m in ms if m not in METRICS]
    if unknown:
        raise CtxirError(f"unknown metric(s) {unknown}; valid metrics are {sorted(METRICS)}.")
    return list(dict.fromkeys(ms))


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _grade(qid: str, doc_id: str, value: Any) -> int:
    f = _float(value)
    if not math.isfinite(f) or not f.is_integer():
        raise CtxirError(
            f"qrels[{qid!r}][{doc_id!r}] = {value!r} is not an integer relevance grade "
            "(trec_eval needs 0, 1, 2, …)."
        )
    return int(f)


def _clean_qrels(qrels: Mapping[Any, Mapping[Any, Any]]) -> dict[str, dict[str, int]]:
    if not qrels:
        raise CtxirError("qrels is empty: there is nothing to evaluate against.")
    out = {
        str(qid): {str(d): _grade(str(qid), str(d), v) for d, v in docs.items()}
        for qid, docs in qrels.items()
        if docs
    }
    if not out:
        raise CtxirError("qrels has query ids but no judged documents: there is nothing to evaluate against.")
    return out


def _clean_run(run: Mapping[Any, Mapping[Any, Any]]) -> dict[str, dict[str, float]]:
    """Each query's documents scored n − rank, ties in listed order, so trec_eval meets no tie."""
    out: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        scored = {}
        for d, s in docs.items():
            if math.isnan(score := _float(s)):
                raise CtxirError(
                    f"run[{str(qid)!r}][{str(d)!r}] = {s!r}; a run needs a real-valued score per document."
                )
            scored[str(d)] = score
        ordered = sorted(scored, key=lambda doc: -scored[doc])
        out[str(qid)] = {doc: float(len(ordered) - i) for i, doc in enumerate(ordered)}
    return out


def _query_values(r: dict[str, float], ms: Sequence[str], ks: Sequence[int]) -> dict[str, float]:
    """One query's pytrec_eval result ``r`` under the output keys; MRR@k is rr where the rank 1/rr is within k."""
    values: dict[str, float] = {}
    for m in ms:
        name, family = METRICS[m]
        if m == "map":
            values["MAP"] = float(r["map"])
        for k in ks:
            if family == "recip_rank":
                rr = float(r["recip_rank"])
                values[f"{name}@{k}"] = rr if rr > 0 and round(1.0 / rr) <= k else 0.0
            else:
                values[f"{name}@{k}"] = float(r[f"{family}_{k}"])
    return values


def evaluate_run(
    qrels: Qrels,
    run: Run,
    k_values: Sequence[int] = (1, 3, 5, 10, 100),
    metrics: Sequence[str] = ("ndcg", "mrr", "map", "recall", "precision"),
) -> EvalResult:
    """Evaluate ``run`` against ``qrels`` with pytrec_eval.

    Keys: ``nDCG@k``, ``MRR@k``, ``MAP``, ``MAP@k``, ``Recall@k``, ``P@k``.

    >>> qrels = {"q1": {"d2": 1}}
    >>> run = {"q1": {"d1": 9.0, "d2": 7.5, "d3": 1.0}}
    >>> result = evaluate_run(qrels, run, k_values=(1, 10), metrics=("ndcg", "mrr", "recall"))
    >>> {name: round(value, 4) for name, value in result.aggregate.items()}
    {'nDCG@1': 0.0, 'nDCG@10': 0.6309, 'MRR@1': 0.0, 'MRR@10': 0.5, 'Recall@1': 0.0, 'Recall@10': 1.0}
    """
    ks, ms = _check_k_values(k_values), _check_metrics(metrics)
    clean_qrels, clean_run = _clean_qrels(qrels), _clean_run(run)

    judged = list(clean_qrels)
    if not set(judged) & set(clean_run):
        raise CtxirError(
            f"run and qrels share no query ids; run ids look like {sorted(clean_run)[:3]}, "
            f"qrels ids like {sorted(judged)[:3]} — did you load the right split?"
        )

    cuts = ",".join(map(str, ks))
    measures = {"recip_rank" if m == "mrr" else f"{METRICS[m][1]}.{cuts}" for m in ms} | ({"map"} & set(ms))
    evaluator = pytrec_eval.RelevanceEvaluator(clean_qrels, measures)
    raw = evaluator.evaluate({q: clean_run[q] for q in judged if q in clean_run})
    # pytrec_eval omits judged queries absent from the run; an empty result list is the same failure: all 0
    missing = [q for q in judged if q not in raw or not clean_run.get(q)]
    absent = set(missing)
    per_query = {q: _query_values(defaultdict(float) if q in absent else raw[q], ms, ks) for q in judged}
    labels = list(_query_values(defaultdict(float), ms, ks))
    n = len(per_query)
    aggregate = {label: float(sum(v[label] for v in per_query.values()) / n) for label in labels}
    return EvalResult(aggregate=aggregate, per_query=per_query, num_queries=n, missing_queries=tuple(missing))


def paired_changes(diff: np.ndarray) -> dict:
    """The mean of per-query differences ``diff`` (n,) and how many are wins (> 0), losses and ties."""
    return {
        "delta": float(diff.mean()),
        "wins": int((diff > 0).sum()),
        "losses": int((diff < 0).sum()),
        "ties": int((diff == 0).sum()),
    }


def paired_test(
    a: Mapping[str, Mapping[str, float]], b: Mapping[str, Mapping[str, float]], metric: str = "nDCG@10"
) -> dict:
    """Is system ``b`` better than ``a`` on the same queries? Two-sided paired t-test and Wilcoxon signed-rank.

    a, b: per-query values ``{qid: {metric: value}}`` (``EvalResult.per_query`` or a results JSON's "per_query").

    >>> a = {"q1": {"nDCG@10": 0.5}, "q2": {"nDCG@10": 0.25}, "q3": {"nDCG@10": 1.0}, "q4": {"nDCG@10": 0.0}}
    >>> b = {"q1": {"nDCG@10": 0.75}, "q2": {"nDCG@10": 0.5}, "q3": {"nDCG@10": 1.0}, "q4": {"nDCG@10": 0.5}}
    >>> test = paired_test(a, b)
    >>> test["delta"], test["wins"], test["losses"], test["ties"]
    (0.25, 3, 0, 1)
    >>> round(test["t_pvalue"], 3), round(test["wilcoxon_pvalue"], 3)  # 4 queries are too few to be sure
    (0.092, 0.25)
    """
    from scipy import stats

    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise CtxirError(f"a paired test needs ≥ 2 queries evaluated by both systems, got {len(common)}")
    x = np.array([a[q][metric] for q in common], dtype=np.float64)
    y = np.array([b[q][metric] for q in common], dtype=np.float64)
    diff = y - x
    changed = diff != 0
    return {
        "metric": metric,
        "n": len(common),
        "mean_a": float(x.mean()),
        "mean_b": float(y.mean()),
        **paired_changes(diff),
        # identical systems have no variance to test: p = 1
        "t_pvalue": float(stats.ttest_rel(y, x).pvalue) if changed.any() else 1.0,
        "wilcoxon_pvalue": float(stats.wilcoxon(diff[changed]).pvalue) if changed.any() else 1.0,
    }


def _as_array(x: Any, what: str) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, without importing torch here
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise CtxirError(f"{what} must be numeric: {e}") from None
    if np.isnan(arr).any():
        raise CtxirError(f"{what} contains NaN.")
    return arr


def sts_correlation(predicted: Sequence[float] | Any, gold: Sequence[float] | Any) -> dict[str, float]:
    """Spearman and Pearson correlation between predicted similarities and gold scores (STS-style).

    >>> predicted = [0.9, 0.4, 0.1, 0.6]  # cosine similarities
    >>> gold = [5.0, 2.0, 0.5, 3.5]  # human scores 0-5: same order, so Spearman is 1
    >>> {name: round(value, 4) for name, value in sts_correlation(predicted, gold).items()}
    {'spearman': 1.0, 'pearson': 0.9971, 'n': 4}
    """
    from scipy import stats

    p, g = _as_array(predicted, "predicted").ravel(), _as_array(gold, "gold").ravel()
    if p.shape != g.shape:
        raise CtxirError(
            f"predicted has {p.size} values but gold has {g.size}; they must pair up one to one."
        )
    if p.size < 2:
        raise CtxirError(f"need at least 2 (predicted, gold) pairs for a correlation, got {p.size}.")
    for name, arr in (("predicted", p), ("gold", g)):
        if np.all(arr == arr[0]):
            raise CtxirError(f"{name} is constant ({arr[0]!r}); correlation is undefined.")
    spearman, pearson = stats.spearmanr(p, g).statistic, stats.pearsonr(p, g).statistic
    return {"spearman": float(spearman), "pearson": float(pearson), "n": int(p.size)}


def paired_recall_at_k(similarity: Any, k_values: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """Recall@k and MRR for paired retrieval, e.g. finding a sentence from its compression.

    ``similarity`` (N, N): row i's correct target is column i; ties rank the target last (pessimistic).

    >>> similarity = np.array([[0.9, 0.1],   # query 0 finds its target first
    ...                        [0.8, 0.3]])  # query 1's target (0.3) ranks 2nd
    >>> paired_recall_at_k(similarity, k_values=(1, 2))
    {'Recall@1': 0.5, 'Recall@2': 1.0, 'MRR': 0.75}
    """
    ks = _check_k_values(k_values)
    s = _as_array(similarity, "similarity")
    if s.ndim != 2 or s.shape[0] != s.shape[1] or s.shape[0] == 0:
        raise CtxirError(f"similarity must be a non-empty square (N, N) matrix, got shape {tuple(s.shape)}.")
    ranks = (s >= np.diag(s)[:, None]).sum(axis=1)  # >= counts the diagonal itself once: the "1 +"
    out = {f"Recall@{k}": float(np.mean(ranks <= k)) for k in ks}
    out["MRR"] = float(np.mean(1.0 / ranks))
    return out


def paired_retrieval(
    encoder: Any, queries: Sequence[str], targets: Sequence[str], k_values: Sequence[int] = (1, 5, 10)
) -> dict[str, float]:
    """``paired_recall_at_k`` of a ``BiEncoder``'s query and document embeddings.

    >>> from ctxir import BiEncoder
    >>> encoder = BiEncoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu")  # doctest: +SKIP
    >>> compressions = ["otters swim well", "bank approves loan"]
    >>> originals = ["Otters are strong swimmers.", "The bank approved the loan on Monday."]
    >>> paired_retrieval(encoder, compressions, originals, k_values=(1,))  # doctest: +SKIP
    {'Recall@1': 1.0, 'MRR': 1.0}
    """
    if len(queries) != len(targets) or not queries:
        raise CtxirError(
            f"need as many targets as queries (at least one), got {len(queries)} and {len(targets)}"
        )
    # (N, D) each, normalised; each side after its prompt (BiEncoder's query and document prompts)
    q, t = encoder.encode(list(queries), role="query"), encoder.encode(list(targets), role="document")
    return paired_recall_at_k(q @ t.T, k_values)


def markdown_cell(text) -> str:
    return str(text).replace("|", "\\|")


def format_table(
    results: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
    marked: Collection[tuple[str, str]] = (),
) -> str:
    """A markdown table: one row per system, one column per metric, 4 decimals (``–`` where a system lacks one),
    ``†`` after the (system, metric) values ``marked`` (significant differences)."""
    if not results:
        raise CtxirError("no results to tabulate.")
    if not metrics:
        raise CtxirError("no metrics to tabulate; pass column names such as ['nDCG@10', 'MRR@10'].")

    lines = ["| System | " + " | ".join(map(markdown_cell, metrics)) + " |", "|---|" + "---:|" * len(metrics)]
    for system, vals in results.items():
        cells = [
            f"{float(vals[m]):.4f}{'†' if (system, m) in marked else ''}" if m in vals else "–"
            for m in metrics
        ]
        lines.append(f"| {markdown_cell(system)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
