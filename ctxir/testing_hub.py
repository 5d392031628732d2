"""Models laid out as the Hugging Face Hub gives them, for tests that must see what a Hub user gets offline: a
folder copied into a temporary cache as `hf download` leaves it, and a tiny cross-encoder to put there."""

from __future__ import annotations

from pathlib import Path

from ctxir.testing import save_tiny_bert


def lay_into_hf_cache(folder: Path, cache: Path, repo_id: str, revision: str = "0" * 40) -> Path:
    """Copy the model in ``folder`` into the Hugging Face cache ``cache`` as ``hf download repo_id`` leaves it
    (``ctxir.publish.standalone.lay_into_hf_cache``, under a revision the test names). Returns the snapshot."""
    from ctxir.publish.standalone import lay_into_hf_cache as lay

    return lay(folder, repo_id, cache, revision)


def save_tiny_cross_encoder(folder: Path, vocab: list[str]) -> Path:
    """``save_tiny_bert``'s body with a one-label sequence-classification head (seeded), saved like a Hub
    cross-encoder (``BertForSequenceClassification``): sentence-transformers' CrossEncoder loads it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    save_tiny_bert(folder, vocab)
    torch.manual_seed(1)
    config = BertConfig.from_pretrained(folder, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder
