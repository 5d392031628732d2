"""Reading and writing the files ctxir keeps (metrics, cards, configs, caches, weights): JSON read one way, every
write atomic. No torch import.

A write goes to a temporary file in the same folder, is flushed to disk, then ``os.replace``-d over the target: a
process killed mid-write leaves the old file or the new one, never half of either (``tests/test_files.py`` kills a
writer at random moments to show it).

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(folder / "metrics.json", '{"nDCG@10": 0.69}')
>>> read_json(folder / "metrics.json")
{'nDCG@10': 0.69}
>>> read_json(folder / "absent.json")
{}
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from ctxir.types import CtxirError

PICKLE_SUFFIXES = (".bin", ".pkl", ".pickle", ".pt", ".pth", ".ckpt", ".joblib", ".sav", ".dill")
# Written by the Trainer beside a model; no loader ever reads it, so it does not make a folder unsafe to load.
TRAINER_LEFTOVERS = ("training_args.bin",)


def is_pickle_file(path: str | Path) -> bool:
    """By name (.bin, .pkl, .pt, ...) or by content (a pickle stream, or torch's zip holding data.pkl)."""
    path = Path(path)
    if path.suffix.lower() in PICKLE_SUFFIXES:
        return True
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # PROTO opcode of pickle protocols 2-5
        return True
    if head == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as z:
                return any(n.endswith((".pkl", "data.pkl")) for n in z.namelist())
        except zipfile.BadZipFile:
            return False
    return False


def check_model_folder(folder: str | Path, name: str = "") -> Path:
    """Refuse a local model folder that holds a pickle a loader could read, or that has no weights at all.

    Looks at the folder and the module sub-folders its modules.json names (where sentence-transformers loads
    from); checkpoints/ and other sub-folders are never loaded, so they are not read.
    """
    folder = Path(folder)
    shown = name or str(folder)
    places = [folder] + [
        folder / m["path"]
        for m in (read_json(folder / "modules.json", strict=False) or [])
        if isinstance(m, dict) and m.get("path") and (folder / m["path"]).is_dir()
    ]
    files = [p for place in places for p in place.iterdir() if p.is_file()]
    pickles = [
        str(p.relative_to(folder)) for p in files if p.name not in TRAINER_LEFTOVERS and is_pickle_file(p)
    ]
    if pickles:
        raise CtxirError(
            f"model folder {shown!r} holds pickle file(s) {', '.join(map(repr, sorted(pickles)))}, which "
            "can run code when loaded; ctxir loads safetensors only: delete them (re-save the model with "
            "save_pretrained, which writes model.safetensors) and load again"
        )
    has_config = any((folder / f).is_file() for f in ("config.json", "modules.json"))
    if has_config and not any(p.suffix == ".safetensors" for p in files):
        raise CtxirError(
            f"model folder {shown!r} has a config but no weights (no model.safetensors or "
            "adapter_model.safetensors): the download or copy is incomplete; fetch the model again "
            "(`hf download ID --local-dir DIR`) or re-save it with save_pretrained"
        )
    return folder


def read_json(path: str | Path, strict: bool = True) -> dict | list:
    """A JSON file (an object, or a list such as modules.json); {} when the file is absent.

    A file that is not a JSON object or list raises ``CtxirError`` naming it (``strict``), or reads as {} when the
    caller is only sniffing what kind of folder this is.
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
        raise CtxirError(
            f"{str(path)!r} holds {type(value).__name__}, not a JSON object or list: re-save the model folder"
        )
    return value


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without error it replaces ``path`` in one step.

    For writers that want a file name (``np.save``, safetensors' ``save_file``); ``suffix`` keeps an extension those
    writers insist on (np.save appends ".npy" to names without it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # on disk before the rename, so a power cut cannot publish an empty file
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)


def write_json(path: str | Path, value, indent: int | None = 2, default=None) -> Path:
    """``value`` as JSON (with a final newline), atomically."""
    write_atomic(path, json.dumps(value, indent=indent, default=default) + "\n")
    return Path(path)
