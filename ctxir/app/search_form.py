"""The forms' shared inputs: the Search form (``SearchForm``), the prompt boxes and the model radios."""

from __future__ import annotations

import gradio as gr

from ctxir.app.gradio_fixes import accept_model_ids, refuse_unloaded
from ctxir.app.models import BI_ENCODER, AppModels
from ctxir.app.ui import PROGRESS, Ui, guard, steps
from ctxir.encoders.bi_encoder import model_prompts
from ctxir.encoders.on_demand import check_model_name
from ctxir.kinds import CROSS_ENCODER
from ctxir.rerank.registry import DEFAULT_RERANK_MODE, RERANKERS, search_rerankers
from ctxir.retrieval.registry import DEFAULT_FIRST_STAGE, FIRST_STAGES


def prompts_info(models: AppModels) -> str:
    """The prompts' heading: those the bi-encoder puts before queries and documents (its own)."""
    prompts = model_prompts(models.bi_encoder)
    if not any(prompts.values()):
        return "Prompts: the bi-encoder declares none (queries and documents are encoded as typed)"
    shown = ", ".join(f"{role} prompt {prompt!r}" for role, prompt in prompts.items() if prompt)
    return f"Prompts: the bi-encoder's own, {shown}"


def prompt_boxes(ui: Ui, prefix: str, document_note: str = "") -> tuple:
    """The Prompts panel (inside an open Blocks): the query and document prompt boxes."""
    own = model_prompts(ui.models.bi_encoder)
    infos = {
        "query": f"put before the query (the bi-encoder's own: {own['query']!r}); empty for none",
        "document": f"put before each document (its own: {own['document']!r}){document_note}",
    }
    with gr.Accordion(prompts_info(ui.models), open=False), gr.Row():
        return tuple(
            gr.Textbox(
                own[role], label=f"{role.title()} prompt", info=info, elem_id=f"{prefix}-{role}-prompt"
            )
            for role, info in infos.items()
        )


def reranker_choices_now(models: AppModels) -> list[str]:
    """The re-ranker choices: "none", the relevance kinds loaded at start."""
    return ["none", *search_rerankers(models.loaded), *models.extra_models(CROSS_ENCODER)]


class SearchForm:
    """The query and the choices every search feature reads, laid out inside an open Blocks."""

    def __init__(self, ui: Ui):
        state, cfg = ui.state, ui.config
        with gr.Row(equal_height=True):
            self.query = gr.Textbox(
                label="Query",
                value=state.examples[0] if state.examples else "",
                scale=4,
                min_width=240,
                placeholder="type a question, e.g. how do bats find insects at night",
                elem_id="search-query",
            )
            self.corpus = gr.Dropdown(
                [state.default_corpus],
                value=state.default_corpus,
                label="Corpus",
                allow_custom_value=True,
                scale=1,
                min_width=160,
            )
        with gr.Row():
            # every registered first stage: the values Gradio lets /search pass (it refuses any other)
            self.first_stage = gr.Radio(
                [(kind.label, name) for name, kind in FIRST_STAGES.items()],
                value=DEFAULT_FIRST_STAGE,
                label="First stage",
                min_width=200,
            )
            # only the loaded re-rankers are offered; the info line names the others
            missing = [
                k.label
                for n, k in RERANKERS.items()
                if n not in ui.models.rerankers and n in search_rerankers(RERANKERS)
            ]
            self.reranker = model_radio(
                ui.models,
                reranker_choices_now(ui.models),
                value="none",
                label="Re-ranker",
                min_width=200,
                elem_id="search-reranker",
                info=f"not loaded: {', '.join(missing)} (the top of the page says why)" if missing else "",
            )
            self.mode = gr.Radio(
                [("fused with the first stage", "fused"), ("re-ranker only", "alone")],
                value=DEFAULT_RERANK_MODE,
                label="Re-rank mode",
                min_width=200,
                elem_id="search-rerank-mode",
                info="fused: a weak re-ranker cannot push results far below the first stage",
            )
            # numbers, not sliders (which clamp a typed 80 quietly): the view checks the range and says what is wrong
            self.k, self.depth = (
                gr.Number(
                    value,
                    step=1,
                    label=f"{name} (1–{top})",
                    info=info,
                    min_width=140,
                    elem_id=f"search-{name}",
                )
                for name, value, top, info in (
                    ("k", 10, cfg.max_k, "results shown"),
                    ("depth", cfg.rerank_depth, cfg.max_rerank_depth, "candidates re-ranked"),
                )
            )
        with gr.Row(equal_height=True):
            # another re-ranker by Hub id (or folder), loaded by ``load``
            self.other = gr.Textbox(
                label="Another re-ranker (optional): a cross-encoder's Hub id"
                + (" or folder" if cfg.allow_model_paths else ""),
                placeholder="e.g. cross-encoder/ms-marco-MiniLM-L6-v2",
                info=f"loaded on demand and offered as a choice above; at most {cfg.max_extra_models} such models "
                f"stay loaded ({cfg.max_extra_mb:,.0f} MiB), the least recently used goes first",
                scale=4,
                min_width=240,
                elem_id="search-other-reranker",
            )
            self.load = gr.Button("Load re-ranker", scale=1, min_width=140, elem_id="search-load-reranker")
        # what the bi-encoder puts before the query and each document (its own unless changed; empty: none)
        self.prompts = prompt_boxes(
            ui,
            "search",
            f"; another one encodes the corpus again, up to {cfg.max_compare_docs:,} documents (BM25 uses none)",
        )
        self.button = gr.Button("Search", variant="primary", elem_id="search-button")
        # the example queries, shown for the startup corpus only
        with gr.Column(visible=bool(state.examples)) as self.examples:
            if state.examples:
                # a choice that fills the query box, not gr.Examples, which cuts each query at 60 characters
                pick = gr.Radio(
                    list(state.examples),
                    value=None,
                    elem_id="search-examples",
                    label=f"Example queries for {state.default_corpus} (click one to use it)",
                )

                def picked(evt: gr.SelectData):
                    return evt.value

                pick.select(picked, None, [self.query], queue=False, api_visibility="private")

    @property
    def inputs(self) -> list:
        # /search's inputs: mode goes last, after these, so that old API clients may leave it out
        return [self.query, self.corpus, self.first_stage, self.reranker, self.k, self.depth]


def model_choices(models: AppModels) -> list[str]:
    """ "Explain with" choices: auto, the bi-encoder, each re-ranker kind loaded at start."""
    return ["auto", BI_ENCODER, *models.loaded, *models.extra_models(CROSS_ENCODER)]


def explain_with(models: AppModels, **kwargs) -> gr.Radio:
    """The "Explain with" radio of the Explain tab, the Search results and Pair scoring."""
    return model_radio(models, model_choices(models), value="auto", label="Explain with", **kwargs)


def model_radio(models: AppModels, choices: list[str], **kwargs) -> gr.Radio:
    """A radio of models that also takes a Hub id it does not list, and says why a kind is not loaded."""
    return accept_model_ids(refuse_unloaded(gr.Radio(choices, **kwargs), models), models)


def wire_load(ui: Ui, textbox, button, radios: list) -> None:
    """A Load button (private): the cross-encoder typed in ``textbox``."""
    models = ui.models

    @guard
    def do_load_reranker(model, progress=PROGRESS):
        ui.visitor()
        name = check_model_name(model, "model", models.allow_paths)
        models.reranker(name, progress=steps(progress))
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
