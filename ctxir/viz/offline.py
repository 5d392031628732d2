"""Make bertviz's HTML work with no internet, from JavaScript that installed PyPI packages ship.

bertviz 1.4.1 (``html_action="return"``) emits a ``<script src=…cdnjs…/require.min.js>`` tag and a
``require.config`` that points d3 v5 and jQuery at cdnjs: offline it draws nothing. Here the CDN
loads are removed and replaced by d3 v5 from ``mpld3`` and jQuery from ``xstatic-jquery``, inlined
into one standalone document, plus a ten-line ``require`` shim (bertviz only calls
``require.config`` and ``requirejs([...], callback)``). No third-party code is committed to ctxir.

A ``<script>`` inside a ``gr.HTML`` value does not run, so the document is shown in an
``<iframe srcdoc=…>`` (``iframe``), which does; a page that serves jQuery and d3 itself shows it with the two as
files it links (``with_script_urls``), the standalone document staying the download.
"""

from __future__ import annotations

import functools
import hashlib
import html
import re
from collections.abc import Callable
from pathlib import Path

from ctxir.types import CtxirError

_CDN_SCRIPT = re.compile(r"<script[^>]*src=\"https?://[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE)
# bertviz's head_view.js / model_view.js start with `require.config({ paths: {...} });`
_REMOTE_LOAD = re.compile(r"(src|href)=[\"']?https?://|['\"]https?://[^'\"]*\.js['\"]", re.IGNORECASE)
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\s*\}\);", re.DOTALL)

# d3 and jQuery are loaded first (no `define` exists yet, so they set window.d3 / window.jQuery);
# the shim then hands them to bertviz's `requirejs(['jquery', 'd3'], fn)`.
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

# Fit the iframe to the drawing: no inner scrollbar, and no blank space under it. The body's own height, not the
# document's scrollHeight, which is never less than the frame's height and so could only grow it.
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
def d3_v5_source() -> str:
    """d3 v5 (minified) as shipped in the ``mpld3`` wheel."""
    try:
        import mpld3
    except ImportError as err:
        raise CtxirError(
            "the attention view needs d3 v5 from the 'mpld3' package: pip install mpld3"
        ) from err
    path = Path(mpld3.__file__).parent / "js" / "d3.v5.min.js"
    if not path.is_file():
        raise CtxirError(f"mpld3 is installed but {path} is missing: reinstall mpld3 (pip install -U mpld3)")
    return path.read_text(encoding="utf-8")


@functools.cache
def jquery_source() -> str:
    """jQuery (minified) as shipped in the ``xstatic-jquery`` wheel."""
    try:
        from xstatic.pkg import jquery
    except ImportError as err:
        raise CtxirError(
            "the attention view needs jQuery from the 'xstatic-jquery' package: pip install xstatic-jquery"
        ) from err
    path = Path(jquery.BASE_DIR) / "jquery.min.js"
    if not path.is_file():
        raise CtxirError(f"xstatic-jquery is installed but {path} is missing: reinstall xstatic-jquery")
    return path.read_text(encoding="utf-8")


def _inline_script(source: str) -> str:
    # "</script" inside a script body would end the element early.
    return "<script>\n" + source.replace("</script", "<\\/script") + "\n</script>\n"


def _drop_params_comment(body: str) -> str:
    """bertviz fills its params into a trailing `// HACK: PYTHON_PARAMS is a template marker…` comment too,
    doubling the page; keep only the real copy."""
    marker = "// HACK: "
    start = body.find(marker)
    end = body.find(" is a template marker", start)
    if start < 0 or end < 0:
        return body
    return (
        body[:start]
        + "// (the params above were also written here by bertviz; removed)"
        + body[body.find("\n", end) :]
    )


def offline_document(bertviz_html: str, title: str = "ctxir attention view", auto_height: bool = True) -> str:
    """bertviz's returned HTML → a standalone page that draws without any network access."""
    body = _CDN_SCRIPT.sub("", bertviz_html)
    body = _REQUIRE_CONFIG.sub("", body)
    body = _drop_params_comment(body)
    # Tokens are user text inside the script's JSON: a token "</script>" must not end the element.
    start = body.rfind("<script")
    start = body.index(">", start) + 1 if start >= 0 else -1
    end = body.rfind("</script>")
    if 0 <= start < end:
        body = body[:start] + body[start:end].replace("</", "<\\/") + body[end:]
    # Check the code, not the megabytes of attention JSON on bertviz's `const params = …` line.
    params = body.find("const params = ")
    code = body if params < 0 else body[:params] + body[body.find("\n", params) :]
    if "cdnjs" in code or _REMOTE_LOAD.search(code):
        raise CtxirError(
            "bertviz's HTML still references an online URL after removing its CDN loads: "
            "this bertviz version is not supported offline (ctxir is tested with bertviz 1.4.1)"
        )
    head = (
        _inline_script(jquery_source())
        + _inline_script(d3_v5_source())
        + _inline_script(_REQUIRE_SHIM)
        + (_inline_script(_AUTO_HEIGHT) if auto_height else "")
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>\n{head}</head>\n"
        '<body style="margin:0;background:white">\n' + body + "\n</body></html>\n"
    )


@functools.cache
def script_files() -> dict[str, str]:
    """The scripts ``offline_document`` inlines, as files a page can share: name → source. Each name carries its
    source's hash, so a browser's cached copy of an older one is never used."""
    sources = {"jquery": jquery_source(), "d3-v5": d3_v5_source()}
    return {f"{name}-{hashlib.sha256(s.encode()).hexdigest()[:12]}.min.js": s for name, s in sources.items()}


def with_script_urls(document: str, url: Callable[[str], str]) -> str:
    """``document`` (``offline_document``'s) loading jQuery and d3 from ``url(name)``, ``name`` one of
    ``script_files``, instead of inlining them (340 KB of its ~440 KB): a page that shows view after view fetches
    them once. The document still draws offline wherever those URLs are served; downloads keep the standalone one."""
    for name, source in script_files().items():
        inlined = _inline_script(source)
        if inlined not in document:
            raise CtxirError(
                f"the attention page does not inline {name!r} as offline_document writes it: pass a document "
                "from ctxir.viz.offline_document"
            )
        document = document.replace(inlined, f'<script src="{html.escape(url(name))}"></script>\n', 1)
    return document


def iframe(document: str, height: int = 600, title: str = "attention view") -> str:
    """An ``<iframe srcdoc=…>`` that runs ``document``'s scripts inside a ``gr.HTML`` value."""
    return (
        f'<iframe title="{html.escape(title)}" srcdoc="{html.escape(document, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:0;background:white"></iframe>'
    )
