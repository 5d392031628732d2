"""The one bounded folder of the files the app's answers return, removed at exit (or by the next start)."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from ctxir.files import atomic_path, process_alive, write_atomic
from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")
STOPPING = "the app is stopping: its output folder takes no new files"


class Outputs:
    """The one folder for the files requests return (PNG figures, attention HTML), bounded on disk."""

    PREFIX, OWNER = "ctxir-app-", "owner.pid"
    SHARED = ("plotly-*.min.js", "jquery-*.min.js", "d3-*.min.js")  # Outputs.shared's files, never pruned

    def __init__(self, max_age_s: float = 600.0, max_bytes: int = 200 * 2**20):
        self.reclaimed = []  # the output folders of apps killed with SIGKILL, removed now
        for folder in Path(tempfile.gettempdir()).glob(f"{self.PREFIX}*"):
            try:
                pid = int((folder / self.OWNER).read_text().strip())
            except (OSError, ValueError):
                continue  # not one of ours, or being created right now
            if not process_alive(pid):
                shutil.rmtree(folder, ignore_errors=True)
                self.reclaimed.append(folder.name)
        if self.reclaimed:
            logger.info("removed the output folders that killed apps left: %s", self.reclaimed)
        self.root = Path(tempfile.mkdtemp(prefix=self.PREFIX))
        write_atomic(self.root / self.OWNER, f"{os.getpid()}\n")
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self.pinned: set[Path] = set()  # kept whatever their age (the first view's files)
        self._lock = threading.Lock()
        self._writes = threading.Condition()  # guards closed and _writers
        self._writers: list[int] = []  # the threads writing now (one entry per write)
        gr.set_static_paths([self.root])
        self.closed = False
        atexit.register(self.remove)

    def remove(self, wait_s: float = 10.0) -> None:
        """Remove the folder (at exit)."""
        me = threading.get_ident()
        with self._writes:
            self.closed = True
            self._writes.wait_for(lambda: not [t for t in self._writers if t != me], timeout=wait_s)
        for _ in range(20):
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists():
                return
            time.sleep(0.05)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write into the folder: refused once the app is stopping, else waited for by ``remove``."""
        with self._writes:
            if self.closed:
                raise CtxirError(STOPPING)
            self._writers.append(threading.get_ident())
        try:
            yield
        except FileNotFoundError as err:
            if self.closed:
                raise CtxirError(STOPPING) from err
            raise
        finally:
            with self._writes:
                self._writers.remove(threading.get_ident())
                self._writes.notify_all()

    def _path(self, stem: str, suffix: str) -> Path:
        return self.root / f"{stem}-{uuid.uuid4().hex[:10]}{suffix}"

    def _files(self) -> list[tuple[float, int, Path]]:
        """(mtime, bytes, path), newest first; files removed meanwhile by another request are skipped."""
        files = []
        for path in self.root.iterdir():
            # a file still being written (ctxir.files' temporary names start with ".") is not pruned under it
            shared = any(path.match(pattern) for pattern in self.SHARED)
            if shared or path.name.startswith(".") or path.name == self.OWNER or path in self.pinned:
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        return sorted(files, key=lambda f: f[0], reverse=True)

    def _prune(self, keep: Path) -> None:
        with self._lock:
            # the pinned files count against max_bytes; the newest others fill what is left
            total = 0
            for pinned in self.pinned:
                with contextlib.suppress(FileNotFoundError):
                    total += pinned.stat().st_size
            cutoff, full = time.time() - self.max_age_s, False
            # newest first: once one does not fit, every older one goes
            for mtime, size, path in self._files():
                full = full or (path != keep and total + size > self.max_bytes)
                if path != keep and (full or mtime < cutoff):
                    path.unlink(missing_ok=True)
                else:
                    total += size

    def shared(self, name: str, source: Callable[[], str]) -> Path:
        """The one copy of a script that every page returned by this app loads."""
        path = self.root / name
        with self._lock:
            if not path.is_file():
                with self._writing():
                    write_atomic(path, source())  # never half a file to a concurrent download
        return path

    def plotly_js(self) -> Path:
        """plotly.js (4.6 MB), which every interactive HTML page returned by this app loads from beside it."""
        from plotly.offline import get_plotlyjs, get_plotlyjs_version

        return self.shared(f"plotly-{get_plotlyjs_version()}.min.js", get_plotlyjs)

    def url(self, path: Path) -> str:
        """``path`` (a file of this folder) as a page of this app links it: Gradio's file route."""
        return "gradio_api/file=" + urllib.parse.quote(str(path))

    def pin(self, paths) -> list[Path]:
        """Keep those of ``paths`` that are files of this folder for the app's life."""
        kept = [Path(p) for p in paths if isinstance(p, str | Path) and Path(p).parent == self.root]
        with self._lock:
            self.pinned.update(kept)
        return kept

    def bytes_used(self) -> int:
        return sum(size for _, size, _ in self._files())

    def png(self, fig, stem: str) -> str:
        from ctxir.viz import save_png

        path = self._path(stem, ".png")
        with self._writing(), atomic_path(path, suffix=".png") as tmp:
            save_png(fig, tmp)
        self._prune(keep=path)
        return str(path)

    def html(self, document: str, stem: str) -> str:
        return self.text(document, stem, ".html")

    def json(self, data: Any, stem: str) -> str:
        return self.text(json.dumps(data, ensure_ascii=False, indent=1), stem, ".json")

    def csv(self, rows: list[dict], stem: str) -> str:
        return self.text(pd.DataFrame(rows).to_csv(index=False), stem, ".csv")

    def text(self, document: str, stem: str, suffix: str) -> str:
        path = self._path(stem, suffix)
        with self._writing():
            write_atomic(path, document)  # a full disk: DiskFullError naming the folder, no half file left
        self._prune(keep=path)
        return str(path)
