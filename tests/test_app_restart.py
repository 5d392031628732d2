"""`python app.py` killed with SIGKILL while it indexes, then started again (issue #34, item 4): it serves what a
clean start serves, and what the killed one left (its output folder, a half-written cache file) is reclaimed.

The app runs as the other app-subprocess tests run it: the demo corpus, offline, its own cache and temp folders.
The default run's restart is started the way a user starts it (no ``HF_HUB_OFFLINE``, issue #34 item 7) on a
machine with no network: one start shows both.
Where the kill lands is chosen, not raced: a ``sitecustomize`` stops the app just before it renames a chosen
cache file into place (the temporary file written and synced, the rename not done) and says so in a file; the
test then sends SIGKILL. The default run kills before the embeddings' rename; ``-m slow`` kills before the
checksum's rename, while the corpus is being encoded, and as an upload's indexing starts.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.fault_harness import leftovers
from tests.conftest import start_app

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ("otters playing on the river bank", "interest rates at the bank", "bats hunting insects at night")
STAGES = ("dense", "hybrid", "bm25")

PAUSE = """
import importlib.abc, importlib.util, os, sys, time

AT = os.environ["CTXIR_PAUSE_AT"]


def pause(where):
    with open(os.environ["CTXIR_PAUSED"], "w") as f:
        f.write(where)
    while True:  # until the test's SIGKILL
        time.sleep(1)


_replace = os.replace


def replace(src, dst, *args, **kwargs):
    # before the rename the test chose: the temporary file is complete and synced, the target not yet in place
    dst_s = os.fspath(dst)
    if os.path.basename(os.path.dirname(dst_s)) == "embeddings" and dst_s.endswith(AT):
        pause(dst_s)
    return _replace(src, dst, *args, **kwargs)


os.replace = replace


class PauseWhileIndexing(importlib.abc.MetaPathFinder):
    # when ctxir.app.corpus_index is imported: "encoding" pauses the startup corpus's first "encoding documents" step
    # (nothing written yet), "upload" an upload's indexing as it starts (the file read and checked, nothing indexed)
    def find_spec(self, name, path, target=None):
        if name != "ctxir.app.corpus_index" or AT not in ("encoding", "upload"):
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            step = module.Indexing.step

            def paused_step(self, fraction, message):
                if AT == "encoding" and message.startswith("encoding documents"):
                    pause(message)
                return step(self, fraction, message)

            module.Indexing.step = paused_step
            encode = module.CorpusIndex._encode_in_steps

            def paused_encode(self, encoder, *args, **kwargs):
                if AT == "upload" and encoder.cache is None:  # an upload: encoded without the cache
                    pause(self.name)
                return encode(self, encoder, *args, **kwargs)

            module.CorpusIndex._encode_in_steps = paused_encode

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, PauseWhileIndexing())
"""


def app_env(tmp_path: Path, cache: Path, **extra) -> dict:
    from ctxir.app.config import env as kind_env
    from ctxir.rerank.registry import RERANKERS

    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "CTXIR_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "CTXIR_TORCH_THREADS": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "GRADIO_TEMP_DIR": str(tmp_path / "gradio"),
        "PYTHONPATH": str(ROOT),
        **{kind_env(kind): "none" for kind in RERANKERS.values()},
    }
    return env | extra


def paused_env(tmp_path: Path, cache: Path, target: str) -> dict:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(PAUSE)
    return app_env(
        tmp_path,
        cache,
        PYTHONPATH=f"{hook}{os.pathsep}{ROOT}",
        CTXIR_PAUSE_AT=target,
        CTXIR_PAUSED=str(tmp_path / "paused"),
    )


def wait_for(what, timeout: float, proc, step: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the app ended (exit {proc.returncode}): {proc.stdout.read()[-3000:]}")
        value = what()
        if value:
            return value
        time.sleep(step)
    pytest.fail(f"timed out after {timeout:.0f} s")


def url_of(proc) -> str:
    return f"http://127.0.0.1:{proc.args[proc.args.index('--port') + 1]}/"


def served_results(proc, timeout: float = 300) -> dict:
    """{(query, stage): [(doc_id, score), ...]} from /search, once the startup corpus is indexed."""
    from tests.conftest import api_client

    client = api_client(url_of(proc))
    try:

        def first():
            try:
                return client.predict(QUERIES[0], "demo", "dense", "none", 10, 20, api_name="/search")
            except Exception as err:
                if "still being indexed" not in str(err):
                    raise
                return None

        wait_for(first, timeout, proc, step=1)
        return {
            (q, s): hits(client.predict(q, "demo", s, "none", 10, 20, api_name="/search")[2])
            for q in QUERIES
            for s in STAGES
        }
    finally:
        client.close()


def pair_scores(proc) -> dict:
    """/score_pairs' data for the pair tab's example: a score column per re-ranker kind, and the kinds not loaded."""
    from ctxir.data.demo import demo_presets
    from tests.conftest import api_client

    presets = demo_presets()
    client = api_client(url_of(proc))
    try:
        return client.predict(
            presets["pair_query"], "\n".join(presets["pair_documents"]), api_name="/score_pairs"
        )[-1]
    finally:
        client.close()


def hits(data: dict) -> list[tuple[str, float]]:
    stage = data["first_stage"]
    return [(h["doc_id"], h[f"{stage}_score"]) for h in data["hits"]]


NO_NETWORK = """
import os, socket

LOG = os.environ["CTXIR_NET_LOG"]
LOCAL = ("127.0.0.1", "::1", "localhost", "0.0.0.0", None)


def _note(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")


def _local(host):
    return host in LOCAL or str(host).startswith("127.")


_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo


def connect(self, address):
    if isinstance(address, tuple) and not _local(address[0]):
        _note(f"connect {address[0]}")
        raise OSError(101, "Network is unreachable (refused by the test)")
    return _connect(self, address)


def connect_ex(self, address):
    if isinstance(address, tuple) and not _local(address[0]):
        _note(f"connect {address[0]}")
        return 101
    return _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    if not _local(host):
        _note(f"resolve {host}")
        raise socket.gaierror(-3, "Temporary failure in name resolution (refused by the test)")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo


def probe(when):
    # the guard armed in this very process: a name lookup and a connection it must refuse, at start and at exit
    # (noted as "probe PID WHEN refused" only when the refusal is the guard's)
    import urllib.request

    refused = []
    for attempt in (
        lambda: urllib.request.urlopen("http://guard-probe.invalid/", timeout=5),
        lambda: socket.socket().connect(("192.0.2.1", 80)),  # an address: no lookup, the connection itself
    ):
        try:
            attempt()
        except OSError as err:
            refused.append("refused by the test" in str(err))
    _note(f"probe {os.getpid()} {when} {'refused' if refused == [True, True] else 'NOT refused'}")


probe("start")
__import__("atexit").register(probe, "exit")
"""

PROBES = {"resolve guard-probe.invalid", "connect 192.0.2.1"}  # what probe() asks, noted by the guard


def user_env(tmp_path: Path, cache: Path) -> dict:
    """How a user starts the app: no HF_HUB_OFFLINE, the default re-rankers; here on a machine with no network (a
    sitecustomize refuses every non-loopback name lookup and connection, and notes it in ``tmp_path/net.log``)."""
    hook = tmp_path / "no-network"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(NO_NETWORK)
    from ctxir.app.config import env as kind_env
    from ctxir.rerank.registry import RERANKERS

    # nothing of this test process's settings: the app's defaults (backends, the shipped re-rankers)
    unset = {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CTXIR_BACKEND", "CTXIR_RERANK_BACKEND", "CTXIR_INDEX"}
    unset |= {kind_env(kind) for kind in RERANKERS.values()}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return env | {
        "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}",
        "CTXIR_NET_LOG": str(tmp_path / "net.log"),
        "TMPDIR": str(tmp_path),
        "CTXIR_CACHE": str(cache),
        "PYTHONUNBUFFERED": "1",
        "CTXIR_TORCH_THREADS": "1",
    }  # the default re-ranker backend (torch)


@pytest.fixture(scope="module")
def clean_results(tmp_path_factory, minilm_path):
    """A function → what a clean start serves: the app's state (the packaged MiniLM the offline app loads, the demo
    corpus) indexed into a fresh cache folder, searched in process by the function /search calls. Computed at the
    first call, which a test makes while the app it is about to kill starts in its own process."""
    found = {}

    def results() -> dict:
        if not found:
            from ctxir.app.models import AppModels
            from ctxir.app.search import search
            from ctxir.app.state import AppState
            from ctxir.encoders import EmbeddingCache
            from ctxir.encoders.models import load_bi_encoder

            models = AppModels.from_objects(load_bi_encoder(str(minilm_path), "cpu"), "all-MiniLM-L6-v2")
            state = AppState(models, cache=EmbeddingCache(tmp_path_factory.mktemp("clean-cache")))
            found.update(
                {
                    (q, s): hits(search(state, q, "demo", s, "none", 10, 20).data)
                    for q in QUERIES
                    for s in STAGES
                }
            )
        return found

    return results


def assert_same(served: dict, clean: dict) -> None:
    assert served.keys() == clean.keys()
    for key, got in served.items():
        want = clean[key]
        assert [d for d, _ in got] == [d for d, _ in want], key
        # both rounded to 4 decimals; a last-bit difference in threads' sums may move one rounding step
        assert all(abs(a - b) <= 2e-4 for (_, a), (_, b) in zip(got, want, strict=True)), (key, got, want)


def cached(folder: Path, pattern: str) -> list[Path]:
    return [p for p in folder.glob(pattern) if not p.name.startswith(".")]  # not a temporary file


def output_folders(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("ctxir-app-*"))


def kill_and_restart(
    tmp_path: Path, clean_results, at: str, restart_env: dict, start, restart_s: float = 300
) -> SimpleNamespace:
    """Start the app, SIGKILL it where ``at`` says (before the rename of the cache file ending in ``at``, or at
    "encoding"), start it again on the same cache folder with ``restart_env``, search it, stop it with SIGTERM (a
    container stop); → what was found on the way, for ``check_restart``. ``start``: ``app_process`` or ``start_app``;
    ``restart_s``: the most the restart may take to serve."""
    cache = tmp_path / "cache"
    embeddings = cache / "embeddings"
    killed = start(paused_env(tmp_path, cache, at), timeout=300, wait=False)
    clean = clean_results()  # in this process, while the app starts and indexes in its own
    wait_for((tmp_path / "paused").exists, 300, killed)
    found = SimpleNamespace(
        clean=clean,
        killed_folders=output_folders(tmp_path),
        left_at_kill=leftovers(embeddings),
        cached_at_kill=cached(embeddings, "*.npy"),
    )
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)

    again = start(restart_env, timeout=restart_s)
    found.served = served_results(again)
    found.pair_scores = pair_scores(again)
    found.pid = again.pid
    found.folders = output_folders(tmp_path)
    found.left = leftovers(embeddings)
    found.cached = cached(embeddings, "*.npy") + cached(embeddings, "*.sha256")
    again.terminate()
    found.output = again.communicate(timeout=60)[0]
    found.folder_after_sigterm = bool(found.folders) and found.folders[0].exists()
    log = tmp_path / "net.log"
    found.net_log = set(log.read_text().split("\n")) - {""} if log.exists() else set()
    found.asked = {line for line in found.net_log if not line.startswith("probe ")} - PROBES
    return found


def check_restart(found: SimpleNamespace, at: str) -> None:
    assert len(found.killed_folders) == 1
    # the kill landed where it was meant to: a temporary file written, or nothing written yet
    assert bool(found.left_at_kill) == (at != "encoding"), found.left_at_kill
    assert not found.cached_at_kill
    assert_same(found.served, found.clean)
    # the killed app's output folder went when the next one started; the new one's was there
    assert found.killed_folders[0] not in found.folders and len(found.folders) == 1, found.folders
    # the killed write's temporary file is gone; one whole embeddings file with its checksum
    assert found.left == []
    assert sorted(p.suffix for p in found.cached) == [".npy", ".sha256"], found.cached
    # SIGTERM removed the output folder: the default run's check of it (tests/test_security.py starts an app per
    # signal under -m slow)
    assert not found.folder_after_sigterm


@pytest.fixture(scope="module")
def restarted(tmp_path_factory, clean_results) -> SimpleNamespace:
    """The default run's kill and restart, shared by the tests below: killed before the embeddings' rename, then
    started again the way a user starts it (``user_env``), with no network."""
    folder = tmp_path_factory.mktemp("restart")
    started = []

    def start(env: dict, timeout: float, wait: bool = True):
        started.append(start_app(env, timeout, wait))
        return started[-1]

    try:
        yield kill_and_restart(
            folder, clean_results, ".npy", user_env(folder, folder / "cache"), start, restart_s=420
        )
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_killed_before_its_embeddings_are_renamed_into_the_cache_the_restart_serves_a_clean_starts_results(
    restarted,
):
    """The kill lands with the embeddings written and synced to a temporary file and their checksum already in
    place (it is written first), but the .npy not yet renamed: the restart finds no cache entry, encodes again,
    removes the temporary file and serves the clean start's results."""
    check_restart(restarted, ".npy")


def test_the_app_starts_with_no_network_and_hf_hub_offline_unset(restarted):
    """The restart above is started the way a user starts the app: no HF_HUB_OFFLINE, the default backends and
    re-rankers, and no network. Its guard armed in the app's own process (a lookup and a connection of its own,
    refused at start and still at exit), so an empty list of what it asked means nothing was asked. It served
    within 420 s, loaded every shipped re-ranker (each scores the pair tab's example), asked nothing but the Hub (for the newest all-MiniLM-L6-v2:
    Gradio's analytics are off), and said once that it uses the packaged copy."""
    from ctxir.rerank.registry import RERANKERS

    assert {f"probe {restarted.pid} {when} refused" for when in ("start", "exit")} <= restarted.net_log, (
        restarted.net_log
    )
    assert restarted.net_log >= PROBES  # the probes went through the guard, as any request would
    assert len(restarted.served) == len(QUERIES) * len(STAGES) and all(restarted.served.values())
    assert restarted.pair_scores["unavailable"] == {}, restarted.pair_scores["unavailable"]
    for row in restarted.pair_scores["scores"]:
        assert all(row[kind.pair_column] is not None for kind in RERANKERS.values()), row
    assert "scoring in torch" not in restarted.output, restarted.output[-3000:]
    assert "re-ranker unavailable" not in restarted.output, restarted.output[-3000:]
    assert restarted.asked <= {"resolve huggingface.co", "connect huggingface.co"}, restarted.asked
    told = restarted.output.count("the Hugging Face Hub cannot be reached")
    assert told == (1 if restarted.asked else 0), restarted.output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("at", [".sha256", "encoding"], ids=["before-checksum-rename", "mid-encoding"])
def test_killed_elsewhere_in_its_startup_indexing_the_restart_serves_a_clean_starts_results(
    at, tmp_path, app_process, clean_results
):
    check_restart(
        kill_and_restart(tmp_path, clean_results, at, app_env(tmp_path, tmp_path / "cache"), app_process), at
    )


def upload_file(tmp_path: Path, documents: int = 300) -> Path:
    words = [
        "otter",
        "river",
        "bank",
        "loan",
        "bat",
        "night",
        "insect",
        "den",
        "rate",
        "money",
        "water",
        "cave",
    ]
    path = tmp_path / "notes.jsonl"
    with path.open("w") as f:
        for i in range(documents):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12 + i % 9))
            f.write(json.dumps({"_id": f"n{i}", "title": f"note {i}", "text": f"{text} number {i}"}) + "\n")
    return path


@pytest.mark.slow
def test_killed_while_indexing_an_upload_the_restart_takes_the_upload_again_and_serves_a_clean_runs_results(
    tmp_path, app_process
):
    """An upload lives in the memory of the session that made it: a kill mid-indexing loses it whole (no half
    corpus anywhere); after the restart the same file uploads again and its searches equal a clean run's."""
    from gradio_client import handle_file

    from tests.conftest import api_client

    notes = upload_file(tmp_path)

    def searches(client, corpus):
        return {
            (q, s): hits(client.predict(q, corpus, s, "none", 10, 20, api_name="/search")[2])
            for q in QUERIES
            for s in STAGES
        }

    def upload(proc, kill_mid_indexing: bool = False, absent: str = ""):
        client = api_client(url_of(proc))
        try:
            if absent:  # a new session of the restarted app: the killed upload is nowhere
                with pytest.raises(Exception, match="is not loaded"):
                    client.predict(QUERIES[0], absent, "dense", "none", 10, 20, api_name="/search")
            job = client.submit(handle_file(str(notes)), api_name="/upload_corpus")
            if kill_mid_indexing:
                wait_for((tmp_path / "paused").exists, 300, proc)
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                return None, None
            corpus = job.result(timeout=600)[2]["corpus"]
            return corpus, searches(client, corpus)
        finally:
            client.close()

    (tmp_path / "clean").mkdir()
    clean = app_process(app_env(tmp_path / "clean", tmp_path / "clean" / "cache"), timeout=300)
    name, clean_found = upload(clean)
    clean.terminate()
    clean.wait(timeout=60)

    cache = tmp_path / "cache"
    killed = app_process(paused_env(tmp_path, cache, "upload"), timeout=300)
    upload(killed, kill_mid_indexing=True)
    killed_folders = output_folders(tmp_path)
    again = app_process(app_env(tmp_path, cache), timeout=300)
    again_name, found = upload(again, absent=name)
    assert again_name == name
    assert_same(found, clean_found)
    assert not set(killed_folders) & set(output_folders(tmp_path))
