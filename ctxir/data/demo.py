"""The packaged demo data (``ctxir/assets``): the demo corpus, its example queries and the app's preset texts."""

from __future__ import annotations

import json
from pathlib import Path

from ctxir.data.beir import load_corpus, load_queries
from ctxir.types import Corpus

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def demo_corpus() -> Corpus:
    return load_corpus(ASSETS / "demo_corpus.jsonl")


def demo_presets() -> dict:
    return json.loads((ASSETS / "demo_sentences.json").read_text(encoding="utf-8"))


def demo_queries() -> list[str]:
    return list(load_queries(ASSETS / "demo_queries.jsonl").values())
