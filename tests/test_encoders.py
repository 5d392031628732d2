import numpy as np
import pytest
import torch

from ctxir.encoders import BiEncoder, EmbeddingCache, pool
from ctxir.types import CtxirError

# Two sequences, the second padded after 2 tokens; hidden size 2.
TOKENS = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]], [[2.0, 0.0], [4.0, -2.0], [100.0, 100.0]]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_pool_by_hand():
    assert torch.equal(pool(TOKENS, MASK, "cls"), torch.tensor([[1.0, 2.0], [2.0, 0.0]]))
    assert torch.allclose(pool(TOKENS, MASK, "mean"), torch.tensor([[3.0, 5.0], [3.0, -1.0]]))
    # The padded [100, 100] must not win the max.
    assert torch.equal(pool(TOKENS, MASK, "max"), torch.tensor([[5.0, 9.0], [4.0, 0.0]]))
    with pytest.raises(CtxirError, match="'sum' is not known"):
        pool(TOKENS, MASK, "sum")


def test_default_path_is_the_models_own_encode(tiny_st):
    enc = BiEncoder(tiny_st, cache=None)
    texts = ["the river bank", "money deposit at the bank"]
    expected = tiny_st.encode(texts, normalize_embeddings=True)
    assert np.allclose(enc.encode(texts), expected, atol=1e-6)
    assert enc.pooling == "mean" and enc.layer == -1


def test_cls_pooling_equals_last_hidden_state_cls(tiny_st):
    enc = BiEncoder(tiny_st, pooling="cls", cache=None)
    texts = ["otters play on the river bank", "python snake"]
    model, tok = tiny_st[0].auto_model, tiny_st.tokenizer
    with torch.no_grad():
        batch = tok(texts, padding=True, return_tensors="pt")
        cls = model(**batch).last_hidden_state[:, 0]
    expected = torch.nn.functional.normalize(cls, dim=-1).numpy()
    assert np.allclose(enc.encode(texts), expected, atol=1e-5)


def test_layer_zero_differs_from_last_and_is_normalised(tiny_st):
    texts = ["the river bank"]
    first = BiEncoder(tiny_st, layer=0, cache=None).encode(texts)
    last = BiEncoder(tiny_st, layer=-1, cache=None).encode(texts)
    assert not np.allclose(first, last)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert BiEncoder(tiny_st, layer=2, cache=None).layer == -1  # 2 = num_layers = last


def test_bad_layer_and_pooling(tiny_st):
    with pytest.raises(CtxirError, match=r"layer 7 is out of range.*0 \(embeddings\) to 2"):
        BiEncoder(tiny_st, layer=7, cache=None)
    with pytest.raises(CtxirError, match="'avg' is not known"):
        BiEncoder(tiny_st, pooling="avg", cache=None)


def test_cache_hits_and_keys(tiny_st, tmp_path, monkeypatch):
    cache = EmbeddingCache(tmp_path)
    enc = BiEncoder(tiny_st, cache=cache)
    corpus = {"a": {"title": "T", "text": "river bank"}, "b": {"title": "", "text": "money"}}
    ids, first = enc.encode_corpus(corpus)
    assert ids == ["a", "b"] and len(list(tmp_path.glob("*.npy"))) == 1
    calls = []
    monkeypatch.setattr(enc, "encode", lambda *a, **k: calls.append(1))
    _, second = enc.encode_corpus(corpus)
    assert calls == [] and np.array_equal(first, second)
    # The same weights under another name reuse the entry: the key is what decides the vectors.
    renamed = BiEncoder(tiny_st, cache=cache)
    renamed.name = "some/other-name"
    assert renamed.cache_key(["T river bank", "money"]) == enc.cache_key(["T river bank", "money"])
    # Another pooling or other texts must not reuse the entry.
    assert EmbeddingCache.key(
        {**enc.config, "pooling": "cls"}, ["T river bank", "money"]
    ) != EmbeddingCache.key(enc.config, ["T river bank", "money"])
    assert EmbeddingCache.key(enc.config, ["a", "b"]) != EmbeddingCache.key(enc.config, ["ab"])


def test_an_interrupted_corpus_encode_resumes_from_its_cached_parts(tiny_st, tmp_path, monkeypatch):
    """A corpus longer than PART_ROWS is encoded and cached part by part: a run killed in its third part leaves
    two parts cached, and the next run encodes only the rest, giving the vectors one uninterrupted run gives."""
    from ctxir.encoders import bi_encoder

    monkeypatch.setattr(bi_encoder, "PART_ROWS", 4)
    texts = [f"otter {i} swims by the river bank" if i % 2 else f"bank loan number {i}" for i in range(10)]
    whole = BiEncoder(tiny_st, cache=None).encode(texts)
    enc = BiEncoder(tiny_st, cache=EmbeddingCache(tmp_path))
    encoded, real = [], enc.encode

    def killed_in_third_part(chunk, show_progress_bar=None, role=None):
        if len(encoded) == 2:
            raise KeyboardInterrupt
        encoded.append(list(chunk))
        return real(chunk, show_progress_bar, role)

    monkeypatch.setattr(enc, "encode", killed_in_third_part)
    with pytest.raises(KeyboardInterrupt):
        enc.encode_cached(texts)
    assert (
        len(list(tmp_path.glob("*-part*.npy"))) == 2
        and not (tmp_path / f"{enc.cache_key(texts)}.npy").exists()
    )

    encoded.clear()
    monkeypatch.setattr(
        enc,
        "encode",
        lambda chunk, show_progress_bar=None, role=None: encoded.append(list(chunk)) or real(chunk),
    )
    resumed = enc.encode_cached(texts)
    assert encoded == [texts[8:]]  # only the third part
    np.testing.assert_allclose(resumed, whole, atol=1e-6)
    # the whole is cached and its parts are gone; the next run reads it and encodes nothing
    assert not list(tmp_path.glob("*-part*")) and (tmp_path / f"{enc.cache_key(texts)}.npy").exists()
    encoded.clear()
    np.testing.assert_array_equal(enc.encode_cached(texts), resumed)
    assert encoded == []


def test_torn_cache_file_is_recomputed(tiny_st, tmp_path):
    cache = EmbeddingCache(tmp_path)
    enc = BiEncoder(tiny_st, cache=cache)
    (tmp_path / f"{enc.cache_key(['hello'])}.npy").write_bytes(b"not a numpy file")
    assert enc.encode_cached(["hello"]).shape == (1, 32)
    assert np.load(tmp_path / f"{enc.cache_key(['hello'])}.npy").shape == (1, 32)  # rewritten whole


@pytest.mark.parametrize("damage", ["nan", "wrong_dim", "not_unit", "float64", "fewer_rows"])
def test_a_damaged_cache_file_that_still_loads_is_detected_and_rebuilt(tiny_st, tmp_path, damage):
    cache = EmbeddingCache(tmp_path)
    enc = BiEncoder(tiny_st, cache=cache)
    texts = ["hello", "river bank"]
    good = enc.encode_cached(texts)
    path = tmp_path / f"{enc.cache_key(texts)}.npy"
    bad = {
        "nan": np.where(np.arange(32) == 3, np.nan, good).astype(np.float32),
        "wrong_dim": good[:, :16],
        "not_unit": good * 2,
        "float64": good.astype(np.float64),
        "fewer_rows": good[:1],
    }[damage]
    np.save(path, bad)
    assert np.allclose(enc.encode_cached(texts), good, atol=1e-6)
    assert np.allclose(np.load(path), good, atol=1e-6)  # and the file was rewritten


def test_training_in_place_changes_the_cache_key(tiny_st, tmp_path):
    enc = BiEncoder(tiny_st, cache=EmbeddingCache(tmp_path))
    before_key, before = enc.cache_key(["river bank"]), enc.encode_cached(["river bank"])
    with torch.no_grad():  # what a trainer does to the same object
        next(tiny_st.parameters()).add_(1.0)
    assert enc.cache_key(["river bank"]) != before_key
    assert not np.allclose(enc.encode_cached(["river bank"]), before)


def test_very_long_document_is_truncated_not_an_error(tiny_st):
    # 100,000 characters: the model reads its first max_seq_length tokens (documented truncation).
    out = BiEncoder(tiny_st, cache=None).encode(["river " * 16_667])
    assert out.shape == (1, 32) and np.isfinite(out).all()


def test_empty_input_gives_empty_matrix(tiny_st):
    assert BiEncoder(tiny_st, cache=None).encode([]).shape == (0, 32)


def test_minilm_paraphrase_beats_unrelated(minilm):
    enc = BiEncoder(minilm, cache=None)
    a, para, other = enc.encode(
        ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."]
    )
    assert a @ para > 0.6 > a @ other
