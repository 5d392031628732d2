"""The first-stage registry: a fourth first stage is one entry, and the CLI, the app and the API offer it."""

from __future__ import annotations

import json

import pytest

from ctxir.app.config import AppConfig
from ctxir.app.models import AppModels
from ctxir.app.state import AppState
from ctxir.retrieval.registry import (
    FIRST_STAGE_CHOICES,
    FIRST_STAGES,
    FirstStageKind,
    StageParts,
    first_stage_choices,
    get_first_stage,
    register_first_stage,
)
from ctxir.retrieval.retrievers import Retriever
from ctxir.types import CtxirError, Hit

CORPUS = {
    "d1": {"title": "", "text": "otters play in the river water"},
    "d2": {"title": "", "text": "money deposit at the bank account"},
    "d3": {"title": "", "text": "the river bank and the otters"},
    "d4": {"title": "", "text": "python code is a snake"},
}


class SharedWords(Retriever):
    """Ranks documents by how many distinct query words they hold (ties by corpus order): no index, no model."""

    name = "shared-words"

    def _search(self, texts: list[str], top_k: int) -> list[list[Hit]]:
        out = []
        for text in texts:
            words = set(text.lower().split())
            scored = [
                (len(words & set(self.corpus[d]["text"].lower().split())), i, d)
                for i, d in enumerate(self.doc_ids)
            ]
            ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
            out.append([Hit(d, float(n)) for n, _, d in ranked[:top_k]])
        return out


SHARED_WORDS = FirstStageKind(
    name="shared-words",
    label="shared words",
    ranks_by="the query words a document holds",
    build=lambda parts: SharedWords(parts.corpus),
)


@pytest.fixture
def shared_words(monkeypatch):
    monkeypatch.setitem(FIRST_STAGES, SHARED_WORDS.name, SHARED_WORDS)  # removed again after the test
    assert register_first_stage(SHARED_WORDS) is SHARED_WORDS
    return SHARED_WORDS


def test_the_three_first_stages_and_what_they_are_made_of():
    assert first_stage_choices() == ("bm25", "dense", "hybrid") == tuple(FIRST_STAGE_CHOICES)
    made_of = {name: (k.uses_bm25, k.uses_bi_encoder, k.fuses) for name, k in FIRST_STAGES.items()}
    assert made_of == {
        "bm25": (True, False, False),
        "dense": (False, True, False),
        "hybrid": (True, True, True),
    }
    with pytest.raises(CtxirError, match="first stage 'splade' is not known: use one of 'bm25', 'dense'"):
        get_first_stage("splade")
    with pytest.raises(CtxirError, match=r"first stage name 'two words' must be letters, digits and '-'"):
        register_first_stage(FirstStageKind("two words", "x", "x", build=lambda parts: None))
    assert "shared-words" not in FIRST_STAGES  # the fixture's entry is gone outside its tests


def test_stage_parts_are_built_once(tiny_st):
    from ctxir.encoders import BiEncoder

    parts = StageParts(CORPUS, [BiEncoder(tiny_st, cache=None)])
    assert parts.bm25() is parts.bm25() and parts.dense() is parts.dense()
    hybrid = FIRST_STAGES["hybrid"].build(parts)
    assert hybrid.retrievers == [parts.bm25(), parts.dense()]


def test_one_entry_adds_a_first_stage_to_the_cli(shared_words, write_beir, tmp_path, capsys):
    from ctxir.cli import main

    data = write_beir(
        tmp_path / "beir",
        {"q1": "river otters", "q2": "python snake"},
        {"test": {"q1": {"d1": 1}, "q2": {"d3": 1}}},
        {doc_id: doc["text"] for doc_id, doc in CORPUS.items()},
    )
    out = tmp_path / "r.json"
    argv = ["evaluate", "--data", str(data), "--retriever", "shared-words", "--output", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["system"] == "shared-words" and result["config"]["retriever"] == "shared-words"
    assert result["runs"]["shared-words"]["q1"] == {"d1": 2.0, "d3": 2.0}
    assert result["metrics"]["shared-words"]["Recall@10"] == 0.5  # q2's relevant d3 holds neither word
    assert "| shared-words |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["evaluate", "--data", str(data), "--retriever", "splade"])
    assert "shared-words" in capsys.readouterr().err  # argparse lists the choices, the new stage among them
    assert main(["evaluate", "--data", str(data), "--retriever", "shared-words", "--extra-models", "m"]) == 2
    assert "--extra-models 'm' needs --retriever hybrid" in capsys.readouterr().err


def test_one_entry_adds_a_first_stage_to_the_app_and_its_api(shared_words, _tiny_st):
    from ctxir.app.blocks import build_demo
    from ctxir.app.search import search

    state = AppState(
        AppModels.from_objects(_tiny_st, "tiny-bert"), AppConfig(device="cpu"), CORPUS, "toy", cache=None
    )
    found = search(state, "river otters", None, "shared-words", k=3)
    assert [r["doc_id"] for r in found.rows] == ["d1", "d3"]
    assert found.rows[0]["shared-words_score"] == 2.0 and found.data["first_stage"] == "shared-words"
    assert state.index(None).retriever("shared-words") is state.index(None).stages["shared-words"]
    demo = build_demo(state)
    import gradio as gr

    [radio] = [b for b in demo.blocks.values() if isinstance(b, gr.Radio) and b.label == "First stage"]
    assert radio.choices == [
        ("bm25", "bm25"),
        ("dense", "dense"),
        ("hybrid", "hybrid"),
        ("shared words", "shared-words"),
    ]
    # the HTTP API: Gradio lets the radio's values through to /search, and its docs name the new stage
    assert radio.preprocess("shared-words") == "shared-words"
    with pytest.raises(
        gr.Error, match=r"First stage must be one of \['bm25', .*'shared-words'\], got 'splade'"
    ):
        radio.preprocess("splade")
    [endpoint] = [fn for fn in demo.fns.values() if fn.api_name == "search"]
    assert "shared-words (the query words a document holds)" in endpoint.fn.__doc__
    inputs = ("river otters", "toy", "shared-words", "none", 3, 10, "fused", None, None)  # prompts: the own
    _table, summary, data = endpoint.fn(*inputs)
    assert [h["doc_id"] for h in data["hits"]] == ["d1", "d3"] and "2 results" in summary
