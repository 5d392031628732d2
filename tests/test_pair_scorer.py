"""The sentence-pair (STS) cross-encoder: training/train_pair_scorer.py, shipping it (training/ship.py
--pair-scorer), and the shipped one — loaded offline by name, ranking paraphrases above unrelated pairs, offered in
the app's pair-scoring tab, with everything shipped within 10 MB.

The training smoke run uses a tiny random BERT on toy data; the shipping tests a LoRA adapter with random (non-zero)
weights over the real packaged all-MiniLM-L6-v2: packaging and loading do not depend on how well it scores.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from ctxir.encoders import models
from ctxir.encoders.models import ASSETS_MODELS, DEFAULT_BI_ENCODER, SHIPPED_MODELS, SHIPPED_STS_CROSS_ENCODER
from ctxir.types import CtxirError
from training import cross_encoder_data, ship, train_pair_scorer

SHIPPED = SHIPPED_MODELS[SHIPPED_STS_CROSS_ENCODER]
# (a, b, how similar by hand, 0–5): paraphrases high, same topic in between, unrelated low
HAND_PAIRS = [
    ("A man is playing a guitar.", "Someone plays the guitar.", 4.8),
    ("A woman is slicing an onion.", "A woman cuts an onion into pieces.", 4.6),
    ("A dog runs across the grass.", "A dog is running on a lawn.", 4.4),
    ("A man is playing a guitar.", "A man is playing a piano.", 2.6),
    ("A woman is slicing an onion.", "A woman is peeling a potato.", 2.0),
    ("A dog runs across the grass.", "The stock market fell sharply on Monday.", 0.0),
    ("A man is playing a guitar.", "Heavy rain flooded the city's streets.", 0.0),
]


def _clear_caches() -> None:
    for fn in (models.resolve_model, models.load_cross_encoder, models.load_transformer):
        fn.cache_clear()


# ---------------------------------------------------------------- training


def test_training_saves_a_float16_adapter_and_the_segment_cosine_head(tiny_bert_dir, tmp_path, training_argv):
    import torch
    from safetensors import safe_open
    from test_training import _write_toy_root

    root = _write_toy_root(tmp_path / "data")
    out = tmp_path / "out"
    assert (
        train_pair_scorer.main(
            training_argv(tiny_bert_dir, root, out, max_steps=2, batch_size=4, lora_r=2, logging_steps=1)
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model_type"] == "cross-encoder" and metrics["objective"] == "MSELoss"
    assert ("stsb", "test", "spearman") in {
        (r["dataset"], r["split"], r["metric"]) for r in metrics["evaluations"]
    }
    assert "stsb-dev_spearman" in metrics["extra"]["dev_after"]  # settings are chosen on dev
    # what ships: the adapter (float16) and the head's few weights, never the whole model
    assert not (out / "model.safetensors").exists()
    assert json.loads((out / "modules.json").read_text())[1]["type"].endswith("SegmentCosineHead")
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as adapter:
        names = list(adapter.keys())
        assert names and {adapter.get_tensor(n).dtype for n in names} == {torch.float16}
        assert all("lora_" in n for n in names)
    # ctxir's loader: the adapter merged into its base, one raw score per pair (no sigmoid)
    model = models.load_cross_encoder.__wrapped__(str(out), "cpu")
    assert 0 < metrics["extra"]["trained_parameters"] < sum(p.numel() for p in model[0].parameters())
    assert type(model.activation_fn).__name__ == "Identity"
    assert model.predict([("the cat sat", "the dog sat"), ("tea", "the moon")]).shape == (2,)


def test_init_from_continues_where_a_saved_pair_scorer_ended(tiny_bert_dir, tmp_path):
    """--init-from: the next stage starts from a saved adapter and head (what ships survives a move to a new
    machine; outputs/ does not): its "before" on STS-B test is the first stage's "after", with the first stage's
    LoRA rank, whatever --lora-r says."""
    from test_training import _write_toy_root

    root = _write_toy_root(tmp_path / "data")
    common = [
        "--model",
        str(tiny_bert_dir),
        "--data-dir",
        str(root),
        "--device",
        "cpu",
        "--batch-size",
        "4",
        "--torch-threads",
        "1",
        "--learning-rate",
        "5e-2",
        "--head-learning-rate",
        "5e-2",
    ]
    first, second = tmp_path / "first", tmp_path / "second"
    assert (
        train_pair_scorer.main([*common, "--output-dir", str(first), "--max-steps", "3", "--lora-r", "2"])
        == 0
    )
    assert (
        train_pair_scorer.main(
            [
                *common,
                "--output-dir",
                str(second),
                "--max-steps",
                "1",
                "--warmup",
                "0",
                "--lora-r",
                "8",
                "--init-from",
                str(first),
            ]
        )
        == 0
    )

    def test_row(folder):
        metrics = json.loads((folder / "metrics.json").read_text())
        return metrics, next(
            r for r in metrics["evaluations"] if r["split"] == "test" and r["metric"] == "spearman"
        )

    (_, row1), (m2, row2) = test_row(first), test_row(second)
    assert row1["after"] != pytest.approx(row1["before"], abs=1e-4)  # the first stage moved the model
    assert row2["before"] == pytest.approx(row1["after"], abs=1e-6)
    assert m2["extra"]["lora_r"] == 2 and m2["extra"]["init_from"] == str(first)
    from safetensors.torch import load_file

    a1, a2 = (load_file(str(f / "adapter_model.safetensors")) for f in (first, second))
    assert a1.keys() == a2.keys() and any((a1[k] != a2[k]).any() for k in a1)  # the loaded adapter trained on
    # what the earlier stage trained on stays on the record (the card lists it, with its licence), once
    earlier = {
        "datasets": [
            {"name": "stsb", "split": "train", "role": "train"},
            {"name": "stsb", "split": "train-silver", "role": "train", "num_examples": 9},
            {"name": "stsb", "split": "dev", "role": "eval"},
        ]
    }
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "metrics.json").write_text(json.dumps(earlier))
    assert cross_encoder_data.earlier_training_data(
        tmp_path / "earlier", [{"name": "stsb", "split": "train", "role": "train"}]
    ) == [{"name": "stsb", "split": "train-silver", "role": "train", "num_examples": 9, "stage": "earlier"}]
    with pytest.raises(CtxirError, match=r"--init-from .* holds no adapter_model.safetensors"):
        train_pair_scorer.run(
            train_pair_scorer.PairScorerArgs(init_from=str(tmp_path), output_dir=str(tmp_path / "o"))
        )


def _toy_run(tiny_bert_dir, root: Path, out: Path, *flags: str) -> int:
    """train_pair_scorer on the tiny BERT and the toy data root: CPU, one thread, batch 4, LoRA rank 2, ``flags``."""
    return train_pair_scorer.main(
        [
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(root),
            "--output-dir",
            str(out),
            "--device",
            "cpu",
            "--batch-size",
            "4",
            "--lora-r",
            "2",
            "--torch-threads",
            "1",
            *flags,
        ]
    )


def test_both_orders_trains_each_pair_twice_and_scores_as_the_saved_folder_says(tiny_bert_dir, tmp_path):
    """--both-orders: every train pair also as (b, a); --pair-orders both: dev (so --load-best), test and the saved
    folder (pair_orders.json, read by CrossEncoderReranker) all score a pair as the mean of its two orders, and
    metrics.json has the dev Spearman both ways to choose on."""
    from test_training import _write_toy_root

    from ctxir.data import load_sts
    from ctxir.rerank import CrossEncoderReranker

    root = _write_toy_root(tmp_path / "data")
    out = tmp_path / "both"
    assert (
        _toy_run(
            tiny_bert_dir,
            root,
            out,
            "--max-steps",
            "2",
            "--learning-rate",
            "5e-2",
            "--both-orders",
            "true",
            "--pair-orders",
            "both",
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["training"]["train_examples"] == 2 * len(load_sts(root / "stsbenchmark", "train"))
    assert json.loads((out / "pair_orders.json").read_text()) == {"orders": "both"}
    extra = metrics["extra"]
    assert extra["both_orders"] is True and extra["pair_orders"] == "both"
    assert set(extra["dev_orders"]) == {"one", "both"}
    assert extra["dev_orders"]["both"] == pytest.approx(extra["dev_after"]["stsb-dev_spearman"], abs=1e-4)
    # the recorded test Spearman is what the saved folder scores, as ctxir loads it
    test = load_sts(root / "stsbenchmark", "test")
    _clear_caches()
    reranker = CrossEncoderReranker(str(out), "cpu")
    assert reranker.both_orders is True
    scores = [float(reranker.score_pairs(a, [b])[0]) for a, b, _ in test]
    row = next(r for r in metrics["evaluations"] if (r["split"], r["metric"]) == ("test", "spearman"))
    assert row["after"] == pytest.approx(spearmanr(scores, [s for *_, s in test]).statistic, abs=1e-4)


def test_a_continued_run_names_the_local_base_so_its_checkpoints_reload_offline(tiny_bert_dir, tmp_path):
    """A folder names its base by Hub id; --init-from must make this run's checkpoints name the local base, or
    --load-best reloads them from the Hub (offline: fails)."""
    from test_training import _write_toy_root

    root = _write_toy_root(tmp_path / "data")
    first = tmp_path / "first"
    assert _toy_run(tiny_bert_dir, root, first, "--max-steps", "1", "--eval-before", "false") == 0
    config = json.loads((first / "adapter_config.json").read_text())
    (first / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": "someone/bert"})
    )
    args = train_pair_scorer.PairScorerArgs(model=str(tiny_bert_dir), init_from=str(first))
    model = train_pair_scorer.load(args, "cpu")
    assert model[0].model.peft_config["default"].base_model_name_or_path == models.resolve_model(
        str(tiny_bert_dir)
    )


def test_a_dev_best_checkpoint_that_cannot_be_loaded_stops_the_run_and_keeps_the_checkpoints(
    tiny_bert_dir, tmp_path, monkeypatch, capsys
):
    """sentence-transformers' Trainer only logs a failed --load-best and goes on with the last step's weights:
    the runner refuses to save those as the dev-best, and keeps every checkpoint."""
    from sentence_transformers.base.trainer import BaseTrainer
    from test_training import _write_toy_root

    def fail(self, checkpoint):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(BaseTrainer, "_load_from_checkpoint", fail)
    root = _write_toy_root(tmp_path / "data")
    out = tmp_path / "out"
    assert (
        _toy_run(
            tiny_bert_dir,
            root,
            out,
            "--max-steps",
            "2",
            "--eval-before",
            "false",
            "--eval-steps",
            "1",
            "--save-steps",
            "1",
            "--load-best",
            "true",
        )
        == 2
    )
    assert re.search(
        r"error: --load-best: Could not load the best model from .*checkpoint-\d+.*couldn't connect.*"
        r"checkpoints are kept in",
        capsys.readouterr().err,
    )
    assert list((out / "checkpoints").glob("checkpoint-*")) and not (out / "metrics.json").exists()


def test_silver_pairs_are_new_pairs_of_train_sentences_labelled_in_the_teachers_order(
    tiny_bert_dir, tmp_path
):
    """training/silver_pairs.py: pairs of STS-B train sentences, never a gold pair, a self pair or a repeat, labelled
    by the teacher's cosine mapped monotonically onto 0–1; --extra-train silver trains on them beside the gold."""
    import csv

    from test_training import _write_toy_root

    from ctxir.data import load_sts
    from ctxir.encoders.models import load_bi_encoder
    from training import silver_pairs

    root = _write_toy_root(tmp_path / "data")
    out = tmp_path / "silver.csv"
    record = silver_pairs.run(
        silver_pairs.SilverPairsArgs(
            teacher=str(tiny_bert_dir), output=str(out), data_dir=str(root), device="cpu"
        )
    )
    gold = load_sts(root / "stsbenchmark", "train")
    sentences = {s for a, b, _ in gold for s in (a, b)}
    with out.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    pairs = [(r["sentence1"], r["sentence2"]) for r in rows]
    assert len(rows) == record["pairs"] == len({frozenset(p) for p in pairs}) > len(gold)  # no repeats
    assert all(a != b and a in sentences and b in sentences for a, b in pairs)
    assert not {frozenset(p) for p in pairs} & {frozenset((a, b)) for a, b, _ in gold}
    # the labels keep the teacher's order: sorted by cosine, they never go down
    teacher = load_bi_encoder(str(tiny_bert_dir), "cpu")
    ea = teacher.encode([a for a, _ in pairs], normalize_embeddings=True)
    eb = teacher.encode([b for _, b in pairs], normalize_embeddings=True)
    labels = np.array([float(r["score"]) for r in rows])
    by_cosine = labels[np.argsort((ea * eb).sum(1), kind="stable")]
    assert np.all(np.diff(by_cosine) >= -1e-3) and labels.min() >= 0 and labels.max() <= 1
    assert json.loads(out.with_suffix(".csv.json").read_text())["teacher"] == str(tiny_bert_dir)

    args = train_pair_scorer.PairScorerArgs(
        model=str(tiny_bert_dir), data_dir=str(root), extra_train="silver", silver_pairs=str(out)
    )
    data = cross_encoder_data.build_pair_scorer_data(args)
    assert len(data.train) == len(gold) + len(rows)
    assert data.train.select(range(len(gold), len(data.train)))["sentence1"] == [a for a, _ in pairs]
    assert [(r["split"], r["license"]) for r in data.datasets if r["role"] == "train"] == [
        ("train", "CC BY-SA 4.0"),
        ("train-silver", "CC BY-SA 4.0"),
    ]
    with pytest.raises(
        CtxirError, match=r"--extra-train 'none' with --silver-pairs .*: the silver pairs are read"
    ):
        train_pair_scorer.check(train_pair_scorer.PairScorerArgs(silver_pairs=str(out)))
    with pytest.raises(CtxirError, match=r"--silver-pairs 'nowhere.csv' is not a file: make it with"):
        train_pair_scorer.check(
            train_pair_scorer.PairScorerArgs(extra_train="silver", silver_pairs="nowhere.csv")
        )


def test_training_refuses_what_would_not_ship(tmp_path):
    with pytest.raises(
        CtxirError, match=r"--lora-r must be a rank ≥ 1, got 0: the pair scorer ships as an adapter"
    ):
        train_pair_scorer.run(train_pair_scorer.PairScorerArgs(lora_r=0, output_dir=str(tmp_path / "o")))


# ---------------------------------------------------------------- shipping


@pytest.fixture(scope="module")
def sts_adapter(minilm_path, tmp_path_factory) -> Path:
    """A LoRA adapter + segment-cosine head over the packaged MiniLM (base named by Hub id), with a metrics.json."""
    import torch
    from peft import LoraConfig
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer

    from ctxir.encoders.heads import SegmentCosineHead
    from training.train_pair_scorer import name_adapter_base

    body = Transformer(str(minilm_path), transformer_task="feature-extraction", max_seq_length=64)
    body.model.config.num_labels = 1
    model = CrossEncoder(
        modules=[body, SegmentCosineHead(384, init_scale=1.0)],
        device="cpu",
        activation_fn=torch.nn.Identity(),
    )
    model.add_adapter(LoraConfig(r=2, lora_alpha=4, target_modules=["query", "value"]))
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    out = tmp_path_factory.mktemp("sts") / "sts-lora"
    model.save_pretrained(str(out))
    name_adapter_base(out, DEFAULT_BI_ENCODER)
    from tests.tiny_models import metrics_record

    metrics = metrics_record("cross-encoder", train=(("stsb", "CC BY-SA 4.0"),), name="sts-lora")
    metrics["evaluations"] = [
        {
            "dataset": "stsb",
            "split": "test",
            "task": "sts",
            "metric": "spearman",
            "before": 0.5864,
            "after": 0.8612345,
            "anchor": 0.8833,
            "anchor_name": "BERT-NLI-STSb-base cross-encoder",
            "config": "1379 pairs",
        }
    ]
    (out / "metrics.json").write_text(json.dumps(metrics))
    (out / "train.log").write_text("left behind\n")
    return out


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package folder that already ships a (stand-in) relevance cross-encoder; the STS name points into it."""
    dest = tmp_path / "assets" / "models"
    (dest / "cross-encoder").mkdir(parents=True)
    (dest / "cross-encoder" / "top_layers.safetensors").write_bytes(b"\0" * 200_000)
    monkeypatch.setitem(SHIPPED_MODELS, SHIPPED_STS_CROSS_ENCODER, dest / "sts-cross-encoder")
    _clear_caches()
    yield dest
    _clear_caches()


def test_the_pair_scorer_ships_alone_beside_the_rerankers_and_loads_by_name_offline(
    sts_adapter, package, monkeypatch
):
    from ctxir.rerank import CrossEncoderReranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = ship.run(ship.ShipArgs(pair_scorer=str(sts_adapter), dest=str(package)))
    files = {p.relative_to(package).as_posix(): p.stat().st_size for p in package.rglob("*") if p.is_file()}
    # the re-rankers already there stay; the size counts them too
    assert files["cross-encoder/top_layers.safetensors"] == 200_000
    assert report["size_mb"] == pytest.approx(sum(files.values()) / 1e6, abs=1e-3)
    assert {
        "sts-cross-encoder/adapter_model.safetensors",
        "sts-cross-encoder/1_SegmentCosineHead/model.safetensors",
        "sts-cross-encoder/README.md",
        "sts-cross-encoder/metrics.json",
    } <= set(files)
    assert not any(f.endswith((".bin", ".pt", ".pkl", ".log")) for f in files)
    # by name, with the Hub unreachable, as the app loads it
    score = CrossEncoderReranker(SHIPPED_STS_CROSS_ENCODER, "cpu").score_pairs(
        *ship.SIMILARITY_PAIR[:1], [ship.SIMILARITY_PAIR[1]]
    )
    assert score[0] == pytest.approx(report["pair_scorer_score"], abs=1e-6)
    card = (package / "sts-cross-encoder" / "README.md").read_text()
    assert SHIPPED_STS_CROSS_ENCODER in card and "0.8612" in card and "semantic textual similarity" in card
    assert "Both orders" not in card  # no pair_orders.json: the order given
    # a cap counts what stays: refused, and what was shipped before is left whole
    with pytest.raises(CtxirError, match=r"over --max-mb 0\.2"):
        ship.run(ship.ShipArgs(pair_scorer=str(sts_adapter), dest=str(package), max_mb=0.2))
    assert {
        p.relative_to(package).as_posix(): p.stat().st_size for p in package.rglob("*") if p.is_file()
    } == files
    assert not list(package.parent.glob(".ship-*"))


def test_a_pair_scorer_that_scores_both_orders_ships_that_setting_and_its_card_says_so(
    sts_adapter, package, tmp_path, monkeypatch
):
    from ctxir.rerank import CrossEncoderReranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    both = tmp_path / "both"
    shutil.copytree(sts_adapter, both)
    (both / "pair_orders.json").write_text('{"orders": "both"}')
    metrics = json.loads((both / "metrics.json").read_text())
    (both / "metrics.json").write_text(
        json.dumps({**metrics, "extra": {"dev_orders": {"one": 0.8859, "both": 0.8883}}})
    )
    ship.run(ship.ShipArgs(pair_scorer=str(both), dest=str(package)))
    shipped = package / "sts-cross-encoder"
    assert json.loads((shipped / "pair_orders.json").read_text()) == {"orders": "both"}
    card = " ".join((shipped / "README.md").read_text().split())
    assert (
        "**Both orders.** In ctxir a pair's score is the mean of this model's scores of (a, b) and of (b, a) "
        "(`pair_orders.json`), chosen on STS-B dev: Spearman 0.8883 against 0.8859 for the order given."
    ) in card
    # by name, as the app loads it: the mean of the two orders of the model's own predict
    reranker = CrossEncoderReranker(SHIPPED_STS_CROSS_ENCODER, "cpu")
    a, b = ship.SIMILARITY_PAIR
    ab, ba = reranker.model.predict([(a, b), (b, a)])
    assert reranker.both_orders and abs(ab - ba) > 1e-4
    assert reranker.score_pairs(a, [b])[0] == pytest.approx((ab + ba) / 2, abs=1e-6)
    # an explanation follows one joint pass, the order given, and says that the pair's score averaged both
    from ctxir.explain.rerankers import explain_cross_encoder

    out = explain_cross_encoder(reranker, a, b, n_steps=8, attention=False)
    assert out["score"] == pytest.approx(float(ab), abs=1e-4)
    assert "while this scorer's pair score is the mean of both orders" in out["score_kind"]
    reranker.both_orders = False
    assert (
        "both orders" not in explain_cross_encoder(reranker, a, b, n_steps=8, attention=False)["score_kind"]
    )


def test_ship_says_what_is_missing(sts_adapter, package, tmp_path):
    with pytest.raises(CtxirError, match="nothing to ship: pass --cross-encoder DIR --cls-lr DIR"):
        ship.run(ship.ShipArgs(dest=str(package)))
    with pytest.raises(CtxirError, match=r"--cross-encoder 'x' and --cls-lr '' ship together"):
        ship.run(ship.ShipArgs(cross_encoder="x", pair_scorer=str(sts_adapter), dest=str(package)))
    with pytest.raises(CtxirError, match=r"is not a LoRA adapter .* with ctxir's segment-cosine head"):
        ship.run(ship.ShipArgs(pair_scorer=str(tmp_path), dest=str(package)))
    unmeasured = tmp_path / "unmeasured"
    ship._copy(sts_adapter, unmeasured, ship.PAIR_SCORER_FILES, ())
    (unmeasured / "metrics.json").write_text(json.dumps({"evaluations": []}))
    with pytest.raises(CtxirError, match=r"has no STS-B test Spearman in its metrics\.json"):
        ship.run(ship.ShipArgs(pair_scorer=str(unmeasured), dest=str(package)))


# ---------------------------------------------------------------- the shipped model


needs_shipped = pytest.mark.skipif(not SHIPPED.is_dir(), reason="this checkout ships no STS cross-encoder")


@needs_shipped
def test_the_shipped_pair_scorer_ranks_paraphrases_first_offline(monkeypatch):
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.rerank.registry import available_rerankers, load_reranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _clear_caches()
    reranker = CrossEncoderReranker(SHIPPED_STS_CROSS_ENCODER, "cpu")
    scores = [float(reranker.score_pairs(a, [b])[0]) for a, b, _ in HAND_PAIRS]
    assert scores[0] > scores[3] > scores[6]  # paraphrase > same topic > unrelated
    assert min(scores[:3]) > max(scores[5:])
    assert spearmanr(scores, [gold for _, _, gold in HAND_PAIRS]).statistic > 0.8
    # the registry offers it by default, loaded by its kind's name
    assert available_rerankers()["sts-cross-encoder"] == (True, "")
    loaded = load_reranker("sts-cross-encoder", device="cpu")
    assert loaded.score_pairs(*HAND_PAIRS[0][:1], [HAND_PAIRS[0][1]])[0] == pytest.approx(scores[0], abs=1e-5)


@needs_shipped
def test_the_shipped_pair_scorer_card_reports_what_was_measured_and_all_models_fit_10_mb():
    from training.ship import ALLOWED_SUFFIXES, CARD

    metrics = json.loads((SHIPPED / "metrics.json").read_text())
    rows = [
        e
        for e in metrics["evaluations"]
        if (e["dataset"], e["split"], e["metric"]) == ("stsb", "test", "spearman")
    ]  # the figure a Hub user's predict gets (one order), and ctxir's (both orders)
    card = (SHIPPED / CARD).read_text()
    assert len(rows) == 2 and all(f"{row['after']:.4f}" in card for row in rows)
    assert SHIPPED_STS_CROSS_ENCODER in card
    assert metrics["config"]["lora_r"] >= 1 and metrics["training"]["steps"] > 0
    from ctxir.publish.licenses import LICENSE_FILE
    from ctxir.publish.weights_terms import LICENSES_FILE

    files = [p for p in ASSETS_MODELS.rglob("*") if p.is_file()]
    # no pickles, no code: weights and JSON, each model's card, and the weights' terms beside the models
    assert all(
        p.suffix in ALLOWED_SUFFIXES or p.name in (CARD, LICENSE_FILE)
        for p in files
        if p != ASSETS_MODELS / LICENSES_FILE
    )
    assert sum(p.stat().st_size for p in files) <= 10e6


@needs_shipped
def test_the_pair_scoring_tab_shows_the_sts_column(minilm_path, monkeypatch):
    from ctxir.app.config import AppConfig
    from ctxir.app.models import AppModels
    from ctxir.app.pairs_tab import score_pairs, shown_names
    from ctxir.app.state import AppState
    from ctxir.encoders.models import load_bi_encoder
    from ctxir.rerank import CrossEncoderReranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sts = CrossEncoderReranker(SHIPPED_STS_CROSS_ENCODER, "cpu")
    found = AppModels.from_objects(
        load_bi_encoder(str(minilm_path), "cpu"), "all-MiniLM-L6-v2", rerankers={"sts-cross-encoder": sts}
    )
    state = AppState(found, AppConfig(device="cpu"), {"d": {"title": "", "text": "x"}}, "toy", cache=None)
    docs = [b for a, b, _ in HAND_PAIRS if a == HAND_PAIRS[0][0]]  # paraphrase, same topic, unrelated
    result = score_pairs(state, HAND_PAIRS[0][0], "\n".join(docs))
    assert [r["sts_cross_encoder_rank"] for r in result.rows] == [1, 2, 3]
    assert all(isinstance(r["sts_cross_encoder_score"], float) for r in result.rows)
    assert result.rows[0]["cross_encoder_score"] is None and "cross-encoder" in result.data["unavailable"]
    assert shown_names()["sts_cross_encoder_score"] == "STS similarity"
    assert np.all(np.diff([r["sts_cross_encoder_score"] for r in result.rows]) < 0)
