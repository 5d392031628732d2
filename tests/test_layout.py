"""The package layout (issue #20 §2): modules grouped by the data flow, one way, and every old module path kept.

data → encoders → retrieval → rerank → explain → evaluation → publish → app; ``types``, ``names``, ``checks``,
``files`` and ``cli`` are the shared core every layer uses.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctxir"

# Old module path → the module that holds its code now (ctxir._moved.MOVED). Imported by the old path, these give
# that same module.
MOVED = {
    "ctxir.rerank_heads": "ctxir.encoders.heads", "ctxir.models": "ctxir.encoders.models",
    "ctxir.pooling": "ctxir.encoders.pooling", "ctxir.onnx_backend": "ctxir.encoders.onnx_backend",
    "ctxir.internals": "ctxir.encoders.internals", "ctxir.fusion": "ctxir.retrieval.fusion",
    "ctxir.ann": "ctxir.retrieval.ann", "ctxir.engines": "ctxir.retrieval.engines",
    "ctxir.rerankers": "ctxir.rerank.registry", "ctxir.pipeline": "ctxir.rerank.pipeline",
    "ctxir.evaluate": "ctxir.evaluation.evaluate", "ctxir.tuning": "ctxir.evaluation.tuning",
    "ctxir.compare": "ctxir.evaluation.compare", "ctxir.report": "ctxir.evaluation.report",
    "ctxir.cards": "ctxir.publish.cards", "ctxir.hub": "ctxir.publish.hub",
}
# Old modules whose name a subpackage took: the package gives every name the old module had.
BECAME_PACKAGES = {
    "ctxir.data": "ctxir.data.loaders", "ctxir.encoders": "ctxir.encoders.bi_encoder",
    "ctxir.retrieval": "ctxir.retrieval.retrievers", "ctxir.rerank": "ctxir.rerank.rankers",
    "ctxir.evaluation": "ctxir.evaluation.metrics", "ctxir.explain": "ctxir.explain.attributions",
}
# The layers in flow order: a module imports (at module level) only from its own layer or an earlier one.
LAYERS = ["core", "data", "encoders", "retrieval", "rerank", "explain", "evaluation", "publish", "viz", "classify",
          "app"]
# Imports inside functions that point against the flow, each run only on call (checked to be exactly these):
# the re-ranker registry names each kind's explanation function.
LATE_BACKWARD = {("ctxir.rerank.registry", "ctxir.explain.attributions")}


def _layer(module: str) -> str:
    part = module.split(".")[1] if module.count(".") else "core"
    return part if part in LAYERS else "core"  # top-level modules: the shared core, bench and the old-path files


def _imports(path: Path, module: str, modules: set[str], late: bool) -> set[str]:
    """The ctxir modules ``module`` imports at module level (``late``: inside functions as well)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not late and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)
            return
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)

    visit(ast.parse(path.read_text()))
    return found


def _graph(late: bool) -> dict[str, set[str]]:
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in PACKAGE.rglob("*.py")}
    return {m: _imports(p, m, set(paths), late) for m, p in paths.items()}


def _against_the_flow(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, t) for m, targets in graph.items() for t in targets
            if _layer(m) != "core" and LAYERS.index(_layer(t)) > LAYERS.index(_layer(m))}


def test_the_subpackages_import_one_way_along_the_flow():
    graph = _graph(late=False)
    assert _against_the_flow(graph) == set()
    # Hence no cycle between subpackages; the core imports no subpackage at module level either (its old-path
    # files reach theirs on import, through importlib, not an import statement).
    core = {m: t for m, t in graph.items() if _layer(m) == "core" and m not in ("ctxir", "ctxir.bench")}
    assert {(m, x) for m, t in core.items() for x in t if _layer(x) != "core"} == set()
    # Late imports (inside functions) follow the flow too, but for the one listed.
    assert _against_the_flow(_graph(late=True)) == LATE_BACKWARD


def _fake_ctxir(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    """A throw-away ``ctxir`` package of ``files`` ({path: source}; every folder gets an empty ``__init__.py``) that
    the import checks read instead of the real one."""
    pkg = tmp_path / "ctxir"
    for name, source in {"__init__.py": "", **files}.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(tmp_path).parents[:-1]:
            (tmp_path / folder / "__init__.py").touch()
        path.write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)


def test_the_check_sees_an_import_against_the_flow(tmp_path, monkeypatch):
    _fake_ctxir(tmp_path, monkeypatch, {
        "data/loaders.py": "from ctxir.rerank.rankers import Reranker\n",
        "rerank/rankers.py": "from ctxir.data import loaders\n\ndef late():\n    import ctxir.data\n"})
    assert _against_the_flow(_graph(late=False)) == {("ctxir.data.loaders", "ctxir.rerank.rankers")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each import cycle of ``graph`` (its strongly connected parts of 2 or more), sorted."""
    order, low, stack, found = {}, {}, [], []

    def visit(module: str) -> None:  # Tarjan's algorithm
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            part = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def test_no_import_cycle_even_through_imports_inside_functions():
    # A late import still ties the two modules: e.g. ctxir.encoders.models loaded ctxir.encoders.heads' names on
    # call while heads imported models, and the re-ranker registry imported StageFusion from the pipeline that
    # imports the registry. Each such pair now runs one way; only the listed back-edge stays.
    graph = _graph(late=True)
    for module, target in LATE_BACKWARD:
        graph[module].discard(target)
    assert _cycles(graph) == []
    assert "ctxir.encoders.heads" not in graph["ctxir.encoders.models"]
    assert "ctxir.rerank.pipeline" not in graph["ctxir.rerank.registry"]


def test_the_cycle_check_sees_a_cycle_through_a_late_import_inside_one_subpackage(tmp_path, monkeypatch):
    _fake_ctxir(tmp_path, monkeypatch, {
        "encoders/heads.py": "from ctxir.encoders.models import resolve_model\n",
        "encoders/models.py": "def load():\n    from ctxir.encoders.heads import apply_top_layers\n"})
    assert _cycles(_graph(late=False)) == []
    assert _cycles(_graph(late=True)) == [["ctxir.encoders.heads", "ctxir.encoders.models"]]


def test_the_cycle_check_follows_relative_imports_and_from_package_import_module(tmp_path, monkeypatch):
    _fake_ctxir(tmp_path, monkeypatch, {
        "a.py": "from ctxir.sub import b\n", "sub/b.py": "from .. import c\n",
        "c.py": "import ctxir.a\n\ndef late():\n    from ctxir import d\n", "d.py": "from ctxir import c\n"})
    assert _cycles(_graph(late=False)) == [["ctxir.a", "ctxir.c", "ctxir.sub.b"]]
    assert _cycles(_graph(late=True)) == [["ctxir.a", "ctxir.c", "ctxir.d", "ctxir.sub.b"]]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_gives_the_moved_module_and_warns(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)  # imported before (by another test or ctxir itself): import it afresh
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(f"import {old}", __file__, "exec"), {})  # an import statement, as in a user's file
    assert sys.modules[old] is new and importlib.import_module(old) is new
    assert getattr(importlib.import_module("ctxir"), old.rpartition(".")[2]) is new  # `ctxir.models` too
    ours = [w for w in caught if w.category is DeprecationWarning and str(w.message).startswith(f"{old} moved")]
    if old == "ctxir.rerank_heads":  # named by saved model folders' modules.json: kept without a warning
        assert ours == []
    else:
        assert [str(w.message).split(";")[0] for w in ours] == [f"{old} moved to {MOVED[old]}"]
        assert ours[0].filename == __file__  # it points at the line that imported the old path


def test_moved_lists_every_old_path_and_only_the_commands_stay_files():
    from ctxir import _moved

    assert _moved.MOVED == MOVED
    kept = {f"ctxir.{p.stem}" for p in PACKAGE.glob("*.py") if "alias(__name__" in p.read_text()}
    assert kept == {"ctxir.evaluate", "ctxir.report", "ctxir.hub"}  # what `python -m` runs must be a file
    assert not any((PACKAGE / f"{old.split('.')[1]}.py").exists() for old in set(MOVED) - kept)


@pytest.mark.parametrize("old", sorted(BECAME_PACKAGES))
def test_a_module_that_became_a_package_still_gives_all_its_names(old):
    package = importlib.import_module(old)
    module = importlib.import_module(BECAME_PACKAGES[old])
    names = [n for n in vars(module) if not n.startswith("__")]
    assert names
    for name in names:  # public and private, the module's own and what it imported: the same objects
        assert getattr(package, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        package.no_such_name  # noqa: B018


def test_every_name_ctxir_exports_is_where_the_old_modules_had_it():
    from ctxir.rerank_heads import SegmentCosineHead as old_head

    import ctxir
    from ctxir.encoders.heads import SegmentCosineHead
    from ctxir.rerank.rankers import CrossEncoderReranker

    for name in ctxir.__all__:
        assert getattr(ctxir, name) is not None, name
    assert ctxir.CrossEncoderReranker is CrossEncoderReranker and old_head is SegmentCosineHead
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from ctxir.pipeline import Pipeline
        from ctxir.rerankers import load_reranker
    assert Pipeline is ctxir.Pipeline and load_reranker is ctxir.load_reranker


@pytest.mark.parametrize("command", ["ctxir.evaluate", "ctxir.report", "ctxir.hub push", "ctxir.classify"])
def test_the_documented_python_m_commands_still_run(command):
    done = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m", *command.split(),
                           "--help"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout and " moved to ctxir." not in done.stderr  # the documented path: no warning


def test_the_readme_module_table_names_every_module_where_it_is():
    import re

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| module | owns |"):]
    table = table[:table.index("\n\n")]
    named = {p for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.M) for p in re.findall(r"`(ctxir/[\w/.]+)`", cell)}
    assert named and all((ROOT / p).exists() for p in named), sorted(p for p in named if not (ROOT / p).exists())
    # Every module with code of its own, outside the packages listed whole (app/, classify/, viz/): not the
    # packages' __init__ files nor the old-path files that only alias a moved module.
    # ctxir/bench.py is left out: the benchmarks are moving out of the library to benchmarks/, which the table names.
    whole = {p for p in named if p.endswith("/")}
    modules = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
               if p.name not in ("__init__.py", "_moved.py", "bench.py") and "alias(__name__" not in p.read_text()
               and not any(str(p.relative_to(ROOT)).startswith(w) for w in whole)}
    assert modules - named == set()
