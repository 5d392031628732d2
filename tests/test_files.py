"""ctxir.files: one JSON reader, atomic writes — a writer killed at any moment leaves the old file or the new."""

import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from ctxir.files import (
    HOST_TAG,
    STALE_TEMPORARY_S,
    atomic_path,
    process_alive,
    read_json,
    remove_temporaries,
    temporary_prefix,
    write_atomic,
    write_json,
)

WRITER = """
import sys
from ctxir.files import write_atomic
path, ready = sys.argv[1], sys.argv[2]
big = [("A" if i % 2 else "B") * 4_000_000 for i in range(2)]  # two 4 MB versions, so writes take a while
open(ready, "w").close()
i = 0
while True:
    write_atomic(path, big[i % 2])
    i += 1
"""


def test_a_writer_killed_mid_write_leaves_a_whole_file(tmp_path):
    target, ready = tmp_path / "metrics.json", tmp_path / "ready"
    write_atomic(target, "old")
    whole = {hashlib.sha256(v.encode()).hexdigest() for v in ("old", "A" * 4_000_000, "B" * 4_000_000)}
    for delay in (0.05, 0.13, 0.31, 0.47):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(ready)], cwd=os.getcwd())
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        ready.unlink(missing_ok=True)
        assert hashlib.sha256(target.read_bytes()).hexdigest() in whole, (
            f"torn file after a kill at +{delay} s"
        )
    # the killed writer's temporary files are the only leftovers, and never under the target's name
    assert all(p.name.startswith(".metrics.json.") for p in tmp_path.iterdir() if p != target)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "card.md"
    write_atomic(target, "old card")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half a ca")
        raise RuntimeError("disk full")
    assert target.read_text() == "old card"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.md"]


def test_write_json_round_trips_and_reads_absent_as_empty(tmp_path):
    path = write_json(tmp_path / "sub" / "m.json", {"a": [1, 2.5]})
    assert path.read_text().endswith("\n") and read_json(path) == {"a": [1, 2.5]}
    assert read_json(tmp_path / "none.json") == {}
    with atomic_path(tmp_path / "x.npy", suffix=".npy") as tmp:
        assert tmp.suffix == ".npy" and tmp.parent == tmp_path
        tmp.write_bytes(b"data")
    assert (tmp_path / "x.npy").read_bytes() == b"data"


def zombie() -> subprocess.Popen:
    """A child that has ended but is not reaped yet: its pid still answers ``kill(pid, 0)``."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 60
    while time.time() < deadline:
        with open(f"/proc/{proc.pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                return proc
        time.sleep(0.02)
    pytest.fail("the child did not end within 60 s")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="tells a zombie by /proc/PID/stat (Linux)")
def test_only_the_temporaries_of_writers_that_are_gone_or_long_idle_are_removed(tmp_path):
    """A writer killed mid-write leaves ``atomic_path``'s temporary (named with its host and pid); the next
    ``remove_temporaries`` takes it, never a live writer's, whatever lock the callers hold."""
    with atomic_path(tmp_path / "written" / "index.faiss") as tmp:
        assert tmp.name.startswith(temporary_prefix(tmp_path / "index.faiss"))
        assert temporary_prefix(tmp_path / "index.faiss") == f".index.faiss.{HOST_TAG}.{os.getpid()}-"
    tmp_path.joinpath("written", "index.faiss").unlink()
    tmp_path.joinpath("written").rmdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    unreaped = zombie()
    old = time.time() - STALE_TEMPORARY_S - 60
    planted = {
        f".index.faiss.{HOST_TAG}.{gone.pid}-a1.tmp": True,  # its writer was killed
        f".index.faiss.json.{HOST_TAG}.{unreaped.pid}-b2.tmp": True,  # killed, its parent not told yet
        f".index.faiss.{HOST_TAG}.{os.getpid()}-c3.tmp": False,  # a live writer (this process)
        f".index.faiss.0000beef.{gone.pid}-d4.tmp": False,  # another host's writer: its pids mean nothing here
        f".index.faiss.0000beef.{gone.pid}-e5.tmp.npy": True,  # ... untouched for a day: gone whoever wrote it
        ".index.faiss.f6.tmp": True,  # named before temporaries carried their owner, a day old
        f".other.npy.{HOST_TAG}.{gone.pid}-g7.tmp": False,  # another target's: not asked for
    }
    for name, _ in planted.items():
        path = tmp_path / name
        if "b2" in name:
            (path / "sub").mkdir(parents=True)  # a folder from mkdtemp (the BM25 cache's), with files in it
            (path / "sub" / "part").write_bytes(b"x")
        else:
            path.write_bytes(b"half an index")
        if name.endswith(("e5.tmp.npy", "f6.tmp")):
            os.utime(path, (old, old))
    assert process_alive(os.getpid()) and not process_alive(gone.pid) and not process_alive(unreaped.pid)
    removed = remove_temporaries(tmp_path, "index.faiss")
    unreaped.wait()
    assert sorted(removed) == sorted(name for name, stale in planted.items() if stale)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n, stale in planted.items() if not stale
    )


def test_a_shipped_folder_is_checked_against_its_checksums(tmp_path):
    from ctxir.files import CHECKSUMS, verify_checksums, write_checksums
    from ctxir.types import CtxirError

    (tmp_path / "1_Head").mkdir()
    (tmp_path / "config.json").write_text('{"layers": 6}')
    (tmp_path / "1_Head" / "model.safetensors").write_bytes(b"\x00weights\x01")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "bookkeeping.json").write_text("{}")  # never published, never listed
    (tmp_path / "README.md").write_text("a card, which people may edit before a push")  # not listed either
    write_checksums(tmp_path)
    assert set(read_json(tmp_path / CHECKSUMS)["files"]) == {"config.json", "1_Head/model.safetensors"}
    assert verify_checksums(tmp_path) == 2 and verify_checksums(tmp_path, only=tmp_path / "config.json") == 1
    (tmp_path / "config.json").write_text('{"layers": 7}')  # same size, one digit changed
    with pytest.raises(
        CtxirError, match=r"config\.json' is damaged \(its sha256 differs\).*ship the model folder"
    ):
        verify_checksums(tmp_path)
    (tmp_path / "config.json").write_text('{"layers": 6')
    with pytest.raises(CtxirError, match=r"is 12 bytes where 13 were written"):
        verify_checksums(tmp_path)
    (tmp_path / CHECKSUMS).write_text('{"format": "ctxir-checksums/1", "files": [')
    with pytest.raises(CtxirError, match=r"checksums\.json' is damaged"):
        verify_checksums(tmp_path)
    assert verify_checksums(tmp_path / "1_Head") == 0  # no checksums.json: nothing to check
