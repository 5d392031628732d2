"""Integrated Gradients as every explanation runs them: the baseline, the steps doubled until complete, the checks.

The baseline keeps [CLS]/[SEP] and puts [PAD] (or [MASK]) for every other token, so only the words are attributed."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ctxir.checks import check_choice
from ctxir.encoders.models import model_lock
from ctxir.types import CtxirError

BASELINES = ("pad", "mask")
# Gauss–Legendre steps: enough to keep the completeness error within COMPLETENESS_TOLERANCE (benchmarks.explain)
DEFAULT_IG_STEPS = 32
MAX_IG_STEPS = 128
COMPLETENESS_TOLERANCE = 0.01  # relative: |Σ attributions − Δ| ≤ 1 % of |Δ|, Δ = score − baseline_score
# below this absolute gap the relative error means nothing (Δ ≈ 0)
COMPLETENESS_ATOL = 1e-5


def pair_integrated_gradients(
    score: Callable,
    word_embeddings: torch.nn.Module,
    tokenizer,
    enc: dict,
    n_steps: int,
    max_steps: int,
    baseline: str,
) -> dict:
    """Captum LayerIntegratedGradients of ``score(inputs) -> (batch,)`` over ``word_embeddings``."""
    from captum.attr import LayerIntegratedGradients

    def forward(input_ids, attention_mask, token_type_ids=None):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        return score(inputs if token_type_ids is None else {**inputs, "token_type_ids": token_type_ids})

    with model_lock(word_embeddings):  # the hooks below change the shared model for every thread
        input_ids = enc["input_ids"]  # (1, tokens)
        base_ids = baseline_ids(tokenizer, input_ids, baseline)  # (1, tokens): [CLS]/[SEP] kept
        extra = (enc["attention_mask"], enc.get("token_type_ids"))
        with torch.no_grad():
            value = float(forward(input_ids, *extra)[0])
            # the baseline's word vectors under the input's ids, as Captum's path starts: a head that reads the ids
            # themselves (term match) keeps that part in the baseline score, so completeness still holds
            base_vectors = word_embeddings(base_ids)  # (1, tokens, hidden)
            handle = word_embeddings.register_forward_hook(lambda module, args, output: base_vectors)
            try:
                baseline_value = float(forward(input_ids, *extra)[0])
            finally:
                handle.remove()

        def attribute(steps: int):
            lig = LayerIntegratedGradients(forward, word_embeddings)
            attributions, delta = lig.attribute(
                input_ids,
                baselines=base_ids,
                additional_forward_args=extra,
                n_steps=steps,
                return_convergence_delta=True,
            )
            return attributions.sum(-1)[0], float(delta[0])  # (1, tokens, hidden) → (tokens,)

        token_scores, report = adaptive_steps(attribute, value - baseline_value, n_steps, max_steps)
    types = enc["token_type_ids"][0].tolist() if "token_type_ids" in enc else []
    return {
        "score": value,
        "baseline_score": baseline_value,
        "tokens": tokenizer.convert_ids_to_tokens(input_ids[0].tolist()),
        "sentence_b_start": types.index(1) if 1 in types else None,  # index of the document's first token
        "attributions": token_scores.tolist(),  # (tokens,), summed over the hidden dimension
        "baseline": baseline,
        **report,
    }


def adaptive_steps(attribute: Callable, gap: float, n_steps: int, max_steps: int):
    """Run ``attribute(steps)``, doubling the steps while the completeness error against ``gap`` is above tolerance."""
    steps = n_steps
    while True:
        scores, captum_delta = attribute(steps)
        parts = tuple(p.detach().cpu().double() for p in (scores if isinstance(scores, tuple) else (scores,)))
        total = float(sum(part.sum() for part in parts))
        error = abs(total - gap)
        relative = error / abs(gap) if gap != 0 else None  # undefined when score == baseline_score
        converged = error <= COMPLETENESS_ATOL or (
            relative is not None and relative <= COMPLETENESS_TOLERANCE
        )
        if converged or steps >= max_steps:
            break
        steps = min(2 * steps, max_steps)
    return parts if isinstance(scores, tuple) else parts[0], {
        "completeness_error": relative,  # |Σ attributions − Δ| / |Δ|, Δ = score − baseline_score
        "completeness_error_abs": error,
        "attributions_sum": total,
        "convergence_delta": captum_delta,  # Captum's Σ attributions − (F(x) − F(baseline))
        "n_steps": steps,
        "converged": converged,
        "integration": "Captum integrated gradients, Gauss-Legendre",
    }


def baseline_ids(tokenizer, input_ids: torch.Tensor, baseline: str) -> torch.Tensor:
    check_choice(baseline, "baseline", BASELINES)
    token_id = tokenizer.pad_token_id if baseline == "pad" else tokenizer.mask_token_id
    if token_id is None:
        raise CtxirError(
            f"this tokenizer has no {baseline.upper()} token: use the other baseline "
            f"({', '.join(b for b in BASELINES if b != baseline)})"
        )
    special = torch.tensor(
        [
            tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True)
            for row in input_ids.tolist()
        ],
        dtype=torch.bool,
        device=input_ids.device,
    )
    return input_ids.masked_fill(~special, token_id)


def check_pair_text(text, name: str) -> str:
    if not isinstance(text, str):
        raise CtxirError(f"{name} must be a string, got {type(text).__name__!r}")
    if not text.strip():
        raise CtxirError(f"{name} is empty: type a few words to explain")
    return text


def check_steps(n_steps: int, max_steps: int) -> None:
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise CtxirError(
            f"n_steps must be a positive integer, got {n_steps!r}: the default is {DEFAULT_IG_STEPS}"
        )
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < n_steps:
        raise CtxirError(
            f"max_steps must be an integer ≥ n_steps ({n_steps}), got {max_steps!r}: "
            f"the default is {MAX_IG_STEPS}"
        )
