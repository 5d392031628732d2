"""Property-based tests (hypothesis): the loaders round-trip whatever a user can write, and the metric functions
stay in range, ignore how ids are spelled and ordered, and agree with an independent implementation (ranx)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxir.data import load_corpus, load_qrels, load_queries
from ctxir.evaluation import evaluate_run

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# ids as people write them: no surrounding blanks, no tab/newline (the separators of the TSV files)
IDS = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=12)
# any text, including JSON-hostile characters: quotes, backslashes, U+2028, emoji, control characters
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@st.composite
def qrels_and_run(draw, max_queries: int = 5, max_docs: int = 30):
    """Judged queries, each retrieved (distinct scores: tie order is a convention, not what is tested here)."""
    docs = [f"d{i}" for i in range(draw(st.integers(3, max_docs)))]
    qrels, run = {}, {}
    for q in range(draw(st.integers(1, max_queries))):
        judged = draw(st.lists(st.sampled_from(docs), min_size=1, max_size=6, unique=True))
        qrels[f"q{q}"] = {d: draw(st.integers(0, 3)) for d in judged}
        retrieved = draw(st.lists(st.sampled_from(docs), min_size=1, max_size=len(docs), unique=True))
        scores = draw(
            st.lists(st.integers(0, 10**6), min_size=len(retrieved), max_size=len(retrieved), unique=True)
        )
        run[f"q{q}"] = {d: s / 1000 for d, s in zip(retrieved, scores, strict=True)}
    return qrels, run


@SETTINGS
@given(qrels_and_run())
def test_every_metric_is_between_0_and_1(data):
    result = evaluate_run(*data)
    for name, value in result.aggregate.items():
        assert 0.0 <= value <= 1.0 + 1e-12, name
    for values in result.per_query.values():
        assert all(0.0 <= v <= 1.0 + 1e-12 for v in values.values())


@SETTINGS
@given(qrels_and_run(), st.randoms(use_true_random=False))
def test_metrics_do_not_depend_on_id_spelling_or_dict_order(data, rng):
    qrels, run = data
    before = evaluate_run(qrels, run).aggregate
    docs = sorted({d for r in run.values() for d in r} | {d for j in qrels.values() for d in j})
    renamed = dict(zip(docs, rng.sample([f"x{i:03d}" for i in range(1000)], len(docs)), strict=True))
    queries = dict(zip(qrels, rng.sample([f"query-{i}" for i in range(100)], len(qrels)), strict=True))

    def shuffled(items: dict) -> dict:
        keys = list(items)
        rng.shuffle(keys)
        return {k: items[k] for k in keys}

    qrels2 = shuffled({queries[q]: shuffled({renamed[d]: g for d, g in j.items()}) for q, j in qrels.items()})
    run2 = shuffled({queries[q]: shuffled({renamed[d]: s for d, s in r.items()}) for q, r in run.items()})
    after = evaluate_run(qrels2, run2).aggregate
    assert after == pytest.approx(before, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(qrels_and_run())
def test_metrics_agree_with_ranx(data):
    ranx = pytest.importorskip("ranx")
    qrels, run = data
    assume(any(g > 0 for j in qrels.values() for g in j.values()))
    # ranx drops judgments of grade 0 and queries without a relevant document; trec_eval counts such a query as 0
    judged = {q: j for q, j in qrels.items() if any(g > 0 for g in j.values())}
    ours = evaluate_run(judged, {q: run[q] for q in judged}, k_values=(10, 100)).aggregate
    theirs = ranx.evaluate(
        ranx.Qrels({q: {d: g for d, g in j.items() if g > 0} for q, j in judged.items()}),
        ranx.Run({q: run[q] for q in judged}),
        ["ndcg@10", "mrr@10", "recall@100", "precision@10", "map@100"],
    )
    for mine, other in (
        ("nDCG@10", "ndcg@10"),
        ("MRR@10", "mrr@10"),
        ("Recall@100", "recall@100"),
        ("P@10", "precision@10"),
        ("MAP@100", "map@100"),
    ):
        assert ours[mine] == pytest.approx(theirs[other], abs=1e-6), mine


@SETTINGS
@given(st.dictionaries(IDS, st.tuples(TEXT, TEXT.filter(str.strip)), min_size=1, max_size=8))
def test_corpus_jsonl_round_trips_any_text(tmp_path_factory, docs):
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    lines = [
        json.dumps({"_id": i, "title": title, "text": text}, ensure_ascii=bool(len(i) % 2))
        for i, (title, text) in docs.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert load_corpus(path) == {i: {"title": title, "text": text} for i, (title, text) in docs.items()}


@SETTINGS
@given(st.dictionaries(IDS, TEXT.filter(str.strip), min_size=1, max_size=8))
def test_queries_jsonl_round_trips_any_text(tmp_path_factory, queries):
    path = tmp_path_factory.mktemp("queries") / "queries.jsonl"
    path.write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\r\n" for q, t in queries.items()), encoding="utf-8"
    )
    assert load_queries(path) == queries


@SETTINGS
@given(
    st.dictionaries(
        IDS, st.dictionaries(IDS, st.integers(-1, 3), min_size=1, max_size=5), min_size=1, max_size=5
    ),
    st.booleans(),
)
def test_qrels_tsv_round_trips(tmp_path_factory, qrels, header):
    assume(all(not _is_number(q) for q in qrels))  # a numeric first row could read as data, not a header
    path = tmp_path_factory.mktemp("qrels") / "test.tsv"
    rows = [f"{q}\t{d}\t{g}" for q, judged in qrels.items() for d, g in judged.items()]
    path.write_text(
        ("query-id\tcorpus-id\tscore\n" if header else "") + "\n".join(rows) + "\n", encoding="utf-8"
    )
    assert load_qrels(path) == qrels


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
