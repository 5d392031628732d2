"""No sentence over 40 words in README.md and docs/**/*.md.

Prose only: code blocks, tables, front matter, HTML comments and headings are left out. The blocks a script
generates (``<!-- name:start -->`` … ``<!-- name:end -->``, ``python -m benchmarks.report``'s section) are prose
like the rest: their scripts write short sentences. A paragraph or list item is one unit; it splits into sentences
after ``.``, ``!`` or ``?`` and a space.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 40
COMMENT = re.compile(r"<!--.*?-->", flags=re.S)
ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
SENTENCE_END = re.compile(r"(?<=[.!?])[)\"'*_]*\s+")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blank(match: re.Match) -> str:
    """The matched text with its line breaks kept, so line numbers still point into the file."""
    return "\n" * match.group(0).count("\n")


def prose_units(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph or list item of ``text`` that is prose."""
    if text.startswith("---\n"):  # front matter
        end = text.find("\n---\n", 4)
        if end != -1:
            text = "\n" * text[: end + 5].count("\n") + text[end + 5 :]
    text = COMMENT.sub(_blank, text)
    units: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    fence = None

    def close() -> None:
        if current:
            units.append((start, " ".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            close()
            fence = stripped[:3]
            continue
        if not stripped or stripped.startswith(("#", "|", "<", "![")) or line.startswith("    "):
            close()
            continue
        if ITEM.match(line):
            close()
            stripped = ITEM.sub("", line).strip()
        if not current:
            start = number
        current.append(stripped)
    close()
    return units


def sentences(unit: str) -> list[str]:
    return [s for s in SENTENCE_END.split(unit) if s.strip()]


def words(sentence: str) -> int:
    return len(sentence.split())


def long_sentences(path: Path) -> list[str]:
    found = []
    for line, unit in prose_units(path.read_text(encoding="utf-8")):
        for sentence in sentences(unit):
            if words(sentence) > MAX_WORDS:
                found.append(f"{path.relative_to(ROOT)}:{line}: {words(sentence)} words: {sentence}")
    return found


def test_no_sentence_in_the_readme_or_the_docs_is_over_40_words():
    found = [f for path in pages() for f in long_sentences(path)]
    assert not found, f"{len(found)} sentence(s) over {MAX_WORDS} words; split them:\n" + "\n".join(found)


def test_the_count_sees_a_long_sentence_and_skips_what_is_not_prose(tmp_path):
    long = " ".join(["word"] * 41) + "."
    page = tmp_path / "page.md"
    page.write_text(
        "---\ntitle: " + long + "\n---\n"
        "# " + long + "\n\n"
        "```bash\n" + long + "\n```\n"
        "| " + long + " |\n"
        "<!-- " + long + " -->\n"
        "<!-- t:start -->\n" + long + "\n<!-- t:end -->\n\n"  # generated, and counted
        "A short one. " + " ".join(["word"] * 20) + "\n" + " ".join(["word"] * 21) + ".\n\n"
        "- an item of ten words, no more, to close it.\n- " + " ".join(["w"] * 40) + ".\n"
    )
    units = prose_units(page.read_text())
    assert [line for line, _ in units] == [12, 15, 18, 19]
    assert [words(s) for _, unit in units for s in sentences(unit)] == [41, 3, 41, 10, 40]
    found = [(line, words(s)) for line, unit in units for s in sentences(unit) if words(s) > MAX_WORDS]
    assert found == [(12, 41), (15, 41)]
