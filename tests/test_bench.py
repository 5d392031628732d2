"""ctxir.bench: the search benchmark's command line on a tiny synthetic corpus (no model), and its report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxir import bench

KEYS = ("p50_ms", "p95_ms", "recall_at_10", "memory_mb", "build_s")


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "search.json"
    argv = ["search", "--num-docs", "2000", "--real-docs", "0", "--num-queries", "20", "--warmup", "2",
            "--repeats", "2", "--output", str(out), "--progress", "false"]
    assert bench.main(argv) == 0
    return json.loads(out.read_text()), str(out)


def test_search_writes_the_keys_the_issue_names_for_every_index_type(record):
    data, _ = record
    assert data["index_types"] == list(bench.INDEX_TYPES)
    for name in bench.INDEX_TYPES:
        row = data["results"][name]
        for key in KEYS:
            assert isinstance(row[key], float | int) and row[key] >= 0, (name, key)
        assert 0 <= row["recall_at_10"] <= 1 and row["p95_ms"] >= row["p50_ms"] > 0
    assert data["results"]["exact"]["recall_at_10"] == 1.0
    assert data["results"]["ctxir-ann"]["reopen_s"] >= 0 and data["results"]["ctxir-ann"]["file_bytes"] > 0


def test_the_record_says_how_it_was_measured(record):
    data, _ = record
    assert data["command"].startswith("python -m ctxir.bench search --num-docs 2000")
    machine = data["machine"]
    assert machine["cores"] >= 1 and isinstance(machine["simd_flags"], list) and machine["versions"]["faiss-cpu"]
    assert data["data"]["num_docs"] == 2000 and data["data"]["synthetic_docs"] == 2000
    assert len(data["load_average_before"]) == 3 and data["date"]
    assert len(data["results"]["exact"]["passes"]) == 2


def test_report_prints_tables_and_a_plot(record, tmp_path, capsys):
    _, out = record
    png = tmp_path / "search.png"
    assert bench.main(["report", "--inputs", out, "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "| ctxir-ann |" in printed and "2,000 documents" in printed
    assert png.stat().st_size > 1000


def test_a_subset_of_indexes_still_measures_exact_first(tmp_path):
    out = tmp_path / "s.json"
    assert bench.main(["search", "--num-docs", "300", "--real-docs", "0", "--indexes", "binary", "--num-queries", "5",
                       "--warmup", "0", "--repeats", "1", "--scan-queries", "3", "--output", str(out),
                       "--progress", "false"]) == 0
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["exact", "binary"]
    assert results["exact"]["timed_queries"] == 3 and results["binary"]["timed_queries"] == 5


@pytest.mark.parametrize("argv", [["search", "--indexes", "annoy"], ["search", "--num-docs", "5"],
                                  ["search", "--num-queries", "0"]])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    assert bench.main([*argv, "--real-docs", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_synthetic_vectors_are_unit_length_at_the_stated_noise():
    rng = np.random.default_rng(0)
    centres = bench.normalise(rng.standard_normal((50, 32)).astype(np.float32))
    x = bench.synthetic(centres, 4000, 0.5, rng)
    assert x.dtype == np.float32 and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    # Each vector is closest to its own centre, at cosine ≈ 1/sqrt(1 + 0.5²) on average.
    nearest = (x @ centres.T).max(1)
    assert 0.8 < nearest.mean() < 0.95


def test_exact_top_k_matches_a_full_sort():
    rng = np.random.default_rng(1)
    docs, queries = rng.standard_normal((1000, 8)).astype(np.float32), rng.standard_normal((7, 8)).astype(np.float32)
    want = np.argsort(-(queries @ docs.T), axis=1)[:, :10]
    np.testing.assert_array_equal(bench.exact_top_k(docs, queries, 10, chunk=300), want)
