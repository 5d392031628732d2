"""The app's public API: what each endpoint does and what each argument means (its outputs' names: their labels)."""

from __future__ import annotations

import logging

import gradio as gr

from ctxir.retrieval.registry import FIRST_STAGES

logger = logging.getLogger("ctxir.app")


class Endpoint:
    """What an endpoint does, and each argument's meaning in the order the endpoint takes them."""

    def __init__(self, description: str, **args: str):
        self.description, self.args = description, args


def first_stage_help() -> str:
    """/search's ``first_stage``: every registered first stage, with what it ranks by."""
    named = [f"{name} ({kind.ranks_by})" for name, kind in FIRST_STAGES.items()]
    return f"{', '.join(named[:-1])} or {named[-1]}" if len(named) > 1 else named[0]


_MODEL = "auto, bi-encoder, a loaded re-ranker, or a cross-encoder's Hub id (loaded on demand)"
_SEARCH_ARGS = {
    "query": "the question to search for (free text)",
    "corpus": "the corpus to search: the startup corpus's name, or one this session uploaded (/upload_corpus)",
    "first_stage": first_stage_help(),
    "reranker": "'none', a loaded re-ranker that re-scores the first stage's candidates, or a cross-encoder's Hub "
    "id (org/name), loaded on demand into the app's bounded cache",
    "k": "how many results to return",
    "depth": "how many first-stage candidates the re-ranker re-scores",
    "mode": "how the re-ranker's score is used: fused with the first stage's, or alone",
}


def _prompts(document: str = "") -> dict[str, str]:
    """The prompt arguments; ``document``: what the endpoint adds of its document prompt."""
    return {
        "query_prompt": "the text the bi-encoder puts before the query: default its own prompt (its "
        "config_sentence_transformers.json), '' for none",
        "document_prompt": f"the text it puts before each document: default its own, '' for none{document}",
    }


_PNG_FIGURES = "also return the figures as PNG files (default false: each costs as much as the view)"

ENDPOINTS: dict[str, Endpoint] = {
    "search": Endpoint(
        "Search a corpus: a first stage finds candidates and an optional re-ranker re-scores them; returns the "
        "results table, a one-line summary with timings, and every number as JSON.",
        **_SEARCH_ARGS,
        **_prompts(
            "; another one encodes the corpus again (refused above the app's compare limit of documents); BM25 "
            "uses no prompt"
        ),
    ),
    "explain_result": Endpoint(
        "Explain why one search result scored as it did: each word's share of the bi-encoder's cosine and of the "
        "re-ranker's score.",
        query=_SEARCH_ARGS["query"],
        corpus=_SEARCH_ARGS["corpus"],
        doc_id="the id of the document to explain (a search result's doc_id)",
        model=_MODEL,
        reranker="the search's re-ranker, which auto explains with (a loaded kind or a cross-encoder's Hub id)",
        **_prompts(),
    ),
    "what_moved": Endpoint(
        "The documents a re-ranker moved most in a search, and the words that drove each move.",
        **{k: v for k, v in _SEARCH_ARGS.items() if k != "mode"},
        n="how many of the most-moved documents to explain",
        mode=_SEARCH_ARGS["mode"],
        **_prompts(),
    ),
    "compare_pooling": Endpoint(
        "The same query through mean- and CLS-pooled embeddings of one layer: two rankings side by side.",
        query=_SEARCH_ARGS["query"],
        corpus=_SEARCH_ARGS["corpus"],
        layer="the layer to pool (0 = embeddings, the last = the model's output)",
        k="how many results per pooling",
        **_prompts(),
    ),
    "upload_corpus": Endpoint(
        "Index a corpus file (.txt, .jsonl, .csv, .tsv) for this session only; its name (in the JSON) can then be "
        "searched.",
        file="the corpus file",
    ),
    "score_pairs": Endpoint(
        "Score one query against several documents with every loaded model: scores and ranks side by side.",
        query="the query",
        documents="the documents, one per line",
        models="optional: Hub ids of more cross-encoders or bi-encoders to compare, comma-separated; each "
        "loads on demand into the app's bounded cache and adds a '<id> score' or '<id> cosine' column",
        png_figures=_PNG_FIGURES,
        **_prompts("; left as the bi-encoder's own, a bi-encoder compared by id keeps its own prompts"),
    ),
    "explain": Endpoint(
        "Explain any query-document score: each word's share of the bi-encoder's cosine and of the re-ranker's "
        "score.",
        query="the query",
        document="the document",
        model=_MODEL,
        **_prompts(),
    ),
    "model_info": Endpoint(
        "A loaded model's facts (layers, heads, vocabulary) and how it tokenises a text.",
        model="which model: bi-encoder, or a loaded re-ranker",
        text="a text to tokenise",
    ),
    "token_embeddings": Endpoint(
        "Every token of the sentences as a point in 2-D (PCA, t-SNE, UMAP) at two layers, and how far each token "
        "moves from layer to layer.",
        model="which model",
        sentences="sentences, one per line",
        word="a word to highlight",
        layer_a="the first layer to project",
        layer_b="the second layer to project",
        methods="projections: pca, tsne, umap",
    ),
    "layer_similarity": Endpoint(
        "One word in several sentences compared layer by layer, with the whole sentences' cosine beside it.",
        model="which model",
        sentences="sentences containing the word, one per line",
        word="the word to follow",
    ),
    "sentence_similarity": Endpoint(
        "How alike whole sentences are at a chosen layer and pooling: a cosine matrix.",
        sentences="sentences, one per line",
        layer="the layer to pool",
        pooling="mean or cls",
    ),
    "attention": Endpoint(
        "Where each attention head looks for a text (or a text pair): bertviz's view, one head's heatmap and a "
        "per-head summary.",
        model="which model",
        text="the text (sentence A)",
        text_pair="an optional second text (B)",
        view="bertviz view: head or model",
        layers="layers to show (empty = all)",
        heads="heads to show (empty = all)",
        heatmap_layer="the heatmap's layer",
        heatmap_head="the heatmap's head",
        png_figures=_PNG_FIGURES,
    ),
    "failure_report": Endpoint(
        "A drill-down of the worst queries of an evaluation results JSON (ctxir evaluate) or report JSON.",
        file="a results or report JSON",
        worst="how many of the worst queries to show",
    ),
    "failure_report_sample": Endpoint(
        "The failure report of the bundled sample run.",
        worst="how many of the worst queries to show",
    ),
    "classify": Endpoint(
        "Classify texts by the encoder's embeddings: zero-shot against label descriptions, or few-shot from "
        "labelled examples.",
        texts="texts to classify, one per line (at most 50)",
        labels="label names, one per line, optionally 'name: description' (needed for zero-shot)",
        examples="labelled examples for few-shot (.csv with a text,label header, or .jsonl), or None",
        method="zero-shot, knn, centroid or logreg",
        k="neighbours voting in knn (1 to 50)",
        template="the zero-shot prompt, with {label} or {description} in it",
        projection="the embedding map's 2-D projection: pca or tsne",
    ),
}


def docstring(endpoint: Endpoint) -> str:
    """The callback's docstring in the form Gradio's MCP server reads (a description, then ``Args:``)."""
    described = endpoint.args | (
        {"first_stage": first_stage_help()} if "first_stage" in endpoint.args else {}
    )
    args = "\n".join(f"    {name}: {text}" for name, text in described.items())
    return f"{endpoint.description}\n\nArgs:\n{args}\n"


def public_events(demo: gr.Blocks) -> list:
    """The Blocks' functions with an API name that clients see."""
    return [fn for fn in demo.fns.values() if fn.api_name and fn.api_visibility == "public"]


def document_api(demo: gr.Blocks) -> gr.Blocks:
    """Docstrings (MCP tools) and names from ``ENDPOINTS`` onto the demo's public endpoints."""
    for fn in public_events(demo):
        endpoint = ENDPOINTS.get(fn.api_name)
        if endpoint is None:
            logger.warning("API endpoint /%s is not documented in ctxir/app/api.py", fn.api_name)
        elif fn.fn is not None:
            fn.fn.__doc__ = docstring(endpoint)
            fn.fn.__name__ = fn.api_name  # the MCP tool's name (Gradio names a tool after its function)
    return demo
