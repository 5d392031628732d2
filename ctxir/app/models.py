"""``AppModels``: the models loaded once, and those a visitor loads by name (``ModelCache``, bounded)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ctxir import kinds
from ctxir.app.config import AppConfig, Progress, flag, unavailable_hint
from ctxir.app.text import md_code
from ctxir.checks import check_choice, check_int
from ctxir.encoders.bi_encoder import model_prompts
from ctxir.encoders.internals import inspect_text
from ctxir.encoders.models import load_bi_encoder, load_transformer
from ctxir.encoders.on_demand import (
    check_model_name,
    fetch_model,
    hub_offline,
    is_hub_id,
    load_model_fresh,
    model_role,
    remote_code_needed,
)
from ctxir.rerank.registry import CLS_LR, CROSS_ENCODER, load_reranker, reranker_choices
from ctxir.rerank.registry import RERANKERS as KINDS
from ctxir.types import CtxirError, Internals

logger = logging.getLogger("ctxir.app")

MiB = 2**20


def model_bytes(obj: Any) -> int:
    """Bytes of the torch weights and buffers ``obj`` holds: a torch module."""
    import torch

    module = obj if isinstance(obj, torch.nn.Module) else getattr(obj, "model", None)
    if not isinstance(module, torch.nn.Module):
        return 0
    return int(sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers())))


@dataclass
class _Entry:
    value: Any
    bytes: int
    pinned: bool


class ModelCache:
    """{key: model}, at most ``max_models`` unpinned models holding at most ``max_bytes`` in all."""

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
            if key not in self._entries:
                return None
            self._entries.move_to_end(key)
            return self._entries[key].value

    def loaded(self, pinned: bool = False) -> list:
        """The unpinned keys, least recently used first (``pinned=True``: the pinned ones)."""
        with self._lock:
            return [k for k, e in self._entries.items() if e.pinned == pinned]

    def load(
        self, key: Hashable, loader: Callable[[], Any], progress: Progress | None = None, what: str = "model"
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
        """Refuse (before any download) where the deployer turned loading by name off."""
        if self.max_models == 0:
            raise CtxirError(
                f"{what} cannot be loaded: this app loads no model on demand (its deployer set the model cache to 0 "
                "models, CTXIR_MAX_EXTRA_MODELS=0); choose one of the models it offers"
            )

    @contextmanager
    def loading(self, progress: Progress | None = None) -> Iterator[None]:
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


POOLINGS = ("mean", "cls", "max")
BI_ENCODER = kinds.BI_ENCODER  # the bi-encoder's key among the inspectable models and "Explain with" choices


@dataclass
class Inspectable:
    """A tokenizer + eager-attention transformer body, for token embeddings and attention views."""

    name: str
    tokenizer: Any
    model: Any

    @classmethod
    def load(cls, name: str, device: str, path: str | None = None) -> Inspectable:
        return cls(name, *load_transformer(path or name, device, attentions=True))


@dataclass
class AppModels:
    """The loaded models; ``unavailable``: {kind: why not} for each re-ranker kind that did not load."""

    bi_encoder: Any  # SentenceTransformer
    bi_encoder_name: str
    inspect: dict[str, Inspectable]  # BI_ENCODER (always), each loaded kind that is ``inspectable``
    rerankers: dict[str, Any] = field(default_factory=dict)  # kind → ctxir.Reranker
    unavailable: dict[str, str] = field(default_factory=dict)  # kind → why it is not loaded
    cache: ModelCache = field(default_factory=ModelCache)  # those loaded ``on_demand``; the ones above pinned
    device: str = "cpu"
    allow_remote_code: bool = False  # AppConfig.allow_remote_code
    allow_paths: bool = True  # AppConfig.allow_model_paths

    @property
    def loaded(self) -> list[str]:
        """The kinds loaded, in the registry's order: what the app offers."""
        return [kind for kind in KINDS if kind in self.rerankers]

    def why_not(self, kind: str) -> str:
        """'' when ``kind`` is loaded, else why it is not."""
        given = self.unavailable.get(kind) or f"no {KINDS[kind].label} re-ranker was given"
        return "" if kind in self.rerankers else given

    @classmethod
    def load(cls, config: AppConfig, progress: Progress | None = None) -> AppModels:
        """Load every model once (a missing bi-encoder is fatal, a missing re-ranker is logged)."""
        step = progress or (lambda *_: None)
        step(0.0, f"loading bi-encoder {config.bi_encoder}")
        inspect = {BI_ENCODER: Inspectable.load(config.bi_encoder, config.device)}
        models = cls(load_bi_encoder(config.bi_encoder, config.device), config.bi_encoder, inspect)
        models.configure(config)
        for i, kind in enumerate(KINDS.values()):
            model = config.reranker_model(kind.name)
            if not model or model.lower() == "none":
                given = f"the app was started with {flag(kind)} none"
                shipped = f"no {kind.label} re-ranker was given and this installation ships none"
                models.unavailable[kind.name] = given if model else shipped
                continue
            step(0.4 + 0.3 * i / len(KINDS), f"loading {kind.label} re-ranker {model}")
            try:
                ok, why = kind.available(model)
                if not ok and (not is_hub_id(model) or hub_offline()):  # not here, and not downloadable
                    raise CtxirError(why)
                ranker = load_reranker(kind.name, model, config.device, download=not ok)
                if config.rerank_backend is not None and hasattr(ranker, "backend"):
                    ranker.backend = config.rerank_backend  # a cross-encoder's scoring
                # an onnx backend: exported before serving (torch's exporter is unsafe beside other threads)
                if getattr(ranker, "backend", "torch").startswith("onnx"):
                    ranker.onnx_scorer()
                if kind.inspectable:
                    inspect[kind.name] = Inspectable.load(model, config.device)
                models.rerankers[kind.name] = ranker
                if kind.name == CROSS_ENCODER.name:
                    models.cache.pin((CROSS_ENCODER.name, model), ranker)
            except CtxirError as err:
                models.unavailable[kind.name] = str(err)
                logger.warning("%s re-ranker unavailable, the app starts without it: %s", kind.label, err)
        return models

    def configure(self, config: AppConfig) -> AppModels:
        """The limits and permissions of models loaded on demand, from ``config``; the bi-encoder pinned."""
        self.cache = ModelCache(config.max_extra_models, int(config.max_extra_mb * MiB))
        self.device = config.device
        self.allow_remote_code, self.allow_paths = config.allow_remote_code, config.allow_model_paths
        self.cache.pin((BI_ENCODER, self.bi_encoder_name), self.bi_encoder)
        self.cache.pin(("inspect", self.bi_encoder_name), self.inspect[BI_ENCODER])
        return self

    @classmethod
    def from_objects(
        cls,
        bi_encoder,
        bi_encoder_name: str = BI_ENCODER,
        cross_encoder=None,
        cls_lr=None,
        device: str = "cpu",
        rerankers: dict[str, Any] | None = None,
    ) -> AppModels:
        """Wrap models already in memory (tests, notebooks): a SentenceTransformer and re-rankers by kind."""
        path = str(bi_encoder[0].auto_model.config._name_or_path or bi_encoder_name)
        inspect = {BI_ENCODER: Inspectable.load(bi_encoder_name, device, path)}
        models = cls(bi_encoder, bi_encoder_name, inspect, device=device)
        models.cache.pin((BI_ENCODER, bi_encoder_name), bi_encoder)
        given = {CROSS_ENCODER.name: cross_encoder, CLS_LR.name: cls_lr, **(rerankers or {})}
        for name in given:
            check_choice(name, "re-ranker kind", tuple(KINDS))
        for kind in KINDS.values():
            if given.get(kind.name) is None:
                models.unavailable[kind.name] = f"no {kind.label} re-ranker was given"
                continue
            models.rerankers[kind.name] = kind.wrap(given[kind.name])
            if kind.inspectable:
                inspect[kind.name] = _inspectable_body(models.rerankers[kind.name], device)
        return models

    def reranker(self, name: str, progress: Progress | None = None):
        """The loaded re-ranker ``name`` ("none" → None), or a cross-encoder's Hub id loaded on demand."""
        if name not in reranker_choices() and self.loadable(name):
            return self.on_demand(name, CROSS_ENCODER.name, progress, "re-ranker")
        try:
            check_choice(name, "re-ranker", reranker_choices())
        except CtxirError as err:
            raise CtxirError(f"{err}, or a cross-encoder's Hub id (org/name) to load it on demand") from None
        if name == "none":
            return None
        if name not in self.rerankers:
            kind, offered = KINDS[name], " or ".join(map(repr, ["none", *self.loaded]))
            raise CtxirError(
                f"the {kind.label} re-ranker is not available ({self.why_not(name).rstrip('.')}). "
                f"{unavailable_hint(kind)}. Meanwhile choose re-ranker {offered}."
            )
        return self.rerankers[name]

    def inspectable(self, name: str, progress: Progress | None = None) -> Inspectable:
        """A model the inspection views read: one loaded at start by its key, else one by Hub id, loaded now."""
        if name not in self.inspect and name not in KINDS and self.loadable(name):
            return self.on_demand(name, "inspect", progress, "model")
        if name not in self.inspect:
            loaded = ", ".join(f"{k!r} ({v.name})" for k, v in self.inspect.items())
            kind = KINDS.get(name)
            hint = (
                f" The {kind.label} re-ranker is not loaded: start the app with {flag(kind)} PATH."
                if kind is not None and kind.inspectable
                else ""
            )
            raise CtxirError(
                f"model {name!r} is not loaded in this app: choose one of {loaded}, or type a model's Hub id "
                f"(org/name) to load it.{hint} To inspect another model from the start, restart the app with "
                "--bi-encoder NAME_OR_FOLDER"
            )
        return self.inspect[name]

    def loadable(self, name: Any) -> bool:
        """``name`` has the shape of a Hub id, or (where paths are allowed) names a local folder."""
        try:
            check_model_name(name, "model", self.allow_paths)
        except CtxirError:
            return False
        return True

    def on_demand(
        self, name: str, role: str | None = None, progress: Progress | None = None, what: str = "model"
    ):
        """Model ``name`` (a Hub id or allowed folder) from the bounded ``cache``, loaded now if needed."""
        name = check_model_name(name, what, self.allow_paths)
        for each in [role] if role else [CROSS_ENCODER.name, BI_ENCODER]:
            found = self.cache.get((each, name))
            if found is not None:
                return found if role else (each, found)
        self.cache.check_open(f"{what} {name!r}")
        progress = progress or (lambda *_: None)
        with self.cache.loading(progress):  # fetching (a download) is part of the one load at a time
            progress(0.05, f"fetching {name} (downloaded when it is not in the local Hugging Face cache)")
            folder = fetch_model(
                name, what, allow_remote_code=self.allow_remote_code, allow_paths=self.allow_paths
            )
            found_role = model_role(folder)
            wanted = role or found_role
            if wanted == CROSS_ENCODER.name and found_role != CROSS_ENCODER.name:
                raise CtxirError(
                    f"{what} {name!r} is a bi-encoder (it embeds each text alone; it scores no pair read together): "
                    "compare it in Pair scoring or the Token embeddings tab, and re-rank with a cross-encoder's Hub "
                    f"id such as {KINDS[CROSS_ENCODER.name].fallback!r}"
                )
            # reached only where the deployer allowed it (fetch_model)
            trust = bool(remote_code_needed(folder))
            model = self.cache.load(
                (wanted, name), lambda: self._load_fresh(wanted, name, trust), progress, f"{what} {name!r}"
            )
        return model if role else (wanted, model)

    def _load_fresh(self, role: str, name: str, trust: bool):
        if role == "inspect":
            return Inspectable(name, *load_model_fresh("inspect", name, self.device, trust))
        model = load_model_fresh(role, name, self.device, trust)
        if role != CROSS_ENCODER.name:
            return model
        from ctxir.rerank.calibration import calibration_for
        from ctxir.rerank.rankers import CrossEncoderReranker, both_orders_for
        from ctxir.rerank.registry import alone_below_bm25, passages_for, stage_fusion_for

        # read as its folder says, as if named by a flag; torch: ONNX exports are for the models loaded at start
        reranker = CrossEncoderReranker(
            model, self.device, passages=passages_for(name), both_orders=both_orders_for(name)
        )
        reranker.model_name, reranker.calibration = name, calibration_for(name)
        reranker.stage_fusion, reranker.fused_only = stage_fusion_for(name), alone_below_bm25(name)
        return reranker

    def inspect_choices(self) -> list[str]:
        """The models the inspection views offer: those loaded at start, then those loaded by name now."""
        return [*self.inspect, *self.extra_models("inspect")]

    def extra_models(self, role: str) -> list[str]:
        """The names of the models of ``role`` loaded on demand now, least recently used first."""
        return [name for each, name in self.cache.loaded() if each == role]

    @property
    def num_layers(self) -> int:
        return int(self.inspect[BI_ENCODER].model.config.num_hidden_layers)

    def inspect_input(
        self, model: str, text: str, text_pair: str | None = None, *, max_tokens: int
    ) -> Internals:
        """One forward pass of a loaded model over ``text`` (and ``text_pair``), refused above ``max_tokens``."""
        item, text_pair = self.inspectable(model), text_pair or None
        n_tokens = len(item.tokenizer(text, text_pair)["input_ids"])
        if n_tokens > max_tokens:
            raise CtxirError(
                f"the input has {n_tokens} tokens but this view accepts at most {max_tokens}: shorten the text"
                f" (it begins {text[:40]!r})"
            )
        return inspect_text(
            text, text_pair, model=item.model, tokenizer=item.tokenizer, max_tokens=max_tokens
        )

    @property
    def num_heads(self) -> int:
        return int(self.inspect[BI_ENCODER].model.config.num_attention_heads)


def check_layer(value: Any, n_layers: int, what: str = "layer") -> int:
    """-1 means the last layer; layers count like hidden_states (0 = embeddings)."""
    layer = check_int(value, what, -1, n_layers)
    return n_layers if layer == -1 else layer


def _inspectable_body(reranker, device: str) -> Inspectable:
    """A cross-encoder's body with eager attention: reloaded by name (with a modular model's top layers)."""
    body, name = reranker.model[0].auto_model, getattr(reranker, "model_name", None)
    # CrossEncoderReranker names an object built in memory by its class
    by_name = isinstance(name, str) and name != type(reranker.model).__name__
    path = name if by_name else str(body.config._name_or_path)
    try:
        return Inspectable.load(path, device)
    except CtxirError:  # not loadable by name (built in memory): its own body, attention switched when read
        return Inspectable(path, reranker.model.tokenizer, body)


def chosen_prompts(own: dict, query_prompt, document_prompt, max_chars: int) -> dict:
    """``own`` ``{"query": ..., "document": ...}`` with each prompt given in its place."""
    prompts = dict(own)
    for role, prompt in (("query", query_prompt), ("document", document_prompt)):
        if prompt is None:
            continue
        if not isinstance(prompt, str) or len(prompt) > max_chars:
            raise CtxirError(
                f"{role} prompt {prompt!r:.60} must be text of at most {max_chars:,} "
                "characters (kept as typed, spaces included; empty for none)"
            )
        prompts[role] = prompt
    return prompts


def prompts_said(prompts: dict | None, who: str = "The bi-encoder") -> str:
    """The sentence saying what ``who`` put before the query and each document; '' where it put nothing."""
    named = {"query": "the query", "document": "each document"}
    shown = " and ".join(f"{named[role]} after {md_code(p)}" for role, p in (prompts or {}).items() if p)
    return f"{who} encoded {shown}." if shown else ""


def prompts_named(model) -> str:
    """The status line's note of a bi-encoder's own prompts."""
    shown = ", ".join(f"{role} {md_code(p)}" for role, p in model_prompts(model).items() if p)
    return f"prompts: {shown}" if shown else "no prompts"
