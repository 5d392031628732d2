"""Attention figures from ``Internals`` (never a model): bertviz views made offline, a heatmap, a per-head summary.

bertviz's HTML embeds every attention weight as JSON text; at 64 tokens and full float precision
that is 12.6 MiB. Weights are rounded (3 decimals by default), the layers/heads can be limited, and
``check_attention_size`` refuses views that would still be too big to send to a browser.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxir.types import CtxirError, Internals
from ctxir.viz.embeddings import new_figure
from ctxir.viz.offline import offline_document

VIEWS = ("head", "model")
# layers × heads × tokens² weights a view may carry (≈ 6 layers × 12 heads × 128²): ~7 MiB of HTML.
MAX_ATTENTION_CELLS = 1_200_000


def select_indices(requested: Sequence[int] | None, available: int, what: str) -> list[int]:
    """Checked, sorted, de-duplicated indices; None or [] means all ``available``."""
    if not requested:
        return list(range(available))
    chosen = sorted({int(i) for i in requested})
    bad = [i for i in chosen if not 0 <= i < available]
    if bad:
        raise CtxirError(f"{what} {bad[0]!r} does not exist: this model has {what}s 0 to {available - 1}")
    return chosen


def check_attention_size(
    internals: Internals,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    max_tokens: int = 256,
    max_cells: int = MAX_ATTENTION_CELLS,
) -> tuple[list[int], list[int]]:
    """Refuse inputs whose view would be too large; return the (layers, heads) to draw."""
    n_layers, n_heads, n_tokens, _ = internals.attentions.shape
    layers = select_indices(layers, n_layers, "layer")
    heads = select_indices(heads, n_heads, "head")
    if n_tokens > max_tokens:
        raise CtxirError(
            f"the input has {n_tokens} tokens but the attention view draws at most {max_tokens}: "
            "shorten the text (or the document of the pair)"
        )
    cells = len(layers) * len(heads) * n_tokens**2
    if cells > max_cells:
        fit = max(1, max_cells // (n_tokens**2 * len(heads)))
        raise CtxirError(
            f"{len(layers)} layers × {len(heads)} heads at {n_tokens} tokens is {cells:,} attention "
            f"weights, more than the {max_cells:,} one view can carry: choose at most {fit} layer(s) "
            "or fewer heads, or shorten the text"
        )
    return layers, heads


def bertviz_document(
    internals: Internals,
    view: str = "head",
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    decimals: int = 3,
    max_tokens: int = 256,
    max_cells: int = MAX_ATTENTION_CELLS,
) -> str:
    """bertviz's head view or model view as a standalone HTML page that draws offline."""
    # lazy: torch takes about a second to import; bertviz is needed only for its view
    import torch
    from bertviz import head_view, model_view

    if view not in VIEWS:
        raise CtxirError(f"view {view!r} is not known: use one of {', '.join(VIEWS)}")
    layers, heads = check_attention_size(internals, layers, heads, max_tokens, max_cells)
    # float64 so `tolist()` writes 0.123, not float32's 0.12300000339746475: the rounding is what shrinks the HTML.
    rounded = np.round(internals.attentions.astype(np.float64), decimals)  # (layers, heads, tokens, tokens)
    tokens = list(internals.tokens)
    b_start = internals.sentence_b_start
    if view == "head":
        # head view has no head filter: pass only the chosen heads (shown as the first len(heads) colours).
        attention = [torch.from_numpy(rounded[i][heads]).unsqueeze(0) for i in range(rounded.shape[0])]
        html = head_view(
            attention,
            tokens,
            sentence_b_start=b_start,
            include_layers=layers,
            layer=layers[0],
            html_action="return",
        ).data
    else:
        attention = [torch.from_numpy(rounded[i]).unsqueeze(0) for i in range(rounded.shape[0])]
        html = model_view(
            attention,
            tokens,
            sentence_b_start=b_start,
            include_layers=layers,
            include_heads=heads,
            display_mode="light",
            html_action="return",
        ).data
    return offline_document(html, title=f"ctxir attention {view} view")


def attention_heatmap(internals: Internals, layer: int, head: int, decimals: int = 3):
    """(tokens × tokens) weights of one head as a matplotlib figure; rows attend to columns."""
    n_layers, n_heads, _, _ = internals.attentions.shape
    select_indices([layer], n_layers, "layer")
    select_indices([head], n_heads, "head")
    return attention_weights_figure(
        internals.attentions[layer, head], internals.tokens, layer, head, internals.sentence_b_start
    )


def attention_weights_figure(
    weights, tokens: list[str], layer: int, head: int, sentence_b_start: int | None = None
):
    """``attention_heatmap`` from the weights themselves ((tokens × tokens), e.g. the rounded ones of the app's
    JSON): the app draws its PNG after the answer from what the answer sent."""
    weights = np.asarray(weights, dtype=np.float64)
    n_tokens = len(tokens)
    if weights.shape != (n_tokens, n_tokens):
        raise CtxirError(
            f"attention weights have shape {weights.shape} but {n_tokens} tokens need ({n_tokens}, {n_tokens}): "
            "pass one head's weights for these tokens"
        )
    size = min(4 + 0.22 * n_tokens, 30)
    fig = new_figure((size + 1.5, size))
    ax = fig.subplots()
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(float(weights.max()), 1e-6))
    # Every token up to 80; beyond that every k-th (thousands of tick objects make the figure slow to build).
    step = -(-n_tokens // 80)
    ticks = list(range(0, n_tokens, step))
    ax.set_xticks(ticks, [tokens[i] for i in ticks], rotation=90, fontsize=8)
    ax.set_yticks(ticks, [tokens[i] for i in ticks], fontsize=8)
    ax.set_xlabel("attended to (key)")
    ax.set_ylabel("attending (query)")
    if sentence_b_start is not None:
        edge = sentence_b_start - 0.5
        ax.axhline(edge, color="white", lw=1)
        ax.axvline(edge, color="white", lw=1)
    if n_tokens <= 24:
        for i in range(n_tokens):
            for j in range(n_tokens):
                value = weights[i, j]
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="black" if value > 0.6 * weights.max() else "white",
                    in_layout=False,  # inside its cell: the layout need not measure every value
                )
    ax.set_title(f"attention, layer {layer} head {head} (each row sums to 1)")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.set_layout_engine("tight")
    return fig


def head_summary(internals: Internals, decimals: int = 3) -> list[dict]:
    """One row per (layer, head): where the head looks, averaged over query tokens.

    entropy (nats; low = focused), share of attention to [CLS], to separator tokens, to the token itself,
    to the previous and the next token, and the strongest single weight with its (from, to) tokens.
    """
    attn = internals.attentions  # (layers, heads, tokens, tokens)
    n_layers, n_heads, n_tokens, _ = attn.shape
    tokens = internals.tokens
    special = {"[CLS]": [], "[SEP]": []}
    for i, t in enumerate(tokens):
        if t in ("[CLS]", "<s>"):
            special["[CLS]"].append(i)
        elif t in ("[SEP]", "</s>"):
            special["[SEP]"].append(i)
    entropy = -(attn * np.log(np.clip(attn, 1e-12, None))).sum(-1).mean(-1)  # (layers, heads)
    to_cls = (
        attn[..., special["[CLS]"]].sum(-1).mean(-1) if special["[CLS]"] else np.zeros((n_layers, n_heads))
    )
    to_sep = (
        attn[..., special["[SEP]"]].sum(-1).mean(-1) if special["[SEP]"] else np.zeros((n_layers, n_heads))
    )
    diag = np.diagonal(attn, axis1=2, axis2=3)  # (layers, heads, tokens)
    self_share = diag.mean(-1)
    prev_share = (
        np.diagonal(attn, offset=-1, axis1=2, axis2=3).sum(-1) / n_tokens if n_tokens > 1 else 0 * self_share
    )
    next_share = (
        np.diagonal(attn, offset=1, axis1=2, axis2=3).sum(-1) / n_tokens if n_tokens > 1 else 0 * self_share
    )
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            flat = int(np.argmax(attn[layer, head]))
            i, j = divmod(flat, n_tokens)
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "entropy": round(float(entropy[layer, head]), decimals),
                    "to_cls": round(float(to_cls[layer, head]), decimals),
                    "to_sep": round(float(to_sep[layer, head]), decimals),
                    "to_self": round(float(self_share[layer, head]), decimals),
                    "to_previous": round(float(prev_share[layer, head]), decimals),
                    "to_next": round(float(next_share[layer, head]), decimals),
                    "max_weight": round(float(attn[layer, head, i, j]), decimals),
                    "max_from": tokens[i],
                    "max_to": tokens[j],
                }
            )
    return rows


def head_summary_figure(rows: list[dict]):
    """Layers × heads grids of the summary's entropy and [CLS]/[SEP]/self/previous shares."""
    n_layers = max(r["layer"] for r in rows) + 1
    n_heads = max(r["head"] for r in rows) + 1
    stats = [
        ("entropy", "entropy (nats)"),
        ("to_cls", "→ [CLS]"),
        ("to_sep", "→ [SEP]"),
        ("to_self", "→ itself"),
        ("to_previous", "→ previous token"),
    ]
    fig = new_figure((3.2 * len(stats), 0.45 * n_layers + 1.8))
    axes = fig.subplots(1, len(stats))
    for ax, (key, title) in zip(axes, stats, strict=True):
        grid = np.zeros((n_layers, n_heads))
        for r in rows:
            grid[r["layer"], r["head"]] = r[key]
        image = ax.imshow(
            grid,
            cmap="magma" if key == "entropy" else "Blues",
            aspect="auto",
            vmin=0,
            vmax=None if key == "entropy" else 1,
        )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=7)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle("where each head looks (mean over query tokens)")
    fig.set_layout_engine("tight")
    return fig
