"""The out-of-domain suite that decides shipping: rewrite its tables in docs/results.md from the shipped re-rankers'
evaluation.json (``--evaluate`` runs the suite first).

    python scripts/results_suite.py --evaluate     # every shipped re-ranker over the suite, then the tables
    python scripts/results_suite.py                # the tables from the evaluation.json files already there

The suite (``python -m training.evaluate_reranker --suite true``): SciFact test (all claims and those whose abstracts
no training claim cites), the MS MARCO sample, the app's demo corpus and three classic collections of other domains
(Medline, NPL, LISA; ``../shared/data/classic``), each over BM25, dense and hybrid top 20; the re-ranker alone and
the default (fused) mode, each against its first stage with a paired t-test. Nothing is chosen on these collections.
The musts it checks (issue #32): the default never more than 0.005 nDCG@10 below its first stage; the re-ranker alone
never below BM25 on the same collection.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.files import read_json  # noqa: E402  (after the path: the script runs from any folder)

START, END = "<!-- suite:start -->", "<!-- suite:end -->"
MODELS = {"cross-encoder": "ctxir/assets/models/cross-encoder", "CLS-LR": "ctxir/assets/models/cls-lr"}
COLLECTIONS = {
    "scifact_test": "SciFact test",
    "msmarco": "MS MARCO sample",
    "demo": "demo corpus",
    "med": "Medline",
    "npl": "NPL",
    "lisa": "LISA",
}
STAGES = ("bm25", "dense", "hybrid")
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

            bm25 = at("bm25")
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


def _test(test: dict) -> str:
    return (
        f"{test.get('wins', '?')}/{test.get('losses', '?')}, p {test.get('t_pvalue', float('nan')):.3g}"
        if test
        else ""
    )


def table(name: str, folder: str, result: dict) -> list[str]:
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
            f"| {r['collection']} | {r['queries']} | {r['stage']} | {r['first']:.4f} | {r['alone']:.4f} | "
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--evaluate", action="store_true", help="run the suite for each shipped re-ranker first"
    )
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    parser.add_argument("--torch-threads", default="1")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help=(
            "render these instead of the shipped re-rankers: a model folder (its evaluation.json) or an evaluation JSON, "
            "e.g. --model before=outputs/suite-shipped.json; with --doc -, print the tables"
        ),
    )
    args = parser.parse_args(argv)
    models = dict(MODELS)
    if args.model:
        bad = [m for m in args.model if "=" not in m]
        if bad:
            parser.error(f"--model {bad[0]!r}: write LABEL=PATH, e.g. before=outputs/suite-shipped.json")
        models = dict(m.split("=", 1) for m in args.model)
    lines = [
        START,
        "Generated by `python scripts/results_suite.py` from each shipped re-ranker's evaluation.json. "
        "nDCG@10 over each first stage's top 20; *unseen* claims cite no abstract a training claim cites.",
        "",
    ]
    for name, folder in models.items():
        if args.evaluate:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "training.evaluate_reranker",
                    "--model",
                    folder,
                    "--suite",
                    "true",
                    "--torch-threads",
                    args.torch_threads,
                    "--scores-dir",
                    f"outputs/scores-suite-{name}",
                ],
                check=True,
                cwd=ROOT,
            )
        path = ROOT / folder
        lines += table(name, folder, read_json(path if path.is_file() else path / "evaluation.json") or {})
    lines.append(END)
    if args.doc == "-":
        print("\n".join(lines[1:-1]))
        return 0
    doc = Path(args.doc)
    text = doc.read_text() if doc.is_file() else f"# Results\n\n{START}\n{END}\n"
    if START not in text:
        text += f"\n## The out-of-domain suite (shipping decisions)\n\n{START}\n{END}\n"
    doc.write_text(
        re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: "\n".join(lines), text, flags=re.S)
    )
    print(f"-> {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
