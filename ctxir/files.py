"""The files ctxir keeps: JSON read one way, every write atomic (a temporary beside the target, fsynced, then
``os.replace``-d over it), a full disk a ``DiskFullError``; checksums; pickle detection; the machine's summary."""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import socket
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from ctxir.types import CtxirError

logger = logging.getLogger("ctxir")
# What a full disk (or quota) looks like to a writer.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_warned: set[tuple[str, str]] = set()
# In a temporary's name, with the pid: which machine wrote it (other hosts' pids mean nothing here).
HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_OWNER = re.compile(r"\.(?P<host>[0-9a-f]{8})\.(?P<pid>\d+)-[^.]*\.tmp")
# A temporary untouched this long is a leftover whoever wrote it (a live writer touches its file far more often).
STALE_TEMPORARY_S = 24 * 3600.0


class DiskFullError(CtxirError):
    """A write found no space left: names the folder and what to do; the file it replaced is untouched."""

    def __init__(self, message: str, folder: Path):
        super().__init__(message)
        self.folder = folder


def is_disk_full(err: OSError) -> bool:
    """ENOSPC and its kin, or a short write without an errno (numpy's ``tofile``: "N requested and M written")."""
    short = err.errno is None and re.search(r"requested and \d+ written", str(err)) is not None
    return err.errno in DISK_FULL_ERRNOS or short


def disk_full(path: str | Path, err: OSError) -> DiskFullError:
    folder = Path(path).resolve().parent
    return DiskFullError(
        f"no space left on the disk holding {str(folder)!r} while writing {Path(path).name!r} "
        f"({os.strerror(err.errno) if err.errno else 'a short write'}): free space there (df -h {folder}) or write to "
        "another disk (--output, $CTXIR_CACHE); the previous file, if any, is unchanged",
        folder,
    )


def cache_not_written(what: str, err: DiskFullError) -> None:
    """A cache that could not be written: the run goes on without it; said once per kind of cache and folder."""
    if (what, str(err.folder)) not in _warned:
        _warned.add((what, str(err.folder)))
        logger.warning("ctxir: %s not cached, this run goes on without it: %s", what, err)


def file_sha256(path: str | Path) -> str:
    """The file's sha256 (hex): the checksum ctxir writes beside every cache it reads back."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def cache_lock(path: str | Path, timeout: float = -1):
    """A ``filelock`` beside ``path`` (a second process building the same entry waits); none where it cannot be."""
    from filelock import FileLock

    lock = Path(f"{path}.lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(lock, timeout=timeout)
    except OSError:
        return contextlib.nullcontext()


CHECKSUMS = "checksums.json"  # beside a shipped or staged model's files: each one's size and sha256
CHECKSUMS_FORMAT = "ctxir-checksums/1"
# read by people, never by a loader: a model card edited before `ctxir hub push` stays valid
UNCHECKED_SUFFIXES = (".md", ".png", ".jpg", ".jpeg", ".svg", ".html")
_verified: dict[tuple[str, int, int], str] = {}  # (path, mtime_ns, size) → sha256 checked in this process


def write_checksums(folder: str | Path) -> Path:
    """``folder/checksums.json``: the size and sha256 of every file a loader reads under ``folder``, written last."""
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): [p.stat().st_size, file_sha256(p)]
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and p.name != CHECKSUMS
        and p.suffix.lower() not in UNCHECKED_SUFFIXES
        # bookkeeping a model repo never holds (.cache/huggingface/ of staging and `hf download`)
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }
    return write_json(folder / CHECKSUMS, {"format": CHECKSUMS_FORMAT, "files": files}, indent=1)


def verify_checksums(folder: str | Path, only: str | Path | None = None) -> int:
    """Check the files ``folder/checksums.json`` lists (or only ``only``) against it; → how many were listed."""
    folder, path = Path(folder), Path(folder) / CHECKSUMS
    record = read_json(path, strict=False) if path.is_file() else {"format": CHECKSUMS_FORMAT, "files": {}}
    listed = record.get("files") if isinstance(record, dict) else None
    valid = isinstance(listed, dict) and record.get("format") == CHECKSUMS_FORMAT
    if not valid or not all(
        isinstance(v, list) and [type(x) for x in v] == [int, str] for v in listed.values()
    ):
        raise CtxirError(
            f"{str(path)!r} is damaged (not a {CHECKSUMS_FORMAT} record), so the model folder's files cannot be "
            "checked: fetch or ship the model folder again"
        )
    if only is not None:
        # not resolved: in a Hugging Face cache a snapshot's files are links to blobs outside the snapshot folder
        name = Path(os.path.abspath(only)).relative_to(os.path.abspath(folder)).as_posix()
        listed = {name: listed[name]} if name in listed else {}
    for name, (size, sha) in listed.items():
        path = folder / name
        if not path.is_file():  # a download by pattern leaves figures out
            continue
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        if stat.st_size != size:
            raise _damaged(path, f"is {stat.st_size} bytes where {size} were written")
        if _verified.get(key) != sha:  # hashed once per process while the file stays as it is
            if file_sha256(path) != sha:
                raise _damaged(path, "is damaged (its sha256 differs)")
            _verified[key] = sha
    return len(listed)


def _damaged(path: Path, what: str) -> CtxirError:
    return CtxirError(
        f"{str(path)!r} {what}: it is not the file {CHECKSUMS} recorded when the model folder was made; fetch or "
        "ship the model folder again"
    )


PICKLE_SUFFIXES = (".bin", ".pkl", ".pickle", ".pt", ".pth", ".ckpt", ".joblib", ".sav", ".dill")


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
        with contextlib.suppress(zipfile.BadZipFile), zipfile.ZipFile(path) as z:
            return any(n.endswith(".pkl") for n in z.namelist())  # torch's zip holds data.pkl
    return False


def refuse_pickles(folder: str | Path, files, name: str = "") -> None:
    """Refuse a model folder where any of ``files`` (relative to it) is a pickle: loading one can run code."""
    pickles = sorted(str(f) for f in files if is_pickle_file(Path(folder) / f))
    if pickles:
        raise CtxirError(
            f"model folder {name or str(folder)!r} holds pickle file(s) {', '.join(map(repr, pickles))}, which "
            "can run code when loaded; ctxir loads safetensors only and publishes no pickle: delete them (re-save "
            "the model with save_pretrained, which writes model.safetensors) and try again"
        )


def check_model_folder(folder: str | Path, name: str = "") -> Path:
    """Refuse a model folder whose files don't match its checksums.json, that holds a pickle, or has no weights."""
    folder = Path(folder)
    verify_checksums(folder)
    places = [folder] + [
        folder / m["path"]
        for m in (read_json(folder / "modules.json", strict=False) or [])
        if isinstance(m, dict) and m.get("path") and (folder / m["path"]).is_dir()
    ]
    files = [p for place in places for p in place.iterdir() if p.is_file()]
    # the Trainer's training_args.bin: no loader reads it, so it does not make a folder unsafe to load
    refuse_pickles(folder, [p.relative_to(folder) for p in files if p.name != "training_args.bin"], name)
    has_config = any((folder / f).is_file() for f in ("config.json", "modules.json"))
    if has_config and not any(p.suffix == ".safetensors" for p in files):
        raise CtxirError(
            f"model folder {name or str(folder)!r} has a config but no weights (no model.safetensors or "
            "adapter_model.safetensors): the download or copy is incomplete; fetch the model again "
            "(`hf download ID --local-dir DIR`) or re-save it with save_pretrained"
        )
    return folder


def read_json(path: str | Path, strict: bool = True) -> dict | list:
    """A JSON object or list from ``path``; {} when absent; anything else raises ``CtxirError`` (``strict``) or is {}."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        problem = (
            None
            if isinstance(value, dict | list)
            else f"holds {type(value).__name__}, not a JSON object or list"
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        problem = f"is not valid JSON ({err})"
    if problem and strict:
        raise CtxirError(f"{str(path)!r} {problem}: re-save the model folder")
    return {} if problem else value


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (ending in ``suffix``) that replaces ``path`` when the block succeeds."""
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=temporary_prefix(path), suffix=f".tmp{suffix}", dir=path.parent)
        os.close(fd)
        yield (tmp := Path(name))
        with open(tmp, "rb+") as f:  # on disk before the rename, so a power cut cannot publish an empty file
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        if is_disk_full(err):
            raise disk_full(path, err) from err
        raise
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def temporary_prefix(path: str | Path) -> str:
    """The start of a temporary's name beside ``path``: ``.NAME.HOST.PID-``, so ``remove_temporaries`` knows its owner."""
    return f".{Path(path).name}.{HOST_TAG}.{os.getpid()}-"


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine; a zombie (killed, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        # the state field follows the command name's closing parenthesis
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): os.kill found it


def remove_temporaries(folder: str | Path, name: str = "") -> list[str]:
    """Remove ``folder``'s temporaries of ``name``… whose owner is gone or that are stale; → their names."""
    removed, now = [], time.time()
    for leftover in Path(folder).glob(f".{glob.escape(name)}*.tmp*"):
        owner = _OWNER.search(leftover.name)
        try:
            stale = now - leftover.stat().st_mtime > STALE_TEMPORARY_S
        except OSError:
            continue  # gone already: its writer renamed or removed it
        dead = owner is not None and owner["host"] == HOST_TAG and not process_alive(int(owner["pid"]))
        if not (dead or stale):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
            removed.append(leftover.name)
    if removed:
        logger.info(
            "removed %d temporary file(s) of killed writer(s) in %s: %s", len(removed), folder, removed
        )
    return removed


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


def cpu_count() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_info() -> dict:
    """Where numbers were measured; ``hardware`` is the one-line summary written beside timings and metrics."""
    import torch

    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available()
        else []
    )
    cores = cpu_count()
    hardware = f"{platform.system()} {platform.machine()}, {cores} CPU core{'s' if cores != 1 else ''}"
    if gpus:
        hardware += f", {len(gpus)}× {gpus[0]}"
    return {
        "hardware": hardware,
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": cores,
        "torch_threads": torch.get_num_threads(),
        "gpus": gpus,
        "python": platform.python_version(),
    }
