"""Published anchors reproduced on the shared benchmark data (slow: minutes of CPU on first run)."""

import pytest

from ctxir.data import load_beir, load_sts
from ctxir.encoders import BiEncoder
from ctxir.evaluation import evaluate_run, paired_retrieval, sts_correlation
from ctxir.retrieval import DenseRetriever
from ctxir.types import run_from_hits


def test_paired_retrieval_finds_compressions(minilm):
    # The seed task: find the original sentence from its compression among the other originals.
    originals = [
        "The committee approved the new budget after a long debate on Tuesday.",
        "Heavy rain flooded several streets in the old town overnight.",
        "The striker scored twice in the second half to win the match.",
        "Researchers found that the drug lowered blood pressure in older adults.",
    ]
    compressions = [
        "committee approved budget",
        "rain flooded streets",
        "striker scored twice",
        "drug lowered blood pressure",
    ]
    result = paired_retrieval(BiEncoder(minilm, cache=None), compressions, originals)
    assert result["Recall@1"] == 1.0 and result["MRR"] == 1.0


@pytest.mark.slow
def test_minilm_scifact_reproduces_published_0645(shared_data, minilm):
    corpus, queries, qrels = load_beir(shared_data / "scifact", "test")
    dense = DenseRetriever(corpus, BiEncoder(minilm))
    ndcg = evaluate_run(qrels, run_from_hits(dense.search(queries, 100))).aggregate["nDCG@10"]
    assert ndcg == pytest.approx(0.645, abs=0.005)


@pytest.mark.slow
def test_minilm_stsb_reproduces_published_0820(shared_data, minilm):
    pairs = load_sts(shared_data / "stsbenchmark", "test")
    enc = BiEncoder(minilm, cache=None)
    left, right = enc.encode([a for a, _, _ in pairs]), enc.encode([b for _, b, _ in pairs])
    spearman = sts_correlation((left * right).sum(1), [s for _, _, s in pairs])["spearman"]
    assert spearman == pytest.approx(0.820, abs=0.005)
