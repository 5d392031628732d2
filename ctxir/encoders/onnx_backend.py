"""ONNX Runtime encoding: a SentenceTransformer's transformer exported to ONNX, quantised to int8, run on the CPU.

``BiEncoder(backend="onnx-int8")`` (``ctxir evaluate --backend onnx-int8``, ``python app.py --backend
onnx-int8``) and ``python -m benchmarks.encode`` share this one implementation:

* ``export_onnx``: the transformer body → ``model.onnx`` (``torch.onnx.export``, dynamo; dynamic batch and length).
* ``quantise``: int8 copies (``dynamic``: what the flag runs; ``static``: calibrated, benchmark only).
* ``int8_model``: both steps once per model, into ``<folder>/<weights fingerprint>/``, reused afterwards.
* ``OnnxEncoder``: tokenises with the model's own ``preprocess``, runs ONNX Runtime, pools with
  ``ctxir.encoders.pool`` and L2-normalises, batching texts by length as ``SentenceTransformer.encode`` does.
* ``OnnxCrossEncoder`` / ``open_cross_encoder``: a CrossEncoder's body in float32 ONNX (the same scores within
  float rounding), its scoring modules (e.g. ctxir's segment-cosine head) and activation in torch, batched as
  ``CrossEncoder.predict`` does: ``CrossEncoderReranker(backend="onnx")``, the app's ``--rerank-backend onnx``.

Measured (docs/performance.md, ``python -m benchmarks.encode`` on the whole SciFact corpus, 2 cores): int8 dynamic
encodes 2.24× as many texts per second as plain sentence-transformers at nDCG@10 0.6452 against 0.6451.

sentence-transformers' own ``backend="onnx"`` is not used: it needs optimum-onnx, whose only release (0.1.0)
requires transformers < 4.58 (this project pins 5.23), so the export here is ``torch.onnx.export`` +
onnxruntime's quantisers. Every file is written to a temporary name and renamed when complete, so a run
interrupted mid-export leaves no file that a later run would load; a final file that ONNX Runtime cannot read is
exported again. onnx, onnxscript and onnxruntime are imported only here, and only when used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ctxir.encoders.pooling import pool
from ctxir.files import atomic_path
from ctxir.types import CtxirError

FP32_FILE = "model.onnx"
INT8_FILE = "model-int8-dynamic.onnx"
FROZEN_INT8_FILE = (
    "model-int8-frozen-layers.onnx"  # a cross-encoder's base layers int8, its trained ones float32
)
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# Rows × tokens one ONNX Runtime run may hold (8 texts of 256 tokens). The exported graph materialises every head's
# (tokens × tokens) attention scores in float32, where torch's fused attention does not: 32 texts of 256 tokens
# peak at ~1.1 GB above the loaded model, 8 at ~0.35 GB. Short texts (queries) still run batch_size at a time.
# Measured: scripts/onnx_memory.py, docs/performance.md "Memory of onnx-int8".
TOKENS_PER_RUN = 2048
_EXPORT_LOCK = threading.Lock()  # one export at a time in a process (the app's threads may ask together)
# open sessions kept for reuse, least recently used dropped first: (folder, model, pooling, threads, batch size) →
# (model, OnnxEncoder)
OPEN_SESSIONS = 4
_OPEN: OrderedDict = OrderedDict()
_OPEN_LOCK = threading.Lock()


def require(*modules: str, what: str = "backend 'onnx-int8'") -> None:
    """Raise ``CtxirError`` naming the packages to install when any of ``modules`` cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pins = " ".join(missing)  # each module's PyPI name is its own
        raise CtxirError(
            f"{what} needs {', '.join(missing)}, which is not installed: "
            f"`python -m pip install {pins}` (pinned in requirements.txt), or use backend 'torch'"
        )


def _session(path: Path, threads: int, spin: bool = True):
    """``spin=False``: the intra-op threads sleep when a run ends instead of busy-waiting for the next one, so a
    server's other threads (torch's, Gradio's) get the cores between requests."""
    # lazy: the ONNX stack is needed only for --backend onnx-int8
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(0, int(threads))  # 0 = ONNX Runtime's default (one per core)
    options.inter_op_num_threads = 1
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run_options():
    """Each run gives its activations' memory back when it ends: ONNX Runtime's CPU arena otherwise keeps its
    largest size for the life of the session (the app keeps sessions open: ~1 GB held after one long corpus)."""
    # lazy: the ONNX stack is needed only for --backend onnx-int8
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


class OnnxEncoder:
    """A SentenceTransformer's transformer exported to ONNX and run by ONNX Runtime on the CPU; tokenisation by the
    model's own ``preprocess``, pooling and normalisation in torch (``ctxir.encoders.pool``), exactly as the
    model's own modules do. Texts are sorted by length and batched as ``SentenceTransformer.encode`` does; the rows
    come back in the order of the texts. With dynamic int8 the activations' range is measured per batch, so a text's
    vector moves slightly with the texts batched beside it (cosine > 0.999 on the tests' tiny model).

    ``threads``: ONNX Runtime intra-op threads (0 = its default, one per core).
    """

    def __init__(self, path: str | Path, model, pooling: str, threads: int = 0, batch_size: int = 32):
        require("onnxruntime")
        self.path = Path(path)
        self.session = _session(self.path, threads)
        self.run_options = _run_options()
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.model, self.pooling, self.batch_size = model, pooling, batch_size

    def features(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The model's own tokenisation (max_seq_length, truncation, lower-casing) as int64 arrays for the graph."""
        batch = self.model.preprocess(list(texts))
        return {
            k: np.asarray(v.cpu().numpy() if hasattr(v, "cpu") else v, dtype=np.int64)
            for k, v in batch.items()
            if k in self.inputs
        }

    @staticmethod
    def runs(feats: dict[str, np.ndarray], tokens_per_run: int | None = None) -> list[dict[str, np.ndarray]]:
        """A tokenised batch (each array (rows, tokens)) cut into runs of at most ``tokens_per_run`` rows × tokens
        (at least one row), each trimmed to its own longest text: peak memory follows the run, not the batch.

        >>> feats = {"input_ids": np.ones((5, 4), np.int64), "attention_mask": np.array([[1, 1, 1, 1]] * 2
        ...          + [[1, 1, 0, 0]] * 3)}
        >>> [run["input_ids"].shape for run in OnnxEncoder.runs(feats, tokens_per_run=8)]
        [(2, 4), (2, 2), (1, 2)]
        """
        mask = feats["attention_mask"]
        rows = max(1, (tokens_per_run or TOKENS_PER_RUN) // max(1, mask.shape[1]))
        out = []
        for begin in range(0, len(mask), rows):
            used = np.flatnonzero(mask[begin : begin + rows].any(0))  # columns any text of the run uses
            width = (
                int(used[-1]) + 1 if len(used) else 1
            )  # right padding is cut; left padding keeps every column
            out.append({k: v[begin : begin + rows, :width] for k, v in feats.items()})
        return out

    def encode(self, texts: Sequence[str], show_progress_bar: bool | None = None) -> np.ndarray:
        """(N, D) float32, unit rows, in the order of ``texts``."""
        # lazy: torch takes about a second to import
        import torch

        texts = list(texts)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        parts = []
        starts = range(0, len(texts), self.batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Batches (onnx-int8)")
        for begin in starts:
            feats = self.features([texts[i] for i in order[begin : begin + self.batch_size]])
            for run in self.runs(feats):
                hidden = self.session.run(None, run, self.run_options)[0]  # (rows, tokens, hidden)
                pooled = pool(torch.from_numpy(hidden), torch.from_numpy(run["attention_mask"]), self.pooling)
                parts.append(torch.nn.functional.normalize(pooled.float(), dim=1).numpy())
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        out = np.concatenate(parts)
        result = np.empty_like(out)
        result[order] = out
        return result


def export_onnx(model, folder: str | Path, progress: bool = True, sample: list | None = None) -> Path:
    """The transformer of a SentenceTransformer (or a CrossEncoder: ``sample`` = a few (a, b) pairs) →
    ``folder/model.onnx`` (torch.onnx.export, dynamo; dynamic batch and length), reused when already there. Written
    under a temporary name and renamed when complete."""
    # lazy: torch takes about a second to import
    import torch

    path = Path(folder) / FP32_FILE
    if path.is_file():
        return path
    require("onnx", "onnxscript", what="exporting to ONNX")
    body = model[0].auto_model.eval()
    if (
        body.device.type != "cpu"
    ):  # ONNX Runtime runs it on the CPU: export a CPU copy, leave the model where it is
        import copy

        body = copy.deepcopy(body).to("cpu")
    sample = model.preprocess(sample or ["a short text", "a somewhat longer text to export with"])
    names = [n for n in INPUT_NAMES if n in sample]  # BERT-like: all three; RoBERTa-like: no token_type_ids

    class Body(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    if progress:
        print(f"exporting {body.config.model_type} to {path} …", file=sys.stderr, flush=True)

    with warnings.catch_warnings(), atomic_path(path, suffix=".onnx") as tmp, _quiet():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Body(body),
            tuple(sample[n].cpu() for n in names),
            str(tmp),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamo=True,
            external_data=False,
            verbose=False,
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
        )
    return path


class CalibrationReader:
    """ONNX Runtime's CalibrationDataReader over tokenised batches of calibration passages."""

    def __init__(self, batches: list[dict]):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)

    def rewind(self):  # not needed by MinMax calibration; present for the interface
        pass


def quantise(fp32: str | Path, kind: str, calibration: list[dict] | None = None) -> Path:
    """int8 copies of the exported model (MatMul weights; reused when present), beside it.

    dynamic: weights int8 per channel, activations quantised on the fly per batch (``quantize_dynamic``).
    static: QDQ, weights int8 per channel, activations uint8 with ranges from MinMax calibration on ``calibration``.
    Both use ``reduce_range`` (7-bit weights), which ONNX Runtime advises on AVX2/AVX-512 without VNNI, where u8×s8
    products can saturate. These settings were fixed before any benchmark ran and never tuned on test queries.
    """

    if kind not in ("dynamic", "static"):
        raise CtxirError(f"quantisation {kind!r} is not known: use one of 'dynamic', 'static'")
    fp32 = Path(fp32)
    out = fp32.with_name(f"model-int8-{kind}.onnx")
    if out.is_file():
        return out
    require("onnxruntime", "onnx", what="int8 quantisation")
    # lazy: the ONNX stack is needed only for --backend onnx-int8
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    with atomic_path(out, suffix=".onnx") as tmp, _quiet():
        if kind == "dynamic":
            quantize_dynamic(
                str(fp32),
                str(tmp),
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=True,
                op_types_to_quantize=["MatMul"],
            )
        else:
            quantize_static(
                str(fp32),
                str(tmp),
                CalibrationReader(calibration or []),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=True,
                op_types_to_quantize=["MatMul"],
                calibrate_method=CalibrationMethod.MinMax,
            )
    return out


def int8_model(model, folder: str | Path, progress: bool = True) -> Path:
    """``folder/model-int8-dynamic.onnx`` for this model: exported and quantised the first time (seconds to a
    minute; says so when ``progress``), reused afterwards. ``folder`` should be keyed by the weights (``BiEncoder``
    uses ``<cache root>/onnx/<weights fingerprint>``). The float32 export made on the way is removed; one that was
    already there (``python -m benchmarks.encode --onnx-dir``) is kept."""
    folder = Path(folder)
    out = folder / INT8_FILE
    if out.is_file():
        return out
    with _EXPORT_LOCK:
        if out.is_file():  # another thread finished it while this one waited
            return out
        require("onnxruntime", "onnx", "onnxscript")
        started = time.perf_counter()
        if progress:
            print(
                f"ctxir: first use of backend 'onnx-int8' for this model: exporting it to ONNX and quantising "
                f"to int8 into {folder} (once; reused afterwards) …",
                file=sys.stderr,
                flush=True,
            )
        had_fp32 = (folder / FP32_FILE).is_file()
        fp32 = export_onnx(model, folder, progress=False)
        quantise(fp32, "dynamic")
        if not had_fp32:
            fp32.unlink(missing_ok=True)
        if progress:
            print(
                f"ctxir: {out.name} written in {time.perf_counter() - started:.1f} s "
                f"({out.stat().st_size / 2**20:.1f} MB)",
                file=sys.stderr,
                flush=True,
            )
    return out


def open_int8(
    model, folder: str | Path, pooling: str, threads: int = 0, batch_size: int = 32, progress: bool = True
) -> OnnxEncoder:
    """An ``OnnxEncoder`` over ``int8_model(model, folder)``; a file ONNX Runtime cannot read (damaged after it was
    written) is removed and made again once. Encoders of the same model and settings share one ONNX Runtime session
    (the app makes a ``BiEncoder`` per corpus and upload; a session holds the whole int8 model)."""
    key = (str(Path(folder).resolve()), id(model), pooling, threads, batch_size)
    with _OPEN_LOCK:
        if key in _OPEN:
            _OPEN.move_to_end(key)
            return _OPEN[key][1]
    path = int8_model(model, folder, progress)
    try:
        encoder = OnnxEncoder(path, model, pooling, threads, batch_size)
    except CtxirError:
        raise
    except Exception as err:  # onnxruntime raises its own exception types for an unreadable model
        if progress:
            print(
                f"ctxir: {path} could not be loaded ({type(err).__name__}); exporting again",
                file=sys.stderr,
                flush=True,
            )
        path.unlink(missing_ok=True)
        encoder = OnnxEncoder(int8_model(model, folder, progress), model, pooling, threads, batch_size)
    with _OPEN_LOCK:
        _OPEN[key] = (model, encoder)  # the model is held so that its id is not reused while the key exists
        while len(_OPEN) > OPEN_SESSIONS:
            _OPEN.popitem(last=False)
    return encoder


class OnnxCrossEncoder:
    """A ``CrossEncoder`` whose body (module 0) runs in ONNX Runtime, float32, on the CPU; the modules after it
    (the scoring head) and the activation run in torch on the body's token vectors, so a ctxir head needs no
    export. ``predict`` batches as ``CrossEncoder.predict`` does (longest pairs first, scores back in the input
    order) and gives its scores within float rounding (the exported graph does the same float32 arithmetic).

    ``path`` may also be an int8 file (``open_cross_encoder(int8=True)``). Measured in the app on the 2-core CPU
    (docs/app.md, "Measured"; ``python -m benchmarks.app``): with the shipped re-ranker's base layers in int8, the
    demo search's callback takes 214 ms p50 against 266–274 ms in torch.
    """

    def __init__(self, path: str | Path, model, threads: int = 0):
        require("onnxruntime", what="backend 'onnx' for a cross-encoder")
        self.path = Path(path)
        self.session = _session(self.path, threads, spin=False)
        self.run_options = _run_options()
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.model = model

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """(len(pairs),) float32 for one-score models, (len(pairs), labels) otherwise."""
        # lazy: torch takes about a second to import
        import torch

        pairs = list(pairs)
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        model = self.model
        # CrossEncoder.predict's own length key, so batches (and their padding) are the same as in torch
        length = getattr(model, "_input_length", lambda pair: sum(len(text) for text in pair))
        order = np.argsort([-length(pair) for pair in pairs], kind="stable")
        parts = []
        with torch.inference_mode():
            for begin in range(0, len(pairs), batch_size):
                features = model.preprocess([pairs[i] for i in order[begin : begin + batch_size]])
                feed = {
                    k: np.asarray(v.numpy(), dtype=np.int64) for k, v in features.items() if k in self.inputs
                }
                hidden = self.session.run(None, feed, self.run_options)[0]  # (rows, tokens, hidden)
                features["token_embeddings"] = torch.from_numpy(hidden)
                for module in list(model)[1:]:
                    features = module(features)
                scores = features["scores"].float()
                if model.activation_fn is not None:
                    scores = model.activation_fn(scores)
                if model.num_labels == 1 and scores.ndim > 1:
                    scores = scores.squeeze(-1)
                parts.append(scores.numpy())
        out = np.concatenate(parts)
        result = np.empty_like(out)
        result[order] = out
        return result


def frozen_layers(model) -> range:
    """The encoder layers a cross-encoder shares unchanged with its base: those under a ``TopLayersTransformer``
    body's first trained layer (the shipped re-ranker: 0–3 of MiniLM's 6); none for any other body."""
    return range(int(getattr(model[0], "trained_from", 0) or 0))


def frozen_matmuls(path: str | Path, model) -> list[str]:
    """The MatMul nodes of the exported graph whose weight is a linear layer of ``frozen_layers(model)``, found by
    the weight's values (the exporter's node names say nothing of layers)."""
    # lazy: the ONNX stack is needed only for the onnx backends; torch takes about a second to import
    import onnx
    import torch
    from onnx import numpy_helper

    from ctxir.encoders.heads import layer_of

    frozen = set(frozen_layers(model))
    wanted = set()  # each frozen weight's bytes, as stored (out, in) and transposed (in, out) for a MatMul
    for name, module in model[0].auto_model.named_modules():
        if isinstance(module, torch.nn.Linear) and layer_of(name) in frozen:
            weight = module.weight.detach().to("cpu", torch.float32).numpy()
            wanted |= {weight.tobytes(), np.ascontiguousarray(weight.T).tobytes()}
    graph = onnx.load(str(path)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    return [
        node.name
        for node in graph.node
        if node.op_type == "MatMul"
        and any(
            x in weights and np.ascontiguousarray(weights[x], dtype=np.float32).tobytes() in wanted
            for x in node.input
        )
    ]


def open_cross_encoder(
    model, folder: str | Path, threads: int = 0, progress: bool = True, int8: bool = False
) -> OnnxCrossEncoder:
    """An ``OnnxCrossEncoder`` over ``folder/model.onnx``: the body exported the first time (seconds; says so when
    ``progress``), reused afterwards; a file ONNX Runtime cannot read is made again once. ``folder`` should be
    keyed by the weights (``CrossEncoderReranker`` uses ``<cache root>/onnx/<weights fingerprint>``).

    ``int8``: the MatMuls of ``frozen_layers(model)`` quantised to int8 (dynamic, per channel, as the bi-encoder's
    ``onnx-int8``), the trained layers kept float32 (``FROZEN_INT8_FILE``). Measured on the shipped re-ranker
    (``python scripts/cross_encoder_int8.py``): within the 0.005 nDCG@10 rule on its held-out training claims, where
    int8 on every layer is not."""
    folder = Path(folder)
    int8 = (
        int8 and len(frozen_layers(model)) > 0
    )  # nothing of the base left unchanged: the float32 file itself
    target = folder / (FROZEN_INT8_FILE if int8 else FP32_FILE)
    sample = [
        ("a short query", "a document"),
        ("a somewhat longer query", "a somewhat longer document to export"),
    ]
    for attempt in range(2):
        with _EXPORT_LOCK:
            if not target.is_file():
                require("onnxruntime", "onnx", "onnxscript", what="backend 'onnx' for a cross-encoder")
                started = time.perf_counter()
                if progress:
                    print(
                        f"ctxir: first use of backend {'onnx-int8' if int8 else 'onnx'} for this cross-encoder: "
                        f"exporting it to {folder} (once; reused afterwards) …",
                        file=sys.stderr,
                        flush=True,
                    )
                fp32 = export_onnx(model, folder, progress=False, sample=sample)
                if int8:
                    _quantise_nodes(fp32, target, frozen_matmuls(fp32, model))
                if progress:
                    print(
                        f"ctxir: exported in {time.perf_counter() - started:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        try:
            return OnnxCrossEncoder(target, model, threads)
        except CtxirError:
            raise
        except Exception as err:  # onnxruntime raises its own exception types for an unreadable model
            if attempt:
                raise CtxirError(
                    f"{target} could not be loaded by ONNX Runtime ({type(err).__name__}: "
                    f"{err}): use backend 'torch'"
                ) from err
            if progress:
                print(
                    f"ctxir: {target} could not be loaded ({type(err).__name__}); exporting again",
                    file=sys.stderr,
                    flush=True,
                )
            target.unlink(missing_ok=True)
            if int8:
                (folder / FP32_FILE).unlink(missing_ok=True)
    raise AssertionError("unreachable")


def _quantise_nodes(fp32: Path, out: Path, nodes: list[str]) -> None:
    """``quantise``'s dynamic int8 settings on ``nodes`` only, written atomically."""
    # lazy: the ONNX stack is needed only for the onnx backends
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if not nodes:
        raise CtxirError(
            f"no MatMul of {fp32} has the weights of a layer the model shares with its base: nothing "
            "to quantise (use backend 'onnx')"
        )
    with atomic_path(out, suffix=".onnx") as tmp, _quiet():
        quantize_dynamic(
            str(fp32),
            str(tmp),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=nodes,
        )


class _QuantiserAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep two library messages that need no action out of the output while exporting and quantising: the
    exporter's "torchvision is not installed" warnings and the quantiser's advice (on the root logger) to
    pre-process the model first."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level, advice, root = registration.level, _QuantiserAdvice(), logging.getLogger()
    registration.setLevel(logging.ERROR)
    root.addFilter(advice)
    try:
        yield
    finally:
        registration.setLevel(level)
        root.removeFilter(advice)
