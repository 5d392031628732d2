"""Per-query differences: each system's value of one metric minus the baseline's, worst to best, as IR papers'
per-topic plots (matplotlib PNG or a plotly HTML page, by the file's suffix)."""

from __future__ import annotations

import html
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxir.files import write_atomic
from ctxir.types import CtxirError
from ctxir.viz.embeddings import new_figure, save_png


def format_p(p: float) -> str:
    """A p-value to 4 decimals, those below 1e-4 in scientific notation."""
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


@dataclass(frozen=True)
class QueryDifferences:
    """One system against the baseline on one metric: ``deltas`` (system − baseline) worst first, with ``qids``."""

    system: str
    baseline: str
    metric: str
    qids: tuple[str, ...]
    deltas: np.ndarray  # (queries,)
    p: float | None = None
    p_adjusted: float | None = None

    wins = property(lambda self: int((self.deltas > 0).sum()))
    losses = property(lambda self: int((self.deltas < 0).sum()))
    ties = property(lambda self: int((self.deltas == 0).sum()))

    @property
    def title(self) -> str:
        counts = ((self.wins, "win", "wins"), (self.losses, "loss", "losses"), (self.ties, "tie", "ties"))
        shown = ", ".join(f"{n} {one if n == 1 else many}" for n, one, many in counts)
        title = f"{self.system} vs {self.baseline} · {self.metric}: {shown}"
        if self.p is not None:
            title += f" · p = {format_p(self.p)}"
            if self.p_adjusted is not None and self.p_adjusted != self.p:
                title += f" (adjusted {format_p(self.p_adjusted)})"
        return title


def query_differences(
    per_query: Mapping[str, Mapping[str, float]],
    baseline: str,
    metric: str,
    pvalues: Mapping[str, float] | None = None,
    adjusted: Mapping[str, float] | None = None,
) -> list[QueryDifferences]:
    """Each system of ``per_query`` (``{system: {qid: value}}``) but ``baseline``, against it, worst to best."""
    if baseline not in per_query:
        raise CtxirError(
            f"baseline {baseline!r} is not among the systems {', '.join(map(repr, per_query))}: name one of them"
        )
    if len(per_query) < 2:
        raise CtxirError(f"a difference needs a system beside the baseline {baseline!r}, got only it")
    queries = sorted(per_query[baseline])
    found = []
    for system, values in per_query.items():
        if system == baseline:
            continue
        if set(values) != set(queries):
            only = sorted(set(values) ^ set(queries))
            raise CtxirError(
                f"{system!r} has values for {len(values)} queries and {baseline!r} for {len(queries)}; they "
                f"differ in {len(only)} (e.g. {only[0]!r}): give every system the same queries"
            )
        try:
            deltas = np.array([float(values[q]) - float(per_query[baseline][q]) for q in queries])
        except (TypeError, ValueError) as err:
            raise CtxirError(
                f"{system!r}'s or {baseline!r}'s {metric} values are not all numbers: {err}"
            ) from None
        order = sorted(range(len(queries)), key=lambda i: (deltas[i], queries[i]))
        p, p_adjusted = (
            None if m is None or system not in m else float(m[system]) for m in (pvalues, adjusted)
        )
        qids = tuple(queries[i] for i in order)
        found.append(QueryDifferences(system, baseline, metric, qids, deltas[order], p, p_adjusted))
    return found


def comparison_differences(comparison: Mapping) -> list[QueryDifferences]:
    """``query_differences`` of a comparison as the failure report stores it."""
    named = (comparison[key] for key in ("per_query", "baseline", "metric"))
    return query_differences(*named, comparison.get("p"), comparison.get("p_adjusted"))


def _colours(deltas: np.ndarray) -> list[str]:
    return ["#2ca02c" if d > 0 else "#d62728" if d < 0 else "#9e9e9e" for d in deltas]  # win, loss, tie


def differences_figure(differences: Sequence[QueryDifferences]):
    """One bar chart per system (matplotlib): a bar per query, worst to best, green above, red below."""
    fig = new_figure((10, 2.2 + 2.6 * len(differences)))
    axes = fig.subplots(len(differences), 1, squeeze=False)[:, 0]
    for ax, diff in zip(axes, differences, strict=True):
        positions = np.arange(len(diff.qids))
        ax.bar(positions, diff.deltas, width=0.85, color=_colours(diff.deltas))
        ax.axhline(0, color="black", lw=0.8)
        if len(diff.qids) <= 40:  # each bar labelled with its query id
            ax.set_xticks(positions, [q[:16] for q in diff.qids], rotation=60, ha="right", fontsize=7)
        else:
            ax.set_xticks([])
        ax.set_xlabel(f"{len(diff.qids)} queries, worst to best", fontsize=9)
        ax.set_ylabel(f"Δ {diff.metric}", fontsize=9, parse_math=False)
        ax.set_title(diff.title, fontsize=10, parse_math=False)
        ax.grid(axis="y", alpha=0.3)
    fig.set_layout_engine("tight")
    return fig


def differences_plotly(differences: Sequence[QueryDifferences]):
    """The same bars as ``differences_figure``, interactive (plotly)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    # plotly reads its text as HTML: names are escaped
    titles, spacing = [html.escape(d.title) for d in differences], min(0.3, 0.5 / len(differences))
    fig = make_subplots(rows=len(differences), cols=1, subplot_titles=titles, vertical_spacing=spacing)
    for row, diff in enumerate(differences, 1):
        bars = go.Bar(
            x=list(range(len(diff.qids))),
            y=diff.deltas.tolist(),
            marker_color=_colours(diff.deltas),
            customdata=[html.escape(q) for q in diff.qids],
            hovertemplate="query %{customdata}<br>Δ %{y:.4f}<extra></extra>",
            showlegend=False,
        )
        fig.add_trace(bars, row=row, col=1)
        fig.update_xaxes(title_text=f"{len(diff.qids)} queries, worst to best", showticklabels=False, row=row)
        fig.update_yaxes(title_text=html.escape(f"Δ {diff.metric}"), zeroline=True, row=row)
    fig.update_layout(height=180 + 260 * len(differences), template="plotly_white", bargap=0.1)
    return fig


def check_plot_path(path: str | Path, what: str = "plot") -> Path:
    """``path`` when its suffix says a format ``save_differences`` writes; checked before any work."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".html"):
        raise CtxirError(
            f"{what} {str(path)!r} must end in .png (a picture, by matplotlib) or .html (an interactive page, "
            "by plotly): name the file e.g. results/compare.png"
        )
    if suffix == ".html" and importlib.util.find_spec("plotly") is None:
        raise CtxirError(
            f"{what} {str(path)!r} is an interactive page, drawn by plotly: pip install plotly, or write a .png"
        )
    return path


def save_differences(path: str | Path, differences: Sequence[QueryDifferences]) -> Path:
    """Write the figure to ``path``: .png or .html (plotly.js inlined: the page opens offline)."""
    path = check_plot_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".png":
        save_png(differences_figure(differences), path)
    else:
        write_atomic(path, differences_plotly(differences).to_html(config={"responsive": True}))
    return path
