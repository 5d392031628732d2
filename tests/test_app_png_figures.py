"""/attention and /score_pairs draw their matplotlib PNGs only when asked (issue #49 §3): each figure costs more than
the view, and gradio_client downloads every returned file on every call. Their last input, ``png_figures``, is False
unless sent; then no figure is built and the PNG outputs are None in their places. The page's follow-up step draws
the PNGs for its download list from the answer's JSON.

The callbacks are called here as Gradio calls them (an input a client did not send gets its default, as
``gradio_fixes.fill_missing_inputs`` fills it); every matplotlib figure built meanwhile is counted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxir.data.demo import demo_presets

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")

ATTENTION = (
    "bi-encoder",
    "I sat on the bank of the river.",
    "She deposited her salary at the bank.",
    "head",
    [],
    [],
    2,
    5,
)


@pytest.fixture(scope="module")
def application(app_state):
    import app

    return app.build_app(app_state, first_view="off")


@pytest.fixture(scope="module")
def demo(application):
    return application.demo


@pytest.fixture
def built(monkeypatch) -> list:
    """Every matplotlib figure built from now on."""
    from matplotlib.figure import Figure

    figures: list = []
    init = Figure.__init__

    def counted(self, *args, **kwargs):
        figures.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "__init__", counted)
    return figures


def endpoint(demo, api: str):
    return next(fn for fn in demo.fns.values() if fn.api_name == api)


def call(demo, api: str, *values):
    """The endpoint's callback with ``values``; inputs not given get their defaults, as a client that sends fewer."""
    block_fn = endpoint(demo, api)
    padded = [*values, *(block.value for block in block_fn.inputs[len(values) :])]
    return block_fn.fn(*padded)


def is_png(path) -> bool:
    return Path(path).read_bytes()[:4] == b"\x89PNG"


def test_the_png_input_is_last_but_the_prompts_and_off_by_default(demo):
    for api in ("attention", "score_pairs"):
        inputs = endpoint(demo, api).inputs
        at = next(i for i, block in enumerate(inputs) if type(block).__name__ == "Checkbox")
        assert inputs[at].value is False and inputs[at].label == "Also draw PNG figures (for download)", api
        # after it only the prompts, added later: an older client's positional call still leaves them out
        assert [block.label for block in inputs[at + 1 :]] in ([], ["Query prompt", "Document prompt"]), api


def test_attention_draws_no_figure_unless_asked(demo, built):
    _summary, iframe, html_file, heat, heads, _table, data = call(demo, "attention", *ATTENTION)
    assert (heat, heads) == (None, None) and built == []
    assert iframe.startswith("<iframe") and Path(html_file).is_file() and data["heatmap"]["head"] == 5
    _summary, _iframe, _html, heat, heads, _table, _data = call(demo, "attention", *ATTENTION, True)
    assert is_png(heat) and is_png(heads) and len(built) == 2


def test_score_pairs_draws_no_figure_unless_asked(demo, built):
    presets = demo_presets()
    documents = "\n".join(presets["pair_documents"])
    table, png, _formation, _tokens, data = call(demo, "score_pairs", presets["pair_query"], documents)
    assert png is None and built == []
    assert len(table) == len(data["scores"]) == 5
    _table, png, *_ = call(demo, "score_pairs", presets["pair_query"], documents, "", True)
    assert is_png(png) and len(built) == 1


@pytest.mark.parametrize(
    ("api", "downloads", "stems"),
    [
        ("attention", "Download: bertviz HTML", {"attention-heatmap", "head-summary"}),
        ("score_pairs", "Download: PNG", {"pair-scores"}),
    ],
)
@pytest.mark.parametrize("asked", [False, True])
def test_the_page_still_offers_the_pngs(application, built, monkeypatch, api, downloads, stems, asked):
    """A click (its endpoint, then the private follow-up, as the first view replays it): the download list has
    the PNGs whether the call drew them or not, each drawn once."""
    from ctxir.app.first_view import FirstView

    (chain,) = FirstView(
        application.demo, application.state, application.outputs, apis=(api,)
    ).chains.values()
    monkeypatch.setattr(chain[0].inputs[-1], "value", asked)  # the box as the visitor left it
    shown = FirstView._replay(chain)
    # the follow-up that lists the downloads (not necessarily the chain's last step: the model list's refresh is one)
    files = next(
        c for step in chain for c in step.outputs if str(getattr(c, "label", "")).startswith(downloads)
    )
    pngs = [Path(p) for p in shown[id(files)]["value"] if str(p).endswith(".png")]
    assert {p.stem.rsplit("-", 1)[0] for p in pngs} == stems and all(map(is_png, pngs))
    assert len(pngs) == len(stems) == len(built)  # drawn once: by the call when asked, else by the follow-up
