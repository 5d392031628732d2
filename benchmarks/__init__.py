"""Benchmarks of ctxir (not part of the installed library). Each prints a Markdown table and writes one JSON record:
the command, the machine, the load before and after, the settings and the results. Run from the repository root:

    python -m benchmarks.search --num-docs 10000 --output results/bench/search-10000.json
    python -m benchmarks.report --inputs results/bench/*.json --markdown docs/results.md   # tables + PNGs

``common`` holds what the kinds share.
"""

from __future__ import annotations

KINDS = ("search", "encode", "rerank", "train", "app", "views", "report")
