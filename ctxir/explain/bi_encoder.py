"""Why a bi-encoder scored a pair: its cosine split over tokens, exactly for mean pooling, else Integrated Gradients.

Mean pooling then normalisation: cos(q̄, d̄) = Σᵢⱼ qᵢ·dⱼ / (n·m·‖q̄‖·‖d̄‖)."""

from __future__ import annotations

import numpy as np
import torch

from ctxir.checks import check_choice
from ctxir.encoders.bi_encoder import BiEncoder, LayerPooling, model_prompts
from ctxir.encoders.models import load_bi_encoder
from ctxir.explain.integrated_gradients import (
    DEFAULT_IG_STEPS,
    MAX_IG_STEPS,
    adaptive_steps,
    baseline_ids,
    check_pair_text,
    check_steps,
)
from ctxir.types import CtxirError

BI_ENCODER_METHODS = ("auto", "exact", "integrated-gradients")
# The exact split is checked against the model's own cosine; a larger gap means the pipeline is not a plain mean.
EXACT_CHECK_ATOL = 1e-4


def mean_pooling_contributions(
    query_tokens: torch.Tensor | np.ndarray, document_tokens: torch.Tensor | np.ndarray
) -> torch.Tensor:
    """(n, hidden) query token vectors + (m, hidden) document token vectors → (n, m) float64 contributions
    qᵢ·dⱼ / (n·m·‖q̄‖·‖d̄‖), which sum to cos(q̄, d̄). Pass every token the pooling averages.

    >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # 2 query tokens; mean (0.5, 0.5)
    >>> d = torch.tensor([[1.0, 0.0]])  # 1 document token
    >>> contributions = mean_pooling_contributions(q, d)  # (2, 1): query token × document token
    >>> contributions.squeeze(1).tolist(), round(float(contributions.sum()), 4)  # sums to cos(q̄, d̄) = 1/√2
    ([0.7071067811865475, 0.0], 0.7071)
    """
    q = _as_tokens(query_tokens, "query_tokens")  # (n, hidden)
    d = _as_tokens(document_tokens, "document_tokens")  # (m, hidden)
    if q.shape[1] != d.shape[1]:
        raise CtxirError(
            f"query_tokens have hidden size {q.shape[1]} but document_tokens {d.shape[1]}: "
            "pass token vectors from the same model"
        )
    q_norm, d_norm = q.mean(0).norm(), d.mean(0).norm()
    if q_norm == 0 or d_norm == 0:
        raise CtxirError(
            "a mean-pooled embedding is the zero vector, so its cosine is undefined: "
            "pass non-zero token vectors"
        )
    scale = q.shape[0] * d.shape[0] * q_norm * d_norm
    return (q @ d.T) / scale  # (n, m)


def _as_tokens(tokens, name: str) -> torch.Tensor:
    tokens = torch.as_tensor(tokens).detach().to("cpu", torch.float64)
    if tokens.ndim != 2 or tokens.shape[0] == 0:
        raise CtxirError(
            f"{name} must be a (tokens, hidden) matrix with at least one token, "
            f"got shape {tuple(tokens.shape)!r}"
        )
    return tokens


def explain_bi_encoder(
    model,
    query: str,
    document: str,
    method: str = "auto",
    n_steps: int = DEFAULT_IG_STEPS,
    max_steps: int = MAX_IG_STEPS,
    baseline: str = "pad",
) -> dict:
    """Split a bi-encoder's cosine(query, document) over tokens, each text after its prompt.

    method: "exact" (mean pooling only), "integrated-gradients" (any pooling) or "auto"; ``pair_contributions``
    (rows = query tokens) is None for IG.

    >>> out = explain_bi_encoder("sentence-transformers/all-MiniLM-L6-v2", "river otters",
    ...                          "Otters dig dens in the river bank.")  # doctest: +SKIP
    >>> out["method"], out["query_tokens"]  # doctest: +SKIP
    ('exact', ['[CLS]', 'river', 'otter', '##s', '[SEP]'])
    >>> abs(sum(map(sum, out["pair_contributions"])) - out["cosine"]) < 1e-5  # doctest: +SKIP
    True
    """
    query, document = check_pair_text(query, "query"), check_pair_text(document, "document")
    check_choice(method, "method", BI_ENCODER_METHODS)
    st = _sentence_transformer(model)
    # a pooling that leaves prompt tokens out is explained by Integrated Gradients
    prompts = model_prompts(st)
    if isinstance(model, BiEncoder):
        prompts = {"query": model.query_prompt, "document": model.document_prompt}
    query, document = prompts["query"] + query, prompts["document"] + document
    pooling, reason = _exact_split_support(st)
    if method == "exact" and reason:
        raise CtxirError(
            f"no exact split of the cosine exists for this bi-encoder: {reason}. Use "
            "method='integrated-gradients' (or 'auto') for an approximate attribution"
        )
    if method == "integrated-gradients" or reason:
        result = _bi_encoder_ig(st, query, document, n_steps, max_steps, baseline)
        result["pooling"] = pooling
        if reason:
            result["note"] = f"no exact split exists ({reason}); Integrated Gradients used instead"
        return result

    st.eval()
    with torch.no_grad():
        q_out = st.encode(query, output_value=None, convert_to_numpy=False)  # dict for one text
        d_out = st.encode(document, output_value=None, convert_to_numpy=False)
    q_tokens, d_tokens = _pooled_tokens(st, q_out), _pooled_tokens(st, d_out)  # (n, hidden), (m, hidden)
    pairs = mean_pooling_contributions(q_tokens, d_tokens)  # (n, m)
    q_vector, d_vector = q_out["sentence_embedding"].double(), d_out["sentence_embedding"].double()
    cosine = float(torch.nn.functional.cosine_similarity(q_vector, d_vector, dim=0))
    total = float(pairs.sum())
    if abs(total - cosine) > EXACT_CHECK_ATOL:
        raise CtxirError(
            f"the token contributions sum to {total:.6f} but the model's cosine is {cosine:.6f}: "
            "this bi-encoder does more than mean pooling; use method='integrated-gradients'"
        )
    tokenizer = st.tokenizer
    return {
        "method": "exact",
        "pooling": pooling,
        "cosine": cosine,
        "query_tokens": tokenizer.convert_ids_to_tokens(q_out["input_ids"].tolist()),
        "document_tokens": tokenizer.convert_ids_to_tokens(d_out["input_ids"].tolist()),
        "pair_contributions": pairs.tolist(),  # (n, m): rows = query tokens
        "query_contributions": pairs.sum(1).tolist(),  # (n,)
        "document_contributions": pairs.sum(0).tolist(),  # (m,)
        "contributions_sum": total,
    }


def _sentence_transformer(model):
    from sentence_transformers import SentenceTransformer

    if isinstance(model, str):
        return load_bi_encoder(model, "auto")
    if isinstance(model, BiEncoder):
        return model._encoder  # the pipeline that really encodes: its pooling/layer choice included
    if isinstance(model, SentenceTransformer):
        return model
    raise CtxirError(
        f"bi_encoder must be a SentenceTransformer, a ctxir.BiEncoder or a model name, "
        f"got {type(model).__name__!r}"
    )


def _exact_split_support(st) -> tuple[str, str]:
    """(pooling name, reason no exact split exists or "")."""
    from sentence_transformers.base.modules import Normalize

    modules = list(st)
    if len(modules) < 2 or not hasattr(modules[0], "auto_model"):
        return "unknown", "the model is not a transformer followed by a pooling module"
    pooler = modules[1]
    if isinstance(pooler, LayerPooling):
        pooling = pooler.mode
    else:
        pooling = getattr(pooler, "pooling_mode", None)
        if not isinstance(pooling, str):
            return "unknown", f"its second module is {type(pooler).__name__}, not a pooling"
        if not getattr(pooler, "include_prompt", True):
            return pooling, "its pooling leaves prompt tokens out of the mean"
    if pooling != "mean":
        return pooling, f"it uses {pooling!r} pooling, which is not linear in the token vectors"
    extra = [type(m).__name__ for m in modules[2:] if not isinstance(m, Normalize)]
    if extra:
        return pooling, f"the pooled vector goes through {', '.join(extra)} before the cosine"
    return pooling, ""


def _pooled_tokens(st, out: dict) -> torch.Tensor:
    """The token vectors the pooling averages: the last layer's, or the layer a LayerPooling reads."""
    pooler = st[1]
    if isinstance(pooler, LayerPooling) and pooler.layer != -1:
        # encode() strips the batch dimension from token_embeddings but not from the hidden states
        tokens = out["all_layer_embeddings"][pooler.layer]  # (1, tokens, hidden) for one text
        return tokens[0][out["attention_mask"].bool()]  # (tokens, hidden)
    return out["token_embeddings"]  # (tokens, hidden), padding already stripped


def _bi_encoder_ig(st, query: str, document: str, n_steps: int, max_steps: int, baseline: str) -> dict:
    """Captum IG on the word embeddings of both texts at once; the target is their cosine."""
    from captum.attr import IntegratedGradients

    check_steps(n_steps, max_steps)
    st.eval()
    tokenizer = st.tokenizer
    q_enc, d_enc = _single_features(st, query), _single_features(st, document)
    words = st[0].auto_model.get_input_embeddings()
    q_words = words(q_enc["input_ids"]).detach()  # (1, n, hidden)
    d_words = words(d_enc["input_ids"]).detach()  # (1, m, hidden)
    q_base = words(baseline_ids(tokenizer, q_enc["input_ids"], baseline)).detach()
    d_base = words(baseline_ids(tokenizer, d_enc["input_ids"], baseline)).detach()
    needs_layers = any(getattr(m, "layer", -1) != -1 for m in list(st)[1:])

    def embed(word_vectors: torch.Tensor, enc: dict) -> torch.Tensor:
        """(batch, tokens, hidden) → (batch, dim)"""
        batch = word_vectors.shape[0]
        mask = enc["attention_mask"].expand(batch, -1)
        kwargs = (
            {"token_type_ids": enc["token_type_ids"].expand(batch, -1)} if "token_type_ids" in enc else {}
        )
        out = st[0].auto_model(
            inputs_embeds=word_vectors, attention_mask=mask, output_hidden_states=needs_layers, **kwargs
        )
        features = {"token_embeddings": out.last_hidden_state, "attention_mask": mask}
        if needs_layers:
            features["all_layer_embeddings"] = out.hidden_states
        for module in list(st)[1:]:
            features = module(features)
        return features["sentence_embedding"]

    def forward(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:  # (batch, n, h), (batch, m, h) → (batch,)
        return torch.nn.functional.cosine_similarity(embed(q, q_enc), embed(d, d_enc), dim=-1)

    with torch.no_grad():
        cosine = float(forward(q_words, d_words)[0])
        own = st.encode([query, document], convert_to_tensor=True, normalize_embeddings=True)
        own_cosine = float(own[0] @ own[1])
        baseline_cosine = float(forward(q_base, d_base)[0])
    if abs(cosine - own_cosine) > EXACT_CHECK_ATOL:
        raise CtxirError(
            f"could not reproduce this bi-encoder's cosine ({own_cosine:.6f}) from its word "
            f"embeddings (got {cosine:.6f}): its first module is not a plain transformer"
        )

    def attribute(steps: int):
        ig = IntegratedGradients(forward)
        (q_attr, d_attr), delta = ig.attribute(
            (q_words, d_words), baselines=(q_base, d_base), n_steps=steps, return_convergence_delta=True
        )
        return (q_attr.sum(-1)[0], d_attr.sum(-1)[0]), float(delta[0])  # (n,), (m,) summed over hidden

    (q_scores, d_scores), report = adaptive_steps(attribute, cosine - baseline_cosine, n_steps, max_steps)
    return {
        "method": "integrated-gradients",
        "cosine": own_cosine,
        "query_tokens": tokenizer.convert_ids_to_tokens(q_enc["input_ids"][0].tolist()),
        "document_tokens": tokenizer.convert_ids_to_tokens(d_enc["input_ids"][0].tolist()),
        "pair_contributions": None,  # IG attributes each text's tokens, not pairs of them
        "query_contributions": q_scores.tolist(),
        "document_contributions": d_scores.tolist(),
        "baseline": baseline,
        "baseline_cosine": baseline_cosine,
        **report,
    }


def _single_features(st, text: str) -> dict:
    features = st.preprocess([text]) if hasattr(st, "preprocess") else st.tokenize([text])
    device = next(st.parameters()).device
    return {k: v.to(device) for k, v in features.items() if isinstance(v, torch.Tensor)}
