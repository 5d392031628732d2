"""Every figure in README.md, docs/**/*.md and the shipped cards is the one in the JSON it came from.

The cards' evaluation tables are held to each model's metrics.json row by row, their suite tables to evaluation.json;
results.md's generated blocks are rendered again from their records and must come out the same; a four-decimal
figure in the prose of any page must be one the shipped models' JSON files or docs/bench hold, with its sign where the
prose writes one. A figure typed from memory (the bi-encoder's 0.8601 where
its row says 0.8591), or a loss written as a gain (+0.0031 where the record says −0.0031), fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxir.encoders.models import ASSETS_MODELS
from ctxir.publish.cards import format_number, ordered_evaluations
from ctxir.publish.model_folder import suite_markdown

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# a four-decimal figure and the sign written before it, if any (prose writes "−", U+2212; tables "-")
FIGURE = re.compile(r"(?<![\d.])([−+-]?)(\d\.\d{4})(?!\d)")
BLOCK = re.compile(r"<!-- ([\w-]+):start -->(.*?)<!-- \1:end -->", flags=re.S)
# the section `python -m benchmarks.report` writes into results.md
BENCH = re.compile(r"<!-- ctxir\.bench report: begin -->.*?<!-- ctxir\.bench report: end -->", flags=re.S)
BENCH_INPUTS = re.compile(
    r"python -m benchmarks\.report --markdown docs/results\.md --figures docs --inputs (.*?)#", re.S
)
FOLDERS = ("cross-encoder", "cls-lr", "sts-cross-encoder")


def json_figures() -> set[float]:
    """Every number (to 4 decimals) of the shipped models' JSON files and the records under docs/bench.

    Left out: the fusion choice's grid (hundreds of dev figures no doc quotes, which would let a typed-in number pass
    by coincidence) and configs."""
    found: set[float] = set()

    def walk(x) -> None:
        if isinstance(x, bool):
            return
        if isinstance(x, (int, float)):
            found.add(round(float(x), 4))
        elif isinstance(x, dict):
            for k, v in x.items():
                if k not in ("grid", "config", "train_query_ids", "heldout_query_ids"):
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in [*ASSETS_MODELS.rglob("*.json"), *(DOCS / "bench").rglob("*.json")]:
        if path.name != "checksums.json":
            walk(json.loads(path.read_text(encoding="utf-8")))
    return found


def figures(text: str) -> set[float]:
    """The four-decimal figures of ``text``, signed as written."""
    return {_value(sign, digits) for sign, digits in FIGURE.findall(text)}


def _value(sign: str, digits: str) -> float:
    return round(-float(digits) if sign in ("−", "-") else float(digits), 4)


def prose_misses(text: str, known: set[float]) -> list[str]:
    """The figures of ``text`` that ``known`` does not hold: a signed one must be there with its sign; one written
    without a sign may be either (prose says "by 0.0028 less" of a −0.0028)."""
    magnitudes = {abs(k) for k in known}
    return [
        f"{sign}{digits} in: {line.strip()[:100]}"
        for line in text.splitlines()
        for sign, digits in FIGURE.findall(line)
        if (_value(sign, digits) not in known if sign else float(digits) not in magnitudes)
    ]


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_cards_evaluation_table_is_its_metrics_json_row_by_row(folder):
    metrics = json.loads((ASSETS_MODELS / folder / "metrics.json").read_text(encoding="utf-8"))
    card = (ASSETS_MODELS / folder / "README.md").read_text(encoding="utf-8")
    section = card.split("## Evaluation", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| Dataset")
    ]
    expected = ordered_evaluations(metrics)
    assert len(rows) == len(expected)
    for cells, e in zip(rows, expected, strict=True):
        before, after, delta, anchor = cells[6], cells[7].strip("*"), cells[8], cells[9]
        assert (cells[3], cells[4]) == (e["metric"], e.get("config") or "–")
        assert before == format_number(e.get("before")) and after == format_number(e["after"]), cells
        assert delta == ("–" if e.get("before") is None else f"{e['after'] - e['before']:+.4f}"), cells
        assert anchor == format_number(e.get("anchor")), cells
    suite = suite_markdown(ASSETS_MODELS / folder)
    if suite:  # the out-of-domain table: evaluation.json's, as docs/results.md shows it
        assert suite in card


def test_results_md_generated_blocks_are_what_their_json_renders(tmp_path):
    """The suite tables (each shipped re-ranker's evaluation.json), the targets and the training tables (the shipped
    files) rendered again: equal to what the doc says."""
    from scripts import results_suite, results_targets, results_training

    text = (DOCS / "results.md").read_text(encoding="utf-8")
    blocks = dict(BLOCK.findall(text))
    copy = tmp_path / "results.md"
    copy.write_text(text)
    assert results_suite.main(["--doc", str(copy)]) == 0
    assert dict(BLOCK.findall(copy.read_text()))["suite"] == blocks["suite"], (
        "run python scripts/results_suite.py"
    )
    assert f"\n{results_targets.targets_block()}\n" == blocks["targets"], (
        "run python scripts/results_targets.py"
    )
    assert f"\n{results_training.training_block()}\n" == blocks["training"], (
        "run python scripts/results_training.py"
    )


def test_results_md_foundation_and_classify_blocks_are_what_their_records_render():
    """The foundation and classification tables, rendered again from docs/bench/foundation and docs/bench/classify."""
    from ctxir.files import read_json
    from scripts import results_classify, results_foundation

    blocks = dict(BLOCK.findall((DOCS / "results.md").read_text(encoding="utf-8")))
    foundation = results_foundation.foundation_block(results_foundation.read_records())
    assert dict(BLOCK.findall(foundation))["foundation"] == blocks["foundation"], (
        "run python scripts/results_foundation.py --render"
    )
    runs = {name: read_json(ROOT / results_classify.RECORDS / name) for name in results_classify.RUNS}
    assert dict(BLOCK.findall(results_classify.classify_block(runs)))["classify"] == blocks["classify"], (
        "run python scripts/results_classify.py"
    )


def test_results_md_adapt_blocks_are_what_adapt_json_renders():
    """The ctxir adapt table, its seeds and its timings, rendered again from docs/bench."""
    from ctxir.files import read_json
    from scripts.results_adapt_doc import RECORD, seed_records, seed_spread, table, times

    blocks = dict(BLOCK.findall((DOCS / "results.md").read_text(encoding="utf-8")))
    record = read_json(RECORD)

    rendered = [
        ("adapt", table(record)),
        ("adapt-times", times(record)),
    ]
    if others := seed_records():  # the default at other seeds, once they are recorded
        rendered.append(("adapt_seeds", seed_spread(record, others)))
    for name, lines in rendered:
        assert dict(BLOCK.findall("\n".join(lines)))[name] == blocks[name], (
            "run python scripts/results_adapt.py"
        )


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.fixture(scope="module")
def known() -> set[float]:
    return json_figures()


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_in_a_pages_prose_is_one_a_json_record_holds(page, known):
    text = BENCH.sub("", BLOCK.sub("", page.read_text(encoding="utf-8")))
    misses = prose_misses(text, known)
    assert not misses, f"{page.relative_to(ROOT)}: figures typed in, not read from a JSON record:\n" + (
        "\n".join(misses)
    )


def test_results_md_benchmark_section_is_what_its_records_render(tmp_path):
    """The speed and memory tables, rendered again by `python -m benchmarks.report` from the committed records."""
    from benchmarks import report

    text = (DOCS / "results.md").read_text(encoding="utf-8")
    inputs = [str(ROOT / p) for p in BENCH_INPUTS.search(text).group(1).replace("\\", " ").split()]
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "results.md"
    page.write_text(text)
    assert report.main(["--inputs", *inputs, "--markdown", str(page), "--figures", str(docs)]) == 0
    assert BENCH.findall(page.read_text()) == BENCH.findall(text), (
        "run the benchmarks.report command in docs/results.md"
    )


def test_a_figure_typed_in_is_caught(known):
    """The check above, on the case the issue found: the STS-B bi-encoder's 0.8601 where its row says 0.8591."""
    assert prose_misses("- **STS-B bi-encoder ≥ 0.86:** 0.8601.", known) == [
        "0.8601 in: - **STS-B bi-encoder ≥ 0.86:** 0.8601."
    ]
    assert prose_misses("- **STS-B bi-encoder ≥ 0.86:** 0.8591.", known) == []
    # the sign counts where it is written: LISA's hybrid after adapting fell by 0.0178 (docs/bench/adapt.json)
    assert -0.0178 in known and 0.0178 not in known
    assert prose_misses("LISA's hybrid −0.0178, or 0.0178 lower", known) == []
    assert prose_misses("LISA's hybrid rose, +0.0178", known) == ["+0.0178 in: LISA's hybrid rose, +0.0178"]


@pytest.mark.parametrize("folder", ("cross-encoder", "cls-lr"))
def test_the_suite_rows_of_metrics_json_are_what_evaluation_json_gives(folder):
    """metrics.json's out-of-domain rows (what the card's table and model-index show) are rebuilt from
    evaluation.json by `python scripts/shipped_cards.py`: none is edited by hand or left stale."""
    from scripts.shipped_cards import HUB_USER_CONFIG, SUITE_ROW, suite_rows

    metrics = json.loads((ASSETS_MODELS / folder / "metrics.json").read_text(encoding="utf-8"))
    evaluation = json.loads((ASSETS_MODELS / folder / "evaluation.json").read_text(encoding="utf-8"))
    suite = [e for e in metrics["evaluations"] if SUITE_ROW.match(str(e.get("config") or ""))]
    assert suite == suite_rows(evaluation), "run python scripts/shipped_cards.py"
    leads = [
        e for e in metrics["evaluations"] if e.get("headline")
    ]  # the card leads with what a Hub user gets
    assert len(leads) == 1 and leads[0]["config"].startswith(HUB_USER_CONFIG)
