"""The real ``ctxir adapt`` on one shared collection, checked against the figure docs/results.md records (issue 50).

Slow (Medline: 1,033 documents, about 10 minutes on 2 cores): ``python -m pytest -m slow tests/test_adapt_slow.py``,
and ``python scripts/slow_run.py`` runs it with the other slow tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ctxir.files import read_json

ROOT = Path(__file__).resolve().parents[1]
MEDLINE = ROOT.parent / "shared" / "data" / "classic" / "med_beir"
RECORD = ROOT / "docs" / "bench" / "adapt.json"
# CPU training is seeded, but BLAS reductions may differ between machines in the last bits
TOLERANCE = 0.005

pytestmark = pytest.mark.slow


def recorded(collection: str) -> dict:
    rows = [
        r for r in read_json(RECORD)["collections"] if r["collection"] == collection and r["split"] == "test"
    ]
    assert rows, (
        f"{RECORD} has no row for {collection!r}: run python scripts/results_adapt.py --collections med"
    )
    return rows[0]


@pytest.mark.skipif(
    not (MEDLINE / "corpus.jsonl").is_file(), reason="../shared/data/classic/med_beir is absent"
)
def test_adapt_on_medline_reproduces_the_recorded_table(tmp_path):
    want = recorded("Medline")
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n")
    record = tmp_path / "adapt.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "results_adapt.py"),
            "--collections",
            "med",
            "--work",
            str(tmp_path / "work"),
            "--record",
            str(record),
            "--doc",
            str(doc),
            "--training-doc",
            "",
        ],
        check=True,
        cwd=ROOT,
    )
    got = read_json(record)["collections"][0]
    assert got["adapt_complete"], "the default budget stopped the adaptation of 1,033 documents"
    for mine, theirs in zip(got["rows"], want["rows"], strict=True):
        assert mine["stage"] == theirs["stage"]
        assert mine["before"] == pytest.approx(theirs["before"], abs=TOLERANCE), mine
        assert mine["after"] == pytest.approx(theirs["after"], abs=TOLERANCE), mine
    assert "<!-- adapt:start -->" in doc.read_text()
