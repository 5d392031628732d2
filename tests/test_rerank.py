from pathlib import Path

import numpy as np
import pytest
import torch

from ctxir.encoders.models import load_transformer
from ctxir.rerank import ClsLrRanker, CrossEncoderReranker, Reranker, cls_features
from ctxir.types import CtxirError, Hit

CORPUS = {
    "a": {"title": "", "text": "otters play on the river bank"},
    "b": {"title": "", "text": "she put her salary in the bank"},
    "c": {"title": "", "text": "python snake"},
}
PAIRS = [
    ("river bank", "otters play on the river bank"),
    ("money", "she put her salary in the bank"),
    ("snake", "python snake"),
    ("tea", "coffee and music"),
]


def test_cls_features_equal_last_hidden_state_cls(tiny_bert_dir):
    tokenizer, model = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)
    feats = cls_features(model, tokenizer, PAIRS, batch_size=3)  # two batches, padded differently
    for i, (q, d) in enumerate(PAIRS):
        with torch.no_grad():
            one = model(**tokenizer(q, d, return_tensors="pt")).last_hidden_state[:, 0]
        assert np.allclose(feats[i], one[0].numpy(), atol=1e-5)
    layer0 = cls_features(model, tokenizer, PAIRS[:1], layer=0)
    assert not np.allclose(layer0, feats[:1])


def _fitted(tiny_bert_dir) -> ClsLrRanker:
    tokenizer, model = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)
    rng = np.random.default_rng(0)
    pairs = [(f"query {i}", t) for i in range(6) for t in ("river bank", "python code", "tea")]
    feats = cls_features(model, tokenizer, pairs) + rng.normal(0, 0.01, (len(pairs), 32)).astype(np.float32)
    labels = [1 if t == "river bank" else 0 for _, t in pairs]
    return ClsLrRanker.fit(str(tiny_bert_dir), feats, labels, device="cpu")


def test_cls_lr_score_is_linear_in_cls(tiny_bert_dir):
    ranker = _fitted(tiny_bert_dir)
    feats = ranker.features("query", ["river bank", "tea"])
    assert np.allclose(
        ranker.score_pairs("query", ["river bank", "tea"]), feats @ ranker.coef + ranker.intercept
    )
    proba = ranker.predict_proba("query", ["river bank", "tea"])
    assert ((proba > 0) & (proba < 1)).all() and proba[0] > proba[1]  # learnt river bank = relevant


def test_cls_lr_save_load_scores_identically(tiny_bert_dir, tmp_path):
    ranker = _fitted(tiny_bert_dir)
    ranker.save(tmp_path / "ranker")
    assert not list((tmp_path / "ranker").glob("*.pkl"))
    loaded = ClsLrRanker.load(tmp_path / "ranker", device="cpu")
    texts = ["river bank", "python code", "tea"]
    assert np.array_equal(loaded.score_pairs("q", texts), ranker.score_pairs("q", texts))
    assert loaded.metadata["train_pairs"] == 18


def test_cls_lr_load_refuses_non_ranker_folder(tmp_path):
    with pytest.raises(CtxirError, match="is not a CLS-LR ranker folder"):
        ClsLrRanker.load(tmp_path)


def test_cls_lr_needs_both_classes(tiny_bert_dir):
    with pytest.raises(CtxirError, match="both 0"):
        ClsLrRanker.fit(str(tiny_bert_dir), np.zeros((3, 32)), [1, 1, 1])


def test_cls_lr_rejects_wrong_hidden_size(tiny_bert_dir):
    with pytest.raises(CtxirError, match=r"coef has 10 values but .* gives 32 features \(hidden size 32\)"):
        ClsLrRanker(str(tiny_bert_dir), np.zeros(10), 0.0, device="cpu")


def test_cross_encoder_reranker_orders_by_its_scores(tiny_bert_dir):
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu")
    reranker = CrossEncoderReranker(ce)
    hits = [Hit("a", 1.0), Hit("b", 0.5), Hit("c", 0.1)]
    reranked = reranker.rerank("river bank", hits, CORPUS)
    raw = ce.predict([("river bank", CORPUS[d]["text"]) for d in "abc"])
    assert [h.doc_id for h in reranked] == [d for _, d in sorted(zip(-raw, "abc", strict=True))]
    assert reranker.rerank("river bank", hits, CORPUS, top_k=1) == reranked[:1]
    assert reranker.rerank("river bank", [], CORPUS) == []


class LengthReranker(Reranker):
    def score_pairs(self, query, texts):
        return np.array([len(t) for t in texts], dtype=float)


def test_rerank_errors():
    with pytest.raises(CtxirError, match="query is empty"):
        LengthReranker().rerank(" ", [Hit("a", 1)], CORPUS)
    with pytest.raises(CtxirError, match=r"not in the corpus, e\.g\. 'zzz'"):
        LengthReranker().rerank("q", [Hit("zzz", 1)], CORPUS)


class _WordOverlapModel:
    """A stand-in cross-encoder: a pair scores the number of query words its text holds; records what it read."""

    def __init__(self):
        self.read: list[str] = []

    def predict(self, pairs, **_):
        self.read += [text for _, text in pairs]
        return np.array([len(set(q.split()) & set(t.split())) for q, t in pairs], dtype=np.float32)


def test_maxp_scores_a_document_by_its_best_window_each_after_the_title():
    """passages=Passages(...): a document is cut into windows, each read after its title, and scores as its best
    window; without it the whole title + text is one input (which the model would truncate to its max length)."""
    from ctxir.rerank import Passages

    model = _WordOverlapModel()
    reranker = CrossEncoderReranker(model, passages=Passages(words=3, stride=2))
    corpus = {
        "a": {
            "title": "Rivers",
            "text": "banks lend money to otters dig dens",
        },  # windows: 'banks lend money',
        "b": {"title": "", "text": "otters"},
    }  # 'money to otters', ...
    hits = reranker.rerank("otters dens", [Hit("a", 1.0), Hit("b", 2.0)], corpus)
    # a: best window 'Rivers otters dig dens' holds both query words (2); b: 'otters' holds one (1)
    assert [(h.doc_id, h.score) for h in hits] == [("a", 2.0), ("b", 1.0)]
    assert (
        "Rivers banks lend money" in model.read
        and "Rivers otters dig dens" in model.read
        and "otters" in model.read
    )
    # plain texts (the pair tab, the API): windows of the text alone, best window's score
    assert reranker.score_pairs("otters dens", ["x y z otters dens"]).tolist() == [2.0]
    first = CrossEncoderReranker(_WordOverlapModel())
    assert first.score_documents("otters dens", [corpus["a"]]).tolist() == [
        2.0
    ]  # one input: title + whole text


class _OrderedModel:
    """A stand-in pair scorer that tells the orders apart: (a, b) scores words(a) − words(b) / 2."""

    def __init__(self):
        self.calls: list[list[tuple[str, str]]] = []

    def predict(self, pairs, **_):
        self.calls.append(list(pairs))
        return np.array([len(a.split()) - len(b.split()) / 2 for a, b in pairs], dtype=np.float32)


def test_both_orders_scores_each_pair_as_the_mean_of_its_two_readings_in_one_call():
    one, both = _OrderedModel(), _OrderedModel()
    # ("a b", "c d e f"): 2 − 4/2 = 0 as given; ("c d e f", "a b"): 4 − 2/2 = 3; the mean 1.5
    assert CrossEncoderReranker(one).score_pairs("a b", ["c d e f", "c"]).tolist() == [0.0, 1.5]
    assert CrossEncoderReranker(both, both_orders=True).score_pairs("a b", ["c d e f", "c"]).tolist() == [
        1.5,
        0.75,
    ]
    assert both.calls == [[("a b", "c d e f"), ("a b", "c"), ("c d e f", "a b"), ("c", "a b")]]  # one batch
    # symmetric: the same score whichever sentence comes first
    assert CrossEncoderReranker(_OrderedModel(), both_orders=True).score_pairs(
        "c d e f", ["a b"]
    ).tolist() == [1.5]


def test_a_pair_scorers_folder_says_whether_it_scores_both_orders(tiny_bert_dir, tmp_path):
    """rankers.both_orders_for: pair_orders.json "both" → True, "one", no file or no folder → False, anything else
    refused."""
    import shutil

    from ctxir.rerank.rankers import both_orders_for

    assert both_orders_for(str(tmp_path / "elsewhere")) is False  # not on this machine: nothing to read
    folder = Path(shutil.copytree(tiny_bert_dir, tmp_path / "model"))  # a model folder resolve_model accepts
    assert both_orders_for(str(folder)) is False
    (folder / "pair_orders.json").write_text('{"orders": "both"}')
    assert both_orders_for(str(folder)) is True
    (folder / "pair_orders.json").write_text('{"orders": "one"}')
    assert both_orders_for(str(folder)) is False
    (folder / "pair_orders.json").write_text('{"orders": "reversed"}')
    with pytest.raises(
        CtxirError,
        match=r"'orders' in '.*pair_orders\.json' 'reversed' is not known: use one of "
        r"'one', 'both'",
    ):
        both_orders_for(str(folder))
    assert CrossEncoderReranker(_OrderedModel()).both_orders is False  # a model object has no folder to ask


def test_a_cross_encoders_folder_says_how_it_reads_long_documents(tmp_path):
    """registry.passages_for: passages.json → Passages (MaxP) or None ("first"); none → None; a bad one is refused."""
    from ctxir.rerank import Passages
    from ctxir.rerank.registry import passages_for

    assert passages_for(str(tmp_path)) is None
    (tmp_path / "passages.json").write_text('{"method": "max", "words": 60, "stride": 40}')
    assert passages_for(str(tmp_path)) == Passages(60, 40)
    (tmp_path / "passages.json").write_text('{"method": "first"}')
    assert passages_for(str(tmp_path)) is None
    (tmp_path / "passages.json").write_text('{"method": "best"}')
    with pytest.raises(CtxirError, match=r"is not a passages\.json"):
        passages_for(str(tmp_path))
