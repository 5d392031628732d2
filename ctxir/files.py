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
from collections.abc import Iterator
from pathlib import Path

from ctxir.types import CtxirError


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
        raise CtxirError(f"{str(path)!r} holds {type(value).__name__}, not a JSON object or list: re-save the model "
                         "folder")
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
