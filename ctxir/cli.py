"""ctxir's commands: the ``ctxir`` console script (``python -m ctxir``) and the typed-arguments runner they share.

ctxir evaluate --help       ctxir compare A.json B.json     ctxir report results.json
ctxir classify --help       ctxir hub push|validate --help
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxir.types import CtxirError


def cli_main(args_class: type, run: Callable[[Any], Any], argv: list[str] | None = None) -> int:
    """Parse ``args_class`` with HfArgumentParser, call ``run(args)``; a CtxirError prints one line, exit 2.

    The exit status is 0, or ``run``'s own when it returns an int (e.g. 3 = staged but not uploaded).
    """
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(args_class).parse_args_into_dataclasses(args=argv)
    try:
        result = run(args)
    except CtxirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def subcommand_main(
    commands: Mapping[str, tuple[type, Callable[[Any], Any]]], prog: str, argv: list[str] | None = None
) -> int:
    """``prog COMMAND --flags``: the first word picks (args class, run) from ``commands``; the rest is ``cli_main``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in commands:
        got = f"got {argv[0]!r}: " if argv else ""
        print(
            f"usage: {prog} {{{','.join(commands)}}} --help ({got}give one of {', '.join(commands)} first)",
            file=sys.stderr,
        )
        return 2
    args_class, run = commands[argv[0]]
    return cli_main(args_class, run, argv[1:])


def command_line(
    prefix: str,
    args_class: type,
    config: Mapping[str, Any],
    always: Sequence[str] = (),
    replace: Mapping[str, str] | None = None,
) -> str:
    """The inverse of ``cli_main``: the command that reproduces ``config`` (the values differing from the defaults).

    ``always`` flags are shown first even at their default; ``replace`` rewrites path prefixes (e.g. an absolute
    checkout path → relative) so the command runs from any checkout.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(args_class)}
    parts = [prefix]
    for key in [k for k in always if k in config] + [k for k in config if k not in always]:
        value = config[key]
        if key not in defaults or (key not in always and value == defaults[key]):
            continue
        if isinstance(value, str):
            for old, new in (replace or {}).items():
                value = value.replace(old, new)
        parts.append(f"--{key.replace('_', '-')} {str(value).lower() if isinstance(value, bool) else value}")
    return " ".join(parts)


# subcommand → (the module whose ``main(argv)`` runs it, what it does); imported only when chosen
COMMANDS = {
    "evaluate": (
        "ctxir.evaluation.evaluate",
        "retrieve (and re-rank) a BEIR collection; metrics, runs, paired tests",
    ),
    "compare": (
        "ctxir.evaluation.compare",
        "compare saved runs or results JSONs query by query, with paired tests",
    ),
    "report": ("ctxir.evaluation.report_cli", "the failure report (HTML) of an evaluation's results JSON"),
    "classify": (
        "ctxir.classify.cli",
        "classify texts with the encoders: zero-shot, kNN, logistic regression",
    ),
    "hub": (
        "ctxir.publish.hub",
        "stage, validate and push a trained model with its card to the Hugging Face Hub",
    ),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(
        [
            "usage: ctxir COMMAND [--flags]   (or python -m ctxir COMMAND)",
            "",
            "commands:",
            *lines,
            "",
            "ctxir COMMAND --help lists a command's flags.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """``ctxir COMMAND --flags``: the first word picks the command (its module is imported only then)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        got = f"unknown command {argv[0]!r}: " if argv else "no command given: "
        print(f"{usage()}\n\nerror: {got}give one of {', '.join(COMMANDS)} first", file=sys.stderr)
        return 2
    module, _ = COMMANDS[argv[0]]
    sys.argv[0] = f"ctxir {argv[0]}"  # argparse's usage line names the command as typed
    return importlib.import_module(module).main(argv[1:])
