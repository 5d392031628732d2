"""``ctxir compare``: systems' results JSONs on the same queries, one table, paired tests against the first."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxir.checks import check_choice
from ctxir.cli import cli_main, flag
from ctxir.evaluation.metrics import format_table, markdown_cell, paired_changes
from ctxir.files import read_json, write_json
from ctxir.types import CtxirError

TESTS = ("randomization", "t-test")
CORRECTIONS = ("holm", "bonferroni", "none")
DEFAULT_METRICS = ("nDCG@10", "MRR@10", "Recall@100")

PerQuery = Mapping[str, Mapping[str, float]]  # {qid: {metric: value}}


def paired_pvalue(
    x: Any, y: Any, test: str = "randomization", n_permutations: int = 10_000, seed: int = 0
) -> float:
    """Two-sided p-value that paired per-query values ``x`` and ``y`` (n,) have the same mean; 1 when identical."""
    from scipy import stats

    check_choice(test, "test", TESTS)
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise CtxirError(
            f"paired values must be two lists of the same length, got shapes {x.shape} and {y.shape}"
        )
    if len(x) < 2:
        raise CtxirError(f"a paired test needs ≥ 2 queries, got {len(x)}")
    if not np.any(x != y):
        return 1.0
    if test == "t-test":
        return float(stats.ttest_rel(y, x).pvalue)
    result = stats.permutation_test(
        (x, y),
        lambda a, b, axis: np.mean(b - a, axis=axis),  # (..., n) → (...)
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_permutations,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(min(1.0, result.pvalue))


def adjust_pvalues(pvalues: Sequence[float], correction: str = "holm") -> list[float]:
    """p-values adjusted for ``len(pvalues)`` comparisons (family-wise error ≤ α): bonferroni, holm or none."""
    check_choice(correction, "correction", CORRECTIONS)
    p = np.asarray(pvalues, dtype=np.float64)
    m = len(p)
    if correction == "none" or m == 0:
        return [float(v) for v in p]
    if correction == "bonferroni":
        return [float(v) for v in np.minimum(1.0, p * m)]
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))  # (m,) in ascending-p order
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, stepped)
    return [float(v) for v in adjusted]


def compare_systems(
    per_query: Mapping[str, PerQuery],
    metrics: Sequence[str] = DEFAULT_METRICS,
    baseline: str | None = None,
    *,
    test: str = "randomization",
    correction: str = "holm",
    alpha: float = 0.05,
    n_permutations: int = 10_000,
    seed: int = 0,
) -> dict:
    """Each system's mean of every metric, and paired ``test``s against ``baseline`` (default: the first), with
    ``correction`` over each metric's comparisons. ``per_query``: ``{system: {qid: {metric: value}}}``.

    >>> bm25 = {"q1": {"MRR@10": 0.5}, "q2": {"MRR@10": 1.0}, "q3": {"MRR@10": 0.25}}
    >>> dense = {"q1": {"MRR@10": 1.0}, "q2": {"MRR@10": 1.0}, "q3": {"MRR@10": 1.0}}
    >>> result = compare_systems({"bm25": bm25, "dense": dense}, ["MRR@10"], test="t-test")
    >>> row = result["comparisons"][0]
    >>> row["system"], round(row["delta"], 4), row["wins"], row["ties"], round(row["p"], 3)  # t = 1.89, 2 df
    ('dense', 0.4167, 2, 1, 0.199)
    """
    check_choice(correction, "correction", CORRECTIONS)  # test: by paired_pvalue
    if not 0 < alpha < 1:
        raise CtxirError(f"alpha must be between 0 and 1, got {alpha!r}")
    names = list(per_query)
    if len(names) < 2:
        raise CtxirError(f"comparing needs at least 2 systems, got {len(names)}: {names!r}")
    baseline = names[0] if baseline is None else check_choice(baseline, "baseline", names)
    queries = sorted(per_query[baseline])  # every system needs every metric on exactly these
    for name in names:
        if set(per_query[name]) != set(queries):
            only = sorted(set(per_query[name]) ^ set(queries))
            raise CtxirError(
                f"{name!r} was evaluated on {len(per_query[name])} queries and {baseline!r} on "
                f"{len(queries)}; they differ in {len(only)} (e.g. {only[0]!r}): evaluate every system "
                "on the same --data, --split and --max-queries"
            )
        have = next(iter(per_query[name].values()), {})
        missing = [m for m in metrics if m not in have]
        if missing:
            raise CtxirError(
                f"metric {missing[0]!r} is not in {name!r}'s per-query values: use some of "
                f"{', '.join(map(repr, have))}"
            )
    values = {
        name: {m: np.array([per_query[name][q][m] for q in queries], dtype=np.float64) for m in metrics}
        for name in names
    }  # system → metric → (n_queries,)
    compared = [(baseline, name) for name in names if name != baseline]
    rows = []
    for metric in metrics:
        found = []
        for a, b in compared:
            x, y = values[a][metric], values[b][metric]
            p = paired_pvalue(x, y, test, n_permutations, seed)
            found.append({"system": b, "baseline": a, "metric": metric, **paired_changes(y - x), "p": p})
        for row, adjusted in zip(found, adjust_pvalues([r["p"] for r in found], correction), strict=True):
            row["p_adjusted"] = adjusted
            row["significant"] = adjusted <= alpha
        rows.extend(found)
    return {
        "systems": {name: {m: float(values[name][m].mean()) for m in metrics} for name in names},
        "baseline": baseline,
        "metrics": list(metrics),
        "n_queries": len(queries),
        "test": test,
        "correction": correction,
        "alpha": alpha,
        "permutations": n_permutations if test == "randomization" else None,
        "seed": seed,
        "comparisons": rows,
    }


def plot_differences(path: str | Path, per_query: Mapping[str, PerQuery], result: Mapping) -> Path:
    """Draw into ``path`` (.png or .html) each system's per-query difference from the baseline, with its p-values."""
    from ctxir.viz.differences import query_differences, save_differences

    metric, baseline = result["metrics"][0], next(iter(per_query))
    rows = [r for r in result["comparisons"] if r["metric"] == metric]
    values = {name: {qid: v[metric] for qid, v in by_query.items()} for name, by_query in per_query.items()}
    differences = query_differences(
        values,
        baseline,
        metric,
        pvalues={r["system"]: r["p"] for r in rows},
        adjusted={r["system"]: r["p_adjusted"] for r in rows},
    )
    return save_differences(path, differences)


def format_comparison(result: Mapping) -> str:
    """Two markdown tables: each system's metrics (``†``: significant after the correction), then each comparison."""
    metrics, alpha, baseline = result["metrics"], result["alpha"], result["baseline"]
    marked = {(r["system"], r["metric"]) for r in result["comparisons"] if r["significant"]}
    labelled = {
        name + (" (baseline)" if name == baseline else ""): v for name, v in result["systems"].items()
    }
    lines = [format_table(labelled, metrics, marked)]
    correction = "no correction" if result["correction"] == "none" else f"{result['correction']}-corrected"
    test = "paired t-test"
    if result["test"] == "randomization":
        permutations = result["permutations"]
        test = "paired randomization test" + (f", {permutations:,} permutations" if permutations else "")
    lines += [
        f"\n† p ≤ {alpha:g} against the baseline ({test}, two-sided, {correction} over "
        f"{len(result['systems']) - 1} comparisons per metric; {result['n_queries']} queries)",
        "",
        "| Comparison | Metric | Δ | wins/losses/ties | p | p adjusted |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result["comparisons"]:
        who = f"{markdown_cell(r['system'])} vs {markdown_cell(r['baseline'])} | {markdown_cell(r['metric'])}"
        lines.append(
            f"| {who} | {r['delta']:+.4f} | {r['wins']}/{r['losses']}/{r['ties']} | {r['p']:.4f} | "
            f"{r['p_adjusted']:.4f}{' *' if r['significant'] else ''} |"
        )
    return "\n".join(lines)


def load_systems(specs: Sequence[str]) -> dict[str, PerQuery]:
    """``{label: per-query values}`` from ``FILE`` or ``FILE::SYSTEM`` results JSONs (a shared name gets the file's)."""
    picked = []
    for spec in specs:
        path, _, system = spec.partition("::")
        file = Path(path)
        if not file.is_file():
            raise CtxirError(
                f"--compare {spec!r}: {path!r} is not a file: pass results JSONs written by ctxir evaluate"
            )
        data = read_json(file)
        per_query = data.get("per_query") if isinstance(data, dict) else None
        if not per_query:
            raise CtxirError(
                f'--compare {spec!r}: {path!r} has no per-query values ("per_query"): pass a retrieval '
                "results JSON of ctxir evaluate"
            )
        system = system or data.get("system") or (next(iter(per_query)) if len(per_query) == 1 else "")
        if system not in per_query:
            raise CtxirError(
                f"--compare {spec!r}: {path!r} holds the systems {', '.join(map(repr, per_query))}: "
                f"pick one as {path}::SYSTEM"
            )
        picked.append((file, system, per_query[system]))
    counts = Counter(system for _, system, _ in picked)
    systems: dict[str, PerQuery] = {}
    for file, system, values in picked:
        label = system if counts[system] == 1 else f"{file.stem}: {system}"
        if label in systems:
            raise CtxirError(f"--compare names {label!r} twice: compare each system once")
        systems[label] = values
    return systems


@dataclass
class CompareArgs:
    compare: list[str] = field(
        default_factory=list,
        metadata={
            "help": "results JSONs of ctxir evaluate (FILE or FILE::SYSTEM); the first is the baseline"
        },
    )
    metrics: str = flag(",".join(DEFAULT_METRICS), "comma-separated metric names")
    test: str = flag("randomization", "randomization (Fisher's, paired) or t-test", choices=TESTS)
    correction: str = flag("holm", "multiple comparisons: holm, bonferroni or none", choices=CORRECTIONS)
    permutations: int = flag(10_000, "randomization test: random swaps (exact when 2^queries is fewer)")
    output: str = flag("", "also write the comparison as JSON here")
    plot: str = flag(
        "", "also draw each system's per-query difference from the baseline into this .png or .html"
    )


def run(args: CompareArgs) -> dict:
    if len(args.compare) < 2:
        raise CtxirError(
            f"--compare needs at least 2 results JSONs, got {len(args.compare)}: "
            "pass --compare BASELINE.json OTHER.json [...]"
        )
    if args.permutations < 1:
        raise CtxirError(f"--permutations must be ≥ 1, got {args.permutations!r}")
    if args.plot:
        from ctxir.viz.differences import check_plot_path

        check_plot_path(args.plot, "--plot")
    systems = load_systems(args.compare)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not metrics:
        raise CtxirError(f"--metrics {args.metrics!r} names no metric: e.g. 'nDCG@10,MRR@10'")
    options = {"test": args.test, "correction": args.correction, "n_permutations": args.permutations}
    result = compare_systems(systems, metrics, **options)
    result["files"] = list(args.compare)
    print(format_comparison(result))
    if args.output:
        write_json(Path(args.output), result, indent=1)
        print(f"wrote {args.output}")
    if args.plot:
        print(f"wrote {plot_differences(args.plot, systems, result)}")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and "--compare" not in argv and not argv[0].startswith("-"):  # ctxir compare A.json B.json
        argv = ["--compare", *argv]
    return cli_main(CompareArgs, run, argv)
