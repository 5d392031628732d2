"""Deprecated: the benchmarks left the library for the repository's ``benchmarks/`` folder (beside ``scripts/``).

``python -m ctxir.bench KIND --flags`` still runs ``python -m benchmarks.KIND --flags`` (from the repository root)
for one release, with a DeprecationWarning naming the new command; ``ctxir.bench.NAME`` finds NAME in the
``benchmarks`` modules the same way. Nothing heavy is imported until then.
"""

from __future__ import annotations

import importlib
import sys
import warnings

KINDS = ("search", "encode", "rerank", "train", "app", "report")
# Where the old module's names live now, searched in this order.
MODULES = ("search", "indexes", "encode", "rerank", "app", "train", "report", "common")
WHERE = "from the repository root: benchmarks/ is a folder of the checkout, not part of the installed ctxir"


def _benchmarks(name: str):
    try:
        return importlib.import_module(f"benchmarks{'.' + name if name else ''}")
    except ModuleNotFoundError as err:
        if err.name != "benchmarks":
            raise
        raise ModuleNotFoundError(f"ctxir.bench moved to the repository's benchmarks/ folder: run the benchmarks "
                                  f"{WHERE}", name="benchmarks") from err


def main(argv: list[str] | None = None) -> int:
    """Forward ``KIND --flags`` to ``python -m benchmarks.KIND --flags``, warning once that the old command is gone
    after this release."""
    argv = list(sys.argv[1:] if argv is None else argv)
    kind = argv[0] if argv and argv[0] in KINDS else "KIND"
    warnings.warn(f"`python -m ctxir.bench {kind}` is deprecated and goes in the next release: use `python -m "
                  f"benchmarks.{kind}` {WHERE}", DeprecationWarning, stacklevel=2)
    try:
        return _benchmarks("").main(argv)
    except ModuleNotFoundError as err:
        if err.name != "benchmarks":
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    for module in MODULES:
        found = _benchmarks(module)
        if hasattr(found, name):
            warnings.warn(f"ctxir.bench.{name} is deprecated: use benchmarks.{module}.{name}", DeprecationWarning,
                          stacklevel=2)
            return getattr(found, name)
    raise AttributeError(f"module 'ctxir.bench' has no attribute {name!r} (it moved to benchmarks/: see "
                         f"benchmarks.{{{','.join(MODULES)}}})")


if __name__ == "__main__":
    sys.exit(main())
