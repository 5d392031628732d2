"""ctxir Gradio app: search, pair scoring, token embeddings and attention heads — offline, API-first.

    python app.py                                   # built-in demo corpus + packaged all-MiniLM-L6-v2
    python app.py --corpus ../shared/data/scifact   # a BEIR folder (embeddings cached: 2nd start is fast)
    python app.py --cross-encoder outputs/cross-encoder --cls-lr outputs/cls-lr --port 7861

Every flag has an environment variable (CTXIR_CORPUS, CTXIR_BI_ENCODER, CTXIR_CROSS_ENCODER, CTXIR_CLS_LR,
CTXIR_DEVICE, CTXIR_HOST, CTXIR_PORT, ...), so the same file runs as a Hugging Face Space. Every view is an
API endpoint (``/search``, ``/score_pairs``, ``/token_embeddings``, ``/layer_similarity``, ``/attention``, ...)
that ``gradio_client`` can call; see the README.

The callbacks are thin: the work is in ``ctxir.app_logic`` (tested directly). They turn ``CtxirError`` into
``gr.Error`` and matplotlib figures into PNG files.
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
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from ctxir import app_logic as logic
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


def _guard(fn):
    """CtxirError → gr.Error with its message; anything unexpected → gr.Error too (logged), never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except CtxirError as err:
            raise gr.Error(str(err), print_exception=False) from None
        except Exception as err:
            logger.exception("unexpected error in %s", fn.__name__)
            raise gr.Error(f"unexpected {type(err).__name__} in {fn.__name__}: {err}. The app is still running; "
                           "please report the input that caused it.", print_exception=False) from None

    return wrapper


class Outputs:
    """Per-app folder for the files a request returns (PNG figures, attention HTML); old files are pruned."""

    def __init__(self, max_age_s: float = 3600.0):
        self.root = Path(tempfile.mkdtemp(prefix="ctxir-app-"))
        self.max_age_s = max_age_s
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)

    def _path(self, stem: str, suffix: str) -> Path:
        cutoff = time.time() - self.max_age_s
        for old in self.root.iterdir():
            if old.stat().st_mtime < cutoff:
                old.unlink(missing_ok=True)
        return self.root / f"{stem}-{uuid.uuid4().hex[:10]}{suffix}"

    def png(self, fig, stem: str) -> str:
        from ctxir.viz import save_png

        return save_png(fig, self._path(stem, ".png"))

    def html(self, document: str, stem: str) -> str:
        path = self._path(stem, ".html")
        path.write_text(document, encoding="utf-8")
        return str(path)


def _frame(rows: list[dict], columns: list[str] | None = None) -> pd.DataFrame:
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns or ["(no rows)"])


def _lines(items) -> str:
    return "\n".join(items)


def build_demo(state: logic.AppState | None = None, config: logic.AppConfig | None = None) -> gr.Blocks:
    """The app. ``state`` holds already loaded models and corpora; without it they are loaded here, before
    returning, so no request pays for loading."""
    state = state or logic.AppState.load(config or logic.AppConfig())
    models, cfg = state.models, state.config
    out = Outputs()
    presets = logic.demo_presets()
    n_layers, n_heads = models.num_layers, models.num_heads
    inspect_choices = list(models.inspect)

    # ---------------------------------------------------------------- callbacks (thin wrappers)

    @_guard
    @_gpu
    def do_search(query, corpus, first_stage, reranker, k, depth):
        r = logic.search(state, query, corpus, first_stage, reranker, int(k), int(depth))
        return _frame(r.rows), r.text, r.data

    @_guard
    @_gpu
    def do_compare_pooling(query, corpus, layer, k, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 (gradio's pattern)
        r = logic.compare_pooling(state, query, corpus, int(layer), int(k),
                                  progress=lambda f, d: progress(f, desc=d))
        return _frame(r.rows), r.text, r.data

    @_guard
    @_gpu
    def do_upload(file, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 (gradio's pattern)
        r = logic.upload_corpus(state, file, progress=lambda f, d: progress(f, desc=d))
        return r.text, _frame(r.rows), r.data

    def refresh_corpora(data):
        # A separate, private step: API users of /upload_corpus get the corpus name in the JSON, not a UI update.
        return gr.update(choices=state.corpus_names, value=(data or {}).get("corpus", state.default_corpus))

    @_guard
    @_gpu
    def do_score_pairs(query, documents):
        r = logic.score_pairs(state, query, documents)
        return (_frame(r.rows), out.png(r.figures["scores"], "pair-scores"), r.text, _frame(r.extra_rows), r.data)

    @_guard
    @_gpu
    def do_model_info(model, text):
        r = logic.model_info(state, model, text)
        return r.text, _frame(r.rows), r.data

    @_guard
    @_gpu
    def do_token_embeddings(model, sentences, word, layer_a, layer_b, methods,
                            progress=gr.Progress()):  # noqa: B008  # noqa: B008
        r = logic.token_embeddings(state, sentences, int(layer_a), int(layer_b), methods, word or "", model,
                                   progress=lambda f, d: progress(f, desc=d))
        return (out.png(r.figures["projection"], "token-projection"),
                out.png(r.figures["consecutive_layers"], "consecutive-layers"), r.text, r.data)

    @_guard
    @_gpu
    def do_layer_similarity(model, sentences, word):
        r = logic.layer_similarity(state, sentences, word, model)
        return out.png(r.figures["word"], "word-by-layer"), out.png(r.figures["sentence"], "sentence-by-layer"), \
            r.text, r.data

    @_guard
    @_gpu
    def do_sentence_similarity(sentences, layer, pooling):
        r = logic.sentence_similarity(state, sentences, int(layer), pooling)
        return out.png(r.figures["similarity"], "sentence-similarity"), r.data

    @_guard
    @_gpu
    def do_attention(model, text, text_pair, view, layers, heads, heatmap_layer, heatmap_head,
                     progress=gr.Progress()):  # noqa: B008
        progress(0.1, desc="forward pass and bertviz view")
        r = logic.attention(state, text, text_pair, view, layers, heads, int(heatmap_layer), int(heatmap_head),
                            model)
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

    with gr.Blocks(title="ctxir — contextual embeddings for search", delete_cache=(3600, 3600)) as demo:
        gr.Markdown("# ctxir — contextual embeddings for search\n" + "  \n".join(status))
        with gr.Tab("Search"):
            with gr.Row():
                query = gr.Textbox(label="Query", value="otters playing on the river bank", scale=4)
                corpus = gr.Dropdown(state.corpus_names, value=state.default_corpus, label="Corpus",
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
    demo.ctxir_state = state  # tests and scripts reach the loaded models through the demo
    demo.ctxir_outputs = out
    return demo


def main(argv: list[str] | None = None) -> int:
    from transformers import HfArgumentParser

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # 1. parse flags (environment variables give the defaults)
    (args,) = HfArgumentParser(AppArgs).parse_args_into_dataclasses(args=argv)
    try:
        set_threads(args.torch_threads)
    except CtxirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # SIGTERM (a container or process manager stopping the app) exits like Ctrl-C, so the atexit clean-up of the
    # output folder runs instead of leaving it behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # 2. load models and the corpus once, before serving
    started = time.perf_counter()
    try:
        state = logic.AppState.load(config_from_args(args))
    except CtxirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    logger.info("cold start: %.1f s", time.perf_counter() - started)
    # 3. build and serve
    demo = build_demo(state)
    demo.queue(default_concurrency_limit=2).launch(server_name=args.host or None, server_port=args.port or None,
                                                   show_error=True, allowed_paths=[str(demo.ctxir_outputs.root)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
