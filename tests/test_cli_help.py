"""Every ``ctxir`` command's --help lists each flag once, in the spelling the docs use, and still takes both."""

import re
import sys

import pytest

from ctxir.cli import COMMANDS as TOP

# every command a user types after `ctxir` (hub has two of its own)
COMMANDS = [name for name in TOP if name != "hub"] + ["hub push", "hub validate"]


def _help(command: str, monkeypatch, capsys) -> str:
    from ctxir.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxir"])  # main names the command in argv[0] for argparse's usage line
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        main([*command.split(), "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _listed_flags(text: str) -> list[list[str]]:
    """Each option line of a --help: its option strings (``-h, --help`` → ['-h', '--help'])."""
    options = text[text.index("\noptions:\n") :]
    lines = [line[2:] for line in options.splitlines() if line.startswith("  -")]
    # the invocation ends where two spaces start its help; a metavar holds no ", -" ({a,b} has no space)
    return [re.split(r",\s+(?=-)", re.split(r"\s{2,}", line)[0]) for line in lines]


def _duplicates(text: str) -> list[str]:
    found, seen = [], {}
    for strings in _listed_flags(text):
        longs = [s.split()[0] for s in strings if s.startswith("--")]
        if len(longs) > 1:
            found.append(f"one option listed as {', '.join(longs)}")
        for flag in longs:
            key = flag.replace("_", "-")
            if key in seen:
                found.append(f"{flag} listed again (as {seen[key]})")
            seen.setdefault(key, flag)
    return found


def test_the_check_sees_a_flag_listed_twice():
    text = "usage: x\n\noptions:\n  -h, --help  show\n  --top_k TOP_K, --top-k TOP_K\n                first stage\n"
    assert _duplicates(text) == ["one option listed as --top_k, --top-k", "--top-k listed again (as --top_k)"]
    assert _duplicates("\noptions:\n  --a-b A\n  --a_b A  again\n") == ["--a_b listed again (as --a-b)"]
    assert _listed_flags("\noptions:\n  --pick {a,b}  x\n") == [["--pick {a,b}"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_each_flag_once_with_dashes(command, monkeypatch, capsys):
    text = _help(command, monkeypatch, capsys)
    listed = [s.split()[0] for strings in _listed_flags(text) for s in strings]
    assert "--recipe" in listed and len(listed) > 3, text
    assert _duplicates(text) == [], text
    # the spelling docs/reference/cli.md and the usage line use (ctxir.cli.flag_names): dashes
    assert [f for f in listed if "_" in f] == [], text
    usage = text[: text.index("\noptions:\n")]
    assert "_" not in " ".join(re.findall(r"\[?(--[\w-]+)", usage)), usage


def test_a_trainer_script_lists_its_aliased_flags_once(monkeypatch, capsys):
    """A training script's class extends the Trainer's arguments, whose flags carry aliases (--batch-size for
    --per-device-train-batch-size): --help shows the alias alone; every spelling still parses."""
    from ctxir.cli import parse_args
    from training.train_cross_encoder import CrossEncoderArgs

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        parse_args(CrossEncoderArgs, ["--help"])
    text = capsys.readouterr().out
    assert _duplicates(text) == []
    listed = {s.split()[0] for strings in _listed_flags(text) for s in strings}
    assert {"--batch-size", "--epochs", "--no-logging-first-step"} <= listed
    assert "--per-device-train-batch-size" not in listed
    for spelling in (
        "--batch-size",
        "--batch_size",
        "--per_device_train_batch_size",
        "--per-device-train-batch-size",
    ):
        assert parse_args(CrossEncoderArgs, [spelling, "3"]).per_device_train_batch_size == 3
    for spelling in ("--no-logging-first-step", "--no_logging_first_step"):
        assert parse_args(CrossEncoderArgs, [spelling]).logging_first_step is False


@pytest.mark.parametrize("spelling", ["--top-k", "--top_k"])
def test_both_spellings_still_parse(spelling):
    from ctxir.cli import parse_args
    from ctxir.evaluation.evaluate import EvaluateArgs

    assert parse_args(EvaluateArgs, ["--data", "d", spelling, "7"]).top_k == 7
