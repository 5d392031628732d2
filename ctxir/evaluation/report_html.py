"""The failure report as HTML (``templates/report.html.j2``), and the colours of attributions everywhere."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import jinja2
from markupsafe import Markup

MAX_TERMS_SHOWN = 12  # rows of a query-term table in the HTML (the JSON keeps all)
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "<s>", "</s>")
# Gradio's HighlightedText colours a score > 0 with the first and < 0 with the second
RAISES_RGB = (239, 68, 60)  # red: the word raised the score
LOWERS_RGB = (128, 90, 213)  # violet: the word lowered it
ATTRIBUTION_LEGEND = "red = raised the score, violet = lowered it"
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"  # shipped as package data (pyproject.toml)


def _finalize(value):
    """Every ``{{ expression }}`` is HTML-escaped but the template's own macros (``|safe``)."""
    return (
        value if isinstance(value, Markup) else html.escape("" if value is None else str(value), quote=True)
    )


def _colour(value: float, scale: float) -> str:
    """Red for a contribution that raises the score, violet for one that lowers it; opacity by size."""
    if not value or not scale:
        return ""
    alpha = min(1.0, abs(value) / scale) ** 2 * 0.8  # squared: the few largest stand out of a long document
    rgb = ",".join(map(str, RAISES_RGB if value > 0 else LOWERS_RGB))
    return f"background:rgba({rgb},{alpha:.2f})"


def _tokens_scale(sides: Sequence[Mapping], words: bool) -> float:
    """One colour scale for both documents, so their highlights compare; specials carry no meaning of their own."""
    return max(
        (abs(v) for side in sides for t, v in side["tokens"] if not (words and t in SPECIAL_TOKENS)),
        default=0.0,
    )


def _what_happened(case: Mapping) -> str:
    rows = case["relevant"]
    ranks = [r["rank"] for r in rows if r["rank"] is not None]
    if not ranks:
        return "no relevant document retrieved"
    missed = len(rows) - len(ranks)
    return f"first relevant at rank {min(ranks)}" + (
        f"; {missed} of {len(rows)} not retrieved" if missed else ""
    )


def _main_reason(case: Mapping) -> str:
    """The first explanation's largest difference, for the summary table."""
    for pair in case["pairs"]:
        for ex in pair.get("explanations", []):
            terms = [t for t in ex.get("terms", []) if t["difference"] > 0]
            if terms:
                return f'{ex["model"]}: "{terms[0]["term"]}" {terms[0]["difference"]:+.3g} for the winner'
            return f"{ex['model']}: {ex['score_name']} {ex['difference']:+.3g} for the winner"
    return ""


def _differences_image(comparison: Mapping | None) -> tuple[str, str]:
    """(an inline PNG data URI, its alt text) of ``meta["comparison"]`` query by query; ("", "") without one."""
    if not comparison:
        return "", ""
    from ctxir.viz.differences import comparison_differences, differences_figure
    from ctxir.viz.embeddings import save_png

    differences = comparison_differences(comparison)
    png = io.BytesIO()
    save_png(differences_figure(differences), png)
    alt = "; ".join(d.title for d in differences)
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii"), alt


def render_report(cases: Sequence[Mapping], meta: Mapping, standalone: bool = True) -> str:
    """The report as self-contained, HTML-escaped HTML; ``standalone=False`` gives a ``<div>`` to embed in a page."""
    metric = meta.get("metric", cases[0]["metric"] if cases else "nDCG@10")
    raises, lowers = (",".join(map(str, rgb)) for rgb in (RAISES_RGB, LOWERS_RGB))
    differences_png, differences_alt = _differences_image(meta.get("comparison"))
    # autoescape stays off: _finalize escapes every expression
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(
        num=lambda value, digits=4: "–" if value is None else f"{value:.{digits}f}",
        colour=_colour,
        percent=lambda v: f"{v:.2%}",
        what_happened=_what_happened,
        main_reason=_main_reason,
        terms_scale=lambda terms: max(abs(t["difference"]) for t in terms) or 1.0,
        tokens_scale=_tokens_scale,
        terms_matched=lambda terms: any(t["winner"] or t["relevant"] for t in terms),
        special_tokens=SPECIAL_TOKENS,
        max_terms=MAX_TERMS_SHOWN,
    )
    return env.get_template("report.html.j2").render(
        cases=cases,
        meta=meta,
        metric=metric,
        standalone=standalone,
        raises=raises,
        lowers=lowers,
        title_text=f"Failure report — {meta.get('system', 'run')}",
        differences_png=differences_png,
        differences_alt=differences_alt,
    )
