"""Text shown to a person and the checks of text a person typed, shared by every tab."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from ctxir.checks import check_text
from ctxir.types import CtxirError


def display_text(message: Any) -> str:
    """``message`` as text for a place that renders HTML (Gradio's error and warning pop-ups)."""
    return html.escape(str(message), quote=False)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_literal(text: Any) -> str:
    """User content inside a Markdown summary (mid-line), shown as typed."""
    return display_text(_MARKDOWN_SPECIAL.sub(r"\\\1", str(text)))


def md_code(text: Any) -> str:
    """User content as a Markdown code span that no backtick in it can end."""
    text = str(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def split_lines(text: Any, what: str, max_items: int, max_chars: int, min_items: int = 1) -> list[str]:
    """One item per non-empty line (a list is accepted too, for API users)."""
    listed = isinstance(text, list | tuple)
    lines = [str(t) for t in text] if listed else check_text(text, what, max_chars * max_items).splitlines()
    items = [line.strip() for line in lines if line.strip()]
    if len(items) < min_items:
        raise CtxirError(
            f"{what} needs at least {min_items} non-empty line(s), got {len(items)}: put one per line"
        )
    if len(items) > max_items:
        raise CtxirError(f"{what} has {len(items)} lines but at most {max_items} are accepted: remove some")
    for i, item in enumerate(items, 1):
        check_text(item, f"{what} line {i}", max_chars)
    return items


def uploaded(path: Any, max_mb: float, what: str, fix: str) -> Path:
    """An uploaded file once it is on the server and within ``max_mb``: "this app {what} up to N MB: {fix}"."""
    path = Path(path)
    if not path.is_file():
        raise CtxirError(f"uploaded file {path.name!r} was not found on the server: upload it again")
    size_mb = path.stat().st_size / 2**20
    if size_mb > max_mb:
        raise CtxirError(f"{path.name} is {size_mb:.1f} MB; this app {what} up to {max_mb:g} MB: {fix}")
    return path


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word``, in the plural unless the count is one: "1 result", "10 results", "2 queries"."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def rounded(x: float | None, decimals: int = 4) -> float | None:
    return None if x is None else round(float(x), decimals)


def snippet(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def cls_warnings(pooling: str, layer: int, consequence: str) -> list[str]:
    """CLS pooling at layer 0 reads the [CLS] token before any attention."""
    if pooling != "cls" or layer != 0:
        return []
    return [
        f"CLS pooling at layer 0 (the embedding layer) gives every text the same vector — the [CLS] token's "
        f"embedding before any attention — so every cosine is 1.0 and {consequence}: choose layer 1 or higher, "
        "or mean pooling"
    ]
