"""docs/results.md's generated training table read back as text: its markers, a row's cells, the rows it holds.

``results_training.py`` writes the table and keeps the rows of runs whose files are gone; ``results_targets.py``
quotes figures from it.
"""

from __future__ import annotations

import re

START, END = "<!-- training:start -->", "<!-- training:end -->"
# the shipped cross-encoder's row label, which the targets block names too
SHIPPED_CROSS_ENCODER = (
    "shipped cross-encoder (CPU recipe, stage 7: stage 5 continued with paragraph-long WikiQA topics beside SQuAD, "
    "WikiQA, MS MARCO and SciFact, dev-best step 250)"
)


def cells(line: str) -> list[str]:
    """A Markdown table row's cells (no cell here holds a '|'; commands are quoted in backticks without pipes)."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def recorded_rows(text: str) -> dict[str, list[str]]:
    """The rows the doc's generated block holds now, by their first cell (a run's label), in order.

    Rows listed as not run are left out: there is nothing measured to keep."""
    match = re.search(re.escape(START) + "(.*?)" + re.escape(END), text, flags=re.S)
    rows: dict[str, list[str]] = {}
    for line in match.group(1).splitlines() if match else []:
        if not line.startswith("| ") or line.startswith("|---") or "(not run: " in line:
            continue
        rows.setdefault(cells(line)[0], []).append(line)
    return rows
