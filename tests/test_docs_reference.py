"""docs/reference/ lists every flag the commands take: each ``ctxir`` command's and app.py's, with app.py's
environment variables."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ctxir.cli import COMMANDS as TOP

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
COMMANDS = [name for name in TOP if name != "hub"] + ["hub push", "hub validate"]


def help_flags(text: str) -> set[str]:
    """The long flags an argparse ``--help`` lists under ``options:`` (``--help`` itself left out)."""
    options = text[text.index("\noptions:\n") :]
    return set(re.findall(r"^\s{2}(?:-\w, )?(--[\w-]+)", options, flags=re.M)) - {"--help"}


def section_flags(page: str, heading: str) -> set[str]:
    """The flags in the first column of the tables under ``heading`` (up to the next heading of its level)."""
    level = heading.split(" ", 1)[0]
    part = re.split(rf"^{re.escape(heading)}\n", page, maxsplit=1, flags=re.M)[1]
    part = re.split(rf"\n{level} ", part, maxsplit=1)[0]
    return set(re.findall(r"^\| `(--[\w-]+)", part, flags=re.M))


def ctxir_help(command: str, monkeypatch, capsys) -> str:
    from ctxir.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxir"])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main([*command.split(), "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_cli_md_lists_every_flag_of_each_command(command, monkeypatch, capsys):
    page = (REFERENCE / "cli.md").read_text(encoding="utf-8")
    listed = section_flags(page, f"## ctxir {command}")
    flags = help_flags(ctxir_help(command, monkeypatch, capsys))
    assert listed == flags, f"docs/reference/cli.md, ctxir {command}: missing {sorted(flags - listed)}, " + (
        f"gone from --help {sorted(listed - flags)}"
    )


def test_app_md_lists_every_flag_of_app_py_with_its_variable(monkeypatch, capsys):
    import app

    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        app.main(["--help"])
    text = capsys.readouterr().out
    page = (REFERENCE / "app.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(--[\w-]+)` \| `(CTXIR_\w+)` \|", page, flags=re.M))
    assert set(rows) == help_flags(text) - {"--recipe"}, (
        "docs/reference/app.md's flags differ from app.py --help"
    )
    said = dict(
        re.findall(r"(--[\w-]+)[^\n]*?\[(CTXIR_\w+)\]", text.replace("\n                        ", " "))
    )
    assert {flag: rows[flag] for flag in said} == said, (
        "docs/reference/app.md names another variable than --help"
    )


def test_the_flag_check_sees_a_missing_flag():
    page = "## ctxir x\n\n| Flag |\n| --- |\n| `--a A` |\n\n## ctxir y\n\n| `--b` |\n"
    assert section_flags(page, "## ctxir x") == {"--a"}
    assert help_flags("usage: x\n\noptions:\n  -h, --help  show\n  --a A  a\n  --b B\n") == {"--a", "--b"}
