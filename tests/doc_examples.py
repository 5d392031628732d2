"""docs/guides/api.md's Python blocks run as a reader runs them, in order, in one namespace, against a served app: its
``Client("http://127.0.0.1:7860/")`` becomes a client of that app, which records every endpoint called, and the
startup corpus's name, ``"demo"`` there, becomes the served app's. Used by tests/test_app_client.py."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "guides" / "api.md"
DOC_NAME = DOC.relative_to(ROOT).as_posix()
DOC_URL = "http://127.0.0.1:7860/"
DOC_CORPUS = '"demo"'


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of every fenced ``python`` block of ``text``, in order."""
    return [
        (text.count("\n", 0, m.start(1)) + 1, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    ]


class RecordingClient:
    """The served app's client, noting each ``api_name`` a block calls."""

    def __init__(self, client):
        self._client = client
        self.called: list[str] = []

    def predict(self, *args, api_name: str | None = None, **kwargs):
        self.called.append(api_name)
        return self._client.predict(*args, api_name=api_name, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def run_doc_examples(client, url: str, corpus: str, monkeypatch) -> list[str]:
    """Run every Python block of docs/guides/api.md against the app at ``url`` (the caller has chdir'd to a scratch folder:
    the blocks write their example files); → the endpoints called, in order. A block that raises fails with its
    line number in docs/guides/api.md."""
    import gradio_client

    recording = RecordingClient(client)

    def connect(src, *args, **kwargs):
        assert src == url, f"{DOC_NAME} connects to {src!r}, not {DOC_URL!r}"
        return recording

    monkeypatch.setattr(gradio_client, "Client", connect)
    namespace: dict = {"__name__": "docs_guides_api_md"}
    for line, code in python_blocks(DOC.read_text(encoding="utf-8")):
        code = code.replace(DOC_URL, url).replace(DOC_CORPUS, repr(corpus).replace("'", '"'))
        try:
            exec(compile(code, f"{DOC_NAME}, the block at line {line}", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"{DOC_NAME}'s block at line {line} failed: {err!r}\n{code}") from err
    return recording.called
