"""scripts/results_classify.py writes its tables between its own markers only, from the records it is given."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def record(accuracy: float, template: str = "{label}", shots: bool = False) -> dict:
    method = {
        "accuracy": accuracy,
        "macro_f1": accuracy - 0.01,
        "config": {"template": template, "projection": False, "candidates": [{"template": template}]},
    }
    out = {
        "config": {
            "data": "../shared/data/agnews",
            "method": "zero-shot",
            "output": "docs/bench/classify/x.json",
        },
        "data": {"train_rows": 8000, "test_rows": 7600},
        "machine": "Linux x86_64, 2 CPU cores",
        "methods": {"zero-shot": method},
        "paired": [],
        "throughput": {
            "encode_texts": 256,
            "encode_texts_per_second": 25.0,
            "torch_threads": 1,
            "classify_texts_per_second": {"zero-shot": 1e5},
        },
    }
    if shots:
        for name, acc in (
            ("knn-1", 0.86),
            ("knn-5", 0.9),
            ("knn-15", 0.9),
            ("centroid", 0.85),
            ("logreg", 0.89),
        ):
            out["methods"][name] = {"accuracy": acc, "macro_f1": acc, "config": {}}
        out["few_shot"] = [
            {
                "shots": 8,
                "seeds": 5,
                "methods": {
                    "knn-5": {"accuracy": {"mean": 0.73, "std": 0.01}},
                    "logreg": {"accuracy": {"mean": 0.77, "std": 0.02}},
                },
            }
        ]
        out["paired"] = [
            {
                "a": "knn-5",
                "b": "logreg",
                "accuracy_a": 0.9,
                "accuracy_b": 0.89,
                "a_only": 10,
                "b_only": 4,
                "pvalue": 0.18,
            }
        ]
    return out


def test_writes_only_its_section(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for name, rec in {
        "agnews.json": record(0.77, "This text is about {description}.", shots=True),
        "agnews-names.json": record(0.68),
        "agnews-bare-name.json": record(0.64),
        "agnews-about-label.json": record(0.68),
    }.items():
        (results / name).write_text(json.dumps(rec))
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\n<!-- training:start -->\nkept\n<!-- training:end -->\n")
    from scripts import results_classify  # scripts/ is a folder of files, importable from the checkout's root

    argv = ["--records", str(results), "--doc", str(doc)]
    assert results_classify.main(argv) == 0
    text = doc.read_text()
    assert "<!-- training:start -->\nkept\n<!-- training:end -->" in text
    section = text.split("<!-- classify:start -->")[1].split("<!-- classify:end -->")[0]
    assert "| zero-shot (no labelled example) | 0.65 | 0.75 | **0.7700** |" in section
    assert "| 8 (5 seeds) | 0.7300 ± 0.0100 | 0.7700 ± 0.0200 |" in section
    assert (
        "`ctxir classify --data ../shared/data/agnews --method zero-shot --output docs/bench/classify/x.json`"
        in section
    )
    results_classify.main(argv)  # a second run replaces the section, never appends another
    assert doc.read_text().count("<!-- classify:start -->") == 1
