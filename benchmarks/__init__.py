"""Benchmarks of ctxir (not timed tests, and not part of the installed library): each prints a Markdown table and
writes one JSON record: the command as typed, the machine (cores, CPU, SIMD flags, library versions), the load
average before and after, the settings and the results (medians of repeated passes). Run them from the repository
root:

    python -m benchmarks.search --num-docs 10000 --output results/bench/search-10000.json
    python -m benchmarks.encode --output results/bench/encode.json      # ~1 h on 2 busy cores (nDCG: cached after)
    python -m benchmarks.rerank --output results/bench/rerank.json
    python -m benchmarks.train --output results/bench/train.json
    python -m benchmarks.app --output results/bench/app.json            # starts python app.py, then stops it
    python -m benchmarks.report --inputs results/bench/*.json --markdown docs/performance.md   # tables + PNGs

``python -m benchmarks KIND --flags`` is the same as ``python -m benchmarks.KIND --flags``. One module per thing
measured: ``search`` (single-query latency, recall and memory per index type; the index types in ``indexes``),
``encode`` (encoding throughput of the fast paths and their nDCG@10 cost), ``rerank`` (cross-encoder latency against
candidates), ``train`` (cross-encoder training throughput), ``app`` (every endpoint through gradio_client);
``report`` renders their records into docs/performance.md; ``common`` holds what they share.
"""

from __future__ import annotations

import importlib
import sys

KINDS = ("search", "encode", "rerank", "train", "app", "views", "report")


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
