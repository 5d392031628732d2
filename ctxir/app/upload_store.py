"""``UploadStore``: the visitors' uploaded corpora, kept per session, least recently used out first."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ctxir.app.corpus_index import CorpusIndex
from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")

Owner = str | None  # whose uploads: a Gradio session hash; None = the local Python caller (tests, notebooks)


class UploadStore:
    """The uploaded corpora of every visitor of one running app, by owner (the Gradio session that uploaded
    them)."""

    def __init__(self, max_corpora: int, max_total: int, idle_s: float):
        self.max_corpora, self.max_total, self.idle_s = max_corpora, max_total, idle_s
        self.clock: Callable[[], float] = time.monotonic  # tests replace it to age owners
        self._lock = threading.Lock()
        self._uploads: dict[Owner, OrderedDict[str, CorpusIndex]] = {}
        self._last_seen: dict[Owner, float] = {}  # only owners that hold uploads

    def names(self, owner: Owner) -> list[str]:
        """``owner``'s uploads, least recently used first."""
        with self._lock:
            return list(self._uploads.get(owner, {}))

    def touch(self, owner: Owner) -> None:
        """``owner`` is active (any request): their uploads are not idle."""
        with self._lock:
            if owner in self._uploads:
                self._last_seen[owner] = self.clock()

    def get(self, owner: Owner, name: str) -> CorpusIndex | None:
        """``owner``'s upload ``name`` (now their most recently used), or None; the lookup marks ``owner`` active."""
        with self._lock:
            own = self._uploads.get(owner)
            if own is None:
                return None
            self._last_seen[owner] = self.clock()
            if name not in own:
                return None
            own.move_to_end(name)
            return own[name]

    def _plan(self, owner: Owner, name: str) -> tuple[list[str], list[tuple[Owner, str]]]:
        """(the owner's own uploads to drop, other idle owners' uploads to evict) to add ``name``; raises when the
        app is full of corpora of active owners. Changes nothing. Call with the lock held."""
        own = self._uploads.get(owner, OrderedDict())
        if name in own:
            return [], []  # a re-upload replaces itself
        own_drops = list(own)[: max(0, len(own) - self.max_corpora + 1)]
        total = sum(len(corpora) for corpora in self._uploads.values()) - len(own_drops)
        excess = total + 1 - self.max_total
        evict: list[tuple[Owner, str]] = []
        if excess > 0:
            now = self.clock()
            idle = sorted(
                (o for o, seen in self._last_seen.items() if o != owner and now - seen >= self.idle_s),
                key=self._last_seen.__getitem__,
            )  # least recently active first
            for other in idle:
                evict.extend((other, n) for n in self._uploads.get(other, {}))
                if len(evict) >= excess:
                    break
            if len(evict) < excess:
                raise CtxirError(
                    f"this app already holds {total} uploaded corpora of visitors who are using them, its limit: "
                    "nothing of theirs is removed while they are active. Try again in a few minutes (uploads are "
                    f"released when a visitor closes the page, or after {self.idle_s / 60:g} minutes without "
                    "use when room is needed), or run ctxir on your own machine: `python app.py --corpus YOUR_FILE`"
                )
            evict = evict[:excess]
        return own_drops, evict

    def check_room(self, owner: Owner, name: str = "") -> None:
        """Refuse early (before the minutes of indexing) when an upload by ``owner`` could not be kept."""
        with self._lock:
            self._plan(owner, name)

    def add(self, index: CorpusIndex, owner: Owner = None) -> list[str]:
        """Keep an uploaded corpus for ``owner``; returns the names of the owner's own older uploads dropped to stay
        within ``max_corpora``. Raises CtxirError (and keeps everything) when the app is full."""
        with self._lock:
            own_drops, evict = self._plan(owner, index.name)
            for other, name in evict:
                del self._uploads[other][name]
                logger.info("released an upload of an idle visitor (%d left app-wide)", self._count())
                if not self._uploads[other]:
                    del self._uploads[other]
                    self._last_seen.pop(other, None)
            own = self._uploads.setdefault(owner, OrderedDict())
            for name in own_drops:
                del own[name]
            own[index.name] = index
            own.move_to_end(index.name)
            self._last_seen[owner] = self.clock()
            return own_drops

    def release(self, owner: Owner) -> list[str]:
        """Forget every upload of ``owner`` (their session ended); returns the names released."""
        with self._lock:
            released = list(self._uploads.pop(owner, {}))
            self._last_seen.pop(owner, None)
        if released:
            logger.info("released %d upload(s) of a session that ended", len(released))
        return released

    def _count(self) -> int:
        return sum(len(corpora) for corpora in self._uploads.values())

    @property
    def count(self) -> int:
        """Uploaded corpora in memory, all owners together."""
        with self._lock:
            return self._count()
