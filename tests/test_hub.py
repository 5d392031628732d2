"""Staging, validation and upload of tiny trained models (ctxir.publish: staging, upload, ctxir hub), and the card snippets run against them."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ctxir.files import is_pickle_file
from ctxir.publish.hub import PublishError, PushArgs, main, push, run_push
from ctxir.publish.staging import stage, validate
from ctxir.types import CtxirError
from tests.conftest import code_blocks

# the Hub id a card names as the tiny runs' base (their base is a local folder, which staging refuses)
TINY_BASE = "hf-internal-testing/tiny-random-bert"
TEXTS = ["the river bank", "money in the bank account", "otters play on the river"]


def write_metrics(folder: Path, metrics: dict) -> Path:
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_bert_dir, metrics_record) -> dict[str, Path]:
    """Three training outputs built from the tiny BERT: bi-encoder, cross-encoder, CLS-LR over that cross-encoder."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from ctxir.rerank import ClsLrRanker

    root = tmp_path_factory.mktemp("runs")
    bi = root / "bi-encoder"
    SentenceTransformer(str(tiny_bert_dir), device="cpu").save_pretrained(str(bi))
    write_metrics(bi, metrics_record("bi-encoder", str(tiny_bert_dir)))
    # What a trainer leaves beside the model: must be left out, not refused.
    (bi / "training_args.bin").write_bytes(b"\x80\x04K\x01.")
    (bi / "checkpoint-3").mkdir()
    (bi / "checkpoint-3" / "optimizer.pt").write_bytes(b"\x80\x04K\x01.")

    ce = root / "cross-encoder"
    CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu").save_pretrained(str(ce))
    write_metrics(ce, metrics_record("cross-encoder", str(tiny_bert_dir)))

    cls = root / "cls-lr"
    rng = np.random.default_rng(0)
    ranker = ClsLrRanker.fit(
        base_model=str(ce),
        features=rng.normal(size=(40, 32)).astype(np.float32),
        labels=[0, 1] * 20,
        device="cpu",
    )
    ranker.save(cls)
    write_metrics(cls, metrics_record("cls-lr", str(ce)))
    (cls / "figures").mkdir()
    (cls / "figures" / "pr_curve.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 16)
    return {"bi-encoder": bi, "cross-encoder": ce, "cls-lr": cls}


@pytest.fixture(scope="module")
def staged(runs, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("staged")
    return {
        kind: stage(folder, f"ctxir/tiny-{kind}", out / kind, base_model_id=TINY_BASE)
        for kind, folder in runs.items()
    }


def exec_block(code: str, replacements: dict[str, str]) -> dict:
    """Run a card snippet with the Hub id swapped for the staged folder (each swap must happen)."""
    for old, new in replacements.items():
        assert old in code, f"snippet no longer contains {old!r}"
        code = code.replace(old, new)
    namespace: dict = {"__name__": "__snippet__"}
    exec(compile(code, "<card snippet>", "exec"), namespace)
    return namespace


# ---------------------------------------------------------------------------------------------- staging


def test_staged_bi_encoder_is_exactly_the_model_and_card(staged, runs):
    report = staged["bi-encoder"]
    assert report.model_type == "bi-encoder" and report.license == "cc-by-nc-2.0"
    assert set(report.files) == {
        "README.md",
        "checksums.json",
        "metrics.json",
        "modules.json",
        "config.json",
        "model.safetensors",
        "config_sentence_transformers.json",
        "sentence_bert_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "1_Pooling/config.json",
    }
    # training artifacts were left out, not refused, and nothing else was dropped silently
    assert {"training_args.bin", "checkpoint-3/optimizer.pt"} <= set(report.skipped)
    staged_metrics = json.loads((report.folder / "metrics.json").read_text())
    assert staged_metrics == {
        **json.loads((runs["bi-encoder"] / "metrics.json").read_text()),
        "model_name": "tiny-bi-encoder",
    }
    from huggingface_hub import metadata_load

    meta = metadata_load(report.folder / "README.md")
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert meta["base_model"] == TINY_BASE  # the Hub id passed, never the local folder metrics.json names


def test_staged_models_load_back_with_the_standard_libraries(staged, runs):
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from ctxir import BiEncoder, ClsLrRanker, CrossEncoderReranker
    from ctxir.encoders.models import resolve_model

    bi_src = SentenceTransformer(str(runs["bi-encoder"]), device="cpu").encode(TEXTS)
    bi_out = SentenceTransformer(str(staged["bi-encoder"].folder), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(bi_out, bi_src, atol=1e-6)
    # ctxir takes the folder `hf download` writes, with no code change
    resolve_model.cache_clear()
    vectors = BiEncoder(str(staged["bi-encoder"].folder), device="cpu", cache=None).encode(TEXTS)
    assert vectors.shape == (3, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)

    pairs = [("the river bank", t) for t in TEXTS]
    ce_src = CrossEncoder(str(runs["cross-encoder"]), device="cpu").predict(pairs)
    ce_out = CrossEncoder(str(staged["cross-encoder"].folder), device="cpu").predict(pairs)
    np.testing.assert_allclose(ce_out, ce_src, atol=1e-6)
    ctxir_scores = CrossEncoderReranker(str(staged["cross-encoder"].folder), device="cpu").score_pairs(
        "the river bank", TEXTS
    )
    np.testing.assert_allclose(ctxir_scores, ce_src, atol=1e-6)

    # the CLS-LR repo carries its encoder: same scores as the ranker reading the original cross-encoder
    src = ClsLrRanker.load(runs["cls-lr"], device="cpu").score_pairs("the river bank", TEXTS)
    out = ClsLrRanker.load(staged["cls-lr"].folder, device="cpu").score_pairs("the river bank", TEXTS)
    np.testing.assert_allclose(out, src, atol=1e-5)
    config = json.loads((staged["cls-lr"].folder / "cls_lr_config.json").read_text())
    assert config["base_model"] == "." and config["base_model_source"] == "cross-encoder"
    assert {"config.json", "model.safetensors", "cls_lr.safetensors", "figures/pr_curve.png"} <= set(
        staged["cls-lr"].files
    )
    assert "modules.json" not in staged["cls-lr"].files  # the ranker repo does not pose as a CrossEncoder


def test_staged_folder_is_what_upload_folder_sends(staged):
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    for report in staged.values():
        on_disk = sorted(
            p.relative_to(report.folder).as_posix() for p in report.folder.rglob("*") if p.is_file()
        )
        sent = list(filter_repo_objects(on_disk, ignore_patterns=DEFAULT_IGNORE_PATTERNS))
        assert sent == report.files
        # only the staging marker stays behind, where `hf download --local-dir` keeps its own bookkeeping
        assert set(on_disk) - set(sent) == {".cache/huggingface/ctxir-staging.json"}


def test_hub_id_resolves_through_the_hf_cache_like_hf_download(staged, tmp_path, monkeypatch):
    """A repo in the local HF cache (what `hf download` leaves) loads by its Hub id through ctxir."""
    from huggingface_hub import constants

    from ctxir.encoders.models import load_bi_encoder, resolve_model

    cache = tmp_path / "hub"
    repo = cache / "models--ctxir--tiny-bi-encoder"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(staged["bi-encoder"].folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    resolve_model.cache_clear()
    load_bi_encoder.cache_clear()
    try:
        assert Path(resolve_model("ctxir/tiny-bi-encoder")) == (repo / "snapshots" / commit).resolve()
        model = load_bi_encoder("ctxir/tiny-bi-encoder", "cpu")
        assert model.encode(TEXTS).shape == (3, 32)
    finally:
        resolve_model.cache_clear()
        load_bi_encoder.cache_clear()


# ---------------------------------------------------------------------------------------------- card snippets run


def test_bi_encoder_card_snippets_run_and_agree(staged):
    folder = str(staged["bi-encoder"].folder)
    card = (staged["bi-encoder"].folder / "README.md").read_text()
    st_code, hf_code, ctxir_code = code_blocks(card)
    st = exec_block(st_code, {'"ctxir/tiny-bi-encoder"': repr(folder)})
    assert tuple(st["scores"].shape) == (1, 2)
    hf = exec_block(hf_code, {'"ctxir/tiny-bi-encoder"': repr(folder)})
    # transformers-only vectors are the sentence-transformers vectors
    expected = st["model"].similarity(st["model"].encode(hf["texts"]), st["model"].encode(hf["texts"]))
    np.testing.assert_allclose(hf["similarity"].numpy(), expected.numpy(), atol=1e-5)
    ours = exec_block(ctxir_code, {'"ctxir/tiny-bi-encoder"': repr(folder)})
    assert ours["vectors"].shape == (1, 32)


def test_cross_encoder_card_snippets_run_and_agree(staged):
    folder = str(staged["cross-encoder"].folder)
    card = (staged["cross-encoder"].folder / "README.md").read_text()
    st_code, hf_code = code_blocks(card)  # no block needs ctxir
    st = exec_block(st_code, {'"ctxir/tiny-cross-encoder"': repr(folder)})
    assert st["scores"].shape == (2,) and len(st["ranking"]) == 2
    hf = exec_block(hf_code, {'"ctxir/tiny-cross-encoder"': repr(folder)})
    np.testing.assert_allclose(hf["scores"].numpy(), st["scores"], atol=1e-5)


def test_cls_lr_card_snippets_run_and_agree(staged):
    folder = str(staged["cls-lr"].folder)
    card = (staged["cls-lr"].folder / "README.md").read_text()
    (numpy_code,) = code_blocks(card)  # no block needs ctxir
    assert "import ctxir" not in numpy_code and "from ctxir" not in numpy_code
    swap = {'snapshot_download("ctxir/tiny-cls-lr")': repr(folder)}
    plain = exec_block(numpy_code, swap)
    from ctxir.rerank import ClsLrRanker

    ours = ClsLrRanker.load(folder, device="cpu")
    query, documents = plain["query"], plain["documents"]
    np.testing.assert_allclose(plain["scores"], ours.score_pairs(query, documents), atol=1e-5)
    np.testing.assert_allclose(plain["probabilities"], ours.predict_proba(query, documents), atol=1e-6)
    assert "![figures/pr_curve.png](figures/pr_curve.png)" in card


# ---------------------------------------------------------------------------------------------- refusals


def copy_run(runs, kind: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs[kind], tmp_path / kind))


def test_refuses_a_pickle_in_the_model_folder(runs, tmp_path):
    src = copy_run(runs, "bi-encoder", tmp_path)
    (src / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(CtxirError, match=r"holds pickle file\(s\) 'pytorch_model\.bin'.*safetensors"):
        stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    assert not (tmp_path / "out").exists()  # refused before anything was written
    (src / "pytorch_model.bin").unlink()
    (src / "1_Pooling" / "extra.pkl").write_bytes(b"\x80\x05N.")
    with pytest.raises(CtxirError, match=r"1_Pooling/extra\.pkl"):
        stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)


def test_validate_refuses_a_pickle_added_after_staging(staged, tmp_path):
    folder = Path(shutil.copytree(staged["cross-encoder"].folder, tmp_path / "staged"))
    disguised = folder / "weights.dat"  # a pickle by content, whatever its name
    disguised.write_bytes(b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01.")
    assert is_pickle_file(disguised)
    with pytest.raises(CtxirError, match=r"holds pickle file\(s\) 'weights\.dat'"):
        validate(folder)


def test_refuses_a_card_whose_metrics_disagree(staged, tmp_path):
    folder = Path(shutil.copytree(staged["bi-encoder"].folder, tmp_path / "staged"))
    readme = folder / "README.md"
    readme.write_text(readme.read_text().replace("value: 0.6837159", "value: 0.7837159"))
    with pytest.raises(CtxirError, match=r"nDCG@10.*0\.7837159.*metrics\.json says 0\.6837159"):
        validate(folder)
    # and the other way round: metrics.json changed after the card was rendered
    folder2 = Path(shutil.copytree(staged["bi-encoder"].folder, tmp_path / "staged2"))
    metrics = json.loads((folder2 / "metrics.json").read_text())
    metrics["evaluations"][1]["after"] = 0.99
    (folder2 / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(CtxirError, match=r"nDCG@10 \(rerank BM25 top-100\).*0\.6912.*0\.99"):
        validate(folder2)


def test_refuses_a_missing_or_unknown_license(runs, tmp_path):
    src = copy_run(runs, "cross-encoder", tmp_path)
    metrics = json.loads((src / "metrics.json").read_text())
    del metrics["datasets"][0]["license"]
    write_metrics(src, metrics)
    with pytest.raises(CtxirError, match=r"training dataset 'scifact' .* has no license.*CC BY-NC 2\.0"):
        stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    metrics["datasets"][0]["license"] = "ask the authors"
    write_metrics(src, metrics)
    with pytest.raises(CtxirError, match=r"'ask the authors', which is not known"):
        stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    assert not (tmp_path / "out").exists()


def test_validate_refuses_a_card_without_license(staged, tmp_path):
    folder = Path(shutil.copytree(staged["cls-lr"].folder, tmp_path / "staged"))
    readme = folder / "README.md"
    # the top-level license lines only (data_licenses lists each source's own, indented)
    readme.write_text(re.sub(r"^license(_name|_link)?: .*\n", "", readme.read_text(), flags=re.M))
    with pytest.raises(CtxirError, match=r"no license \(expected 'cc-by-nc-2\.0'"):
        validate(folder)


def test_refuses_wrong_model_type_bad_repo_id_and_foreign_staging_dir(runs, tmp_path):
    src = copy_run(runs, "bi-encoder", tmp_path)
    metrics = json.loads((src / "metrics.json").read_text())
    write_metrics(src, {**metrics, "model_type": "cross-encoder"})
    with pytest.raises(CtxirError, match=r"says model_type 'cross-encoder' but .* holds a bi-encoder"):
        stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    write_metrics(src, metrics)
    with pytest.raises(CtxirError, match=r"--repo-id 'just-a-name' must be 'owner/name'"):
        stage(src, "just-a-name", tmp_path / "out")
    foreign = tmp_path / "foreign"
    shutil.copytree(
        runs["cross-encoder"], foreign
    )  # another training output: README.md, metrics.json, weights
    with pytest.raises(CtxirError, match=r"exists and is not a previous staging"):
        stage(src, "ctxir/x", foreign, base_model_id=TINY_BASE)
    assert (foreign / "model.safetensors").is_file() and (foreign / "metrics.json").is_file()
    with pytest.raises(CtxirError, match=r"--figures '.*missing\.png' is not a"):
        stage(
            src, "ctxir/x", tmp_path / "out", figures=[str(tmp_path / "missing.png")], base_model_id=TINY_BASE
        )
    assert not (tmp_path / "out").exists()
    with pytest.raises(CtxirError, match="overlaps the model folder"):
        stage(src, "ctxir/x", src / "hub", base_model_id=TINY_BASE)


def test_restaging_replaces_a_previous_staging_even_a_failed_one(runs, tmp_path):
    src = copy_run(runs, "bi-encoder", tmp_path)
    first = stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    (first.folder / "stale.json").write_text("{}")
    second = stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    assert "stale.json" not in second.files and (second.folder / "README.md").is_file()
    card = (second.folder / "README.md").read_bytes()
    # a staging that failed half-way (the model does not load) can be redone once the source is fixed
    (src / "1_Pooling" / "config.json").write_text(
        '{"embedding_dimension": 32, "pooling_mode": "no-such-mode"}'
    )
    with pytest.raises(CtxirError, match=r"does not load \(ValueError: Invalid pooling mode: 'no-such-mode'"):
        stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE)
    # no card for a model that does not load: the previous staging stays as it was, nothing half-made beside it
    assert (tmp_path / "out" / "README.md").read_bytes() == card
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    shutil.copy2(runs["bi-encoder"] / "1_Pooling" / "config.json", src / "1_Pooling" / "config.json")
    assert stage(src, "ctxir/x", tmp_path / "out", base_model_id=TINY_BASE).model_type == "bi-encoder"


# ---------------------------------------------------------------------------------------------- CLI and upload


def test_dry_run_cli_stages_validates_and_prints_the_upload_command(runs, tmp_path, capsys):
    code = main(
        [
            "push",
            "--model-dir",
            str(runs["cross-encoder"]),
            "--repo-id",
            "ctxir/tiny-ce",
            "--staging-dir",
            str(tmp_path / "out"),
            "--private",
            "--revision",
            "v1",
            "--base-model-id",
            TINY_BASE,
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "dry run: nothing uploaded" in out
    assert f"hf upload ctxir/tiny-ce {tmp_path / 'out'} . --repo-type model --private --revision v1" in out
    assert (tmp_path / "out" / "README.md").is_file()


def test_a_base_that_is_a_folder_here_is_refused_naming_base_model_id(runs, tmp_path, capsys):
    """A Hub reader cannot follow a local path: staging asks for the Hub id the model was trained from."""
    code = main(["push", "--model-dir", str(runs["cross-encoder"]), "--repo-id", "ctxir/x", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "is a local folder, which a Hub reader cannot follow: pass --base-model-id" in err
    assert not (runs["cross-encoder"].parent / "hub").exists()  # refused before anything was staged


def test_cli_refusal_is_a_message_and_exit_code_2(runs, tmp_path, capsys):
    code = main(["push", "--model-dir", str(tmp_path / "nope"), "--repo-id", "ctxir/x", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --model-dir") and "Traceback" not in err


def test_offline_push_keeps_the_staged_folder_and_names_the_command(runs, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    args = PushArgs(
        model_dir=str(runs["bi-encoder"]),
        repo_id="ctxir/tiny-bi",
        staging_dir=str(tmp_path / "out"),
        base_model_id=TINY_BASE,
    )
    assert run_push(args) == 3
    err = capsys.readouterr().err
    assert "HF_HUB_OFFLINE is set, so nothing was uploaded" in err
    assert f"hf upload ctxir/tiny-bi {tmp_path / 'out'} . --repo-type model" in err
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_push_without_a_token_says_how_to_log_in(staged, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(
        PublishError, match=r"(?s)no Hugging Face token: set HF_TOKEN or run `hf auth login`.*hf upload"
    ):
        push(staged["bi-encoder"].folder, "ctxir/tiny-bi")


class RecordingApi:
    """Stands in for HfApi: records the calls push makes (no Hub-compatible server is available here)."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def create_branch(self, repo_id, **kwargs):
        self.calls.append(("create_branch", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs["repo_id"], kwargs))
        from types import SimpleNamespace

        pr = "https://huggingface.co/ctxir/x/discussions/1" if kwargs.get("create_pr") else None
        return SimpleNamespace(commit_url="https://huggingface.co/ctxir/x/commit/abc", pr_url=pr)


def test_push_calls_create_repo_then_upload_folder(staged, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    api = RecordingApi()
    folder = staged["bi-encoder"].folder
    url = push(folder, "ctxir/x", private=True, revision="v1", token="hf_test", api=api)
    assert url == "https://huggingface.co/ctxir/x/commit/abc"
    assert [c[0] for c in api.calls] == ["create_repo", "create_branch", "upload_folder"]
    assert api.calls[0][2] == {"private": True, "exist_ok": True, "repo_type": "model"}
    assert api.calls[1][2]["branch"] == "v1" and api.calls[1][2]["exist_ok"] is True
    upload = api.calls[2][2]
    assert upload["folder_path"] == str(folder) and upload["revision"] == "v1" and not upload["create_pr"]

    api = RecordingApi()
    url = push(folder, "ctxir/x", revision="main", create_pr=True, token="hf_test", api=api)
    assert url.endswith("/discussions/1")
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder"]  # a PR needs no branch


def test_network_failure_never_shows_the_token(staged, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    secret = "hf_SECRETsecretSECRETsecret0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    with pytest.raises(PublishError) as info:
        push(staged["bi-encoder"].folder, "ctxir/x", endpoint="http://127.0.0.1:9")
    message = str(info.value)
    assert "hf upload ctxir/x" in message and str(staged["bi-encoder"].folder) in message
    captured = capsys.readouterr()
    assert secret not in message + captured.out + captured.err


def test_dry_run_push_gives_the_hf_upload_command_with_quoted_paths():
    command = push(
        "/tmp/my models/x", "ctxir/x", create_pr=True, commit_message="first version", dry_run=True
    )
    assert command == (
        "hf upload ctxir/x '/tmp/my models/x' . --repo-type model --create-pr "
        "--commit-message 'first version'"
    )


def test_metrics_fixture_follows_the_contract(metrics_record):
    from ctxir.publish.metrics_file import validate_metrics

    for kind in ("bi-encoder", "cross-encoder", "cls-lr"):
        validate_metrics(copy.deepcopy(metrics_record(kind, "x")))


def test_cls_lr_with_a_relative_or_bundled_base_stages_self_contained(runs, tmp_path):
    from ctxir.rerank import ClsLrRanker

    # what train_cls_lr.py writes by default: base_model relative to the ranker folder
    ce = Path(shutil.copytree(runs["cross-encoder"], tmp_path / "cross-encoder"))
    cls = Path(shutil.copytree(runs["cls-lr"], tmp_path / "cls-lr"))
    config = json.loads((cls / "cls_lr_config.json").read_text())
    (cls / "cls_lr_config.json").write_text(json.dumps({**config, "base_model": "../cross-encoder"}))
    report = stage(cls, "ctxir/rel", tmp_path / "out-rel", base_model_id=TINY_BASE)
    staged_config = json.loads((report.folder / "cls_lr_config.json").read_text())
    assert staged_config["base_model"] == "." and staged_config["base_model_source"] == "cross-encoder"
    assert (
        staged_config["base_model_license"]["license"] == "CC BY-NC 2.0"
    )  # read from the base's metrics.json

    # --bundle-base: the encoder already sits in the ranker folder
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(ce / f, cls / f)
    (cls / "cls_lr_config.json").write_text(json.dumps({**config, "base_model": "."}))
    report = stage(cls, "ctxir/bundled", tmp_path / "out-bundled", base_model_id=TINY_BASE)
    expected = ClsLrRanker.load(runs["cls-lr"], device="cpu").score_pairs("the river bank", TEXTS)
    got = ClsLrRanker.load(report.folder, device="cpu").score_pairs("the river bank", TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_downloaded_folder_validates_but_other_hidden_files_do_not(staged, tmp_path):
    folder = Path(shutil.copytree(staged["bi-encoder"].folder, tmp_path / "downloaded"))
    bookkeeping = folder / ".cache" / "huggingface" / "download" / "model.safetensors.metadata"
    bookkeeping.parent.mkdir(parents=True)
    bookkeeping.write_text("abc\n")  # what `hf download --local-dir` leaves
    assert validate(folder).files == staged["bi-encoder"].files
    (folder / ".env").write_text("HF_TOKEN=hf_x\n")
    with pytest.raises(CtxirError, match=r"hidden files \(\.env\)"):
        validate(folder)


def test_real_minilm_bi_encoder_stages_and_its_transformers_snippet_matches(
    minilm_path, tmp_path, metrics_record
):
    """The packaged all-MiniLM-L6-v2 as a 'trained' bi-encoder: real pooling config, real tokenizer, real card."""
    from huggingface_hub import metadata_load

    src = Path(shutil.copytree(minilm_path, tmp_path / "minilm"))
    write_metrics(src, metrics_record("bi-encoder", "sentence-transformers/all-MiniLM-L6-v2"))
    report = stage(src, "ctxir/minilm-test", tmp_path / "out")
    meta = metadata_load(report.folder / "README.md")
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["license"] == "cc-by-nc-2.0"  # SciFact (NC) over the base model's Apache 2.0
    card = (report.folder / "README.md").read_text()
    assert "| base model sentence-transformers/all-MiniLM-L6-v2 | – | Apache 2.0 |" in card
    st_code, hf_code, _ = code_blocks(card)
    assert (
        "max_length=256" in hf_code and "(tokens * mask).sum(1)" in hf_code
    )  # MiniLM: mean pooling, 256 tokens
    st = exec_block(st_code, {'"ctxir/minilm-test"': repr(str(report.folder))})
    hf = exec_block(hf_code, {'"ctxir/minilm-test"': repr(str(report.folder))})
    expected = st["model"].similarity(st["model"].encode(hf["texts"]), st["model"].encode(hf["texts"]))
    np.testing.assert_allclose(hf["similarity"].numpy(), expected.numpy(), atol=1e-5)
    # the statin abstract is closer to the statin question than the river bank is
    assert float(st["scores"][0, 0]) > float(st["scores"][0, 1])


def test_lora_cross_encoder_stages_merged_as_a_standard_model_and_every_snippet_agrees(
    tiny_bert_dir, tmp_path, metrics_record
):
    """A PEFT adapter + head over a base named by id is staged merged: a standard sequence-classification model that a
    plain ``CrossEncoder(repo_id)`` loads with no peft and no base download (staging ran its card's snippets so,
    offline); ``base_model`` still in the card, and the card's three snippets give the scores ctxir's loader gives
    the training output."""
    import torch
    from peft import LoraConfig
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.models import load_cross_encoder

    run = tmp_path / "ce-lora"
    model = CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu")
    model.add_adapter(
        LoraConfig(
            r=2, lora_alpha=4, target_modules=["query", "value"], modules_to_save=["classifier", "pooler"]
        )
    )
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        # a non-zero adapter and a changed pooler/classifier (as training leaves them), so loading each matters
        if "lora_B" in name or "modules_to_save" in name:
            torch.nn.init.normal_(param, std=0.5)
    model.save_pretrained(str(run))
    write_metrics(run, metrics_record("cross-encoder", str(tiny_bert_dir)))
    report = stage(run, "ctxir/tiny-ce-lora", tmp_path / "staged", base_model_id=TINY_BASE)
    assert "adapter_config.json" not in report.files and "adapter_model.safetensors" not in report.files
    assert {"model.safetensors", "config.json", "tokenizer_config.json"} <= set(report.files)
    assert (
        "ForSequenceClassification"
        in json.loads((report.folder / "config.json").read_text())["architectures"][0]
    )
    card = (report.folder / "README.md").read_text()
    assert f"base_model: {tiny_bert_dir}" in card or str(tiny_bert_dir) in card
    folder = repr(str(report.folder))
    expected = load_cross_encoder(str(run), "cpu").predict(
        [
            (
                "Do statins lower the risk of heart attack?",
                "Statin therapy reduced myocardial infarction in patients with high cholesterol.",
            )
        ]
    )
    st_code, hf_code = code_blocks(card)
    st = exec_block(st_code, {'"ctxir/tiny-ce-lora"': folder})
    np.testing.assert_allclose(st["scores"][0], expected[0], atol=1e-5)
    assert abs(float(st["scores"][0]) - 0.5) > 0.01  # the changed head shows: not a fresh random classifier
    hf = exec_block(hf_code, {'"ctxir/tiny-ce-lora"': folder})
    np.testing.assert_allclose(hf["scores"].numpy(), st["scores"], atol=1e-5)


def test_hub_command_line_names_a_missing_or_unknown_command(capsys):
    assert main([]) == 2
    assert main(["upload"]) == 2
    err = capsys.readouterr().err
    assert "usage: ctxir hub {push,validate}" in err and "got 'upload'" in err


def test_model_folder_json_is_read_one_way(tmp_path):
    from ctxir.files import read_json
    from ctxir.publish.model_folder import detect_model_type

    (tmp_path / "config.json").write_text("{not json")
    assert detect_model_type(tmp_path) is None  # sniffing a folder: a broken file is no evidence
    with pytest.raises(CtxirError, match=r"config\.json' is not valid JSON .*re-save the model folder"):
        read_json(tmp_path / "config.json")
    (tmp_path / "config.json").write_text('"text"')
    with pytest.raises(CtxirError, match="holds str, not a JSON object or list"):
        read_json(tmp_path / "config.json")
    assert read_json(tmp_path / "absent.json") == {}
