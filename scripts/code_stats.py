"""Code size for the clean-up record: Python lines per area, the longest functions, and the functions that take
more than 8 parameters (outside tests).

    python scripts/code_stats.py                 # this checkout
    python scripts/code_stats.py --rev 1b78fb8   # a past commit (read through `git show`, nothing checked out)

Counts physical lines of tracked .py files; a function's length is ``end_lineno - lineno + 1`` from ``ast``; its
parameters are the named ones (positional and keyword-only), not ``self``/``cls``, ``*args`` or ``**kwargs``.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

WATCHED = ("build_demo", "_run", "stage")


def tracked_python(rev: str) -> dict[str, str]:
    if rev:
        names = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True, check=True
        ).stdout.split()
        read = lambda name: (  # noqa: E731
            subprocess.run(
                ["git", "show", f"{rev}:{name}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    else:
        names = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
        read = lambda name: Path(name).read_text(encoding="utf-8")  # noqa: E731
    return {n: read(n) for n in names if n.endswith(".py")}


def functions(files: dict[str, str]) -> list[tuple[int, str]]:
    out = []
    for name, source in files.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
    return sorted(out, reverse=True)


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Named parameters of a function, ``self``/``cls`` left out.

    >>> parameters(ast.parse("def f(self, a, b=1, *rest, c, **more): pass").body[0])
    3
    """
    names = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")])


def many_parameters(files: dict[str, str], limit: int = 8) -> list[tuple[int, str]]:
    out = []
    for name, source in files.items():
        if name.startswith("tests/"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and parameters(node) > limit:
                out.append((parameters(node), f"{name}:{node.name}"))
    return sorted(out, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="", help="a git revision (default: the working tree)")
    parser.add_argument("--top", type=int, default=8, help="how many of the longest functions to list")
    args = parser.parse_args(argv)
    files = tracked_python(args.rev)
    areas = Counter()
    for name, source in files.items():
        areas[name.split("/")[0] if "/" in name else "(root)"] += source.count("\n")
    print(
        f"python lines: {sum(areas.values()):,} in {len(files)} files "
        f"({', '.join(f'{a} {n:,}' for a, n in sorted(areas.items()))})"
    )
    print("longest functions:")
    for length, where in functions(files)[: args.top]:
        print(f"  {length:4d}  {where}")
    crowded = many_parameters(files)
    print(f"functions with more than 8 parameters (tests left out): {len(crowded)}")
    for count, where in crowded[: args.top]:
        print(f"  {count:4d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
