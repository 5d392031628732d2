"""BiEncoder(backend="onnx-int8"): ONNX Runtime int8 vectors against torch's, the exported file's life (made once,
atomically, reused, remade when damaged), the cache key, the refusals, and the evaluate/app flags.

One export of a tiny BERT (~4 s) serves the default run; the packaged MiniLM's export is a slow test."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ctxir.encoders import BiEncoder, onnx_backend, onnx_export, weights_fingerprint
from ctxir.types import CtxirError

pytest.importorskip("onnxruntime")

# different lengths (1 to ~40 word-pieces), so length-sorted batches of 2 reorder them
TEXTS = [
    "the river bank",
    "otters play on the river bank and the cat sat in the sun",
    "a",
    "money deposit at the bank",
    "python is a snake",
    "she sat at the account and her salary is in the bank",
    "tea and coffee and music and a song of the moon and the sun at the river",
    "cat",
]


@pytest.fixture(scope="module")
def spread_bert_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT's tokenizer with weights drawn 10× wider (initializer_range 0.2): its vectors differ from text to
    text (cosine ≤ 0.91 between these texts) and int8 rounding visibly moves them, so the checks below can fail."""
    import torch
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("spread-bert")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_bert_dir / name).is_file():
            shutil.copy(tiny_bert_dir / name, folder / name)
    config = BertConfig.from_pretrained(tiny_bert_dir)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def spread_st(spread_bert_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(spread_bert_dir), device="cpu")


@pytest.fixture(scope="module")
def exported(spread_st, tmp_path_factory) -> tuple[BiEncoder, Path, Path]:
    """(the int8 encoder after its first encode, the cache root whose onnx/ holds the export, the int8 file)."""
    root = tmp_path_factory.mktemp("ctxir-cache")
    encoder = BiEncoder(spread_st, cache=None, backend="onnx-int8", onnx_dir=root / "onnx", batch_size=2)
    encoder.encode(["warm up"])
    return encoder, root, root / "onnx" / weights_fingerprint(spread_st) / onnx_export.INT8_FILE


def test_int8_vectors_are_unit_rows_close_to_torch_in_the_texts_order(exported, spread_st):
    encoder, _, _ = exported
    vectors = encoder.encode(TEXTS)
    reference = BiEncoder(spread_st, cache=None, batch_size=2).encode(TEXTS)
    assert vectors.shape == reference.shape == (len(TEXTS), 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosine = vectors @ reference.T  # (texts, texts)
    assert cosine.diagonal().min() >= 0.99
    # each row is its own text's: closer to it than to any other text's torch vector (≤ 0.91 apart)
    off = np.where(np.eye(len(TEXTS), dtype=bool), -np.inf, cosine)
    assert (cosine.diagonal() > off.max(1)).all()
    assert np.abs(vectors - reference).max() > 1e-4  # int8 really ran: not torch's float vectors
    # order: reversed input (the same length-sorted batches), reversed rows
    np.testing.assert_allclose(encoder.encode(TEXTS[::-1]), vectors[::-1], atol=1e-6)
    # one text alone: its row, up to the activations' int8 range, which is set per batch (dynamic quantisation)
    alone = encoder.encode([TEXTS[1]])[0]
    assert alone @ vectors[1] > 0.999 and alone @ vectors[1] > max(
        alone @ v for v in np.delete(vectors, 1, 0)
    )
    assert encoder.encode([]).shape == (0, 32)


def test_long_batches_run_in_bounded_pieces_that_give_their_memory_back(exported, monkeypatch):
    # issue #21: one run of 32 texts × 256 tokens held every head's attention scores at once (peak 1.8x torch's
    # process); a run now holds at most TOKENS_PER_RUN rows × tokens, and the arena shrinks after each run
    encoder, _, _ = exported
    onnx = encoder._onnx_encoder()
    whole = BiEncoder(
        encoder.model, cache=None, backend="onnx-int8", onnx_dir=onnx.path.parent.parent, batch_size=8
    ).encode(TEXTS)
    shapes = []
    real_run = type(onnx.session).run

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def run(self, names, feeds, options=None):
            shapes.append(feeds["input_ids"].shape)
            assert (
                options is not None
                and options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
            )
            return real_run(self.inner, names, feeds, options)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(onnx_backend, "TOKENS_PER_RUN", 24)
    monkeypatch.setattr(onnx, "session", Recording(onnx.session))
    monkeypatch.setattr(onnx, "batch_size", 8)
    pieces = onnx.encode(TEXTS)
    assert len(shapes) > 1  # one batch of 8 texts, cut into several runs
    assert all(rows * tokens <= 24 or rows == 1 for rows, tokens in shapes)
    assert max(tokens for _, tokens in shapes) > min(
        tokens for _, tokens in shapes
    )  # each trimmed to its texts
    # the same vectors, up to the activations' int8 range that dynamic quantisation sets per run
    assert (np.sum(pieces * whole, axis=1) > 0.99).all()


def test_the_export_lands_in_the_cache_root_once_and_is_reused(exported, spread_st, monkeypatch, capsys):
    encoder, root, path = exported
    assert (
        path.is_file() and not (path.parent / onnx_export.FP32_FILE).exists()
    )  # the float32 step is removed
    # no temporary file left behind; the file's sha256 beside it
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, onnx_export.checksum_path(path).name]
    stamp = path.stat().st_mtime_ns

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_backend, "export_onnx", no_export)
    monkeypatch.setattr(onnx_backend, "quantise", no_export)
    again = BiEncoder(spread_st, cache=None, backend="onnx-int8", onnx_dir=root / "onnx", batch_size=2)
    np.testing.assert_allclose(again.encode(TEXTS[:3]), encoder.encode(TEXTS[:3]), atol=1e-6)
    assert path.stat().st_mtime_ns == stamp
    assert (
        again._onnx_encoder() is encoder._onnx_encoder()
    )  # one ONNX Runtime session for both (one per upload)
    assert "exporting" not in capsys.readouterr().err


def test_the_default_onnx_folder_is_under_the_ctxir_cache_root(spread_st, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path))
    assert BiEncoder(spread_st, cache=None, backend="onnx-int8").onnx_dir == tmp_path / "onnx"


def test_an_interrupted_export_leaves_no_file_that_a_later_run_would_load(spread_st, tmp_path, monkeypatch):
    import torch

    def torn(model, args, path, **kwargs):
        Path(path).write_bytes(b"\x08\x07half a model")
        raise KeyboardInterrupt  # Ctrl-C half-way

    monkeypatch.setattr(torch.onnx, "export", torn)
    encoder = BiEncoder(spread_st, cache=None, backend="onnx-int8", onnx_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode(["a"])
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_damaged_int8_file_is_made_again(exported, spread_st, tmp_path, monkeypatch, caplog):
    _, _, good = exported
    folder = tmp_path / weights_fingerprint(spread_st)
    folder.mkdir()
    (folder / onnx_export.INT8_FILE).write_bytes(b"not an onnx model")  # e.g. a disk error after the rename
    shutil.copy(onnx_export.checksum_path(good), onnx_export.checksum_path(folder / onnx_export.INT8_FILE))
    (folder / onnx_export.FP32_FILE).write_bytes(b"")  # present and whole: only the quantisation is redone
    onnx_export.checksum_path(folder / onnx_export.FP32_FILE).write_text(hashlib.sha256(b"").hexdigest())
    remade = []

    def requantise(fp32, kind, calibration=None):
        remade.append(kind)
        return Path(shutil.copy(good, Path(fp32).with_name(onnx_export.INT8_FILE)))

    monkeypatch.setattr(onnx_backend, "quantise", requantise)
    encoder = BiEncoder(spread_st, cache=None, backend="onnx-int8", onnx_dir=tmp_path)
    with caplog.at_level("WARNING", logger="ctxir"):
        assert encoder.encode(TEXTS).shape == (len(TEXTS), 32) and remade == ["dynamic"]
    # caught by its checksum before ONNX Runtime reads it
    assert "model-int8-dynamic.onnx does not match its checksum" in caplog.text


def test_the_cache_key_tells_int8_from_float_vectors(spread_st, tmp_path):
    torch_encoder = BiEncoder(spread_st, cache=None)
    int8 = BiEncoder(spread_st, cache=None, backend="onnx-int8", onnx_dir=tmp_path)
    assert int8.config == {**torch_encoder.config, "backend": "onnx-int8"}
    assert "backend" not in torch_encoder.config  # torch's key is unchanged: caches written before stay valid
    assert int8.cache_key(TEXTS) != torch_encoder.cache_key(TEXTS)
    assert BiEncoder(spread_st, cache=None, backend="torch").cache_key(TEXTS) == torch_encoder.cache_key(
        TEXTS
    )


def test_other_poolings_layers_and_backends_are_refused_with_what_to_do(spread_st):
    with pytest.raises(
        CtxirError,
        match=r"^pooling 'cls' cannot be used with backend 'onnx-int8': it runs the "
        r"model's own pooling \('mean'\) at the last layer only; leave pooling "
        r"unset .* or use backend 'torch'$",
    ):
        BiEncoder(spread_st, cache=None, pooling="cls", backend="onnx-int8")
    with pytest.raises(
        CtxirError, match=r"^layer 1 cannot be used with backend 'onnx-int8': .*leave layer unset"
    ):
        BiEncoder(spread_st, cache=None, layer=1, backend="onnx-int8")
    with pytest.raises(
        CtxirError, match=r"^backend 'tensorrt' is not known: use one of 'torch', 'onnx-int8'$"
    ):
        BiEncoder(spread_st, cache=None, backend="tensorrt")
    # the model's own pooling named, and the last layer named by number, are the default path: accepted
    BiEncoder(spread_st, cache=None, pooling="mean", layer=2, backend="onnx-int8")


def test_a_missing_onnxruntime_says_which_package_to_install(spread_st, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a)
    )
    with pytest.raises(
        CtxirError,
        match=r"needs onnxruntime, which is not installed: `python -m pip install "
        r"onnxruntime` \(pinned in requirements.txt\)",
    ):
        BiEncoder(spread_st, cache=None, backend="onnx-int8")


def test_evaluate_backend_flag_reaches_the_encoder_and_its_cache(
    exported, spread_bert_dir, write_beir, tmp_path, capsys
):
    from ctxir.evaluation.evaluate import main

    _, root, path = exported
    data = write_beir(
        tmp_path / "toy",
        {"q1": "river otters", "q2": "snake"},
        {"test": {"q1": {"d1": 1}, "q2": {"d2": 1}}},
        {"d1": "otters play on the river bank", "d2": "python is a snake", "d3": "tea and coffee"},
    )
    out = tmp_path / "r.json"
    stamp = path.stat().st_mtime_ns
    args = [
        "--data",
        str(data),
        "--retriever",
        "dense",
        "--model",
        str(spread_bert_dir),
        "--backend",
        "onnx-int8",
        "--cache-dir",
        str(root),
    ]
    assert main([*args, "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (
        result["config"]["backend"] == "onnx-int8" and result["first_stage_config"]["backend"] == "onnx-int8"
    )
    assert path.stat().st_mtime_ns == stamp  # --cache-dir's onnx/ holds the export made above: reused
    assert main([*args, "--pooling", "cls"]) == 2
    assert "error: pooling 'cls' cannot be used with backend 'onnx-int8'" in capsys.readouterr().err


def test_the_apps_backend_reaches_its_search_encoder_only(exported, spread_st, monkeypatch):
    """``CorpusIndex(backend=...)`` (app.py's --backend) encodes search with it, compare pooling with torch; the
    environment's CTXIR_BACKEND is read by app.py's flags only."""
    from ctxir.app.corpus_index import CorpusIndex

    _, root, _ = exported
    monkeypatch.setenv("CTXIR_CACHE", str(root))
    monkeypatch.setenv("CTXIR_BACKEND", "onnx-int8")
    corpus = {f"d{i}": {"title": "", "text": t} for i, t in enumerate(TEXTS)}
    assert CorpusIndex("toy", corpus, spread_st, cache=None).dense.encoder.backend == "torch"
    index = CorpusIndex("toy", corpus, spread_st, cache=None, backend="onnx-int8")
    assert index.dense.encoder.backend == "onnx-int8" and index.dense.config["backend"] == "onnx-int8"
    assert (
        index.pooled("cls", 1).encoder.backend == "torch"
    )  # compare pooling: torch, which alone supports it


def test_app_backend_flag_defaults_to_ctxir_backend_and_refuses_an_unknown_one(monkeypatch, capsys):
    import app

    monkeypatch.delenv("CTXIR_BACKEND", raising=False)
    assert app.AppArgs().backend == "torch"
    monkeypatch.setenv("CTXIR_BACKEND", "onnx-int8")
    assert app.AppArgs().backend == "onnx-int8"
    assert app.config_from_args(app.AppArgs()).backend == "onnx-int8"  # the config the app loads with
    # refused before any model is loaded, as --index is
    assert app.main(["--backend", "tensorrt", "--malloc-arenas", "0"]) == 2
    assert (
        "error: --backend 'tensorrt' is not known: use one of 'torch', 'onnx-int8'" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_minilm_int8_vectors_agree_with_torch_on_real_passages(minilm, tmp_path, capsys):
    """The packaged all-MiniLM-L6-v2 exported for real (~1 min): every int8 vector of 24 demo passages within
    cosine 0.98 of torch's (measured: min 0.990, mean 0.993), and each passage's nearest torch vector is its own."""
    from ctxir.data.demo import demo_corpus
    from ctxir.types import doc_text

    texts = [doc_text(d) for d in list(demo_corpus().values())[:24]]
    int8 = BiEncoder(minilm, cache=None, backend="onnx-int8", onnx_dir=tmp_path).encode(texts)
    reference = BiEncoder(minilm, cache=None).encode(texts)
    cosine = int8 @ reference.T
    assert cosine.diagonal().min() >= 0.98
    assert (cosine.argmax(1) == np.arange(len(texts))).all()
    assert "exporting it to ONNX and quantising to int8" in capsys.readouterr().err


def test_the_bench_report_names_the_flag_that_exists():
    from typing import get_args, get_type_hints

    from benchmarks import encode
    from ctxir.encoders import BACKENDS
    from ctxir.evaluation.evaluate import EvaluateArgs

    flag, where = encode.SHIPPED_AS["onnx-int8-dynamic"]
    assert flag == "--backend onnx-int8" and "onnx-int8" in BACKENDS and "CTXIR_BACKEND" in where
    assert set(get_args(get_type_hints(EvaluateArgs)["backend"])) == set(BACKENDS)
    assert (
        encode.shown_decision("onnx-int8-dynamic", {"ships": False, "decision": "does not ship: x"})
        == "does not ship: x"
    )  # a measurement that misses the rule still says so


# ---------------------------------------------------------------- cross-encoders: backend "onnx" (float32)

PAIRS_QUERY = "otters on the river bank"


@pytest.fixture(scope="module")
def spread_cross_encoder(spread_bert_dir):
    """The wide tiny BERT as a cross-encoder with ctxir's segment-cosine head, its linear and term-match parts
    non-zero (so a score depends on the token vectors, the segments and the input ids the head reads)."""
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer

    from ctxir.encoders.heads import SegmentCosineHead

    body = Transformer(str(spread_bert_dir), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    head = SegmentCosineHead(32, init_scale=5.0, term_match=True)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return CrossEncoder(modules=[body, head], device="cpu", activation_fn=torch.nn.Identity()).eval()


@pytest.fixture(scope="module")
def onnx_reranker(spread_cross_encoder, tmp_path_factory):
    from ctxir.rerank import CrossEncoderReranker

    root = tmp_path_factory.mktemp("ctxir-ce-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CTXIR_CACHE", str(root))
        reranker = CrossEncoderReranker(spread_cross_encoder, batch_size=2, backend="onnx")
        assert reranker.onnx_scorer() is not None  # exported into the cache root, opened
    return reranker, root


def test_onnx_cross_encoder_gives_torchs_scores_in_the_pairs_order(onnx_reranker, spread_cross_encoder):
    from ctxir.rerank import CrossEncoderReranker

    reranker, root = onnx_reranker
    path = root / "onnx" / weights_fingerprint(spread_cross_encoder) / onnx_export.FP32_FILE
    # no temporary file left; the file's sha256 beside it
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, onnx_export.checksum_path(path).name]
    onnx_scores = reranker.score_pairs(PAIRS_QUERY, TEXTS)
    torch_scores = CrossEncoderReranker(spread_cross_encoder, batch_size=2, backend="torch").score_pairs(
        PAIRS_QUERY, TEXTS
    )
    assert onnx_scores.shape == (len(TEXTS),) and onnx_scores.dtype == np.float32
    assert np.ptp(torch_scores) > 0.5  # the scores differ from text to text: a mix-up would show
    np.testing.assert_allclose(onnx_scores, torch_scores, atol=1e-4)
    # length-sorted batches of 2, scores back in the input order whatever the order given
    np.testing.assert_allclose(reranker.score_pairs(PAIRS_QUERY, TEXTS[::-1]), onnx_scores[::-1], atol=1e-5)
    assert reranker.score_pairs(PAIRS_QUERY, []).shape == (0,)


def test_callers_at_once_share_one_export_and_one_session(spread_cross_encoder, tmp_path, monkeypatch):
    """The first score exports; callers that come meanwhile (the app's worker threads) wait for that export
    instead of starting their own, and all get the same session."""
    import threading

    from ctxir.rerank import CrossEncoderReranker

    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path))
    calls = []
    real_open = onnx_backend.open_cross_encoder

    def counted_open(*args, **kwargs):
        calls.append(1)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(onnx_backend, "open_cross_encoder", counted_open)
    reranker = CrossEncoderReranker(spread_cross_encoder, batch_size=2, backend="onnx")
    scorers = []
    threads = [threading.Thread(target=lambda: scorers.append(reranker.onnx_scorer())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(calls) == 1 and len(scorers) == 3 and scorers[0] is not None
    assert all(scorer is scorers[0] for scorer in scorers)


def test_a_cross_encoder_that_cannot_be_exported_scores_in_torch_with_a_warning(
    spread_cross_encoder, tmp_path, monkeypatch, caplog
):
    from ctxir.rerank import CrossEncoderReranker

    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(onnx_backend, "open_cross_encoder", broken)
    reranker = CrossEncoderReranker(spread_cross_encoder, batch_size=2, backend="onnx")
    with caplog.at_level("WARNING"):
        assert reranker.onnx_scorer() is None
    assert "backend 'onnx' unavailable, scoring in torch: RuntimeError: unsupported operator" in caplog.text
    expected = CrossEncoderReranker(spread_cross_encoder, batch_size=2, backend="torch").score_pairs(
        PAIRS_QUERY, TEXTS
    )
    np.testing.assert_allclose(reranker.score_pairs(PAIRS_QUERY, TEXTS), expected, atol=1e-6)


def test_the_rerank_backend_is_a_parameter_and_a_flag(spread_cross_encoder, capsys):
    import app
    from ctxir.evaluation.evaluate import main
    from ctxir.rerank import CrossEncoderReranker

    assert CrossEncoderReranker(spread_cross_encoder).backend == "torch"
    assert CrossEncoderReranker(spread_cross_encoder, backend="onnx").backend == "onnx"
    with pytest.raises(
        CtxirError, match=r"backend 'tensorrt' is not known: use one of 'torch', 'onnx', 'onnx-int8'"
    ):
        CrossEncoderReranker(spread_cross_encoder, backend="tensorrt")
    # the app's default: torch, since int8 misses the 0.005 rule on a collection of the suite
    assert app.AppArgs().rerank_backend == "torch"
    assert app.config_from_args(app.AppArgs()).rerank_backend == "torch"
    assert app.main(["--rerank-backend", "tensorrt", "--malloc-arenas", "0"]) == 2
    assert (
        "error: --rerank-backend 'tensorrt' is not known: use one of 'torch', 'onnx', 'onnx-int8'"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal of a choice it does not offer
        main(["--data", ".", "--rerank-backend", "tensorrt"])
    assert (
        exited.value.code == 2
        and "invalid choice: 'tensorrt' (choose from 'torch', 'onnx', 'onnx-int8')" in capsys.readouterr().err
    )


def test_evaluate_rerank_backend_onnx_gives_torchs_run_and_exports_under_cache_dir(
    spread_cross_encoder, spread_bert_dir, write_beir, tmp_path
):
    from ctxir.evaluation.evaluate import main

    folder = tmp_path / "ce"
    spread_cross_encoder.save_pretrained(str(folder))
    data = write_beir(
        tmp_path / "toy",
        {"q1": "river otters", "q2": "snake", "q3": "money at the bank"},
        {"test": {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d4": 1}}},
        {f"d{i}": text for i, text in enumerate(TEXTS)},
    )
    runs = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.json"
        assert (
            main(
                [
                    "--data",
                    str(data),
                    "--retriever",
                    "bm25",
                    "--rerank",
                    "cross-encoder",
                    "--reranker-model",
                    str(folder),
                    "--rerank-mode",
                    "alone",
                    "--rerank-backend",
                    backend,
                    "--top-k",
                    "8",
                    "--cache-dir",
                    str(tmp_path / "cache"),
                    "--output",
                    str(out),
                ]
            )
            == 0
        )
        runs[backend] = json.loads(out.read_text())
    assert runs["onnx"]["config"]["rerank_backend"] == "onnx"
    assert runs["onnx"]["metrics"] == runs["torch"]["metrics"]
    assert list((tmp_path / "cache" / "onnx").rglob(onnx_export.FP32_FILE))  # exported under --cache-dir


def test_onnx_int8_quantises_only_the_layers_shared_with_the_base(spread_cross_encoder, tmp_path):
    """backend "onnx-int8": the MatMuls of the layers under the first trained one (found by their weights) become
    int8; the trained layers stay float32. A body that trained every layer gets a float32 file: nothing of it is
    the base's."""
    import copy

    import onnx

    from ctxir.rerank import CrossEncoderReranker

    model = copy.deepcopy(spread_cross_encoder)
    model[0].trained_from = 1  # as a TopLayersTransformer trained from layer 1 says
    assert list(onnx_export.frozen_layers(model)) == [0]
    reranker = CrossEncoderReranker(model, batch_size=2, backend="onnx-int8")
    reranker.onnx_dir = tmp_path / "top"
    scorer = reranker.onnx_scorer()
    assert scorer.path.name == onnx_export.FROZEN_INT8_FILE
    fp32 = scorer.path.with_name(onnx_export.FP32_FILE)
    frozen = onnx_export.frozen_matmuls(fp32, model)
    weighted = [
        n
        for n in onnx.load(str(fp32)).graph.node
        if n.op_type == "MatMul"
        and any(x in {i.name for i in onnx.load(str(fp32)).graph.initializer} for x in n.input)
    ]
    assert len(frozen) == 6 and len(weighted) == 12  # layer 0's q, k, v, output, up, down of the 2 layers' 12
    ops = [n.op_type for n in onnx.load(str(scorer.path)).graph.node]
    assert ops.count("MatMulInteger") == 6 and ops.count("MatMul") >= 6  # the other layer's stay float
    torch_scores = CrossEncoderReranker(model, batch_size=2, backend="torch").score_pairs(PAIRS_QUERY, TEXTS)
    int8_scores = reranker.score_pairs(PAIRS_QUERY, TEXTS)
    assert 1e-4 < np.abs(int8_scores - torch_scores).max() < 0.1 * np.ptp(torch_scores)  # int8 ran, close by
    np.testing.assert_allclose(reranker.score_pairs(PAIRS_QUERY, TEXTS[::-1]), int8_scores[::-1], atol=1e-4)

    plain = copy.deepcopy(spread_cross_encoder)  # trained_from unset: every layer is its own
    whole = CrossEncoderReranker(plain, batch_size=2, backend="onnx-int8")
    whole.onnx_dir = tmp_path / "whole"
    assert whole.onnx_scorer().path.name == onnx_export.FP32_FILE  # no int8 copy made for nothing
    np.testing.assert_allclose(
        whole.score_pairs(PAIRS_QUERY, TEXTS),
        CrossEncoderReranker(plain, batch_size=2, backend="torch").score_pairs(PAIRS_QUERY, TEXTS),
        atol=1e-4,
    )


def test_an_explanation_says_when_the_ranking_scored_with_int8(spread_cross_encoder):
    """Explanations need gradients, so they run in torch float32; with backend onnx-int8 the ranking's score of the
    same pair differs slightly, and the explanation says so."""
    from ctxir.explain.rerankers import explain_cross_encoder
    from ctxir.rerank import CrossEncoderReranker

    for backend, said in (("torch", False), ("onnx-int8", True)):
        out = explain_cross_encoder(
            CrossEncoderReranker(spread_cross_encoder, backend=backend),
            PAIRS_QUERY,
            TEXTS[1],
            n_steps=8,
            attention=False,
        )
        assert ("ranks with backend onnx-int8" in out["score_kind"]) is said
