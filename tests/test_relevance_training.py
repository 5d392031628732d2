"""Re-rankers trained for relevance in general (issue #32): the general-domain readers, negatives from every first
stage the app uses, the mixed dev evaluator, calibrated pair probabilities, and the out-of-domain suite's plumbing.
Everything runs on toy data written here and the tiny BERT of conftest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxir.data.general import (
    fix_mojibake,
    load_general,
    load_msmarco_triples,
    load_squad,
    load_wikiqa,
    load_wikiqa_topics,
)
from ctxir.rerank.calibration import CALIBRATION_FILE, Calibration, calibration_for, fit_calibration
from ctxir.types import CtxirError, Hit
from tests.test_training import _write_toy_root
from training import (
    common,
    cross_encoder_args,
    cross_encoder_data,
    evaluate_reranker,
    fusion_choice,
    train_cross_encoder,
)

WIKIQA_HEADER = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel"


def _write_general(root: Path) -> None:
    """general/ shaped like ../shared/data/general: SQuAD (two articles), WikiQA train/dev, MS MARCO triples."""
    squad = {
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {"context": text, "qas": [{"id": f"{title}-{i}", "question": question}]}
                    for i, (text, question) in enumerate(paragraphs)
                ],
            }
            for title, paragraphs in {
                "River_otter": [
                    ("Otters dig dens in the river bank.", "where do otters dig dens"),
                    ("Otters eat fish and crabs.", "what do otters eat"),
                    ("Otters have thick fur.", "what keeps otters warm"),
                ],
                "Bat": [
                    ("Bats find insects by echolocation at night.", "how do bats find insects"),
                    ("Bats roost in caves by day.", "where do bats sleep"),
                    ("Fruit bats eat figs.", "what do fruit bats eat"),
                ],
            }.items()
        ]
    }
    (root / "general" / "squad-v1.1").mkdir(parents=True)
    (root / "general" / "squad-v1.1" / "dev-v1.1.json").write_text(json.dumps(squad))
    wikiqa = root / "general" / "wikiqa"
    wikiqa.mkdir()
    rows = []
    for q, (question, sentences, answer) in enumerate(
        [
            (
                "how do bats hunt",
                ["Bats are mammals .", "Bats hunt insects by echolocation .", "Bats fly ."],
                1,
            ),
            (
                "what do otters eat",
                ["Otters are mustelids .", "Otters live in rivers .", "Otters eat fish ."],
                2,
            ),
            ("who has no answer", ["Nothing here .", "Nor here ."], -1),
        ]
    ):
        rows += [
            f"Q{q}\t{question}\tD{q}\tTitle {q}\tD{q}-{i}\t{s}\t{int(i == answer)}"
            for i, s in enumerate(sentences)
        ]
    for split in ("train", "dev"):
        (wikiqa / f"WikiQA-{split}.tsv").write_text(WIKIQA_HEADER + "\r\n" + "\r\n".join(rows) + "\r\n")
    triples = root / "general" / "msmarco-triples"
    triples.mkdir()
    (triples / "toy_triples.train.small.tsv").write_text(
        "what do otters eat\tOtters eat fish.\tBanks lend money.\n"
        "how do bats see\tBats see with sound.\tThe bat hit the ball.\n",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def general_root(tmp_path_factory) -> Path:
    root = _write_toy_root(tmp_path_factory.mktemp("general-data"))
    _write_general(root)
    return root


# ---------------------------------------------------------------- readers


def test_general_readers_give_the_beir_contract(general_root):
    squad = load_squad(general_root / "general" / "squad-v1.1" / "dev-v1.1.json")
    assert len(squad.corpus) == 6 and len(squad.queries) == 6
    assert squad.qrels["Bat-0"] == {"Bat:0": 1} and squad.groups["Bat:2"] == "Bat"
    assert squad.corpus["River_otter:0"]["title"] == "River otter"
    wikiqa = load_wikiqa(general_root / "general" / "wikiqa" / "WikiQA-dev.tsv")
    assert sorted(wikiqa.queries) == ["Q0", "Q1"]  # Q2 has no correct sentence: nothing to rank first
    assert wikiqa.qrels["Q1"] == {"D1-2": 1} and wikiqa.negatives["Q1"] == ["D1-0", "D1-1"]
    triples = load_msmarco_triples(
        general_root / "general" / "msmarco-triples" / "toy_triples.train.small.tsv"
    )
    assert len(triples.queries) == 2 and len(triples.corpus) == 4
    assert fix_mojibake("donÃ¢Â\x80Â\x99t") == "don’t" and fix_mojibake("naïve") == "naïve"


def test_general_readers_refuse_other_files_clearly(tmp_path):
    bad = tmp_path / "WikiQA-train.tsv"
    bad.write_text("id\tquestion\n1\tx\n")
    with pytest.raises(CtxirError, match="does not start with WikiQA's header"):
        load_wikiqa(bad)
    bad.write_text(WIKIQA_HEADER + "\nQ1\tq\tD1\tT\tD1-0\ts\tmaybe\n")
    with pytest.raises(CtxirError, match="line 2: expected 7 tab-separated fields ending in label 0 or 1"):
        load_wikiqa(bad)
    (tmp_path / "squad.json").write_text("[1, 2]")
    with pytest.raises(CtxirError, match=r"is not a SQuAD v1\.1 file"):
        load_squad(tmp_path / "squad.json")
    (tmp_path / "triples.tsv").write_text("only a query\n")
    with pytest.raises(CtxirError, match="line 1: expected 3 tab-separated fields"):
        load_msmarco_triples(tmp_path / "triples.tsv")


def test_wikiqa_topics_are_long_queries_judged_by_their_own_summary(tmp_path):
    def summary(doc: str, title: str, n: int) -> list[str]:
        return [
            f"Q{doc}\tq\t{doc}\t{title}\t{doc}-{i}\t{title} fact {i} with five words .\t0" for i in range(n)
        ]

    path = tmp_path / "WikiQA-train.tsv"
    # rows out of order: a summary is read in SentenceID order, not file order
    rows = summary("D1", "Bat", 6)[::-1] + summary("D2", "River_otter", 6) + summary("D3", "Moth", 2)
    path.write_text(WIKIQA_HEADER + "\n" + "\n".join(rows) + "\n")
    topics = load_wikiqa_topics(path, topic_words=14, passage_words=14)
    # 14 words reach into sentence 1 (7 words each): sentences 0-1 are the query's and leave the corpus; the rest
    # packs into passages of two sentences (14 words); D3 has nothing after its query and is left out
    assert topics.queries["topic:D1"] == " ".join(f"Bat fact {i} with five words ." for i in (0, 1))
    assert topics.qrels["topic:D1"] == {"D1-p2": 1, "D1-p4": 1}
    assert topics.corpus["D1-p2"] == {
        "title": "",
        "text": "Bat fact 2 with five words . Bat fact 3 with five words .",
    }
    assert "topic:D3" not in topics.queries and not any(d.startswith("D1-p0") for d in topics.corpus)
    assert topics.groups["D2-p4"] == "D2" and len(topics.corpus) == 4
    held = load_wikiqa_topics(
        path, topic_words=14, passage_words=14, exclude_docs={"D1"}, exclude_titles={"river otter"}
    )
    assert held.queries == {} and held.corpus == {}
    path.write_text(WIKIQA_HEADER + "\nQ1\tq\tD1\tT\tfirst\ts\t0\n")
    with pytest.raises(CtxirError, match=r"SentenceID 'first' does not end in -<number>"):
        load_wikiqa_topics(path)


def test_general_topics_leave_out_other_splits_pages_and_the_squad_dev_articles(general_root, tmp_path):
    root = tmp_path / "data"
    (root / "general").mkdir(parents=True)
    for part in ("squad-v1.1", "msmarco-triples"):
        (root / "general" / part).symlink_to(general_root / "general" / part)
    wikiqa = root / "general" / "wikiqa"
    wikiqa.mkdir()
    sentences = [f"sentence {i} of this summary has eight words ." for i in range(12)]
    train = [
        f"Q{d}\tq\t{doc}\t{title}\t{doc}-{i}\t{s}\t0"
        for d, (doc, title) in enumerate([("D1", "Bat"), ("D2", "Moth"), ("D3", "River otter")])
        for i, s in enumerate(sentences)
    ]
    (wikiqa / "WikiQA-train.tsv").write_text(WIKIQA_HEADER + "\n" + "\n".join(train) + "\n")
    (wikiqa / "WikiQA-dev.tsv").write_text(WIKIQA_HEADER + "\n" + train[12] + "\n")  # D2's page is dev's too
    topics = load_general(root, ["wikiqa-topics"])["wikiqa-topics"]
    # SQuAD's dev articles (River_otter, Bat) and WikiQA dev's page (D2) are not trained on
    assert list(topics.queries) == [] and topics.corpus == {}
    (wikiqa / "WikiQA-dev.tsv").write_text(WIKIQA_HEADER + "\n")
    topics = load_general(root, ["wikiqa-topics"])["wikiqa-topics"]
    assert list(topics.queries) == ["topic:D2"] and len(topics.queries["topic:D2"].split()) == 50
    assert all(len(topics.corpus[d]["text"].split()) >= 40 for d in topics.qrels["topic:D2"])


# ---------------------------------------------------------------- training on general data


def test_stage_pools_interleave_each_first_stage_best_first():
    class Fixed:
        def __init__(self, ranked):
            self.ranked = ranked

        def search(self, queries, k):
            return {q: [Hit(d, 1.0 / (i + 1)) for i, d in enumerate(self.ranked)][:k] for q in queries}

    bm25 = cross_encoder_data.bm25_negatives(Fixed(["pos", "a", "b", "c"]), {"q": "x"}, {"q": {"pos"}}, 4)
    hybrid = cross_encoder_data.bm25_negatives(Fixed(["c", "pos", "e"]), {"q": "x"}, {"q": {"pos"}}, 4)
    assert bm25 == {"q": ["a", "b", "c"]} and hybrid == {"q": ["c", "e"]}  # a positive is never a negative
    assert cross_encoder_data.interleave([bm25["q"], hybrid["q"]], 4) == ["a", "c", "b", "e"]
    assert cross_encoder_data.interleave([bm25["q"], hybrid["q"]], 2) == ["a", "c"]
    with pytest.raises(CtxirError, match="--negative-stages names 'dense'"):
        cross_encoder_args.negative_stages("bm25,dense")


def test_cross_encoder_trains_on_general_groups_with_a_mixed_dev_set(
    tiny_bert_dir, general_root, tmp_path, training_argv
):
    """--general adds each source's queries as listwise groups (negatives from BM25 and the hybrid over the source's
    own passages, plus one the source marks), spread over the rounds; the dev score is SciFact's and WikiQA's mean."""
    out = tmp_path / "ce"
    assert (
        train_cross_encoder.main(
            training_argv(
                tiny_bert_dir,
                general_root,
                out,
                task="scifact",
                max_steps=2,
                batch_size=2,
                num_negatives=2,
                negative_pool=4,
                negative_rounds=2,
                head="segment-cosine",
                train_layers=1,
                loss="listnet",
                general="squad,wikiqa,msmarco",
                general_queries=2,
                negative_stages="bm25,hybrid",
                dev_queries=2,
                dev_depth=5,
                rerank_depth=6,
                eval_steps=2,
                eval_before=False,
            )
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    extra = metrics["extra"]
    assert extra["general"] == {
        "squad": {"queries": 2, "passages": 6},
        "wikiqa": {"queries": 2, "passages": 8},
        "msmarco": {"queries": 2, "passages": 4},
    }
    assert extra["negative_stages"] == ["bm25", "hybrid"]
    # claims in every round, each general query in one
    assert metrics["training"]["train_examples"] == 2 * extra["train_queries"] + 6
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    dev = next(r for r in log if "eval_dev-mix_ndcg@10" in r)
    assert dev["eval_dev-mix_ndcg@10"] == pytest.approx(
        (dev["eval_scifact-train-heldout_ndcg@10"] + dev["eval_wikiqa-dev_ndcg@10"]) / 2
    )
    # the fused mode chosen on the held-out claims and on SQuAD questions the run did not train on, equally weighted
    args = evaluate_reranker.EvaluateRerankerArgs(
        model=str(out),
        data_dir=str(general_root),
        choose_fusion=True,
        fusion_dev="scifact,squad",
        fusion_dev_queries=2,
        fusion_depth=5,
        depths="",
        device="cpu",
        rerank_backend="torch",
    )
    parts = fusion_choice.dev_claims(out, args).parts
    squad = load_squad(general_root / "general" / "squad-v1.1" / "dev-v1.1.json")
    trained = set(common.take(sorted(squad.queries), 2, 42))
    assert len(parts["squad"][1]) == 2 and not {q.removeprefix("squad:") for q in parts["squad"][1]} & trained
    evaluate_reranker.run(args)
    fusion = json.loads((out / "fusion.json").read_text())
    assert (
        fusion["metric"] == "nDCG@10, mean of scifact, squad" and "2 SQuAD questions" in fusion["chosen_on"]
    )
    assert set(fusion["first_stages"]) == {"dense", "hybrid"}


def test_general_needs_a_listwise_scifact_run(tiny_bert_dir, general_root, tmp_path, capsys):
    code = train_cross_encoder.main(
        [
            "--loss",
            "bce",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(general_root),
            "--output-dir",
            str(tmp_path / "x"),
            "--general",
            "squad",
        ]
    )
    assert code == 2
    assert "--general 'squad' adds listwise groups" in capsys.readouterr().err


# ---------------------------------------------------------------- calibrated probabilities


def test_calibration_fits_saves_and_loads(tmp_path):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 600)
    scores = 18.0 + 1.5 * labels + rng.normal(0, 0.7, 600)
    calibration = fit_calibration(scores, labels, fitted_on="toy")
    report = calibration.report
    assert report["after"]["log_loss"] < report["before"]["log_loss"] and report["after"]["ece"] < 0.1
    probabilities = calibration.probabilities(scores)
    assert ((probabilities > 0) & (probabilities < 1)).all()
    assert (np.argsort(probabilities) == np.argsort(scores)).all()  # monotonic: the ranking is unchanged
    # a relevant pair's mean probability is far above a non-relevant one's, and both match their base rate
    assert probabilities[labels == 1].mean() > 0.7 > 0.3 > probabilities[labels == 0].mean()
    assert probabilities.mean() == pytest.approx(labels.mean(), abs=0.02)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    calibration.save(folder)
    loaded = calibration_for(str(folder))
    assert isinstance(loaded, Calibration) and loaded.scale == pytest.approx(calibration.scale)
    (folder / CALIBRATION_FILE).write_text(json.dumps({"method": "platt", "scale": "warm"}))
    with pytest.raises(CtxirError, match="is damaged: it needs numbers 'scale' and 'bias'"):
        calibration_for(str(folder))
    assert calibration_for(str(tmp_path / "elsewhere")) is None


def test_cross_encoder_probabilities_need_a_calibration(tiny_bert_dir):
    from sentence_transformers import CrossEncoder

    from ctxir.rerank import CrossEncoderReranker

    reranker = CrossEncoderReranker(
        CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu"), backend="torch"
    )
    with pytest.raises(CtxirError, match=r"has no calibration\.json: fit one with"):
        reranker.predict_proba("bats", ["Bats hunt."])
    reranker.calibration = Calibration(scale=1.0, bias=0.0)
    raw = reranker.score_pairs("bats", ["Bats hunt.", "Banks lend."])
    assert reranker.predict_proba("bats", ["Bats hunt.", "Banks lend."]) == pytest.approx(
        1 / (1 + np.exp(-raw))
    )


# ---------------------------------------------------------------- the out-of-domain suite


def test_suite_sets_every_collection_and_first_stage():
    args = evaluate_reranker.EvaluateRerankerArgs(model="m", suite=True)
    depths, collections = evaluate_reranker.check_args(args)
    assert depths == [20] and collections == list(evaluate_reranker.COLLECTIONS)
    assert args.other_first_stages == "bm25,dense,hybrid"
    with pytest.raises(
        CtxirError, match="--collections names 'cran': use a comma list of scifact, msmarco, demo"
    ):
        evaluate_reranker.check_args(evaluate_reranker.EvaluateRerankerArgs(model="m", collections="cran"))


def test_suite_scores_a_classic_collection_over_every_first_stage(
    tiny_bert_dir, general_root, tmp_path, training_argv
):
    """A classic collection (classic/<name>_beir) is re-ranked over BM25, dense and the hybrid, which fuses each
    part's top 100 as the app's does, whatever the re-ranked depth; each document is scored once."""
    import shutil

    classic = general_root / "classic" / "med_beir"
    if not classic.exists():
        shutil.copytree(general_root / "scifact", classic)
    out = tmp_path / "ce"
    assert (
        train_cross_encoder.main(
            training_argv(
                tiny_bert_dir,
                general_root,
                out,
                task="scifact",
                max_steps=1,
                batch_size=2,
                num_negatives=2,
                head="segment-cosine",
                train_layers=1,
                loss="listnet",
                dev_queries=2,
                rerank_depth=10,
                eval_before=False,
            )
        )
        == 0
    )
    result = evaluate_reranker.run(
        evaluate_reranker.EvaluateRerankerArgs(
            model=str(out),
            data_dir=str(general_root),
            collections="med",
            other_first_stages="bm25,dense,hybrid",
            other_depth=10,
            depths="10",
            device="cpu",
            rerank_backend="torch",
        )
    )
    assert set(result["med"]) == {"bm25@10", "dense@10", "hybrid@10"}
    for row in result["med"].values():
        assert row["queries"] == 8 and {"first_stage", "alone", "fused"} <= set(row)
    from ctxir.data import load_beir
    from ctxir.encoders import BiEncoder
    from ctxir.evaluation import evaluate_run
    from ctxir.rerank.pipeline import build_first_stages
    from ctxir.types import run_from_hits

    corpus, queries, qrels = load_beir(classic, "test")
    app_hybrid = build_first_stages(corpus, ["hybrid"], [BiEncoder()])["hybrid"]  # the app's: parts' top 100
    # in the order the app shows it (a rank fusion ties often; trec_eval's own rule would order ties by doc id)
    expected = evaluate_run(qrels, run_from_hits(app_hybrid.search(queries, 10))).aggregate["nDCG@10"]
    assert result["med"]["hybrid@10"]["first_stage"]["nDCG@10"] == pytest.approx(expected, abs=1e-4)
    assert any(
        row["dataset"] == "medline" for row in json.loads((out / "metrics.json").read_text())["evaluations"]
    )


def test_every_general_source_has_a_license_for_the_model_card():
    """A model trained on a general source is shipped with a card whose license comes from its training data
    (training/ship.py refuses a dataset without one): a new source needs its license in ctxir.publish.licenses.DATA_LICENSES."""
    from ctxir.data.general import GENERAL_SOURCES
    from ctxir.publish.licenses import DATA_LICENSES as LICENSES
    from ctxir.publish.licenses import parse_license

    for source in GENERAL_SOURCES:
        assert LICENSES.get(source), source
        parse_license(LICENSES[source])  # a license the card can name
