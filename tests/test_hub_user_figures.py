"""The lead figure of each shipped card, measured again as a Hub user gets it (slow: about 15 min on 2 cores):
staged, laid into a Hub cache, scored by plain sentence-transformers where ctxir cannot be imported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.hub_user_figures import RECORD, measure

pytestmark = pytest.mark.slow


def test_the_recorded_hub_user_figures_are_what_plain_sentence_transformers_gets(shared_data: Path):
    recorded = json.loads(RECORD.read_text())
    measured = measure(shared_data)
    assert measured["bm25"] == recorded["bm25"]
    for repo_id, figure in recorded["models"].items():
        assert abs(measured["models"][repo_id]["value"] - figure["value"]) <= 0.005, repo_id
