"""Attention figures from ``Internals`` (never a model): bertviz's views drawing offline, a heatmap, a head summary.

bertviz loads d3 and jQuery from cdnjs: here they come from ``mpld3`` and ``xstatic-jquery``, inlined."""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.resources
import itertools
import re
from collections.abc import Callable, Sequence

import numpy as np

from ctxir.types import CtxirError, Internals
from ctxir.viz.embeddings import MatrixStyle, heatmap_figure, new_figure

_CDN_SCRIPT = re.compile(r"<script[^>]*src=\"https?://[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE)
_REMOTE_LOAD = re.compile(r"(src|href)=[\"']?https?://|['\"]https?://[^'\"]*\.js['\"]", re.IGNORECASE)
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\s*\}\);", re.DOTALL)

# d3 and jQuery load first (setting window.d3 / window.jQuery); the shim hands them to bertviz's requirejs
_REQUIRE_SHIM = """
(function () {
  var modules = {jquery: window.jQuery, d3: window.d3};
  function requirejs(deps, callback) {
    var missing = deps.filter(function (d) { return !modules[d]; });
    if (missing.length) { throw new Error("offline bertviz: no module " + missing.join(", ")); }
    return callback.apply(window, deps.map(function (d) { return modules[d]; }));
  }
  requirejs.config = function () {};
  window.require = window.requirejs = requirejs;
})();
"""

# fit the iframe to the drawing: the body's own height (the document's scrollHeight could only grow it)
_AUTO_HEIGHT = """
(function () {
  function fit() {
    var frame = window.frameElement, body = document.body;
    if (frame && body) {
      frame.style.height = (Math.ceil(Math.max(body.scrollHeight, body.getBoundingClientRect().height)) + 20) + "px";
    }
  }
  window.addEventListener("load", function () {
    fit();
    if (window.ResizeObserver) { new ResizeObserver(fit).observe(document.body); }
  });
})();
"""


@functools.cache
def _package_script(package: str, file: str) -> str:
    """``file`` of the installed ``package`` (also its pip name)."""
    pip = package.replace(".pkg.", "-")
    try:
        path = importlib.resources.files(package) / file
    except ModuleNotFoundError as err:
        raise CtxirError(
            f"the attention view needs {file} from the {pip!r} package: pip install {pip}"
        ) from err
    if not path.is_file():
        raise CtxirError(f"{package} is installed but {path} is missing: reinstall it (pip install -U {pip})")
    return path.read_text(encoding="utf-8")


d3_v5_source = functools.partial(_package_script, "mpld3", "js/d3.v5.min.js")
jquery_source = functools.partial(_package_script, "xstatic.pkg.jquery", "data/jquery.min.js")


def _inline_script(source: str) -> str:
    return "<script>\n" + source.replace("</script", "<\\/script") + "\n</script>\n"


def offline_document(bertviz_html: str, title: str = "ctxir attention view") -> str:
    """bertviz's returned HTML → a standalone page that draws without any network access."""
    body = _CDN_SCRIPT.sub("", bertviz_html)
    body = _REQUIRE_CONFIG.sub("", body)
    # bertviz also writes its params into a trailing template-marker comment, doubling the page: drop it
    removed = "// (the params above were also written here by bertviz; removed)"
    body = re.sub(r"// HACK: .*? is a template marker[^\n]*", removed, body, count=1, flags=re.DOTALL)
    # tokens are user text inside the script's JSON: a token "</script>" must not end the element
    start = body.rfind("<script")
    start = body.index(">", start) + 1 if start >= 0 else -1
    end = body.rfind("</script>")
    if 0 <= start < end:
        body = body[:start] + body[start:end].replace("</", "<\\/") + body[end:]
    # check the code, not the attention JSON on bertviz's `const params = …` line
    params = body.find("const params = ")
    code = body if params < 0 else body[:params] + body[body.find("\n", params) :]
    if "cdnjs" in code or _REMOTE_LOAD.search(code):
        raise CtxirError(
            "bertviz's HTML still references an online URL after removing its CDN loads: "
            "this bertviz version is not supported offline (ctxir is tested with bertviz 1.4.1)"
        )
    head = "".join(map(_inline_script, (jquery_source(), d3_v5_source(), _REQUIRE_SHIM, _AUTO_HEIGHT)))
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>\n{head}</head>\n"
        '<body style="margin:0;background:white">\n' + body + "\n</body></html>\n"
    )


@functools.cache
def script_files() -> dict[str, str]:
    """The scripts ``offline_document`` inlines as name → source, each name carrying its source's hash."""
    sources = {"jquery": jquery_source(), "d3-v5": d3_v5_source()}
    return {f"{name}-{hashlib.sha256(s.encode()).hexdigest()[:12]}.min.js": s for name, s in sources.items()}


def with_script_urls(document: str, url: Callable[[str], str]) -> str:
    """``offline_document``'s page loading jQuery and d3 from ``url(name)``: a page of many views fetches them once."""
    for name, source in script_files().items():
        inlined = _inline_script(source)
        if inlined not in document:
            raise CtxirError(
                f"the attention page does not inline {name!r} as offline_document writes it: pass a document "
                "from ctxir.viz.offline_document"
            )
        document = document.replace(inlined, f'<script src="{html.escape(url(name))}"></script>\n', 1)
    return document


def iframe(document: str, height: str = "600px", title: str = "attention view", sandbox: bool = False) -> str:
    """``document`` in an ``<iframe srcdoc>`` for a ``gr.HTML`` value; ``sandbox``: no script, form or same origin."""
    sandboxed = ' sandbox=""' if sandbox else ""
    return (
        f'<iframe title="{html.escape(title)}"{sandboxed} srcdoc="{html.escape(document, quote=True)}" '
        f'style="width:100%;height:{height};border:0;background:white"></iframe>'
    )


def select_indices(requested: Sequence[int] | None, available: int, what: str) -> list[int]:
    chosen = sorted({int(i) for i in requested}) if requested else list(range(available))
    bad = [i for i in chosen if not 0 <= i < available]
    if bad:
        raise CtxirError(f"{what} {bad[0]!r} does not exist: this model has {what}s 0 to {available - 1}")
    return chosen


def check_attention_size(
    internals: Internals,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    max_tokens: int = 256,
    max_cells: int = 1_200_000,  # layers × heads × tokens² weights a view may carry (≈ 6 × 12 × 128²)
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
) -> str:
    """bertviz's head view or model view as a standalone HTML page that draws offline."""
    import torch
    from bertviz import head_view, model_view

    if view not in ("head", "model"):
        raise CtxirError(f"view {view!r} is not known: use one of head, model")
    layers, heads = check_attention_size(internals, layers, heads, max_tokens)
    # float64, so the rounded values print short
    rounded = np.round(internals.attentions.astype(np.float64), decimals)  # (layers, heads, tokens, tokens)
    shown = dict(sentence_b_start=internals.sentence_b_start, include_layers=layers, html_action="return")
    tokens = list(internals.tokens)
    if view == "head":  # head view has no head filter: pass only the chosen heads
        attention = [torch.from_numpy(weights[heads]).unsqueeze(0) for weights in rounded]
        html = head_view(attention, tokens, layer=layers[0], **shown).data
    else:
        attention = [torch.from_numpy(weights).unsqueeze(0) for weights in rounded]
        html = model_view(attention, tokens, include_heads=heads, display_mode="light", **shown).data
    return offline_document(html, title=f"ctxir attention {view} view")


def attention_weights_figure(
    weights, tokens: list[str], layer: int, head: int, sentence_b_start: int | None = None
):
    """One head's (tokens × tokens) weights as a matplotlib heatmap; rows attend to columns."""
    title = f"attention, layer {layer} head {head} (each row sums to 1)"
    axes = {"xlabel": "attended to (key)", "ylabel": "attending (query)"}
    style = MatrixStyle(0.0, annotate=len(tokens) <= 24, **axes)
    fig = heatmap_figure(weights, tokens, tokens, title, style)
    if sentence_b_start is not None:
        fig.axes[0].axhline(sentence_b_start - 0.5, color="white", lw=1)
        fig.axes[0].axvline(sentence_b_start - 0.5, color="white", lw=1)
    return fig


def head_summary(internals: Internals, decimals: int = 3) -> list[dict]:
    """Per (layer, head), mean over query tokens: entropy (nats), shares to [CLS]/[SEP]/self/neighbours, top weight."""
    attn = internals.attentions  # (layers, heads, tokens, tokens)
    n_layers, n_heads, n_tokens, _ = attn.shape
    tokens = internals.tokens
    cls = [i for i, t in enumerate(tokens) if t in ("[CLS]", "<s>")]
    sep = [i for i, t in enumerate(tokens) if t in ("[SEP]", "</s>")]
    shares = {  # each (layers, heads); [CLS] / separator shares 0 without such tokens
        "entropy": -(attn * np.log(np.clip(attn, 1e-12, None))).sum(-1).mean(-1),
        "to_cls": attn[..., cls].sum(-1).mean(-1),
        "to_sep": attn[..., sep].sum(-1).mean(-1),
        "to_self": np.diagonal(attn, axis1=2, axis2=3).mean(-1),
        "to_previous": np.diagonal(attn, offset=-1, axis1=2, axis2=3).sum(-1) / n_tokens,
        "to_next": np.diagonal(attn, offset=1, axis1=2, axis2=3).sum(-1) / n_tokens,
    }
    rows = []
    for layer, head in itertools.product(range(n_layers), range(n_heads)):
        i, j = divmod(int(np.argmax(attn[layer, head])), n_tokens)
        stats = {key: round(float(share[layer, head]), decimals) for key, share in shares.items()}
        top = round(float(attn[layer, head, i, j]), decimals)
        link = {"max_weight": top, "max_from": tokens[i], "max_to": tokens[j]}
        rows.append({"layer": layer, "head": head, **stats, **link})
    return rows


HEAD_STATS = {  # head_summary's columns the figures draw, with their titles
    "entropy": "entropy (nats; low = focused)",
    "to_cls": "share → [CLS]",
    "to_sep": "share → [SEP]",
    "to_self": "share → itself",
    "to_previous": "share → previous token",
    "to_next": "share → next token",
}


def head_summary_figure(rows: list[dict]):
    """Layers × heads grids of the summary's entropy and shares (``HEAD_STATS``)."""
    n_layers, n_heads = rows[-1]["layer"] + 1, rows[-1]["head"] + 1  # rows in (layer, head) order
    fig = new_figure((3.2 * len(HEAD_STATS), 0.45 * n_layers + 1.8))
    axes = fig.subplots(1, len(HEAD_STATS))
    for ax, (key, title) in zip(axes, HEAD_STATS.items(), strict=True):
        grid = np.reshape([r[key] for r in rows], (n_layers, n_heads))
        entropy = key == "entropy"  # in nats, unbounded; the shares run from 0 to 1
        image = ax.imshow(
            grid, cmap="magma" if entropy else "Blues", aspect="auto", vmin=0, vmax=None if entropy else 1
        )
        ax.set_title(title, fontsize=10)
        ax.set(xlabel="head", ylabel="layer", xticks=range(n_heads), yticks=range(n_layers))
        ax.tick_params(labelsize=7)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle("where each head looks (mean over query tokens)")
    fig.set_layout_engine("tight")
    return fig
