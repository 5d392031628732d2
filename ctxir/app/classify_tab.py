"""Classify tab (/classify): texts labelled by the bi-encoder's embeddings, zero-shot or from examples."""

from __future__ import annotations

import random
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd

from ctxir.app.figures import class_map, class_scores
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_literal, plural, snippet, split_lines, uploaded
from ctxir.app.ui import PRIVATE, Ui, exports, frame, guard, show
from ctxir.checks import check_choice, check_int, check_text
from ctxir.classify import TEMPLATES, ZeroShotClassifier, make_classifier, sample_per_class
from ctxir.data.labelled import Label, load_labelled, load_labels
from ctxir.encoders.bi_encoder import BiEncoder
from ctxir.files import write_atomic
from ctxir.types import CtxirError
from ctxir.viz.embeddings import PROJECTIONS, project

METHODS = ("zero-shot", "knn", "centroid", "logreg")
MAX_TEXTS = 50  # texts classified per request
MAX_EXAMPLES = 1_000  # labelled rows per upload: ~40 s of encoding on a 2-core CPU
NEIGHBOUR_COLUMNS = ["#", "rank", "neighbour", "label", "cosine"]
_SCORE_NAMES = {"zero-shot": "cosine", "knn": "vote share", "centroid": "cosine", "logreg": "probability"}
AGNEWS = Path(__file__).resolve().parents[3] / "shared" / "data" / "agnews"
AGNEWS_LABELS = Path(__file__).resolve().parents[1] / "assets" / "agnews_labels.csv"
# Written for this app (not from any data set), used as the sample when the AG News folder is not beside the checkout.
BUILT_IN_TEXTS = [
    "The striker scored twice as the home side won the cup final.",
    "Parliament voted to approve the new trade agreement with its neighbours.",
    "Shares of the carmaker fell after it cut its profit forecast.",
    "Engineers released a faster browser engine and a new phone chip.",
]
BUILT_IN_EXAMPLES = [
    ("The goalkeeper saved a penalty in the last minute of the match.", "Sports"),
    ("The tennis champion won her third title of the season.", "Sports"),
    ("Rebels and the government agreed to a ceasefire after talks.", "World"),
    ("The prime minister met foreign leaders at the summit.", "World"),
    ("The bank reported higher quarterly earnings and raised its dividend.", "Business"),
    ("Oil prices rose as markets worried about supply.", "Business"),
    ("Researchers launched a satellite to study the climate.", "Sci/Tech"),
    ("The software company fixed a security flaw in its operating system.", "Sci/Tech"),
]


def parse_labels(text) -> list[Label]:
    """One label per line, ``name`` or ``name: description``; a list of names is accepted too (API users)."""
    items = split_lines(text, "labels", 20, 300, min_items=2)
    labels = [Label(name.strip(), about.strip()) for name, _, about in (i.partition(": ") for i in items)]
    names = [label.name for label in labels]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise CtxirError(f"labels name {repeated[0]!r} more than once: keep one line per label")
    return labels


def classify_view(
    state: AppState,
    texts,
    labels="",
    examples=None,
    method: str = "zero-shot",
    k: int = 5,
    template: str = TEMPLATES[1],
    projection: str = "pca",
) -> ViewResult:
    """Classify ``texts`` (one per line) zero-shot from ``labels`` or few-shot from the ``examples`` file."""
    texts = split_lines(texts, "texts", MAX_TEXTS, state.config.max_text_chars)
    method = check_choice(method, "method", METHODS)
    k = check_int(k, "k", 1, 50)
    projection = check_choice(projection, "projection", PROJECTIONS)
    rows = []
    if examples:  # a visitor's labelled examples (.csv/.tsv text,label or .jsonl), within the app's limits
        path = uploaded(examples, state.config.max_upload_mb, "accepts files", "upload a smaller sample")
        rows = load_labelled(path)
        if len(rows) > MAX_EXAMPLES:
            raise CtxirError(
                f"{path.name} has {len(rows):,} labelled rows; this app encodes at most {MAX_EXAMPLES:,} on "
                "its CPU: upload a sample (ctxir classify takes any size)"
            )
        for i, (text, _) in enumerate(rows, 1):
            check_text(text, f"{path.name} row {i}", state.config.max_text_chars)
    named = parse_labels(labels) if str(labels or "").strip() else []
    zero_shot = method == "zero-shot"
    if zero_shot and not named:
        raise CtxirError("zero-shot needs label names: type at least 2 in Labels (one per line)")
    if not zero_shot and not rows:
        raise CtxirError(
            f"{method} needs labelled examples: upload a .csv (text,label) or .jsonl file, load the "
            "sample, or choose zero-shot"
        )
    if rows and len({y for _, y in rows}) < 2:
        raise CtxirError("the labelled examples hold only one label: give examples of at least 2")
    template = check_text(template, "template", 200)
    # in memory only: a visitor's texts never reach the persistent cache
    encoder = BiEncoder(state.models.bi_encoder, cache=None)
    text_x = encoder.encode(texts)  # (texts, D)
    empty = np.zeros((0, text_x.shape[1]), np.float32)
    example_x = encoder.encode([t for t, _ in rows]) if rows else empty  # (examples, D)
    if zero_shot:
        classifier = ZeroShotClassifier(encoder, named, template)
        unknown = sorted({y for _, y in rows} - set(classifier.classes))
        if unknown:
            raise CtxirError(
                f"example label {unknown[0]!r} is not among the labels {sorted(classifier.classes)!r}: "
                "add it to Labels or fix the file"
            )
    else:
        classifier = make_classifier(f"knn-{k}" if method == "knn" else method, encoder, "uniform")
    if rows:
        classifier.fit_embeddings(example_x, [y for _, y in rows])
    classifier.texts = [t for t, _ in rows]
    classes = classifier.classes
    predictions = classifier.predict_embeddings(text_x, 3 if rows else 0)  # 3 nearest examples each
    # the 2-D map: examples, texts and (zero-shot) label embeddings projected together
    label_x = classifier.label_vectors if zero_shot else empty
    xy = project(np.concatenate([example_x, text_x, label_x]), projection)
    kinds = ["example"] * len(rows) + ["text"] * len(texts) + ["label"] * len(label_x)
    classes_of = [y for _, y in rows] + [p.label for p in predictions] + list(classes[: len(label_x)])
    shown = [t for t, _ in rows] + texts + (classifier.prompts if zero_shot else [])
    d = state.config.decimals
    data = {
        "method": method,
        "k": k if method == "knn" else None,
        "score": _SCORE_NAMES[method],
        "template": template if zero_shot else None,
        "projection": projection,
        "classes": list(classes),
        "examples": len(rows),
        "predictions": [
            {
                "text": t,
                "label": p.label,
                "scores": {c: round(s, d) for c, s in p.scores.items()},
                "neighbours": [
                    {"text": n.text, "label": n.label, "cosine": round(n.similarity, d)} for n in p.neighbours
                ],
            }
            for t, p in zip(texts, predictions, strict=True)
        ],
        "points": [
            {"x": round(float(x), 4), "y": round(float(y), 4), "kind": kind, "label": label, "text": text}
            for (x, y), kind, label, text in zip(xy, kinds, classes_of, shown, strict=True)
        ],
    }
    how = (
        f"zero-shot, template {md_literal(template)}"
        if zero_shot
        else f"{method}{f' (k={k})' if method == 'knn' else ''} on {plural(len(rows), 'labelled example')}"
    )
    counts = {c: sum(p.label == c for p in predictions) for c in classes}
    numbered = list(enumerate(data["predictions"], 1))
    table = [
        {"#": i, "text": snippet(p["text"], 100), "prediction": p["label"], "score": p["scores"][p["label"]]}
        | p["scores"]
        for i, p in numbered
    ]
    neighbours = [
        {"#": i, "rank": r, "neighbour": snippet(n["text"], 100), "label": n["label"], "cosine": n["cosine"]}
        for i, p in numbered
        for r, n in enumerate(p["neighbours"], 1)
    ]
    text = f"{plural(len(texts), 'text')} classified by {how}; scores are {_SCORE_NAMES[method]}s. "
    text += ", ".join(f"{md_literal(c)} {n}" for c, n in sorted(counts.items()) if n)
    return ViewResult(rows=table, extra_rows=neighbours, data=data, text=text)


def sample_inputs(out_root: Path) -> tuple[str, str, str]:
    """(texts, labels, examples file) for the sample: per class 3 AG News test texts, 8 training rows."""
    if (AGNEWS / "test.csv").is_file() and (AGNEWS / "train_subset.csv").is_file():
        test, train = load_labelled(AGNEWS / "test.csv"), load_labelled(AGNEWS / "train_subset.csv")
        picked = sample_per_class([y for _, y in test], 3, seed=0)
        random.Random(0).shuffle(picked)
        texts = [test[i][0] for i in picked]
        examples = [train[i] for i in sample_per_class([y for _, y in train], 8, seed=0)]
    else:
        texts, examples = BUILT_IN_TEXTS, BUILT_IN_EXAMPLES
    path = out_root / f"classify-sample-{'agnews' if texts is not BUILT_IN_TEXTS else 'built-in'}.csv"
    # whole or not at all: a full disk is a DiskFullError naming the folder, and no half file is served
    write_atomic(path, pd.DataFrame(examples, columns=["text", "label"]).to_csv(index=False))
    labels = [
        f"{label.name}: {label.description}" if label.description else label.name
        for label in load_labels(AGNEWS_LABELS)
    ]
    return "\n".join(texts), "\n".join(labels), str(path)


def after_classify(out, data):
    """Drawn from the answer: the score bars, the embedding map and the downloads (a private step)."""
    predictions, classes = data["predictions"], data["classes"]
    scores = [[p["scores"][c] for c in classes] for p in predictions]  # (texts, labels)
    bars = class_scores([p["text"] for p in predictions], classes, scores, data["score"])
    plot = class_map(data["points"], f"texts, examples and labels in 2-D ({data['projection'].upper()})")
    rows = [{"text": p["text"], "prediction": p["label"], **p["scores"]} for p in predictions]
    files = exports(out, "classify", data=data, rows=rows, plots=[bars, plot])
    return show(bars), show(plot), show(files)


def build(ui: Ui) -> None:
    """The Classify tab (inside an open gr.Tab); event /classify."""
    out = ui.out

    @guard
    def do_classify(texts, labels, examples, method, k, template, projection):
        ui.visitor()
        r = classify_view(ui.state, texts, labels, examples, method, k, template, projection)
        return r.text, frame(r.rows), frame(r.extra_rows, NEIGHBOUR_COLUMNS), r.data

    ui.tab_intro(
        "Label texts with the bi-encoder's embeddings, no classifier training: **zero-shot** compares each "
        "text with the label names (written into a prompt template), **few-shot** with labelled examples you "
        "upload (k nearest neighbours, class centroids, logistic regression). Short label descriptions help "
        "zero-shot: AG News test accuracy 0.6796 from the names alone, 0.7714 with descriptions "
        "(docs/results.md, Classification with embeddings)."
    )
    with gr.Row():
        cls_texts = gr.Textbox(
            label=f"Texts to classify (one per line, at most {MAX_TEXTS})",
            lines=6,
            scale=3,
            value="\n".join(BUILT_IN_TEXTS),
            min_width=260,
            elem_id="classify-texts",
        )
        cls_labels = gr.Textbox(
            label="Labels (one per line; optionally  name: description)",
            lines=6,
            scale=2,
            value="World\nSports\nBusiness\nSci/Tech",
            min_width=200,
            elem_id="classify-labels",
            info="a short description after the name helps zero-shot (see above); the AG News sample has it",
        )
    with gr.Row(equal_height=True):
        cls_examples = gr.File(
            label=f"Labelled examples for few-shot (.csv text,label or .jsonl; at most "
            f"{MAX_EXAMPLES:,} rows)",
            file_types=[".csv", ".tsv", ".jsonl"],
            scale=3,
            min_width=240,
            elem_id="classify-examples",
        )
        with gr.Column(scale=2, min_width=220):
            cls_method = gr.Radio(list(METHODS), value="zero-shot", label="method")
            # the sample's 8 examples per class are too few for a large k; the CLI chooses k itself
            k_info = "neighbours that vote; ctxir classify chooses k by cross-validation on a training file"
            cls_k = gr.Slider(
                1, 50, value=5, step=1, label="k (kNN)", info=f"{k_info} (k=15 on AG News's 8,000 rows)"
            )
    with gr.Row():
        cls_template = gr.Dropdown(
            list(TEMPLATES),
            value=TEMPLATES[1],
            allow_custom_value=True,
            scale=3,
            label="zero-shot template ({label}, {description})",
            min_width=240,
        )
        cls_projection = gr.Radio(list(PROJECTIONS), value="pca", label="2-D map", scale=1, min_width=140)
    with gr.Row():
        cls_button = gr.Button("Classify", variant="primary", elem_id="classify-button")
        sample_button = gr.Button("Load the AG News sample", elem_id="classify-sample-button")
    cls_summary = ui.summary("classify-summary")
    cls_table = ui.table("classify-table", "Predictions: the score of every label", "fit")
    cls_bars = ui.plot("Score per label, per text (hover a bar)", "classify-bars")
    cls_map = ui.plot(
        "Embedding map: colour = class; ◆ texts, ● examples, ★ labels (hover a point)", "classify-map"
    )
    with gr.Accordion("Nearest labelled examples of each text", open=False):
        cls_neighbours = ui.table(
            "classify-neighbours", "neighbours", "fit", value=frame([], NEIGHBOUR_COLUMNS), show_label=False
        )
    cls_files = ui.downloads("interactive HTML, CSV, JSON")
    cls_json = ui.numbers()

    inputs = [cls_texts, cls_labels, cls_examples, cls_method, cls_k, cls_template, cls_projection]
    outputs = [cls_summary, cls_table, cls_neighbours, cls_json]
    hide = [cls_table, cls_bars, cls_map, cls_files]
    shown = ui.view_event(
        cls_button.click, do_classify, inputs, outputs, "classify", empty=[cls_summary], hide=hide
    )
    drawn = [cls_bars, cls_map, cls_files]
    shown.success(show, [cls_table], [cls_table], **PRIVATE).success(
        lambda data: after_classify(out, data), [cls_json], drawn, api_visibility="private"
    )
    sample = [cls_texts, cls_labels, cls_examples]
    sampled = sample_button.click(
        guard(lambda: sample_inputs(out.root)), None, sample, api_visibility="private"
    )
    sampled.success(lambda: "knn", None, [cls_method], **PRIVATE)
