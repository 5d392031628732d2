"""Benchmarks of ctxir (not timed tests, and not part of the installed library): each prints a Markdown table and
writes one JSON record: the command as typed, the machine (cores, CPU, SIMD flags, library versions), the load
average before and after, the settings and the results (medians of repeated passes). Run them from the repository
root:

    python -m benchmarks.search --num-docs 10000 --output results/bench/search-10000.json
    python -m benchmarks.encode --output results/bench/encode.json      # ~1 h on 2 busy cores (nDCG: cached after)
    python -m benchmarks.rerank --output results/bench/rerank.json
    python -m benchmarks.train --output results/bench/train.json
    python -m benchmarks.app --output results/bench/app.json            # starts python app.py, then stops it
    python -m benchmarks.report --inputs results/bench/*.json --markdown docs/results.md   # tables + PNGs

``python -m benchmarks KIND --flags`` is the same as ``python -m benchmarks.KIND --flags``. One module per thing
measured: ``search`` (single-query latency, recall and memory per index type; the index types in ``indexes``),
``encode`` (encoding throughput of the fast paths and their nDCG@10 cost), ``rerank`` (cross-encoder latency against
candidates), ``train`` (cross-encoder training throughput), ``app`` (every endpoint through gradio_client),
``views`` (the app's views in process, per device); ``report`` renders their records into docs/results.md;
``common`` holds what they share.

Each of these writes a record of its own, quoted by the docs page named: ``app_inprocess`` (the app's cold start,
search latency over every demo query, attention view size), ``explain`` (``ctxir.explain.explain``'s
latency and completeness), ``startup`` (start-up on a large corpus, on the folder
``synthetic_corpus`` writes: docs/results.md), ``ann_recall`` (the ANN index against exact search),
``onnx_memory`` (peak memory of encoding per backend), ``rerank_int8`` (does an int8 cross-encoder keep its
ranking: docs/lab.md), ``distributed`` (Ray Data encoding and Milvus Lite: docs/reference/distributed.md).
"""

from __future__ import annotations

import importlib
import sys

KINDS = (
    "search",
    "encode",
    "rerank",
    "train",
    "app",
    "views",
    "report",
    "app_inprocess",
    "explain",
    "startup",
    "synthetic_corpus",
    "ann_recall",
    "onnx_memory",
    "rerank_int8",
    "distributed",
)


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
