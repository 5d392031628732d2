"""scripts/results_adapt.py's second dev set: SQuAD v1.1 dev written as a BEIR folder that ``ctxir evaluate`` reads,
and the dev sets kept apart from the test table (issue 50). On a tiny SQuAD file written here; no model runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxir.data.beir import load_beir
from scripts import results_adapt

ARTICLES = {
    "River_otter": [("Otters dig dens in the river bank.", ["What do otters dig?", "Where are the dens?"])],
    "Bank": [
        ("Banks lend money to firms.", ["Who lends money?"]),
        ("Savings earn interest.", ["What do savings earn?", "What earns interest?"]),
    ],
}


@pytest.fixture
def squad_data(tmp_path, monkeypatch):
    data = {
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {
                        "context": text,
                        "qas": [{"id": f"{title}-{i}-{j}", "question": q} for j, q in enumerate(qs)],
                    }
                    for i, (text, qs) in enumerate(paragraphs)
                ],
            }
            for title, paragraphs in ARTICLES.items()
        ]
    }
    folder = tmp_path / "shared" / "general" / "squad-v1.1"
    folder.mkdir(parents=True)
    (folder / "dev-v1.1.json").write_text(json.dumps(data))
    monkeypatch.setattr(results_adapt, "DATA", tmp_path / "shared")
    monkeypatch.setattr(results_adapt, "DEV_QUESTIONS", 3)
    return tmp_path


def test_squad_is_written_as_a_beir_folder_with_a_seeded_sample_of_its_questions(squad_data):
    out = results_adapt.general_folder("squad", squad_data / "work" / "squad")
    corpus, queries, qrels = load_beir(out, split="dev")
    assert sorted(corpus) == [
        "Bank:0",
        "Bank:1",
        "River_otter:0",
    ]  # every paragraph, sampled questions or not
    assert corpus["Bank:1"] == {"title": "Bank", "text": "Savings earn interest."}
    assert len(queries) == 3 and set(qrels) == set(queries)
    for qid, judged in qrels.items():  # each question judged by the paragraph it is answered in
        title, paragraph, _ = qid.rsplit("-", 2)
        assert judged == {f"{title}:{paragraph}": 1}
    again = results_adapt.general_folder("squad", squad_data / "again" / "squad")
    assert load_beir(again, split="dev")[1] == queries  # the same draw (seed 0) every time


def test_squad_is_a_dev_set_only(squad_data):
    with pytest.raises(
        SystemExit,
        match=r"--collections 'squad' is not one of .*squad, msmarco-triples, wikiqa are dev sets: add --dev true",
    ):
        results_adapt.run(results_adapt.ResultsAdaptArgs(collections="squad", work=str(squad_data / "work")))


def test_a_doc_that_does_not_exist_yet_is_written_with_the_block(tmp_path):
    """--doc FILE / --training-doc FILE outside the repository (as the seed run in docs/results.md passes them): the
    file is made with the heading and block, not a FileNotFoundError after the adaptation's hours."""
    doc = tmp_path / "new.md"
    from scripts.results_tables import write_block

    write_block(doc, "<!-- a:start -->\nx\n<!-- a:end -->", "## H")
    assert doc.read_text() == "\n## H\n\n<!-- a:start -->\nx\n<!-- a:end -->\n"
    write_block(doc, "<!-- a:start -->\ny\n<!-- a:end -->", "## H")
    assert doc.read_text() == "\n## H\n\n<!-- a:start -->\ny\n<!-- a:end -->\n"


def test_against_is_a_paired_test_of_two_dev_adapters_query_by_query(tmp_path, monkeypatch):
    """--against: this setting's per-query figures minus the other setting's, stage by stage (not the two deltas
    against the base subtracted); a setting never run is named with what to do."""
    work = tmp_path / "work"
    for folder in ("squad-new", "squad"):  # --label new, and the default's folder (no label)
        (work / folder).mkdir(parents=True)
        (work / folder / "adapt.json").write_text(json.dumps({"complete": True, "teacher": folder}))
        (work / folder / "adapter_model.safetensors").write_bytes(folder.encode())
    # per query nDCG@10: the new adapter wins q1 and q2, loses q3; the old one is flat
    figures = {"squad-new": [0.9, 0.8, 0.1], "squad": [0.5, 0.5, 0.5]}

    def evaluate(folder, model, split, run, out, args):
        values = figures[Path(model).name]
        return {"per_query": {"dense": {f"q{i}": {"nDCG@10": v} for i, v in enumerate(values, 1)}}}

    monkeypatch.setattr(results_adapt, "evaluate", evaluate)
    args = results_adapt.ResultsAdaptArgs(dev=True, label="new", against="default", work=str(work))
    systems = {"dense": ("dense", "dense", "dense")}
    mine = {
        "dense": evaluate(None, str(work / "squad-new"), "dev", "dense", None, args)["per_query"]["dense"]
    }
    found = results_adapt.versus("squad", tmp_path, "dev", mine, systems, args)
    assert found["label"] == "default" and found["teacher"] == "squad"
    assert found["stages"]["dense"]["delta"] == pytest.approx((0.4 + 0.3 - 0.4) / 3, abs=1e-4)
    assert (found["stages"]["dense"]["wins"], found["stages"]["dense"]["losses"]) == (2, 1)
    args.against = "never-run"
    with pytest.raises(
        SystemExit, match=r"--against 'never-run': .*squad-never-run holds no complete adapter"
    ):
        results_adapt.versus("squad", tmp_path, "dev", mine, systems, args)
    with pytest.raises(SystemExit, match="--against compares two dev settings: add --dev true"):
        results_adapt.run(results_adapt.ResultsAdaptArgs(against="default", work=str(work)))


def test_seeds_adapt_once_per_seed_paired_with_the_same_seed_of_the_other_setting(tmp_path, monkeypatch):
    """--seeds 42,1,2: ctxir adapt's own seed keeps the folder names, the others get their own (and --seed N), each
    is compared with the other setting at the same seed, and the mean over the seeds is recorded."""
    seen = []

    def measure(name, args):
        seen.append((args.label, args.against, args.adapt_args))
        delta = {"spans": 0.03, "spans-seed1": 0.02, "spans-seed2": 0.01}[args.label]
        return {
            "collection": "SQuAD",
            "machine": "here",
            "rows": [{"stage": "dense", "delta": delta}],
            "against": {"stages": {"dense": {"delta": delta - 0.02}}},
        }

    monkeypatch.setattr(results_adapt, "measure", measure)
    args = results_adapt.ResultsAdaptArgs(
        dev=True,
        collections="squad",
        label="spans",
        against="complement",
        adapt_args="--query-kinds title,span",
        seeds="42,1,2",
        work=str(tmp_path),
    )
    results_adapt.run(args)
    assert seen == [
        ("spans", "complement", "--query-kinds title,span"),
        ("spans-seed1", "complement-seed1", "--query-kinds title,span --seed 1"),
        ("spans-seed2", "complement-seed2", "--query-kinds title,span --seed 2"),
    ]
    summary = json.loads((tmp_path / "dev-squad-spans-seeds.json").read_text())
    assert summary["stages"]["dense"] == {"deltas": [0.03, 0.02, 0.01], "mean": 0.02}
    assert summary["against"]["stages"]["dense"]["mean"] == pytest.approx(0.0)
    assert (tmp_path / "dev-squad-spans-seed2.json").is_file()  # and one record per seed
    with pytest.raises(SystemExit, match="--seeds sets each run's --seed: take --seed out of --adapt-args"):
        results_adapt.run(
            results_adapt.ResultsAdaptArgs(dev=True, collections="squad", seeds="1,2", adapt_args="--seed 3")
        )
    with pytest.raises(SystemExit, match=r"--seeds '1,x' is not a comma list of whole numbers"):
        results_adapt.run(results_adapt.ResultsAdaptArgs(dev=True, collections="squad", seeds="1,x"))


def _table(deltas: dict[str, tuple[float, float, float]]) -> dict:
    """A test table: collection → its (dense, hybrid, hybrid + re-ranker) Δ."""
    stages = ("dense", "hybrid", "hybrid + re-ranker")
    return {
        "collections": [
            {
                "collection": name,
                "split": "test",
                "rows": [{"stage": s, "delta": d} for s, d in zip(stages, ds, strict=True)],
            }
            for name, ds in deltas.items()
        ]
    }


def test_the_seed_block_sets_each_seeds_delta_beside_the_default_and_reads_the_musts_on_their_mean():
    from scripts.results_adapt_doc import seed_spread

    default = _table(
        {"LISA": (0.02, -0.018, -0.017), "NPL": (0.007, -0.007, -0.006), "Only here": (0.1, 0, 0)}
    )
    others = {
        1: _table({"LISA": (0.007, -0.014, -0.013), "NPL": (0.010, 0.001, 0.002)}),
        2: _table({"LISA": (0.011, -0.001, 0.0), "NPL": (-0.002, -0.003, -0.003)}),
    }
    lines = seed_spread(default, others)
    rows = {
        line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ") and "Δ" not in line
    }
    assert set(rows) == {"LISA", "NPL"}  # a collection not measured at every seed is left out
    # seed 42 first, then 1 and 2, then the mean: LISA's hybrid (−0.018 − 0.014 − 0.001) / 3
    assert "| -0.0180, -0.0140, -0.0010 | -0.0110 |" in rows["LISA"]
    assert "| +0.0070, +0.0100, -0.0020 | +0.0050 |" in rows["NPL"]
    musts = lines[-2]
    assert musts.startswith(
        "On the means over the seeds: Musts (issue 50) over 2 collection(s): dense up on 2 of 2"
    )
    assert "**not met** on LISA." in musts  # LISA's mean hybrid −0.011; NPL's −0.003 is within 0.005
