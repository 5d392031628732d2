"""Re-ranker heads that stand alone: this file imports only torch and sentence-transformers, never ctxir.

It is ctxir's own code for these modules (``ctxir.encoders.heads`` gives them under ctxir's names) and is also
copied, unchanged, into every Hub repo ``ctxir hub push`` stages for a model that uses them, where ``modules.json``
names ``reranker_heads.SegmentCosineHead`` (and ``reranker_heads.ClsLrHead``). sentence-transformers 6 loads such a
repo-local class with ``CrossEncoder(repo_id, trust_remote_code=True)`` (its "custom models" guide): the repo then
needs nothing from ctxir.

- ``SegmentCosineHead``: score = scale · cos(mean of the query's token vectors, mean of the document's) + bias +
  a linear term on [q; d; |q − d|] that starts at zero, read from one joint pass over
  ``[CLS] query [SEP] document [SEP]`` (segments told apart by ``token_type_ids``); optionally + a learned
  term-match term (CEDR-KNRM style, MacAvaney et al., SIGIR 2019).
- ``ClsLrHead``: CLS-LR as a module: logistic regression on the body's [CLS] vector and, where it was fitted so,
  the previous head's score: score = coef · [CLS; score] + intercept (a logit; sigmoid = probability).

Requirements: torch, sentence-transformers >= 6 (transformers comes with it).
"""

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
    """Mean token vector of each segment of a ``[CLS] a [SEP] b [SEP]`` input: ((batch, hidden), (batch, hidden)).

    Segment A is token type 0 (with [CLS] and its [SEP]), B is type 1; padding is left out.

    >>> tokens = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [9.0, 9.0]]])  # (1, 4 tokens, 2)
    >>> a, b = segment_means(tokens, torch.tensor([[1, 1, 1, 0]]), torch.tensor([[0, 0, 1, 1]]))
    >>> a.tolist(), b.tolist()
    ([[2.0, 0.0]], [[0.0, 2.0]])
    """
    mask = attention_mask.to(tokens.dtype)
    types = token_type_ids.to(tokens.dtype)
    a_mask, b_mask = mask * (1 - types), mask * types  # (batch, tokens)
    a = (tokens * a_mask.unsqueeze(-1)).sum(1) / a_mask.sum(1, keepdim=True).clamp(min=1)
    b = (tokens * b_mask.unsqueeze(-1)).sum(1) / b_mask.sum(1, keepdim=True).clamp(min=1)
    return a, b


def weighted_segment_mean(
    tokens: torch.Tensor, segment_mask: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """(batch, hidden): the mean of a segment's token vectors (``segment_mask`` (batch, tokens) 1 on it), each
    token counted by ``weights`` (batch, tokens).

    >>> tokens = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]])  # (1, 3 tokens, 2)
    >>> weighted_segment_mean(tokens, torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 3.0, 5.0]])).tolist()
    [[2.5, 0.0]]
    """
    share = segment_mask.to(tokens.dtype) * weights  # (batch, tokens)
    return (tokens * share.unsqueeze(-1)).sum(1) / share.sum(1, keepdim=True).clamp(min=1e-6)


def segment_cosine_scores(
    query: torch.Tensor,
    document: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    linear: torch.nn.Linear | None = None,
) -> torch.Tensor:
    """(batch,) = scale · cos(query, document) + bias [+ linear([q; d; |q − d|])]: the head's score.

    >>> q, d = torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    >>> segment_cosine_scores(q, d, torch.tensor(20.0), torch.tensor(0.5)).tolist()
    [20.5, 0.5]
    """
    score = scale * torch.nn.functional.cosine_similarity(query, document, dim=-1) + bias
    if linear is not None:
        score = score + linear(torch.cat([query, document, (query - document).abs()], dim=-1)).squeeze(-1)
    return score


def hub_file_args(subfolder: str, kwargs: dict) -> dict:
    """The arguments a sentence-transformers ``Module.load`` passes on to find its files (locally or on the Hub)."""
    keys = ("token", "cache_folder", "revision", "local_files_only")
    return {"subfolder": subfolder, **{key: kwargs[key] for key in keys if key in kwargs}}


# RBF kernels over the cosine of a query token's and a document token's top-layer vectors: centres and width.
# The exact kernel (token ids equal) is added beside them; soft bands catch inflections and near-synonyms.
MATCH_KERNELS: tuple[float, ...] = (0.9, 0.7, 0.5, 0.3)
MATCH_SIGMA = 0.1


def term_match_per_token(
    tokens: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor,
    weights: torch.Tensor,
    kernels: tuple[float, ...] = MATCH_KERNELS,
    sigma: float = MATCH_SIGMA,
) -> torch.Tensor:
    """(batch, tokens, 1 + len(kernels)): each query token's share of ``term_match_features`` (0 elsewhere).

    Token i of segment a gets w_i · log(1 + #{j in b: id_j = id_i}) / |a| and, per kernel k,
    w_i · log(1 + Σ_j exp(−(cos(t_i, t_j) − μ_k)² / 2σ²)) / |a|, j over the document (segment b) tokens.
    """
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


def term_match_features(
    tokens: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor,
    weights: torch.Tensor,
    kernels: tuple[float, ...] = MATCH_KERNELS,
    sigma: float = MATCH_SIGMA,
) -> torch.Tensor:
    """(batch, 1 + len(kernels)) term-match features of ``[CLS] a [SEP] b [SEP]`` pairs.

    Feature 0: Σ_i w_i · log(1 + #{j in b: id_j = id_i}) / |a| over the query (segment a) tokens i; feature k:
    the same with the count replaced by Σ_j exp(−(cos(t_i, t_j) − μ_k)² / 2σ²) over document tokens j. ``weights``
    (batch, tokens) is each token's importance; padding and the other segment are left out.

    >>> ids = torch.tensor([[101, 7, 8, 102, 7, 7, 9, 102]])  # [CLS] 7 8 [SEP] | 7 7 9 [SEP]
    >>> types, mask = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]]), torch.ones(1, 8, dtype=torch.long)
    >>> f = term_match_features(torch.eye(8).unsqueeze(0), ids, mask, types, torch.ones(1, 8), kernels=())
    >>> round(f[0, 0].item() * 4, 4) == round(math.log(3) + math.log(2), 4)  # "7" twice, [SEP] once, of 4 tokens
    True
    """
    return term_match_per_token(
        tokens, input_ids, attention_mask, token_type_ids, weights, kernels, sigma
    ).sum(1)


class SegmentCosineHead(Module):
    """Reads ``token_embeddings`` of a pair, writes ``scores`` (batch, 1); see ``segment_cosine_scores``."""

    config_keys: ClassVar[list[str]] = ["hidden_size", "init_scale", "term_match", "importance_pooling"]
    config_file_name = "config.json"

    def __init__(
        self,
        hidden_size: int,
        init_scale: float = 20.0,
        term_match: bool = False,
        importance_pooling: bool = False,
    ):
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
        self.importance_pooling = False
        if importance_pooling:
            self.add_importance_pooling()

    def add_term_match(self) -> None:
        """Add the term-match term, zero-initialised: the head's scores stay exactly what they were until it trains.

        A trained head (one shipped without it) gains it this way and continues from its own weights.
        """
        if self.term_match:
            return
        self.term_match = True
        # term importance w = softplus(v · token + c), starting at 1 for every token (c = log(e − 1))
        self.term_weight = torch.nn.Linear(self.hidden_size, 1)
        torch.nn.init.zeros_(self.term_weight.weight)
        torch.nn.init.constant_(self.term_weight.bias, math.log(math.e - 1))
        self.term_linear = torch.nn.Linear(1 + len(MATCH_KERNELS), 1, bias=False)
        torch.nn.init.zeros_(self.term_linear.weight)
        device = self.scale.device
        self.term_weight.to(device)
        self.term_linear.to(device)

    def add_importance_pooling(self) -> None:
        """Pool the query by term importance too: query = mean + m · (importance-weighted mean − mean), ``pool_mix``
        m starting at 0, so the head scores exactly what it did until m trains (1 = the weighted mean alone).

        A long statement of a need ("I am interested in …") averaged token by token is mostly its function words;
        the term-match term's importance (softplus(v · token + c)) already tells its terms from them.
        """
        if self.importance_pooling:
            return
        if not self.term_match:
            raise ValueError(
                "SegmentCosineHead importance pooling reads the term-match term's importance: add the term first "
                "(term_match=True, or --term-match in training)"
            )
        self.importance_pooling = True
        self.pool_mix = torch.nn.Parameter(torch.zeros((), device=self.scale.device))

    def forward(self, features: dict, **kwargs) -> dict:
        if features.get("token_type_ids") is None:
            raise ValueError(
                "SegmentCosineHead needs token_type_ids to tell the query from the document: use a "
                "BERT-style body whose tokenizer marks pair segments (e.g. all-MiniLM-L6-v2)"
            )
        tokens, mask, types = (
            features["token_embeddings"],
            features["attention_mask"],
            features["token_type_ids"],
        )
        query, document = segment_means(tokens, mask, types)  # (batch, hidden) each
        if self.importance_pooling:
            weighted = weighted_segment_mean(tokens, mask * (1 - types), self.term_importance(tokens))
            query = query + self.pool_mix * (weighted - query)
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
        """(batch, tokens) = softplus(v · token + c): how much each token counts, read off its own vector."""
        return torch.nn.functional.softplus(self.term_weight(tokens)).squeeze(-1)

    def term_match_scores(self, features: dict) -> torch.Tensor:
        """(batch, tokens): each query token's part of the term-match term (they sum to it; 0 for other tokens)."""
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
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        **kwargs,
    ) -> SegmentCosineHead:
        hub = hub_file_args(subfolder, kwargs)
        model = cls(**cls.load_config(model_name_or_path, **hub))
        return cls.load_torch_weights(model_name_or_path, model=model, **hub)


# CLS-LR's saved form (ctxir.rerank.cls_lr.ClsLrRanker.save): read in place, so one copy serves ctxir and this head
CLS_LR_CONFIG = "cls_lr_config.json"
CLS_LR_WEIGHTS = "cls_lr.safetensors"


def cls_lr_logit(features, coef, intercept):
    """(batch,) the CLS-LR logit: features (batch, hidden[+1]) · coef (hidden[+1],) + intercept; numpy or torch.

    The one scoring rule of CLS-LR: this head, ``ctxir.rerank.ClsLrRanker`` and training all call it."""
    return features @ coef + intercept


class ClsLrHead(Module):
    """Reads ``token_embeddings`` (and, with ``score_feature``, the ``scores`` of the head before it); writes
    ``scores`` (batch, 1) = coef · [CLS vector; that score] + intercept: the CLS-LR ranker's logit.

    Its weights are the ranker's own files (``cls_lr_config.json``, ``cls_lr.safetensors`` with ``coef`` and
    ``intercept``), at the path modules.json gives it.
    """

    def __init__(self, hidden_size: int, score_feature: bool = False):
        super().__init__()
        self.hidden_size, self.score_feature = int(hidden_size), bool(score_feature)
        self.coef = torch.nn.Parameter(torch.zeros(self.hidden_size + self.score_feature))
        self.intercept = torch.nn.Parameter(torch.zeros(1))

    def forward(self, features: dict, **kwargs) -> dict:
        cls = features["token_embeddings"][:, 0].float()  # (batch, hidden): the last layer's [CLS]
        if self.score_feature:
            score = (
                features["scores"].reshape(len(cls), -1)[:, -1:].float()
            )  # (batch, 1): the head's "relevant"
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
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        **kwargs,
    ) -> ClsLrHead:
        from safetensors.torch import load_file

        hub = hub_file_args(subfolder, kwargs)
        config_path = cls.load_file_path(model_name_or_path, CLS_LR_CONFIG, **hub)
        weights_path = cls.load_file_path(model_name_or_path, CLS_LR_WEIGHTS, **hub)
        if config_path is None or weights_path is None:
            raise ValueError(f"{model_name_or_path!r} has no {CLS_LR_CONFIG} and {CLS_LR_WEIGHTS}")
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
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
