"""The shipped models as a Hub user gets them: each staged by ``ctxir hub push``, laid into a Hugging Face cache as
``hf download`` leaves it, and loaded by repo id, offline, in a Python where ``import ctxir`` fails: the scores are
ctxir's own. Staging itself runs every Python block of each card the same way (a failing one refuses the staging)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxir.encoders import reranker_heads
from ctxir.encoders.models import (
    SHIPPED_BASES,
    SHIPPED_CLS_LR,
    SHIPPED_CROSS_ENCODER,
    SHIPPED_MODELS,
    load_cross_encoder,
)
from ctxir.publish.staging import stage
from ctxir.publish.standalone import (
    HUB_CODE_FILE,
    check_card_snippets,
    hub_user_env,
    imports_ctxir,
    lay_into_hf_cache,
    python_blocks,
)
from ctxir.types import CtxirError

# repo id → the base_model_id its staging names (CLS-LR reads the pushed cross-encoder)
SHIPPED = SHIPPED_BASES
QUERIES = (
    "Do statins lower the risk of heart attack?",
    "A man is playing a guitar.",
    "vitamin D deficiency and bone fractures in older adults",
    "Which genes are linked to breast cancer?",
)
DOCUMENTS = (
    "Statin therapy reduced myocardial infarction in patients with high cholesterol.",
    "Someone plays the guitar on a stage.",
    "The river bank was flooded after the storm.",
    "Low serum 25-hydroxyvitamin D was associated with hip fractures in a cohort of 2,000 adults over 65. "
    * 8,
    "Mutations in BRCA1 and BRCA2 raise the lifetime risk of breast and ovarian cancer.",
)
# 20 pairs; the long document is cut at the models' 128 tokens, as both loaders must cut it
PAIRS = [(q, d) for q in QUERIES for d in DOCUMENTS]

# Runs where ctxir is not importable: each repo id loaded as its card's one-line load says, the 20 pairs scored.
USER_SCRIPT = """
import json, sys
try:
    import ctxir  # noqa: F401
    sys.exit("ctxir is importable: the test would prove nothing")
except ModuleNotFoundError:
    pass
from sentence_transformers import CrossEncoder

repo_ids, pairs = json.loads(sys.argv[1]), [tuple(p) for p in json.loads(sys.argv[2])]
scores = {}
for repo_id in repo_ids:
    model = CrossEncoder(repo_id, trust_remote_code=True, device="cpu")
    scores[repo_id] = [float(s) for s in model.predict(pairs, batch_size=8)]
print(json.dumps(scores))
"""


def ctxir_scores(repo_id: str) -> np.ndarray:
    """What ctxir's own loader gives the 20 pairs, from the shipped folder."""
    if repo_id == SHIPPED_CLS_LR:
        from ctxir.rerank.cls_lr import ClsLrRanker

        ranker = ClsLrRanker.load(SHIPPED_MODELS[repo_id], device="cpu")
        return np.concatenate([ranker.score_pairs(q, list(DOCUMENTS)) for q in QUERIES])
    load_cross_encoder.cache_clear()
    return np.asarray(load_cross_encoder(repo_id, "cpu").predict(PAIRS, batch_size=8), dtype=np.float64)


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hub")
    return {
        repo_id: stage(
            SHIPPED_MODELS[repo_id], repo_id, root / repo_id.replace("/", "--"), base_model_id=base
        )
        for repo_id, base in SHIPPED.items()
    }


@pytest.fixture(scope="module")
def hub_user(staged, tmp_path_factory) -> dict:
    """The three repos in one Hugging Face cache, loaded by repo id where ctxir is absent → scores per repo id."""
    root = tmp_path_factory.mktemp("user")
    for repo_id, report in staged.items():
        lay_into_hf_cache(report.folder, repo_id, root / "hub")
    run = subprocess.run(
        [sys.executable, "-c", USER_SCRIPT, json.dumps(list(staged)), json.dumps(PAIRS)],
        cwd=root,
        env=hub_user_env(root, root / "hub", block_ctxir=True),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("repo_id", list(SHIPPED))
def test_a_shipped_model_loads_by_repo_id_without_ctxir_and_scores_as_ctxir_does(hub_user, repo_id):
    hub = np.asarray(hub_user[repo_id])
    own = ctxir_scores(repo_id)
    assert hub.shape == own.shape == (20,)
    assert np.abs(hub - own).max() <= 1e-4, (repo_id, np.abs(hub - own).max())
    assert np.ptp(own) > 0.1  # the pairs tell the documents apart: a constant scorer would not pass


@pytest.mark.parametrize("repo_id", list(SHIPPED))
def test_a_staged_repo_carries_its_body_code_and_tokenizer_and_names_nothing_of_ctxir(staged, repo_id):
    folder = staged[repo_id].folder
    modules = json.loads((folder / "modules.json").read_text())
    assert modules[0]["type"] == "sentence_transformers.base.modules.transformer.Transformer"
    assert not any(m["type"].startswith("ctxir") for m in modules)
    assert {m["type"] for m in modules[1:]} <= {
        f"reranker_heads.{n}" for n in ("SegmentCosineHead", "ClsLrHead")
    }
    # the full body (not top layers, not an adapter over a base fetched by Hub id) and its tokenizer
    assert (folder / "model.safetensors").stat().st_size > 80e6
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", HUB_CODE_FILE} <= set(
        staged[repo_id].files
    )
    assert not {"adapter_config.json", "ctxir_top_layers.json", "top_layers.safetensors"} & set(
        staged[repo_id].files
    )
    # the repo's code is ctxir's own file, byte for byte, and imports nothing of ctxir
    code = (folder / HUB_CODE_FILE).read_text()
    assert code == Path(reranker_heads.__file__).read_text()
    assert not imports_ctxir(code)
    card = (folder / "README.md").read_text()
    assert "trust_remote_code=True" in card and python_blocks(card)
    # the Hub's "use this model" and library filter follow the card's library_name: the one its snippet loads with
    assert "\nlibrary_name: sentence-transformers\n" in card.split("\n---\n", 1)[0]


def test_a_card_whose_snippet_fails_does_not_stage(staged, tmp_path):
    # a block that needs ctxir without importing it plainly runs where ctxir is absent, and fails there
    folder = tmp_path / "repo"
    shutil.copytree(staged[SHIPPED_CROSS_ENCODER].folder, folder, symlinks=True)
    (folder / "README.md").write_text(
        "# card\n\n```python\nprint('ok')\n```\n\n```python\n__import__('ctxir')\n```\n"
    )
    with pytest.raises(CtxirError, match=r"block \(#2 of 2\) that fails when run without ctxir"):
        check_card_snippets(folder, SHIPPED_CROSS_ENCODER)
