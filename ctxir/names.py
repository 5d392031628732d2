"""Names shared by several modules: saved-file names, the Hub-id pattern, and reading a model folder's JSON files.
Imports nothing heavy (no torch), so ``ctxir.hub`` and ``ctxir.cards`` can use them without loading models."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ctxir.types import CtxirError

CLS_LR_WEIGHTS = "cls_lr.safetensors"
CLS_LR_CONFIG = "cls_lr_config.json"
CLS_LR_FORMAT = "ctxir-cls-lr/1"
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter folder
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def looks_like_hub_id(name: str) -> bool:
    """'owner/name' that is not also an existing local path (a folder wins, as in ``resolve_model``)."""
    return bool(HUB_ID.fullmatch(name or "")) and not Path(name).expanduser().exists()


def read_json(path: Path, strict: bool = True) -> dict | list:
    """A model folder's JSON file (an object, or a list such as modules.json); {} when the file is absent.

    A file that is not a JSON object raises ``CtxirError`` naming it (``strict``), or reads as {} when the caller is
    only sniffing what kind of folder this is.
    """
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        if not strict:
            return {}
        raise CtxirError(f"{str(path)!r} is not valid JSON ({err}): re-save the model folder") from err
    if not isinstance(value, dict | list):
        if not strict:
            return {}
        raise CtxirError(f"{str(path)!r} holds {type(value).__name__}, not a JSON object or list: re-save the model folder")
    return value
