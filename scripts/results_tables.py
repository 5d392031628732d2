"""Helpers the results_* scripts share: a figure's format, a table row's cells, a doc block's rewrite."""

from __future__ import annotations

import re
from pathlib import Path

# the shipped cross-encoder's row label, which the targets block names too
SHIPPED_CROSS_ENCODER = (
    "shipped cross-encoder (CPU recipe, stage 7: stage 5 continued with paragraph-long WikiQA topics beside SQuAD, "
    "WikiQA, MS MARCO and SciFact, dev-best step 250)"
)


def fmt(value) -> str:
    """A figure to four decimals; None is an empty cell."""
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def cells(line: str) -> list[str]:
    """A Markdown table row's cells (no cell here holds a '|'; commands are quoted in backticks without pipes)."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def write_block(doc: Path, block: str, heading: str = "") -> None:
    """Put ``block`` (first and last lines: its markers) between the doc's markers, else at its end under ``heading``."""
    start, end = block.splitlines()[0], block.splitlines()[-1]
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    if start in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    elif heading:
        text += f"\n{heading}\n\n{block}\n"
    else:
        raise SystemExit(f"{doc} has no {start} ... {end} block: add the markers where the block belongs")
    doc.write_text(text, encoding="utf-8")
