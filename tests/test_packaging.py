"""ctxir is an installed package: its CLIs run from any folder, and a wheel carries the files it reads at run time."""

import json
import os
import shutil
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source")
    # Built from a copy: setuptools writes build/ and ctxir.egg-info/ beside the sources, not in the checkout.
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "ctxir", source / "ctxir", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # --no-build-isolation: the installed setuptools, no index needed
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
        env={**_clean_env(), "PIP_NO_INPUT": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("ctxir-*.whl")
    return found


def test_the_wheel_carries_the_shipped_models_templates_and_demo_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = _package_files("assets") | _package_files("templates")
    assert {n for n in data if n.startswith("ctxir/assets/models/") and n.endswith(".safetensors")}, data
    assert "ctxir/templates/report.html.j2" in data
    assert data - names == set()
    # the library only: training/, scripts/, tests/ and benchmarks/ run from a checkout
    assert {n.split("/")[0] for n in names} == {"ctxir", wheel.name.split("-py3")[0] + ".dist-info"}


def test_a_non_editable_install_finds_its_shipped_models(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code = (
        "import json, ctxir.encoders.models as m; print(m.__file__); "
        "print(json.dumps(sorted(str(p) for p in m.SHIPPED_MODELS.values() if p.is_dir())))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**_clean_env(), "PYTHONPATH": str(target)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    module, listed = done.stdout.splitlines()
    shipped = [Path(p) for p in json.loads(listed)]
    assert Path(module).is_relative_to(target)
    in_checkout = sorted(p.name for p in (ROOT / "ctxir/assets/models").iterdir() if p.is_dir())
    assert in_checkout and [p.name for p in shipped] == in_checkout
    assert all(p.is_relative_to(target) for p in shipped)
