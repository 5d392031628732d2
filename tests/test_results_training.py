"""scripts/results_training.py: every row reads a committed file, and the re-rankers' rows read their JSON."""

from __future__ import annotations

import json

from scripts import results_training


def test_every_row_reads_a_committed_models_files():
    folders = [folder for runs in results_training.TRAINING_RUNS.values() for _, folder, _ in runs]
    folders += [folder for _, folder, _ in results_training.RERANKERS]
    for folder in folders:
        assert folder.startswith("ctxir/assets/models/"), folder
        assert (results_training.ROOT / folder / "metrics.json").is_file(), folder


def stage(first, alone, fused, p):
    return {
        "queries": 3,
        "first_stage": {"nDCG@10": first},
        "alone": {"nDCG@10": alone},
        "fused": {"nDCG@10": fused},
        "fused_vs_first_stage": {"delta": round(fused - first, 4), "wins": 2, "losses": 1, "t_pvalue": p},
    }


def test_reranker_rows_read_evaluation_json(tmp_path):
    from scripts import results_tables

    folder = tmp_path / "cross-encoder"
    folder.mkdir()
    (folder / "metrics.json").write_text(
        json.dumps(
            {
                "config": {"task": "scifact", "output_dir": "outputs/ce-fake"},
                "training": {"wall_time_seconds": 120.0},
                "evaluations": [],
                "extra": {},
            }
        )
    )
    (folder / "evaluation.json").write_text(
        json.dumps(
            {
                "fusion": {"method": "rrf", "k": 60, "weights": [1.5, 1.0]},
                "command": "python -m training.evaluate_reranker --model outputs/ce-fake --depths 20,100",
                "scifact_test": {
                    "seen_queries": 2,
                    "unseen_queries": 1,
                    "bm25@20": {"all": stage(0.5, 0.4, 0.61, 0.0123), "unseen": stage(0.3, 0.2, 0.35, 0.5)},
                    "bm25@100": {"all": stage(0.5, 0.3, 0.55, 0.04), "unseen": stage(0.3, 0.1, 0.31, 0.9)},
                },
                "msmarco": {"bm25@20": stage(0.7, 0.72, 0.75, 0.002)},
            }
        )
    )
    (folder / "fusion.json").write_text(
        json.dumps(
            {
                "method": "rrf",
                "k": 60,
                "weights": [1.5, 1.0],
                "dev": {"first_stage": 0.7, "alone": 0.6, "fused": 0.8},
            }
        )
    )
    rows, evaluation = results_training.reranker_rows("fake re-ranker", folder, "train_cross_encoder")
    assert evaluation is not None and len(rows) == 2
    top20, top100 = (results_tables.cells(row) for row in rows)
    assert top20[:7] == [
        "fake re-ranker",
        "BM25 top 20",
        "0.5000",
        "0.4000 / 0.2000",
        "**0.6100** / 0.3500",
        "0.012 / 0.5",
        "rrf k = 60, weights [1.5, 1.0]; dev nDCG@10 fused 0.8000, BM25 0.7000, alone 0.6000",
    ]
    assert top20[7] == "MS MARCO sample bm25: 0.7000 → 0.7500 (+0.0500, 2/1, p = 0.002)"
    assert top100[1:6] == ["BM25 top 100", "0.5000", "0.3000 / 0.1000", "**0.5500** / 0.3100", "0.04 / 0.9"]
    assert top100[7] == ""  # MS MARCO was re-ranked at 20 only
    assert top20[8] == "2 min"
    assert "`python training/train_cross_encoder.py --task scifact --output-dir outputs/ce-fake`" in top20[9]
    assert (
        "evaluate: `python -m training.evaluate_reranker --model outputs/ce-fake --depths 20,100`" in top20[9]
    )
