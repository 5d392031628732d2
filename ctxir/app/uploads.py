"""Uploads (/upload_corpus, a Search tab panel): a visitor's corpus file, checked and indexed for them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr

from ctxir.app.config import Progress
from ctxir.app.corpus_index import Owner
from ctxir.app.state import AppState, ViewResult
from ctxir.app.text import md_code, plural, snippet, uploaded
from ctxir.app.ui import Ui, frame, guard, numbers, show, steps, view_event
from ctxir.types import CtxirError

if TYPE_CHECKING:
    from ctxir.app.search_form import SearchForm


def upload_corpus(
    state: AppState, path: str | Path | None, progress: Progress | None = None, owner: Owner = None
) -> ViewResult:
    """Index a user's corpus file (.txt/.jsonl/.csv/.tsv) for ``owner``."""
    from ctxir.data.user_corpus import USER_CORPUS_SUFFIXES, load_user_corpus

    if not path:
        raise CtxirError(f"no file was uploaded: choose a corpus file ({', '.join(USER_CORPUS_SUFFIXES)})")
    path = uploaded(path, state.config.max_upload_mb, "accepts corpus files", "upload a smaller sample")
    raw = path.read_bytes()
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise CtxirError(
            f"{path.name} contains a NUL byte (line {line}, byte offset {nul}): "
            "it is a binary file or UTF-16 text, not a UTF-8 text corpus. Save it as UTF-8 text "
            "(.txt/.jsonl/.csv/.tsv) and upload it again"
        )
    corpus = load_user_corpus(path)
    for doc_id, doc in corpus.items():
        if any("\x00" in str(doc.get(key, "")) for key in ("title", "text")) or "\x00" in str(doc_id):
            raise CtxirError(
                f"{path.name}: document {str(doc_id).replace(chr(0), '')!r} contains a NUL character "
                "(\\u0000 in JSON): remove it and upload the file again"
            )
    if len(corpus) > state.config.max_upload_docs:
        raise CtxirError(
            f"{path.name} has {len(corpus):,} documents; this app indexes at most "
            f"{state.config.max_upload_docs:,} uploaded documents on its CPU: upload a sample, or start "
            "the app on the full corpus with --corpus PATH"
        )
    digest = hashlib.sha256(raw).hexdigest()[:8]
    stem = re.sub(r"[^\w.-]+", "_", path.stem)[:40].strip("._") or "upload"
    name = f"{stem}-{digest}"
    state.uploads.check_room(owner, name)  # refuse before minutes of encoding, not after
    # cache=None: an upload's vectors live in memory with its index and go with it, never in the user cache
    index = state.new_index(name, corpus, f"upload {path.name}", progress, None)
    dropped = state.uploads.add(index, owner)
    rows = [
        {"doc_id": doc_id, "title": doc.get("title", ""), "text": snippet(doc.get("text", ""))}
        for doc_id, doc in list(corpus.items())[:10]
    ]
    data = {"corpus": name, "documents": len(corpus), "file": path.name, "sample": rows, "dropped": dropped}
    text = (
        f"Indexed **{plural(len(corpus), 'document')}** from {md_code(path.name)} as corpus {md_code(name)} "
        "(visible only to you, for this session)."
    )
    if dropped:
        text += (
            f" Your older upload(s) {', '.join(md_code(n) for n in dropped)} were removed: each visitor keeps "
            f"at most {state.config.max_corpora}."
        )
    return ViewResult(rows=rows, data=data, text=text)


def panel(ui: Ui, form: SearchForm) -> None:
    cfg = ui.config
    with gr.Accordion("Upload your own corpus (.txt, .jsonl, .csv, .tsv)", open=False):
        gr.Markdown(
            '.txt = one document per line · .jsonl = `{"id", "title", "text"}` per line · '
            ".csv/.tsv = a header row with a `text` column (optional `id`, `title`). "
            f"At most {cfg.max_upload_docs:,} documents and {cfg.max_upload_mb:g} MB; only you see it, "
            "for this session."
        )
        file = gr.File(
            label="Corpus file", file_types=[".txt", ".jsonl", ".csv", ".tsv"], elem_id="upload-file"
        )
        button = gr.Button("Index this corpus", elem_id="upload-button")
        summary = gr.Markdown(elem_id="upload-summary")
        table = gr.Dataframe(
            label="First documents",
            wrap=True,
            elem_classes=["ctxir-table", "ctxir-fit-table"],
            visible=False,
            elem_id="upload-table",
        )
        json = numbers()
    state = ui.state

    @guard
    def do_upload(file, request: gr.Request, progress=gr.Progress(track_tqdm=True)):  # noqa: B008 (gradio's pattern)
        owner = ui.visitor(request)
        if not owner:
            raise CtxirError(
                "this request has no Gradio session, and an upload is kept per session: upload from "
                "the web page or with gradio_client (each Client is one session)"
            )
        r = upload_corpus(state, file, progress=steps(progress), owner=owner)
        return r.text, frame(r.rows), r.data

    def refresh_corpora(data, request: gr.Request):
        # A separate, private step: API users of /upload_corpus get the corpus name in the JSON, not a UI update.
        return gr.update(
            choices=state.corpus_names_for(ui.visitor(request)),
            value=(data or {}).get("corpus", state.default_corpus),
        ), show()

    view_event(
        button.click,
        do_upload,
        [file],
        [summary, table, json],
        "upload_corpus",
        empty=[summary],
        hide=[table],
        after=(refresh_corpora, [json], [form.corpus, table]),
    )
