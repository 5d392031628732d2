"""What every tab's UI shares: the ``Ui`` context, the callback guard, tables and downloads."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from ctxir.app.models import BI_ENCODER
from ctxir.app.outputs import Outputs
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import display_text
from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")


def user_error(message: Any) -> gr.Error:
    """The one way a message reaches a person's error pop-up."""
    error = gr.Error(display_text(message), print_exception=False)
    error.plain_message = str(message)
    return error


def from_browser(request: Any) -> bool:
    """Whether a request came from a web page (which renders an error as HTML): the app's, or one calling the API."""
    if request is None:
        return True
    headers = {str(k).lower(): str(v).lower() for k, v in (getattr(request, "headers", None) or {}).items()}
    user = headers.get("x-gradio-user")
    return user == "app" if user else "sec-fetch-mode" in headers


def guard(fn):
    """CtxirError → gr.Error with its message; anything unexpected → gr.Error too (logged), never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except CtxirError as err:
            raise user_error(err) from None
        except Exception as err:
            logger.exception("unexpected error in %s", fn.__name__)
            raise user_error(
                f"unexpected {type(err).__name__} in {fn.__name__}: {err}. The app is still running; "
                "please report the input that caused it."
            ) from None

    return wrapper


def warn(result: ViewResult) -> None:
    """A result's warnings as Gradio warning pop-ups: escaped for a web page."""
    from gradio.context import LocalContext

    browser = from_browser(LocalContext.request.get(None))
    for warning in result.data.get("warnings") or []:
        gr.Warning(display_text(warning) if browser else str(warning))


def frame(rows: list[dict], columns: list[str] | None = None, drop_empty: bool = False) -> pd.DataFrame:
    """A table of ``rows``; with ``drop_empty`` the columns no row has a value in are left out."""
    table = pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns or ["(no rows)"])
    return table.dropna(axis="columns", how="all") if drop_empty and rows else table


def shares(pixels: list[int]) -> list[str]:
    """Column widths as percentages of their sum (Gradio resolves a percentage against the table's box)."""
    total = sum(pixels) or 1
    return [f"{100 * w / total:.2f}%" for w in pixels]


# px; a score or rank column fits its header, the text the rest
WIDTHS = {"rank": 60, "move": 70, "doc_id": 120, "title": 170}


def column_widths(
    columns: list[str], total: int = 1180, wide: str = "text", share: bool = False
) -> list[str]:
    """Widths that fit a laptop's page (about 1,200 px), the ``wide`` column wrapping in what is left."""
    fixed = {c: WIDTHS.get(c, max(80, round(8.5 * len(c)) + 30)) for c in columns if c != wide}
    text = max(340, total - sum(fixed.values()))
    pixels = [fixed.get(c, text) for c in columns]
    return shares(pixels) if share else [f"{w}px" for w in pixels]


def plot(label: str, elem_id: str | None = None, **kwargs) -> gr.Plot:
    """A figure, hidden until its view first ran."""
    return gr.Plot(label=label, visible=False, elem_id=elem_id, **kwargs)


def show(value: Any = None, **changes) -> dict:
    """An update that shows a component (hidden until its view first ran), with ``value`` when given."""
    return gr.update(visible=True, **({} if value is None else {"value": value}), **changes)


def exports(
    out: Outputs, stem: str, *, data: Any = None, rows: list[dict] | None = None, plots=(), files=()
) -> list[str]:
    """A view's downloads in ``out``: ``files`` already written (PNG, bertviz HTML), then the others written."""
    from ctxir.app.figures import html_document

    paths = [str(f) for f in files if f]
    if plots:
        js = out.plotly_js()
        paths += [out.html(html_document(list(plots), f"ctxir {stem}", plotly_js=js.name), stem), str(js)]
    if rows:
        paths.append(out.csv(rows, stem))
    if data is not None:
        paths.append(out.json(data, stem))
    return paths


PLOTLY_JS = "plotly-*.min.js"  # the name pattern of Outputs.plotly_js


def without_plotly_js(paths: list[str]) -> list[str]:
    """``paths`` less the shared plotly.js (4.6 MB): an API answer lists the interactive page, not its script."""
    return [p for p in paths if not Path(p).match(PLOTLY_JS)]


def with_plotly_js(paths: list[str]) -> list[str]:
    """``paths`` and the shared plotly.js an interactive HTML page among them loads (the page's downloads)."""
    paths = [str(p) for p in paths]
    pages = [Path(p) for p in paths if p.endswith(".html")]
    shared = sorted(pages[0].parent.glob(PLOTLY_JS)) if pages else []
    return paths + [str(p) for p in shared if str(p) not in paths]


PRIVATE = {"queue": False, "api_visibility": "private"}  # a page-only step, run at once


# a callback's progress bar: Gradio gives a parameter that defaults to a Progress a new one each call
PROGRESS = gr.Progress()


def steps(progress: gr.Progress):
    """A ``Progress`` callback (fraction, what) that reports to Gradio's progress bar."""
    return lambda fraction, what: progress(fraction, desc=what)


def downloads(what: str):
    """The downloads of an answer (hidden until it arrives)."""
    return gr.File(label=f"Download: {what}", file_count="multiple", visible=False)


# the app's own elem_ids and classes only
CSS = """
.ctxir-intro p { margin: 0 0 .3em 0; }
.ctxir-status p { margin: 0; font-size: var(--text-sm); }
.ctxir-indexing { background: #fff4d6; border-radius: 6px; padding: 4px 10px; }
.ctxir-indexing p { margin: 0; font-size: var(--text-sm); }
.ctxir-table th, .ctxir-table th * { white-space: nowrap !important; overflow-wrap: normal !important;
  word-break: keep-all !important; }
.ctxir-table td { vertical-align: top; }
.ctxir-table td, .ctxir-table td * { overflow-wrap: anywhere; }
/* downloads show each file's whole name, wrapped where the screen is narrow (Gradio cut the stem with "…") */
.filename { display: block !important; overflow-wrap: anywhere; }
.filename .stem { display: inline; white-space: normal !important; text-overflow: clip !important; }
/* search results: the table on a wide screen, cards on a phone (search_tab.result_cards) */
#search-cards { display: none; }
.ctxir-cards { display: flex; flex-direction: column; gap: 8px; }
.ctxir-card { display: block; width: 100%; text-align: left; padding: 10px 12px; font: inherit; color: inherit;
  border: 1px solid var(--border-color-primary); border-radius: 8px; background: var(--block-background-fill);
  cursor: pointer; }
.ctxir-card > span { display: block; overflow-wrap: anywhere; }
.ctxir-card-title { font-weight: 700; }  /* no <b>: the security tests treat every <b> as injected markup */
.ctxir-card-id, .ctxir-card-scores { color: var(--body-text-color-subdued); font-size: var(--text-sm); }
.ctxir-card-scores { margin: 2px 0 4px; font-family: var(--font-mono); }
@media (max-width: 640px) {
  h1 { font-size: 1.35rem !important; }
  .ctxir-status p { font-size: 12px; }
  #search-results { display: none !important; }
  #search-cards { display: block; }
  /* a table sized in shares of its box keeps a readable width and scrolls inside it */
  .ctxir-wide-table .virtual-table-viewport { min-width: 960px; }
  /* these tables fit the screen instead: equal columns, every cell wrapped (a grid of set widths too) */
  .ctxir-fit-table table { table-layout: fixed !important; width: 100% !important; min-width: 0 !important; }
  .ctxir-fit-table th, .ctxir-fit-table td { width: auto !important; min-width: 0 !important;
    max-width: none !important; }
  .ctxir-fit-table th, .ctxir-fit-table th *, .ctxir-fit-table td, .ctxir-fit-table td *,
  .ctxir-fit-table .body-cell, .ctxir-fit-table .body-cell * {
    white-space: normal !important; overflow-wrap: anywhere !important; word-break: normal !important; }
  .ctxir-fit-table .virtual-table-viewport, .ctxir-fit-table .virtual-body { height: auto !important;
    max-height: none !important; }
  .ctxir-fit-table .virtual-row { position: static !important; transform: none !important; width: 100% !important; }
  .ctxir-fit-table .body-cell { flex: 1 1 0 !important; width: auto !important; min-width: 0 !important; }
  /* no plot toolbar on a phone: it covered the plot's label and titles, and a tap shows the values anyway */
  .js-plotly-plot .modebar-container { display: none !important; }
}
"""


@dataclass
class Ui:
    """What a tab builder needs: the loaded state, the output folder, and the visitor of a request."""

    state: AppState
    out: Outputs
    plot = staticmethod(plot)
    downloads = staticmethod(downloads)

    @staticmethod
    def table(
        elem_id: str | None = None, label: str | None = None, *classes: str, value=None, **kwargs
    ) -> gr.Dataframe:
        """A wrapped table, hidden until its view ran unless ``value`` holds headers; ``classes``: "fit", "wide"."""
        names = ["ctxir-table", *(f"ctxir-{c}-table" for c in classes)]  # how a phone shows it (CSS)
        shown = value is not None
        return gr.Dataframe(
            value, label=label, wrap=True, elem_id=elem_id, elem_classes=names, visible=shown, **kwargs
        )

    @staticmethod
    def numbers():
        """The answer's numbers, in a closed accordion."""
        with gr.Accordion("Numbers (JSON)", open=False):
            return gr.JSON(label="numbers", show_label=False)

    @staticmethod
    def summary(elem_id: str, name: str = "summary") -> gr.Markdown:
        """The line above an answer; ``name``: the API's name for an output with no label on the page."""
        return gr.Markdown(elem_id=elem_id, label=name, show_label=False)

    @staticmethod
    def returned(name: str) -> gr.File:
        """A file the API returns under ``name``, hidden on the page (its downloads list it)."""
        return gr.File(label=name, show_label=False, visible=False)

    @staticmethod
    def tab_intro(text: str) -> None:
        """The one or two lines at the top of a tab that say what it is for."""
        gr.Markdown(text, elem_classes=["ctxir-intro"])

    @staticmethod
    def png_wanted() -> gr.Checkbox:
        """The API's ``png_figures`` input, hidden: the page's downloads have the PNGs either way."""
        return gr.Checkbox(label="Also draw PNG figures (for download)", value=False, visible=False)

    @staticmethod
    def view_event(
        triggers, fn, inputs, outputs, api_name=None, *, empty=(), hide=(), after=None, after_queue=True
    ):
        """``fn`` on ``triggers`` (public as ``api_name``), ``empty`` and ``hide`` cleared first."""
        blank = [""] * len(empty) + [gr.update(visible=False)] * len(hide)
        api = {"api_name": api_name} if api_name else {"api_visibility": "private"}
        event = gr.on(
            triggers if isinstance(triggers, list) else [triggers],
            lambda: tuple(blank) if len(blank) > 1 else blank[0],
            None,
            [*empty, *hide],
            **PRIVATE,
        ).then(fn, inputs, outputs, **api)
        if after:
            event.success(*after, api_visibility="private", **({} if after_queue else {"queue": False}))
        return event

    def __post_init__(self):
        self.config, self.models = self.state.config, self.state.models

    def visitor(self) -> str:
        """Whose request this event is (Gradio's session hash; "" for a raw HTTP call), marked active."""
        from gradio.context import LocalContext

        owner = getattr(LocalContext.request.get(None), "session_hash", None) or ""
        self.state.uploads.touch(owner)
        return owner

    def model_dropdown(self, **kwargs) -> gr.Dropdown:
        """The inspection views' model: one loaded at start, or any Hub id, loaded on demand (AppModels.inspectable)."""
        choices, info = self.models.inspect_choices(), self.config.any_model_note()
        return gr.Dropdown(
            choices, value=BI_ENCODER, label="Model", allow_custom_value=True, info=info, **kwargs
        )

    def offer_loaded_models(self, event, dropdown) -> None:
        """Once ``event`` succeeded, ``dropdown`` offers the models loaded by name since."""
        event.success(lambda: gr.update(choices=self.models.inspect_choices()), None, [dropdown], **PRIVATE)
