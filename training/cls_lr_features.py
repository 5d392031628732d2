"""CLS-LR's features: one cross-encoder pass per (query, document) pair gives its [CLS] vector and its score, cached
as .npy, so refitting the regression reads no model again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ctxir.encoders.models import load_cross_encoder, pick_device
from ctxir.rerank import head_scores

if TYPE_CHECKING:
    from training.cls_lr_args import ClsLrArgs

Pair = tuple[str, str]


def folder_fingerprint(path: str) -> str:
    """sha256 of a model folder's config and weight files: a retrained model in the same folder misses the cache."""
    digest = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.is_file() and (
            f.suffix in (".safetensors", ".bin")
            or f.name in ("config.json", "tokenizer.json", "adapter_config.json")
        ):
            digest.update(f.name.encode())
            with f.open("rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


@torch.no_grad()
def cross_encoder_pass(
    cross_encoder, pairs: Sequence[Pair], layer: int, max_length: int, batch_size: int, desc: str = "features"
) -> tuple[np.ndarray, np.ndarray]:
    """One forward pass of the cross-encoder per pair → ([CLS] of ``layer`` (N, hidden), its own logit (N,)): the
    [CLS] that ClsLrRanker reads and the score CrossEncoder.predict gives, in one pass."""
    model, tokenizer = cross_encoder.model, cross_encoder.tokenizer
    model.eval()
    device = next(model.parameters()).device
    hidden_size = model.config.hidden_size
    cls, logits = np.zeros((len(pairs), hidden_size), np.float32), np.zeros(len(pairs), np.float32)
    # Longest first, batched by length: padding is wasted compute on CPU. Results go back to input order.
    order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
    for start in tqdm(range(0, len(order), batch_size), desc=desc, mininterval=10, disable=len(order) < 200):
        idx = order[start : start + batch_size]
        enc = tokenizer(
            [pairs[i][0] for i in idx],
            [pairs[i][1] for i in idx],
            padding=True,
            truncation="longest_first",
            max_length=max_length,
            return_tensors="pt",
        ).to(device)
        out = model(**enc, output_hidden_states=True)
        # (batch, tokens, hidden) → (batch, hidden)
        cls[idx] = out.hidden_states[layer][:, 0].float().cpu().numpy()
        if getattr(out, "logits", None) is not None:  # a sequence-classification head
            scores = out.logits[:, -1]  # (batch, labels): last column = "relevant"
        else:  # a modular head (e.g. mean pooling → Dense): the cross-encoder's own modules on the tokens
            scores = head_scores(list(cross_encoder)[1:], dict(enc), out.last_hidden_state)  # (batch,)
        logits[idx] = scores.float().cpu().numpy()
    return cls, logits


class FeatureCache:
    """[CLS] + logit arrays as .npy (never pickle) in an ``EmbeddingCache`` (the one atomic .npy store), keyed by model
    fingerprint, layer, max_length and the pairs."""

    def __init__(self, root: str, model_key: str, layer: int, max_length: int):
        from ctxir.encoders import EmbeddingCache

        self.store = EmbeddingCache(Path(root).expanduser()) if root else None
        self.prefix = f"{model_key}:{layer}:{max_length}"

    def key(self, pairs: Sequence[Pair]) -> str:
        digest = hashlib.sha256(self.prefix.encode())
        for q, d in pairs:
            digest.update(q.encode() + b"\x00" + d.encode() + b"\x01")
        return digest.hexdigest()[:32]

    def get(self, pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray] | None:
        if self.store is None:
            return None
        key = self.key(pairs)
        cls, logits = self.store.get(f"{key}-cls"), self.store.get(f"{key}-logit")
        return None if cls is None or logits is None else (cls, logits)

    def put(self, pairs: Sequence[Pair], cls: np.ndarray, logits: np.ndarray) -> None:
        if self.store is None:
            return
        key = self.key(pairs)
        # EmbeddingCache writes atomically and treats an unreadable file as a miss: a run killed mid-write leaves
        # no half file that a later run would trust.
        self.store.put(f"{key}-cls", cls)
        self.store.put(f"{key}-logit", logits)


@dataclass
class Reader:
    """The cross-encoder whose [CLS] is read, how (layer, batch, token limit), its feature cache, and each pass's
    pairs and seconds (``timings``)."""

    cross_encoder: Any
    cache: FeatureCache
    layer: int
    batch_size: int
    max_length: int
    device: str
    timings: dict = field(default_factory=dict)

    def read(self, pairs: Sequence[Pair], desc: str, score_feature: bool) -> tuple[np.ndarray, np.ndarray]:
        """(feature rows (N, hidden) [CLS], + the cross-encoder's score as a last column with ``score_feature``;
        its own logits (N,)), from the cache or one pass (then cached)."""
        cached = self.cache.get(pairs)
        if cached is not None:
            print(f"{desc}: {len(pairs)} pairs from the feature cache {self.cache.store.root}")
            self.timings[desc] = {"pairs": len(pairs), "seconds": 0.0, "cached": True}
            cls, logits = cached
        else:
            start = time.perf_counter()
            cls, logits = cross_encoder_pass(
                self.cross_encoder, pairs, self.layer, self.max_length, self.batch_size, desc
            )
            seconds = time.perf_counter() - start
            per_second = round(len(pairs) / seconds, 2) if seconds > 0 else None
            self.timings[desc] = {
                "pairs": len(pairs),
                "seconds": round(seconds, 1),
                "cached": False,
                "pairs_per_second": per_second,
            }
            print(f"{desc}: {len(pairs)} pairs in {seconds:.1f} s ({per_second} pairs/s)")
            self.cache.put(pairs, cls, logits)
        # the column order ClsLrRanker reads with score_feature
        return (np.concatenate([cls, logits[:, None]], 1) if score_feature else cls), logits


def load_reader(args: ClsLrArgs, base_path: str) -> Reader:
    """The cross-encoder whose [CLS] is read, its token limit, and the feature cache keyed by its files."""
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    cross_encoder = load_cross_encoder(base_path, device)
    positions = getattr(cross_encoder.model.config, "max_position_embeddings", 512)
    max_length = min(args.max_length or cross_encoder.max_seq_length or positions, positions)
    # The anchor cross-encoder reads exactly the tokens CLS-LR reads (and CrossEncoderReranker agrees).
    cross_encoder.max_seq_length = max_length
    cache = FeatureCache(args.cache_dir, folder_fingerprint(base_path), args.layer, max_length)
    print(
        f"cross-encoder {args.base_model!r} ({base_path}) on {device}, max_length {max_length}, layer {args.layer}"
    )
    return Reader(cross_encoder, cache, args.layer, args.batch_size, max_length, device)
