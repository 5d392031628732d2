"""ctxir is an installed package: its CLIs run from any folder, and a wheel carries the files it reads at run time."""

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REINSTALL = (
    "run `python -m pip install -r requirements-dev.txt` from the checkout (it installs ctxir with `-e .`)"
)


def _clean_env() -> dict[str, str]:
    # PYTHONPATH would put the checkout back on sys.path and hide a missing install
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_evaluate_cli_runs_from_outside_the_checkout(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ctxir", "evaluate", "--help"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"ctxir is not installed: {REINSTALL}\n{done.stderr[-2000:]}"
    assert "--data" in done.stdout and "--retriever" in done.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import ctxir; print(ctxir.__file__)"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # an editable install left pointing at another checkout would test that one's code
    assert Path(where.stdout.strip()).resolve() == ROOT / "ctxir" / "__init__.py", (
        f"the installed ctxir is {where.stdout.strip()!r}, not this checkout's: {REINSTALL}"
    )


def _package_files(folder: str) -> set[str]:
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "ctxir" / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


# What the build reads besides ctxir/: pyproject.toml's readme and license-files, setup.py, the card templates
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "docs/package.md", "model_cards")


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """``python -m build`` as a user runs it: the sdist, then the wheel built from the unpacked sdist (so a file the
    sdist lacks is missing from the wheel too)."""
    out, source = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("source")
    # Built from a copy: setuptools writes build/ and ctxir.egg-info/ beside the sources, not in the checkout.
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name)
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "ctxir", source / "ctxir", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # --no-isolation: the installed setuptools (requirements-dev.txt), no index needed
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
        env={**_clean_env(), "PIP_NO_INPUT": "1"},
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (sdist,), (wheel,) = out.glob("ctxir-*.tar.gz"), out.glob("ctxir-*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def wheel(dists) -> Path:
    return dists["wheel"]


def test_the_wheel_carries_the_shipped_models_templates_and_demo_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = _package_files("assets") | _package_files("templates")
    assert {n for n in data if n.startswith("ctxir/assets/models/") and n.endswith(".safetensors")}, data
    assert {n for n in data if "/1_SegmentCosineHead/" in n}, data  # a module's own folder, below a model's
    assert "ctxir/templates/report.html.j2" in data
    assert data - names == set()
    # the card templates, from the repository's model_cards/: ctxir hub push builds cards from an installed wheel
    cards = {f"ctxir/model_cards/{p.name}" for p in (ROOT / "model_cards").glob("*.md")}
    assert cards and cards - names == set()
    # every module, a package added since included (setup.py finds them)
    code = {p.relative_to(ROOT).as_posix() for p in (ROOT / "ctxir").rglob("*.py")}
    assert code - names == set()
    # the library only: training/, scripts/, tests/ and benchmarks/ run from a checkout
    assert {n.split("/")[0] for n in names} == {"ctxir", wheel.name.split("-py3")[0] + ".dist-info"}


def test_the_metadata_names_its_readme_licences_and_links(dists):
    """What PyPI shows: the package's own description (README.md opens with the Space's YAML front matter), the
    code's licence and, as a separate file, the shipped weights' terms; `twine check` passes."""
    import email

    wheel = zipfile.ZipFile(dists["wheel"])
    meta = email.message_from_string(
        wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    )
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE", "ctxir/assets/models/LICENSES.md"]
    assert {n.split(".dist-info/licenses/")[-1] for n in wheel.namelist() if ".dist-info/licenses/" in n} == {
        "LICENSE",
        "ctxir/assets/models/LICENSES.md",
    }
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert all(url.split(", ", 1)[1].startswith("https://") for url in meta.get_all("Project-URL")), meta
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == (ROOT / "docs/package.md").read_text().strip()
    assert not meta.get_payload().startswith("---")
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists["sdist"]), str(dists["wheel"])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _venv_run(venv: Path, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**_clean_env(), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", **env},
    )
    assert done.returncode == 0, f"{' '.join(args)}:\n{(done.stdout + done.stderr)[-3000:]}"
    return done


def _venv_seeing_this_interpreter(venv: Path) -> Path:
    """A new virtual environment that sees the packages of the interpreter running the tests; its python.

    ``venv --system-site-packages`` would show the base Python's packages, which inside a virtual environment are not
    the ones installed, so a .pth file adds this interpreter's site folders (and their .pth files) after its own."""
    # --without-pip: this interpreter's pip serves (ensurepip would put an old setuptools in front of the installed)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.strip()
    seen = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    folders = [folder for folder in dict.fromkeys(seen) if Path(folder).is_dir()]
    (Path(own) / "_tests_interpreter.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({folder!r})" for folder in folders) + "\n"
    )
    return python


def test_the_wheel_installed_in_a_clean_venv_runs_from_an_empty_folder(wheel, tmp_path):
    """As a user installs it: a new virtual environment (the tests' interpreter's packages visible, so torch is not
    fetched again), `pip install` of the wheel, not editable, with no index (every dependency must already be there,
    nothing is downloaded); then `ctxir --help` and `ctxir evaluate` on the packaged demo corpus, from an empty folder,
    with ctxir imported from the venv: the checkout's editable install, on that interpreter's path too, must not
    answer."""
    venv, empty = tmp_path / "venv", tmp_path / "empty"
    empty.mkdir()
    python = _venv_seeing_this_interpreter(venv)
    _venv_run(
        venv, [str(python), "-m", "pip", "install", "--no-index", "--no-compile", "-q", str(wheel)], empty
    )
    site = Path(
        _venv_run(
            venv, [str(python), "-c", "import site; print(site.getsitepackages()[0])"], empty
        ).stdout.strip()
    )

    done = _venv_run(venv, ["ctxir", "--help"], empty)
    assert "evaluate" in done.stdout and "hub" in done.stdout
    code = (
        "import json, ctxir, ctxir.encoders.models as m, ctxir.publish.cards as c; print(json.dumps("
        "[ctxir.__file__, str(c.TEMPLATE_DIR), sorted(str(p) for p in m.SHIPPED_MODELS.values() if p.is_dir())]))"
    )
    module, templates, shipped = json.loads(_venv_run(venv, [str(python), "-c", code], empty).stdout)
    assert Path(module) == site / "ctxir" / "__init__.py", f"ctxir came from {module!r}, not the venv's wheel"
    assert Path(templates) == site / "ctxir" / "model_cards" and any(Path(templates).glob("*.md"))
    in_checkout = sorted(p.name for p in (ROOT / "ctxir/assets/models").iterdir() if p.is_dir())
    assert in_checkout and [Path(p).name for p in shipped] == in_checkout
    assert all(Path(p).is_relative_to(site) for p in shipped)

    # the demo corpus as a BEIR folder, copied from the installed package; BM25 re-ranked by the shipped
    # cross-encoder (2 queries: the point is that the installed model folder loads and scores, not the figure)
    assets, data = site / "ctxir" / "assets", empty / "demo"
    (data / "qrels").mkdir(parents=True)
    shutil.copy(assets / "demo_corpus.jsonl", data / "corpus.jsonl")
    shutil.copy(assets / "demo_queries.jsonl", data / "queries.jsonl")
    shutil.copy(assets / "demo_qrels.tsv", data / "qrels" / "test.tsv")
    flags = ["--data", "demo", "--retriever", "bm25", "--rerank", "cross-encoder", "--top-k", "5"]
    flags += ["--max-queries", "2", "--torch-threads", "1", "--output", "results.json"]
    offline = {"HF_HUB_OFFLINE": "1", "CTXIR_CACHE": str(tmp_path / "cache")}
    _venv_run(venv, ["ctxir", "evaluate", *flags], empty, **offline)
    results = json.loads((empty / "results.json").read_text())
    assert results["num_queries"] == 2 and results["num_docs"] == 248
    assert "bm25 + cross-encoder" in results["metrics"], results["metrics"].keys()
    assert results["metrics"]["bm25 + cross-encoder"]["nDCG@10"] > 0
