"""The `slow` tests, run and recorded as a row in docs/results.md; run it each time a ``WATCHED`` file changes.

python scripts/slow_run.py                 # python -m pytest -m slow, then the row
python scripts/slow_run.py -- -n 2         # pytest options after "--"
python scripts/slow_run.py --junit FILE    # record a run already made (its JUnit XML; --commit, --minutes)
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results.md"
BEGIN, END = "<!-- slow runs: begin (scripts/slow_run.py) -->", "<!-- slow runs: end -->"
HEADER = "| date | commit | machine | passed | failed | skipped | minutes | failed tests |"
# what a slow run answers for (git pathspecs): the shipped models' files that decide their scores (not their cards,
# metrics or checksums), and the fault sites and the scenarios that exercise them
WATCHED = (
    "ctxir/assets/models",
    ":(exclude,glob)ctxir/assets/models/**/*.md",
    ":(exclude,glob)ctxir/assets/models/*.md",
    ":(exclude,glob)ctxir/assets/models/**/metrics.json",
    ":(exclude,glob)ctxir/assets/models/**/evaluation.json",
    ":(exclude,glob)ctxir/assets/models/**/checksums.json",
    "scripts/faults.py",
    "scripts/fault_harness.py",
    "tests/test_faults.py",
    "ctxir/files.py",
)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def machine() -> str:
    from benchmarks.common import machine as described

    found = described()
    return f"{found['cores']}-core {found['cpu'] or platform.machine()}, {platform.system()}"


def outcomes(junit: Path) -> dict:
    """{"passed", "failed", "skipped": counts, "failures": [test ids]} of a JUnit XML report."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            counts["failures"].append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def row(date: str, commit: str, counts: dict, minutes: float) -> str:
    failed = ", ".join(f"`{name}`" for name in counts["failures"]) or "none"
    return (
        f"| {date} | {commit} | {machine()} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | "
        f"{minutes:.0f} | {failed} |"
    )


def add_row(text: str, new: str) -> str:
    """``text`` (docs/results.md) with ``new`` as the first row of the slow-runs table (newest first)."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} has no slow-runs table ({BEGIN!r} ... {END!r}): add one")
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    rows = [line for line in body.strip().splitlines() if line.startswith("| ") and line != HEADER]
    rows = [r for r in rows if not r.startswith("|---")]
    table = "\n".join([HEADER, "|---|---|---|---:|---:|---:|---:|---|", new, *rows])
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def recorded_runs(text: str) -> list[dict]:
    """The table's rows, newest first: {"date", "commit", "passed", "failed", ...}."""
    if BEGIN not in text:
        return []
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    keys = [k.strip() for k in HEADER.strip("|").split("|")]
    rows = [line for line in body.splitlines() if line.startswith("| ") and line != HEADER]
    return [dict(zip(keys, (c.strip() for c in r.strip("|").split("|")), strict=False)) for r in rows]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--junit", help="record this JUnit XML of a slow run already made, instead of a run")
    parser.add_argument("--commit", help="with --junit: the commit that run started at (default: HEAD)")
    parser.add_argument("--minutes", type=float, help="with --junit: how long that run took")
    parser.add_argument("--date", help="with --junit: the day that run started (default: today, UTC)")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    commit = args.commit or git("rev-parse", "--short=12", "HEAD")
    date = args.date or datetime.datetime.now(datetime.UTC).date().isoformat()
    if args.junit:
        junit, minutes, code = Path(args.junit), args.minutes or 0.0, None
    else:
        junit = Path(tempfile.mkdtemp()) / "slow.xml"
        started = time.time()
        command = [sys.executable, "-m", "pytest", "-m", "slow", "-p", "no:cacheprovider"]
        code = subprocess.run([*command, f"--junitxml={junit}", *extra], cwd=ROOT).returncode
        minutes = (time.time() - started) / 60
    counts = outcomes(junit)
    DOC.write_text(add_row(DOC.read_text(), row(date, commit, counts, minutes)))
    print(f"recorded in {DOC}: {counts['passed']} passed, {counts['failed']} failed, {minutes:.0f} min")
    return code if code is not None else int(counts["failed"] > 0)


if __name__ == "__main__":
    sys.exit(main())
