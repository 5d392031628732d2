"""ONNX Runtime on the CPU: a bi-encoder's body exported to ONNX in int8, a cross-encoder's in float32 (or part int8).

``BiEncoder(backend="onnx-int8")`` (``ctxir evaluate --backend onnx-int8``, ``python app.py --backend
onnx-int8``) and ``python -m benchmarks.encode`` share this one implementation (the files themselves are made by
``ctxir.encoders.onnx_export``):

* ``int8_model``: export and quantise once per model, into ``<folder>/<weights fingerprint>/``, reused afterwards.
* ``OnnxEncoder``: tokenises with the model's own ``preprocess``, runs ONNX Runtime, pools with
  ``ctxir.encoders.pool`` and L2-normalises, batching texts by length as ``SentenceTransformer.encode`` does.
* ``OnnxCrossEncoder`` / ``open_cross_encoder``: a CrossEncoder's body in float32 ONNX (the same scores within
  float rounding), its scoring modules (e.g. ctxir's segment-cosine head) and activation in torch, batched as
  ``CrossEncoder.predict`` does: ``CrossEncoderReranker(backend="onnx")``, the app's ``--rerank-backend onnx``.

Its speed and quality against sentence-transformers are in docs/results.md (``python -m benchmarks.encode``).
A final file that ONNX Runtime cannot read is exported again.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ctxir.encoders.onnx_export import (
    FP32_FILE,
    FROZEN_INT8_FILE,
    INT8_FILE,
    checksum_path,
    export_onnx,
    frozen_layers,
    frozen_matmuls,
    quantise,
    quantise_nodes,
    require,
    verified,
)
from ctxir.encoders.pooling import pool, prompt_length
from ctxir.types import CtxirError

# Rows × tokens one ONNX Runtime run may hold (8 texts of 256 tokens). The exported graph materialises every head's
# (tokens × tokens) attention scores in float32, where torch's fused attention does not: 32 texts of 256 tokens
# peak at ~1.1 GB above the loaded model, 8 at ~0.35 GB. Short texts (queries) still run batch_size at a time.
TOKENS_PER_RUN = 2048
_EXPORT_LOCK = threading.Lock()  # one export at a time in a process (the app's threads may ask together)
# open sessions kept for reuse, least recently used dropped first: (folder, model, pooling, threads, batch size) →
# (model, OnnxEncoder)
OPEN_SESSIONS = 4
_OPEN: OrderedDict = OrderedDict()
_OPEN_LOCK = threading.Lock()


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

    ``threads``: ONNX Runtime intra-op threads (0 = its default, one per core). ``include_prompt=False`` leaves a
    prompt's tokens out of the pooling, as the model's own ``Pooling`` with that setting.
    """

    def __init__(
        self,
        path: str | Path,
        model,
        pooling: str,
        threads: int = 0,
        batch_size: int = 32,
        include_prompt: bool = True,
    ):
        require("onnxruntime")
        self.path = Path(path)
        self.session = _session(self.path, threads)
        self.run_options = _run_options()
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.model, self.pooling, self.batch_size = model, pooling, batch_size
        self.include_prompt = include_prompt

    def features(self, texts: Sequence[str], prompt: str = "") -> dict[str, np.ndarray]:
        """The model's own tokenisation (max_seq_length, truncation, lower-casing; ``prompt`` put before each text)
        as int64 arrays for the graph."""
        batch = self.model.preprocess(list(texts), prompt=prompt or None)
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

    def encode(
        self, texts: Sequence[str], show_progress_bar: bool | None = None, prompt: str = ""
    ) -> np.ndarray:
        """(N, D) float32, unit rows, in the order of ``texts`` (each after ``prompt``)."""
        # lazy: torch takes about a second to import
        import torch

        texts = list(texts)
        # the prompt's tokens, left out of the pooling where the model's own pooling leaves them out
        skip = (
            prompt_length(self.model.preprocess([""], prompt=prompt))
            if prompt and not self.include_prompt
            else 0
        )
        order = np.argsort([-len(t) for t in texts], kind="stable")
        parts = []
        starts = range(0, len(texts), self.batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Batches (onnx-int8)")
        for begin in starts:
            feats = self.features([texts[i] for i in order[begin : begin + self.batch_size]], prompt)
            for run in self.runs(feats):
                hidden = self.session.run(None, run, self.run_options)[0]  # (rows, tokens, hidden)
                mask = torch.from_numpy(run["attention_mask"])
                pooled = pool(torch.from_numpy(hidden), mask, self.pooling, skip)
                parts.append(torch.nn.functional.normalize(pooled.float(), dim=1).numpy())
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        out = np.concatenate(parts)
        result = np.empty_like(out)
        result[order] = out
        return result


def int8_model(model, folder: str | Path, progress: bool = True) -> Path:
    """``folder/model-int8-dynamic.onnx`` for this model: exported and quantised the first time (seconds to a
    minute; says so when ``progress``), reused afterwards. ``folder`` should be keyed by the weights (``BiEncoder``
    uses ``<cache root>/onnx/<weights fingerprint>``). The float32 export made on the way is removed; one that was
    already there (``python -m benchmarks.encode --onnx-dir``) is kept."""
    folder = Path(folder)
    out = folder / INT8_FILE
    if verified(out):
        return out
    with _EXPORT_LOCK:
        if verified(out):  # another thread finished it while this one waited
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
            checksum_path(fp32).unlink(missing_ok=True)
        if progress:
            print(
                f"ctxir: {out.name} written in {time.perf_counter() - started:.1f} s "
                f"({out.stat().st_size / 2**20:.1f} MB)",
                file=sys.stderr,
                flush=True,
            )
    return out


def open_int8(
    model,
    folder: str | Path,
    pooling: str,
    threads: int = 0,
    batch_size: int = 32,
    progress: bool = True,
    include_prompt: bool = True,
) -> OnnxEncoder:
    """An ``OnnxEncoder`` over ``int8_model(model, folder)``; a file ONNX Runtime cannot read (damaged after it was
    written) is removed and made again once. Encoders of the same model and settings share one ONNX Runtime session
    (the app makes a ``BiEncoder`` per corpus and upload; a session holds the whole int8 model)."""
    key = (str(Path(folder).resolve()), id(model), pooling, threads, batch_size, include_prompt)
    with _OPEN_LOCK:
        if key in _OPEN:
            _OPEN.move_to_end(key)
            return _OPEN[key][1]
    path = int8_model(model, folder, progress)
    try:
        encoder = OnnxEncoder(path, model, pooling, threads, batch_size, include_prompt)
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
        encoder = OnnxEncoder(
            int8_model(model, folder, progress), model, pooling, threads, batch_size, include_prompt
        )
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

    ``path`` may also be an int8 file (``open_cross_encoder(int8=True)``).
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


def open_cross_encoder(
    model, folder: str | Path, threads: int = 0, progress: bool = True, int8: bool = False
) -> OnnxCrossEncoder:
    """An ``OnnxCrossEncoder`` over ``folder/model.onnx``: the body exported the first time (seconds; says so when
    ``progress``), reused afterwards; a file ONNX Runtime cannot read is made again once. ``folder`` should be
    keyed by the weights (``CrossEncoderReranker`` uses ``<cache root>/onnx/<weights fingerprint>``).

    ``int8``: the MatMuls of ``frozen_layers(model)`` quantised to int8 (dynamic, per channel, as the bi-encoder's
    ``onnx-int8``), the trained layers kept float32 (``FROZEN_INT8_FILE``): int8 on every layer costs
    more quality (``python -m benchmarks.rerank_int8``)."""
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
            if not verified(target):
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
                    quantise_nodes(fp32, target, frozen_matmuls(fp32, model))
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
