"""The link under a view's answer that reopens its tab with the same inputs and runs it again."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gradio as gr
from gradio.context import get_blocks_context
from starlette.datastructures import QueryParams

from ctxir.app.ui import PRIVATE, user_error

PARAMETER = "endpoint"  # the link's view (gradio's page uses ``view`` and ``deep_link`` for itself)
LINKED = ("search", "score_pairs", "attention")  # the endpoints whose tab shows a link, in page order

# the link's copy button; the link itself also opens in a new tab (a right click copies it in any browser)
COPY = (
    "element.addEventListener('click', (event) => { const button = event.target.closest('[data-copy-link]'); "
    "if (!button) { return; } const link = element.querySelector('a[data-link]'); "
    "const said = (text) => { button.textContent = text; setTimeout(() => { button.textContent = 'Copy link'; }, 2000); }; "
    "if (!link || !navigator.clipboard) { said('copy the link above with a right click'); return; } "
    "navigator.clipboard.writeText(link.href).then(() => said('Copied'), () => said('copy it with a right click')); });"
)


@dataclass
class View:
    """One view's link: where it is shown, the hidden box that runs the view, the view's inputs by name."""

    api: str
    html: Any
    run: Any
    fields: dict[str, Any] = field(default_factory=dict)

    def shows(self, event) -> None:
        """After ``event`` (from its button or a link): the link to its inputs on success, none on failure."""
        if not self.fields:
            block_fn = get_blocks_context().fns[event["id"]]
            self.fields = {
                name: block
                for name, block in zip(block_fn.input_parameter_names, block_fn.inputs, strict=True)
                if name and getattr(block, "visible", True) is not False
            }
            self._open_from_links()
        names = list(self.fields)

        def view_link(*values):
            return link_html(self.api, dict(zip(names, values, strict=True)))

        event.success(view_link, list(self.fields.values()), [self.html], show_progress="hidden", **PRIVATE)
        event.failure(lambda: "", None, [self.html], show_progress="hidden", **PRIVATE)

    def _open_from_links(self) -> None:
        tab = self.html.parent  # the gr.Tab the link is in (every linked view's is), then its gr.Tabs
        while not isinstance(tab, gr.Tab):
            tab = tab.parent
        outputs = [tab.parent, self.run, *self.fields.values()]

        def open_link(request: gr.Request):
            return opens(self, tab, _query(request))

        get_blocks_context().root_block.load(open_link, None, outputs, show_progress="hidden", **PRIVATE)


def offer(api: str, elem_id: str) -> View:
    """Inside a tab's build: the link's place and the hidden box that runs the view from a link."""
    # a hidden box, not a gr.State: a State "changes" on every update (a skipped one too), so each load ran the view
    run = gr.Textbox("", visible=False, elem_id=f"{elem_id}-run")
    return View(api, gr.HTML("", elem_id=elem_id, js_on_load=COPY), run)


def _query(request: gr.Request | None) -> dict[str, list[str]]:
    """The page's query parameters, each name with all its values (a list input repeats its name)."""
    out: dict[str, list[str]] = {}
    for key, value in (getattr(request, "query_params", None) or QueryParams()).multi_items():
        out.setdefault(key, []).append(value)
    return out


def link_query(api: str, values: dict[str, Any]) -> str:
    """The query string of a link to ``api`` with ``values`` ({parameter: what the event received})."""
    pairs = [(PARAMETER, api)]
    for name, value in values.items():
        if value is None:
            continue
        items = value if isinstance(value, list | tuple) else [value]
        pairs += [(name, _text(item)) for item in items] or [(name, "")]
    return urlencode(pairs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def link_html(api: str, values: dict[str, Any]) -> str:
    """The link shown under a view's answer: relative (``?…``)."""
    href = html.escape("?" + link_query(api, values))
    return (
        f'<div class="ctxir-link"><a data-link href="{href}" target="_blank" rel="noopener">Link to this view</a> '
        '<span class="ctxir-link-note">(opens this tab with these inputs and runs it again)</span> '
        '<button type="button" data-copy-link>Copy link</button></div>'
    )


def opens(view: View, tab, query: dict[str, list[str]]) -> list:
    """What a page opened on ``query`` shows for ``view``: its tab selected."""
    skip = [gr.skip() for _ in range(2 + len(view.fields))]
    api = (query.get(PARAMETER) or [None])[-1]
    if api is None:
        return skip
    if api not in LINKED:
        if view.api != LINKED[0]:
            return skip  # said once, by the first view's load
        raise user_error(
            f"the link's {PARAMETER}={api!r} is not a view this app links to: use one of "
            f"{', '.join(map(repr, LINKED))}, or open the app's address without it"
        )
    if api != view.api:
        return skip
    values = [
        value_for(component, name, query[name]) if name in query else gr.skip()
        for name, component in view.fields.items()
    ]
    return [gr.Tabs(selected=tab.id if tab.id is not None else tab._id), str(time.time_ns()), *values]


def value_for(component, name: str, texts: list[str]) -> Any:
    """The value a link's ``texts`` for parameter ``name`` set ``component`` to."""
    if isinstance(component, gr.CheckboxGroup):  # ``layers=`` (no value): none chosen
        choices = {str(value): value for _, value in component.choices}
        return [choices.get(text, text) for text in texts if text != ""]
    text = texts[-1]
    if isinstance(component, gr.Number | gr.Slider):
        try:
            number = float(text)
        except ValueError:
            raise user_error(
                f"the link's {name}={text!r} is not a number: write a number such as {name}=5, or leave "
                f"{name} out for its default"
            ) from None
        return int(number) if number.is_integer() else number
    if isinstance(component, gr.Checkbox):
        if text.lower() not in ("true", "false", "1", "0"):
            raise user_error(f"the link's {name}={text!r} is not true or false: write true or false")
        return text.lower() in ("true", "1")
    return text
