"""training/train_classifier.py: triplet and pair generation, argument checks, a smoke run of each objective on the
AG News folder with a tiny random BERT, and (slow) the real MiniLM beating its start after triplet training."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ctxir.types import CtxirError
from training.train_classifier import ClassifierArgs, check, main, setfit_pairs, triplets

EXAMPLES = [("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("b2", "B"), ("c1", "C")]
CLASS = {t: y for t, y in EXAMPLES}


def test_triplets_pair_each_anchor_with_its_class_and_another():
    rows = triplets(EXAMPLES, iterations=5, seed=1)
    assert len(rows) == 30
    assert Counter(a for a, _, _ in rows) == {t: 5 for t, _ in EXAMPLES}
    for anchor, positive, negative in rows:
        assert CLASS[positive] == CLASS[anchor] and CLASS[negative] != CLASS[anchor]
        assert (
            positive != anchor or CLASS[anchor] == "C"
        )  # C has one example: its own text is the only positive
    assert rows == triplets(EXAMPLES, iterations=5, seed=1) != triplets(EXAMPLES, iterations=5, seed=2)


def test_setfit_pairs_alternate_same_and_other_class():
    pairs = setfit_pairs(EXAMPLES, iterations=2, seed=0)
    assert len(pairs) == 24
    for a, b, score in pairs:
        assert (CLASS[a] == CLASS[b]) == (score == 1.0)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"iterations": 0}, "--iterations must be ≥ 1"),
        ({"per_class": 0}, "--per-class must be ≥ 1"),
        ({"per_class": 1}, "no same-class positive"),
        ({"objective": "batch-hard", "per_device_train_batch_size": 6 - 1}, "even"),
        ({"margin": 0.0}, "--margin must be > 0"),
    ],
)
def test_bad_arguments_are_refused(changes, message):
    with pytest.raises(CtxirError, match=message):
        check(ClassifierArgs(**changes))


@pytest.mark.parametrize("objective", ["triplet", "batch-hard", "setfit"])
def test_smoke_run_writes_metrics(objective, tiny_bert_dir, shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path / "cache"))
    out = tmp_path / objective
    code = main(
        [
            "--objective",
            objective,
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(shared_data),
            "--per-class",
            "4",
            "--iterations",
            "2",
            "--batch-size",
            "8",
            "--max-steps",
            "2",
            "--eval-max-test",
            "24",
            "--device",
            "cpu",
            "--output-dir",
            str(out),
            "--torch-threads",
            "1",
        ]
    )
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (
        metrics["objective"]
        == {"triplet": "TripletLoss", "batch-hard": "BatchHardTripletLoss", "setfit": "CosineSimilarityLoss"}[
            objective
        ]
    )
    assert metrics["training"]["steps"] == 2 and metrics["training"]["wall_time_seconds"] > 0
    assert metrics["extra"]["train_examples"] == 16 and metrics["extra"]["classes"] == [
        "Business",
        "Sci/Tech",
        "Sports",
        "World",
    ]
    rows = {row["metric"]: row for row in metrics["evaluations"]}
    assert set(rows) == {
        f"{m} ({k})" for m in ("accuracy", "macro-F1") for k in ("zero-shot", "knn-5", "centroid", "logreg")
    }
    assert all(0 <= row["after"] <= 1 and row["before"] is not None for row in rows.values())
    assert (out / "config.json").is_file()  # the model, loadable by SentenceTransformer(out)
    from ctxir.publish.cards import CardInputs, render_card

    card = render_card(
        metrics, CardInputs(repo_id="ctxir/minilm-agnews")
    ).content  # the card, as for other models
    assert "license_name: ag-corpus-terms" in card and "type: text-classification" in card


@pytest.mark.slow
def test_triplet_training_beats_the_frozen_minilm_on_knn(shared_data, tmp_path, monkeypatch):
    """8 per class, triplet loss, on the first 400 test texts: kNN-5 and centroid accuracy rise."""
    pytest.importorskip("sentence_transformers")
    out = tmp_path / "run"
    assert (
        main(
            [
                "--per-class",
                "8",
                "--iterations",
                "10",
                "--eval-max-test",
                "400",
                "--device",
                "cpu",
                "--output-dir",
                str(out),
                "--torch-threads",
                "1",
            ]
        )
        == 0
    )
    rows = {row["metric"]: row for row in json.loads((out / "metrics.json").read_text())["evaluations"]}
    assert rows["accuracy (knn-5)"]["after"] > rows["accuracy (knn-5)"]["before"]
    assert rows["accuracy (centroid)"]["after"] > rows["accuracy (centroid)"]["before"]
