"""A ``ctxir adapt`` output published as a Hub repo that stands alone (issue #50): staged by ``ctxir hub push``, laid
into a Hugging Face cache as ``hf download`` leaves it, and loaded by repo id, offline, where neither ctxir nor peft
can be imported: the embeddings are ctxir's own load of the adapter folder. Its card says it was adapted without
labels, on which corpus, with which teacher, and that it was not evaluated unless an evaluation was supplied."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxir.adapt import RECORD_FILE, AdaptArgs, run
from ctxir.encoders.models import load_bi_encoder, resolve_model
from ctxir.names import ADAPT_INCOMPLETE
from ctxir.publish.adapted import public_corpus_name, public_record
from ctxir.publish.cards import check_card
from ctxir.publish.hub import main as hub_main
from ctxir.publish.staging import stage
from ctxir.publish.standalone import hub_user_env, lay_into_hf_cache
from ctxir.types import CtxirError
from tests.test_adapt import _corpus_rows, _write_corpus, models  # noqa: F401 -- models: the fixture

REPO_ID = "you/tiny-adapted"
BASE_ID = "hf-internal-testing/tiny-random-bert"  # the Hub id the card names as the tiny base (a folder here)
TEXTS = ["otters eat fish at night", "banks lend money to small firms", "comets grow a bright tail"]

# Runs where `import ctxir` fails (hub_user_env's blocker) and peft cannot be imported either: the repo id loaded as
# the card's first line says, the texts encoded.
USER_SCRIPT = """
import json, sys

sys.modules["peft"] = None  # as if not installed: importing it fails, importlib.util.find_spec finds nothing
for name in ("ctxir", "peft"):
    try:
        __import__(name)
        sys.exit(f"{name} is importable: the test would prove nothing")
    except ModuleNotFoundError:
        pass
from sentence_transformers import SentenceTransformer

model = SentenceTransformer(sys.argv[1], device="cpu")
print(json.dumps(model.encode(json.loads(sys.argv[2])).tolist()))
"""


@pytest.fixture(scope="module")
def adapted(models, tmp_path_factory) -> Path:  # noqa: F811 -- models: test_adapt's fixture
    """A finished adapter over the tiny BERT, on the tiny corpus, with the tiny teacher (seconds)."""
    base, teacher = models
    root = tmp_path_factory.mktemp("adapt-hub")
    corpus = _write_corpus(root / "data", _corpus_rows())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CTXIR_CACHE", str(root / "cache"))
        settings = dict(max_steps=4, batch_size=8, save_steps=2, learning_rate=1e-2, max_seq_length=16)
        record = run(
            AdaptArgs(
                corpus=str(corpus),
                output=str(root / "adapted"),
                model=str(base),
                teacher=str(teacher),
                device="cpu",
                quiet=True,
                torch_threads=1,
                max_minutes=0.0,
                **settings,
            )
        )
    assert record["complete"]
    return root / "adapted"


def _ctxir_embeddings(name: str) -> np.ndarray:
    load_bi_encoder.cache_clear()
    resolve_model.cache_clear()
    return load_bi_encoder(name, "cpu").encode(TEXTS)


def test_an_adapted_bi_encoder_stages_as_a_repo_that_loads_without_ctxir_or_peft(adapted, tmp_path):
    record = json.loads((adapted / RECORD_FILE).read_text())
    report = stage(adapted, REPO_ID, tmp_path / "staged", corpus_license="cc-by-4.0", base_model_id=BASE_ID)
    files = set(report.files)
    # full weights, tokenizer and modules; no adapter for peft to put together, the run's record beside them
    assert {"model.safetensors", "config.json", "tokenizer.json", "modules.json", RECORD_FILE} <= files
    assert not {"adapter_config.json", "adapter_model.safetensors"} & files
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(report.skipped)
    assert report.model_type == "bi-encoder" and report.license == "cc-by-4.0"

    # as a Hub user gets it: by repo id from the HF cache, offline, with neither ctxir nor peft importable
    lay_into_hf_cache(report.folder, REPO_ID, tmp_path / "user" / "hub")
    user = subprocess.run(
        [sys.executable, "-c", USER_SCRIPT, REPO_ID, json.dumps(TEXTS)],
        cwd=tmp_path / "user",
        env=hub_user_env(tmp_path / "user", tmp_path / "user" / "hub", block_ctxir=True),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert user.returncode == 0, user.stderr[-3000:]
    hub = np.asarray(json.loads(user.stdout.strip().splitlines()[-1]))
    own, base = _ctxir_embeddings(str(adapted)), _ctxir_embeddings(record["base_model"])
    assert hub.shape == own.shape == (len(TEXTS), 32)
    assert np.abs(hub - own).max() <= 1e-5, np.abs(hub - own).max()
    # the adapter is in the weights: the base alone (an adapter staged unmerged, dropped) gives other vectors
    assert np.abs(own - base).max() > 1e-3

    # the card: without labels, the corpus, the teacher and loss, the queries, the run, not evaluated here
    card = (report.folder / "README.md").read_text()
    corpus = record["corpus"]
    for said in (
        "adapted without labels",
        "No query and no relevance label was used",
        f"| Corpus | `{public_corpus_name(corpus['path'])}` (its folder's or file's name;",
        f"| Documents | {corpus['documents']} |",
        f"`{corpus['fingerprint']}`",
        f"| Teacher | `{record['teacher']}` |",
        "| Loss | `MarginMSELoss` |",
        f"| Pseudo-queries | {record['queries']['total']}: {record['queries']['title']} title,",
        record["query_examples"]["sentence"][0],
        # the kinds this run drew, named (the tiny corpus gives no span: three per document, none missing)
        "The pseudo-queries are titles, sentences and word spans of the documents",
        "| Run | complete: 4 of 4 steps |",
        "Not evaluated here",
        'staged with `--corpus-license "cc-by-4.0"`',
        "a cross-encoder teacher's\nscores were the only supervision",
    ):
        assert said in card, said
    assert "\nlibrary_name: sentence-transformers\n" in card and "- ctxir-adapt\n" in card
    assert "model-index" not in card  # no figure: none was supplied
    # the card check holds a card to what it must say: one that drops the corpus's fingerprint is refused
    metrics = json.loads((report.folder / "metrics.json").read_text())
    assert metrics["adapt"] == public_record(record) and metrics["datasets"][0]["license"] == "cc-by-4.0"
    # the corpus is named, never located: no staged file carries the path it lay at on this machine
    local = str(Path(corpus["path"]).parent)
    assert local.startswith("/") and metrics["adapt"]["corpus"]["path"] == public_corpus_name(corpus["path"])
    for name in ("README.md", "metrics.json", RECORD_FILE):
        assert local not in (report.folder / name).read_text(), name
    edited = tmp_path / "README.md"
    edited.write_text(card.replace(f"`{corpus['fingerprint']}`", "(not shown)"))
    with pytest.raises(CtxirError, match=r"the card does not state the corpus fingerprint"):
        check_card(edited, metrics)


def test_an_evaluation_is_on_the_card_only_when_supplied_and_of_this_adapter(adapted, tmp_path, monkeypatch):
    from ctxir.evaluation.evaluate import main as evaluate

    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "bench"
    _write_corpus(data, _corpus_rows())
    queries = {
        "q1": ("otters eat fish", "otters0"),
        "q2": ("banks lend money", "banks1"),
        "q3": ("comets", "comets2"),
    }
    (data / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in queries.items())
    )
    (data / "qrels").mkdir()
    (data / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, (_, d) in queries.items())
    )
    result = tmp_path / "result.json"
    argv = ["--data", str(data), "--model", str(adapted), "--retriever", "dense", "--device", "cpu"]
    assert evaluate([*argv, "--output", str(result)]) == 0
    ndcg = json.loads(result.read_text())["metrics"]["dense"]["nDCG@10"]

    # through the command, as a user runs it: the figure on the card and in its model-index
    staged = tmp_path / "staged"
    push = ["push", "--model-dir", str(adapted), "--repo-id", REPO_ID, "--staging-dir", str(staged)]
    assert (
        hub_main(
            [
                *push,
                "--corpus-license",
                "CC BY-NC 2.0",
                "--evaluation",
                str(result),
                "--base-model-id",
                BASE_ID,
                "--dry-run",
                "true",
            ]
        )
        == 0
    )
    card = (staged / "README.md").read_text()
    assert f"| **{ndcg:.4f}** |" in card and "model-index" in card and "Not evaluated here" not in card
    assert "license: cc-by-nc-2.0" in card and "Commercial use is not allowed" in card

    # another model's evaluation is not this adapter's figure
    other = json.loads(result.read_text())
    other["config"]["model"] = str(tmp_path / "elsewhere")
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(CtxirError, match=r"evaluated the model .*elsewhere.*, not --model-dir"):
        stage(
            adapted,
            REPO_ID,
            staged,
            corpus_license="mit",
            evaluation=str(tmp_path / "other.json"),
            base_model_id=BASE_ID,
        )


def test_an_adapted_model_without_its_corpus_terms_or_unfinished_is_refused(adapted, tmp_path, capsys):
    push = [
        "push",
        "--model-dir",
        str(adapted),
        "--repo-id",
        REPO_ID,
        "--staging-dir",
        str(tmp_path / "s"),
        "--dry-run",
        "true",
    ]
    assert hub_main(push) == 2
    err = capsys.readouterr().err
    assert "whose terms only you know" in err and "pass --corpus-license" in err
    with pytest.raises(CtxirError, match=r"--corpus-license 'ours, all rights' is not a license ctxir knows"):
        stage(adapted, REPO_ID, tmp_path / "s", corpus_license="ours, all rights")
    # the flags belong to an adapt folder only: a plain model folder is a training output with its own metrics.json
    with pytest.raises(CtxirError, match=r"--corpus-license 'mit' is for a folder `ctxir adapt` wrote"):
        stage(
            json.loads((adapted / RECORD_FILE).read_text())["base_model"],
            REPO_ID,
            tmp_path / "s",
            corpus_license="mit",
        )
    # a folder `ctxir adapt` is still writing
    (adapted / ADAPT_INCOMPLETE).write_text("")
    try:
        with pytest.raises(CtxirError, match="is unfinished: `ctxir adapt` was writing it"):
            stage(adapted, REPO_ID, tmp_path / "s", corpus_license="mit")
    finally:
        (adapted / ADAPT_INCOMPLETE).unlink()
    assert not (tmp_path / "s").exists()


def test_the_card_says_what_supervised_an_adapter_without_a_cross_encoder(
    models,  # noqa: F811 -- models: test_adapt's fixture
    tmp_path,
    monkeypatch,
):
    base, _ = models
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path / "cache"))
    corpus = _write_corpus(tmp_path / "data", _corpus_rows())
    settings = dict(
        max_steps=1, batch_size=8, learning_rate=1e-2, max_seq_length=16, device="cpu", quiet=True
    )
    out = tmp_path / "adapted"
    run(
        AdaptArgs(
            corpus=str(corpus),
            output=str(out),
            model=str(base),
            teacher="complement",
            max_minutes=0.0,
            **settings,
        )
    )
    card = (
        stage(out, REPO_ID, tmp_path / "staged", corpus_license="cc-by-4.0", base_model_id=BASE_ID).folder
        / "README.md"
    ).read_text()
    assert "the base model's own cosine plus BM25 were the only supervision" in " ".join(card.split()), card[
        :1500
    ]
    assert "cross-encoder teacher" not in card
