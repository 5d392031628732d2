"""benchmarks/: every benchmark's command line on tiny data (the search one on a synthetic corpus, no model), the
and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import benchmarks
from benchmarks import app as app_bench
from benchmarks import encode, report, rerank, search, train
from ctxir.types import CtxirError

KEYS = ("p50_ms", "p95_ms", "recall_at_10", "memory_mb", "build_s")


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "search.json"
    argv = [
        "--num-docs",
        "2000",
        "--real-docs",
        "0",
        "--num-queries",
        "20",
        "--warmup",
        "2",
        "--repeats",
        "2",
        "--output",
        str(out),
        "--progress",
        "false",
    ]
    assert search.main(argv) == 0
    return json.loads(out.read_text()), str(out)


def test_search_writes_the_keys_the_issue_names_for_every_index_type(record):
    data, _ = record
    assert data["index_types"] == list(search.INDEX_TYPES)
    for name in search.INDEX_TYPES:
        row = data["results"][name]
        for key in KEYS:
            assert isinstance(row[key], float | int) and row[key] >= 0, (name, key)
        assert 0 <= row["recall_at_10"] <= 1 and row["p95_ms"] >= row["p50_ms"] > 0
    assert data["results"]["exact"]["recall_at_10"] == 1.0
    assert data["results"]["ctxir-ann"]["reopen_s"] >= 0 and data["results"]["ctxir-ann"]["file_bytes"] > 0


def test_the_record_says_how_it_was_measured(record):
    data, _ = record
    assert data["command"].startswith("python -m benchmarks.search --num-docs 2000")
    machine = data["machine"]
    assert (
        machine["cores"] >= 1 and isinstance(machine["simd_flags"], list) and machine["versions"]["faiss-cpu"]
    )
    assert data["data"]["num_docs"] == 2000 and data["data"]["synthetic_docs"] == 2000
    assert len(data["load_average_before"]) == 3 and data["date"]
    assert len(data["results"]["exact"]["passes"]) == 2


def test_report_prints_tables_and_a_plot(record, tmp_path, capsys):
    _, out = record
    png = tmp_path / "performance-search.png"
    assert (
        report.main(["--inputs", out, "--markdown", str(tmp_path / "r.md"), "--figures", str(tmp_path)]) == 0
    )
    printed = capsys.readouterr().out
    assert "| ctxir-ann |" in printed and "2,000 documents" in printed
    assert png.stat().st_size > 1000


def test_a_subset_of_indexes_still_measures_exact_first(tmp_path):
    out = tmp_path / "s.json"
    assert (
        search.main(
            [
                "--num-docs",
                "300",
                "--real-docs",
                "0",
                "--indexes",
                "binary",
                "--num-queries",
                "5",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "--scan-queries",
                "3",
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    results = data["results"]
    assert data["command"].startswith("python -m benchmarks.search --num-docs 300 ")
    assert list(results) == ["exact", "binary"]
    assert results["exact"]["timed_queries"] == 3 and results["binary"]["timed_queries"] == 5


@pytest.mark.parametrize(
    "argv",
    [["--indexes", "annoy"], ["--num-docs", "5"], ["--num-queries", "0"]],
)
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    assert search.main([*argv, "--real-docs", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_synthetic_vectors_are_unit_length_at_the_stated_noise():
    rng = np.random.default_rng(0)
    centres = search.normalise(rng.standard_normal((50, 32)).astype(np.float32))
    x = search.synthetic(centres, 4000, 0.5, rng)
    assert x.dtype == np.float32 and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    # Each vector is closest to its own centre, at cosine ≈ 1/sqrt(1 + 0.5²) on average.
    nearest = (x @ centres.T).max(1)
    assert 0.8 < nearest.mean() < 0.95


def test_exact_top_k_matches_a_full_sort():
    rng = np.random.default_rng(1)
    docs, queries = (
        rng.standard_normal((1000, 8)).astype(np.float32),
        rng.standard_normal((7, 8)).astype(np.float32),
    )
    want = np.argsort(-(queries @ docs.T), axis=1)[:, :10]
    np.testing.assert_array_equal(search.exact_top_k(docs, queries, 10, chunk=300), want)


# ---------------------------------------------------------------- encode, rerank, train, app and the report

WORDS = [
    "the",
    "river",
    "bank",
    "otters",
    "play",
    "on",
    "money",
    "deposit",
    "python",
    "snake",
    "code",
    "cat",
    "dog",
    "sun",
    "moon",
    "tea",
    "coffee",
    "music",
    "song",
    "water",
    "account",
    "salary",
    "is",
    "in",
    "at",
    "and",
    "to",
]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory, write_beir) -> str:
    """A tiny scifact/ (train + test qrels) and msmarco_sample/ (calibration passages) in the BEIR layout."""
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("bench-data")

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS, n))

    for name, n_docs, n_queries in (("scifact", 60, 12), ("msmarco_sample", 20, 2)):
        docs = {f"d{i}": text(int(rng.integers(4, 40))) for i in range(n_docs)}
        queries = {f"q{i}": text(4) for i in range(n_queries)}
        qrels = {
            "train": {q: {f"d{rng.integers(n_docs)}": 1} for q in list(queries)[: n_queries // 2]},
            "test": {q: {f"d{rng.integers(n_docs)}": 1} for q in list(queries)[n_queries // 2 :]},
        }
        write_beir(root / name, queries, qrels, docs)
    return str(root)


@pytest.fixture(scope="module")
def encode_record(tmp_path_factory, tiny_bert_dir, data_root) -> tuple[dict, str]:
    pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("encode")
    out = folder / "encode.json"
    assert (
        encode.main(
            [
                "--model",
                str(tiny_bert_dir),
                "--data-root",
                data_root,
                "--num-texts",
                "24",
                "--batch-size",
                "8",
                "--repeats",
                "2",
                "--short-length",
                "16",
                "--calibration-texts",
                "16",
                "--onnx-dir",
                str(folder / "onnx"),
                "--cache-dir",
                str(folder / "cache"),
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    return json.loads(out.read_text()), str(out)


def test_encode_measures_every_variant_against_plain_sentence_transformers(encode_record):
    data, _ = encode_record
    assert list(data["results"]) == list(encode.ENCODE_VARIANTS)
    assert data["command"].startswith("python -m benchmarks.encode --model")
    assert (
        data["sgemm"]["gflops"] > 0
        and data["machine"]["cores"] >= 1
        and len(data["load_average_before"]) == 3
    )
    for name, row in data["results"].items():
        assert row["texts_per_s"] > 0 and row["tokens_per_s"] > 0 and len(row["passes_s"]) == 2, name
        assert (
            row["share_of_sgemm_peak"] >= 0 and row["cpu_speedup_vs_st"] > 0 and 0 <= row["ndcg_at_10"] <= 1
        ), name
        assert row["ndcg_loss_vs_st"] == pytest.approx(
            data["results"]["st"]["ndcg_at_10"] - row["ndcg_at_10"], abs=1e-4
        )
    assert data["results"]["st"]["speedup_vs_st"] == 1.0
    # the same weights give the same vectors: float32 ONNX Runtime matches PyTorch, int8 stays close
    assert data["results"]["ctxir"]["min_cosine_vs_st"] > 0.99999
    assert data["results"]["onnx"]["min_cosine_vs_st"] > 0.9999
    assert data["results"]["onnx-int8-dynamic"]["min_cosine_vs_st"] > 0.95
    assert data["results"]["max-length-short"]["max_length"] == 16
    for name in ("onnx", "onnx-int8-dynamic", "onnx-int8-static", "max-length-short"):
        row = data["results"][name]
        want = "meets the ship rule" if row["ships"] else "does not ship"
        assert isinstance(row["ships"], bool) and row["decision"].startswith(want)
        speedup = min(row["speedup_vs_st"], row["cpu_speedup_vs_st"])
        assert row["ships"] == (speedup >= 1.5 and row["ndcg_loss_vs_st"] <= 0.005)


def test_encode_ship_rule_needs_both_speed_and_quality():
    fast_but_lossy = {"speedup_vs_st": 2.0, "ndcg_loss_vs_st": 0.02}
    assert encode.ship_decision(fast_but_lossy) == (False, "does not ship: nDCG@10 loss 0.0200 > 0.005")
    assert encode.ship_decision({"speedup_vs_st": 1.2, "ndcg_loss_vs_st": 0.0})[0] is False
    assert encode.ship_decision({"speedup_vs_st": 1.6, "ndcg_loss_vs_st": 0.004})[0] is True
    # the smaller of the wall-clock and CPU-time ratios decides
    assert (
        encode.ship_decision({"speedup_vs_st": 1.6, "cpu_speedup_vs_st": 1.3, "ndcg_loss_vs_st": 0.0})[0]
        is False
    )
    assert "not measured" in encode.ship_decision({"speedup_vs_st": 3.0})[1]


def test_encoder_flops_counts_projections_feed_forward_and_attention():
    from transformers import BertConfig

    config = BertConfig(hidden_size=4, intermediate_size=8, num_hidden_layers=2)
    # per layer and text of 3 tokens: 8·3·16 + 4·3·4·8 + 4·9·4 = 384 + 384 + 144
    assert encode.encoder_flops(config, [3]) == 2 * 912


@pytest.fixture(scope="module")
def rerank_record(tmp_path_factory, tiny_bert_dir, data_root) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("rerank") / "rerank.json"
    assert (
        rerank.main(
            [
                "--model",
                str(tiny_bert_dir),
                "--data-root",
                data_root,
                "--candidates",
                "2,5",
                "--num-queries",
                "3",
                "--warmup",
                "1",
                "--repeats",
                "2",
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    return json.loads(out.read_text()), str(out)


def test_rerank_latency_per_candidate_count(rerank_record):
    data, _ = rerank_record
    assert list(data["results"]) == ["2", "5"]
    for n, row in data["results"].items():
        assert row["candidates"] == int(n) and row["p95_ms"] >= row["p50_ms"] > 0
        assert row["ms_per_pair"] == pytest.approx(row["p50_ms"] / int(n), abs=0.01)
        assert row["mean_pair_tokens"] > 2 and len(row["passes"]) == 2 and row["passes"][0]["n"] == 3
        assert row["windows_per_document"] == 1.0 and data["data"]["passages"] == {"method": "first"}


def test_rerank_latency_of_a_window_reading_model_counts_every_window(tmp_path, tiny_bert_dir, data_root):
    """A model folder with passages.json is timed as the app runs it: every window of a document scored, and the
    compute bound of a (query, document) pair is its windows' sum."""
    import shutil

    model = tmp_path / "maxp"
    shutil.copytree(tiny_bert_dir, model)
    (model / "passages.json").write_text(json.dumps({"method": "max", "words": 8, "stride": 4}))
    out = tmp_path / "rerank.json"
    assert (
        rerank.main(
            [
                "--model",
                str(model),
                "--data-root",
                data_root,
                "--candidates",
                "2",
                "--num-queries",
                "2",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    row = data["results"]["2"]
    assert data["data"]["passages"] == {"method": "max", "words": 8, "stride": 4}
    assert row["windows_per_document"] > 1 and row["mean_pair_tokens"] < 40  # short windows, many of them
    one_window = 2 * data["data"]["non_embedding_parameters"] * row["mean_pair_tokens"] / 1e9
    assert row["gflop_per_pair"] >= round(row["windows_per_document"] * one_window, 3) - 0.001


@pytest.fixture(scope="module")
def train_record(tmp_path_factory, tiny_bert_dir, data_root) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("train") / "train.json"
    assert (
        train.main(
            [
                "--model",
                str(tiny_bert_dir),
                "--data-root",
                data_root,
                "--batch-sizes",
                "2,4",
                "--max-lengths",
                "16,32",
                "--steps",
                "2",
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    return json.loads(out.read_text()), str(out)


def test_train_throughput_per_batch_size_and_length(train_record):
    data, _ = train_record
    rows = list(data["results"].values())
    assert [(r["max_length"], r["batch_size"]) for r in rows] == [(16, 2), (16, 4), (32, 2), (32, 4)]
    for row in rows:
        assert row["pairs_per_s"] == pytest.approx(row["batch_size"] / row["step_s"], rel=0.1)
        assert row["tokens_per_s"] > 0 and len(row["steps_s"]) == 2


def test_train_pairs_alternate_judged_and_random_documents(data_root):
    pairs = train.train_pairs(Path(data_root), 6, seed=0)
    assert [label for *_, label in pairs] == [1.0, 0.0] * 3 and all(q and d for q, d, _ in pairs)


@pytest.fixture(scope="module")
def app_record(app_state, serve, tmp_path_factory) -> tuple[dict, str]:
    import app

    out = tmp_path_factory.mktemp("app") / "app.json"
    with serve(app.build_demo(app_state)) as url:
        assert (
            app_bench.main(
                [
                    "--url",
                    url,
                    "--corpus",
                    "demo-subset",
                    "--endpoints",
                    "search bm25,search hybrid + cross-encoder top 20,model_info",
                    "--repeats",
                    "2",
                    "--in-process",
                    "false",
                    "--output",
                    str(out),
                ]
            )
            == 0
        )
    return json.loads(out.read_text()), str(out)


def test_in_process_clocks_and_bytes_beside_the_clients(app_state, serve):
    """The view and the whole callback timed in process with the same inputs as the clients' calls, and the bytes
    each answer carries: the JSON as the HTTP API sends it, and the files gradio_client downloads."""
    from gradio_client import Client

    import app

    demo = app.build_demo(app_state)
    local = app_bench.InProcess.of(app_state, demo)
    args = app_bench.AppBenchArgs(repeats=2, warmup=0)
    calls = app_bench.app_calls("demo-subset")
    chosen = ["model_info", "score_pairs (5 documents)"]
    with serve(demo) as url:
        results = app_bench.time_endpoints(Client(url, verbose=False), calls, chosen, args, url, local)
        # the HTTP API's second clock keeps one session across its calls, as gradio_client keeps its own
        assert app_bench.HTTP_SESSION in demo.state_holder.session_data
    pairs = results["score_pairs (5 documents)"]
    assert pairs["http_session_p50_ms"] > 0 and pairs["http_p50_ms"] > 0
    assert "error" not in pairs and pairs["n"] == 2
    # both clocks ran every call (their order is the machine's: its other jobs decide single calls)
    assert pairs["in_process_view_p50_ms"] > 0 and pairs["in_process_callback_p50_ms"] > 0
    # the table's JSON, and no file: the chart's PNG comes only with png_figures=True (issue #49)
    assert pairs["json_bytes"] > 1_000 and pairs["file_bytes"] == 0
    assert results["model_info"]["file_bytes"] == 0 and results["model_info"]["json_bytes"] > 100
    table = app_bench.format_app({"results": results})
    assert "gradio_client ÷ view" in table and "HTTP API, one session ÷ view" in table
    assert "score_pairs (5 documents)" in table


def test_app_latency_through_gradio_client_and_the_http_api(app_record):
    data, _ = app_record
    assert list(data["results"]) == ["search bm25", "search hybrid + cross-encoder top 20", "model_info"]
    for row in data["results"].values():
        assert "error" not in row and row["n"] == 2 and row["p95_ms"] >= row["p50_ms"] > 0
        assert row["http_p95_ms"] >= row["http_p50_ms"] > 0
    # the callback is part of each HTTP call's wall time
    assert data["results"]["search bm25"]["callback_p50_ms"] < data["results"]["search bm25"]["http_p95_ms"]
    assert data["data"]["cold_start_s"] is None and "already running" in data["data"]["app"]
    # /search reports the time inside its callback, a part of the call's wall time; model_info reports none
    for label in ("search bm25", "search hybrid + cross-encoder top 20"):
        assert 0 < data["results"][label]["callback_p50_ms"] < data["results"][label]["p95_ms"]
    assert "callback_p50_ms" not in data["results"]["model_info"]
    assert app_bench.callback_ms(([], "text", {"timings_ms": {"bm25": 1.5, "total": 2.5}})) == 2.5
    assert app_bench.callback_ms(({"rows": []}, "text")) is None


def test_http_call_returns_the_outputs_and_names_an_error(app_state, serve):
    """The HTTP API path gives the same outputs as the callback (the /search JSON), and an error event (k = 0 is
    refused by the app) becomes a CtxirError naming the endpoint."""
    import app

    with serve(app.build_demo(app_state)) as url:
        outputs = app_bench.http_call(url, "/search", ("otters", "demo-subset", "bm25", "none", 3, 20))[0]
        with pytest.raises(CtxirError, match=r"/search answered with an error"):
            app_bench.http_call(url, "/search", ("otters", "demo-subset", "bm25", "none", 0, 20))
    from ctxir.app.search import search

    expected = search(app_state, "otters", "demo-subset", "bm25", "none", 3).data["hits"]
    assert len(outputs) == 3 and outputs[2]["query"] == "otters"
    assert [h["doc_id"] for h in outputs[2]["hits"]] == [h["doc_id"] for h in expected] != []


def test_app_calls_name_endpoints_the_app_serves(app_state):
    import app

    demo = app.build_demo(app_state)
    names = {f"/{fn.api_name}" for fn in demo.fns.values() if fn.api_name}
    assert {api for api, _ in app_bench.app_calls("demo").values()} <= names


def test_report_writes_its_section_into_the_page_and_keeps_the_rest(
    record, encode_record, rerank_record, train_record, tmp_path
):
    page = tmp_path / "docs" / "performance.md"
    page.parent.mkdir()
    page.write_text("# Performance\n\n## Start-up\n\nwritten by hand\n")
    inputs = [record[1], encode_record[1], rerank_record[1], train_record[1]]
    argv = ["--inputs", *inputs, "--markdown", str(page), "--figures", str(page.parent)]
    assert report.main(argv) == 0
    assert report.main(argv) == 0  # a second run replaces its section instead of adding another
    text = page.read_text()
    assert text.startswith("# Performance\n\n## Start-up\n\nwritten by hand\n")
    assert text.count(report.REPORT_BEGIN) == 1 and text.count(report.REPORT_END) == 1
    for title in ("Encoding throughput", "Search latency", "Re-ranking latency", "training throughput"):
        assert title in text
    assert "python -m benchmarks.encode --model" in text and "| onnx-int8-static |" in text
    assert "load average" in text and " cores (" in text
    for kind in ("search", "encode", "rerank", "train"):
        assert (page.parent / f"performance-{kind}.png").stat().st_size > 1000
        assert f"(performance-{kind}.png)" in text
    assert (page.parent / "bench" / "encode.json").is_file() and "(bench/encode.json)" in text


def test_report_refuses_a_file_it_did_not_write(tmp_path):
    other = tmp_path / "x.json"
    other.write_text('{"a": 1}')
    assert report.main(["--inputs", str(other)]) == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["encode", "--variants", "tensorrt"],
        ["rerank", "--candidates", "0,10"],
        ["train", "--batch-sizes", "a"],
        ["app", "--endpoints", "nope"],
    ],
)
def test_new_commands_refuse_bad_arguments_with_one_line(argv, capsys):
    import importlib

    assert importlib.import_module(f"benchmarks.{argv[0]}").main(argv[1:]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_query_encoding_is_timed_one_real_query_at_a_time(tmp_path):
    for name in search.REAL_SETS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "queries.jsonl").write_text(
            "".join(
                json.dumps({"_id": f"{name}{i}", "text": f"does protein {i} bind receptor {i % 3}?"}) + "\n"
                for i in range(10)
            )
        )
    args = search.SearchArgs(data_root=str(tmp_path), query_encode=5)
    timing = search.time_query_encoding(args)
    assert timing["n"] == 5 and timing["threads"] == 1  # 10 of the 20 texts are untimed warm-up
    assert 0 < timing["p50_ms"] <= timing["p95_ms"]


def test_a_synthetic_only_run_times_no_query_encoding(record):
    data, _ = record
    assert "query_encode" not in data["data"]


def test_committed_records_carry_the_command_typed_today():
    """Each benchmark record in docs/bench/ names the command that reruns it: ``python -m benchmarks.KIND``."""
    commands = {
        path.name: record["command"]
        for path in sorted((Path(__file__).resolve().parents[1] / "docs" / "bench").rglob("*.json"))
        if isinstance(record := json.loads(path.read_text()), dict) and record.get("kind") in benchmarks.KINDS
    }
    assert commands and all(c.startswith("python -m benchmarks.") for c in commands.values()), commands


def test_the_benchmark_modules_examples_run():
    """ctxir's doctests (test_doctests.py) scan the installed package only; benchmarks/ is beside it."""
    import doctest
    import importlib

    attempted = 0
    for name in ("common", "encode", "report"):
        result = doctest.testmod(importlib.import_module(f"benchmarks.{name}"))
        assert result.failed == 0, name
        attempted += result.attempted
    assert attempted >= 4


def test_every_kind_is_a_module_with_a_main(capsys):
    """What the docs tell a reader to run, `python -m benchmarks.KIND --help`, for every kind (scripts/ holds none)."""
    import importlib

    for kind in benchmarks.KINDS:
        assert callable(importlib.import_module(f"benchmarks.{kind}").main), kind
    assert not list((Path(__file__).resolve().parents[1] / "scripts").glob("bench*.py"))


def test_the_command_runs_from_the_repository_root(tmp_path):
    """`python -m benchmarks.search` as typed in a shell at the root (no installed package: the root is on sys.path
    because -m runs from there)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    flags = [
        "--num-docs",
        "50",
        "--real-docs",
        "0",
        "--indexes",
        "exact",
        "--num-queries",
        "2",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--progress",
        "false",
    ]
    out = tmp_path / "new.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.search", *flags, "--output", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text())["command"].startswith("python -m benchmarks.search --num-docs 50 ")


def test_views_times_every_view_with_what_it_returned(app_state):
    from benchmarks import views

    args = views.ViewsArgs(repeats=2, warmup=0, explain_repeats=1)
    run = views.time_views(app_state, "cpu", args)["views"]
    assert {
        "search hybrid + cross-encoder top 20",
        "score_pairs (5 documents)",
        "attention (cross-encoder pair)",
        "explain_pair (cross-encoder)",
    } <= set(run)
    for row in run.values():
        assert row["p95_ms"] >= row["p50_ms"] > 0 and row["n"] in (1, 2)
    search = run["search hybrid + cross-encoder top 20"]["result"]
    assert len(search["ids"]) == 10 and len(set(search["ids"])) == 10 and search["scores"]
    # the same state twice agrees with itself; a swapped order or a moved score does not
    again = {"device": "cpu", "views": {k: dict(v) for k, v in run.items()}}
    assert all(
        a["same_order"] and a["max_score_difference"] == 0
        for a in views.agreement([{"device": "cpu", "views": run}, again], 0.02).values()
    )
    moved = json.loads(json.dumps(again))
    moved["views"]["search bm25"]["result"]["ids"].reverse()
    moved["views"]["score_pairs (5 documents)"]["result"]["scores"][0] += 0.5
    agree = views.agreement([{"device": "cpu", "views": run}, moved], 0.02)
    assert not agree["search bm25"]["same_order"]
    assert agree["score_pairs (5 documents)"]["max_score_difference"] == pytest.approx(0.5, abs=1e-4)
    assert not agree["score_pairs (5 documents)"]["within_tolerance"]
    table = views.format_views(
        {
            "results": {
                "runs": [{"device": "cpu", "views": run, "load_s": 1.0}, moved | {"load_s": 2.0}],
                "agreement": agree,
            }
        }
    )
    assert "| search bm25 |" in table and "no (order False" in table


def test_rerank_times_a_sentence_transformers_cross_encoder_beside_it(tmp_path, tiny_bert_dir, data_root):
    out = tmp_path / "rerank.json"
    assert (
        rerank.main(
            [
                "--model",
                str(tiny_bert_dir),
                "--data-root",
                data_root,
                "--candidates",
                "2",
                "--num-queries",
                "2",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "--compare-st",
                "true",
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    row = data["results"]["2"]
    assert row["st_p95_ms"] >= row["st_p50_ms"] > 0 and len(row["st_passes"]) == 1
    assert "max_length=512" in data["data"]["compared"] and data["data"]["backend"] == "torch"
    assert "ST CrossEncoder p50 ms" in rerank.format_rerank(data)


def test_rerank_times_the_apps_demo_corpus(tmp_path, tiny_bert_dir):
    out = tmp_path / "rerank.json"
    assert (
        rerank.main(
            [
                "--model",
                str(tiny_bert_dir),
                "--collection",
                "demo",
                "--candidates",
                "3",
                "--num-queries",
                "2",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "--output",
                str(out),
                "--progress",
                "false",
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert (
        data["results"]["3"]["p50_ms"] > 0
        and "demo documents for 2 random demo queries" in data["data"]["candidates"]
    )
    assert rerank.main(["--model", str(tiny_bert_dir), "--collection", "trec", "--output", str(out)]) == 2
