"""The re-ranker registry (ctxir.rerankers, issue #20 §1): one entry per kind, read by the CLI, the app and the
explanations; what is available is found from the files on this machine, with no network.

Models are tiny and built here: the random 2-layer BERT of conftest under ctxir's modular cross-encoder chain
(``TopLayersTransformer`` + ``SegmentCosineHead``, as the shipped one will be), and a word-overlap re-ranker that a
test registers as a new kind, to show that one entry reaches every place that offers a re-ranker."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxir.app import config as names
from ctxir.app import pairs_tab
from ctxir.app.config import AppConfig
from ctxir.app.explain_tab import explain_pair
from ctxir.app.models import AppModels
from ctxir.app.pairs_tab import score_pairs
from ctxir.app.search import search
from ctxir.app.state import AppState
from ctxir.app.what_moved import what_moved
from ctxir.encoders import models
from ctxir.rerank import Reranker
from ctxir.rerank.pipeline import StageFusion
from ctxir.rerank.registry import (
    RERANKERS,
    RerankerKind,
    available_rerankers,
    get_reranker,
    kind_of,
    load_reranker,
    local_model_folder,
    register_reranker,
    reranker_choices,
)
from ctxir.types import CtxirError

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")

QUERY = "otters play on the river bank"
CORPUS = {
    "d1": {"title": "", "text": "otters play in the river water"},
    "d2": {"title": "", "text": "money deposit at the bank account"},
    "d3": {"title": "", "text": "the river bank and the otters"},
    "d4": {"title": "", "text": "python code is a snake"},
    "d5": {"title": "", "text": "the cat sat on the dog at the bank"},
}


# ---------------------------------------------------------------- a modular cross-encoder, as ctxir will ship one


def _modular_cross_encoder(tiny_bert_dir: Path):
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer

    body = TopLayersTransformer(str(tiny_bert_dir), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    body.max_seq_length = 32
    body.freeze_below(1, str(tiny_bert_dir))
    ce = CrossEncoder(modules=[body, SegmentCosineHead(32)], device="cpu", activation_fn=torch.nn.Identity())
    torch.manual_seed(1)
    with torch.no_grad():  # a "trained" top layer and head: not the base's numbers
        for parameter in ce.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn_like(parameter))
    return ce


@pytest.fixture(scope="module")
def modular_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """A modular cross-encoder saved as its trained top layers, with the fusion.json ship.py would copy in."""
    folder = tmp_path_factory.mktemp("modular") / "ce"
    _modular_cross_encoder(tiny_bert_dir).save_pretrained(str(folder))
    (folder / "fusion.json").write_text(
        json.dumps(
            {
                "method": "weighted",
                "weights": [0.5, 1.0],
                "k": None,
                "chosen_on": "809 SciFact training claims",
            }
        )
    )
    return folder


@pytest.fixture(scope="module")
def modular(modular_dir):
    models.load_cross_encoder.cache_clear()
    return load_reranker("cross-encoder", str(modular_dir), "cpu")


# ---------------------------------------------------------------- the registry itself


def test_each_kind_is_described_once_with_every_name_it_goes_by():
    assert list(RERANKERS) == ["cross-encoder", "cls-lr", "sts-cross-encoder"]
    assert reranker_choices() == ("none", *RERANKERS)
    ce, lr, sts = RERANKERS["cross-encoder"], RERANKERS["cls-lr"], RERANKERS["sts-cross-encoder"]
    assert (sts.key, sts.pair_column, sts.rank_column, sts.card) == (
        "sts_cross_encoder",
        "sts_cross_encoder_score",
        "sts_cross_encoder_rank",
        "cross-encoder",
    )
    assert sts.shipped == models.SHIPPED_STS_CROSS_ENCODER and "train_pair_scorer.py" in sts.how_to_get
    assert (ce.key, ce.card) == ("cross_encoder", "cross-encoder")
    assert (lr.pair_column, lr.rank_column) == ("cls_lr_probability", "cls_lr_rank")
    assert (ce.shipped, lr.shipped) == (models.SHIPPED_CROSS_ENCODER, models.SHIPPED_CLS_LR)
    with pytest.raises(
        CtxirError, match=r"re-ranker 'colbert' is not known: use one of 'none', 'cross-encoder'"
    ):
        get_reranker("colbert")
    with pytest.raises(CtxirError, match="is no re-ranker ctxir knows"):
        kind_of(object())


def test_the_app_names_each_kind_in_its_own_words():
    ce, lr, sts = RERANKERS["cross-encoder"], RERANKERS["cls-lr"], RERANKERS["sts-cross-encoder"]
    assert [(names.flag(k), names.env(k), k.key) for k in (ce, sts)] == [
        ("--cross-encoder", "CTXIR_CROSS_ENCODER", "cross_encoder"),
        ("--sts-cross-encoder", "CTXIR_STS_CROSS_ENCODER", "sts_cross_encoder"),
    ]
    shown, legends = pairs_tab.shown_names(), pairs_tab.score_columns()
    assert [shown[k.rank_column] for k in (ce, lr, sts)] == ["CE rank", "LR rank", "STS rank"]
    assert [legends[k.pair_column][1] for k in (lr, sts)] == ["CLS-LR probability", "STS similarity score"]
    hint = names.unavailable_hint(lr)
    assert (
        "train_cls_lr.py" in hint
        and "restart the app with `--cls-lr <its output folder>` (or set CTXIR_CLS_LR)" in hint
    )


def test_availability_is_read_from_the_files_here_never_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))  # a Hub id is in no cache
    ce, lr = RERANKERS["cross-encoder"], RERANKERS["cls-lr"]
    assert ce.available("none") == (False, "turned off with 'none'")
    # an installation whose package lacks the shipped CLS-LR ranker
    monkeypatch.setitem(models.SHIPPED_MODELS, models.SHIPPED_CLS_LR, tmp_path / "not-shipped")
    ok, why = lr.available("")
    assert not ok and "ships no CLS-LR re-ranker" in why and "train_cls_lr.py" in why
    assert ce.available(str(tmp_path / "nope")) == (
        False,
        f"model folder {str(tmp_path / 'nope')!r} does not exist",
    )
    ok, why = ce.available("someone/unknown-reranker")
    assert not ok and "nor in the local Hugging Face cache" in why
    assert (
        ce.available(str(tmp_path)) == (True, "") and local_model_folder(str(tmp_path)) == tmp_path.resolve()
    )
    # once the shipped folder exists, the kind switches on by itself, with the shipped model as its default
    shipped = tmp_path / "cls-lr"
    shipped.mkdir()
    monkeypatch.setitem(models.SHIPPED_MODELS, models.SHIPPED_CLS_LR, shipped)
    assert lr.default_model() == models.SHIPPED_CLS_LR and lr.available() == (True, "")
    assert available_rerankers()["cls-lr"] == (True, "")
    shipped.rmdir()
    assert lr.available(models.SHIPPED_CLS_LR)[1].startswith("the shipped model")


def test_load_reranker_refuses_what_is_not_here_before_loading(tmp_path, monkeypatch):
    assert load_reranker("none") is None
    monkeypatch.setitem(models.SHIPPED_MODELS, models.SHIPPED_CLS_LR, tmp_path / "not-shipped")
    with pytest.raises(
        CtxirError,
        match=r"the CLS-LR re-ranker is not available: this installation ships no .*"
        r"train_cls_lr.py.* and pass its output folder as model",  # the library's words: its argument
    ):
        load_reranker("cls-lr")
    with pytest.raises(CtxirError, match="does not exist"):
        load_reranker("cross-encoder", str(tmp_path / "missing"))


def test_the_fused_mode_reads_the_model_folders_fusion_json(modular, modular_dir, tiny_bert_dir):
    assert modular.stage_fusion == StageFusion("weighted", (0.5, 1.0))
    assert modular.stage_fusion.record() == {
        "method": "weighted",
        "weights": [0.5, 1.0],
        "k": None,
        "chosen_on": "809 SciFact training claims",
    }
    plain = load_reranker("cross-encoder", str(tiny_bert_dir), "cpu")  # no fusion.json: RRF k=60, 1:1
    assert plain.stage_fusion == StageFusion("rrf", (1.0, 1.0), 60) == StageFusion.default()
    bad = modular_dir.parent / "bad"
    bad.mkdir()
    (bad / "fusion.json").write_text('{"method": "max"}')
    with pytest.raises(CtxirError, match=r"is not a fusion\.json"):
        StageFusion.from_file(bad / "fusion.json")


def test_a_modular_cross_encoder_is_explained_by_integrated_gradients(modular, tiny_st):
    from ctxir.explain import explain

    document = CORPUS["d3"]["text"]
    out = explain(QUERY, document, bi_encoder=tiny_st, rerankers={"cross-encoder": modular}, attention=False)
    ce = out["cross_encoder"]
    assert ce["model_kind"] == "cross-encoder" and ce["score_kind"].startswith(
        "Identity(logit)"
    )  # raw scores
    assert ce["score"] == pytest.approx(float(modular.score_pairs(QUERY, [document])[0]), abs=1e-4)
    gap = ce["score"] - ce["baseline_score"]
    assert sum(ce["attributions"]) == pytest.approx(gap, abs=max(0.01 * abs(gap), 1e-4))
    assert ce["tokens"][ce["sentence_b_start"]] == "the"  # the document's first word
    with pytest.raises(CtxirError, match="re-ranker 'colbert' is not known"):
        explain(QUERY, document, bi_encoder=tiny_st, rerankers={"colbert": modular})


# ---------------------------------------------------------------- the app: what is offered


def _radios(demo, label: str) -> list:
    import gradio as gr

    return [b for b in demo.blocks.values() if isinstance(b, gr.Radio) and b.label == label]


@pytest.fixture(scope="module")
def modular_state(_tiny_st, modular):
    """An app with the modular cross-encoder and no CLS-LR ranker."""
    found = AppModels.from_objects(_tiny_st, "tiny-bert", cross_encoder=modular)
    return AppState(found, AppConfig(device="cpu"), CORPUS, "toy", cache=None)


def test_a_kind_that_is_not_loaded_is_offered_nowhere_and_says_why(modular_state):
    from ctxir.app.blocks import build_demo, missing_models, status_line

    assert modular_state.models.loaded == ["cross-encoder"]
    assert "CLS-LR ✗ not loaded" in status_line(modular_state) and "cross-encoder ✓" in status_line(
        modular_state
    )
    assert "**CLS-LR**: no CLS-LR re-ranker was given (start with `--cls-lr FOLDER`)" in missing_models(
        modular_state
    )
    demo = build_demo(modular_state)
    [reranker] = _radios(demo, "Re-ranker")
    assert [value for _, value in reranker.choices] == ["none", "cross-encoder"]
    assert "not loaded: CLS-LR" in reranker.info
    for radio in _radios(demo, "Explain with"):  # Search, Pair scoring and Explain tabs
        assert [value for _, value in radio.choices] == ["auto", "bi-encoder", "cross-encoder"]
    # an API client that sends it anyway is told why it is missing and how to load one, not only what is accepted
    import gradio as gr

    with pytest.raises(gr.Error) as err:
        reranker.preprocess("cls-lr")
    assert "CLS-LR re-ranker is not available (no CLS-LR re-ranker was given)" in err.value.plain_message
    assert "restart the app with `--cls-lr <its output folder>`" in err.value.plain_message
    assert reranker.preprocess("cross-encoder") == "cross-encoder"
    # a name no choice lists passes on (it may be a Hub id): the search's check names the kinds and ids
    assert reranker.preprocess("colbert") == "colbert"
    with pytest.raises(
        CtxirError, match=r"re-ranker 'colbert' is not known: use one of 'none', 'cross-encoder'.*Hub id"
    ):
        modular_state.models.reranker("colbert")
    [mode] = _radios(demo, "Re-rank mode")
    assert mode.value == "fused" and [value for _, value in mode.choices] == ["fused", "alone"]
    scored = score_pairs(modular_state, QUERY, [CORPUS["d1"]["text"], CORPUS["d2"]["text"]])
    assert scored.data["unavailable"] == {
        "cls-lr": "no CLS-LR re-ranker was given",
        "sts-cross-encoder": "no STS similarity re-ranker was given",
    }
    assert [r["cls_lr_probability"] for r in scored.rows] == [None, None]  # the API keeps the column, empty
    assert all(isinstance(r["cross_encoder_score"], float) for r in scored.rows)


def test_search_modes_and_what_moved_with_a_modular_cross_encoder(modular_state, modular):
    alone = search(modular_state, QUERY, None, "bm25", "cross-encoder", k=5, depth=5, mode="alone")
    fused = search(modular_state, QUERY, None, "bm25", "cross-encoder", k=5, depth=5)
    own = {r["doc_id"]: r["rerank_score"] for r in alone.rows}
    assert [r["doc_id"] for r in alone.rows] == sorted(own, key=lambda d: -own[d])
    # the folder's fusion.json: 0.5 · min–max(BM25) + 1.0 · min–max(re-ranker), by hand from the rows
    assert fused.data["fusion"]["method"] == "weighted" and fused.data["mode"] == "fused"

    def minmax(values: dict) -> dict:
        low, high = min(values.values()), max(values.values())
        return {d: (v - low) / (high - low) for d, v in values.items()}

    bm25 = minmax({r["doc_id"]: r["bm25_score"] for r in fused.rows})
    rerank = minmax({r["doc_id"]: r["rerank_score"] for r in fused.rows})
    expected = {d: 0.5 * bm25[d] + rerank[d] for d in bm25}
    for row in fused.rows:
        assert row["fused_score"] == pytest.approx(expected[row["doc_id"]], abs=1e-3)
    assert [r["doc_id"] for r in fused.rows] == sorted(expected, key=lambda d: (-expected[d], d))
    moved = what_moved(modular_state, QUERY, None, "bm25", "cross-encoder", k=5, depth=5, n=2, mode="alone")
    assert moved.data["mode"] == "alone" and 1 <= len(moved.rows) <= 2
    for mover in moved.data["movers"]:
        explained = mover["explanation"]
        assert explained["model_kind"] == "cross-encoder"
        assert explained["score"] == pytest.approx(own[mover["doc_id"]], abs=1e-3)
        assert mover["rank"] == mover["rerank_rank"]


def test_a_windowed_cross_encoder_reads_a_long_query_beside_its_whole_window(modular_dir, tmp_path):
    """passages.json's read_tokens: the loader gives the model that many tokens per pair, so a long query no longer
    cuts the window it is scored against (the top layers trained on 32 here, like the shipped model's 128)."""
    import shutil

    from ctxir.rerank import CrossEncoderReranker, Passages
    from ctxir.rerank.registry import passages_for

    folder = tmp_path / "ce"
    shutil.copytree(modular_dir, folder)
    query, window = " ".join(["otters"] * 30), " ".join(["river bank dens"] * 10)  # 30 + 30 tokens
    plain = models.load_cross_encoder.__wrapped__(str(folder), "cpu")
    assert plain.max_seq_length == 32
    assert plain.preprocess([(query, window)])["input_ids"].shape[1] == 32  # both halves cut to fit
    (folder / "passages.json").write_text('{"method": "max", "words": 70, "stride": 50, "read_tokens": 100}')
    assert passages_for(str(folder)) == Passages(70, 50, read_tokens=100)
    whole = models.load_cross_encoder.__wrapped__(str(folder), "cpu")
    assert whole.max_seq_length == 100
    assert (
        whole.preprocess([(query, window)])["input_ids"].shape[1] == 63
    )  # [CLS] 30 [SEP] 30 [SEP]: nothing cut
    (folder / "passages.json").write_text('{"method": "max", "words": 70, "stride": 50, "read_tokens": 4096}')
    capped = models.load_cross_encoder.__wrapped__(str(folder), "cpu")
    assert capped.max_seq_length == 128  # never beyond the position embeddings
    reranker = CrossEncoderReranker(whole, passages=passages_for(str(folder)))
    short = CrossEncoderReranker(plain, passages=Passages(70, 50))
    # the window read whole scores differently from the one cut to 32 tokens
    assert reranker.score_pairs(query, [window])[0] != pytest.approx(short.score_pairs(query, [window])[0])


def test_the_app_loads_a_modular_cross_encoder_folder_offline(modular_dir, tiny_bert_dir, caplog):
    """As the app will load the shipped one: by folder, its body's trained top layers in the attention views, its
    fusion.json in the fused mode; a kind whose model is not here is reported, not downloaded."""
    config = AppConfig(
        bi_encoder=str(tiny_bert_dir),
        cross_encoder=str(modular_dir),
        cls_lr="someone/not-cached-cls-lr",
        rerankers={"sts-cross-encoder": "none"},
        device="cpu",
    )
    found = AppModels.load(config)
    assert found.loaded == ["cross-encoder"] and "nor in the local Hugging Face cache" in found.why_not(
        "cls-lr"
    )
    assert "CLS-LR re-ranker unavailable, the app starts without it" in caplog.text
    ce = found.rerankers["cross-encoder"]
    assert ce.stage_fusion.chosen_on == "809 SciFact training claims"
    # the attention views read the trained body: its top layer is the saved one, not the base's
    from transformers import AutoModel

    base = AutoModel.from_pretrained(str(tiny_bert_dir))
    body = found.inspect["cross-encoder"].model
    top = "encoder.layer.1.attention.self.query.weight"
    assert not torch.allclose(body.state_dict()[top], base.state_dict()[top])
    assert torch.allclose(
        body.state_dict()[top].float(), ce.model[0].auto_model.state_dict()[top].float(), atol=1e-3
    )
    state = AppState(found, config, CORPUS, "toy", cache=None)
    assert (
        search(state, QUERY, None, "bm25", "cross-encoder", k=3, depth=5).data["fusion"]["method"]
        == "weighted"
    )


# ---------------------------------------------------------------- a new kind is one entry


class WordOverlap(Reranker):
    """Scores a pair by the words it shares: simple enough to explain exactly."""

    name = "overlap"

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        words = set(query.lower().split())
        return np.array([len(words & set(t.lower().split())) for t in texts], dtype=np.float32)


def _explain_overlap(model, query: str, document: str, **options) -> dict:
    """Each document word's share of the score: 1 when the query has it (each shared word once), else 0."""
    words, seen, shares = set(query.lower().split()), set(), []
    for word in document.lower().split():
        shares.append(1.0 if word in words and word not in seen else 0.0)
        seen.add(word)
    tokens = ["[CLS]", *query.lower().split(), "[SEP]", *document.lower().split(), "[SEP]"]
    attributions = [0.0] * (len(query.split()) + 2) + shares + [0.0]
    return {
        "model_kind": "overlap",
        "score_kind": "shared words",
        "score": float(sum(shares)),
        "baseline_score": 0.0,
        "baseline": "pad",
        "tokens": tokens,
        "attributions": attributions,
        "sentence_b_start": len(query.split()) + 2,
        "n_steps": 0,
        "completeness_error": 0.0,
        "converged": True,
    }


@dataclass(frozen=True)
class OverlapKind(RerankerKind):
    """A new kind as a user writes one: a subclass that says how to load and recognise its re-ranker."""

    def load(self, model, device, batch_size):
        return WordOverlap()

    def accepts(self, obj):
        return isinstance(obj, WordOverlap)


OVERLAP = OverlapKind(
    name="overlap",
    label="word overlap",
    card="overlap",
    shipped="",
    fallback="",
    how_to_get="write the shared-word list into a folder",
    explain=_explain_overlap,
)


@pytest.fixture
def overlap_kind(monkeypatch):
    monkeypatch.setitem(RERANKERS, "overlap", OVERLAP)  # undone after the test
    assert register_reranker(OVERLAP) is OVERLAP
    return OVERLAP


def test_registering_a_kind_needs_a_usable_name():
    with pytest.raises(CtxirError, match="must be letters, digits and '-', and not 'none'"):
        register_reranker(replace(OVERLAP, name="none"))


def test_one_entry_adds_a_kind_to_the_cli(overlap_kind, write_beir, tmp_path, capsys):
    from transformers import HfArgumentParser

    from ctxir.evaluation.evaluate import EvaluateArgs, main

    (args,) = HfArgumentParser(EvaluateArgs).parse_args_into_dataclasses(
        args=["--data", "x", "--rerank", "overlap"]
    )
    assert args.rerank == "overlap" and args.rerank_mode == "fused"
    with pytest.raises(SystemExit):
        HfArgumentParser(EvaluateArgs).parse_args_into_dataclasses(
            args=["--data", "x", "--rerank", "colbert"]
        )
    assert "overlap" in capsys.readouterr().err  # argparse lists the choices, the new kind among them
    folder = tmp_path / "overlap-model"
    folder.mkdir()
    data = write_beir(
        tmp_path / "beir",
        {"q1": "river otters", "q2": "python snake"},
        {"test": {"q1": {"d1": 1}, "q2": {"d3": 1}}},
    )
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "--data",
                str(data),
                "--retriever",
                "bm25",
                "--rerank",
                "overlap",
                "--reranker-model",
                str(folder),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert set(result["metrics"]) == {
        "bm25",
        "bm25 + overlap",
        "bm25 + overlap (fused)",
    }  # both printed and kept
    assert result["rerank_mode"] == "fused" and result["system"] == "bm25 + overlap (fused)"
    assert result["stage_fusion"]["method"] == "rrf" and "not tuned" in result["stage_fusion"]["chosen_on"]
    assert "| bm25 + overlap (fused) |" in capsys.readouterr().out


def test_one_entry_adds_a_kind_to_the_app(overlap_kind, _tiny_st, monkeypatch):
    from transformers import HfArgumentParser

    import app
    from ctxir.app.blocks import build_demo, status_line
    from ctxir.app.explain_tab import explain_models
    from ctxir.app.pairs_tab import shown_names

    # its flag and environment variable
    monkeypatch.setenv("CTXIR_OVERLAP", "words-folder")
    (args,) = HfArgumentParser(app.app_args_class()).parse_args_into_dataclasses(args=[])
    assert (
        args.overlap == "words-folder"
        and app.config_from_args(args).reranker_model("overlap") == "words-folder"
    )
    # offered in the app once loaded: search, explanations, pair scoring, status line
    found = AppModels.from_objects(_tiny_st, "tiny-bert", rerankers={"overlap": WordOverlap()})
    state = AppState(found, AppConfig(device="cpu"), CORPUS, "toy", cache=None)
    assert "word overlap ✓" in status_line(state) and "overlap" in explain_models()
    demo = build_demo(state)
    [reranker] = _radios(demo, "Re-ranker")
    assert [value for _, value in reranker.choices] == ["none", "overlap"]
    assert all(
        [v for _, v in r.choices] == ["auto", "bi-encoder", "overlap"] for r in _radios(demo, "Explain with")
    )
    scored = score_pairs(state, QUERY, [CORPUS["d1"]["text"], CORPUS["d2"]["text"]])
    assert [r["overlap_score"] for r in scored.rows] == [4.0, 2.0]  # otters play the river / the bank
    assert [r["overlap_rank"] for r in scored.rows] == [1, 2] and shown_names()[
        "overlap_score"
    ] == "word overlap"
    # no short name registered in the app: its headers fall back to its label
    assert (shown_names()["overlap_rank"], shown_names()["overlap_probability"]) == (
        "word overlap rank",
        "word overlap P(rel)",
    )
    explained = explain_pair(state, QUERY, CORPUS["d3"]["text"], "auto")
    assert (
        explained.data["overlap"]["score"] == 4.0
        and explained.data["cross_encoder"]["model_kind"] == "overlap"
    )
    # searched in both modes: alone is the overlap order, fused the RRF of both ranks
    alone = search(state, QUERY, None, "bm25", "overlap", k=5, depth=5, mode="alone")
    assert [r["rerank_score"] for r in alone.rows] == sorted(
        (r["rerank_score"] for r in alone.rows), reverse=True
    )
    moved = what_moved(state, QUERY, None, "bm25", "overlap", k=5, depth=5, n=1)
    assert moved.data["reranker"] == "overlap" and moved.data["mode"] == "fused"
