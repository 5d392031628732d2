import json

import pytest

from ctxir.evaluation.evaluate import main, tune_fusion_rankings
from ctxir.retrieval import BM25Retriever
from ctxir.types import Hit


@pytest.fixture
def beir_dir(tmp_path, write_beir):
    return write_beir(
        tmp_path / "toy",
        {"q1": "river otters", "q2": "snake prey", "q3": "bank account"},
        {
            "test": {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d2": 1}},
            "train": {"q1": {"d1": 1}, "q2": {"d3": 1}},
        },
    )


def test_bm25_cli_writes_metrics_and_config(beir_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--data", str(beir_dir), "--retriever", "bm25", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    # Each query's only relevant doc is ranked first by BM25 → every metric is perfect.
    assert result["metrics"]["bm25"]["nDCG@10"] == 1.0 and result["metrics"]["bm25"]["MRR@10"] == 1.0
    assert result["num_queries"] == 3 and result["config"]["retriever"] == "bm25"
    assert set(result["per_query"]["bm25"]) == {"q1", "q2", "q3"}
    assert "| bm25 |" in capsys.readouterr().out


def test_dense_cli_with_model_folder_and_pooling(beir_dir, tmp_path, tiny_bert_dir):
    out = tmp_path / "d.json"
    args = [
        "--data",
        str(beir_dir),
        "--retriever",
        "hybrid",
        "--model",
        str(tiny_bert_dir),
        "--pooling",
        "cls",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--tune-on",
        "train",
        "--output",
        str(out),
    ]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["tuned_fusion"]["metric"] == "nDCG@10" and result["config"]["pooling"] == "cls"
    assert 0 < result["metrics"]["hybrid"]["nDCG@10"] <= 1
    # --cache-dir names the cache root, as CTXIR_CACHE does: embeddings land in its embeddings/ sub-folder
    assert list((tmp_path / "cache" / "embeddings").glob("*.npy"))
    assert not list((tmp_path / "cache").glob("*.npy"))


def test_sts_cli(tmp_path, minilm_path):
    sts = tmp_path / "sts-test.csv"
    rows = [
        ("A man is playing a guitar.", "A man plays the guitar.", 5.0),
        ("A man is playing a guitar.", "A woman is slicing an onion.", 0.0),
        ("A cat sleeps on the sofa.", "A cat is sleeping on a couch.", 4.6),
        ("A dog runs in the park.", "The stock market fell today.", 0.2),
    ]
    sts.write_text("".join(f"main\tsrc\t2012\t{i:04d}\t{s}\t{a}\t{b}\n" for i, (a, b, s) in enumerate(rows)))
    out = tmp_path / "s.json"
    assert main(["--data", str(sts), "--model", str(minilm_path), "--output", str(out)]) == 0
    metrics = next(iter(json.loads(out.read_text())["metrics"].values()))
    # Paraphrases (gold 5.0, 4.6) must outscore unrelated pairs (0.0, 0.2): at worst one swap → 0.8.
    assert metrics["spearman"] > 0.79 and metrics["n"] == 4


def test_cli_errors_are_messages_not_tracebacks(beir_dir, tmp_path, capsys):
    assert main(["--data", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert (
        main(
            [
                "--data",
                str(beir_dir),
                "--retriever",
                "hybrid",
                "--tune-on",
                "test",
                "--output",
                str(tmp_path / "x.json"),
            ]
        )
        == 2
    )
    assert "is the split being evaluated" in capsys.readouterr().err
    assert main(["--data", str(beir_dir), "--model", "someone/not-cached-xyz"]) == 2
    assert "not in the local Hugging Face cache" in capsys.readouterr().err


def test_tuning_picks_the_better_setting_by_hand():
    # Retriever A finds the relevant doc at rank 1 for q1 only; B for q2 only. With A weighted up,
    # q1 is perfect; weights are chosen by nDCG@1 on these (training) queries.
    a = {"q1": [Hit("r1", 2), Hit("x", 1)], "q2": [Hit("x", 2), Hit("r2", 1)]}
    b = {"q1": [Hit("x", 2), Hit("r1", 1)], "q2": [Hit("x", 2), Hit("r2", 1)]}
    qrels = {"q1": {"r1": 1}, "q2": {"r2": 1}}
    best = tune_fusion_rankings([a, b], qrels, metric="nDCG@1", rrf_ks=(1,), weights=(0.5, 2.0))
    assert best["weights"] == [2.0, 1.0] and best["nDCG@1"] == 0.5
    assert len(best["grid"]) == 2 + 2  # rrf × 2 weights + weighted × 2 weights


def test_scifact_bm25_reproduces(shared_data):
    from ctxir.data import load_beir
    from ctxir.evaluation import evaluate_run
    from ctxir.types import run_from_hits

    corpus, queries, qrels = load_beir(shared_data / "scifact", "test")
    run = run_from_hits(BM25Retriever(corpus).search(queries, 100))
    ndcg = evaluate_run(qrels, run).aggregate["nDCG@10"]
    # bm25s (Lucene BM25, k1=1.5, b=0.75, stemming) — BEIR's Elasticsearch BM25 reports 0.665.
    assert ndcg == pytest.approx(0.6863, abs=0.002)


@pytest.fixture
def tiny_cross_encoder(tiny_bert_dir, tmp_path):
    from sentence_transformers import CrossEncoder

    folder = tmp_path / "tiny-ce"
    CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu").save_pretrained(str(folder))
    return folder


def test_tune_on_with_a_reranker_tunes_stage_fusion_on_the_train_queries(
    beir_dir, tmp_path, tiny_cross_encoder
):
    out = tmp_path / "r.json"
    args = [
        "--data",
        str(beir_dir),
        "--retriever",
        "bm25",
        "--rerank",
        "cross-encoder",
        "--reranker-model",
        str(tiny_cross_encoder),
        "--top-k",
        "4",
        "--tune-on",
        "train",
        "--torch-threads",
        "1",
        "--output",
        str(out),
    ]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["tuning_queries"] == {"split": "train", "count": 2}
    assert set(result["metrics"]) == {"bm25", "bm25 + cross-encoder", "bm25 + cross-encoder (fused)"}
    # BM25 ranks every relevant doc first, so on the tuning queries fusion can do no better: its nDCG@10 is 1.0,
    # and a first-stage weight > 0 keeps BM25's (perfect) order on the test queries too.
    stage = result["tuned_stage_fusion"]
    assert (
        stage["nDCG@10"] == 1.0
        and result["metrics"]["bm25 + cross-encoder (fused)"]["nDCG@10"]
        >= result["metrics"]["bm25 + cross-encoder"]["nDCG@10"]
    )


def test_tuning_needs_something_to_tune(beir_dir, capsys):
    assert main(["--data", str(beir_dir), "--retriever", "bm25", "--tune-on", "train"]) == 2
    assert "needs something to tune" in capsys.readouterr().err
    assert main(["--data", str(beir_dir), "--retriever", "bm25", "--torch-threads", "-1"]) == 2
    assert "--torch-threads" in capsys.readouterr().err


def test_tuning_three_retrievers_tunes_every_weight_but_the_last():
    # c finds r at rank 1 for both queries; a and b each find it for one query only.
    a = {"q1": [Hit("r", 2), Hit("x", 1)], "q2": [Hit("x", 2), Hit("r", 1)]}
    b = {"q1": [Hit("x", 2), Hit("r", 1)], "q2": [Hit("r", 2), Hit("x", 1)]}
    c = {"q1": [Hit("r", 2), Hit("x", 1)], "q2": [Hit("r", 2), Hit("x", 1)]}
    qrels = {"q1": {"r": 1}, "q2": {"r": 1}}
    best = tune_fusion_rankings([a, b, c], qrels, metric="nDCG@1", rrf_ks=(1,), weights=(0.5, 2.0))
    assert len(best["grid"]) == 2 * 2 * 2  # (rrf, weighted) × 2 weights for a × 2 for b
    assert best["nDCG@1"] == 1.0 and best["weights"][2] == 1.0
    # unequal a/b weights let the heavier one's mistake through: those settings are worse
    assert min(row["nDCG@1"] for row in best["grid"]) < 1.0


def test_extra_models_make_a_three_way_hybrid(beir_dir, tmp_path, tiny_bert_dir, capsys):
    out = tmp_path / "h3.json"
    args = [
        "--data",
        str(beir_dir),
        "--retriever",
        "hybrid",
        "--model",
        str(tiny_bert_dir),
        "--extra-models",
        str(tiny_bert_dir),
        "--pooling",
        "cls",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--tune-on",
        "train",
        "--output",
        str(out),
    ]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert len(result["tuned_fusion"]["weights"]) == 3
    assert result["first_stage_config"]["parts"] == ["bm25", "dense", "dense"]
    assert main(["--data", str(beir_dir), "--retriever", "dense", "--extra-models", "x"]) == 2
    assert "needs --retriever hybrid" in capsys.readouterr().err


def test_command_line_round_trips_through_the_parser():
    from transformers import HfArgumentParser

    from ctxir.cli import command_line
    from ctxir.evaluation.evaluate import EvaluateArgs

    config = {
        "data": "/abs/repo/data/x",
        "retriever": "bm25",
        "tune_on": "train",
        "top_k": 20,
        "split": "test",
    }
    line = command_line("ctxir evaluate", EvaluateArgs, config, always=("data",), replace={"/abs/repo/": ""})
    assert line == "ctxir evaluate --data data/x --retriever bm25 --tune-on train --top-k 20"
    (parsed,) = HfArgumentParser(EvaluateArgs).parse_args_into_dataclasses(args=line.split()[2:])
    assert (parsed.data, parsed.retriever, parsed.tune_on, parsed.top_k) == ("data/x", "bm25", "train", 20)
    # a value at its default is left out unless asked for: the default first stage (hybrid) needs ``always``
    default = {**config, "retriever": "hybrid"}
    assert "--retriever" not in command_line("ctxir evaluate", EvaluateArgs, default, always=("data",))
    asked = command_line("ctxir evaluate", EvaluateArgs, default, always=("data", "retriever"))
    assert asked.startswith("ctxir evaluate --data /abs/repo/data/x --retriever hybrid")


def test_paired_task_on_a_pairs_file(tmp_path, tiny_bert_dir, capsys):
    """--task paired: each query's one target among all targets, Recall@k and MRR."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(
        "query\ttarget\nthe cat sat\tthe cat sat on the dog\nriver water\tthe river bank is on the water\n"
        "tea coffee\tshe sat at the coffee and tea\n"
    )
    out = tmp_path / "p.json"
    assert (
        main(
            [
                "--data",
                str(pairs),
                "--task",
                "paired",
                "--model",
                str(tiny_bert_dir),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    metrics = next(iter(result["metrics"].values()))
    assert result["task"] == "paired" and result["num_pairs"] == 3
    assert set(metrics) == {"Recall@1", "Recall@5", "Recall@10", "Recall@20", "Recall@50", "MRR"}
    assert 0 <= metrics["Recall@1"] <= metrics["Recall@5"] == 1 and 1 / 3 <= metrics["MRR"] <= 1
    (tmp_path / "bad.tsv").write_text("only one column\n")
    assert main(["--data", str(tmp_path / "bad.tsv"), "--task", "paired", "--model", str(tiny_bert_dir)]) == 2
    assert "bad.tsv line 1: expected 2 tab-separated columns: query, target" in capsys.readouterr().err


def test_index_flag_ann_is_recorded_and_kept_beside_the_embeddings(beir_dir, tmp_path, tiny_bert_dir, capsys):
    out = tmp_path / "ann.json"
    args = [
        "--data",
        str(beir_dir),
        "--retriever",
        "dense",
        "--model",
        str(tiny_bert_dir),
        "--index",
        "ann",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--output",
        str(out),
    ]
    assert main(args) == 0
    config = json.loads(out.read_text())["first_stage_config"]
    assert (config["index_choice"], config["index_kind"]) == ("ann", "ann") and config["ann_settings"][
        "nlist"
    ] >= 1
    (index_file,) = (tmp_path / "cache" / "embeddings").glob("*.ann.faiss")
    stamp = index_file.stat().st_mtime_ns
    assert main(args) == 0 and index_file.stat().st_mtime_ns == stamp  # reopened, not rebuilt
    assert main([*args[:-2], "--index", "exact", "--output", str(tmp_path / "exact.json")]) == 0
    assert json.loads((tmp_path / "exact.json").read_text())["first_stage_config"]["ann_settings"] is None
    with pytest.raises(SystemExit):  # argparse's choices: the message lists auto, exact, ann
        main([*args[:-4], "--index", "hnsw"])
    assert "invalid choice: 'hnsw' (choose from" in capsys.readouterr().err


def test_rerank_modes_fused_by_default_with_the_folders_fusion_json(
    beir_dir, tmp_path, tiny_cross_encoder, capsys
):
    (tiny_cross_encoder / "fusion.json").write_text(
        json.dumps(
            {
                "method": "rrf",
                "weights": [2.0, 1.0],
                "k": 10,
                "chosen_on": "train claims 1-2",
                "first_stages": {"hybrid": {"weights": [5.0, 1.0]}},
            }
        )
    )
    base = [
        "--data",
        str(beir_dir),
        "--retriever",
        "bm25",
        "--rerank",
        "cross-encoder",
        "--reranker-model",
        str(tiny_cross_encoder),
        "--top-k",
        "4",
        "--torch-threads",
        "1",
    ]
    fused_out, alone_out = tmp_path / "fused.json", tmp_path / "alone.json"
    assert main([*base, "--output", str(fused_out)]) == 0
    printed = capsys.readouterr().out
    fused = json.loads(fused_out.read_text())
    # both are computed and printed: the re-ranker alone and fused with BM25 by the folder's settings
    assert "| bm25 + cross-encoder |" in printed and "| bm25 + cross-encoder (fused) |" in printed
    assert "fused mode: RRF k=10, weights 2:1 (first stage : re-ranker); train claims 1-2" in printed
    assert (fused["rerank_mode"], fused["system"]) == ("fused", "bm25 + cross-encoder (fused)")
    assert fused["stage_fusion"] == {
        "method": "rrf",
        "weights": [2.0, 1.0],
        "k": 10.0,
        "chosen_on": "train claims 1-2",
    }
    assert fused["config"]["rerank_mode"] == "fused"
    # BM25 puts each relevant document first; 2/(10+1) beats any 1/(10+r) + 2/(10+r'), so fusing keeps it there
    assert fused["metrics"]["bm25 + cross-encoder (fused)"]["nDCG@10"] == 1.0
    assert main([*base, "--rerank-mode", "alone", "--output", str(alone_out)]) == 0
    alone = json.loads(alone_out.read_text())
    assert set(alone["metrics"]) == {"bm25", "bm25 + cross-encoder"} and alone["stage_fusion"] is None
    assert alone["metrics"]["bm25 + cross-encoder"] == fused["metrics"]["bm25 + cross-encoder"]
    # over the hybrid first stage the fused mode takes the weights fusion.json chose for it
    hybrid_out = tmp_path / "hybrid.json"
    assert main([*base[:3], "hybrid", *base[4:], "--output", str(hybrid_out)]) == 0
    assert "weights 5:1 (first stage : re-ranker)" in capsys.readouterr().out
    assert json.loads(hybrid_out.read_text())["stage_fusion"]["weights"] == [5.0, 1.0]
    from ctxir.evaluation.evaluate import EvaluateArgs, default_output

    assert default_output(
        EvaluateArgs(
            data=str(beir_dir), retriever="bm25", rerank="cross-encoder", reranker_model="x/ce", top_k=4
        )
    ).endswith("-cross-encoder-ce-top4-fused.json")


def test_a_reranker_that_is_not_here_fails_before_anything_loads(beir_dir, tmp_path, capsys, monkeypatch):
    from ctxir.encoders import models

    # an installation whose package lacks the shipped CLS-LR ranker (e.g. a trimmed install)
    monkeypatch.setitem(models.SHIPPED_MODELS, models.SHIPPED_CLS_LR, tmp_path / "not-shipped")
    assert main(["--data", str(beir_dir), "--retriever", "bm25", "--rerank", "cls-lr"]) == 2
    err = capsys.readouterr().err
    assert "--rerank cls-lr: this installation ships no CLS-LR re-ranker" in err and "train_cls_lr.py" in err
    assert "pass `--rerank cls-lr --reranker-model FOLDER`" in err  # the CLI's own flags, not the app's
    assert (
        main(["--data", str(beir_dir), "--rerank", "cross-encoder", "--reranker-model", "someone/no-ce"]) == 2
    )
    assert "neither a local folder nor in the local Hugging Face cache" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--data", str(beir_dir), "--rerank", "colbert"])
    assert (
        "invalid choice: 'colbert' (choose from 'none', 'cross-encoder', 'cls-lr', 'sts-cross-encoder')"
        in capsys.readouterr().err
    )


def test_a_rerank_run_hands_the_reranker_the_hybrid_a_search_shows(beir_dir, tiny_bert_dir):
    """--top-k 20 with a re-ranker: the hybrid still fuses each part's top 100 (the app's hybrid), so its top 20 is
    the top 20 of the hybrid run without a re-ranker, not a fusion of two shorter lists."""
    from ctxir.data import load_beir
    from ctxir.evaluation.evaluate import EvaluateArgs, build_pipeline

    corpus, _, _ = load_beir(beir_dir, "test")
    args = EvaluateArgs(data=str(beir_dir), retriever="hybrid", model=str(tiny_bert_dir), top_k=2)
    assert build_pipeline(args, corpus).first_stage.depth == 100
    args.top_k = 300
    assert build_pipeline(args, corpus).first_stage.depth == 300
