"""The `slow` tests are run and recorded (scripts/slow_run.py → docs/results.md, "The slow tests, run and
recorded"): the last recorded run is no older than the last commit that changed a shipped model's scoring files or a
fault site, and the recording itself counts a JUnit report right."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from scripts import slow_run
from tests.conftest import REQUIRE

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_last_slow_run_is_newer_than_the_last_change_of_the_shipped_models_and_fault_sites():
    runs = slow_run.recorded_runs(slow_run.DOC.read_text())
    assert runs, f"no slow run recorded in {slow_run.DOC}: run `python scripts/slow_run.py`"
    last = _git("log", "-1", "--format=%H", "--", *slow_run.WATCHED)
    if last.returncode != 0 or _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("not a whole git checkout: the history that says what changed when is not here")
    changed, recorded = last.stdout.strip(), runs[0]["commit"]
    assert _git("cat-file", "-e", f"{recorded}^{{commit}}").returncode == 0, (
        f"the last slow run's commit {recorded!r} is not in this history"
    )
    newer = _git("merge-base", "--is-ancestor", changed, recorded).returncode == 0
    what = _git("log", "-1", "--format=%h %ad %s", "--date=short", changed).stdout.strip()[:160]
    stale = (
        f"the shipped models or a fault site changed after the last recorded slow run (at {recorded}, "
        f"{runs[0]['date']}): {what}. Run `python scripts/slow_run.py` and commit its row in {slow_run.DOC.name}"
    )
    if not newer and "slow-record" not in REQUIRE:
        # A full slow run takes over an hour of both cores: a change is landed first and its run recorded after,
        # so the default run reports a stale record (as a skip, with what to run); CTXIR_REQUIRE=slow-record fails
        pytest.skip(stale)
    assert newer, stale
    assert runs[0]["passed"].isdigit() and runs[0]["failed"].isdigit() and runs[0]["minutes"]


def test_a_slow_run_is_recorded_with_its_counts_and_failed_tests(tmp_path):
    junit = tmp_path / "slow.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="test_ok" time="1"/>'
        '<testcase classname="tests.test_a" name="test_bad" time="1"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b" name="test_skip" time="0"><skipped message="y"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts = slow_run.outcomes(junit)
    assert counts == {"passed": 1, "failed": 1, "skipped": 1, "failures": ["tests/test_a.py::test_bad"]}
    doc = f"intro\n{slow_run.BEGIN}\n{slow_run.HEADER}\n|---|\n| 2026-01-01 | abc | m | 3 | 0 | 0 | 9 | none |\n"
    doc += f"{slow_run.END}\nrest\n"
    text = slow_run.add_row(doc, slow_run.row("2026-02-02", "def", counts, 61.4))
    runs = slow_run.recorded_runs(text)
    assert [r["commit"] for r in runs] == ["def", "abc"]  # newest first
    assert runs[0]["failed"] == "1" and runs[0]["minutes"] == "61" and "test_bad" in runs[0]["failed tests"]
    assert text.startswith("intro\n") and text.endswith("rest\n")


def test_no_doc_names_a_benchmark_marker_that_selects_nothing():
    """The benchmarks are commands (`python -m benchmarks.KIND`), not tests: no `benchmark` pytest marker is declared,
    so no doc may tell a reader to select one."""
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert not [m for m in markers if m.split(":")[0].strip() == "benchmark"]
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    said = [p.name for p in docs if re.search(r"-m\s+['\"]?benchmark\b|mark\.benchmark\b", p.read_text())]
    assert said == []
