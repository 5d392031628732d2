"""Bi-encoder encoding with a choice of pooling and layer (``LayerPooling`` only when asked), and an embedding cache."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ctxir.checks import check_choice
from ctxir.encoders.models import DEFAULT_BI_ENCODER, load_bi_encoder
from ctxir.encoders.pooling import (  # noqa: F401 (re-exported: from ctxir.encoders.bi_encoder import pool)
    POOLINGS,
    LayerPooling,
    include_prompt,
    pool,
)
from ctxir.files import (
    DiskFullError,
    atomic_path,
    cache_lock,
    cache_not_written,
    file_sha256,
    remove_temporaries,
    write_atomic,
)
from ctxir.types import Corpus, CtxirError, doc_text

BACKENDS = ("torch", "onnx-int8")
FULL_CHECK_ROWS = 200_000  # a larger memory-mapped cache is checked on a sample of rows
PART_ROWS = 4096  # a longer corpus is encoded and cached in parts of this many texts
ROLES = ("query", "document")
# the names a model's ``prompts`` may give its document prompt, as ``encode_document`` tries them
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")

logger = logging.getLogger(__name__)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the weights, recomputed each call: a model trained in place keeps its identity."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def hash_texts(digest, texts: Sequence[str], block: int = 8192) -> None:
    """``digest.update(text + NUL)`` for each text, ``block`` texts per update (the same digest, fewer calls)."""
    texts = list(texts) if not isinstance(texts, list) else texts
    for begin in range(0, len(texts), block):
        part = texts[begin : begin + block]
        digest.update(("\x00".join(part) + "\x00").encode("utf-8", "surrogatepass") if part else b"")


def model_prompts(model) -> dict[str, str]:
    """``{"query": ..., "document": ...}``: the prompts a SentenceTransformer declares ("" where none)."""
    prompts = getattr(model, "prompts", None) or {}
    document = next((prompts[name] for name in DOCUMENT_PROMPT_NAMES if prompts.get(name)), "")
    return {"query": prompts.get("query") or "", "document": document}


def set_prompts(model, query: str | None, document: str | None) -> None:
    """Make ``query`` / ``document`` (None: keep, "" none) the prompts ``model`` declares and saves."""
    prompts = dict(getattr(model, "prompts", None) or {})
    if _check_prompt(query, "query_prompt") is not None:
        prompts["query"] = query
    if _check_prompt(document, "document_prompt") is not None:
        for name in DOCUMENT_PROMPT_NAMES:
            prompts.pop(name, None)
        prompts["document"] = document
    model.prompts = prompts


def _check_prompt(prompt, name: str, own: str | None = None) -> str | None:
    if prompt is None or isinstance(prompt, str):
        return own if prompt is None else prompt
    raise CtxirError(f'{name} must be a string ("" for no prompt) or None (the model\'s own), got {prompt!r}')


def cache_root(root: str | Path | None = None) -> Path:
    """ctxir's cache folder: ``root``, else ``$CTXIR_CACHE``, else ``~/.cache/ctxir``."""
    return Path(root or os.environ.get("CTXIR_CACHE") or Path.home() / ".cache" / "ctxir").expanduser()


class EmbeddingCache:
    """.npy files keyed by model weights + pooling + layer + the exact texts, each with its sha256 beside it.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> cache = EmbeddingCache(folder.name)
    >>> key = EmbeddingCache.key({"weights": "3f2a", "pooling": "mean", "layer": -1}, ["otters", "banks"])
    >>> cache.get(key) is None
    True
    >>> cache.put(key, np.eye(2, 384, dtype=np.float32))
    >>> cache.get(key).shape
    (2, 384)
    >>> folder.cleanup()
    """

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_root() / "embeddings"

    @staticmethod
    def key(config: dict, texts: Sequence[str]) -> str:
        digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
        hash_texts(digest, texts)
        return digest.hexdigest()[:32]

    def get(self, key: str, mmap: bool = False) -> np.ndarray | None:
        """The cached (N, D) array, or None (also for a damaged file); ``mmap`` maps it read-only."""
        path = self.root / f"{key}.npy"
        if not path.is_file():
            return None
        try:
            # the checksum beside it catches a bit flip that keeps the shape and unit norms
            if not (self.root / f"{key}.{file_sha256(path)}.sha256").is_file():
                return None
            array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError):
            return None  # a torn write or a damaged file: recompute
        if mmap and hasattr(os, "posix_fadvise"):
            # read the file into the page cache in the background
            with contextlib.suppress(OSError), open(path, "rb") as handle:
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
        return array

    def lock(self, key: str):
        return cache_lock(self.root / key)

    def put(self, key: str, embeddings: np.ndarray) -> None:
        """Atomic; a full disk leaves the cache as it was (said once). Temporaries of killed writers go first."""
        remove_temporaries(self.root)
        try:
            with atomic_path(self.root / f"{key}.npy", suffix=".npy") as tmp:
                np.save(tmp, embeddings, allow_pickle=False)
                digest = file_sha256(tmp)
                # the checksum is written before the file it vouches for replaces the old one
                write_atomic(self.root / f"{key}.{digest}.sha256", digest + "\n")
        except DiskFullError as err:
            cache_not_written("embeddings", err)
            return
        for stale in self.root.glob(f"{key}.*.sha256"):
            if stale.name != f"{key}.{digest}.sha256":
                stale.unlink(missing_ok=True)


class BiEncoder:
    """Encode texts into (N, D) float32 vectors, L2-normalised so dot product = cosine.

    pooling=None and layer=None keep the model's own pooling; ``layer`` counts like ``hidden_states`` (0 = embeddings,
    -1 = last). query_prompt / document_prompt: None = the model's own (``model_prompts``), "" none.
    backend="onnx-int8": ONNX Runtime on the CPU, int8 weights, exported once into ``onnx_dir`` under the weights
    fingerprint; the model's own pooling at the last layer only.

    >>> encoder = BiEncoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu")  # doctest: +SKIP
    >>> vectors = encoder.encode(["Otters play in the river.", "Otters swim in rivers."])  # doctest: +SKIP
    >>> vectors.shape, round(float(vectors[0] @ vectors[1]), 1)  # doctest: +SKIP
    ((2, 384), 0.9)
    >>> BiEncoder(encoder.model, pooling="cls", layer=3).config["pooling"]  # doctest: +SKIP
    'cls'
    """

    def __init__(
        self,
        model=DEFAULT_BI_ENCODER,
        pooling: str | None = None,
        layer: int | None = None,
        device: str = "auto",
        cache: EmbeddingCache | bool | None = True,
        batch_size: int = 32,
        backend: str = "torch",
        onnx_dir: str | Path | None = None,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
    ):
        from sentence_transformers import SentenceTransformer

        check_choice(backend, "backend", BACKENDS)
        self.name = model if isinstance(model, str) else type(model).__name__
        self.model = load_bi_encoder(model, device) if isinstance(model, str) else model
        if not isinstance(self.model, SentenceTransformer):
            raise CtxirError(f"model must be a SentenceTransformer or a name, got {type(model).__name__}")
        own = model_prompts(self.model)
        self.query_prompt = _check_prompt(query_prompt, "query_prompt", own["query"])
        self.document_prompt = _check_prompt(document_prompt, "document_prompt", own["document"])
        modes = (getattr(module, "pooling_mode", None) for module in self.model)
        self.native_pooling = next((mode for mode in modes if isinstance(mode, str)), None)
        self.pooling = pooling or self.native_pooling or "mean"
        if self.pooling not in POOLINGS:
            raise CtxirError(f"pooling {pooling!r} is not known: use one of {', '.join(POOLINGS)}")
        config = getattr(getattr(self.model[0], "auto_model", None), "config", None)
        self.num_layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        last = layer is None or layer == -1 or layer == self.num_layers
        if not last and not 0 <= layer < self.num_layers:
            raise CtxirError(
                f"layer {layer!r} is out of range: this model has layers 0 (embeddings) to "
                f"{self.num_layers} (last); use -1 for the last"
            )
        self.layer = -1 if last else layer
        self.batch_size = batch_size
        self.cache = EmbeddingCache() if cache is True else (cache or None)
        self.backend = backend
        self.onnx_dir = Path(onnx_dir) if onnx_dir is not None else cache_root() / "onnx"
        self._onnx = None
        self._onnx_lock = threading.Lock()
        if backend == "onnx-int8":
            self._check_onnx(pooling, layer)
        self._encoder = self._build_encoder()

    def _check_onnx(self, pooling: str | None, layer: int | None) -> None:
        from ctxir.encoders.onnx_export import require

        kinds = [type(m).__name__ for m in self.model]
        if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
            raise CtxirError(
                f"backend 'onnx-int8' supports models made of Transformer, Pooling and Normalize "
                f"modules; {self.name!r} has {', '.join(kinds)}: use backend 'torch'"
            )
        if self.pooling != self.native_pooling:
            raise CtxirError(
                f"pooling {pooling!r} cannot be used with backend 'onnx-int8': it runs the model's own "
                f"pooling ({self.native_pooling!r}) at the last layer only; leave pooling unset (None, "
                f"or --pooling model) or use backend 'torch'"
            )
        if self.layer != -1:
            raise CtxirError(
                f"layer {layer!r} cannot be used with backend 'onnx-int8': it pools the last layer "
                "only; leave layer unset (None or -1) or use backend 'torch'"
            )
        require("onnxruntime", "onnx", "onnxscript")

    def _build_encoder(self):
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Normalize

        if self.pooling == self.native_pooling and self.layer == -1:
            return self.model
        transformer = self.model[0]
        if self.layer != -1:
            transformer.auto_model.config.output_hidden_states = True
        return SentenceTransformer(
            modules=[
                transformer,
                LayerPooling(self.layer, self.pooling, include_prompt(self.model)),
                Normalize(),
            ],
            device=str(self.model.device),
        )

    @property
    def config(self) -> dict:
        """What decides the vectors: the cache key and the run config written to results."""
        config = {
            "model": str(self.name),
            "weights": weights_fingerprint(self.model),
            "pooling": self.pooling,
            "layer": self.layer,
            "max_seq_length": self.model.max_seq_length,
            "normalize": True,
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
        }
        if self.backend != "torch":  # only then: existing torch cache keys stay valid
            config["backend"] = self.backend
        return config

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def prompt(self, role: str | None = None) -> str:
        """The text put before each text of ``role``: "query", "document", or None (the model's default prompt)."""
        if role is None:
            name = getattr(self.model, "default_prompt_name", None)
            return ((getattr(self.model, "prompts", None) or {}).get(name) or "") if name else ""
        if role not in ROLES:
            raise CtxirError(
                f"role {role!r} is not known: use one of {', '.join(map(repr, ROLES))}, or None for neither"
            )
        return self.query_prompt if role == "query" else self.document_prompt

    def encode(
        self, texts: Sequence[str], show_progress_bar: bool | None = None, role: str | None = None
    ) -> np.ndarray:
        """(N, D) float32; texts beyond max_seq_length tokens are truncated; ``role`` picks the prompt."""
        texts = list(texts)
        prompt = self.prompt(role)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self.backend == "onnx-int8":
            return self._onnx_encoder().encode(texts, show_progress_bar, prompt)
        embeddings = self._encoder.encode(
            texts,
            prompt=prompt,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=show_progress_bar,
        )
        return np.asarray(embeddings, dtype=np.float32)

    def _onnx_encoder(self):
        with self._onnx_lock:
            if self._onnx is None:
                from ctxir.encoders.onnx_backend import open_int8

                self._onnx = open_int8(
                    self.model,
                    self.onnx_dir / weights_fingerprint(self.model),
                    self.pooling,
                    include_prompt=include_prompt(self.model),
                    threads=torch.get_num_threads(),
                    batch_size=self.batch_size,
                )
            return self._onnx

    def cache_key(self, texts: Sequence[str], role: str | None = None) -> str:
        """Keyed by what decides the vectors (weights, pooling, layer, the prompt), not the model's name."""
        config = {
            k: v for k, v in self.config.items() if k not in ("model", "query_prompt", "document_prompt")
        }
        prompt = self.prompt(role)
        if prompt:  # only then: keys of texts without a prompt stay valid
            config["prompt"] = prompt
        return EmbeddingCache.key(config, texts)

    def encode_cached(
        self,
        texts: Sequence[str],
        show_progress_bar: bool | None = None,
        mmap: bool = False,
        key: str = "",
        role: str | None = None,
    ) -> np.ndarray:
        """``encode`` through the persistent cache; ``key``: ``cache_key(texts, role)`` if already computed."""
        texts = list(texts)
        if self.cache is None:
            return self.encode(texts, show_progress_bar, role)
        key = key or self.cache_key(texts, role)
        hit = self.cache.get(key, mmap=mmap)
        if hit is not None and _looks_encoded(hit, len(texts), self.dimension):
            return hit
        # another process encoding the same texts holds this lock: wait, then read
        with self.cache.lock(key):
            hit = self.cache.get(key, mmap=mmap)
            if hit is not None and _looks_encoded(hit, len(texts), self.dimension):
                return hit
            embeddings = self._encode_in_parts(texts, key, show_progress_bar, role)
            self.cache.put(key, embeddings)
            for part in self.cache.root.glob(f"{key}-part*"):
                part.unlink(missing_ok=True)
        return embeddings

    def _encode_in_parts(
        self, texts: list[str], key: str, show_progress_bar: bool | None, role: str | None
    ) -> np.ndarray:
        """``encode`` PART_ROWS texts at a time, each part cached: an interrupted run resumes."""
        if len(texts) <= PART_ROWS:
            return self.encode(texts, show_progress_bar, role)
        embeddings = np.empty((len(texts), self.dimension), dtype=np.float32)  # (N, D), filled part by part
        starts = range(0, len(texts), PART_ROWS)
        kept = 0
        for number, start in enumerate(starts):
            chunk = texts[start : start + PART_ROWS]
            part_key = f"{key}-part{number:05d}"
            part = self.cache.get(part_key)
            if part is not None and _looks_encoded(part, len(chunk), self.dimension):
                kept += 1
            else:
                if show_progress_bar is not False:
                    logger.info("encoding part %d of %d (%d texts)", number + 1, len(starts), len(chunk))
                part = self.encode(chunk, show_progress_bar, role)
                self.cache.put(part_key, part)
            embeddings[start : start + len(chunk)] = part
        if kept:
            logger.info("%d of %d parts were cached by an earlier, interrupted run", kept, len(starts))
        return embeddings

    def encode_corpus(
        self, corpus: Corpus, show_progress_bar: bool | None = None
    ) -> tuple[list[str], np.ndarray]:
        """The corpus's ids and their documents' vectors (the document prompt, cached)."""
        ids = list(corpus)
        return ids, self.encode_cached([doc_text(corpus[i]) for i in ids], show_progress_bar, role="document")


def _looks_encoded(embeddings: np.ndarray, rows: int, dimension: int) -> bool:
    """A cached array is what ``encode`` wrote: (rows, dimension) float32, finite, unit rows."""
    if embeddings.shape != (rows, dimension) or embeddings.dtype != np.float32:
        return False
    if isinstance(embeddings, np.memmap) and rows > FULL_CHECK_ROWS:
        # mapped and large: 64 evenly spaced runs of 256 rows, not the whole file
        spans = [(int(b), int(b) + 256) for b in np.linspace(0, rows - 256, 64)]
    else:
        spans = [(b, b + 65_536) for b in range(0, rows, 65_536)]
    for begin, end in spans:
        block = np.asarray(embeddings[begin:end])  # (≤ 65,536, dimension)
        norms = np.sqrt(np.einsum("nd,nd->n", block, block))
        if not (np.isfinite(norms).all() and np.abs(norms - 1.0).max() < 1e-3):
            return False
    return True
