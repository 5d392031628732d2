"""``python app.py`` on a cold embedding cache: the startup corpus, indexed in a background thread while the page is
served, becomes searchable (before gradio_fixes.track_tqdm_first, Gradio's tqdm patch, made while the indexing's progress
bar ran, broke it: "indexing the startup corpus 'demo' failed ... 'tqdm' object has no attribute '_progress'")."""

from __future__ import annotations

import os
import time

import pytest


@pytest.mark.slow
def test_a_first_start_indexes_the_startup_corpus_while_serving(tmp_path, app_process):
    from tests.conftest import api_client

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "CTXIR_CACHE": str(tmp_path / "cold-cache"),
        "CTXIR_CROSS_ENCODER": "none",
        "CTXIR_CLS_LR": "none",
        "TMPDIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }
    proc = app_process(env)
    url = next(
        line.split("Running on local URL:")[1].strip()
        for line in proc.stdout
        if "Running on local URL:" in line
    )
    client = api_client(url, download_files=False)
    try:
        deadline, summary = time.time() + 300, ""
        while time.time() < deadline:
            try:
                summary = client.predict(
                    "otters on the river bank", None, "dense", "none", 3, 5, api_name="/search"
                )[1]
                break
            except Exception as err:  # still indexing: the error says so; anything else ends the wait
                summary = str(err)
                assert "still being indexed" in summary, summary
                time.sleep(2)
    finally:
        client.close()
    assert "3 results" in summary, summary
