"""The out-of-domain suite's table: a re-ranker's evaluation.json as rows and markdown (docs/results.md, cards)."""

from __future__ import annotations

from ctxir import kinds
from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT

COLLECTIONS = {
    "scifact_test": "SciFact test",
    "msmarco": "MS MARCO sample",
    "demo": "demo corpus",
    "med": "Medline",
    "npl": "NPL",
    "lisa": "LISA",
}
# the first stages the suite re-ranks (evaluate_reranker --suite runs each); BM25 is every row's baseline too
STAGES = (kinds.BM25, kinds.DENSE, kinds.HYBRID)
TOLERANCE = 0.005  # the default may fall this far below its first stage and still "do no harm"


def suite_rows(result: dict, depth: int = 20) -> list[dict]:
    """One row per (collection, split, first stage): first stage, alone, fused, BM25 on the same queries, and the
    paired tests against the first stage.

    >>> part = {"queries": 2, "first_stage": {"nDCG@10": 0.5}, "alone": {"nDCG@10": 0.6}, "fused": {"nDCG@10": 0.58},
    ...         "fused_vs_first_stage": {"t_pvalue": 0.04, "wins": 2, "losses": 0}}
    >>> rows = suite_rows({"med": {"bm25@20": part, "hybrid@20": {**part, "first_stage": {"nDCG@10": 0.7}}}})
    >>> [(r["stage"], r["bm25"], r["fused_ok"], r["alone_ok"]) for r in rows]
    [('bm25', 0.5, True, True), ('hybrid', 0.5, False, True)]
    """
    rows = []
    for key, name in COLLECTIONS.items():
        parts = result.get(key) or {}
        splits = ("all", "unseen") if key == "scifact_test" else (None,)
        for split in splits:

            def at(stage: str, split: str | None = split, parts: dict = parts) -> dict | None:
                part = parts.get(f"{stage}@{depth}")
                return (part or {}).get(split) if split and part else part

            bm25 = at(kinds.BM25)
            for stage in STAGES:
                part = at(stage)
                if not part or not bm25:
                    continue
                first, alone, fused = (part[m]["nDCG@10"] for m in ("first_stage", "alone", "fused"))
                rows.append(
                    {
                        "collection": name + (f", {split} claims" if split == "unseen" else ""),
                        "queries": part["queries"],
                        "stage": stage,
                        "bm25": bm25["first_stage"]["nDCG@10"],
                        "first": first,
                        "alone": alone,
                        "fused": fused,
                        "fused_test": part.get("fused_vs_first_stage") or {},
                        "alone_test": part.get("alone_vs_first_stage") or {},
                        "fused_ok": fused >= first - TOLERANCE,
                        "alone_ok": alone >= bm25["first_stage"]["nDCG@10"],
                    }
                )
    return rows


def first_stages(result: dict, depth: int = 20) -> dict[str, dict]:
    """{first stage: {"mean", "worst"}}: its own nDCG@10 (no re-ranker) over the suite's collections, SciFact test
    once (all claims), best first by mean, then worst. What the app's default first stage is chosen by.

    >>> one = lambda v: {"first_stage": {"nDCG@10": v}}
    >>> first_stages({"med": {"bm25@20": one(0.7), "hybrid@20": one(0.8)}, "lisa": {"bm25@20": one(0.5),
    ...               "hybrid@20": one(0.45)}})
    {'hybrid': {'mean': 0.625, 'worst': 0.45}, 'bm25': {'mean': 0.6, 'worst': 0.5}}
    """
    values: dict[str, list[float]] = {}
    for key in COLLECTIONS:
        for stage in STAGES:
            part = (result.get(key) or {}).get(f"{stage}@{depth}")
            part = part.get("all") if part and key == "scifact_test" else part
            if part:
                values.setdefault(stage, []).append(float(part["first_stage"]["nDCG@10"]))
    summary = {
        stage: {"mean": round(sum(v) / len(v), 4), "worst": round(min(v), 4)} for stage, v in values.items()
    }
    return dict(sorted(summary.items(), key=lambda kv: (-kv[1]["mean"], -kv[1]["worst"])))


def first_stages_line(result: dict) -> str:
    """One sentence: each first stage's mean and worst nDCG@10 alone over the suite, the best named."""
    summary = first_stages(result)
    if not summary:
        return ""
    n = sum(1 for key in COLLECTIONS if result.get(key))
    best = next(iter(summary))
    return (
        f"First stages alone over the suite's {n} collections (SciFact test once), nDCG@10 mean (worst): "
        + ", ".join(f"{stage} {v['mean']:.4f} ({v['worst']:.4f})" for stage, v in summary.items())
        + f". The best, **{best}**, is the app's and `ctxir evaluate`'s default first stage "
        "(`ctxir.retrieval.registry.DEFAULT_FIRST_STAGE`; a test holds the two together)."
    )


def _test(test: dict) -> str:
    if not test:
        return ""
    return f"{test.get('wins', '?')}/{test.get('losses', '?')}, p {test.get('t_pvalue', float('nan')):.3g}"


def _stage_cell(result: dict, stage: str) -> str:
    """The first stage, and where the fused mode keeps its order, that the default only re-orders its ties."""
    fusion = result.get("fusion") or {}
    weights = ((fusion.get("first_stages") or {}).get(stage) or {}).get("weights") or fusion.get("weights")
    if weights and weights[0] >= TIE_BREAK_WEIGHT * weights[1]:
        return f"{stage} (default: its order kept, only its ties re-ordered)"
    return stage


def suite_table(name: str, folder: str, result: dict) -> list[str]:
    """The suite's markdown table of one re-ranker (its ``evaluation.json`` as ``result``), the musts checked under it."""
    rows = suite_rows(result)
    if not rows:
        return [
            f"### {name}",
            "",
            f"No suite figures yet in `{folder}/evaluation.json`: run "
            f"`python -m training.evaluate_reranker --model {folder} --suite true`.",
            "",
        ]
    lines = [
        f"### {name} (`{folder}`)",
        "",
        "| collection | queries | first stage | first stage alone | re-ranker alone | default (fused) | "
        "fused vs first stage (wins/losses, paired t) | alone vs first stage | alone ≥ BM25 | fused ≥ first − "
        f"{TOLERANCE} |",
        "|---|---:|---|---:|---:|---:|---|---|:-:|:-:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['collection']} | {r['queries']} | {_stage_cell(result, r['stage'])} | {r['first']:.4f} | {r['alone']:.4f} | "
            f"{r['fused']:.4f} | {_test(r['fused_test'])} | {_test(r['alone_test'])} | "
            f"{'yes' if r['alone_ok'] else '**no**'} | {'yes' if r['fused_ok'] else '**no**'} |"
        )
    misses = [f"{r['collection']} {r['stage']}" for r in rows if not r["fused_ok"]]
    below = sorted({r["collection"] for r in rows if not r["alone_ok"]})
    lines += [
        "",
        f"Default within {TOLERANCE} of its first stage: "
        + ("everywhere." if not misses else f"**not** on {', '.join(misses)}.")
        + " Re-ranker alone ≥ BM25: "
        + ("everywhere." if not below else f"**not** on {', '.join(below)}."),
        "",
        f"Measured by `{(result.get('commands') or [result.get('command', '')])[-1]}` on "
        f"{(result.get('machine') or {}).get('hardware', 'this machine')}.",
        "",
    ]
    return lines
