"""The README's quickstart and every guide's tested blocks run as a reader runs them.

A block is tested when the line before its fence is ``<!-- test -->``. Each runs in a subprocess, in one working
folder shared by the guides, which holds the files the guides name: ``my_docs.jsonl`` (the demo corpus),
``my-collection/`` (the demo corpus as a judged BEIR folder), ``my-data/`` (a toy data root) and two labelled CSV
files. Training runs get the tiny test model and a few steps through a substitution table (``TINY``), so a guide
shows the command a user types while the test runs it in seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"
ASSETS = ROOT / "ctxir" / "assets"
TESTED = re.compile(r"^<!-- test -->\n```(bash|python)\n(.*?)^```", flags=re.S | re.M)
# the guides in the order a reader meets them; a guide that uses another's output names it in NEEDS
ORDER = [
    "search",
    "evaluate",
    "bi-encoder",
    "cross-encoder",
    "cls-lr",
    "classify",
    "adapt",
    "internals",
    "publish",
    "app",
]
NEEDS = {"cls-lr": "cross-encoder", "publish": "cross-encoder"}
# every guide is here or has no tested block on purpose (api.md's Python runs in tests/test_app_client.py)
UNTESTED = {"api"}

TRAIN = "--device cpu --torch-threads 1 --model {tiny}"
# guide → (text in the guide, what the test runs instead): the tiny model and a few steps for every training run
TINY = {
    "bi-encoder": [
        (
            "--epochs 1",
            f"--epochs 1 --max-steps 2 --max-samples 8 --batch-size 4 --mining-cache none {TRAIN}",
        ),
    ],
    "cross-encoder": [
        (
            "--epochs 1",
            f"--epochs 1 --max-steps 2 --max-samples 8 --batch-size 4 --num-negatives 2 --rerank-depth 6 "
            f"--dev-queries 2 --dev-depth 5 {TRAIN}",
        ),
    ],
    "cls-lr": [
        (
            "--output-dir outputs/my-cls-lr",
            "--output-dir outputs/my-cls-lr --negatives-per-positive 3 --negative-depth 20 --max-samples 10 "
            "--cv-folds 3 --rerank-depth 5 --verify-queries 2 --batch-size 4 --c-grid 0.1,1 --device cpu",
        ),
    ],
    "adapt": [
        (
            "--max-minutes 30",
            f"--max-minutes 0 --max-steps 2 --max-queries 40 --batch-size 8 --max-seq-length 16 {TRAIN}",
        ),
    ],
}


def marked_blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, first line number, code) of every block marked ``<!-- test -->``, in order."""
    return [(m.group(1), text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in TESTED.finditer(text)]


def readme_quickstart() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def _env(folder: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXIR_CACHE": str(folder / ".cache"), "MPLBACKEND": "Agg"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def commands(block: str) -> list[list[str]]:
    """A bash block's commands, each split into words (``\\`` continues a line; ``#`` starts a comment)."""
    return [
        shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines() if line.strip()
    ]


@contextlib.contextmanager
def reader(folder: Path):
    """In ``folder`` with the reader's environment; stdout captured (→ the StringIO), the loaders' caches fresh."""
    from ctxir.encoders.models import load_bi_encoder, load_cross_encoder, resolve_model

    for cached in (load_bi_encoder, load_cross_encoder, resolve_model):
        cached.cache_clear()  # a relative name such as outputs/my-reranker means this folder's
    saved_env, saved_argv, saved_cwd = dict(os.environ), list(sys.argv), os.getcwd()
    os.environ.update(_env(folder))
    os.chdir(folder)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield out
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


def _exit_code(run) -> int:
    try:
        code = run()
    except SystemExit as stop:
        code = stop.code
    return 0 if code is None else code


def run_command(words: list[str], tiny: str) -> int:
    """One command of a bash block, in this process: ``ctxir ...``, ``python training/NAME.py ...`` or
    ``python -m training.NAME ...``. The tiny test model stands in for ``{tiny}``."""
    words = [w.replace("{tiny}", tiny) for w in words]
    if words[0] == "ctxir":
        from ctxir.cli import main

        return _exit_code(lambda: main(words[1:]))
    if words[:2] == ["python", "-m"] and words[2].startswith("training."):
        sys.argv = [words[2], *words[3:]]
        return _exit_code(
            lambda: runpy.run_path(str(ROOT / (words[2].replace(".", "/") + ".py")), run_name="__main__")
        )
    if words[0] == "python" and words[1].startswith("training/"):
        sys.argv = [str(ROOT / words[1]), *words[2:]]
        return _exit_code(lambda: runpy.run_path(str(ROOT / words[1]), run_name="__main__"))
    raise AssertionError(
        f"the guides' test does not know how to run {' '.join(words)!r}: add it to run_command"
    )


def _serve(words: list[str], folder: Path, where: str) -> None:
    """``python app.py ...``: started on a free port, answered once, stopped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = " ".join(words[2:])
    flags = re.sub(r"--port \d+", f"--port {port} --host 127.0.0.1", flags).split()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), *flags],
        cwd=folder,
        env=_env(folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.5)
        said = proc.stdout.read() if proc.poll() is not None else "no answer in 240 s"
        pytest.fail(f"{where}: the app did not start: {' '.join(words)}\n{said}")
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def run_block(language: str, code: str, folder: Path, where: str, tiny: str) -> str:
    """One tested block in ``folder`` → what it printed. Python runs as a script would; each command of a bash
    block runs in this process (a new interpreter per command would cost most of the test's time in imports), but
    ``python app.py`` starts the app in its own process."""
    if language == "bash" and code.startswith("python app.py "):
        _serve(shlex.split(code), folder, where)
        return ""
    with reader(folder) as out:
        if language == "python":
            try:
                exec(compile(code, where, "exec"), {"__name__": "__main__"})
            except Exception as err:
                raise AssertionError(f"{where} failed: {err!r}\n{code}") from err
        else:
            for words in commands(code):
                code_ = run_command(words, tiny)
                assert code_ == 0, f"{where}: {' '.join(words)} exited with {code_}\n{out.getvalue()[-4000:]}"
    return out.getvalue()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_bert_dir):
    """The reader's folder: the files the guides name, and which guides ran in it already."""
    from tests.test_train_cls_lr import write_beir

    folder = tmp_path_factory.mktemp("reader")
    shutil.copy(ASSETS / "demo_corpus.jsonl", folder / "my_docs.jsonl")
    collection = folder / "my-collection"
    (collection / "qrels").mkdir(parents=True)
    shutil.copy(ASSETS / "demo_corpus.jsonl", collection / "corpus.jsonl")
    shutil.copy(ASSETS / "demo_queries.jsonl", collection / "queries.jsonl")
    shutil.copy(ASSETS / "demo_qrels.tsv", collection / "qrels" / "test.tsv")
    write_beir(folder / "my-data")  # my-data/scifact: 30 documents, 12 training and 4 test queries
    rows = [
        ("The striker scored twice in the final.", "Sports"),
        ("The goalkeeper saved a late penalty.", "Sports"),
        ("The team signed a new coach.", "Sports"),
        ("Shares fell after the profit warning.", "Business"),
        ("The bank raised its interest rates.", "Business"),
        ("The retailer doubled its quarterly profit.", "Business"),
    ]
    for name, part in (("my_train.csv", rows), ("my_test.csv", rows[::2])):
        (folder / name).write_text("text,label\n" + "".join(f'"{t}",{lab}\n' for t, lab in part))
    return {"folder": folder, "tiny": str(tiny_bert_dir), "ran": {}}


def run_guide(name: str, workspace: dict) -> str:
    """Every tested block of docs/guides/NAME.md, in order (once per workspace) → what they printed."""
    if name in workspace["ran"]:
        return workspace["ran"][name]
    if name in NEEDS:
        run_guide(NEEDS[name], workspace)
    printed = []
    for language, line, code in marked_blocks((GUIDES / f"{name}.md").read_text(encoding="utf-8")):
        for old, new in TINY.get(name, []):
            assert old in code or language == "python", f"docs/guides/{name}.md no longer says {old!r}"
            code = code.replace(old, new)
        where = f"docs/guides/{name}.md, the block at line {line}"
        printed.append(run_block(language, code, workspace["folder"], where, workspace["tiny"]))
    workspace["ran"][name] = "\n".join(printed)
    return workspace["ran"][name]


def test_every_guide_is_tested_or_listed_as_untested():
    pages = {p.stem for p in GUIDES.glob("*.md")}
    assert pages == set(ORDER) | UNTESTED
    for name in ORDER:
        blocks = marked_blocks((GUIDES / f"{name}.md").read_text(encoding="utf-8"))
        assert blocks, f"docs/guides/{name}.md has no block marked <!-- test -->"
    assert marked_blocks("<!-- test -->\n```bash\necho hi\n```\n\n```bash\nuntested\n```\n") == [
        ("bash", 3, "echo hi\n")
    ]


def test_the_readme_quickstart_runs_from_an_empty_folder(tmp_path):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", readme_quickstart()],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"README.md's quickstart failed:\n{done.stdout}{done.stderr[-4000:]}"
    printed = done.stdout
    lines = printed.strip().splitlines()
    assert "animals-04" in lines[0] and len(lines) == 4, (
        printed
    )  # the echolocation passage first, then 3 ranked
    assert lines[1].startswith("0 "), printed  # the re-ranker keeps it first
    assert time.perf_counter() - start < 180


@pytest.mark.parametrize("name", ORDER)
def test_a_guides_commands_run(name, workspace):
    printed = run_guide(name, workspace)
    folder = workspace["folder"]
    if name == "search":
        assert "animals-04" in printed.splitlines()[0], printed
    elif name == "evaluate":
        hybrid = json.loads((folder / "results" / "hybrid.json").read_text())
        assert "query ''" in printed and "prompt" in json.dumps(hybrid), (
            printed
        )  # the prompts used, said and kept
        assert (folder / "results" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    elif name == "cross-encoder":
        assert (folder / "outputs" / "my-reranker" / "metrics.json").is_file()
        assert "otters play in the water" in printed or "the cat sat on the dog" in printed
    elif name == "publish":
        assert (folder / "outputs" / "hub" / "you--my-reranker" / "README.md").is_file()
    elif name == "internals":
        assert (folder / "attention.html").stat().st_size > 1000
