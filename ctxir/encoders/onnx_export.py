"""A transformer body exported to float32 ONNX (``torch.onnx.export``: sentence-transformers' ONNX backend needs
optimum-onnx, which pins transformers < 4.58) and int8 copies; each file is written atomically with its sha256 beside it."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ctxir.files import atomic_path, disk_full, file_sha256, is_disk_full, write_atomic
from ctxir.types import CtxirError

FP32_FILE = "model.onnx"
INT8_FILE = "model-int8-dynamic.onnx"
FROZEN_INT8_FILE = (
    "model-int8-frozen-layers.onnx"  # a cross-encoder's base layers int8, its trained ones float32
)
logger = logging.getLogger("ctxir")


def checksum_path(path: str | Path) -> Path:
    return Path(f"{path}.sha256")


def verified(path: str | Path) -> bool:
    """Whether ``path`` is the file that was written (its sha256 beside it matches); one that is not is removed."""
    path = Path(path)
    if not path.is_file():
        return False
    sidecar = checksum_path(path)
    try:
        ok = sidecar.read_text(encoding="ascii").strip() == file_sha256(path)
    except (OSError, UnicodeDecodeError):
        ok = False
    if not ok:
        logger.warning("ctxir: %s does not match its checksum (%s): exporting it again", path, sidecar.name)
        path.unlink(missing_ok=True)
    return ok


@contextlib.contextmanager
def _sealed(path: Path) -> Iterator[Path]:
    """``atomic_path`` that writes the file's sha256 beside it; exporters' wrapped full-disk errors become ``DiskFullError``."""
    try:
        with atomic_path(path, suffix=".onnx") as tmp:
            yield tmp
            write_atomic(checksum_path(path), file_sha256(tmp) + "\n")
    except Exception as err:
        cause = err
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        if cause is not None and is_disk_full(cause) and not isinstance(err, OSError | CtxirError):
            raise disk_full(path, cause) from err
        raise


def require(*modules: str, what: str = "backend 'onnx-int8'") -> None:
    """Raise ``CtxirError`` naming the packages to install when any of ``modules`` cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise CtxirError(
            f"{what} needs {', '.join(missing)}, which is not installed: "
            f"`python -m pip install {' '.join(missing)}` (pinned in requirements.txt), or use backend 'torch'"
        )


def export_onnx(model, folder: str | Path, progress: bool = True, sample: list | None = None) -> Path:
    """The transformer body of a SentenceTransformer (or CrossEncoder, with ``sample`` pairs) → ``folder/model.onnx``."""
    import torch

    path = Path(folder) / FP32_FILE
    if verified(path):
        return path
    require("onnx", "onnxscript", what="exporting to ONNX")
    body = model[0].auto_model.eval()
    if body.device.type != "cpu":  # export a CPU copy, leave the model where it is
        import copy

        body = copy.deepcopy(body).to("cpu")
    sample = model.preprocess(sample or ["a short text", "a somewhat longer text to export with"])
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]  # RoBERTa: no types

    class Body(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    if progress:
        print(f"exporting {body.config.model_type} to {path} …", file=sys.stderr, flush=True)

    with warnings.catch_warnings(), _sealed(path) as tmp, _quiet():
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

    def rewind(self):
        pass


def quantise(fp32: str | Path, kind: str, calibration: list[dict] | None = None) -> Path:
    """int8 MatMul weights beside ``fp32``: ``dynamic`` or ``static`` (QDQ, MinMax calibration on ``calibration``)."""
    if kind not in ("dynamic", "static"):
        raise CtxirError(f"quantisation {kind!r} is not known: use one of 'dynamic', 'static'")
    fp32 = Path(fp32)
    out = fp32.with_name(f"model-int8-{kind}.onnx")
    if verified(out):
        return out
    require("onnxruntime", "onnx", what="int8 quantisation")
    if kind == "dynamic":
        quantise_dynamic(fp32, out)
        return out
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    with _sealed(out) as tmp, _quiet():
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


def frozen_layers(model) -> range:
    """The encoder layers a cross-encoder shares unchanged with its base (under a ``TopLayersTransformer``'s first)."""
    return range(int(getattr(model[0], "trained_from", 0) or 0))


def frozen_matmuls(path: str | Path, model) -> list[str]:
    """The exported graph's MatMul nodes whose weight is a linear layer of ``frozen_layers(model)``, found by value."""
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


def quantise_dynamic(fp32: Path, out: Path, nodes: list[str] | None = None) -> None:
    """Dynamic int8 per-channel MatMul weights (``reduce_range``), on ``nodes`` only if given."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _sealed(out) as tmp, _quiet():
        quantize_dynamic(
            str(fp32),
            str(tmp),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=nodes,
        )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No log records below ERROR while exporting or quantising."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
