"""Pooling token vectors into one vector per text: the tensor core of the torch and ONNX backends."""

from __future__ import annotations

import torch

from ctxir.types import CtxirError

POOLINGS = ("mean", "cls", "max")


def pool(
    token_embeddings: torch.Tensor, attention_mask: torch.Tensor, mode: str, prompt_length: int = 0
) -> torch.Tensor:
    """(batch, tokens, hidden) + (batch, tokens) → (batch, hidden); padding never contributes, nor with
    ``prompt_length`` each text's first tokens (``Pooling(include_prompt=False)``).

    >>> tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])  # 1 text, 3 tokens, hidden size 2
    >>> mask = torch.tensor([[1, 1, 0]])  # the third token is padding
    >>> pool(tokens, mask, "mean"), pool(tokens, mask, "max"), pool(tokens, mask, "cls")
    (tensor([[2., 3.]]), tensor([[3., 4.]]), tensor([[1., 2.]]))
    >>> pool(tokens, mask, "mean", prompt_length=1), pool(tokens, mask, "cls", prompt_length=1)
    (tensor([[3., 4.]]), tensor([[3., 4.]]))
    """
    if mode not in POOLINGS:
        raise CtxirError(f"pooling {mode!r} is not known: use one of {', '.join(POOLINGS)}")
    if prompt_length:
        attention_mask = without_prompt(attention_mask, prompt_length)
    if mode == "cls":
        if prompt_length:
            first = attention_mask.to(torch.int).argmax(dim=1)  # (batch,): the first token kept
            return token_embeddings[torch.arange(len(first), device=first.device), first]
        return token_embeddings[:, 0]
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)  # (batch, tokens, 1)
    if mode == "mean":
        return (token_embeddings * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    filled = token_embeddings.masked_fill(mask == 0, torch.finfo(token_embeddings.dtype).min)
    return filled.max(1).values


def without_prompt(attention_mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """``attention_mask`` with each text's first ``prompt_length`` tokens (after any left padding) off.

    >>> without_prompt(torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]]), 1)
    tensor([[0, 1, 1, 0],
            [0, 0, 1, 1]])
    """
    mask = attention_mask.clone()
    pads = mask.to(torch.int32).argmax(dim=1)  # (batch,): left padding before each text
    positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)  # (1, tokens)
    mask[positions < (pads + prompt_length).unsqueeze(1)] = 0
    return mask


def include_prompt(model) -> bool:
    return all(getattr(module, "include_prompt", True) for module in model if hasattr(module, "pooling_mode"))


def prompt_length(features: dict) -> int:
    """The prompt's length in tokens in ``features`` (an int, or a tensor per text when batched), 0 without one."""
    length = features.get("prompt_length")
    if isinstance(length, torch.Tensor):
        return int(length.reshape(-1)[0].item()) if length.numel() else 0
    return int(length or 0)


class LayerPooling(torch.nn.Module):
    """SentenceTransformer module: pool the hidden states of one layer (0 = embeddings, -1 = last)."""

    def __init__(self, layer: int, mode: str, include_prompt: bool = True):
        super().__init__()
        self.layer, self.mode, self.include_prompt = layer, mode, include_prompt

    def forward(self, features: dict, **kwargs) -> dict:
        if self.layer == -1:
            tokens = features["token_embeddings"]
        else:
            tokens = features["all_layer_embeddings"][self.layer]  # (batch, tokens, hidden)
        length = 0 if self.include_prompt else prompt_length(features)
        features["sentence_embedding"] = pool(tokens, features["attention_mask"], self.mode, length)
        return features
