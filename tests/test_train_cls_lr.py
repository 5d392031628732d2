"""training/train_cls_lr.py: [CLS] features, the saved ranker, the entry point end to end, and bad input."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import expit

from ctxir.names import CLS_LR_CONFIG, CLS_LR_WEIGHTS
from ctxir.publish.metrics_file import REQUIRED_EVAL, REQUIRED_KEYS, REQUIRED_TRAINING
from ctxir.rerank import ClsLrRanker, cls_features
from ctxir.types import CtxirError, doc_text
from training import cls_lr
from training import train_cls_lr as tcl

PAIRS = [
    ("river bank", "otters play on the river bank in the water"),
    ("money deposit", "she paid her salary into the bank account"),
    ("python code", "the python snake sat in the sun"),
    ("tea", "coffee and tea and music and a song at the moon"),
]
WORDS = [
    "river",
    "bank",
    "money",
    "deposit",
    "otters",
    "play",
    "python",
    "snake",
    "code",
    "water",
    "account",
    "salary",
    "cat",
    "dog",
    "sun",
    "moon",
    "tea",
    "coffee",
    "music",
    "song",
]


def write_beir(root: Path, n_docs: int = 30, n_train: int = 12, n_test: int = 4, grade: int = 1) -> Path:
    """A small BEIR folder under root/scifact: each query is 3 words of its one relevant document."""
    rng = random.Random(0)
    folder = root / "scifact"
    (folder / "qrels").mkdir(parents=True)
    docs = {f"d{i}": " ".join(rng.choice(WORDS) for _ in range(8)) for i in range(n_docs)}
    with (folder / "corpus.jsonl").open("w") as f:
        for doc_id, text in docs.items():
            f.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    queries = {f"q{i}": " ".join(docs[f"d{i}"].split()[:3]) for i in range(n_train + n_test)}
    with (folder / "queries.jsonl").open("w") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    for split, qids in (("train", range(n_train)), ("test", range(n_train, n_train + n_test))):
        lines = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t{grade}" for i in qids]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def tiny_data(tmp_path) -> Path:
    return write_beir(tmp_path / "data")


def smoke_args(tiny_bert_dir: Path, data: Path, out: Path, **kw) -> tcl.ClsLrArgs:
    args = tcl.ClsLrArgs(
        base_model=str(tiny_bert_dir),
        data_dir=str(data),
        output_dir=str(out),
        negatives_per_positive=3,
        negative_depth=20,
        max_samples=10,
        cv_folds=3,
        rerank_depth=5,
        verify_queries=2,
        device="cpu",
        cache_dir="",
        batch_size=4,
        c_grid="0.1,1",
    )
    return replace(args, **kw)


# ---------------------------------------------------------------- features and the saved ranker


def test_cls_features_equal_last_hidden_state(tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = AutoModel.from_pretrained(tiny_bert_dir).eval()
    enc = tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    expected = out.last_hidden_state[:, 0].numpy()  # (pairs, hidden)
    assert expected.shape == (len(PAIRS), 32)
    np.testing.assert_allclose(cls_features(model, tokenizer, PAIRS, batch_size=3), expected, atol=1e-5)
    np.testing.assert_allclose(
        cls_features(model, tokenizer, PAIRS, layer=0), out.hidden_states[0][:, 0].numpy(), atol=1e-5
    )
    # the [CLS] of the sentence pair differs from the [CLS] of the query alone: the document is read
    alone = cls_features(model, tokenizer, [(q, "") for q, _ in PAIRS])
    assert np.abs(alone - expected).max() > 1e-3


def test_one_pass_matches_ranker_features_and_cross_encoder(tiny_bert_dir):
    """The script's one forward pass gives the [CLS] ClsLrRanker reads and the logit CrossEncoder.predict squashes."""
    from sentence_transformers import CrossEncoder
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    ce = CrossEncoder(str(tiny_bert_dir), device="cpu", num_labels=1)
    cls, logits = cls_lr.cross_encoder_pass(ce, PAIRS, layer=-1, max_length=64, batch_size=3)
    tokenizer, body = (
        AutoTokenizer.from_pretrained(tiny_bert_dir),
        AutoModel.from_pretrained(tiny_bert_dir).eval(),
    )
    np.testing.assert_allclose(cls, cls_features(body, tokenizer, PAIRS, max_length=64), atol=1e-5)
    np.testing.assert_allclose(expit(logits), ce.predict(PAIRS, show_progress_bar=False), atol=1e-5)


def test_one_pass_runs_a_mean_pooling_head_too(tiny_bert_dir):
    """A cross-encoder with a modular head (mean pooling → Dense): [CLS] from the body, the score from its modules."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Dense, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    ce = CrossEncoder(
        modules=[
            Transformer(str(tiny_bert_dir), transformer_task="feature-extraction"),
            Pooling(32, "mean"),
            Dense(32, 1, activation_function=None, module_output_name="scores"),
        ],
        device="cpu",
    )
    cls, logits = cls_lr.cross_encoder_pass(ce, PAIRS, layer=-1, max_length=64, batch_size=3)
    tokenizer, body = (
        AutoTokenizer.from_pretrained(tiny_bert_dir),
        AutoModel.from_pretrained(tiny_bert_dir).eval(),
    )
    np.testing.assert_allclose(cls, cls_features(body, tokenizer, PAIRS, max_length=64), atol=1e-5)
    np.testing.assert_allclose(expit(logits), ce.predict(PAIRS, show_progress_bar=False), atol=1e-5)


@pytest.mark.parametrize("term_match", [False, True])
def test_one_pass_runs_the_segment_cosine_head_with_its_token_types(tiny_bert_dir, term_match):
    """The segment-cosine head needs token_type_ids to split query from document, and its term-match term the
    input_ids: the one pass passes the tokenizer's features, so its logits are the cross-encoder's own scores."""
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer

    body = TopLayersTransformer(str(tiny_bert_dir), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    head = SegmentCosineHead(32, term_match=term_match)
    if term_match:  # a read-out that is not zero, so the term counts in the scores compared
        torch.nn.init.constant_(head.term_linear.weight, 0.5)
    ce = CrossEncoder(modules=[body, head], device="cpu", activation_fn=torch.nn.Identity())
    _, logits = cls_lr.cross_encoder_pass(ce, PAIRS, layer=-1, max_length=64, batch_size=2)
    np.testing.assert_allclose(logits, np.ravel(ce.predict(PAIRS, show_progress_bar=False)), atol=1e-4)


def test_fit_logistic_folds_scaling_into_coef():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16)) * rng.uniform(0.1, 50, size=16) + rng.normal(size=16) * 10  # uneven scales
    y = (x[:, 0] / 50 + x[:, 3] / 10 + rng.normal(size=200) > 0).astype(int)
    coef, intercept, model = cls_lr.fit_logistic(x, y, c=1.0, class_weight="balanced", seed=0)
    np.testing.assert_allclose(x @ coef + intercept, model.decision_function(x), rtol=1e-4, atol=1e-4)
    # an emphasised last column is folded back too, and a weaker penalty lets its weight grow
    last = np.roll(x, -4, axis=1)  # the predictive column 3 is now the last one
    strong, strong_b, emphasised = cls_lr.fit_logistic(
        last, y, c=0.001, class_weight="balanced", seed=0, emphasis=10
    )
    weak, _, _ = cls_lr.fit_logistic(last, y, c=0.001, class_weight="balanced", seed=0)
    np.testing.assert_allclose(
        last @ strong + strong_b, emphasised.decision_function(last), rtol=1e-4, atol=1e-4
    )
    assert abs(strong[-1]) > 2 * abs(weak[-1])
    threshold, f1 = cls_lr.best_f1_threshold(y, x @ coef + intercept)
    predicted = (x @ coef + intercept) >= threshold
    tp = (predicted & (y == 1)).sum()
    assert f1 == pytest.approx(2 * tp / (predicted.sum() + y.sum()))


def test_c_is_chosen_by_the_named_cross_validation_measure():
    """--cv-metric ndcg ranks each query's own pairs: a column that only says which queries have many relevant
    pairs (constant within a query) helps the pooled average precision and is worth nothing to the ranking."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 5)  # 40 queries × 5 pairs
    y = np.zeros(200, int)
    for q in range(40):  # even queries: 3 relevant pairs; odd ones: 1
        y[q * 5 : q * 5 + (3 if q % 2 == 0 else 1)] = 1
    base_rate = (groups % 2 == 0).astype(float)  # constant within a query
    score = y + rng.normal(scale=1.2, size=200)  # ranks within a query, noisily
    x = np.column_stack([base_rate, rng.normal(size=(200, 6)), score])
    chosen = {}
    for metric in ("average-precision", "ndcg"):
        key = cls_lr.CV_METRICS[metric]
        setting, cv = cls_lr.choose_c(x, y, groups, [0.001, 0.01, 1.0], [1.0, 10.0], "balanced", 4, 42, key)
        assert cv[setting][key] == max(v[key] for v in cv.values())
        for v in cv.values():
            assert v["ndcg"] == pytest.approx(cls_lr.per_query_ndcg(y, v["oof"], groups))
        chosen[metric] = cv[setting]
    # a shift that is constant within each query moves the pooled measure and leaves the ranker's measure alone
    from sklearn.metrics import average_precision_score

    oof = chosen["ndcg"]["oof"]
    shifted = oof - 5 * base_rate  # the queries with more relevant pairs put below the others
    assert cls_lr.per_query_ndcg(y, shifted, groups) == pytest.approx(cls_lr.per_query_ndcg(y, oof, groups))
    assert average_precision_score(y, shifted) < average_precision_score(y, oof) - 0.05


def test_saved_then_loaded_ranker_scores_identically(tiny_bert_dir, tmp_path):
    rng = np.random.default_rng(1)
    ranker = ClsLrRanker(
        str(tiny_bert_dir), rng.normal(size=32), 0.25, max_length=64, device="cpu", metadata={"C": 0.1}
    )
    before = ranker.score_pairs("river bank", [d for _, d in PAIRS])
    ranker.save(tmp_path / "ranker")
    assert sorted(p.name for p in (tmp_path / "ranker").iterdir()) == [CLS_LR_WEIGHTS, CLS_LR_CONFIG]
    loaded = ClsLrRanker.load(tmp_path / "ranker", device="cpu")
    after = loaded.score_pairs("river bank", [d for _, d in PAIRS])
    np.testing.assert_array_equal(after, before)
    assert loaded.max_length == 64 and loaded.metadata == {"C": 0.1}
    np.testing.assert_allclose(
        loaded.predict_proba("river bank", [PAIRS[0][1]]), expit(before[:1]), rtol=1e-6
    )


def modular_cross_encoder_dir(tiny_bert_dir: Path, folder: Path) -> Path:
    """A saved modular cross-encoder (top-layers body + segment-cosine head with a live term-match term), as the
    shipped one is built."""
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer

    body = TopLayersTransformer(str(tiny_bert_dir), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    body.max_seq_length = 64
    body.freeze_below(1, str(tiny_bert_dir))
    head = SegmentCosineHead(32, term_match=True)
    with torch.no_grad():
        head.term_linear.weight.copy_(torch.tensor([[3.0, 0.5, 0.0, 0.0, -0.5]]))
    CrossEncoder(modules=[body, head], device="cpu", activation_fn=torch.nn.Identity()).save_pretrained(
        str(folder)
    )
    return folder


def test_score_feature_is_the_cross_encoders_own_score_read_in_the_same_pass(tiny_bert_dir, tmp_path):
    from ctxir.encoders import models
    from ctxir.explain import explain_cls_lr
    from ctxir.explain.integrated_gradients import COMPLETENESS_TOLERANCE

    folder = modular_cross_encoder_dir(tiny_bert_dir, tmp_path / "ce")
    coef = np.random.default_rng(2).normal(size=33).astype(np.float32)
    coef[-1] = 2.0
    ranker = ClsLrRanker(str(folder), coef, -0.5, max_length=64, device="cpu", score_feature=True)
    query, texts = "river bank", [d for _, d in PAIRS]
    feats = ranker.features(query, texts)  # (pairs, hidden + 1)
    assert feats.shape == (len(texts), 33)
    ce = models.load_cross_encoder(str(folder), "cpu")
    own = np.ravel(ce.predict([(query, t) for t in texts], show_progress_bar=False))
    np.testing.assert_allclose(feats[:, -1], own, atol=1e-4)
    tokenizer, body = models.load_transformer(str(folder), "cpu", attentions=False)
    np.testing.assert_allclose(
        feats[:, :-1], cls_features(body, tokenizer, [(query, t) for t in texts], max_length=64), atol=1e-5
    )
    scores = ranker.score_pairs(query, texts)
    np.testing.assert_allclose(scores, feats @ coef - 0.5, rtol=1e-5, atol=1e-5)

    ranker.save(tmp_path / "ranker")
    assert json.loads((tmp_path / "ranker" / CLS_LR_CONFIG).read_text())["score_feature"] is True
    loaded = ClsLrRanker.load(tmp_path / "ranker", device="cpu")
    np.testing.assert_allclose(loaded.score_pairs(query, texts), scores, atol=1e-5)

    # the explanation's logit is the ranker's, the score feature included, and its attributions add up to it
    out = explain_cls_lr(loaded, query, texts[0], attention=False)
    assert out["score"] == pytest.approx(float(scores[0]), abs=1e-4)
    assert out["completeness_error"] <= COMPLETENESS_TOLERANCE

    with pytest.raises(CtxirError, match="score_feature"):
        ClsLrRanker(str(folder), coef[:-1], 0.0, device="cpu", score_feature=True)
    with pytest.raises(CtxirError, match="score_feature"):
        ClsLrRanker(str(folder), coef, 0.0, device="cpu")


def write_squad(root: Path, n_questions: int = 12) -> Path:
    """root/general/squad-v1.1/dev-v1.1.json: one article, each question 3 words of its own paragraph."""
    rng = random.Random(3)
    paragraphs = [" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(n_questions + 4)]
    data = {
        "data": [
            {
                "title": "Tiny",
                "paragraphs": [
                    {
                        "context": text,
                        "qas": [{"id": f"s{i}", "question": " ".join(text.split()[:3])}]
                        if i < n_questions
                        else [],
                    }
                    for i, text in enumerate(paragraphs)
                ],
            }
        ]
    }
    folder = root / "general" / "squad-v1.1"
    folder.mkdir(parents=True)
    (folder / "dev-v1.1.json").write_text(json.dumps(data))
    return root


def test_general_pairs_draw_only_questions_the_cross_encoder_did_not_train_on(
    tiny_bert_dir, tmp_path, monkeypatch
):
    from training.common import take

    data = write_squad(tmp_path / "data")
    base = tmp_path / "base"
    base.mkdir()
    (base / "metrics.json").write_text(
        json.dumps({"config": {"general": "squad", "general_queries": 4, "seed": 7}})
    )
    monkeypatch.setattr(cls_lr, "SQUAD_DEV_QUERIES", 3)
    config = json.loads((base / "metrics.json").read_text())["config"]
    pairs, record = cls_lr.general_pairs(str(data), ["squad"], -1, config, 42, 3, 20, str(tiny_bert_dir))
    answered = sorted(f"s{i}" for i in range(12))
    trained = set(take(answered, 4, 7))
    dev = set(take([q for q in answered if q not in trained], 3, 7))
    drawn = {g.removeprefix("squad:") for g in pairs.groups}
    assert drawn == set(answered) - trained - dev and len(drawn) == 5
    assert record["squad"]["queries"] == 5 and record["squad"]["unseen_by_base"] == 5
    assert all(g.startswith("squad:") for g in pairs.groups)
    assert int(pairs.labels.sum()) == 5 and len(pairs) == 5 * (1 + 3)


def test_smoke_run_with_the_score_feature_and_general_pairs(tiny_bert_dir, tiny_data, tmp_path):
    folder = modular_cross_encoder_dir(tiny_bert_dir, tmp_path / "ce")
    write_squad(tiny_data, n_questions=120)
    out = tmp_path / "cls-lr"
    args = smoke_args(folder, tiny_data, out, score_feature=True, general="squad", general_queries=6)
    metrics = tcl.run(args)
    extra = metrics["extra"]
    assert (
        extra["features"] == "[CLS] + the cross-encoder's score" and extra["general"]["squad"]["queries"] == 6
    )
    assert metrics["training"]["train_examples"] == 8 * 4 + 6 * 4  # SciFact fit pairs + general pairs
    assert set(extra["feature_extraction"]) == {"train pairs", "general pairs", "test candidates"}
    assert extra["verification"]["cls_lr_max_abs_diff"] < 1e-3
    ranker = ClsLrRanker.load(out, device="cpu")
    assert ranker.score_feature and ranker.coef.shape == (33,)


def test_build_pairs_takes_hard_negatives_per_positive(tiny_data):
    from ctxir.data import load_beir
    from ctxir.retrieval import BM25Retriever

    corpus, queries, qrels = load_beir(tiny_data / "scifact", "train")
    bm25 = BM25Retriever(corpus)
    pairs, ratio = cls_lr.build_pairs(corpus, queries, qrels, bm25, negatives_per_positive=3, depth=20)
    assert set(ratio) == set(queries)
    for qid in queries:
        rows = pairs.rows({qid})
        labels = pairs.labels[rows]
        assert labels.sum() == 1 and (1 - labels).sum() == 3 and ratio[qid] == 3.0
        negatives = [pairs.pairs[i][1] for i in rows if pairs.labels[i] == 0]
        # the hardest: BM25's best-ranked documents that are not judged relevant, in rank order
        hardest = [h.doc_id for h in bm25.query(queries[qid], 20) if h.doc_id not in qrels[qid]][:3]
        assert negatives == [doc_text(corpus[d]) for d in hardest]
        assert all(pairs.pairs[i][0] == queries[qid] for i in rows)


# ---------------------------------------------------------------- the entry point


def test_smoke_run_writes_a_ranker_ctxir_loads(tiny_bert_dir, tiny_data, tmp_path):
    out = tmp_path / "cls-lr"
    args = smoke_args(tiny_bert_dir, tiny_data, out, cache_dir=str(tmp_path / "cache"))
    metrics = tcl.run(args)

    on_disk = json.loads((out / "metrics.json").read_text())
    assert set(REQUIRED_KEYS) <= set(on_disk) and on_disk["model_type"] == "cls-lr"
    assert set(REQUIRED_TRAINING) <= set(on_disk["training"])
    assert on_disk["config"]["negatives_per_positive"] == 3 and on_disk["config"]["base_model"] == str(
        tiny_bert_dir
    )
    assert [(e["task"], e["metric"]) for e in on_disk["evaluations"]] == [
        ("classification", "F1 (relevant class)"),
        ("classification", "accuracy"),
        ("reranking", "nDCG@10"),
    ]
    for row in on_disk["evaluations"]:
        assert set(REQUIRED_EVAL) <= set(row) and 0 <= row["after"] <= 1
    assert on_disk["evaluations"][2]["anchor"] is not None
    reports = on_disk["extra"]["classification_reports"]
    assert {
        "train_queries@0.5",
        "train_queries@tuned",
        "heldout_queries@0.5",
        "heldout_queries@tuned",
    } <= set(reports)
    assert (
        reports["heldout_queries@tuned"]["report"]["relevant"]["support"] == 2
    )  # 2 held-out queries × 1 positive
    assert on_disk["training"]["train_examples"] == 8 * 4  # 8 fit queries × (1 positive + 3 negatives)
    assert on_disk["extra"]["verification"]["cls_lr_max_abs_diff"] < 1e-4
    log = (out / "train.log").read_text()
    assert "heldout_queries@tuned" in log and "nDCG@10" in log

    # 1. the ranker loads with ctxir and re-ranks through the same interface as the cross-encoder
    from ctxir.data import load_beir
    from ctxir.rerank.pipeline import Pipeline
    from ctxir.retrieval import BM25Retriever

    ranker = ClsLrRanker.load(out, device="cpu")
    assert ranker.metadata["C"] == metrics["extra"]["chosen_C"]
    corpus, queries, _ = load_beir(tiny_data / "scifact", "test")
    result = Pipeline(BM25Retriever(corpus), ranker, depth=5).search(next(iter(queries.values())), top_k=3)
    assert len(result.hits) == 3 and result.hits[0].rerank_score >= result.hits[-1].rerank_score

    # 2. a rerun reads the feature cache and fits the same ranker
    tcl.run(replace(args, output_dir=str(tmp_path / "again")))
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert all(t["cached"] for t in again["extra"]["feature_extraction"].values())
    np.testing.assert_array_equal(ClsLrRanker.load(tmp_path / "again", device="cpu").coef, ranker.coef)


def fake_scifact_cross_encoder(tiny_bert_dir: Path, folder: Path, train_query_ids: list[str] | None) -> Path:
    """The tiny BERT folder with the metrics.json train_cross_encoder.py would write next to it."""
    import shutil

    shutil.copytree(tiny_bert_dir, folder)
    metrics = {"model_type": "cross-encoder", "config": {"task": "scifact", "seed": 42}, "extra": {}}
    if train_query_ids is not None:
        metrics["extra"]["train_query_ids"] = train_query_ids
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def test_base_unseen_holds_out_what_the_cross_encoder_never_trained_on(tiny_bert_dir, tiny_data, tmp_path):
    """The held-out queries are those train_cross_encoder.py records it did not train on (its own data builder)."""
    from ctxir.data import load_beir
    from training import cross_encoder_data
    from training import train_cross_encoder as tce

    _, queries, _ = load_beir(tiny_data / "scifact", "train")
    ce_args = tce.CrossEncoderArgs(
        task="scifact", data_dir=str(tiny_data), dev_queries=3, max_samples=6, num_negatives=2, rerank_depth=5
    )
    data = cross_encoder_data.build_scifact(ce_args, "cpu")
    trained_texts, recorded = set(data.train["query"]), data.extra["train_query_ids"]
    assert len(trained_texts) == 6
    base = fake_scifact_cross_encoder(tiny_bert_dir, tmp_path / "ce", recorded)
    unseen = cls_lr.base_unseen_queries(str(base), list(queries))
    assert unseen == set(queries) - set(recorded)
    assert {queries[q] for q in unseen} == {queries[q] for q in queries} - trained_texts

    metrics = tcl.run(
        smoke_args(
            base,
            tiny_data,
            tmp_path / "out",
            heldout_queries="base-unseen",
            max_samples=-1,
            verify_queries=0,
        )
    )
    assert metrics["extra"]["queries"]["fit"] == 6 and metrics["extra"]["queries"]["heldout"] == 6
    assert metrics["training"]["train_examples"] == 6 * 4
    assert "never trained on" in metrics["evaluations"][0]["config"]


def test_base_unseen_refuses_a_cross_encoder_that_names_no_training_queries(
    tiny_bert_dir, tiny_data, tmp_path, no_model
):
    base = fake_scifact_cross_encoder(tiny_bert_dir, tmp_path / "ce", None)
    with pytest.raises(CtxirError, match=r"names no extra\.train_query_ids"):
        tcl.run(smoke_args(base, tiny_data, tmp_path / "out", heldout_queries="base-unseen", max_samples=-1))
    with pytest.raises(CtxirError, match=r"base-unseen needs .*metrics\.json"):
        tcl.run(smoke_args(tiny_bert_dir, tiny_data, tmp_path / "out", heldout_queries="base-unseen"))


# ---------------------------------------------------------------- bad input: clear errors before any training


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the script gets as far as loading the cross-encoder."""

    def refuse(*a, **kw):
        raise AssertionError("the cross-encoder was loaded before the input was checked")

    monkeypatch.setattr(tcl, "load_cross_encoder", refuse)


def test_missing_data_folder_is_a_clear_error(tiny_bert_dir, tmp_path, no_model, capsys):
    missing = tmp_path / "nowhere"
    with pytest.raises(CtxirError, match=r"--data-dir .*nowhere.* does not exist"):
        tcl.run(smoke_args(tiny_bert_dir, missing, tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    code = tcl.main(
        [
            "--data-dir",
            str(missing),
            "--output-dir",
            str(tmp_path / "out"),
            "--base-model",
            str(tiny_bert_dir),
        ]
    )
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_empty_training_set_is_a_clear_error(tiny_bert_dir, tmp_path, no_model):
    data = write_beir(tmp_path / "data", grade=0)  # every judgment non-relevant: nothing to learn from
    with pytest.raises(
        CtxirError, match=r"training set is empty: no query in .*train\.tsv has a relevant document"
    ):
        tcl.run(smoke_args(tiny_bert_dir, data, tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"negatives_per_positive": 0}, "--negatives-per-positive must be ≥ 1, got 0"),
        ({"c_grid": "a,b"}, "--c-grid 'a,b' must be comma-separated numbers"),
        ({"cv_metric": "auc"}, "--cv-metric 'auc' is not known: use one of 'average-precision', 'ndcg'"),
        ({"heldout_fraction": 1.0}, "--heldout-fraction must be between 0 and 1"),
        ({"max_samples": 1}, "need at least 2 train queries"),
        ({"device": "tpu"}, "device 'tpu' is not known"),
        ({"base_model": "/no/such/model"}, "model folder '/no/such/model' does not exist"),
    ],
)
def test_bad_arguments_name_the_problem(tiny_bert_dir, tiny_data, tmp_path, no_model, change, message):
    with pytest.raises(CtxirError, match=message):
        tcl.run(smoke_args(tiny_bert_dir, tiny_data, tmp_path / "out", **change))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the real data (minutes on 2 cores)


def test_the_command_line_is_the_shared_base_plus_its_own_flags():
    from transformers import HfArgumentParser

    from training.common import RunArgs, TrainerRunArgs

    assert issubclass(tcl.ClsLrArgs, RunArgs) and not issubclass(
        tcl.ClsLrArgs, TrainerRunArgs
    )  # no Trainer flags
    argv = [
        "--base-model",
        "ce",
        "--heldout-queries",
        "base-unseen",
        "--rerank-depth",
        "20",
        "--torch-threads",
        "1",
        "--output-dir",
        "out",
    ]
    (args,) = HfArgumentParser(tcl.ClsLrArgs).parse_args_into_dataclasses(args=argv)
    assert (
        args.base_model,
        args.heldout_queries,
        args.rerank_depth,
        args.torch_threads,
        args.output_dir,
    ) == ("ce", "base-unseen", 20, 1, "out")
    # the script's own defaults where the base has others
    assert (args.model_name, tcl.ClsLrArgs().output_dir) == ("ctxir-cls-lr-scifact", "outputs/cls-lr")
    with pytest.raises(ValueError, match="--epochs"):  # a Trainer flag is not this script's
        HfArgumentParser(tcl.ClsLrArgs).parse_args_into_dataclasses(args=["--epochs", "1"])


@pytest.mark.slow
def test_real_scifact_run_with_minilm(shared_data, minilm_path, tmp_path):
    out = tmp_path / "cls-lr"
    metrics = tcl.run(
        tcl.ClsLrArgs(
            base_model=str(minilm_path),
            data_dir=str(shared_data),
            output_dir=str(out),
            max_samples=40,
            max_test_queries=5,
            rerank_depth=10,
            max_length=128,
            cache_dir="",
            device="cpu",
        )
    )
    assert metrics["extra"]["queries"] == {"fit": 32, "heldout": 8, "heldout_reported": 8, "test": 5}
    ranker = ClsLrRanker.load(out, device="cpu")
    assert ranker.coef.shape == (384,) and ranker.max_length == 128


def test_feature_cache_round_trips_and_treats_a_torn_file_as_a_miss(tmp_path, monkeypatch):
    cls, logits = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([0.5, -1.0], dtype=np.float32)
    passes = []
    monkeypatch.setattr(cls_lr, "cross_encoder_pass", lambda *a: passes.append(a) or (cls, logits))
    cache = cls_lr.FeatureCache(str(tmp_path), "model", -1, 64)
    pairs = [("q", "d1"), ("q", "d2")]
    for score_feature in (False, True):
        x, got = cache.read(None, pairs, "pairs", 2, score_feature)
        np.testing.assert_array_equal(x, np.concatenate([cls, logits[:, None]], 1) if score_feature else cls)
        np.testing.assert_array_equal(got, logits)
    assert len(passes) == 1 and cache.timings["pairs"]["cached"]  # the second read came from the cache
    assert not list(tmp_path.glob("*.tmp*"))  # written through a temporary file, then renamed
    (tmp_path / f"{cache.key(pairs)}.npy").write_bytes(b"\x93NUMPY half a fi")  # a write cut short
    cache.read(None, pairs, "pairs", 2, False)
    assert len(passes) == 2 and not cache.timings["pairs"]["cached"]
    assert cls_lr.FeatureCache(str(tmp_path), "model", -1, 128).key(pairs) != cache.key(
        pairs
    )  # another max_length
