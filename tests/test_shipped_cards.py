"""The shipped models' staged cards as a Hub reader meets them: the lead figure is what the card's own snippet gets
(docs/bench/hub-user.json, measured where ctxir cannot be imported), beside its peer and BM25, with the right
lineage, a short model-index, every source's terms, and no block that needs ctxir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxir.encoders.models import (
    DEFAULT_BI_ENCODER,
    SHIPPED_BASES,
    SHIPPED_CLS_LR,
    SHIPPED_CROSS_ENCODER,
    SHIPPED_MODELS,
    SHIPPED_STS_CROSS_ENCODER,
)
from ctxir.publish.licenses import LICENSE_FILE
from ctxir.publish.staging import check_base_model, stage
from ctxir.publish.standalone import hub_user_env, imports_ctxir, lay_into_hf_cache, python_blocks
from ctxir.types import CtxirError

ROOT = Path(__file__).resolve().parents[1]
RECORD = json.loads((ROOT / "docs" / "bench" / "hub-user.json").read_text())
RERANKERS = (SHIPPED_CROSS_ENCODER, SHIPPED_CLS_LR)
PEER = "cross-encoder/ms-marco-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("cards")
    return {
        repo_id: stage(
            SHIPPED_MODELS[repo_id], repo_id, root / repo_id.replace("/", "--"), base_model_id=base
        ).folder
        for repo_id, base in SHIPPED_BASES.items()
    }


def front(folder: Path) -> dict:
    from huggingface_hub import metadata_load

    return metadata_load(folder / "README.md")


def index_entries(meta: dict) -> list[dict]:
    return [m for result in meta["model-index"][0]["results"] for m in result["metrics"]]


@pytest.mark.parametrize("repo_id", list(SHIPPED_BASES))
def test_the_card_leads_with_what_its_snippet_gets(staged, repo_id):
    meta = front(staged[repo_id])
    first = meta["model-index"][0]["results"][0]
    recorded = RECORD["models"][repo_id]
    assert first["dataset"]["split"] == recorded["split"] == "test"
    assert abs(first["metrics"][0]["value"] - recorded["value"]) <= 0.005, (repo_id, first, recorded)
    assert "sentence-transformers alone" in first["metrics"][0]["name"]


@pytest.mark.parametrize("repo_id", list(SHIPPED_BASES))
def test_the_model_index_is_short_and_on_whole_test_sets(staged, repo_id):
    entries = index_entries(front(staged[repo_id]))
    assert 1 <= len(entries) <= 10  # eval_results lists at most 10
    assert not any("first 50" in m["name"] or "claims (" in m["name"] for m in entries)
    splits = {r["dataset"]["split"] for r in front(staged[repo_id])["model-index"][0]["results"]}
    assert splits == {"test"}


@pytest.mark.parametrize("repo_id", RERANKERS)
def test_a_reranker_card_sets_its_figure_beside_bm25_and_the_peer_and_says_where_it_is_worse(staged, repo_id):
    card = (staged[repo_id] / "README.md").read_text()
    lead = card.split("## What your code gets", 1)[1].split("\n## ", 1)[0]
    value = RECORD["models"][repo_id]["value"]
    assert f"**{value:.4f}**" in lead
    assert f"| BM25 alone (the candidates it re-ranks) | {RECORD['bm25']['nDCG@10']:.4f} |" in lead
    assert f"| {PEER} | 0.6880 | Thakur et al. 2021 (BEIR)" in lead
    if value < 0.688:
        assert f"{0.688 - value:.4f} below {PEER}" in lead
    assert "below BM25 on" in lead  # the suite's collections where it loses alone
    assert "## Out-of-domain suite" in card and "| LISA" in card  # every re-ranker's card, CLS-LR's too


def test_lineage_names_the_hub_ids_trained_from_and_every_stage(staged):
    assert front(staged[SHIPPED_CROSS_ENCODER])["base_model"] == DEFAULT_BI_ENCODER
    assert front(staged[SHIPPED_CLS_LR])["base_model"] == SHIPPED_CROSS_ENCODER
    card = (staged[SHIPPED_CROSS_ENCODER] / "README.md").read_text()
    metrics = json.loads((staged[SHIPPED_CROSS_ENCODER] / "metrics.json").read_text())
    stages = metrics["training"]["stages"]
    assert stages[0]["warm_start"] == DEFAULT_BI_ENCODER and len(stages) >= 2
    total = sum(s["wall_time_seconds"] for s in stages) / 3600
    assert f"{len(stages)}, {sum(s['steps'] for s in stages)} steps, {total:.1f} h in all" in card
    for repo_id, folder in staged.items():
        assert front(folder)["model-index"][0]["name"] == repo_id.split("/")[-1]
        body = (folder / "README.md").read_text().split("\n---\n", 1)[1]
        assert (
            next(line for line in body.splitlines() if line.startswith("# ")) == f"# {repo_id.split('/')[-1]}"
        )


@pytest.mark.parametrize("base", ["./outputs/run", "/no/such/folder", SHIPPED_CROSS_ENCODER])
def test_staging_refuses_a_local_or_own_base_and_says_what_to_pass(base):
    with pytest.raises(CtxirError, match="--base-model-id"):
        check_base_model(base, SHIPPED_CROSS_ENCODER)


def test_staging_a_cls_lr_without_its_encoders_hub_id_is_refused(tmp_path):
    with pytest.raises(CtxirError, match="--base-model-id with that encoder's Hub id"):
        stage(SHIPPED_MODELS[SHIPPED_CLS_LR], SHIPPED_CLS_LR, tmp_path / "repo")


def test_staging_a_model_whose_metrics_name_its_own_repo_as_base_is_refused(tmp_path):
    with pytest.raises(CtxirError, match="repo's own id"):
        stage(SHIPPED_MODELS[SHIPPED_CROSS_ENCODER], SHIPPED_CROSS_ENCODER, tmp_path / "repo")


@pytest.mark.parametrize("repo_id", RERANKERS)
def test_sources_that_differ_get_other_with_their_terms_listed_and_no_invented_license(staged, repo_id):
    folder = staged[repo_id]
    meta = front(folder)
    assert meta["license"] == "other" and meta["license_link"] == LICENSE_FILE
    terms = (folder / LICENSE_FILE).read_text()
    card = (folder / "README.md").read_text()
    for source in meta["data_licenses"]:
        assert source["terms"] in terms and source["link"] and source["link"] in card
    assert "Together these terms allow non-commercial research use only" in card
    assert "share-alike terms of SQuAD" in card
    assert "applies to the model as a whole" not in card and "carries them all" not in card
    if repo_id == SHIPPED_CLS_LR:  # its body is the cross-encoder: that model's sources are its own
        assert "wikiqa-topics" in {s["dataset"] for s in meta["data_licenses"]}


def test_the_pair_scorer_keeps_its_one_shared_license():
    from huggingface_hub import metadata_load

    meta = metadata_load(SHIPPED_MODELS[SHIPPED_STS_CROSS_ENCODER] / "README.md")
    assert meta["license"] == "cc-by-sa-4.0"


@pytest.mark.parametrize("repo_id", list(SHIPPED_BASES))
def test_every_code_block_runs_without_ctxir_and_uses_rank(staged, repo_id):
    card = (staged[repo_id] / "README.md").read_text()
    blocks = python_blocks(card)
    assert blocks and not any(imports_ctxir(b) for b in blocks)
    assert "build --wheel" not in card
    if repo_id in RERANKERS:
        assert "model.rank(query, documents)" in card
    assert "trust_remote_code=True runs this repo's reranker_heads.py" in card
    assert "not an embedding model" in card


def test_sentence_transformer_on_a_reranker_repo_warns_that_it_is_a_cross_encoder(staged, tmp_path):
    lay_into_hf_cache(staged[SHIPPED_CROSS_ENCODER], SHIPPED_CROSS_ENCODER, tmp_path / "hub")
    script = (
        "import logging\nlogging.basicConfig()\nfrom sentence_transformers import SentenceTransformer\n"
        f"SentenceTransformer({SHIPPED_CROSS_ENCODER!r}, device='cpu')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=hub_user_env(tmp_path, tmp_path / "hub", block_ctxir=True),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"Converting CrossEncoder model {SHIPPED_CROSS_ENCODER}" in run.stderr, run.stderr[-2000:]
