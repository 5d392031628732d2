"""Models laid out as the Hugging Face Hub gives them, for tests that must see what a Hub user gets offline: a
folder copied into a temporary cache as `hf download` leaves it, and a tiny cross-encoder to put there."""

from __future__ import annotations

from pathlib import Path

from ctxir.testing import save_tiny_bert


def lay_into_hf_cache(folder: Path, cache: Path, repo_id: str, revision: str = "0" * 40) -> Path:
    """Copy the model in ``folder`` into the Hugging Face cache ``cache`` as ``hf download repo_id`` leaves it:
    ``models--org--name/blobs/<sha256>`` holding the files, ``snapshots/<revision>/<path>`` links to them and
    ``refs/main`` naming the revision. Returns the snapshot folder."""
    import hashlib
    import os
    import shutil

    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for file in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        if not blob.exists():
            shutil.copyfile(file, blob)
        link = snapshot / file.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


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
