"""The shared entry point of ctxir's commands: typed dataclass arguments → ``run(args)``."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxir.types import CtxirError


def cli_main(args_class: type, run: Callable[[Any], Any], argv: list[str] | None = None) -> int:
    """Parse ``args_class`` with HfArgumentParser, call ``run(args)``; a CtxirError prints one line, exit 2."""
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(args_class).parse_args_into_dataclasses(args=argv)
    try:
        run(args)
    except CtxirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def command_line(prefix: str, args_class: type, config: Mapping[str, Any], always: Sequence[str] = (),
                 replace: Mapping[str, str] | None = None) -> str:
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
