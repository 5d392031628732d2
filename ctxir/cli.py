"""The shared entry point of ctxir's commands: typed dataclass arguments → ``run(args)``."""

from __future__ import annotations

import sys
from collections.abc import Callable
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
