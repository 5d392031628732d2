"""Embedding figures (matplotlib) and the numbers behind them (pure functions), from ``Internals`` / arrays."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import matplotlib
import numpy as np
from matplotlib.colors import Colormap
from matplotlib.figure import Figure

from ctxir.types import CtxirError

PROJECTIONS = ("pca", "tsne")
# matplotlib caches its fonts per thread, holding files open: every PNG is drawn on this one thread
_DRAWING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxir-draw")


def new_figure(size: tuple[float, float], dpi: int = 100) -> Figure:
    """A pyplot-free figure: pyplot's global state is not thread-safe."""
    return Figure(figsize=size, dpi=dpi)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """(N, D) → (N, N) cosine similarities."""
    unit = _unit(np.asarray(vectors, dtype=np.float64))
    return unit @ unit.T


def project(vectors: np.ndarray, method: str = "pca", seed: int = 0) -> np.ndarray:
    """(N, D) → (N, 2) with PCA or t-SNE (scikit-learn); t-SNE's perplexity is fitted to small N."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    vectors = np.asarray(vectors, dtype=np.float64)
    n = vectors.shape[0]
    if method not in PROJECTIONS:
        raise CtxirError(f"projection {method!r} is not known: use one of {', '.join(PROJECTIONS)}")
    if n < 3:
        raise CtxirError(f"a 2-D projection needs at least 3 tokens, got {n}: type a longer text")
    if method == "pca":
        return PCA(n_components=2, random_state=seed).fit_transform(vectors).astype(np.float64)
    perplexity = float(min(30.0, max(2.0, (n - 1) / 4)))  # it must stay below N
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed, max_iter=500)
    return tsne.fit_transform(vectors).astype(np.float64)


def projection_title(method: str, layer: int) -> str:
    return f"{'PCA' if method == 'pca' else 't-SNE'} · layer {layer}{' (embeddings)' if layer == 0 else ''}"


def projection_figure(
    points: dict[tuple[str, int], np.ndarray],
    labels: Sequence[str],
    groups: Sequence[int],
    group_names: Sequence[str],
    highlight: Sequence[bool],
):
    """Grid of scatter plots: one row per method, one column per layer; colour = sentence."""
    methods = sorted({m for m, _ in points}, key=PROJECTIONS.index)
    layers = sorted({layer for _, layer in points})
    fig = new_figure((6.5 * len(layers), 5.5 * len(methods)))
    axes = fig.subplots(len(methods), len(layers), squeeze=False)
    cmap = matplotlib.colormaps["tab10"]
    marked = [i for i, h in enumerate(highlight) if h]
    for (r, method), (c, layer) in itertools.product(enumerate(methods), enumerate(layers)):
        ax = axes[r][c]
        xy = points[(method, layer)]
        for g, name in enumerate(group_names):
            idx = [i for i, gi in enumerate(groups) if gi == g]
            ax.scatter(xy[idx, 0], xy[idx, 1], color=cmap(g % 10), s=28, label=name[:40], alpha=0.85)
        for i, label in enumerate(labels):
            size, weight, color = (9, "bold", "black") if highlight[i] else (7, "normal", "dimgray")
            ax.annotate(
                label, xy[i], (2, 2), textcoords="offset points", size=size, weight=weight, color=color
            )
        if marked:
            ax.scatter(
                xy[marked, 0], xy[marked, 1], s=140, facecolors="none", edgecolors="black", linewidths=1.5
            )
        ax.set(title=projection_title(method, layer), xticks=[], yticks=[])
    axes[0][0].legend(fontsize=7, loc="best")
    fig.set_layout_engine("tight")
    return fig


def layer_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine per layer between two (layers+1, hidden) stacks → (layers+1,)."""
    return np.sum(_unit(np.asarray(a, np.float64)) * _unit(np.asarray(b, np.float64)), axis=-1)


def consecutive_layer_similarity(hidden_states: np.ndarray) -> np.ndarray:
    """(layers+1, tokens, hidden) → (layers, tokens): cosine of each token between layer l and l+1."""
    unit = _unit(np.asarray(hidden_states, np.float64))
    return np.sum(unit[:-1] * unit[1:], axis=-1)


def curves_figure(curves: dict[str, Sequence[float]], title: str, ylabel: str = "cosine similarity"):
    """Line chart: x = layer (0 = embeddings), one line per named curve."""
    fig = new_figure((8, 4.8))
    ax = fig.subplots()
    for name, values in curves.items():
        ax.plot(range(len(values)), values, marker="o", label=name)
    n = max(len(v) for v in curves.values())
    ax.set_xticks(range(n), ["0\n(emb)"] + [str(i) for i in range(1, n)])
    ax.set(xlabel="layer", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.set_layout_engine("tight")
    return fig


@dataclass(frozen=True)
class MatrixStyle:
    """How ``heatmap_figure`` colours and labels a matrix (None: the data's range; annotate up to 200 cells)."""

    vmin: float | None = None
    vmax: float | None = None
    cmap: str | Colormap = "viridis"
    annotate: bool | None = None
    xlabel: str = ""
    ylabel: str = ""


def heatmap_figure(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    style: MatrixStyle | None = None,
):
    """A labelled heatmap, values printed in the cells when the grid is small enough to read."""
    style = style or MatrixStyle()
    matrix = np.asarray(matrix, dtype=np.float64)
    rows, cols = matrix.shape
    fig = new_figure((min(3 + 0.45 * cols, 28), min(2 + 0.42 * rows, 20)))
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap=style.cmap, vmin=style.vmin, vmax=style.vmax, aspect="auto")
    ax.set_xticks(range(cols), [str(c)[:30] for c in col_labels], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(rows), [str(r)[:50] for r in row_labels], fontsize=8)
    ax.set(xlabel=style.xlabel, ylabel=style.ylabel)
    if style.annotate if style.annotate is not None else rows * cols <= 200:
        # black on the light cells, white on the dark
        dark_above = (np.nanmax(matrix) + np.nanmin(matrix)) / 2
        for (i, j), value in np.ndenumerate(matrix):
            color = "black" if value > dark_above else "white"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color=color, in_layout=False)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.set_layout_engine("tight")
    return fig


def scores_figure(documents: Sequence[str], columns: dict[str, Sequence[float | None]]):
    """One horizontal bar chart per score (they live on different scales), documents on the y axis."""
    shown = {name: values for name, values in columns.items() if any(v is not None for v in values)}
    if not shown:
        raise CtxirError("no scores to plot: no model produced a score")
    labels = [f"{i + 1}. {d[:38]}{'…' if len(d) > 38 else ''}" for i, d in enumerate(documents)]
    fig = new_figure((4.4 * len(shown) + 2.5, 0.5 * len(documents) + 1.8))
    axes = fig.subplots(1, len(shown), sharey=True, squeeze=False)
    for ax, (name, values) in zip(axes[0], shown.items(), strict=True):
        vals = [np.nan if v is None else float(v) for v in values]
        colours = ["tab:green" if v == np.nanmax(vals) else "tab:blue" for v in vals]
        bars = ax.barh(range(len(vals)), vals, color=colours)
        ax.bar_label(bars, ["" if np.isnan(v) else f" {v:.3f}" for v in vals], fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.axvline(0, color="gray", lw=0.8)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(labels)), labels, fontsize=8)
    axes[0][0].invert_yaxis()
    fig.set_layout_engine("tight")
    return fig


def save_png(fig, path) -> str:
    """Write ``fig`` as PNG, drawn on ctxir's one drawing thread."""
    # a figure with a layout engine is fitted while drawn; "tight" would draw it twice
    tight = None if fig.get_layout_engine() is not None else "tight"
    _DRAWING.submit(fig.savefig, path, format="png", bbox_inches=tight).result()
    return str(path)
