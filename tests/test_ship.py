"""Shipping trained re-rankers inside the package (training/ship.py) and loading them by name, offline.

The cross-encoder here is the real packaged all-MiniLM-L6-v2 with its top 2 layers nudged at random: what is
tested is the packaging and loading, which do not depend on how well the weights rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxir.encoders import models
from ctxir.encoders.models import DEFAULT_BI_ENCODER, SHIPPED_CLS_LR, SHIPPED_CROSS_ENCODER, SHIPPED_MODELS
from ctxir.types import CtxirError
from tests.tiny_models import metrics_record
from training import ship

PAIR = (
    "Do statins lower the risk of heart attack?",
    "Statin therapy reduced myocardial infarction in patients with high cholesterol.",
)


@pytest.fixture(scope="module")
def trained(minilm_path, tmp_path_factory) -> dict[str, Path]:
    """A segment-cosine cross-encoder whose top 2 MiniLM layers were changed (saved as those layers only), its
    fusion.json, and a CLS-LR ranker fitted on it."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer
    from ctxir.rerank import ClsLrRanker

    root = tmp_path_factory.mktemp("trained-top")
    body = TopLayersTransformer(str(minilm_path), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    body.max_seq_length = 64
    body.freeze_below(4, DEFAULT_BI_ENCODER)
    model = CrossEncoder(
        modules=[body, SegmentCosineHead(384)], device="cpu", activation_fn=torch.nn.Identity()
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.01 * torch.randn_like(parameter))
    ce = root / "ce-top"
    model.save_pretrained(str(ce))
    (ce / "metrics.json").write_text(json.dumps(metrics_record("cross-encoder", base=DEFAULT_BI_ENCODER)))
    (ce / "train.log").write_text("left behind\n")
    (ce / "fusion.json").write_text(
        json.dumps(
            {"method": "rrf", "k": 60, "weights": [0.5, 1.0], "chosen_on": "50 held-out training claims"}
        )
    )
    cls = root / "cls-lr"
    rng = np.random.default_rng(0)
    ClsLrRanker.fit(
        str(ce), rng.normal(size=(40, 384)).astype(np.float32), [0, 1] * 20, device="cpu", max_length=64
    ).save(cls)
    (cls / "metrics.json").write_text(json.dumps(metrics_record("cls-lr", base=str(ce))))
    return {"ce": ce, "cls": cls, "model": model}


@pytest.fixture
def shipped_into(tmp_path, monkeypatch):
    """Point the shipped-model names at a temporary package folder (and drop cached loads on both sides)."""
    dest = tmp_path / "assets" / "models"
    monkeypatch.setitem(SHIPPED_MODELS, SHIPPED_CROSS_ENCODER, dest / "cross-encoder")
    monkeypatch.setitem(SHIPPED_MODELS, SHIPPED_CLS_LR, dest / "cls-lr")
    for fn in (models.resolve_model, models.load_cross_encoder, models.load_transformer):
        fn.cache_clear()
    yield dest
    for fn in (models.resolve_model, models.load_cross_encoder, models.load_transformer):
        fn.cache_clear()


def test_shipped_models_load_by_name_offline_and_cls_lr_is_sigmoid_of_coef_dot_cls(
    trained, shipped_into, monkeypatch
):
    import torch
    from safetensors.numpy import load_file

    from ctxir.rerank import ClsLrRanker, CrossEncoderReranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = ship.run(
        ship.ShipArgs(cross_encoder=str(trained["ce"]), cls_lr=str(trained["cls"]), dest=str(shipped_into))
    )
    files = sorted(p.relative_to(shipped_into).as_posix() for p in shipped_into.rglob("*") if p.is_file())
    assert "cross-encoder/top_layers.safetensors" in files and "cls-lr/cls_lr.safetensors" in files
    assert not any(f.endswith((".bin", ".pt", ".pkl", ".log")) for f in files)
    assert "cross-encoder/model.safetensors" not in files  # the top layers only, never the whole body

    assert 0 < report["size_mb"] <= 10
    # by name, as the app and `ctxir.evaluate` load them, with the Hub unreachable
    assert models.resolve_model(SHIPPED_CROSS_ENCODER) == str(shipped_into / "cross-encoder")
    score = CrossEncoderReranker(SHIPPED_CROSS_ENCODER, "cpu").score_pairs(*PAIR[:1], [PAIR[1]])
    assert score[0] == pytest.approx(report["cross_encoder_score"], abs=1e-6)
    ranker = ClsLrRanker.load(SHIPPED_CLS_LR, device="cpu")
    assert (
        json.loads((shipped_into / "cls-lr" / "cls_lr_config.json").read_text())["base_model"]
        == SHIPPED_CROSS_ENCODER
    )
    # sigmoid(coef · CLS + b) by hand from the shipped weights; CLS = last_hidden_state[:, 0] of the trained body
    weights = load_file(str(shipped_into / "cls-lr" / "cls_lr.safetensors"))
    tokenizer, body = models.load_transformer(SHIPPED_CROSS_ENCODER, "cpu", attentions=False)
    batch = tokenizer([PAIR[0]], [PAIR[1]], truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        cls = body(**batch).last_hidden_state[:, 0].numpy()[0]  # (hidden,)
    by_hand = 1 / (1 + np.exp(-(float(weights["coef"] @ cls) + float(weights["intercept"][0]))))
    assert ranker.predict_proba(*PAIR[:1], [PAIR[1]])[0] == pytest.approx(by_hand, abs=1e-5)
    # the trained body is not the base MiniLM: its [CLS] differs, so the top layers really are applied
    base_tok, base_body = models.load_transformer(DEFAULT_BI_ENCODER, "cpu", attentions=False)
    with torch.no_grad():
        base_cls = (
            base_body(**base_tok([PAIR[0]], [PAIR[1]], truncation=True, max_length=64, return_tensors="pt"))
            .last_hidden_state[:, 0]
            .numpy()[0]
        )
    assert np.abs(base_cls - cls).max() > 1e-3
    # each shipped model carries its card, rendered from its own metrics.json
    card = (shipped_into / "cross-encoder" / "README.md").read_text()
    assert SHIPPED_CROSS_ENCODER in card and "0.6837" in card
    assert SHIPPED_CLS_LR in (shipped_into / "cls-lr" / "README.md").read_text()


def test_a_segment_cosine_top_layers_model_ships_small_with_its_fusion_and_card(
    trained, shipped_into, monkeypatch
):
    from ctxir.rerank import CrossEncoderReranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = ship.run(
        ship.ShipArgs(
            cross_encoder=str(trained["ce"]),
            cls_lr=str(trained["cls"]),
            dest=str(shipped_into),
        )
    )
    files = {
        p.relative_to(shipped_into).as_posix(): p.stat().st_size
        for p in shipped_into.rglob("*")
        if p.is_file()
    }
    # two of six MiniLM layers in float16 (≈ 7.1 MB), not the 90 MB model
    assert 6.5e6 < files["cross-encoder/top_layers.safetensors"] < 7.5e6
    assert "cross-encoder/model.safetensors" not in files and report["size_mb"] <= 10
    assert json.loads((shipped_into / "cross-encoder" / "fusion.json").read_text())["weights"] == [0.5, 1.0]
    scores = CrossEncoderReranker(SHIPPED_CROSS_ENCODER, "cpu").score_pairs(
        PAIR[0], [PAIR[1], "The river bank was flooded after the storm."]
    )
    # the shipped float16 layers score as the trained float32 model did, within that rounding
    np.testing.assert_allclose(
        scores,
        np.ravel(trained["model"].predict([PAIR, (PAIR[0], "The river bank was flooded after the storm.")])),
        atol=0.02,
    )
    card = (shipped_into / "cross-encoder" / "README.md").read_text()
    assert (
        "SegmentCosineHead" in card and "trust_remote_code=True" in card and "weights first stage 0.5" in card
    )
    assert "AutoModelForSequenceClassification" not in card  # no transformers-only snippet that cannot work


def test_ship_refuses_what_cannot_ship(trained, shipped_into, tmp_path):
    # a full model: too large to ship, goes to the Hub
    with pytest.raises(CtxirError, match=r"holds no trained top layers"):
        ship.run(
            ship.ShipArgs(
                cross_encoder=str(trained["cls"]), cls_lr=str(trained["cls"]), dest=str(shipped_into)
            )
        )
    # a CLS-LR ranker fitted on another cross-encoder
    other = tmp_path / "other-cls"
    other.mkdir()
    config = json.loads((trained["cls"] / "cls_lr_config.json").read_text())
    config["base_model"] = DEFAULT_BI_ENCODER
    (other / "cls_lr_config.json").write_text(json.dumps(config))
    with pytest.raises(CtxirError, match="fit the CLS-LR ranker on the cross-encoder you ship"):
        ship.run(ship.ShipArgs(cross_encoder=str(trained["ce"]), cls_lr=str(other), dest=str(shipped_into)))
    # a size cap, with nothing half-written left in the package folder
    with pytest.raises(CtxirError, match=r"over --max-mb 0\.01"):
        ship.run(
            ship.ShipArgs(
                cross_encoder=str(trained["ce"]),
                cls_lr=str(trained["cls"]),
                dest=str(shipped_into),
                max_mb=0.01,
            )
        )
    assert not shipped_into.exists()
    assert not [p for p in shipped_into.parent.glob(".ship-*")]


def test_check_shippable_refuses_a_pickle(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights.pt").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(CtxirError, match=r"refusing to ship \['weights.pt'\]"):
        ship.check_shippable(tmp_path / "m", 10)


@pytest.mark.skipif(
    not SHIPPED_MODELS[SHIPPED_CROSS_ENCODER].is_dir(), reason="this checkout ships no re-rankers"
)
def test_the_shipped_rerankers_rank_a_relevant_document_above_an_irrelevant_one(monkeypatch):
    from ctxir.rerank import ClsLrRanker, CrossEncoderReranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = [PAIR[1], "The river bank was flooded after the storm and the bridge closed."]
    scores = CrossEncoderReranker(SHIPPED_CROSS_ENCODER, "cpu").score_pairs(PAIR[0], texts)
    assert scores[0] > scores[1]
    proba = ClsLrRanker.load(SHIPPED_CLS_LR, device="cpu").predict_proba(PAIR[0], texts)
    assert proba[0] > proba[1]
    # a fresh install offers both by default, the cross-encoder fused as its fusion.json says
    from ctxir.rerank.pipeline import StageFusion
    from ctxir.rerank.registry import available_rerankers, load_reranker

    assert available_rerankers()["cross-encoder"] == (True, "") and available_rerankers()["cls-lr"] == (
        True,
        "",
    )
    fusion = json.loads((SHIPPED_MODELS[SHIPPED_CROSS_ENCODER] / "fusion.json").read_text())
    by_stage = tuple(  # a first stage's own method where its record names one
        (name, tuple(chosen["weights"])) + ((chosen["method"],) if chosen.get("method") else ())
        for name, chosen in sorted(fusion["first_stages"].items())
    )
    assert load_reranker("cross-encoder", device="cpu").stage_fusion == StageFusion(
        "rrf", tuple(fusion["weights"]), fusion["k"], by_first_stage=by_stage
    )
    assert {entry[0] for entry in by_stage} == {
        "dense",
        "hybrid",
    }  # each first stage the app offers has its weight
    assert sum(p.stat().st_size for p in SHIPPED_MODELS[SHIPPED_CROSS_ENCODER].parent.rglob("*")) <= 10e6
    # plain sentence-transformers loads the shipped folder (its classes from the installed ctxir) to the same scores,
    # the head's learned term-match term included
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.models import load_cross_encoder

    folder = SHIPPED_MODELS[SHIPPED_CROSS_ENCODER]
    ours = load_cross_encoder(SHIPPED_CROSS_ENCODER, "cpu")
    assert getattr(ours[1], "term_match", False) == json.loads((folder / "metrics.json").read_text())[
        "config"
    ].get("term_match", False)
    pairs = [(PAIR[0], t) for t in texts]
    plain = CrossEncoder(str(folder), device="cpu", trust_remote_code=True)
    assert np.allclose(np.ravel(plain.predict(pairs)), np.ravel(ours.predict(pairs)), atol=1e-5)


def test_the_shipped_cards_are_what_the_templates_render_from_their_metrics(tmp_path):
    """A card template changed after a model shipped is rendered into the shipped card too (``training/ship.py``'s
    write_card), so the card a user reads says what today's templates say: here, that a re-ranking row's *before*
    is the first stage, not the base model."""
    import shutil

    from ctxir.encoders.models import DEFAULT_BI_ENCODER, SHIPPED_STS_CROSS_ENCODER
    from training.ship import write_card

    for name, kind, base in (
        (SHIPPED_CROSS_ENCODER, "cross-encoder", DEFAULT_BI_ENCODER),
        (SHIPPED_STS_CROSS_ENCODER, "cross-encoder", DEFAULT_BI_ENCODER),
        (SHIPPED_CLS_LR, "cls-lr", SHIPPED_CROSS_ENCODER),
    ):
        shipped = SHIPPED_MODELS[name]
        copy = shutil.copytree(shipped, tmp_path / shipped.name)
        write_card(copy, name, kind, base)
        assert (copy / "README.md").read_text() == (shipped / "README.md").read_text(), (
            f"re-render {name}'s card"
        )
    card = (SHIPPED_MODELS[SHIPPED_CROSS_ENCODER] / "README.md").read_text()
    assert "in re-ranking rows, the first stage alone" in card
