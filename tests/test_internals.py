import numpy as np
import pytest
import torch

from ctxir.encoders.internals import inspect_text, word_positions, word_vectors
from ctxir.encoders.models import load_transformer
from ctxir.types import CtxirError


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir):
    return load_transformer(str(tiny_bert_dir), "cpu", attentions=True)


def test_shapes_rows_and_cls(tiny):
    tokenizer, model = tiny
    out = inspect_text("i sat on the river bank", model=model, tokenizer=tokenizer)
    t = len(out.tokens)
    assert out.tokens[0] == "[CLS]" and out.tokens[-1] == "[SEP]"
    assert out.hidden_states.shape == (3, t, 32)  # (layers+1, tokens, hidden)
    assert out.attentions.shape == (2, 4, t, t)  # (layers, heads, tokens, tokens)
    assert np.allclose(out.attentions.sum(-1), 1.0, atol=1e-5)  # every attention row is a distribution
    with torch.no_grad():
        ref = model(**tokenizer("i sat on the river bank", return_tensors="pt")).last_hidden_state[0, 0]
    assert np.allclose(out.cls, ref.numpy(), atol=1e-5)


def test_pair_marks_sentence_b(tiny):
    tokenizer, model = tiny
    out = inspect_text("river bank", "money", model=model, tokenizer=tokenizer)
    assert out.tokens == ["[CLS]", "river", "bank", "[SEP]", "money", "[SEP]"]
    assert out.sentence_b_start == 4 and out.token_type_ids == [0, 0, 0, 0, 1, 1]


def test_refuses_long_and_empty_input(tiny):
    tokenizer, model = tiny
    with pytest.raises(CtxirError, match=r"has \d+ tokens but at most 16"):
        inspect_text("bank " * 40, model=model, tokenizer=tokenizer, max_tokens=16)
    with pytest.raises(CtxirError, match="text is empty"):
        inspect_text("  ", model=model, tokenizer=tokenizer)


def test_word_positions_join_word_pieces():
    tokens = ["[CLS]", "the", "play", "##ing", "otters", "[SEP]"]
    assert word_positions(tokens, "playing") == [2, 3]
    assert word_positions(tokens, "otters") == [4]
    with pytest.raises(CtxirError, match="word 'bank' is not in the tokenized text"):
        word_positions(tokens, "bank")


def _cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_minilm_bank_senses_diverge_in_context(minilm_path):
    sentences = [
        "I sat on the bank of the river and watched the water.",
        "Ducks nested on the grassy river bank.",
        "She deposited her salary at the bank.",
        "The bank approved the loan.",
    ]
    river, river2, money, money2 = (
        word_vectors(inspect_text(s, model=str(minilm_path)), "bank") for s in sentences
    )
    cross = _cos(river, money)  # (layers+1,)
    # Layer 0 is the same word-piece embedding plus position: nearly identical whatever the sense.
    assert cross[0] > 0.95
    # Context pulls the senses apart in the middle layers...
    assert cross[3] < cross[0] - 0.1
    # ...and there, same-sense pairs stay closer than cross-sense pairs.
    for layer in range(1, 6):
        assert _cos(river, river2)[layer] > cross[layer] and _cos(money, money2)[layer] > cross[layer]
