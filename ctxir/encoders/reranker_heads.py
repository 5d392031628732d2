"""Re-ranker heads needing only torch and sentence-transformers >= 6: copied unchanged into every Hub repo ctxir
stages, where ``CrossEncoder(repo_id, trust_remote_code=True)`` loads them with no ctxir installed."""

from __future__ import annotations

import json
import math
import os
from typing import ClassVar

import torch
from sentence_transformers.base.modules import Module


def segment_means(
    tokens: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean token vector of each segment of ``[CLS] a [SEP] b [SEP]`` (token type 0 / 1), padding left out."""
    mask = attention_mask.to(tokens.dtype)
    types = token_type_ids.to(tokens.dtype)
    return tuple(
        (tokens * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True).clamp(min=1)
        for m in (mask * (1 - types), mask * types)
    )


def segment_cosine_scores(
    query: torch.Tensor,
    document: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    linear: torch.nn.Linear | None = None,
) -> torch.Tensor:
    """(batch,) = scale · cos(query, document) + bias [+ linear([q; d; |q − d|])]."""
    score = scale * torch.nn.functional.cosine_similarity(query, document, dim=-1) + bias
    if linear is not None:
        score = score + linear(torch.cat([query, document, (query - document).abs()], dim=-1)).squeeze(-1)
    return score


def hub_file_args(subfolder: str, kwargs: dict) -> dict:
    """The arguments a sentence-transformers ``Module.load`` passes on to find its files."""
    keys = ("token", "cache_folder", "revision", "local_files_only")
    return {"subfolder": subfolder, **{key: kwargs[key] for key in keys if key in kwargs}}


def load_head_files(
    cls, path: str, subfolder: str, kwargs: dict, config: str, weights: str
) -> tuple[dict, str, str]:
    """(the JSON config, its path, the weights' path) of a module ``cls`` saved as the files ``config`` + ``weights``."""
    hub = hub_file_args(subfolder, kwargs)
    config_path, weights_path = (cls.load_file_path(path, name, **hub) for name in (config, weights))
    if config_path is None or weights_path is None:
        raise ValueError(f"{path!r} has no {config} and {weights}: it was not saved by {cls.__name__}")
    with open(config_path, encoding="utf-8") as f:
        return json.load(f), config_path, weights_path


# RBF kernels over query-document token cosines, beside the exact match of token ids
MATCH_KERNELS: tuple[float, ...] = (0.9, 0.7, 0.5, 0.3)


def term_match_per_token(
    tokens: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor,
    weights: torch.Tensor,
    kernels: tuple[float, ...] = MATCH_KERNELS,
    sigma: float = 0.1,
) -> torch.Tensor:
    """(batch, tokens, 1 + len(kernels)): each query token's term-match features (0 elsewhere); summed over tokens,
    the pair's (CEDR-KNRM style). Token i of segment a: w_i · log(1 + #{j in b: id_j = id_i}) / |a| and, per kernel k,
    w_i · log(1 + Σ_j exp(−(cos(t_i, t_j) − μ_k)² / 2σ²)) / |a|, j over the document tokens."""
    mask = attention_mask.to(tokens.dtype)
    types = token_type_ids.to(tokens.dtype)
    q_mask, d_mask = mask * (1 - types), mask * types  # (batch, tokens)
    exact = (input_ids.unsqueeze(2) == input_ids.unsqueeze(1)).to(tokens.dtype)  # (batch, tokens, tokens)
    counts = [exact]
    if kernels:
        unit = torch.nn.functional.normalize(tokens, dim=-1)
        cosine = unit @ unit.transpose(1, 2)  # (batch, tokens, tokens)
        counts += [torch.exp(-((cosine - mu) ** 2) / (2 * sigma**2)) for mu in kernels]
    per_token = torch.stack([(c * d_mask.unsqueeze(1)).sum(-1) for c in counts], dim=-1)  # (batch, tokens, K)
    share = (weights * q_mask / q_mask.sum(1, keepdim=True).clamp(min=1)).unsqueeze(-1)  # (batch, tokens, 1)
    return torch.log1p(per_token) * share


class SegmentCosineHead(Module):
    """Writes ``scores`` (batch, 1): ``segment_cosine_scores`` of the segments' means [+ a term-match term]."""

    config_keys: ClassVar[list[str]] = ["hidden_size", "init_scale", "term_match"]
    config_file_name = "config.json"

    def __init__(self, hidden_size: int, init_scale: float = 20.0, term_match: bool = False):
        super().__init__()
        self.hidden_size, self.init_scale = int(hidden_size), float(init_scale)
        # scale 20 turns cosines (≈ 0.2–0.8 here) into logits a softmax over candidates can separate
        self.scale = torch.nn.Parameter(torch.tensor(self.init_scale))
        self.bias = torch.nn.Parameter(torch.zeros(()))
        # zero-initialised: the untrained head scores exactly the segment cosine
        self.linear = torch.nn.Linear(3 * self.hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.term_match = False
        if term_match:
            self.add_term_match()

    def add_term_match(self) -> None:
        """Add the term-match term, zero-initialised: the scores stay the same until it trains."""
        if self.term_match:
            return
        self.term_match = True
        # importance softplus(v · token + c) starts at 1 for every token
        self.term_weight = torch.nn.Linear(self.hidden_size, 1, device=self.scale.device)
        torch.nn.init.zeros_(self.term_weight.weight)
        torch.nn.init.constant_(self.term_weight.bias, math.log(math.e - 1))
        self.term_linear = torch.nn.Linear(1 + len(MATCH_KERNELS), 1, bias=False, device=self.scale.device)
        torch.nn.init.zeros_(self.term_linear.weight)

    def forward(self, features: dict, **kwargs) -> dict:
        if features.get("token_type_ids") is None:
            raise ValueError(
                "SegmentCosineHead needs token_type_ids to tell the query from the document: use a "
                "BERT-style body whose tokenizer marks pair segments (e.g. all-MiniLM-L6-v2)"
            )
        tokens, mask = features["token_embeddings"], features["attention_mask"]
        types = features["token_type_ids"]
        query, document = segment_means(tokens, mask, types)  # (batch, hidden) each
        scores = segment_cosine_scores(query, document, self.scale, self.bias, self.linear)  # (batch,)
        if self.term_match:
            if features.get("input_ids") is None:
                raise ValueError(
                    "SegmentCosineHead(term_match=True) needs input_ids to match query terms to the "
                    "document's: pass the tokenizer's features through the body unchanged"
                )
            scores = scores + self.term_match_scores(features).sum(1)
        features["scores"] = scores.unsqueeze(1)  # (batch, 1)
        return features

    def term_importance(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, tokens) = softplus(v · token + c)."""
        return torch.nn.functional.softplus(self.term_weight(tokens)).squeeze(-1)

    def term_match_scores(self, features: dict) -> torch.Tensor:
        """(batch, tokens): each query token's part of the term-match term."""
        tokens = features["token_embeddings"]
        weights = self.term_importance(tokens)  # (batch, tokens)
        shares = term_match_per_token(
            tokens, features["input_ids"], features["attention_mask"], features["token_type_ids"], weights
        )  # (batch, tokens, 1 + kernels)
        return self.term_linear(shares).squeeze(-1)

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> SegmentCosineHead:
        hub = hub_file_args(subfolder, kwargs)
        model = cls(**cls.load_config(model_name_or_path, **hub))
        return cls.load_torch_weights(model_name_or_path, model=model, **hub)


# CLS-LR's saved form (ClsLrRanker.save), read in place
CLS_LR_CONFIG = "cls_lr_config.json"
CLS_LR_WEIGHTS = "cls_lr.safetensors"


def cls_lr_logit(features, coef, intercept):
    """(batch,) the CLS-LR logit features · coef + intercept (numpy or torch): the one scoring rule of CLS-LR."""
    return features @ coef + intercept


class ClsLrHead(Module):
    """Writes ``scores`` (batch, 1) = coef · [CLS vector; the previous head's score if ``score_feature``] + intercept."""

    def __init__(self, hidden_size: int, score_feature: bool = False):
        super().__init__()
        self.hidden_size, self.score_feature = int(hidden_size), bool(score_feature)
        self.coef = torch.nn.Parameter(torch.zeros(self.hidden_size + self.score_feature))
        self.intercept = torch.nn.Parameter(torch.zeros(1))

    def forward(self, features: dict, **kwargs) -> dict:
        cls = features["token_embeddings"][:, 0].float()  # (batch, hidden): the last layer's [CLS]
        if self.score_feature:
            score = features["scores"].reshape(len(cls), -1)[:, -1:].float()  # (batch, 1)
            cls = torch.cat([cls, score], dim=1)
        features["scores"] = cls_lr_logit(cls, self.coef, self.intercept).unsqueeze(1)  # (batch, 1)
        return features

    def save(self, output_path: str, *args, **kwargs) -> None:
        from safetensors.torch import save_file

        os.makedirs(output_path, exist_ok=True)
        tensors = {"coef": self.coef.detach().cpu(), "intercept": self.intercept.detach().cpu()}
        save_file(tensors, os.path.join(output_path, CLS_LR_WEIGHTS))
        config = {"format": "ctxir-cls-lr/1", "hidden_size": self.hidden_size, "layer": -1}
        with open(os.path.join(output_path, CLS_LR_CONFIG), "w", encoding="utf-8") as f:
            json.dump({**config, "score_feature": self.score_feature}, f, indent=2)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> ClsLrHead:
        from safetensors.torch import load_file

        config, config_path, weights_path = load_head_files(
            cls, model_name_or_path, subfolder, kwargs, CLS_LR_CONFIG, CLS_LR_WEIGHTS
        )
        if config.get("layer", -1) != -1:
            raise ValueError(
                f"ClsLrHead reads the last layer's [CLS]; {config_path!r} says layer {config['layer']!r}"
            )
        head = cls(config["hidden_size"], bool(config.get("score_feature", False)))
        tensors = load_file(weights_path)
        with torch.no_grad():
            head.coef.copy_(tensors["coef"].reshape(-1).float())
            head.intercept.copy_(tensors["intercept"].reshape(-1).float())
        return head
