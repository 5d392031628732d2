"""ONNX Runtime on the CPU: a bi-encoder's body in int8 (``OnnxEncoder``), a cross-encoder's in float32 or with its
base layers in int8 (``OnnxCrossEncoder``); heads and pooling in torch."""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Sequence
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
    quantise_dynamic,
    require,
    verified,
)
from ctxir.encoders.pooling import pool, prompt_length
from ctxir.types import CtxirError

# rows × tokens one run may hold: the exported graph materialises every head's attention scores in float32
TOKENS_PER_RUN = 2048
_EXPORT_LOCK = threading.Lock()


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"ctxir: {message}", file=sys.stderr, flush=True)


class _Session:
    """An ONNX Runtime CPU session over ``path`` whose runs give their activations' memory back."""

    def __init__(
        self, path: str | Path, threads: int = 0, spin: bool = True, what: str = "backend 'onnx-int8'"
    ):
        require("onnxruntime", what=what)
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = max(0, int(threads))
        options.inter_op_num_threads = 1
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.run_options = ort.RunOptions()
        self.run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self.inputs = {i.name for i in self.session.get_inputs()}

    def feed(self, features: dict) -> dict[str, np.ndarray]:
        """The model's tokenised ``features`` the graph reads, as int64 arrays."""
        return {k: np.asarray(v.cpu(), dtype=np.int64) for k, v in features.items() if k in self.inputs}


class OnnxEncoder(_Session):
    """A SentenceTransformer's transformer in ONNX Runtime, pooled and normalised in torch, batched by length."""

    def __init__(
        self,
        path: str | Path,
        model,
        pooling: str,
        threads: int = 0,
        batch_size: int = 32,
        include_prompt: bool = True,
    ):
        super().__init__(path, threads)
        self.model, self.pooling, self.batch_size = model, pooling, batch_size
        self.include_prompt = include_prompt

    @staticmethod
    def runs(feats: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """A tokenised batch cut into runs of at most ``TOKENS_PER_RUN`` rows × tokens, each trimmed to its longest text."""
        mask = feats["attention_mask"]
        rows = max(1, TOKENS_PER_RUN // max(1, mask.shape[1]))
        out = []
        for begin in range(0, len(mask), rows):
            used = np.flatnonzero(mask[begin : begin + rows].any(0))  # columns any text of the run uses
            width = int(used[-1]) + 1 if len(used) else 1
            out.append({k: v[begin : begin + rows, :width] for k, v in feats.items()})
        return out

    def encode(
        self, texts: Sequence[str], show_progress_bar: bool | None = None, prompt: str = ""
    ) -> np.ndarray:
        """(N, D) float32, unit rows, in the order of ``texts`` (each after ``prompt``)."""
        import torch

        texts = list(texts)
        skip = 0  # the prompt's tokens, left out where the model's own pooling leaves them out
        if prompt and not self.include_prompt:
            skip = prompt_length(self.model.preprocess([""], prompt=prompt))
        order = np.argsort([-len(t) for t in texts], kind="stable")
        parts = []
        starts = range(0, len(texts), self.batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Batches (onnx-int8)")
        for begin in starts:
            batch = [texts[i] for i in order[begin : begin + self.batch_size]]
            feats = self.feed(self.model.preprocess(batch, prompt=prompt or None))
            for run in self.runs(feats):
                hidden = self.session.run(None, run, self.run_options)[0]  # (rows, tokens, hidden)
                mask = torch.from_numpy(run["attention_mask"])
                pooled = pool(torch.from_numpy(hidden), mask, self.pooling, skip)
                parts.append(torch.nn.functional.normalize(pooled.float(), dim=1).numpy())
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(parts)[np.argsort(order)]  # back to the input order


def _export_once(target: Path, make: Callable[[], object], progress: bool, message: str) -> Path:
    """``target``, made by ``make()`` under the export lock unless it is there whole (its checksum matches)."""
    if verified(target):
        return target
    with _EXPORT_LOCK:
        if not verified(target):
            started = time.perf_counter()
            _say(progress, f"first use of backend {message} (once; reused afterwards) …")
            make()
            _say(progress, f"{target.name} written in {time.perf_counter() - started:.1f} s")
    return target


def _open_exported(export: Callable[[], Path], session: Callable, *also: Path):
    """``session(export())``; a file ONNX Runtime cannot read is removed (with ``also``) and made again once."""
    for attempt in range(2):
        path = export()
        try:
            return session(path)
        except CtxirError:
            raise
        except Exception as err:  # onnxruntime raises its own exception types for an unreadable model
            if attempt:
                raise CtxirError(
                    f"{path} could not be loaded by ONNX Runtime ({type(err).__name__}: {err}): use backend 'torch'"
                ) from err
            _say(True, f"{path} could not be loaded ({type(err).__name__}); exporting again")
            for stale in (path, *also):
                stale.unlink(missing_ok=True)


def int8_model(model, folder: str | Path, progress: bool = True) -> Path:
    """``folder/model-int8-dynamic.onnx`` (``folder`` keyed by the weights), made the first time."""
    folder = Path(folder)

    def make() -> None:
        require("onnxruntime", "onnx", "onnxscript")
        had_fp32 = (folder / FP32_FILE).is_file()
        fp32 = export_onnx(model, folder, progress=False)
        quantise(fp32, "dynamic")
        if not had_fp32:
            fp32.unlink(missing_ok=True)
            checksum_path(fp32).unlink(missing_ok=True)

    what = f"'onnx-int8' for this model: exporting it to ONNX and quantising to int8 into {folder}"
    return _export_once(folder / INT8_FILE, make, progress, what)


@functools.lru_cache(maxsize=4)  # the key holds the model, so its id is not reused while cached
def open_int8(
    model,
    folder: str | Path,
    pooling: str,
    threads: int = 0,
    batch_size: int = 32,
    include_prompt: bool = True,
) -> OnnxEncoder:
    """An ``OnnxEncoder`` over ``int8_model``, sessions shared per model and settings; an unreadable file is made again once."""
    return _open_exported(
        lambda: int8_model(model, folder),
        lambda path: OnnxEncoder(path, model, pooling, threads, batch_size, include_prompt),
    )


class OnnxCrossEncoder(_Session):
    """A ``CrossEncoder``'s body in ONNX Runtime, head and activation in torch; scores as ``CrossEncoder.predict``'s."""

    def __init__(self, path: str | Path, model, threads: int = 0):
        super().__init__(path, threads, spin=False, what="backend 'onnx' for a cross-encoder")
        self.model = model

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """(len(pairs),) float32 for one-score models, (len(pairs), labels) otherwise."""
        import torch

        pairs = list(pairs)
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        model = self.model
        # CrossEncoder.predict's own length key, so batches (and their padding) are the same as in torch
        order = np.argsort([-model._input_length(pair) for pair in pairs], kind="stable")
        parts = []
        with torch.inference_mode():
            for begin in range(0, len(pairs), batch_size):
                features = model.preprocess([pairs[i] for i in order[begin : begin + batch_size]])
                hidden = self.session.run(None, self.feed(features), self.run_options)[0]
                features["token_embeddings"] = torch.from_numpy(hidden)  # (rows, tokens, hidden)
                for module in list(model)[1:]:
                    features = module(features)
                scores = features["scores"].float()
                if model.activation_fn is not None:
                    scores = model.activation_fn(scores)
                parts.append(
                    (scores.squeeze(-1) if model.num_labels == 1 and scores.ndim > 1 else scores).numpy()
                )
        return np.concatenate(parts)[np.argsort(order)]  # back to the input order


def open_cross_encoder(model, folder: str | Path, threads: int = 0, int8: bool = False) -> OnnxCrossEncoder:
    """An ``OnnxCrossEncoder`` over the body exported into ``folder``; ``int8``: ``frozen_layers``' MatMuls in int8."""
    folder = Path(folder)
    int8 = int8 and len(frozen_layers(model)) > 0  # none of the base left unchanged: float32
    target = folder / (FROZEN_INT8_FILE if int8 else FP32_FILE)

    def make() -> None:
        require("onnxruntime", "onnx", "onnxscript", what="backend 'onnx' for a cross-encoder")
        pairs = [("a short query", "a document"), ("a longer query", "a somewhat longer document to export")]
        fp32 = export_onnx(model, folder, progress=False, sample=pairs)
        if int8:
            nodes = frozen_matmuls(fp32, model)
            if not nodes:
                raise CtxirError(
                    f"no MatMul of {fp32} has the weights of a layer the model shares with its base: "
                    "nothing to quantise (use backend 'onnx')"
                )
            quantise_dynamic(fp32, target, nodes)

    what = f"{'onnx-int8' if int8 else 'onnx'} for this cross-encoder: exporting it to {folder}"
    return _open_exported(
        lambda: _export_once(target, make, True, what),
        lambda path: OnnxCrossEncoder(path, model, threads),
        *([folder / FP32_FILE] if int8 else []),
    )
