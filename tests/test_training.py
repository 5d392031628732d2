"""Smoke runs of training/train_bi_encoder.py and training/train_cross_encoder.py on a toy data root.

Each run goes through the real entry point (argument parsing, data loading, mining, Trainer, saving,
evaluation, metrics.json) with a tiny random BERT and a handful of examples, so it takes seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ctxir.files import machine_info
from ctxir.publish import metrics_file
from ctxir.types import CtxirError
from training import (
    common,
    cross_encoder_args,
    cross_encoder_data,
    train_bi_encoder,
    train_cross_encoder,
)

TOPICS = {
    "river": ["the river bank is on the water", "otters play in the river water", "i sat on the river bank"],
    "money": [
        "she put money in her bank account",
        "a salary deposit in the account",
        "the bank and the money",
    ],
    "python": ["the python is a snake", "python code is in the code", "a snake and a python"],
    "pets": ["the cat and the dog", "a dog is at the cat", "the cat sat on the dog"],
    "sky": ["the sun and the moon", "the moon is at the sun", "sun and moon"],
    "drinks": ["tea and coffee", "coffee is in the tea", "she sat at the coffee and tea"],
    "music": ["the music and the song", "a song is music", "she is in the music of the song"],
    "otters": ["otters play in the water", "the otters sat on the bank", "otters and the river"],
}
QUERIES = {
    "river": "river water",
    "money": "money in the bank",
    "python": "python snake",
    "pets": "cat dog",
    "sky": "sun moon",
    "drinks": "tea coffee",
    "music": "song music",
    "otters": "otters play",
}
STS_PAIRS = [
    ("the cat sat", "the cat sat", 5.0),
    ("the dog and the cat", "the cat and the dog", 4.6),
    ("tea and coffee", "coffee and tea", 4.8),
    ("the sun", "the moon", 1.2),
    ("python code", "a python snake", 1.0),
    ("music and song", "the song and music", 4.4),
    ("the river bank", "money in the bank", 0.8),
    ("otters play", "the otters play", 4.2),
    ("she sat", "i sat", 3.0),
    ("the salary", "the water", 0.2),
    ("a dog", "a cat", 1.6),
    ("the account", "the bank account", 3.6),
]


def _write_toy_root(root: Path) -> Path:
    """A data root shaped like ../shared/data: scifact/ and stsbenchmark/ with toy content."""
    sci = root / "scifact"
    (sci / "qrels").mkdir(parents=True)
    docs, train_qrels, test_qrels, queries = [], [], [], []
    for t, (topic, texts) in enumerate(TOPICS.items()):
        for i, text in enumerate(texts):
            docs.append({"_id": f"{topic}{i}", "title": topic, "text": text})
        queries += [
            {"_id": f"tr-{topic}", "text": QUERIES[topic]},
            {"_id": f"te-{topic}", "text": f"the {topic}"},
        ]
        train_qrels += [f"tr-{topic}\t{topic}0\t1", f"tr-{topic}\t{topic}1\t1"]
        test_qrels.append(f"te-{topic}\t{topic}{2 if t % 2 else 0}\t1")
    (sci / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (sci / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (sci / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(train_qrels) + "\n")
    (sci / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(test_qrels) + "\n")
    sts = root / "stsbenchmark"
    sts.mkdir()
    for split in ("train", "dev", "test"):
        lines = [
            f"main-captions\tMSRvid\t2012\t{i:04d}\t{s:.3f}\t{a}\t{b}"
            for i, (a, b, s) in enumerate(STS_PAIRS)
        ]
        (sts / f"sts-{split}.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory) -> Path:
    return _write_toy_root(tmp_path_factory.mktemp("toy-data"))


# The tiny segment-cosine cross-encoder run several tests train (a listwise loss over 2 negatives, top layer only)
TINY_SEGMENT_COSINE = {
    "task": "scifact",
    "batch_size": 2,
    "num_negatives": 2,
    "head": "segment-cosine",
    "train_layers": 1,
    "loss": "listnet",
    "dev_queries": 2,
    "dev_depth": 5,
}


def _bi_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model",
        str(model),
        "--data-dir",
        str(data),
        "--output-dir",
        str(out),
        "--device",
        "cpu",
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--mining-cache",
        "none",
        "--dev-queries",
        "2",
        "--logging-steps",
        "1",
        "--torch-threads",
        "1",
        *extra,
    ]


def _check_metrics(out: Path, model_type: str, datasets: set[str]) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics_file.REQUIRED_KEYS) <= set(metrics)
    assert metrics["model_type"] == model_type
    assert set(metrics_file.REQUIRED_TRAINING) <= set(metrics["training"])
    assert metrics["training"]["steps"] == 2
    assert metrics["training"]["device"] == "cpu"
    assert {d["name"] for d in metrics["datasets"]} >= datasets
    assert all(d["license"] and d["num_examples"] > 0 for d in metrics["datasets"])
    assert metrics["evaluations"], "no evaluation was recorded"
    for row in metrics["evaluations"]:
        assert set(metrics_file.REQUIRED_EVAL) <= set(row)
        assert isinstance(row["before"], float) and isinstance(row["after"], float)
    assert metrics["config"]["max_steps"] == 2
    assert set(metrics["versions"]) >= {"ctxir", "sentence_transformers", "transformers", "torch"}
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert any("loss" in row for row in log)
    assert (out / "train.log").read_text().strip()
    assert not (out / "checkpoints").exists()  # removed after a finished run unless --keep-checkpoints
    return metrics


@pytest.mark.parametrize(
    ("task", "objective", "datasets", "metric", "loss"),
    [
        ("stsb", "cosent", {"stsb"}, "spearman", "CoSENTLoss"),
        ("stsb", "cosine", {"stsb"}, "spearman", "CosineSimilarityLoss"),
        ("scifact", "mnrl", {"scifact"}, "nDCG@10", "MultipleNegativesRankingLoss"),
    ],
)
def test_bi_encoder_smoke(tiny_bert_dir, toy_root, tmp_path, task, objective, datasets, metric, loss):
    from sentence_transformers import SentenceTransformer

    from ctxir.encoders.models import load_bi_encoder

    out = tmp_path / "out"
    assert (
        train_bi_encoder.main(
            _bi_args(
                tiny_bert_dir, toy_root, out, "--task", task, "--objective", objective, "--max-samples", "8"
            )
        )
        == 0
    )
    metrics = _check_metrics(out, "bi-encoder", datasets)
    assert metrics["objective"] == loss
    assert metric in {row["metric"] for row in metrics["evaluations"]}
    model = SentenceTransformer(str(out), device="cpu")
    assert model.encode(["the cat sat"]).shape == (1, 32)
    assert load_bi_encoder(str(out), "cpu").get_embedding_dimension() == 32


def test_a_shipped_recipe_runs_with_flags_overriding_it_and_is_recorded(tiny_bert_dir, toy_root, tmp_path):
    """training/recipes/bi-encoder-stsb-cosent.yaml, 2 steps on the toy data: the recipe's settings, the flags'
    overrides, and the recipe's path in metrics.json "config" and train.log."""
    out = tmp_path / "out"
    argv = ["--recipe", "recipes/bi-encoder-stsb-cosent.yaml", *_bi_args(tiny_bert_dir, toy_root, out)]
    assert train_bi_encoder.main(argv) == 0
    config = _check_metrics(out, "bi-encoder", {"stsb"})["config"]
    assert (config["task"], config["objective"], config["num_train_epochs"], config["learning_rate"]) == (
        "stsb",
        "cosent",
        2.0,
        2e-5,
    )  # the recipe's
    assert (config["max_steps"], config["per_device_train_batch_size"], config["model"]) == (
        2,
        4,
        str(tiny_bert_dir),
    )  # the flags'
    assert config["recipe"] == "recipes/bi-encoder-stsb-cosent.yaml"
    assert (
        "'recipe': 'recipes/bi-encoder-stsb-cosent.yaml'" in (out / "train.log").read_text()
    )  # the config line


def test_bi_encoder_scifact_mines_hard_negatives(tiny_bert_dir, toy_root, tmp_path):
    out = tmp_path / "out"
    assert (
        train_bi_encoder.main(
            _bi_args(
                tiny_bert_dir,
                toy_root,
                out,
                "--task",
                "scifact",
                "--num-negatives",
                "2",
                "--mining-relative-margin",
                "0",
            )
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    # 14 (claim, abstract) pairs of the 7 training claims left after holding out 2 → one row per pair
    # with 2 mined negatives each (n-tuple), none of them the pair's own positives.
    assert metrics["extra"]["pairs"] == 12
    assert metrics["extra"]["train_rows_after_mining"] == 12
    assert metrics["extra"]["mining"]["num_negatives"] == 2
    assert metrics["extra"]["dev_after"]  # InformationRetrievalEvaluator on the held-out claims ran


def test_cross_encoder_smoke(tiny_bert_dir, toy_root, tmp_path, training_argv):
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.models import load_cross_encoder
    from ctxir.rerank import CrossEncoderReranker

    out = tmp_path / "out"
    args = training_argv(
        tiny_bert_dir,
        toy_root,
        out,
        task="scifact",
        max_steps=2,
        batch_size=4,
        max_samples=8,
        num_negatives=2,
        rerank_depth=6,
        dev_queries=2,
        dev_depth=5,
        logging_steps=1,
    )
    assert train_cross_encoder.main(args) == 0
    metrics = _check_metrics(out, "cross-encoder", {"scifact"})
    assert metrics["objective"] == "BinaryCrossEntropyLoss"
    assert {r["metric"] for r in metrics["evaluations"]} == {"nDCG@10", "MRR@10"}
    assert metrics["extra"]["positives"] == 8 and metrics["extra"]["negatives"] == 8
    assert metrics["extra"]["first_stage"]["depth"] == 6
    model = CrossEncoder(str(out), device="cpu")
    assert model.predict([("the cat", "the dog")]).shape == (1,)
    reranker = CrossEncoderReranker(load_cross_encoder(str(out), "cpu"))
    assert reranker.score_pairs("the cat", ["the dog", "the sun"]).shape == (2,)


def test_bi_and_cross_encoder_hold_out_the_same_claims(tiny_bert_dir, toy_root, tmp_path, training_argv):
    # Equal --dev-queries and --seed → the same held-out claims, so a pipeline of both models can be tuned on
    # claims neither trained on (ctxir.evaluate --tune-queries <metrics.json>).
    from ctxir.data import load_beir

    bi, ce = tmp_path / "bi", tmp_path / "ce"
    assert (
        train_bi_encoder.main(
            _bi_args(tiny_bert_dir, toy_root, bi, "--task", "scifact", "--eval-before", "false")
        )
        == 0
    )
    assert (
        train_cross_encoder.main(
            training_argv(
                tiny_bert_dir,
                toy_root,
                ce,
                task="scifact",
                max_steps=2,
                batch_size=4,
                rerank_depth=3,
                dev_queries=2,
                eval_before=False,
            )
        )
        == 0
    )
    held = [json.loads((out / "metrics.json").read_text())["extra"]["heldout_query_ids"] for out in (bi, ce)]
    assert held[0] == held[1] and len(held[0]) == 2
    _, queries, _ = load_beir(toy_root / "scifact", "train")
    assert set(held[0]) <= set(queries)
    metrics = json.loads((ce / "metrics.json").read_text())["extra"]
    assert metrics["train_queries"] + metrics["heldout_train_queries"] == len(queries)


def _losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def test_bi_encoder_loss_goes_down(tiny_bert_dir, toy_root, tmp_path):
    out = tmp_path / "out"
    # The whole toy set in every batch, so the only noise between steps is dropout.
    args = _bi_args(
        tiny_bert_dir,
        toy_root,
        out,
        "--task",
        "stsb",
        "--objective",
        "cosine",
        "--learning-rate",
        "2e-3",
        "--eval-before",
        "false",
        "--seed",
        "0",
    )
    args[args.index("--max-steps") + 1] = "40"
    args[args.index("--batch-size") + 1] = "12"
    assert train_bi_encoder.main(args) == 0
    losses = _losses(out)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


def test_cross_encoder_loss_goes_down(tiny_bert_dir, toy_root, tmp_path, training_argv):
    out = tmp_path / "out"
    args = training_argv(
        tiny_bert_dir,
        toy_root,
        out,
        task="scifact",
        max_steps=40,
        batch_size=12,
        num_negatives=2,
        dev_queries=0,
        head="segment-cosine",
        learning_rate="5e-4",
        logging_steps=1,
        eval_before=False,
        seed=0,
    )
    assert train_cross_encoder.main(args) == 0
    losses = _losses(out)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


# ---------------------------------------------------------------- bad input: clear errors before training


def _no_training_happened(out: Path) -> None:
    assert not (out / "training_log.jsonl").exists()
    assert not (out / "checkpoints").exists()
    assert not (out / "model.safetensors").exists()


@pytest.mark.parametrize("script", [train_bi_encoder, train_cross_encoder])
def test_missing_data_folder(script, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "out"
    missing = tmp_path / "no-such-data"
    code = script.main(
        [
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(missing),
            "--output-dir",
            str(out),
            "--device",
            "cpu",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "--data-dir" in err and repr(str(missing)) in err and "Traceback" not in err
    _no_training_happened(out)


def test_missing_dataset_inside_data_root(tiny_bert_dir, toy_root, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(toy_root, root)
    shutil.rmtree(root / "stsbenchmark")
    with pytest.raises(CtxirError, match=r"has no stsbenchmark/ folder"):
        train_bi_encoder.run(
            train_bi_encoder.BiEncoderArgs(
                task="stsb", model=str(tiny_bert_dir), data_dir=str(root), output_dir=str(tmp_path / "o")
            )
        )


@pytest.mark.parametrize(
    ("script", "task"),
    [
        (train_bi_encoder, "stsb"),
        (train_bi_encoder, "scifact"),
        (train_cross_encoder, "scifact"),
    ],
)
def test_empty_training_set(script, task, tiny_bert_dir, toy_root, tmp_path, capsys):
    out = tmp_path / "out"
    code = script.main(
        [
            "--task",
            task,
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(toy_root),
            "--output-dir",
            str(out),
            "--device",
            "cpu",
            "--max-samples",
            "0",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "training set is empty" in err and "--max-samples 0" in err
    _no_training_happened(out)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], "--batch-size must be ≥ 1"),
        (["--learning-rate", "0"], "--learning-rate must be > 0"),
        (["--max-samples", "-5"], "--max-samples must be -1"),
        (["--task", "stsb", "--objective", "mnrl"], "--objective 'mnrl' does not fit --task 'stsb'"),
        (["--resume", "last"], "no complete checkpoint-N folder"),
    ],
)
def test_bad_arguments(argv, message, tiny_bert_dir, toy_root, tmp_path, capsys):
    out = tmp_path / "out"
    code = train_bi_encoder.main(
        [
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(toy_root),
            "--output-dir",
            str(out),
            "--device",
            "cpu",
            *argv,
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err
    _no_training_happened(out)


# ---------------------------------------------------------------- resume


def test_interrupted_run_resumes_from_last_checkpoint(tiny_bert_dir, toy_root, tmp_path):
    out = tmp_path / "out"
    args = _bi_args(
        tiny_bert_dir,
        toy_root,
        out,
        "--task",
        "stsb",
        "--save-steps",
        "2",
        "--keep-checkpoints",
        "true",
        "--eval-before",
        "false",
    )
    args[args.index("--max-steps") + 1] = "4"
    assert train_bi_encoder.main(args) == 0
    checkpoints = out / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-2", "checkpoint-4"]
    # An interruption between step 2 and 4 leaves checkpoint-2 as the newest one and no finished model.
    shutil.rmtree(checkpoints / "checkpoint-4")
    (out / "metrics.json").unlink()
    log_before = (out / "training_log.jsonl").read_text().splitlines()
    assert train_bi_encoder.main([*args, "--resume", "last"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["training"]["resumed_from"] == str(checkpoints / "checkpoint-2")
    assert metrics["training"]["steps"] == 4
    resumed = [
        json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()[len(log_before) :]
    ]
    # The resumed run trains steps 3 and 4 only.
    assert [row["step"] for row in resumed if "loss" in row] == [3, 4]


def test_resume_skips_a_checkpoint_torn_by_a_kill(tmp_path, capsys):
    for step, state in ((2, "{}"), (4, "{}"), (6, None), (8, '{"global_st')):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"weights")
        if state is not None:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert common.resolve_resume("last", tmp_path) == str(tmp_path / "checkpoint-4")
    assert "skipping checkpoint-8, checkpoint-6 (saved only in part" in capsys.readouterr().out
    with pytest.raises(CtxirError, match="saved only in part"):
        common.resolve_resume(str(tmp_path / "checkpoint-6"), tmp_path)


def test_a_killed_run_resumes_and_matches_an_uninterrupted_one(tiny_bert_dir, toy_root, tmp_path):
    """SIGKILL mid-training (a real process, not a simulated exit), --resume last, same final metrics."""
    import signal
    import subprocess
    import sys
    import time

    def args(out: Path) -> list[str]:
        argv = _bi_args(
            tiny_bert_dir,
            toy_root,
            out,
            "--task",
            "stsb",
            "--save-steps",
            "10",
            "--eval-before",
            "false",
            "--learning-rate",
            "1e-3",
        )
        argv[argv.index("--max-steps") + 1] = "60"
        return argv

    whole = tmp_path / "whole"
    assert train_bi_encoder.main(args(whole)) == 0
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "training/train_bi_encoder.py", *args(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while (
        not (killed / "checkpoints" / "checkpoint-20").is_dir()
        and proc.poll() is None
        and time.time() < deadline
    ):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "metrics.json").exists(), (
        "the run finished before it could be killed: raise --max-steps"
    )
    assert train_bi_encoder.main([*args(killed), "--resume", "last"]) == 0
    a, b = (json.loads((out / "metrics.json").read_text()) for out in (whole, killed))
    assert b["training"]["resumed_from"].startswith(str(killed / "checkpoints" / "checkpoint-"))
    assert b["training"]["steps"] == a["training"]["steps"] == 60
    # the resumed run restores optimizer, scheduler, RNG and data order: the same model within float noise
    assert b["training"]["final_loss"] == pytest.approx(a["training"]["final_loss"], abs=1e-4)
    for row_a, row_b in zip(a["evaluations"], b["evaluations"], strict=True):
        assert row_b["after"] == pytest.approx(row_a["after"], abs=1e-4), row_a["metric"]


# ---------------------------------------------------------------- common helpers


def test_write_metrics_checks_the_contract(tmp_path):
    good = {
        "model_type": "bi-encoder",
        "model_name": "m",
        "base_model": "b",
        "objective": "CoSENTLoss",
        "datasets": [common.dataset_entry("stsb", "train", "train", "x", 3)],
        "config": {},
        "training": dict.fromkeys(metrics_file.REQUIRED_TRAINING, 0),
        "evaluations": [common.evaluation_row("stsb", "test", "sts", "spearman", 0.5, 0.6)],
    }
    path = metrics_file.write_metrics(tmp_path, good)
    written = json.loads(path.read_text())
    assert written["datasets"][0]["license"] == "CC BY-SA 4.0"
    assert set(written["versions"]) >= {"ctxir", "torch"} and written["created"]
    with pytest.raises(ValueError, match="objective"):
        metrics_file.write_metrics(tmp_path, {k: v for k, v in good.items() if k != "objective"})
    with pytest.raises(ValueError, match="split"):
        metrics_file.write_metrics(tmp_path, {**good, "evaluations": [{"dataset": "stsb"}]})


def test_machine_info_and_take():
    info = machine_info()
    assert info["cpu_count"] >= 1 and "CPU core" in info["hardware"]
    items = list(range(10))
    assert common.take(items, -1, 0) == items
    assert common.take(items, 0, 0) == []
    subset = common.take(items, 4, 0)
    assert len(subset) == 4 and subset == sorted(subset) and subset == common.take(items, 4, 0)


# ---------------------------------------------------------------- the real benchmark data (slow)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "argv"),
    [
        (
            train_bi_encoder,
            [
                "--task",
                "scifact",
                "--eval-max-queries",
                "20",
                "--mining-cache",
                "none",
                "--mining-relative-margin",
                "0",
            ],
        ),
        (train_cross_encoder, ["--task", "scifact", "--eval-max-queries", "10", "--rerank-depth", "10"]),
    ],
)
def test_scripts_on_shared_data(script, argv, tiny_bert_dir, shared_data, tmp_path):
    out = tmp_path / "out"
    assert (
        script.main(
            [
                *argv,
                "--model",
                str(tiny_bert_dir),
                "--data-dir",
                str(shared_data),
                "--output-dir",
                str(out),
                "--device",
                "cpu",
                "--max-steps",
                "2",
                "--max-samples",
                "32",
                "--batch-size",
                "8",
                "--torch-threads",
                "1",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["training"]["steps"] == 2
    assert all(d["path"].startswith(str(shared_data)) for d in metrics["datasets"])


@pytest.mark.parametrize("loss", ["bce", "listnet"])
def test_cross_encoder_trains_on_title_pseudo_queries(tiny_bert_dir, toy_root, tmp_path, loss, training_argv):
    out = tmp_path / "out"
    args = training_argv(
        tiny_bert_dir,
        toy_root,
        out,
        task="scifact",
        max_steps=2,
        batch_size=4,
        num_negatives=2,
        rerank_depth=4,
        dev_queries=2,
        pseudo_queries=5,
        loss=loss,
        learning_rate="1e-2",
    )
    assert train_cross_encoder.main(args) == 0
    metrics = _check_metrics(out, "cross-encoder", {"scifact"})
    assert metrics["extra"]["pseudo_queries"] == 5
    assert metrics["extra"]["train_queries"] == len(metrics["extra"]["train_query_ids"]) == 6
    assert metrics["objective"] == {"bce": "BinaryCrossEntropyLoss", "listnet": "ListNetLoss"}[loss]


def test_cross_encoder_segment_cosine_top_layers_resample_and_continue(
    tiny_bert_dir, toy_root, tmp_path, training_argv
):
    """The CPU recipe's levers end to end: a segment-cosine head over the top layer only, negatives re-drawn per
    round, dev claims whose abstracts no training claim cites; the saved top layers continue training."""
    from ctxir.data import load_beir
    from ctxir.encoders.heads import layer_of
    from ctxir.names import TOP_LAYERS_CONFIG

    out = tmp_path / "out"
    args = training_argv(
        tiny_bert_dir,
        toy_root,
        out,
        **TINY_SEGMENT_COSINE,
        max_steps=2,
        negative_pool=4,
        negative_rounds=2,
        dev_split="unseen",
        rerank_depth=6,
        head_learning_rate="1e-2",
    )
    assert train_cross_encoder.main(args) == 0
    metrics = _check_metrics(out, "cross-encoder", {"scifact"})
    extra = metrics["extra"]
    assert (
        metrics["training"]["train_examples"] == 2 * extra["train_queries"]
    )  # one group per claim per round
    _, _, qrels = load_beir(toy_root / "scifact", "train")
    for qid in extra["heldout_query_ids"]:  # no other claim cites a held-out claim's abstracts
        assert all(d not in qrels[other] for d in qrels[qid] for other in qrels if other != qid)
    assert not (out / "model.safetensors").exists() and (out / TOP_LAYERS_CONFIG).is_file()
    from transformers import BertModel

    layer1 = sum(
        p.numel() for n, p in BertModel.from_pretrained(tiny_bert_dir).named_parameters() if layer_of(n) == 1
    )
    assert (
        extra["trained_parameters"] == layer1 + 2 + 3 * 32 + 1
    )  # the layer, scale and bias, the linear term
    # a later stage starts from the saved model (as from the shipped one) and keeps the same base
    # (on windows this time: the dev evaluator then scores each abstract by its best window)
    again = tmp_path / "again"
    args[args.index("--model") + 1], args[args.index("--output-dir") + 1] = str(out), str(again)
    assert train_cross_encoder.main([*args, "--train-passages", "best", "--eval-steps", "1"]) == 0
    config = json.loads((again / TOP_LAYERS_CONFIG).read_text())
    assert config["base_model"] == str(tiny_bert_dir)
    log = [json.loads(line) for line in (again / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "eval_scifact-train-heldout_ndcg@10" in r] == [1, 2]


def test_term_match_continues_a_saved_head_and_trains_its_own_weights(
    tiny_bert_dir, toy_root, tmp_path, training_argv
):
    """--term-match: a saved segment-cosine model gains the zero-initialised term-match term and trains it at its
    own learning rate; the output reloads with it, and the term is refused on heads it does not belong to."""
    import torch

    from ctxir.encoders import models

    first, second = tmp_path / "first", tmp_path / "second"
    args = training_argv(
        tiny_bert_dir, toy_root, first, **TINY_SEGMENT_COSINE, max_steps=2, rerank_depth=6, eval_before=False
    )
    assert train_cross_encoder.main(args) == 0
    args[args.index("--model") + 1], args[args.index("--output-dir") + 1] = str(first), str(second)
    assert (
        train_cross_encoder.main(
            [*args, "--term-match", "true", "--head-learning-rate", "1e-3", "--match-learning-rate", "5e-2"]
        )
        == 0
    )
    models.load_cross_encoder.cache_clear()
    head = models.load_cross_encoder(str(second), "cpu")[1]
    assert head.term_match and torch.count_nonzero(head.term_linear.weight) > 0  # it trained from zero
    extra = json.loads((second / "metrics.json").read_text())["extra"]
    before = json.loads((first / "metrics.json").read_text())["extra"]["trained_parameters"]
    assert (
        extra["trained_parameters"] == before + (32 + 1) + 5
    )  # term importance (v, c) and 1 + 4 kernel weights
    options = cross_encoder_args.head_learning_rates(
        train_cross_encoder.CrossEncoderArgs(
            head="segment-cosine", term_match=True, head_learning_rate=1e-3, match_learning_rate=5e-2
        )
    )
    assert options["learning_rate_mapping"] == {
        cross_encoder_args.HEAD_PARAMETERS: 1e-3,
        cross_encoder_args.MATCH_PARAMETERS: 5e-2,
    }
    with pytest.raises(CtxirError, match=r"--term-match.*--head 'cls'"):
        cross_encoder_args.check(train_cross_encoder.CrossEncoderArgs(head="cls", term_match=True))


def _train_load_best(training_argv, tiny_bert_dir, toy_root, out, steps: int) -> None:
    """A tiny segment-cosine run with a dev evaluation and a kept checkpoint at every step, ending on its dev-best."""
    args = training_argv(
        tiny_bert_dir,
        toy_root,
        out,
        **TINY_SEGMENT_COSINE,
        max_steps=steps,
        rerank_depth=6,
        eval_before=False,
        learning_rate="5e-3",
        head_learning_rate="5e-2",
        eval_steps=1,
        save_steps=1,
        keep_checkpoints=True,
        load_best=True,
    )
    assert train_cross_encoder.main(args) == 0


def test_load_best_ends_the_run_on_the_dev_best_checkpoint(tiny_bert_dir, toy_root, tmp_path, training_argv):
    """--load-best: the run's saved, tested model is the checkpoint the dev evaluator scored highest, and
    metrics.json says which; without an evaluator to choose by, the flag is refused before anything loads."""
    import torch
    from safetensors.torch import load_file

    from ctxir.names import TOP_LAYERS_WEIGHTS

    out = tmp_path / "best"
    _train_load_best(training_argv, tiny_bert_dir, toy_root, out, steps=4)
    key = "eval_scifact-train-heldout_ndcg@10"
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    curve = {r["step"]: r[key] for r in log if key in r}
    assert sorted(curve) == [1, 2, 3, 4]
    best = json.loads((out / "metrics.json").read_text())["extra"]["best_checkpoint"]
    assert best["metric"] == key.removeprefix("eval_") and best["value"] == max(curve.values())
    assert curve[best["step"]] == max(curve.values())  # the Trainer keeps the first of equal scores
    saved = load_file(str(out / TOP_LAYERS_WEIGHTS))
    chosen = load_file(str(out / "checkpoints" / f"checkpoint-{best['step']}" / TOP_LAYERS_WEIGHTS))
    assert all(torch.equal(saved[k], chosen[k]) for k in saved)
    if best["step"] != 4:  # the last step's weights are not what was saved
        last = load_file(str(out / "checkpoints" / "checkpoint-4" / TOP_LAYERS_WEIGHTS))
        assert not all(torch.equal(saved[k], last[k]) for k in saved)
    with pytest.raises(CtxirError, match="--save-steps a multiple"):
        common.check_common_args(
            train_cross_encoder.CrossEncoderArgs(eval_steps=2, save_steps=3, load_best=True)
        )
    with pytest.raises(CtxirError, match="--eval-steps ≥ 1"):
        common.check_common_args(train_cross_encoder.CrossEncoderArgs(eval_steps=0, load_best=True))


def test_finish_checkpoint_ships_a_kept_step_as_the_run_would_have_with_load_best(
    tiny_bert_dir, toy_root, tmp_path, training_argv
):
    """training.finish_checkpoint: a checkpoint chosen after the run becomes a model folder with exactly its weights,
    no pickles, and a metrics.json that describes that step (its dev score, none of the last step's test rows), the
    same weights --load-best saved for the dev-best step; evaluation.json rows are read in; bad input is named."""
    import torch
    from safetensors.torch import load_file

    from ctxir.encoders.models import load_cross_encoder
    from ctxir.names import TOP_LAYERS_WEIGHTS
    from training import finish_checkpoint

    run = tmp_path / "run"
    _train_load_best(training_argv, tiny_bert_dir, toy_root, run, steps=3)
    run_metrics = json.loads((run / "metrics.json").read_text())
    best = run_metrics["extra"]["best_checkpoint"]
    for step in sorted({best["step"], 3}):
        out = tmp_path / f"finished-{step}"
        assert finish_checkpoint.main(["--run", str(run), "--step", str(step), "--output-dir", str(out)]) == 0
        finished = load_file(str(out / TOP_LAYERS_WEIGHTS))
        kept = load_file(str(run / "checkpoints" / f"checkpoint-{step}" / TOP_LAYERS_WEIGHTS))
        assert sorted(finished) == sorted(kept) and all(torch.equal(finished[k], kept[k]) for k in kept)
        assert not [p.name for p in out.rglob("*") if p.suffix in (".pt", ".pth", ".bin")]
        # the run's own saved layout: nothing the saved model lacks (e.g. the checkpoint's tokenizer copy)
        assert {p.relative_to(out) for p in out.rglob("*") if p.is_file()} - {Path("metrics.json")} <= {
            p.relative_to(run) for p in run.rglob("*") if p.is_file()
        }
        metrics = json.loads((out / "metrics.json").read_text())
        assert (
            metrics["training"]["steps"] == step
            and metrics["training"]["finished_from"]["whole_run"]["steps"] == 3
        )
        assert metrics["evaluations"] == []  # the run's test rows describe its own last model, not this step
        chosen = metrics["extra"]["best_checkpoint"]
        assert chosen["step"] == step and chosen["metric"] == best["metric"]
        if step == best["step"]:  # the same record and the same weights the Trainer's --load-best saved
            assert chosen["value"] == pytest.approx(best["value"])
            saved = load_file(str(run / TOP_LAYERS_WEIGHTS))
            assert all(torch.equal(saved[k], finished[k]) for k in saved)
        load_cross_encoder.__wrapped__(str(out), "cpu").predict(
            [("a claim", "an abstract")]
        )  # loads as shipped
    # an evaluation of the folder becomes its rows; running again refreshes them and keeps the weights
    evaluation = {
        "demo": {
            "bm25@20": {
                "queries": 2,
                "first_stage": {"nDCG@10": 0.5},
                "alone": {"nDCG@10": 0.6},
                "fused": {"nDCG@10": 0.7},
            }
        }
    }
    (out / "evaluation.json").write_text(json.dumps(evaluation))
    assert finish_checkpoint.main(["--run", str(run), "--step", "3", "--output-dir", str(out)]) == 0
    rows = json.loads((out / "metrics.json").read_text())["evaluations"]
    assert [(r["config"], r["before"], r["after"]) for r in rows] == [
        ("bm25 top 20, re-ranker alone", 0.5, 0.6),
        ("bm25 top 20, fused with the first stage (RRF)", 0.5, 0.7),
    ]
    with pytest.raises(CtxirError, match=r"--step 5: .*steps \[1, 2, 3\]"):
        finish_checkpoint.run(finish_checkpoint.FinishCheckpointArgs(run=str(run), step=5))
    with pytest.raises(CtxirError, match="already holds other files"):  # never overwrites other weights
        finish_checkpoint.run(
            finish_checkpoint.FinishCheckpointArgs(run=str(run), step=1, output_dir=str(out))
        )
    with pytest.raises(CtxirError, match="--metric 'spearman' matches none"):
        finish_checkpoint.run(finish_checkpoint.FinishCheckpointArgs(run=str(run), step=1, metric="spearman"))
    with pytest.raises(CtxirError, match=r"has no metrics\.json"):
        finish_checkpoint.run(finish_checkpoint.FinishCheckpointArgs(run=str(tmp_path), step=1))


def test_scores_dir_resumes_shares_and_refuses_another_models_scores(tmp_path):
    """evaluate_reranker --scores-dir: kept scores are reused, a query another live process claimed is waited for
    and never scored twice, a dead process's claim is taken over, and another model's folder is refused."""
    import subprocess
    import sys
    import threading

    from ctxir.types import Hit
    from training import shared_scores

    class Counting:  # a re-ranker that records what it scores
        def __init__(self):
            self.calls = []

        def _rerank(self, query, hits, corpus):
            self.calls.append(query)
            return [Hit(h.doc_id, float(len(h.doc_id) + len(query))) for h in hits]

    queries = {"q1": "a", "q2": "bb", "q3": "ccc"}
    first = {q: [Hit("d1", 2.0), Hit("doc2", 1.0)] for q in queries}
    stamp = {"weights_sha256": "x", "passages": None}
    reranker = Counting()
    scored = shared_scores.score_candidates(reranker, queries, first, {}, "test top 2", str(tmp_path), stamp)
    assert scored["q2"] == {"d1": 4.0, "doc2": 6.0} and reranker.calls == ["a", "bb", "ccc"]
    # 1. a second run reuses every kept score
    again = Counting()
    assert (
        shared_scores.score_candidates(again, queries, first, {}, "test top 2", str(tmp_path), stamp)
        == scored
        and again.calls == []
    )
    # 2. other candidates for a query are scored afresh
    changed = {**first, "q1": [Hit("d9", 1.0)]}
    assert shared_scores.score_candidates(again, queries, changed, {}, "test top 2", str(tmp_path), stamp)[
        "q1"
    ] == {"d9": 3.0}
    assert again.calls == ["a"]
    # 3. a query claimed by a live process is waited for; one claimed by a dead process is taken over
    store_dir = tmp_path / "test-top-2"
    for q in ("q2", "q3"):
        (store_dir / f"{q}.json").unlink()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (store_dir / "q2.claim").write_text(str(live.pid))
    (store_dir / "q3.claim").write_text(str(dead.pid))
    other = shared_scores.ScoreStore(tmp_path, stamp, "test top 2")
    finisher = threading.Timer(0.5, other.put, ("q2", ["d1", "doc2"], {"d1": 40.0, "doc2": 60.0}))
    finisher.start()
    try:
        third = Counting()
        result = shared_scores.score_candidates(
            third, queries, changed, {}, "test top 2", str(tmp_path), stamp
        )
    finally:
        finisher.join()
        live.kill()
    assert third.calls == ["ccc"] and result["q2"] == {"d1": 40.0, "doc2": 60.0}
    assert not list(store_dir.glob("*.claim"))
    # 4. another model's scores are never mixed in
    with pytest.raises(CtxirError, match="another model"):
        shared_scores.score_candidates(
            Counting(), queries, first, {}, "test top 2", str(tmp_path), {**stamp, "weights_sha256": "y"}
        )
    assert shared_scores.model_stamp(tmp_path, Counting()) == {
        "weights_sha256": shared_scores.model_stamp(tmp_path / "none", None)["weights_sha256"],
        "passages": None,
    }  # a folder without weights: the empty digest


def test_fusion_min_gain_gives_the_first_stage_the_largest_weight_when_the_dev_gain_is_small():
    """--fusion-min-gain: a weight is trusted only for a dev gain over the first stage of at least that much; below
    it the first stage gets the grid's largest say, so the re-ranker only breaks its near-ties."""
    from ctxir.types import Hit
    from training import fusion_choice as fc

    qrels = {"q1": {"d1": 1}, "q2": {"e1": 1}}
    # the first stage already ranks both relevant documents first; the re-ranker puts them last
    right = {"q1": [Hit("d1", 3.0), Hit("d2", 2.0), Hit("d3", 1.0)], "q2": [Hit("e1", 3.0), Hit("e2", 2.0)]}
    wrong = {"q1": {"d1": 0.0, "d2": 1.0, "d3": 2.0}, "q2": {"e1": 0.0, "e2": 1.0}}
    plain = fc.fusion_grid(qrels, right, wrong, 10)
    assert "min_gain" not in plain and plain["dev"]["fused"] == max(r["fused"] for r in plain["grid"])
    held = fc.fusion_grid(qrels, right, wrong, 10, min_gain=0.03)
    assert held["weights"] == [fc.FIRST_STAGE_WEIGHTS[-1], 1.0] and held["min_gain"] == {
        "value": 0.03,
        "applied": True,
    }
    # the other way round the re-ranker earns its weight: a large dev gain keeps the best row
    swapped = {"q1": [Hit("d3", 3.0), Hit("d2", 2.0), Hit("d1", 1.0)], "q2": [Hit("e2", 3.0), Hit("e1", 2.0)]}
    earned = fc.fusion_grid(
        qrels,
        swapped,
        {"q1": {"d1": 2.0, "d2": 1.0, "d3": 0.0}, "q2": {"e1": 1.0, "e2": 0.0}},
        10,
        min_gain=0.03,
    )
    assert earned["min_gain"]["applied"] is False
    assert earned["dev"]["fused"] - earned["dev"]["first_stage"] >= 0.03 and earned["weights"][0] < 8.0


def test_fusion_max_loss_keeps_the_first_stages_order_where_every_weight_loses_on_dev():
    """--fusion-max-loss (the suite's must, asked of dev): a re-ranker that puts each query's relevant document last
    and its runner-up first costs nDCG@10 at every grid weight, even 8 : 1, so the choice keeps the first stage's
    order (TIE_BREAK_WEIGHT); a re-ranker whose chosen weight holds keeps it."""
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT, StageFusion
    from ctxir.types import Hit
    from training import fusion_choice as fc

    first = {q: [Hit(f"{q}-{i}", 20.0 - i) for i in range(20)] for q in ("q1", "q2")}
    qrels = {q: {f"{q}-0": 1} for q in first}  # the first stage ranks the relevant document first
    # the re-ranker: the first stage's runner-up first, the relevant document last
    scored = {q: {f"{q}-{i}": float(20 - abs(i - 1)) if i else -1.0 for i in range(20)} for q in first}
    off = fc.fusion_grid(qrels, first, scored, 20, min_gain=0.03)
    assert off["weights"] == [8.0, 1.0] and off["dev"]["fused"] < off["dev"]["first_stage"] - 0.005
    kept = fc.fusion_grid(qrels, first, scored, 20, min_gain=0.03, max_loss=0.005)
    assert kept["weights"] == [TIE_BREAK_WEIGHT, 1.0] and kept["max_loss"] == {
        "value": 0.005,
        "applied": True,
    }
    # the tie-break row is the grid's, after the finite weights; with no ties in the first stage it keeps its order
    tie_break = kept["grid"][len(fc.FIRST_STAGE_WEIGHTS)]
    assert kept["dev"]["fused"] == kept["dev"]["first_stage"] and tie_break is kept["dev"]
    assert StageFusion("rrf", tuple(kept["weights"])).keeps_first_stage
    # a re-ranker that only swaps the 3rd and 4th holds at every weight: nothing to move
    mild = {q: {f"{q}-{i}": float(20 - {2: 3, 3: 2}.get(i, i)) for i in range(20)} for q in first}
    held = fc.fusion_grid(qrels, first, mild, 20, max_loss=0.005)
    assert held["max_loss"]["applied"] is False and held["weights"][0] < TIE_BREAK_WEIGHT


def _weak_and_tied(tie_order_right: bool):
    """Two dev parts: "weak", where the re-ranker puts the relevant document last and the runner-up first (every
    finite RRF weight loses there), and "tied", where the first stage ties the relevant document with another and
    the re-ranker orders that tie right (or wrong)."""
    from ctxir.types import Hit

    first = {
        "w": [Hit(f"w{i}", 20.0 - i) for i in range(20)],
        "t": [Hit("t0", 3.0), Hit("t1", 1.0), Hit("t2", 1.0)],
    }
    qrels = {"w": {"w0": 1}, "t": {"t2" if tie_order_right else "t1": 1}}
    scored = {
        "w": {f"w{i}": float(20 - abs(i - 1)) if i else -1.0 for i in range(20)},
        "t": {"t0": 3.0, "t1": 1.0, "t2": 2.0},  # the tie ordered t2 first
    }
    parts = {"weak": (None, {"w": ""}, None), "tied": (None, {"t": ""}, None)}
    return qrels, first, scored, parts


def test_the_worst_part_rule_can_choose_to_break_the_first_stages_ties_only():
    """Where every finite weight loses on a dev part, the tie-break weight (the family's limit: the first stage's
    order, the re-ranker ordering only its ties) loses nowhere and gains where the re-ranker orders a tie right, so
    the worst-part rule picks it without --fusion-max-loss."""
    from ctxir.rerank.stage_fusion import TIE_BREAK_WEIGHT, StageFusion
    from training import fusion_choice as fc

    qrels, first, scored, parts = _weak_and_tied(tie_order_right=True)
    chosen = fc.fusion_grid(qrels, first, scored, 20, parts=parts, rule="worst-part")
    assert chosen["weights"] == [TIE_BREAK_WEIGHT, 1.0] and "max_loss" not in chosen
    finite = chosen["grid"][: len(fc.FIRST_STAGE_WEIGHTS)]
    assert all(row["parts"]["weak"]["fused"] < row["parts"]["weak"]["first_stage"] for row in finite)
    row = chosen["dev"]["parts"]
    assert (
        row["weak"]["fused"] == row["weak"]["first_stage"]
        and row["tied"]["fused"] > row["tied"]["first_stage"]
    )
    assert StageFusion("rrf", tuple(chosen["weights"])).keeps_first_stage


def test_fusion_max_loss_takes_the_least_losing_row_where_even_breaking_ties_loses():
    """--fusion-max-loss 0 where the re-ranker orders the first stage's tie wrong: no RRF row holds (the finite
    weights lose on "weak", the tie-break one on "tied"), so the choice is the RRF row whose worst part loses least."""
    from training import fusion_choice as fc

    qrels, first, scored, parts = _weak_and_tied(tie_order_right=False)
    chosen = fc.fusion_grid(qrels, first, scored, 20, parts=parts, rule="worst-part", max_loss=0.0)
    rrf_rows = chosen["grid"][: len(fc.FIRST_STAGE_WEIGHTS) + 1]

    def worst(row: dict) -> float:
        return min(p["fused"] - p["first_stage"] for p in row["parts"].values())

    assert chosen["max_loss"] == {"value": 0.0, "applied": True}
    assert all(worst(row) < 0 for row in rrf_rows)
    assert worst(chosen["dev"]) == max(worst(row) for row in rrf_rows)


def test_evaluations_of_one_collection_each_add_up_in_metrics_json():
    """Two evaluate_reranker runs, one collection each, share configs ("bm25 top 20, re-ranker alone"): the second
    must not drop the first's rows (they were replaced by config alone), and a collection measured again replaces
    its own."""
    from training import evaluate_reranker as er

    def rows(dataset: str, after: float) -> list[dict]:
        return [
            {"dataset": dataset, "split": "test", "config": c, "after": after}
            for c in ("bm25 top 20, re-ranker alone", "bm25 top 20, fused with the first stage (RRF)")
        ]

    merged = er.merge_evaluation_rows(rows("lisa", 0.40), rows("npl", 0.42))
    assert [(r["dataset"], r["after"]) for r in merged] == [("lisa", 0.40)] * 2 + [("npl", 0.42)] * 2
    again = er.merge_evaluation_rows(merged, rows("lisa", 0.41))
    assert sorted((r["dataset"], r["after"]) for r in again) == [("lisa", 0.41)] * 2 + [("npl", 0.42)] * 2


def test_the_worst_part_rule_picks_a_weight_every_dev_part_accepts():
    """--fusion-rule worst-part: a weight the part where the re-ranker is weak also accepts; the mean of the parts
    would trade that part's loss for the other's gain."""
    from ctxir.types import Hit
    from training import evaluate_reranker as er
    from training import fusion_choice as fc

    # part "learned": the first stage ranks the relevant document 3rd, the re-ranker 1st (gain +0.5 alone);
    # part "weak": the first stage ranks it 1st, the re-ranker 2nd (loss -0.37 alone)
    qrels = {"a": {"a3": 1}, "b": {"b1": 1}}
    first = {"a": [Hit("a1", 3.0), Hit("a2", 2.0), Hit("a3", 1.0)], "b": [Hit("b1", 2.0), Hit("b2", 1.0)]}
    scored = {"a": {"a1": 0.0, "a2": 1.0, "a3": 2.0}, "b": {"b1": 0.0, "b2": 1.0}}
    parts = {"learned": (None, {"a": ""}, None), "weak": (None, {"b": ""}, None)}
    mean = fc.fusion_grid(qrels, first, scored, 10, parts=parts)
    worst = fc.fusion_grid(qrels, first, scored, 10, parts=parts, rule="worst-part")
    assert mean["rule"] == "mean" and worst["rule"] == "worst-part"
    assert mean["dev"]["parts"]["weak"]["fused"] < mean["dev"]["parts"]["weak"]["first_stage"]
    assert mean["dev"]["fused"] > mean["dev"]["first_stage"]
    chosen = worst["dev"]["parts"]
    assert all(p["fused"] >= p["first_stage"] for p in chosen.values())
    assert worst["weights"][0] > mean["weights"][0]
    # every row keeps each part's own figures, so the record shows what the rule read
    assert all(set(row["parts"]) == {"learned", "weak"} for row in worst["grid"])
    # a rule or dev part that is not known stops before any model loads, not after the dev queries are scored
    with pytest.raises(CtxirError, match=r"--fusion-rule 'median' .*mean, worst-part"):
        er.check_args(er.EvaluateRerankerArgs(model="x", fusion_rule="median"))
    with pytest.raises(CtxirError, match=r"--fusion-dev names 'squad-topic': .*scifact, squad, squad-topics"):
        er.check_args(er.EvaluateRerankerArgs(model="x", fusion_dev="scifact,squad-topic"))
    # --depths '' only chooses: with nothing to choose it would run nothing and exit 0, so it is refused
    with pytest.raises(
        CtxirError, match=r"--depths '' evaluates nothing .*leave scifact out of --collections"
    ):
        er.check_args(er.EvaluateRerankerArgs(model="x", depths="", collections="lisa,npl"))
    assert er.check_args(er.EvaluateRerankerArgs(model="x", depths="", choose_fusion=True)) == (
        [],
        ["scifact", "msmarco", "demo"],
    )
    assert er.check_args(er.EvaluateRerankerArgs(model="x", collections="lisa")) == ([20], ["lisa"])


def test_squad_topics_are_paragraph_openings_judged_by_their_article_without_titles(tmp_path):
    from training import fusion_choice

    folder = tmp_path / "general" / "squad-v1.1"
    folder.mkdir(parents=True)
    articles = [
        {"title": t, "paragraphs": [{"context": f"{t} paragraph {i} text here", "qas": []} for i in range(3)]}
        for t in ("Otter", "Bat")
    ]
    (folder / "dev-v1.1.json").write_text(json.dumps({"data": articles}))
    corpus, queries, qrels = fusion_choice.squad_topics(
        {"seed": 1}, str(tmp_path), per_article=1, topic_words=3
    )
    assert (
        len(queries) == 2 and len(corpus) == 4
    )  # one paragraph of each article drawn, and out of the corpus
    for q, text in queries.items():
        article = q.split(":")[1]
        assert text.split()[:2] == [article, "paragraph"] and len(text.split()) == 3
        assert q not in corpus and len(qrels[q]) == 2
        assert all(d.startswith(f"topic:{article}:") and d in corpus for d in qrels[q])
    assert all(doc["title"] == "" for doc in corpus.values())


def test_unseen_heldout_queries_never_share_an_abstract():
    positives = {"a": {"d1"}, "b": {"d1", "d2"}, "c": {"d3"}, "d": {"d4"}, "e": {"d5", "d6"}, "f": {"d6"}}
    held = common.unseen_heldout_queries(positives, 10, seed=0)
    assert held == ["c", "d"]
    assert common.unseen_heldout_queries(positives, 1, seed=0) in (["c"], ["d"])
    assert common.unseen_heldout_queries(positives, 0, seed=0) == []


def test_evaluate_reranker_chooses_rrf_on_heldout_claims_and_splits_test_by_seen_abstracts(
    tiny_bert_dir, toy_root, tmp_path, training_argv
):
    """training/evaluate_reranker.py: fusion chosen on the model's held-out training claims (fusion.json), test
    figures split into claims citing an abstract a training claim cites and the rest, rows added to metrics.json."""
    from ctxir.data import load_beir
    from ctxir.evaluation import evaluate_run
    from ctxir.retrieval import BM25Retriever
    from ctxir.types import run_from_hits
    from training import evaluate_reranker
    from training.fusion_choice import FIRST_STAGE_WEIGHTS

    out = tmp_path / "ce"
    assert (
        train_cross_encoder.main(
            training_argv(
                tiny_bert_dir,
                toy_root,
                out,
                **TINY_SEGMENT_COSINE,
                max_steps=1,
                rerank_depth=10,
                eval_before=False,
            )
        )
        == 0
    )
    rows_before = len(json.loads((out / "metrics.json").read_text())["evaluations"])
    result = evaluate_reranker.run(
        evaluate_reranker.EvaluateRerankerArgs(
            model=str(out),
            data_dir=str(toy_root),
            choose_passages=True,
            passage_words=8,
            passage_stride=4,
            choose_fusion=True,
            fusion_depth=10,
            depths="10",
            collections="scifact",
            device="cpu",
        )
    )
    passages = json.loads((out / "passages.json").read_text())
    assert passages["method"] == ("max" if passages["dev"]["max"] > passages["dev"]["first"] else "first")
    assert result["passages"]["method"] == passages["method"]
    fusion = json.loads((out / "fusion.json").read_text())
    assert fusion["method"] == "rrf" and fusion["k"] == 60 and fusion["weights"][1] == 1.0
    assert fusion["weights"][0] in FIRST_STAGE_WEIGHTS
    assert fusion["dev"]["fused"] == max(row["fused"] for row in fusion["grid"])
    assert result["fusion"]["weights"] == fusion["weights"]
    # each other first stage gets its own weight, chosen on its own candidates of the same held-out claims
    assert set(fusion["first_stages"]) == {"dense", "hybrid"}
    for name, chosen in fusion["first_stages"].items():
        assert chosen["dev"]["fused"] == max(row["fused"] for row in chosen["grid"])
        assert f"{name} top 10" in chosen["chosen_on"]
        assert result["fusion"]["first_stages"][name]["weights"] == chosen["weights"]
    from ctxir.encoders import BiEncoder
    from ctxir.rerank.pipeline import build_first_stages, mode_fusion
    from ctxir.rerank.stage_fusion import StageFusion

    train_corpus, train_queries, _ = load_beir(toy_root / "scifact", "train")
    dev_ids = json.loads((out / "metrics.json").read_text())["extra"]["heldout_query_ids"]
    hybrid = build_first_stages(train_corpus, ["hybrid"], [BiEncoder()])[
        "hybrid"
    ]  # parts' top 100, as the app
    # scored in the order the app shows it: the toy hybrid's rank fusion ties often, and trec_eval's own tie order
    # (doc id, descending) scores these lists 0.674 against their shown order's 0.829
    hybrid_run = run_from_hits(hybrid.search({q: train_queries[q] for q in dev_ids}, 10))
    dev_qrels = {q: r for q, r in load_beir(toy_root / "scifact", "train")[2].items() if q in dev_ids}
    assert fusion["first_stages"]["hybrid"]["dev"]["first_stage"] == pytest.approx(
        evaluate_run(dev_qrels, hybrid_run).aggregate["nDCG@10"], abs=1e-4
    )
    # the app and the CLI fuse with the weights of the first stage in use, BM25's for any other
    ranker = type("Ranker", (), {"stage_fusion": StageFusion.from_file(out / "fusion.json")})()
    assert mode_fusion(ranker, "fused", "hybrid").weights == tuple(
        fusion["first_stages"]["hybrid"]["weights"]
    )
    assert mode_fusion(ranker, "fused", "bm25").weights == tuple(fusion["weights"])
    assert mode_fusion(ranker, "alone", "hybrid") is None

    corpus, queries, qrels = load_beir(toy_root / "scifact", "test")
    _, _, train_qrels = load_beir(toy_root / "scifact", "train")
    sci = result["scifact_test"]
    seen = {q for q, rel in qrels.items() if set(rel) & {d for r in train_qrels.values() for d in r}}
    assert (sci["seen_queries"], sci["unseen_queries"]) == (len(seen), len(qrels) - len(seen)) and seen
    bm25 = evaluate_run(qrels, run_from_hits(BM25Retriever(corpus).search(queries, 10))).aggregate["nDCG@10"]
    assert sci["bm25@10"]["all"]["first_stage"]["nDCG@10"] == pytest.approx(bm25, abs=1e-4)
    assert sci["bm25@10"]["seen"]["queries"] + sci["bm25@10"]["unseen"]["queries"] == len(qrels)
    assert json.loads((out / "evaluation.json").read_text())["scifact_test"] == json.loads(json.dumps(sci))
    rows = json.loads((out / "metrics.json").read_text())["evaluations"]
    # (all, seen, unseen) × (alone, fused) × (BM25 top 10, the other first stage: hybrid top 20)
    assert len(rows) == rows_before + 12 and set(sci) >= {"bm25@10", "hybrid@20"}
    # run again: the same rows are replaced, not repeated
    evaluate_reranker.run(
        evaluate_reranker.EvaluateRerankerArgs(
            model=str(out), data_dir=str(toy_root), depths="10", collections="scifact", device="cpu"
        )
    )
    assert len(json.loads((out / "metrics.json").read_text())["evaluations"]) == rows_before + 12
    # the demo corpus (no harm elsewhere) is added to the same record; the SciFact figures stay
    from ctxir.data import load_qrels, load_queries
    from ctxir.data.demo import ASSETS, demo_corpus

    evaluate_reranker.run(
        evaluate_reranker.EvaluateRerankerArgs(
            model=str(out),
            data_dir=str(toy_root),
            depths="10",
            collections="demo",
            other_first_stages="bm25",
            device="cpu",
        )
    )
    record = json.loads((out / "evaluation.json").read_text())
    assert record["scifact_test"] == json.loads(json.dumps(sci))
    assert (
        len(record["commands"]) == 3 and record["commands"][-1] == record["command"]
    )  # the three runs above
    demo_qrels = load_qrels(ASSETS / "demo_qrels.tsv")
    demo_queries = {q: t for q, t in load_queries(ASSETS / "demo_queries.jsonl").items() if q in demo_qrels}
    bm25 = evaluate_run(demo_qrels, run_from_hits(BM25Retriever(demo_corpus()).search(demo_queries, 20)))
    assert record["demo"]["bm25@20"]["first_stage"]["nDCG@10"] == pytest.approx(
        bm25.aggregate["nDCG@10"], abs=1e-4
    )
    assert record["demo"]["bm25@20"]["queries"] == len(demo_queries)


def test_evaluate_reranker_chooses_a_cls_lr_rankers_own_fusion_on_its_cross_encoders_heldout_claims(
    tiny_bert_dir, toy_root, tmp_path, training_argv
):
    """A CLS-LR folder is recognised (--kind auto), scored through the registry, and gets its own fusion.json chosen
    on the held-out claims its cross-encoder names (--dev-from); a folder naming none is refused with the fix."""
    from ctxir.rerank import ClsLrRanker
    from training import evaluate_reranker, fusion_choice
    from training.fusion_choice import FIRST_STAGE_WEIGHTS

    ce = tmp_path / "ce"
    assert (
        train_cross_encoder.main(
            training_argv(
                tiny_bert_dir,
                toy_root,
                ce,
                task="scifact",
                max_steps=1,
                batch_size=2,
                num_negatives=2,
                loss="listnet",
                dev_queries=2,
                dev_depth=5,
                rerank_depth=10,
                eval_before=False,
            )
        )
        == 0
    )
    hidden = json.loads((ce / "config.json").read_text())["hidden_size"]
    rng = np.random.default_rng(0)
    lr = ClsLrRanker(str(ce), rng.normal(size=hidden).astype(np.float32), 0.1, max_length=64, device="cpu")
    folder = lr.save(tmp_path / "lr")
    reranker = fusion_choice.load_reranker(str(folder), "cpu", 32)
    assert isinstance(reranker, ClsLrRanker)
    with pytest.raises(CtxirError, match="--dev-from"):
        evaluate_reranker.run(
            evaluate_reranker.EvaluateRerankerArgs(
                model=str(folder),
                data_dir=str(toy_root),
                choose_fusion=True,
                fusion_depth=10,
                depths="",
                device="cpu",
            )
        )
    result = evaluate_reranker.run(
        evaluate_reranker.EvaluateRerankerArgs(
            model=str(folder),
            dev_from=str(ce),
            data_dir=str(toy_root),
            choose_fusion=True,
            fusion_depth=10,
            depths="",
            device="cpu",
        )
    )
    fusion = json.loads((folder / "fusion.json").read_text())
    assert result["fusion"] == fusion and fusion["weights"][0] in FIRST_STAGE_WEIGHTS
    assert fusion["dev"]["fused"] == max(row["fused"] for row in fusion["grid"])
    dev = json.loads((ce / "metrics.json").read_text())["extra"]["heldout_query_ids"]
    assert fusion["chosen_on"].startswith(f"{len(dev)} held-out SciFact training claims")


def test_window_picker_takes_the_window_sharing_the_rarest_query_words():
    """--train-passages best: each (query, abstract) pair reads the abstract's MaxP window that shares the most
    query words, IDF-weighted; with nothing shared it keeps the first window (what FirstP reads)."""
    from ctxir.rerank import Passages

    # 'cells' is in every document (IDF low), 'prion' in one (IDF high)
    corpus = {f"d{i}": {"title": "", "text": f"cells study {i}"} for i in range(9)}
    corpus["p"] = {"title": "", "text": "prion"}
    picker = cross_encoder_data.WindowPicker(corpus, Passages(words=4, stride=4))
    text = "cells cells cells cells alpha beta gamma prion delta epsilon zeta eta"
    windows = Passages(words=4, stride=4).split("T", text)
    assert windows == ["T cells cells cells cells", "T alpha beta gamma prion", "T delta epsilon zeta eta"]
    assert picker.best("do cells carry prion", "T", text) == windows[1]  # one rare word beats a common one
    assert picker.best("do cells divide", "T", text) == windows[0]
    assert picker.best("nothing shared", "T", text) == windows[0]
    short = "prion cells"  # a text of one window reads exactly as FirstP: the title, then the text
    assert picker.best("prion", "T", short) == "T prion cells"


def test_maxp_dev_evaluator_scores_each_document_by_its_best_window():
    """The dev evaluator of a window-trained model: a relevant abstract whose match lies past the first window
    ranks first (nDCG@10 = 1), where reading the first tokens alone would put it second."""
    from types import SimpleNamespace

    from ctxir.types import Hit

    class Overlap:  # a stand-in cross-encoder: the score is the number of query words in the text
        model_card_data = SimpleNamespace(set_evaluation_metrics=lambda *a, **k: None)

        def predict(self, pairs, **_):
            return np.array([len(set(q.split()) & set(t.split())) for q, t in pairs], dtype=np.float32)

    filler = " ".join(f"w{i}" for i in range(80))  # longer than one 70-word window
    corpus = {
        "rel": {"title": "", "text": f"{filler} otters sleep in dens"},
        "other": {"title": "", "text": "otters in zoos"},
    }
    hits = {"q": [Hit("other", 2.0), Hit("rel", 1.0)]}
    evaluator = cross_encoder_data.maxp_evaluator(
        {"q": "where otters sleep in dens"}, hits, corpus, {"q": {"rel": 1}}, batch_size=4
    )
    metrics = evaluator(Overlap())
    assert evaluator.primary_metric == "scifact-train-heldout_ndcg@10"
    assert metrics["scifact-train-heldout_ndcg@10"] == pytest.approx(1.0)
    first_tokens = Overlap().predict(
        [("where otters sleep in dens", corpus[d]["text"][:60]) for d in ("rel", "other")]
    )
    assert first_tokens[0] < first_tokens[1]  # FirstP would rank 'other' first


def test_the_training_modules_examples_run():
    """ctxir's doctests (test_doctests.py) scan the installed package only; training/ is beside it, and an example
    nobody ran had gone stale (WindowPicker's, written for another stride)."""
    import doctest
    import importlib

    root = Path(__file__).resolve().parents[1] / "training"
    names = sorted(p.stem for p in root.glob("*.py") if ">>>" in p.read_text(encoding="utf-8"))
    assert {"evaluate_reranker", "fusion_choice", "cross_encoder_data"} <= set(names)
    attempted = 0
    for name in names:
        result = doctest.testmod(importlib.import_module(f"training.{name}"))
        assert result.failed == 0, name
        attempted += result.attempted
    assert attempted >= 15
