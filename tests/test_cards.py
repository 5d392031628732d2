"""Model cards rendered from metrics.json (ctxir.publish.cards): front matter, model-index, licenses, sections; the
Space YAML."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from huggingface_hub import metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results

from ctxir.publish.cards import CardInputs, check_card, render_card
from ctxir.publish.licenses import combine_licenses, parse_license
from ctxir.publish.metrics_file import license_text, training_license, validate_metrics
from ctxir.types import CtxirError
from tests.conftest import code_blocks

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "## Usage",
    "## Intended use",
    "## Training",
    "## Evaluation",
    "## Limitations and biases",
    "## License",
    "## Citation",
)
# a bi-encoder's card keeps its usage after the evaluation; a re-ranker's leads with what its snippet gets
BI_ENCODER_SECTIONS = (*SECTIONS[1:4], "## Usage", *SECTIONS[4:])
FACTS = {
    "bi-encoder": {
        "dimension": 384,
        "pooling": "mean",
        "normalize": True,
        "max_seq_length": 256,
        "modules": "Transformer → Pooling → Normalize",
        "plain_transformers": True,
    },
    "cross-encoder": {"num_labels": 1, "max_length": 512, "activation": "Sigmoid"},
    "cls-lr": {
        "hidden_size": 384,
        "layer": -1,
        "max_length": 512,
        "C": 1.0,
        "class_weight": "balanced",
        "train_positives": 919,
        "base_source": "cross-encoder",
    },
}


def render(model_type: str, metrics: dict, tmp_path: Path | None = None, **inputs):
    card = render_card(metrics, CardInputs(repo_id=f"ctxir/{model_type}", facts=FACTS[model_type], **inputs))
    if tmp_path is not None:
        card.save(tmp_path / "README.md")
    return card


@pytest.mark.parametrize("model_type", ["bi-encoder", "cross-encoder", "cls-lr"])
def test_rendered_card_front_matter_and_model_index_equal_metrics(model_type, tmp_path, metrics_record):
    metrics = metrics_record(model_type)
    render(model_type, metrics, tmp_path, base_model_id="sentence-transformers/all-MiniLM-L6-v2")
    meta = metadata_load(tmp_path / "README.md")
    assert meta["license"] == "cc-by-nc-2.0"
    assert meta["language"] == "en"
    assert meta["library_name"] == {"cls-lr": "ctxir"}.get(model_type, "sentence-transformers")
    assert meta["pipeline_tag"] == {"bi-encoder": "sentence-similarity"}.get(model_type, "text-ranking")
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["datasets"] == ["BeIR/scifact"]  # training data only; evaluation data is not training data
    assert "ctxir" in meta["tags"] and "scifact" in meta["tags"]
    name, results = model_index_to_eval_results(meta["model-index"])
    assert name == metrics["model_name"]
    got = {(r.dataset_name, r.dataset_split, r.metric_name): r.metric_value for r in results}
    assert got == {
        ("SciFact (BEIR)", "test", "nDCG@10 (dense exact)"): 0.6837159,
        ("SciFact (BEIR)", "test", "nDCG@10 (rerank BM25 top-100)"): 0.6912,
    }  # the lead's dataset and split only: the body's table has the STS-B figure
    assert {r.metric_type for r in results} == {"ndcg_at_10"}
    assert check_card(tmp_path / "README.md", metrics) == meta


@pytest.mark.parametrize("model_type", ["bi-encoder", "cross-encoder", "cls-lr"])
def test_rendered_card_body_has_every_section_and_the_run_facts(model_type, metrics_record):
    metrics = metrics_record(model_type)
    text = render(model_type, metrics).text
    sections = BI_ENCODER_SECTIONS if model_type == "bi-encoder" else SECTIONS
    positions = [text.find(s) for s in sections]
    assert -1 not in positions and positions == sorted(positions), dict(zip(sections, positions, strict=True))
    steps = "| Solver iterations | 29 " if model_type == "cls-lr" else "| 29 × 32 (1.0 epochs)"
    for fact in ("Linux-6.1-x86_64, 2 CPUs", "413 s (6.9 min)", steps, "0.2817", metrics["objective"]):
        assert fact in text, fact
    # evaluation table: each row next to its anchor
    assert re.search(
        r"\| nDCG@10 \| dense exact \| 300 \(all\) \| 0\.6451 \| \*\*0\.6837\*\* \| \+0\.0386 \| 0\.6650 \| "
        r"BEIR BM25; over bm25 top 100; 300 queries; source: Thakur et al\. 2021 \(BEIR\), Table 2 \|",
        text,
    )
    assert re.search(
        r"\| spearman \| cosine \| – \| 0\.8203 \| \*\*0\.8101\*\* \| -0\.0102 \| – \| – \|", text
    )
    assert "Commercial use is not allowed" in text and "commercial use (see [License]" in text
    assert "@inproceedings{wadden-etal-2020-fact" in text and "@inproceedings{thakur2021beir" in text
    assert "{{" not in text and "{%" not in text  # every template variable was filled
    assert "dev-best checkpoint" not in text and "(the whole run)" not in text
    if model_type != "cls-lr":  # a checkpoint finished after its run (training.finish_checkpoint) says so
        finished = copy.deepcopy(metrics)
        finished["training"]["finished_from"] = {
            "run": "outputs/run",
            "checkpoint": "checkpoint-20",
            "whole_run": {"steps": 29},
        }
        text = render(model_type, finished).text
        assert (
            "(1.0 epochs): the dev-best checkpoint of a 29-step run |" in text and "(the whole run) |" in text
        )


def test_usage_snippets_name_the_repo_and_are_valid_python(metrics_record):
    expected = {"bi-encoder": 3, "cross-encoder": 2, "cls-lr": 1}  # a re-ranker's card: no block needs ctxir
    for model_type, count in expected.items():
        blocks = code_blocks(render(model_type, metrics_record(model_type)).text)
        assert len(blocks) == count
        for block in blocks:
            compile(block, model_type, "exec")
        assert all(f"ctxir/{model_type}" in b for b in blocks)


def test_bi_encoder_without_plain_pooling_says_to_use_sentence_transformers(metrics_record):
    facts = {**FACTS["bi-encoder"], "plain_transformers": False, "modules": "Transformer → Pooling → Dense"}
    card = render_card(metrics_record("bi-encoder"), CardInputs(repo_id="ctxir/x", facts=facts))
    assert len(code_blocks(card.text)) == 2 and "Transformer → Pooling → Dense" in card.text


def test_multi_label_cross_encoder_is_text_classification(tmp_path, metrics_record):
    card = render_card(
        metrics_record("cross-encoder"),
        CardInputs(
            repo_id="ctxir/x", facts={**FACTS["cross-encoder"], "num_labels": 3, "activation": "Identity"}
        ),
    )
    assert card.data.pipeline_tag == "text-classification"
    assert "torch.softmax(logits, dim=-1)" in card.text


@pytest.mark.parametrize("term_match", [True, False])
def test_a_segment_cosine_card_names_the_term_match_term_only_when_the_head_has_it(
    metrics_record, term_match
):
    facts = {
        **FACTS["cross-encoder"],
        "activation": "Identity",
        "ctxir_modules": True,
        "trained_layers": "4–5",
        "modules": "TopLayersTransformer → SegmentCosineHead",
        "term_match": term_match,
    }
    card = render_card(metrics_record("cross-encoder"), CardInputs(repo_id="ctxir/x", facts=facts))
    assert "`SegmentCosineHead`" in card.text
    assert ("learned term-match term" in card.text) is term_match


@pytest.mark.parametrize(
    ("text", "hub_id"),
    [
        ("CC BY-NC 2.0", "cc-by-nc-2.0"),
        ("CC BY-SA 4.0", "cc-by-sa-4.0"),
        ("CC BY-NC-SA 3.0", "cc-by-nc-sa-3.0"),
        ("cc-by-nc-sa-3.0", "cc-by-nc-sa-3.0"),
        ("CC BY-SA-NC 4.0", "cc-by-nc-sa-4.0"),
        ("MS MARCO terms (non-commercial research)", "other"),
        ("non-commercial research only", "other"),
        ("Apache 2.0", "apache-2.0"),
        ("mit", "mit"),
    ],
)
def test_parse_license(text, hub_id):
    assert parse_license(text).hub_id == hub_id


@pytest.mark.parametrize("text", [None, "", "  ", "proprietary", "CC BY-NC 9.9", "GPL-ish"])
def test_parse_license_rejects_unknown(text):
    assert parse_license(text) is None


@pytest.mark.parametrize(
    ("train", "expected", "use"),
    [
        ([("scifact", "CC BY-NC 2.0")], "cc-by-nc-2.0", "non-commercial use only."),
        ([("sick", "CC BY-NC-SA 3.0")], "cc-by-nc-sa-3.0", "non-commercial use only; what you share must"),
        (
            [("stsb", "CC BY-SA 4.0"), ("snli", "CC BY-SA 4.0")],
            "cc-by-sa-4.0",
            "any use, commercial included",
        ),
        # sources whose terms differ: `other`, each source's terms in LICENSE.md, no combined license invented
        (
            [("scifact", "CC BY-NC 2.0"), ("stsb", "CC BY-SA 4.0")],
            "other",
            "share-alike terms of STS Benchmark",
        ),
        ([("sick", "CC BY-NC-SA 3.0"), ("scifact", "CC BY-NC 2.0")], "other", "non-commercial use only"),
        (
            [("scifact", "CC BY-NC 2.0"), ("msmarco", "MS MARCO non-commercial research only")],
            "other",
            "research",
        ),
    ],
)
def test_a_models_license_is_its_sources_shared_one_or_other_with_each_listed(
    train, expected, use, metrics_record
):
    from ctxir.publish.licenses import LICENSE_FILE
    from ctxir.publish.metrics_file import license_text

    metrics = metrics_record("bi-encoder", train=train)
    lic, why = training_license(metrics)
    assert lic.hub_id == expected and use in why and why.startswith("Together these terms allow")
    if expected == "other":
        assert lic.link == LICENSE_FILE
        listed = license_text(metrics)
        for _, terms in train:
            assert terms.split(" non-")[0] in listed or "MS MARCO terms" in listed


def test_eval_only_data_does_not_change_the_license(metrics_record):
    metrics = metrics_record("bi-encoder", train=[("stsb", "CC BY-SA 4.0")])
    metrics["datasets"].append(
        {"name": "sick", "split": "test", "role": "eval", "license": "CC BY-NC-SA 3.0"}
    )
    assert training_license(metrics)[0].hub_id == "cc-by-sa-4.0"


def test_base_model_license_joins_the_combination(metrics_record):
    apache = ("base model all-MiniLM-L6-v2", parse_license("apache-2.0"))
    assert training_license(metrics_record("bi-encoder"), apache)[0].hub_id == "cc-by-nc-2.0"
    research = ("base model cross-encoder", parse_license("MS MARCO terms"))
    lic, why = training_license(metrics_record("cls-lr"), research)
    assert lic.hub_id == "other" and "research use only" in why
    assert "base model cross-encoder: MS MARCO terms" in license_text(metrics_record("cls-lr"), research)


def test_msmarco_card_names_license_and_link(tmp_path, metrics_record):
    metrics = metrics_record("cross-encoder", train=[("msmarco", "MS MARCO non-commercial research only")])
    render("cross-encoder", metrics, tmp_path)
    meta = metadata_load(tmp_path / "README.md")
    assert (meta["license"], meta["license_name"]) == ("other", "ms-marco-terms")
    assert meta["license_link"].startswith("https://")
    assert meta["datasets"] == ["microsoft/ms_marco"]


def test_a_reranker_trained_on_general_questions_carries_their_terms(tmp_path, metrics_record):
    from training.common import general_entries

    metrics = metrics_record("cross-encoder")
    # what train_cross_encoder.py --general squad,wikiqa,msmarco records of its sources (extra.general)
    rows = general_entries(
        tmp_path,
        {"squad": {"queries": 700}, "wikiqa": {"queries": 173, "pairs": 1030}, "msmarco": {"queries": 9}},
    )
    assert [(r["name"], r["role"], r["num_examples"]) for r in rows] == [
        ("squad", "train", 700),
        ("wikiqa", "train", 1030),
        ("msmarco", "train", 9),
    ]
    assert rows[0]["path"] == str(tmp_path / "general" / "squad-v1.1")
    metrics["datasets"] += rows
    lic, why = training_license(metrics)
    # SciFact NC + SQuAD SA + WikiQA (research only, same terms) + MS MARCO (research only): the terms differ, so
    # `other`, each listed, and one sentence of what they allow together
    assert (lic.hub_id, lic.conditions) == ("other", {"NC", "RESEARCH", "SA"})
    assert "non-commercial research use only" in why and "share-alike terms of SQuAD" in why
    assert "Commercial use is not allowed" in why
    render("cross-encoder", metrics, tmp_path)
    meta = metadata_load(tmp_path / "README.md")
    assert {"rajpurkar/squad", "microsoft/wiki_qa", "microsoft/ms_marco", "BeIR/scifact"} <= set(
        meta["datasets"]
    )
    body = (tmp_path / "README.md").read_text()
    assert "CC BY-SA 4.0" in body and "Microsoft Research Data License" in body and "Rajpurkar" in body


def test_missing_license_is_refused_with_the_fix(metrics_record):
    metrics = metrics_record("bi-encoder")
    del metrics["datasets"][0]["license"]
    with pytest.raises(
        CtxirError, match=r"training dataset 'scifact' .*has no license.*datasets\[\]\.license"
    ):
        render("bi-encoder", metrics)
    with pytest.raises(CtxirError, match="no training data license"):
        combine_licenses([])


def test_check_card_refuses_hand_edits(tmp_path, metrics_record):
    metrics = metrics_record("bi-encoder")
    render("bi-encoder", metrics, tmp_path)
    readme = tmp_path / "README.md"
    original = readme.read_text()

    readme.write_text(original.replace("value: 0.6837159", "value: 0.7837159"))
    with pytest.raises(CtxirError, match=r"dense exact.*0\.7837159.*metrics\.json says 0\.6837159"):
        check_card(readme, metrics)

    readme.write_text(original.replace("license: cc-by-nc-2.0", "license: apache-2.0"))
    with pytest.raises(
        CtxirError, match=r"license is 'apache-2\.0' but the training data requires 'cc-by-nc-2\.0'"
    ):
        check_card(readme, metrics)

    readme.write_text(re.sub(r"^license: cc-by-nc-2\.0\n", "", original, flags=re.M))  # the top-level one
    with pytest.raises(CtxirError, match=r"no license"):
        check_card(readme, metrics)

    readme.write_text(original.replace("**0.8101**", "**0.9101**"))
    with pytest.raises(CtxirError, match=r"the body has no spearman = 0\.8101"):
        check_card(readme, metrics)

    readme.write_text(original.replace("model-index:", "model-index: [\n"))
    with pytest.raises(CtxirError, match="does not parse"):
        check_card(readme, metrics)

    more = copy.deepcopy(metrics)
    more["evaluations"].append({**more["evaluations"][0], "config": "dense hnsw", "after": 0.61})
    readme.write_text(original)
    with pytest.raises(CtxirError, match=r"model-index lacks 'nDCG@10 \(dense hnsw\)'"):
        check_card(readme, more)
    fewer = copy.deepcopy(metrics)
    fewer["evaluations"] = [e for e in fewer["evaluations"] if "rerank" not in str(e.get("config"))]
    with pytest.raises(
        CtxirError, match=r"model-index has 'nDCG@10 \(rerank BM25 top-100\)'.*metrics\.json lacks"
    ):
        check_card(readme, fewer)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.pop("training"), "missing key 'training'"),
        (lambda m: m.update(model_type="bm25"), "model_type 'bm25' is not one of"),
        (lambda m: m["evaluations"][0].update(task="ranking"), "task 'ranking' is not one of"),
        (lambda m: m["evaluations"][0].update(after=float("nan")), "after is nan"),
        (lambda m: m["evaluations"].append(dict(m["evaluations"][0])), "repeats"),
        (lambda m: m["datasets"].pop(0), "no dataset with role 'train'"),
        (lambda m: m["training"].pop("hardware"), "missing training.hardware"),
    ],
)
def test_metrics_contract_violations_are_named(change, message, metrics_record):
    metrics = metrics_record("bi-encoder")
    change(metrics)
    with pytest.raises(CtxirError, match=re.escape(message)):
        validate_metrics(metrics)


def test_space_front_matter_file_matches_the_pins_and_the_hub_rules():
    import gradio

    text = (ROOT / "docs" / "space_front_matter.yaml").read_text()
    meta = yaml.safe_load(text.strip().strip("-"))
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert meta["sdk_version"] == gradio.__version__
    pin = re.search(r"^gradio==(\S+)$", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert pin and pin.group(1) == meta["sdk_version"]
    assert meta["python_version"] == "3.11"  # a string: YAML would read 3.11 as a float
    assert len(meta["short_description"]) <= 60
    assert {
        "ctxir/minilm-l6-scifact-cross-encoder",
        "ctxir/minilm-l6-scifact-cls-lr",
        "ctxir/minilm-l6-stsb-cross-encoder",
    } <= set(meta["models"])  # the ids the code publishes them under (ctxir.encoders.models.SHIPPED_MODELS)
    assert meta["license"]


def test_similarity_trained_models_are_not_sold_as_retrievers_and_integer_metrics_render(
    tmp_path, metrics_record
):
    metrics = metrics_record("cross-encoder", train=[("stsb", "CC BY-SA 4.0")])
    metrics["evaluations"].append(
        {
            "dataset": "stsbenchmark",
            "split": "test",
            "task": "sts",
            "metric": "pairs",
            "before": None,
            "after": 1379,
            "anchor": None,
            "anchor_name": None,
            "config": "count",
        }
    )
    metrics["training"]["learning_rate"] = None
    card = render("cross-encoder", metrics, tmp_path)
    assert "semantic textual similarity" in card.text and "re-ranking the top 10–100" not in card.text
    assert "| Learning rate | – |" in card.text
    assert "**1379.0000**" in card.text
    check_card(tmp_path / "README.md", metrics)
    assert "re-ranking the top 10–100" in render("cross-encoder", metrics_record("cross-encoder")).text


# BEIR's BM25 + ms-marco-MiniLM-L6 figure as metrics.json cites it: all 300 SciFact test queries, BM25's top 100
BEIR_CE_ANCHOR = {
    "anchor": 0.688,
    "anchor_name": "BEIR BM25 + cross-encoder (ms-marco-MiniLM-L6)",
    "anchor_source": "Thakur et al. 2021 (BEIR), Table 2",
    "anchor_queries": 300,
    "anchor_first_stage": "bm25",
    "anchor_depth": 100,
}


def scifact_row(queries: int, depth: int, subset: str | None = None) -> dict:
    """A metrics.json re-ranking row on SciFact test: nDCG@10 0.8926 over BM25's top ``depth`` for ``queries``."""
    out = {
        "dataset": "scifact",
        "split": "test",
        "task": "reranking",
        "metric": "nDCG@10",
        "before": 0.8081,
        "after": 0.8926,
        "anchor": None,
        "anchor_name": None,
        "config": f"rerank BM25 top-{depth}, {queries} queries",
        "queries": queries,
        "first_stage": "bm25",
        "depth": depth,
    }
    return {**out, "subset": subset} if subset else out


def test_card_check_refuses_a_subset_figure_beside_a_full_set_anchor(tmp_path, metrics_record):
    """The 0.8926 case: a re-ranker's first 50 test queries (easy ones) shown beside an anchor measured on all 300
    queries at another depth. Neither the rows nor a card rendered from them may be published."""
    from ctxir.publish.cards import row_problems

    metrics = metrics_record("cross-encoder")
    metrics["evaluations"].insert(
        0,
        {**scifact_row(50, 20, "the first 50 SciFact test queries"), **BEIR_CE_ANCHOR},
    )
    problems = "; ".join(row_problems(metrics))
    assert "on queries 50 but its anchor 0.688" in problems and "on queries 300" in problems
    assert "on depth 20 but its anchor 0.688" in problems
    # it led the card: a figure on part of the test set may not be the one the Hub shows
    assert "the lead figure nDCG@10 = 0.8926" in problems
    render("cross-encoder", metrics, tmp_path)
    with pytest.raises(CtxirError, match=r"0\.8926 .* is on queries 50 but its anchor 0\.688"):
        check_card(tmp_path / "README.md", metrics)

    # written as the old training rows were (no query count): refused too, the anchor cannot be held to anything
    old_style = copy.deepcopy(metrics)
    for k in ("queries", "subset", "depth", "first_stage", "anchor_queries", "anchor_source"):
        old_style["evaluations"][0].pop(k)
    problems = "; ".join(row_problems(old_style))
    assert "cites no anchor_source, anchor_queries" in problems
    assert "has an anchor but states no queries" in problems
    # a part with nothing to compare it to, or not saying which part it is
    bare = copy.deepcopy(metrics)
    bare["evaluations"][0].update(before=None, anchor=None)
    bare["evaluations"][0].pop("subset")
    problems = "; ".join(row_problems(bare))
    assert "covers 50 of 300 queries but names no subset" in problems
    assert "covers a subset but has no before" in problems


def test_the_card_leads_with_the_headline_and_the_check_holds_it_there(tmp_path, metrics_record):
    metrics = metrics_record("cross-encoder")
    metrics["evaluations"][1]["headline"] = True
    render("cross-encoder", metrics, tmp_path)
    meta = metadata_load(tmp_path / "README.md")
    first = meta["model-index"][0]["results"][0]["metrics"][0]
    assert first["value"] == 0.6912 and check_card(tmp_path / "README.md", metrics) == meta
    moved = copy.deepcopy(metrics)
    moved["evaluations"][1]["headline"] = False
    moved["evaluations"][0]["headline"] = True
    with pytest.raises(CtxirError, match=r"model-index leads with 'nDCG@10 \(rerank BM25 top-100\)'"):
        check_card(tmp_path / "README.md", moved)
    two = copy.deepcopy(metrics)
    two["evaluations"][0]["headline"] = True
    with pytest.raises(CtxirError, match="more than one evaluation has headline"):
        validate_metrics(two)


def test_each_training_source_keeps_its_own_terms_in_the_metadata(tmp_path, metrics_record):
    metrics = metrics_record(
        "cross-encoder",
        train=(("scifact", "CC BY-NC 2.0"), ("squad", "CC BY-SA 4.0"), ("msmarco", "MS MARCO")),
    )
    render("cross-encoder", metrics, tmp_path)
    meta = metadata_load(tmp_path / "README.md")
    assert [(d["dataset"], d["license_id"]) for d in meta["data_licenses"]] == [
        ("SciFact (BEIR)", "cc-by-nc-2.0"),
        ("SQuAD v1.1 (questions → their Wikipedia paragraphs)", "cc-by-sa-4.0"),
        ("MS MARCO (passage sample)", "ms-marco-terms"),
    ]
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("license_id: cc-by-sa-4.0", "license_id: cc-by-4.0"))
    with pytest.raises(CtxirError, match="data_licenses is"):
        check_card(readme, metrics)


def test_the_shipped_cards_pass_the_card_check_and_lead_with_the_full_test_default_mode():
    """What `ctxir hub push` would publish for each shipped model: its card agrees with its metrics.json and its
    rows mislead nowhere; the Hub's first figure is SciFact test, all 300 queries, the default (fused) mode over
    BM25's top 20 (the cross-encoder 0.7234, not the 50-query 0.8926; CLS-LR a ranking figure, not F1)."""
    from ctxir.encoders.models import (
        DEFAULT_BI_ENCODER,
        SHIPPED_CLS_LR,
        SHIPPED_CROSS_ENCODER,
        SHIPPED_MODELS,
        SHIPPED_STS_CROSS_ENCODER,
    )
    from ctxir.publish.metrics_file import load_metrics
    from ctxir.publish.model_folder import base_model_license

    leads = {}
    for name in (SHIPPED_CROSS_ENCODER, SHIPPED_CLS_LR, SHIPPED_STS_CROSS_ENCODER):
        folder = SHIPPED_MODELS[name]
        metrics = load_metrics(folder)
        metrics["model_name"] = name.split("/")[
            -1
        ]  # as training/ship.py's write_card names the shipped model
        meta = check_card(folder / "README.md", metrics, base_model_license(DEFAULT_BI_ENCODER))
        first = meta["model-index"][0]["results"][0]
        lead = next(e for e in metrics["evaluations"] if e.get("headline"))
        assert first["metrics"][0]["value"] == lead["after"] and not lead.get("subset")
        leads[name] = (first["dataset"]["split"], first["metrics"][0]["type"], lead)
    split, metric, lead = leads[SHIPPED_CROSS_ENCODER]
    assert (split, metric, lead["queries"], lead["first_stage"], lead["depth"]) == (
        "test",
        "ndcg_at_10",
        300,
        "bm25",
        100,
    )
    assert "sentence-transformers alone" in lead["config"]
    split, metric, lead = leads[SHIPPED_CLS_LR]
    assert (split, metric, lead["queries"]) == ("test", "ndcg_at_10", 300)
    card = (SHIPPED_MODELS[SHIPPED_CROSS_ENCODER] / "README.md").read_text()
    # MS MARCO is trained-on data (triples), so the suite may not call it new; Medline, NPL, LISA are new
    assert "MS MARCO (passage sample) (it trained on MS MARCO (passage sample) train triples)" in card
    assert "never trained on\n(ctxir's demo corpus, Medline test, NPL test, LISA test)" in card
    # passages.json's dev figures are stage 5's: the card says whose
    assert "measured with stage 5's weights" in card
    # the hybrid's default keeps the hybrid's order: the card says so instead of "fused (RRF)"
    assert (
        "hybrid top 20, default: hybrid's order kept, only its ties re-ordered (RRF 1000 : 1; 8 of 300"
        in card
    )


def test_licenses_md_states_each_shipped_models_terms_from_its_metrics():
    """ctxir/assets/models/LICENSES.md is what ctxir.publish.weights_terms renders from the shipped metrics.json
    files (`python scripts/shipped_cards.py` writes it): the weights' terms, apart from the code's Apache-2.0."""
    from ctxir.encoders.models import ASSETS_MODELS, DEFAULT_BI_ENCODER, SHIPPED_MODELS
    from ctxir.publish.model_folder import base_model_license
    from ctxir.publish.weights_terms import LICENSES_FILE, weights_terms_markdown

    order = ("cross-encoder", "cls-lr", "sts-cross-encoder")
    models = sorted(SHIPPED_MODELS.items(), key=lambda kv: order.index(kv[1].name))
    expected = weights_terms_markdown(
        [(name, folder, base_model_license(DEFAULT_BI_ENCODER)) for name, folder in models]
    )
    text = (ASSETS_MODELS / LICENSES_FILE).read_text()
    assert text == expected, "run python scripts/shipped_cards.py"
    assert (
        "Apache-2.0" in text
        and "CC BY-NC 2.0" in text
        and "CC BY-SA 4.0" in text
        and "MS MARCO terms" in text
    )


# Training runs write an anchor beside a test figure only where the two cover the same queries (and depth): the rows
# the card check would refuse are never written (training/steps.py's anchor_fields).


def test_training_leaves_out_an_anchor_on_other_queries_or_depth_and_cites_one_on_the_same_in_full(
    metrics_record,
):
    from ctxir.publish.cards import row_problems
    from training.steps import anchor_fields
    from training.train_cross_encoder import ANCHORS

    beir = ANCHORS[("scifact", "nDCG@10")]
    assert (
        anchor_fields(beir, scifact_row(50, 20, "the first 50 SciFact test queries")) == {}
    )  # the 0.8926 case
    assert anchor_fields(beir, scifact_row(300, 20)) == {}  # all queries, but top 20 against BEIR's top 100
    same = anchor_fields(beir, scifact_row(300, 100))
    assert same == BEIR_CE_ANCHOR
    # what a training script writes passes the card check; the pair it leaves out would not
    metrics = metrics_record("cross-encoder")
    metrics["evaluations"] = [{**scifact_row(300, 100), **same}]
    assert row_problems(metrics) == []
    forced = {**same, "anchor_queries": 300}
    metrics["evaluations"] = [{**scifact_row(50, 20, "the first 50 SciFact test queries"), **forced}]
    assert any("on queries 50 but its anchor 0.688" in p for p in row_problems(metrics))


def test_an_anchor_given_as_value_and_name_only_is_written_as_is_and_the_check_asks_for_its_source(
    metrics_record,
):
    from ctxir.publish.cards import row_problems
    from training.steps import anchor_fields

    fields = anchor_fields((0.831, "SetFit all-MiniLM-L6-v2, 8 per class"), scifact_row(300, 20))
    assert fields == {"anchor": 0.831, "anchor_name": "SetFit all-MiniLM-L6-v2, 8 per class"}
    metrics = metrics_record("cross-encoder")
    metrics["evaluations"] = [{**scifact_row(300, 20), **fields}]
    assert any("cites no anchor_source, anchor_queries" in p for p in row_problems(metrics))
