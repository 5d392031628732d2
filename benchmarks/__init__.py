"""Benchmarks of ctxir (not part of the installed library). Each prints a Markdown table and writes one JSON record:
the command, the machine, the load before and after, the settings and the results. Run from the repository root:

    python -m benchmarks.search --num-docs 10000 --output results/bench/search-10000.json
    python -m benchmarks.report --inputs results/bench/*.json --markdown docs/results.md   # tables + PNGs

``python -m benchmarks KIND --flags`` is the same as ``python -m benchmarks.KIND --flags``; ``common`` holds what
the kinds share.
"""

from __future__ import annotations

import importlib
import sys

KINDS = ("search", "encode", "rerank", "train", "app", "views", "report", "explain", "rerank_int8")


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks KIND --flags``: the first word picks the benchmark (imported only then)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in KINDS:
        got = f"got {argv[0]!r}: " if argv else ""
        print(
            f"usage: python -m benchmarks {{{','.join(KINDS)}}} --help ({got}give one of {', '.join(KINDS)} first, "
            "or run python -m benchmarks.KIND)",
            file=sys.stderr,
        )
        return 2
    return importlib.import_module(f"benchmarks.{argv[0]}").main(argv[1:])
