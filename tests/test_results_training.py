"""scripts/results_training.py: rows whose scratch files are gone are kept, and the re-rankers' rows read their JSON."""

from __future__ import annotations

import json
import sys

# a row as an earlier run generated it: its outputs/ folder no longer exists
OLD_ROW = (
    "| bi-encoder run 1: MNRL + mined hard negatives, 1 epoch | nDCG@10 (test) | 0.6451 | **0.6880** | "
    "BEIR BM25 0.665 | 27 min | 1.13 | `python training/train_bi_encoder.py --task scifact` |"
)


def run_script(tmp_path, monkeypatch, doc):
    from scripts import results_training  # scripts/ is a folder of files, importable from the checkout's root

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "results_training.py",
            "--outputs",
            str(tmp_path / "outputs"),
            "--results",
            str(tmp_path / "results"),
            "--doc",
            str(doc),
        ],
    )
    results_training.main()
    return doc.read_text()


def test_missing_run_keeps_its_row(tmp_path, monkeypatch):
    doc = tmp_path / "results.md"  # not in a git checkout: the date is unknown, and the row is still kept
    doc.write_text("# Results\n\n<!-- training:start -->\n" + OLD_ROW + "\n<!-- training:end -->\n")
    text = run_script(tmp_path, monkeypatch, doc)
    kept = OLD_ROW[:-2] + " (recorded date unknown; outputs/bi-encoder-scifact-mnrl not on this machine) |"
    assert kept in text
    # a run that never had a row stays "not run"
    assert "(not run: no bi-encoder-scifact-mnrl-3ep/metrics.json)" in text
    # a second pass reads its own marker back: the row does not change, the marker is not doubled
    assert run_script(tmp_path, monkeypatch, doc) == text
    assert text.count(" not on this machine) |") == text.count("(recorded ") == 1


def test_marker_date_is_read_back(tmp_path):
    from scripts import results_training

    marked = OLD_ROW[:-2] + " (recorded 2026-11-22; outputs/bi-encoder-scifact-mnrl not on this machine) |"
    assert results_training.recorded_date(marked, tmp_path / "results.md") == "2026-11-22"
    assert results_training.carried([marked], "outputs/other", tmp_path / "results.md") == [
        OLD_ROW[:-2] + " (recorded 2026-11-22; outputs/other not on this machine) |"
    ]


def stage(first, alone, fused, p):
    return {
        "queries": 3,
        "first_stage": {"nDCG@10": first},
        "alone": {"nDCG@10": alone},
        "fused": {"nDCG@10": fused},
        "fused_vs_first_stage": {"delta": round(fused - first, 4), "wins": 2, "losses": 1, "t_pvalue": p},
    }


def test_reranker_rows_read_evaluation_json(tmp_path):
    from scripts import results_tables, results_training

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


def test_reranker_without_folder_is_not_run(tmp_path):
    from scripts import results_training

    rows, evaluation = results_training.reranker_rows("gone", tmp_path / "ce-gone", "train_cross_encoder")
    assert evaluation is None and rows == ["| gone | | | | | | | | | (not run: no ce-gone/metrics.json) |"]
