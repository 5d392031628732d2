"""Pooling token vectors into one vector per text: the tensor core shared by the torch and ONNX backends.

``pool`` is pure (tests call it without a model); ``LayerPooling`` is the SentenceTransformer module that pools one
layer with it. ``ctxir.encoders.bi_encoder`` and ``ctxir.encoders.onnx_backend`` both import from here, so neither
imports the other.
"""

from __future__ import annotations

import torch

from ctxir.types import CtxirError

POOLINGS = ("mean", "cls", "max")


def pool(token_embeddings: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """(batch, tokens, hidden) + (batch, tokens) → (batch, hidden); padding never contributes.

    >>> tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])  # 1 text, 3 tokens, hidden size 2
    >>> mask = torch.tensor([[1, 1, 0]])  # the third token is padding
    >>> pool(tokens, mask, "mean"), pool(tokens, mask, "max"), pool(tokens, mask, "cls")
    (tensor([[2., 3.]]), tensor([[3., 4.]]), tensor([[1., 2.]]))
    """
    if mode not in POOLINGS:
        raise CtxirError(f"pooling {mode!r} is not known: use one of {', '.join(POOLINGS)}")
    if mode == "cls":
        return token_embeddings[:, 0]
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)  # (batch, tokens, 1)
    if mode == "mean":
        return (token_embeddings * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    # max: padded positions must never win, so push them to the dtype's minimum.
    filled = token_embeddings.masked_fill(mask == 0, torch.finfo(token_embeddings.dtype).min)
    return filled.max(1).values


class LayerPooling(torch.nn.Module):
    """SentenceTransformer module: pool the hidden states of one layer (0 = embeddings, -1 = last)."""

    def __init__(self, layer: int, mode: str):
        super().__init__()
        self.layer, self.mode = layer, mode

    def forward(self, features: dict, **kwargs) -> dict:
        if self.layer == -1:
            tokens = features["token_embeddings"]
        else:
            tokens = features["all_layer_embeddings"][
                self.layer
            ]  # tuple of (layers+1) × (batch, tokens, hidden)
        features["sentence_embedding"] = pool(tokens, features["attention_mask"], self.mode)
        return features
