"""ctxir Gradio app: search, pair scoring, token embeddings and attention heads — offline, API-first.

    python app.py                                   # built-in demo corpus + packaged all-MiniLM-L6-v2
    python app.py --corpus ../shared/data/scifact   # a BEIR folder (embeddings cached: 2nd start is fast)
    python app.py --cross-encoder outputs/cross-encoder --cls-lr outputs/cls-lr --port 7861

Every flag has an environment variable (CTXIR_CORPUS, CTXIR_BI_ENCODER, CTXIR_CROSS_ENCODER, CTXIR_CLS_LR,
CTXIR_DEVICE, CTXIR_HOST, CTXIR_PORT, ...), so the same file runs as a Hugging Face Space. Every view is an
API endpoint (``/search``, ``/score_pairs``, ``/token_embeddings``, ``/layer_similarity``, ``/attention``, ...)
that ``gradio_client`` can call; see the README.

The callbacks are thin: the work is in ``ctxir.app_logic`` (tested directly). They turn ``CtxirError`` into
``gr.Error`` (as text: Gradio renders an error's message as HTML, so it is escaped) and matplotlib figures into
PNG files in one bounded folder. Each visitor is their Gradio session (``request.session_hash``; one per page
load, one per ``gradio_client.Client``): uploads are kept per session and released when it ends.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from ctxir import app_logic as logic
from ctxir.cli import cli_main
from ctxir.models import DEFAULT_BI_ENCODER, DEFAULT_CLS_LR, DEFAULT_CROSS_ENCODER, set_threads
from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")


def _env(name: str, default: str, help: str) -> Any:
    """A flag whose default comes from environment variable ``name`` (read when the flags are parsed)."""
    return field(default_factory=lambda: os.environ.get(name, default), metadata={"help": f"{help} [{name}]"})


def _env_int(name: str, default: int, help: str) -> Any:
    return field(default_factory=lambda: int(os.environ.get(name, default)), metadata={"help": f"{help} [{name}]"})


@dataclass
class AppArgs:
    host: str = _env("CTXIR_HOST", "", "interface to listen on; empty = gradio's (GRADIO_SERVER_NAME or 127.0.0.1)")
    port: int = _env_int("CTXIR_PORT", 0, "port; 0 = gradio's default (GRADIO_SERVER_PORT or 7860)")
    corpus: str = _env("CTXIR_CORPUS", "", "BEIR folder or corpus file (.txt/.jsonl/.csv/.tsv); empty = built-in "
                       "demo corpus")
    bi_encoder: str = _env("CTXIR_BI_ENCODER", DEFAULT_BI_ENCODER, "bi-encoder Hub id or folder")
    cross_encoder: str = _env("CTXIR_CROSS_ENCODER", DEFAULT_CROSS_ENCODER,
                              "cross-encoder id or folder (default: the one shipped inside ctxir; or a "
                              "training/train_cross_encoder.py output); 'none' to skip; if it cannot be loaded the "
                              "app starts without it")
    cls_lr: str = _env("CTXIR_CLS_LR", DEFAULT_CLS_LR, "CLS-LR ranker id or folder (default: the one shipped inside "
                       "ctxir; or a training/train_cls_lr.py output); 'none' to skip")
    device: str = _env("CTXIR_DEVICE", "auto", "auto, cpu, cuda, mps")
    torch_threads: int = _env_int("CTXIR_TORCH_THREADS", 0, "torch intra-op threads; 0 = torch's default (all cores, "
                                  "fastest on a machine of its own); 1 is steadier on a CPU shared with other jobs")
    max_attention_tokens: int = _env_int("CTXIR_MAX_ATTENTION_TOKENS", 256,
                                         "longest input (tokens) the attention view accepts")
    max_upload_docs: int = _env_int("CTXIR_MAX_UPLOAD_DOCS", 5_000, "most documents an uploaded corpus may have")
    rerank_depth: int = _env_int("CTXIR_RERANK_DEPTH", 20, "default number of first-stage candidates re-scored")
    max_output_mb: int = _env_int("CTXIR_MAX_OUTPUT_MB", 200, "most MB of returned files (figures, attention HTML) "
                                  "kept on disk; the oldest are removed first")
    output_max_age_s: int = _env_int("CTXIR_OUTPUT_MAX_AGE_S", 600, "seconds a returned file is kept on disk")


def config_from_args(args: AppArgs) -> logic.AppConfig:
    return logic.AppConfig(corpus=args.corpus, bi_encoder=args.bi_encoder, cross_encoder=args.cross_encoder,
                           cls_lr=args.cls_lr, device=args.device, max_attention_tokens=args.max_attention_tokens,
                           max_upload_docs=args.max_upload_docs, rerank_depth=args.rerank_depth)


def _gpu(fn):
    """``spaces.GPU`` on a ZeroGPU Space; the function itself everywhere else."""
    if not os.environ.get("SPACES_ZERO_GPU"):
        return fn
    try:
        import spaces
    except ImportError:
        return fn
    return spaces.GPU(fn)


def user_error(message: Any) -> gr.Error:
    """The one way a message reaches a person's error pop-up. Gradio renders gr.Error's message as HTML, so it is
    escaped here: a corpus name like ``<a href=…>`` shows as typed (no link, no image) and the app's own
    ``<its output folder>`` placeholders stay readable. API clients get the same escaped text."""
    return gr.Error(logic.display_text(message), print_exception=False)


def _guard(fn):
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
            raise user_error(f"unexpected {type(err).__name__} in {fn.__name__}: {err}. The app is still running; "
                             "please report the input that caused it.") from None

    return wrapper


def _warn(result: logic.ViewResult) -> None:
    """A result's warnings as Gradio warning pop-ups (escaped like errors)."""
    for warning in result.data.get("warnings") or []:
        gr.Warning(logic.display_text(warning))


def _named(component):
    """Gradio checks some inputs itself before a callback runs (a slider's range, a radio's choices) and its
    message names no parameter ("Value 60 is greater than maximum value 50."). Wrap the component's check so the
    message names it and says what is accepted, as text."""
    check = component.preprocess

    def preprocess(payload):
        try:
            return check(payload)
        except Exception:
            if isinstance(component, gr.Slider):
                accepted = f"must be a number from {component.minimum:g} to {component.maximum:g}"
            else:
                accepted = f"must be one of {[value for _, value in component.choices]!r}"
            raise user_error(f"{component.label} {accepted}, got {payload!r}") from None

    component.preprocess = preprocess
    return component


class Outputs:
    """The one folder for the files requests return (PNG figures, attention HTML), bounded on disk.

    After each write, files older than ``max_age_s`` are removed, then the oldest ones until the folder holds at
    most ``max_bytes`` (the file just written is always kept). The folder is a Gradio static path: Gradio serves the
    files from here and keeps no second copy in its cache. Removed at exit (atexit; ``main`` turns SIGTERM and
    SIGHUP into a normal exit, Ctrl-C is one already).
    """

    def __init__(self, max_age_s: float = 600.0, max_bytes: int = 200 * 2**20):
        self.root = Path(tempfile.mkdtemp(prefix="ctxir-app-"))
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self._lock = threading.Lock()
        gr.set_static_paths([self.root])
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)

    def _path(self, stem: str, suffix: str) -> Path:
        return self.root / f"{stem}-{uuid.uuid4().hex[:10]}{suffix}"

    def _files(self) -> list[tuple[float, int, Path]]:
        """(mtime, bytes, path), newest first; files removed meanwhile by another request are skipped."""
        files = []
        for path in self.root.iterdir():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        return sorted(files, key=lambda f: f[0], reverse=True)

    def _prune(self, keep: Path) -> None:
        with self._lock:
            cutoff, total, full = time.time() - self.max_age_s, 0, False
            for mtime, size, path in self._files():  # newest first: once one does not fit, every older one goes
                full = full or (path != keep and total + size > self.max_bytes)
                if path != keep and (full or mtime < cutoff):
                    path.unlink(missing_ok=True)
                else:
                    total += size

    def bytes_used(self) -> int:
        return sum(size for _, size, _ in self._files())

    def png(self, fig, stem: str) -> str:
        from ctxir.viz import save_png

        path = Path(save_png(fig, self._path(stem, ".png")))
        self._prune(keep=path)
        return str(path)

    def html(self, document: str, stem: str) -> str:
        path = self._path(stem, ".html")
        path.write_text(document, encoding="utf-8")
        self._prune(keep=path)
        return str(path)


def _frame(rows: list[dict], columns: list[str] | None = None) -> pd.DataFrame:
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns or ["(no rows)"])


def _lines(items) -> str:
    return "\n".join(items)


def build_demo(state: logic.AppState | None = None, config: logic.AppConfig | None = None,
               outputs: Outputs | None = None) -> gr.Blocks:
    """The app. ``state`` holds already loaded models and corpora; without it they are loaded here, before
    returning, so no request pays for loading. ``outputs`` is the folder for returned files (default: a new
    bounded one)."""
    state = state or logic.AppState.load(config or logic.AppConfig())
    models, cfg = state.models, state.config
    out = outputs or Outputs()
    presets = logic.demo_presets()
    n_layers, n_heads = models.num_layers, models.num_heads
    inspect_choices = list(models.inspect)

    # ---------------------------------------------------------------- callbacks (thin wrappers)
    # Numbers go to app_logic as sent (no int()): it refuses 2.5 for k with a message instead of using 2.

    def visitor(request: gr.Request | None) -> str:
        """Whose request: Gradio's session hash (one per page load, one per gradio_client.Client); "" without
        one (a raw HTTP call), which sees only the public corpus and may not upload. Marks the visitor active."""
        owner = getattr(request, "session_hash", None) or ""
        state.touch(owner)
        return owner

    @_guard
    @_gpu
    def do_search(query, corpus, first_stage, reranker, k, depth, request: gr.Request):
        r = logic.search(state, query, corpus, first_stage, reranker, k, depth, owner=visitor(request))
        return _frame(r.rows), r.text, r.data

    @_guard
    @_gpu
    def do_compare_pooling(query, corpus, layer, k, request: gr.Request,
                           progress=gr.Progress(track_tqdm=True)):  # noqa: B008 (gradio's pattern)
        r = logic.compare_pooling(state, query, corpus, layer, k, progress=lambda f, d: progress(f, desc=d),
                                  owner=visitor(request))
        _warn(r)
        return _frame(r.rows), r.text, r.data

    @_guard
    @_gpu
    def do_upload(file, request: gr.Request, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 (gradio's pattern)
        owner = visitor(request)
        if not owner:
            raise CtxirError("this request has no Gradio session, and an upload is kept per session: upload from "
                             "the web page or with gradio_client (each Client is one session)")
        r = logic.upload_corpus(state, file, progress=lambda f, d: progress(f, desc=d), owner=owner)
        return r.text, _frame(r.rows), r.data

    def refresh_corpora(data, request: gr.Request):
        # A separate, private step: API users of /upload_corpus get the corpus name in the JSON, not a UI update.
        return gr.update(choices=state.corpus_names_for(visitor(request)),
                         value=(data or {}).get("corpus", state.default_corpus))

    def end_session(request: gr.Request):
        # The page was closed or reloaded (a reload is a new session): its uploads are released.
        state.release(getattr(request, "session_hash", None) or "")

    @_guard
    @_gpu
    def do_score_pairs(query, documents, request: gr.Request):
        visitor(request)
        r = logic.score_pairs(state, query, documents)
        return (_frame(r.rows), out.png(r.figures["scores"], "pair-scores"), r.text, _frame(r.extra_rows), r.data)

    @_guard
    @_gpu
    def do_model_info(model, text, request: gr.Request):
        visitor(request)
        r = logic.model_info(state, model, text)
        return r.text, _frame(r.rows), r.data

    @_guard
    @_gpu
    def do_token_embeddings(model, sentences, word, layer_a, layer_b, methods, request: gr.Request,
                            progress=gr.Progress()):  # noqa: B008
        visitor(request)
        r = logic.token_embeddings(state, sentences, layer_a, layer_b, methods, word or "", model,
                                   progress=lambda f, d: progress(f, desc=d))
        return (out.png(r.figures["projection"], "token-projection"),
                out.png(r.figures["consecutive_layers"], "consecutive-layers"), r.text, r.data)

    @_guard
    @_gpu
    def do_layer_similarity(model, sentences, word, request: gr.Request):
        visitor(request)
        r = logic.layer_similarity(state, sentences, word, model)
        return out.png(r.figures["word"], "word-by-layer"), out.png(r.figures["sentence"], "sentence-by-layer"), \
            r.text, r.data

    @_guard
    @_gpu
    def do_sentence_similarity(sentences, layer, pooling, request: gr.Request):
        visitor(request)
        r = logic.sentence_similarity(state, sentences, layer, pooling)
        _warn(r)
        return out.png(r.figures["similarity"], "sentence-similarity"), r.data

    @_guard
    @_gpu
    def do_attention(model, text, text_pair, view, layers, heads, heatmap_layer, heatmap_head, request: gr.Request,
                     progress=gr.Progress()):  # noqa: B008
        visitor(request)
        progress(0.1, desc="forward pass and bertviz view")
        r = logic.attention(state, text, text_pair, view, layers, heads, heatmap_layer, heatmap_head, model)
        from ctxir.viz import iframe

        return (r.text, iframe(r.html, height=700), out.html(r.html, f"attention-{view}-view"),
                out.png(r.figures["heatmap"], "attention-heatmap"),
                out.png(r.figures["head_summary"], "head-summary"), _frame(r.rows), r.data)

    # ---------------------------------------------------------------- layout

    status = [f"Bi-encoder **{models.bi_encoder_name}** · corpus **{state.default_corpus}** "
              f"({len(state.index(None).corpus):,} documents)"]
    status.append(f"Cross-encoder: **{cfg.cross_encoder}**" if models.cross_encoder is not None
                  else f"⚠️ Cross-encoder re-ranker not loaded — {models.cross_encoder_error}")
    status.append(f"CLS-LR ranker: **{cfg.cls_lr or 'in-memory'}**" if models.cls_lr is not None
                  else f"CLS-LR re-ranker not loaded — {models.cls_lr_error} (start with `--cls-lr FOLDER`)")

    # Gradio's cache now holds only uploaded files (returned files are served from `out`): kept 10 minutes.
    with gr.Blocks(title="ctxir — contextual embeddings for search", delete_cache=(300, 600)) as demo:
        gr.Markdown("# ctxir — contextual embeddings for search\n" + "  \n".join(status))
        with gr.Tab("Search"):
            with gr.Row():
                query = gr.Textbox(label="Query", value="otters playing on the river bank", scale=4)
                corpus = gr.Dropdown(state.public_names, value=state.default_corpus, label="Corpus",
                                     allow_custom_value=True, scale=1)
            with gr.Row():
                first_stage = gr.Radio(list(logic.FIRST_STAGES), value="dense", label="First stage")
                reranker = gr.Radio(list(logic.RERANKERS), value="none", label="Re-ranker")
                k = gr.Slider(1, 50, value=10, step=1, label="k (results)")
                depth = gr.Slider(5, 100, value=cfg.rerank_depth, step=1, label="re-rank depth (candidates)")
            search_button = gr.Button("Search", variant="primary", elem_id="search-button")
            gr.Examples([[q] for q in logic.demo_queries()[:8]], inputs=[query], label="Demo queries")
            search_summary = gr.Markdown(elem_id="search-summary")
            search_table = gr.Dataframe(label="Results", wrap=True, elem_id="search-results")
            with gr.Accordion("Numbers (JSON)", open=False):
                search_json = gr.JSON()
            with gr.Accordion("Compare pooling: mean vs CLS at any layer, same query", open=False):
                with gr.Row():
                    pool_layer = gr.Slider(0, n_layers, value=n_layers, step=1,
                                           label="layer (0 = embeddings, last = model output)")
                    pool_k = gr.Slider(1, 20, value=10, step=1, label="k")
                pool_button = gr.Button("Compare pooling")
                pool_summary = gr.Markdown()
                pool_table = gr.Dataframe(wrap=True)
                pool_json = gr.JSON(label="Numbers (JSON)")
            with gr.Accordion("Upload a corpus (.txt, .jsonl, .csv, .tsv)", open=False):
                gr.Markdown(".txt = one document per line · .jsonl = `{\"id\", \"title\", \"text\"}` per line · "
                            ".csv/.tsv = a header row with a `text` column (optional `id`, `title`). "
                            f"At most {cfg.max_upload_docs:,} documents and {cfg.max_upload_mb:g} MB.")
                upload_file = gr.File(label="Corpus file", file_types=[".txt", ".jsonl", ".csv", ".tsv"])
                upload_button = gr.Button("Index this corpus")
                upload_summary = gr.Markdown()
                upload_table = gr.Dataframe(label="First documents", wrap=True)
                upload_json = gr.JSON(label="Numbers (JSON)")

        with gr.Tab("Pair scoring"):
            pair_query = gr.Textbox(label="Query", value=presets["pair_query"])
            pair_docs = gr.Textbox(label="Documents (one per line)", lines=6,
                                   value=_lines(presets["pair_documents"]))
            pair_button = gr.Button("Score pairs", variant="primary")
            pair_table = gr.Dataframe(label="Scores", wrap=True)
            pair_plot = gr.Image(label="Scores (PNG)", type="filepath", format="png")
            pair_formation = gr.Markdown()
            pair_tokens = gr.Dataframe(label="Input formation of document 1: tokens, ids, token types")
            with gr.Accordion("Numbers (JSON)", open=False):
                pair_json = gr.JSON()

        with gr.Tab("Token embeddings"):
            emb_model = gr.Dropdown(inspect_choices, value="bi-encoder", label="Model", allow_custom_value=True)
            with gr.Accordion("Model and tokenizer", open=True):
                info_text = gr.Textbox(label="Text to tokenize", value=presets["bank_contexts"][1])
                info_button = gr.Button("Inspect")
                info_md = gr.Markdown()
                info_table = gr.Dataframe(label="Tokens")
                info_json = gr.JSON(label="Numbers (JSON)")
            with gr.Accordion("2-D projection of token embeddings (PCA, t-SNE) at two layers", open=True):
                emb_sentences = gr.Textbox(label="Sentences (one per line)", lines=4,
                                           value=_lines(presets["bank_contexts"]))
                with gr.Row():
                    emb_word = gr.Textbox(label="Highlight word", value=presets["word"])
                    layer_a = gr.Slider(0, n_layers, value=0, step=1, label="layer A")
                    layer_b = gr.Slider(0, n_layers, value=n_layers, step=1, label="layer B")
                    methods = gr.CheckboxGroup(["pca", "tsne"], value=["pca", "tsne"], label="Projections")
                emb_button = gr.Button("Project tokens", variant="primary")
                emb_summary = gr.Markdown()
                with gr.Row():
                    emb_plot = gr.Image(label="Projection (PNG)", type="filepath", format="png")
                    drift_plot = gr.Image(label="Consecutive-layer cosine (PNG)", type="filepath", format="png")
                emb_json = gr.JSON(label="Numbers (JSON)")
            with gr.Accordion("One word across layers and contexts", open=True):
                sim_sentences = gr.Textbox(label="Sentences containing the word (one per line)", lines=4,
                                           value=_lines(presets["bank_contexts"]))
                sim_word = gr.Textbox(label="Word", value=presets["word"])
                sim_button = gr.Button("Compare layer by layer", variant="primary")
                sim_summary = gr.Markdown()
                with gr.Row():
                    word_plot = gr.Image(label="Word cosine per layer (PNG)", type="filepath", format="png")
                    sent_plot = gr.Image(label="Sentence cosine per layer (PNG)", type="filepath", format="png")
                sim_json = gr.JSON(label="Numbers (JSON)")
            with gr.Accordion("Sentence similarity heatmap", open=True):
                ss_sentences = gr.Textbox(label="Sentences (one per line)", lines=6,
                                          value=_lines(presets["similarity_sentences"]))
                with gr.Row():
                    ss_layer = gr.Slider(0, n_layers, value=n_layers, step=1, label="layer")
                    ss_pooling = gr.Radio(list(logic.POOLINGS), value="mean", label="pooling")
                ss_button = gr.Button("Sentence similarity", variant="primary")
                ss_plot = gr.Image(label="Cosine similarity (PNG)", type="filepath", format="png")
                ss_json = gr.JSON(label="Numbers (JSON)")

        with gr.Tab("Attention"):
            gr.Markdown("bertviz head view / model view, drawn with d3 and jQuery from installed Python packages "
                        f"— no internet needed. Inputs up to {cfg.max_attention_tokens} tokens; weights rounded "
                        f"to {cfg.decimals} decimals. Choose fewer layers/heads for long inputs.")
            att_model = gr.Dropdown(inspect_choices, value="bi-encoder", label="Model", allow_custom_value=True)
            att_text = gr.Textbox(label="Text (sentence A)", value=presets["bank_contexts"][0],
                                  elem_id="attention-text")
            att_pair = gr.Textbox(label="Second text (sentence B, optional: query–document pair)",
                                  value=presets["bank_contexts"][1])
            with gr.Row():
                att_view = gr.Radio(["head", "model"], value="head", label="bertviz view")
                att_layers = gr.CheckboxGroup(list(range(n_layers)), value=[], label="Layers (none = all)")
                att_heads = gr.CheckboxGroup(list(range(n_heads)), value=[], label="Heads (none = all)")
            with gr.Row():
                heat_layer = gr.Slider(0, n_layers - 1, value=0, step=1, label="heatmap layer")
                heat_head = gr.Slider(0, n_heads - 1, value=0, step=1, label="heatmap head")
            att_button = gr.Button("Show attention", variant="primary", elem_id="attention-button")
            att_summary = gr.Markdown(elem_id="attention-summary")
            att_html = gr.HTML(elem_id="attention-view")
            att_file = gr.File(label="Standalone HTML of this view (works offline)")
            with gr.Row():
                att_heat = gr.Image(label="Attention heatmap (PNG)", type="filepath", format="png")
                att_sum_plot = gr.Image(label="Per-head summary (PNG)", type="filepath", format="png")
            att_table = gr.Dataframe(label="Per-head summary", wrap=True)
            with gr.Accordion("Numbers (JSON)", open=False):
                att_json = gr.JSON()

        for component in demo.blocks.values():
            if isinstance(component, gr.Slider | gr.Radio | gr.CheckboxGroup):
                _named(component)  # range / choice errors name the input

        # ---------------------------------------------------------------- events (each one an API endpoint)
        search_inputs = [query, corpus, first_stage, reranker, k, depth]
        search_outputs = [search_table, search_summary, search_json]
        search_button.click(do_search, search_inputs, search_outputs, api_name="search")
        query.submit(do_search, search_inputs, search_outputs, api_visibility="private")
        pool_button.click(do_compare_pooling, [query, corpus, pool_layer, pool_k],
                          [pool_table, pool_summary, pool_json], api_name="compare_pooling")
        upload_button.click(do_upload, [upload_file], [upload_summary, upload_table, upload_json],
                            api_name="upload_corpus").success(refresh_corpora, [upload_json], [corpus],
                                                              api_visibility="private")
        pair_button.click(do_score_pairs, [pair_query, pair_docs],
                          [pair_table, pair_plot, pair_formation, pair_tokens, pair_json], api_name="score_pairs")
        info_button.click(do_model_info, [emb_model, info_text], [info_md, info_table, info_json],
                          api_name="model_info")
        emb_button.click(do_token_embeddings, [emb_model, emb_sentences, emb_word, layer_a, layer_b, methods],
                         [emb_plot, drift_plot, emb_summary, emb_json], api_name="token_embeddings")
        sim_button.click(do_layer_similarity, [emb_model, sim_sentences, sim_word],
                         [word_plot, sent_plot, sim_summary, sim_json], api_name="layer_similarity")
        ss_button.click(do_sentence_similarity, [ss_sentences, ss_layer, ss_pooling], [ss_plot, ss_json],
                        api_name="sentence_similarity")
        att_button.click(do_attention, [att_model, att_text, att_pair, att_view, att_layers, att_heads, heat_layer,
                                        heat_head],
                         [att_summary, att_html, att_file, att_heat, att_sum_plot, att_table, att_json],
                         api_name="attention")
        demo.unload(end_session)
    demo.ctxir_state = state  # tests and scripts reach the loaded models through the demo
    demo.ctxir_outputs = out
    return demo


def serve(args: AppArgs) -> int:
    """Load once, then serve until stopped; a CtxirError (bad flag, missing model) ends it with one line, exit 2."""
    # 1. threads, and signals: SIGTERM (a container or process manager stopping the app) and SIGHUP (its terminal
    # closed) exit like Ctrl-C, so the atexit clean-up of the output folder runs instead of leaving it behind
    set_threads(args.torch_threads)
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if signum is not None:
            signal.signal(signum, lambda *_: sys.exit(0))
    # 2. load models and the corpus once, before serving
    started = time.perf_counter()
    state = logic.AppState.load(config_from_args(args))
    logger.info("cold start: %.1f s", time.perf_counter() - started)
    # 3. build and serve
    demo = build_demo(state, outputs=Outputs(max_age_s=args.output_max_age_s, max_bytes=args.max_output_mb * 2**20))
    demo.queue(default_concurrency_limit=2).launch(server_name=args.host or None, server_port=args.port or None,
                                                   show_error=True, allowed_paths=[str(demo.ctxir_outputs.root)],
                                                   max_file_size=int(state.config.max_upload_mb * 2**20))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return cli_main(AppArgs, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
