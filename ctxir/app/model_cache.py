"""``ModelCache``: the models visitors load by name, bounded by a count and a memory limit."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ctxir.types import CtxirError

logger = logging.getLogger("ctxir.app")

MiB = 2**20


def model_bytes(obj: Any) -> int:
    """Bytes of the torch weights and buffers ``obj`` holds: a torch module."""
    import torch

    if isinstance(obj, tuple):
        return sum(model_bytes(part) for part in obj)
    module = obj if isinstance(obj, torch.nn.Module) else getattr(obj, "model", None)
    if not isinstance(module, torch.nn.Module):
        return 0
    tensors = [*module.parameters(), *module.buffers()]
    return int(sum(t.numel() * t.element_size() for t in tensors))


@dataclass
class _Entry:
    value: Any
    bytes: int
    pinned: bool


class ModelCache:
    """{key: model}, at most ``max_models`` unpinned models holding at most ``max_bytes`` in all.

    >>> cache = ModelCache(max_models=2, max_bytes=10 * MiB, measure=lambda value: MiB)
    >>> cache.pin("shipped", "the start's model")
    >>> for name in ("a", "b", "c"):
    ...     _ = cache.load(name, lambda name=name: f"model {name}")
    >>> cache.loaded(), cache.evicted[-1], "shipped" in cache
    (['b', 'c'], 'a', True)
    """

    def __init__(
        self, max_models: int = 2, max_bytes: int = 1024 * MiB, measure: Callable[[Any], int] = model_bytes
    ):
        if max_models < 0 or max_bytes < 0:
            raise CtxirError(
                f"model cache limits must be ≥ 0 (0 = no model loaded on demand), got max_models={max_models!r}, "
                f"max_bytes={max_bytes!r}"
            )
        self.max_models, self.max_bytes, self.measure = max_models, max_bytes, measure
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()  # guards _entries (short: never held while a model loads)
        self._load_lock = threading.RLock()  # one load at a time (re-entered by ``load`` inside ``loading``)
        self.evicted: list[Hashable] = []  # keys evicted, oldest first (the log says so too)

    def pin(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` for good: found like any other, never evicted, outside the limits."""
        with self._lock:
            self._entries[key] = _Entry(value, 0, True)

    def get(self, key: Hashable) -> Any | None:
        """The model under ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.value

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def loaded(self, pinned: bool = False) -> list:
        """The unpinned keys, least recently used first (``pinned=True``: the pinned ones)."""
        with self._lock:
            return [k for k, e in self._entries.items() if e.pinned == pinned]

    @property
    def used_bytes(self) -> int:
        """Bytes held by the unpinned models."""
        with self._lock:
            return sum(e.bytes for e in self._entries.values() if not e.pinned)

    def load(
        self,
        key: Hashable,
        loader: Callable[[], Any],
        progress: Callable[[float, str], None] | None = None,
        what: str = "model",
    ) -> Any:
        """The model under ``key``, loaded by ``loader()`` when it is not here."""
        found = self.get(key)
        if found is not None:
            return found
        self.check_open(what)
        step = progress or (lambda *_: None)
        with self.loading(progress):
            found = self.get(key)  # loaded by the request this one waited for
            if found is not None:
                return found
            step(0.1, f"loading {what}")
            value = loader()
            size = self.measure(value)
            if size > self.max_bytes:
                raise CtxirError(
                    f"{what} needs {size / MiB:,.0f} MiB, more than the {self.max_bytes / MiB:,.0f} MiB this app "
                    "keeps for models loaded on demand: choose a smaller model (or, as its deployer, raise "
                    "CTXIR_MAX_EXTRA_MB)"
                )
            with self._lock:
                self._entries[key] = _Entry(value, size, False)
                self._evict_for(key)
            step(1.0, f"{what} loaded")
            return value

    def check_open(self, what: str = "model") -> None:
        """Refuse at once (before any download) where the deployer turned loading by name off (0 models)."""
        if self.max_models == 0:
            raise CtxirError(
                f"{what} cannot be loaded: this app loads no model on demand (its deployer set the model cache to 0 "
                "models, CTXIR_MAX_EXTRA_MODELS=0); choose one of the models it offers"
            )

    @contextmanager
    def loading(self, progress: Callable[[float, str], None] | None = None) -> Iterator[None]:
        """Hold the one-load-at-a-time lock (a fetch or download before ``load`` runs under it too)."""
        if not self._load_lock.acquire(blocking=False):
            (progress or (lambda *_: None))(0.0, "waiting for another model to finish loading")
            self._load_lock.acquire()
        try:
            yield
        finally:
            self._load_lock.release()

    def _evict_for(self, key: Hashable) -> None:
        """Evict the least recently used unpinned models (never ``key``) until both limits hold (lock held)."""
        while True:
            unpinned = [(k, e) for k, e in self._entries.items() if not e.pinned]
            used = sum(e.bytes for _, e in unpinned)
            if len(unpinned) <= self.max_models and used <= self.max_bytes:
                return
            victim = next(k for k, _ in unpinned if k != key)
            del self._entries[victim]
            self.evicted.append(victim)
            logger.info("model cache: evicted %s (least recently used) to make room for %s", victim, key)
