"""Any model by name, loaded on demand (the app's "compare another model"): the name checked, its folder fetched,
repository code refused unless allowed, its role read from its files, and a fresh copy loaded that no cache keeps."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ctxir import kinds
from ctxir.encoders.models import (
    _ALLOW_PATTERNS,
    _PACKAGED_ALIASES,
    MS_MARCO_CROSS_ENCODER,
    SHIPPED_MODELS,
    TRUSTED_MODULE_PREFIXES,
    is_adapter,
    is_ctxir_modular,
    load_bi_encoder,
    load_cross_encoder,
    load_transformer,
    pick_device,
    resolve_model,
    top_layers_config,
)
from ctxir.files import read_json
from ctxir.names import CLS_LR_CONFIG
from ctxir.types import CtxirError


def hub_offline() -> bool:
    from huggingface_hub import constants

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    return bool(constants.HF_HUB_OFFLINE) or offline


def is_hub_id(name: str) -> bool:
    """``org/name`` that is no local path.

    >>> is_hub_id("cross-encoder/ms-marco-MiniLM-L6-v2"), is_hub_id("./models/x"), is_hub_id("a/b/c")
    (True, False, False)
    """
    name = (name or "").strip()
    return (
        name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).expanduser().exists()
    )


def check_model_name(name, what: str = "model", allow_paths: bool = True) -> str:
    """``name`` stripped, once it has the shape of a Hub id or (``allow_paths``) names a local folder; no network."""
    if not isinstance(name, str) or not name.strip():
        raise CtxirError(f"{what} is empty: type a Hub id such as {MS_MARCO_CROSS_ENCODER!r} (org/name)")
    name = name.strip()
    if allow_paths and Path(name).expanduser().is_dir():
        return name
    if re.fullmatch(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}", name) and ".." not in name:
        return name
    where = ", or a local model folder's path" if allow_paths else " (this app loads no local paths)"
    raise CtxirError(
        f"{what} {name!r} is not a Hub id{' or a local folder' if allow_paths else ''}: type a Hub id such as "
        f"{MS_MARCO_CROSS_ENCODER!r} (org/name){where}"
    )


def remote_code_needed(folder: str | Path) -> str:
    """Why the model in ``folder`` needs its repository's code to load ('' when it needs none)."""
    folder = Path(folder)
    for file in ("config.json", "tokenizer_config.json"):
        record = read_json(folder / file)
        if isinstance(record, dict) and record.get("auto_map"):  # transformers' remote code
            return f"its {file} maps classes to the repository's own code (auto_map)"
    if is_ctxir_modular(folder):  # ctxir's own loader refuses any module it does not name
        return ""
    modules = read_json(folder / "modules.json")
    for entry in modules if isinstance(modules, list) else []:
        kind = str(entry.get("type", ""))
        if kind and not kind.startswith(TRUSTED_MODULE_PREFIXES):
            return (
                f"its modules.json names module {kind!r}, which is neither sentence-transformers' nor ctxir's"
            )
    return ""


def fetch_model(
    name: str, what: str = "model", *, allow_remote_code: bool = False, allow_paths: bool = True
) -> str:
    """The local folder of model ``name``, downloaded when not cached and online; refused with what to do otherwise."""
    name = check_model_name(name, what, allow_paths)
    if is_hub_id(name) and hub_offline() and name not in SHIPPED_MODELS and name not in _PACKAGED_ALIASES:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            snapshot_download(name, local_files_only=True)
        except (LocalEntryNotFoundError, OSError, ValueError):
            raise CtxirError(
                f"{what} {name!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and this app is "
                "offline (HF_HUB_OFFLINE=1), so nothing is downloaded: choose a model that is in the cache, or "
                f"have the deployer download it there first (`hf download {name}`)"
            ) from None
    folder = resolve_model(name)
    why = remote_code_needed(folder)
    if why and not allow_remote_code:
        raise CtxirError(
            f"{what} {name!r} needs code from its repository to load ({why}); this app runs no model repository's "
            "code unless its deployer allows it (app.py --allow-remote-code, or CTXIR_TRUST_REMOTE_CODE=1): "
            "choose a model that loads without it"
        )
    if why and is_hub_id(name) and not hub_offline():  # the code files resolve_model's patterns leave out
        from huggingface_hub import snapshot_download

        folder = snapshot_download(name, allow_patterns=[*_ALLOW_PATTERNS, "*.py"])
    return str(folder)


def model_role(folder: str | Path) -> str:
    """``kinds.CROSS_ENCODER`` when the model in ``folder`` scores a pair read together, else ``kinds.BI_ENCODER``."""
    folder = Path(folder)
    if (folder / CLS_LR_CONFIG).is_file():
        raise CtxirError(
            f"{str(folder)!r} is a CLS-LR re-ranker, which is not loaded by name here: compare a cross-encoder or a "
            "bi-encoder, or start the app with --cls-lr FOLDER"
        )
    if is_adapter(folder) or is_ctxir_modular(folder) or top_layers_config(folder):
        return kinds.CROSS_ENCODER
    settings = read_json(folder / "config_sentence_transformers.json")
    if isinstance(settings, dict) and "CrossEncoder" in str(settings.get("model_type", "")):
        return kinds.CROSS_ENCODER
    config = read_json(folder / "config.json")
    architectures = config.get("architectures") or [] if isinstance(config, dict) else []
    if any(str(a).endswith("ForSequenceClassification") for a in architectures):
        return kinds.CROSS_ENCODER
    return kinds.BI_ENCODER


def load_model_fresh(role: str, name: str, device: str = "auto", trust_remote_code: bool = False):
    """A new, uncached copy of model ``name`` as ``role``: "bi-encoder", "cross-encoder" or "inspect"."""
    from sentence_transformers import CrossEncoder, SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    if not trust_remote_code:  # ctxir's own loaders (adapters, top layers, modular heads), uncached
        loader = {
            kinds.BI_ENCODER: load_bi_encoder,
            kinds.CROSS_ENCODER: load_cross_encoder,
            "inspect": load_transformer,
        }[role]
        return loader.__wrapped__(name, device)
    path = resolve_model(name)
    try:
        if role == kinds.BI_ENCODER:
            return SentenceTransformer(path, device=pick_device(device), trust_remote_code=True)
        if role == kinds.CROSS_ENCODER:
            return CrossEncoder(path, device=pick_device(device), trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        model = AutoModel.from_pretrained(path, trust_remote_code=True, attn_implementation="eager")
    except (OSError, ValueError, ImportError) as err:
        raise CtxirError(f"could not load {role} {name!r} from {path}: {err}") from err
    return tokenizer, model.to(pick_device(device)).eval()
