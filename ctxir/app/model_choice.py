"""The model choices of the app's forms: "Explain with" (Explain tab, Search results, Pair scoring) and the
Search re-ranker. A choice lists what is loaded, the kinds loaded at start and the cross-encoders loaded by
Hub id since (one bounded cache, shared by every visitor); an API client may send a Hub id that no choice
lists yet, and a Load button loads one for the page."""

from __future__ import annotations

import gradio as gr

from ctxir.app.gradio_fixes import accept_model_ids, refuse_unloaded
from ctxir.app.models import BI_ENCODER, AppModels
from ctxir.app.ui import Ui, guard
from ctxir.encoders.on_demand import check_model_name
from ctxir.rerank.registry import CROSS_ENCODER, RERANKERS


def model_choices(models: AppModels) -> list[str]:
    """ "Explain with" choices: auto, the bi-encoder, each re-ranker kind loaded at start (one that is not
    loaded is not offered; the page's top line says why), then the cross-encoders loaded by Hub id now
    (shared by every visitor, least recently used first)."""
    return ["auto", BI_ENCODER, *models.loaded, *models.extra_models(CROSS_ENCODER.name)]


def explain_with(models: AppModels, **kwargs) -> gr.Radio:
    """The "Explain with" radio of the Explain tab, the Search results and Pair scoring: the choices above; an API
    client may also send a kind that is not loaded (told why) or a cross-encoder's Hub id (loaded on demand)."""
    radio = gr.Radio(model_choices(models), value="auto", label="Explain with", **kwargs)
    return accept_model_ids(refuse_unloaded(radio, models), models)


def wire_load(ui: Ui, textbox, button, radios: list) -> None:
    """A Load button (private): the cross-encoder typed in ``textbox`` (Hub id, or folder where allowed)
    loaded into the app's bounded cache, then offered in each of ``radios`` ([(radio, its choices now),
    ...]); the first radio selects it."""
    models = ui.models

    @guard
    def do_load_reranker(model, request: gr.Request, progress=gr.Progress()):  # noqa: B008 (gradio's pattern)
        ui.visitor(request)
        name = check_model_name(model, "model", models.allow_paths)
        models.reranker(name, progress=lambda f, d: progress(f, desc=d))
        return tuple(
            gr.update(choices=choices(models), **({"value": name} if i == 0 else {}))
            for i, (_, choices) in enumerate(radios)
        )

    # private: an API client passes the Hub id itself as the model (loaded on demand there)
    for trigger in (button.click, textbox.submit):
        trigger(do_load_reranker, [textbox], [radio for radio, _ in radios], api_visibility="private")


def auto_info(models: AppModels) -> str:
    """What "auto" explains with these models, and which re-rankers are not offered and why."""
    labels = [RERANKERS[kind].label for kind in models.loaded]
    text = "auto = the bi-encoder" + (f" and the {labels[0]}" if labels else " (no re-ranker is loaded)")
    missing = [RERANKERS[kind].label for kind in RERANKERS if kind not in models.rerankers]
    return text + (f"; not loaded: {', '.join(missing)} (see the top of the page)" if missing else "")
