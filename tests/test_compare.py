"""ctxir.evaluation.compare: paired significance tests between systems, hand-checked on tiny cases, and the --compare
CLI."""

import json

import numpy as np
import pytest

from ctxir.evaluation.compare import (
    adjust_pvalues,
    compare_systems,
    format_comparison,
    paired_pvalue,
)
from ctxir.evaluation.evaluate import main
from ctxir.types import CtxirError


def per_query(values: list[float], metric: str = "nDCG@10") -> dict:
    return {f"q{i}": {metric: v} for i, v in enumerate(values)}


# ---------------------------------------------------------------- the tests' p-values, by hand


def test_randomization_test_is_exact_on_few_queries():
    # differences (0.25, 0.25, 0, 0.5), mean 0.25: of the 16 sign swaps, those with |mean| ≥ 0.25 are all-plus and
    # all-minus over the three non-zero ones, each twice (the zero's sign changes nothing): 4/16
    assert paired_pvalue([0.5, 0.25, 1.0, 0.0], [0.75, 0.5, 1.0, 0.5]) == pytest.approx(0.25)
    # five equal gains: only all-plus and all-minus reach |mean| 1: 2/32
    assert paired_pvalue([0] * 5, [1] * 5) == pytest.approx(0.0625)
    # four gains and a loss, mean 0.6: sign swaps with at most one minority sign reach |mean| ≥ 0.6: 2·(1+5)/32
    assert paired_pvalue([0] * 5, [1, 1, 1, 1, -1]) == pytest.approx(12 / 32)
    assert paired_pvalue([0.3, 0.7], [0.3, 0.7]) == 1.0  # identical systems


def test_t_test_p_value_by_hand():
    # differences (0.25, 0.25, 0, 0.5): mean 0.25, sd = sqrt(0.125/3) = 0.2041, t = 0.25 / (0.2041/2) = 2.449,
    # 3 degrees of freedom: two-sided p = 0.0917 (a t table gives 0.05 < p < 0.10)
    assert paired_pvalue([0.5, 0.25, 1.0, 0.0], [0.75, 0.5, 1.0, 0.5], "t-test") == pytest.approx(
        0.0917, abs=1e-4
    )


def test_sampled_randomization_agrees_with_the_exact_test_and_with_ranx():
    rng = np.random.default_rng(3)
    x = rng.random(12)
    y = np.clip(x + rng.normal(0.08, 0.15, 12), 0, 1)
    exact = paired_pvalue(x, y, n_permutations=2**12)  # every swap
    sampled = paired_pvalue(x, y, n_permutations=4_000, seed=1)
    assert abs(sampled - exact) < 0.03 and 0.01 < exact < 0.9
    assert paired_pvalue(x, y, n_permutations=4_000, seed=1) == sampled  # seeded
    ranx = pytest.importorskip("ranx.statistical_tests.fisher_randomization_test")
    theirs, _ = ranx.fisher_randomization_test(x, y, 4_000, 0.05, 42)
    assert abs(theirs - exact) < 0.03


@pytest.mark.parametrize(
    ("pvalues", "correction", "expected"),
    [
        ([0.01, 0.04, 0.03], "bonferroni", [0.03, 0.12, 0.09]),
        ([0.01, 0.04, 0.03], "holm", [0.03, 0.06, 0.06]),  # 0.01·3; 0.03·2 = 0.06; max(0.04·1, 0.06)
        ([0.01, 0.02, 0.03, 0.04, 0.05], "holm", [0.05, 0.08, 0.09, 0.09, 0.09]),  # ·5 ·4 ·3, then monotone
        ([0.4, 0.5], "bonferroni", [0.8, 1.0]),  # capped at 1
        ([0.4, 0.5], "holm", [0.8, 0.8]),
        ([0.2, 0.01], "none", [0.2, 0.01]),
    ],
)
def test_corrections_by_hand(pvalues, correction, expected):
    assert adjust_pvalues(pvalues, correction) == pytest.approx(expected)


def test_holm_finds_what_bonferroni_misses():
    # B gains on all 6 queries: p = 2/64; C on 5 of 6 (one tie): p = 4/64. Bonferroni (×2): 0.0625, 0.125.
    # Holm: 0.03125·2 = 0.0625, then max(0.0625·1, 0.0625) = 0.0625: at α = 0.1 both differ, Bonferroni only B
    systems = {"A": per_query([0] * 6), "B": per_query([1] * 6), "C": per_query([1, 1, 1, 1, 1, 0])}
    holm = compare_systems(systems, ["nDCG@10"], alpha=0.1)
    bonferroni = compare_systems(systems, ["nDCG@10"], alpha=0.1, correction="bonferroni")
    assert [(r["system"], r["p"], r["significant"]) for r in holm["comparisons"]] == [
        ("B", pytest.approx(2 / 64), True),
        ("C", pytest.approx(4 / 64), True),
    ]
    assert [r["p_adjusted"] for r in bonferroni["comparisons"]] == pytest.approx([0.0625, 0.125])
    assert [r["significant"] for r in bonferroni["comparisons"]] == [True, False]
    assert holm["systems"]["C"]["nDCG@10"] == pytest.approx(5 / 6)
    assert [(r["wins"], r["losses"], r["ties"]) for r in holm["comparisons"]] == [(6, 0, 0), (5, 0, 1)]
    table = format_comparison(bonferroni)
    assert "| B | 1.0000† |" in table and "| C | 0.8333 |" in table and "| A (baseline) | 0.0000 |" in table


def test_bad_comparisons_are_refused_with_a_message():
    with pytest.raises(CtxirError, match=r"'B' was evaluated on 2 queries and 'A' on 3; they differ in 1"):
        compare_systems({"A": per_query([0, 1, 1]), "B": per_query([1, 1])}, ["nDCG@10"])
    with pytest.raises(CtxirError, match=r"metric 'MRR@10' is not in 'A'"):
        compare_systems({"A": per_query([0, 1]), "B": per_query([1, 1])}, ["MRR@10"])
    with pytest.raises(CtxirError, match=r"test 'wilcox' is not known: use one of 'randomization', 't-test'"):
        compare_systems(
            {"A": per_query([0, 1]), "B": per_query([1, 1])},
            ["nDCG@10"],
            test="wilcox",
        )
    with pytest.raises(CtxirError, match="at least 2 systems"):
        compare_systems({"A": per_query([0, 1])}, ["nDCG@10"])
    systems = {"A": per_query([0, 1, 0, 1]), "B": per_query([1, 1, 1, 1])}
    with pytest.raises(CtxirError, match=r"alpha must be between 0 and 1, got 1.5"):
        compare_systems(systems, ["nDCG@10"], alpha=1.5)
    t_test = compare_systems(systems, ["nDCG@10"], test="t-test", alpha=0.2)
    assert (t_test["test"], t_test["alpha"], t_test["correction"]) == ("t-test", 0.2, "holm")


# ---------------------------------------------------------------- ctxir evaluate --compare


@pytest.fixture
def results(tmp_path, write_beir):
    """Three results JSONs on the same six queries: a real BM25 run (every query's document first) and two
    systems written from it: one that lost q0..q2 entirely, one holding both a first stage and a re-ranked run."""
    queries = {
        f"q{i}": text
        for i, text in enumerate(
            [
                "river otters",
                "snake prey",
                "bank account",
                "python code",
                "otters on the bank",
                "constricts prey",
            ]
        )
    }
    qrels = {
        "q0": {"d1": 1},
        "q1": {"d3": 1},
        "q2": {"d2": 1},
        "q3": {"d4": 1},
        "q4": {"d1": 1},
        "q5": {"d3": 1},
    }
    folder = write_beir(tmp_path / "toy", queries, {"test": qrels})
    bm25 = tmp_path / "bm25.json"
    assert main(["--data", str(folder), "--retriever", "bm25", "--output", str(bm25)]) == 0
    result = json.loads(bm25.read_text())
    assert result["metrics"]["bm25"]["nDCG@10"] == 1.0
    worse = {
        q: ({m: 0.0 for m in values} if q in ("q0", "q1", "q2") else values)
        for q, values in result["per_query"]["bm25"].items()
    }
    (tmp_path / "worse.json").write_text(
        json.dumps({**result, "system": "worse", "per_query": {"worse": worse}})
    )
    two = {**result, "system": "bm25 + reranker", "per_query": {"bm25": worse, "bm25 + reranker": worse}}
    (tmp_path / "two.json").write_text(json.dumps(two))
    return tmp_path


def test_evaluate_compare_prints_the_table_and_writes_json(results, capsys):
    out = results / "compare.json"
    assert (
        main(
            [
                "--compare",
                str(results / "bm25.json"),
                str(results / "worse.json"),
                "--metrics",
                "nDCG@10,MRR@10",
                "--test",
                "randomization",
                "--correction",
                "holm",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| bm25 (baseline) | 1.0000 | 1.0000 |" in printed and "| worse | 0.5000 | 0.5000 |" in printed
    saved = json.loads(out.read_text())
    # three losses of 1.0 and three ties: the two all-plus/all-minus patterns of the three, times 2^3 for the ties
    assert [(r["metric"], r["delta"], r["p"]) for r in saved["comparisons"]] == [
        ("nDCG@10", -0.5, pytest.approx(16 / 64)),
        ("MRR@10", -0.5, pytest.approx(16 / 64)),
    ]
    assert saved["n_queries"] == 6 and saved["test"] == "randomization"


def test_evaluate_compare_picks_a_system_of_a_file(results, capsys):
    assert (
        main(
            [
                "--compare",
                str(results / "bm25.json"),
                f"{results / 'two.json'}::bm25",
                "--test",
                "t-test",
                "--metrics",
                "nDCG@10",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    # both are named bm25: the file names tell them apart
    assert "| bm25: bm25 (baseline) | 1.0000 |" in printed and "| two: bm25 | 0.5000 |" in printed
    assert "paired t-test" in printed


def test_evaluate_compare_errors_are_messages(results, capsys):
    assert main(["--compare", str(results / "bm25.json")]) == 2
    assert "needs at least 2 results JSONs" in capsys.readouterr().err
    assert main(["--compare", str(results / "bm25.json"), str(results / "nope.json")]) == 2
    assert "'" + str(results / "nope.json") + "' is not a file" in capsys.readouterr().err
    assert main(["--compare", str(results / "bm25.json"), str(results / "two.json") + "::fused"]) == 2
    assert "holds the systems 'bm25', 'bm25 + reranker': pick one as" in capsys.readouterr().err
    assert (
        main(["--compare", str(results / "bm25.json"), str(results / "worse.json"), "--metrics", "nDCG@7"])
        == 2
    )
    assert "metric 'nDCG@7' is not in 'bm25'" in capsys.readouterr().err


def test_python_m_ctxir_compare_takes_the_files_first(results, capsys):
    from ctxir.evaluation.compare import main as compare_main

    assert (
        compare_main(
            [
                str(results / "bm25.json"),
                str(results / "worse.json"),
                "--metrics",
                "MRR@10",
                "--correction",
                "bonferroni",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| worse | 0.5000 |" in printed and "bonferroni-corrected over 1 comparisons" in printed
