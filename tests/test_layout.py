"""The package layout: modules grouped by the data flow, one way; one command, ``ctxir``; no old module path.

data → encoders → retrieval → rerank → explain → evaluation → publish → app; ``types``, ``names``, ``checks``,
``files`` and ``cli`` are the shared core every layer uses.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctxir"

# Paths modules had before they moved (into the subpackages, or split by concern): nothing may answer for them.
OLD_PATHS = (
    "ctxir.rerank_heads",
    "ctxir.models",
    "ctxir.pooling",
    "ctxir.onnx_backend",
    "ctxir.internals",
    "ctxir.fusion",
    "ctxir.ann",
    "ctxir.engines",
    "ctxir.retrieval.engines",
    "ctxir.rerankers",
    "ctxir.pipeline",
    "ctxir.evaluate",
    "ctxir.tuning",
    "ctxir.compare",
    "ctxir.report",
    "ctxir.cards",
    "ctxir.hub",
    "ctxir.bench",
    "ctxir.explain.attributions",
    "ctxir.data.loaders",
    "ctxir._moved",
)
# The layers in flow order: a module imports (at module level) only from its own layer or an earlier one. viz draws
# numbers and imports only the core, so it comes before evaluation, whose ``ctxir compare --plot`` draws with it.
LAYERS = [
    "core",
    "data",
    "encoders",
    "retrieval",
    "rerank",
    "adapt",
    "explain",
    "viz",
    "evaluation",
    "publish",
    "classify",
    "app",
]
# Imports inside functions that point against the flow, each run only on call (checked to be exactly these): none
# since each re-ranker kind's explainer is registered on the explain side (ctxir.explain.rerankers.EXPLAINERS).
LATE_BACKWARD: set[tuple[str, str]] = set()


def _layer(module: str) -> str:
    part = module.split(".")[1] if module.count(".") else "core"
    return part if part in LAYERS else "core"  # top-level modules: the shared core


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
    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    return {m: _imports(p, m, set(paths), late) for m, p in paths.items()}


def _against_the_flow(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if _layer(m) != "core" and LAYERS.index(_layer(t)) > LAYERS.index(_layer(m))
    }


def test_the_subpackages_import_one_way_along_the_flow():
    graph = _graph(late=False)
    assert _against_the_flow(graph) == set()
    # Hence no cycle between subpackages; the core imports no subpackage at module level either (the ``ctxir``
    # command imports the one it runs through importlib, on use).
    core = {m: t for m, t in graph.items() if _layer(m) == "core" and m not in ("ctxir", "ctxir.__main__")}
    assert {(m, x) for m, t in core.items() for x in t if _layer(x) != "core"} == set()
    # Late imports (inside functions) follow the flow too.
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
    _fake_ctxir(
        tmp_path,
        monkeypatch,
        {
            "data/beir.py": "from ctxir.rerank.rankers import Reranker\n",
            "rerank/rankers.py": "from ctxir.data import beir\n\ndef late():\n    import ctxir.data\n",
        },
    )
    assert _against_the_flow(_graph(late=False)) == {("ctxir.data.beir", "ctxir.rerank.rankers")}


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
            part = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def test_no_import_cycle_even_through_imports_inside_functions():
    # A late import still ties the two modules: e.g. ctxir.encoders.models loaded ctxir.encoders.heads' names on
    # call while heads imported models, and the re-ranker registry imported StageFusion from the pipeline that
    # imports the registry, and the registry imported each kind's explainer. Each such pair now runs one way.
    graph = _graph(late=True)
    for module, target in LATE_BACKWARD:
        graph[module].discard(target)
    assert _cycles(graph) == []
    assert "ctxir.encoders.heads" not in graph["ctxir.encoders.models"]
    assert "ctxir.rerank.pipeline" not in graph["ctxir.rerank.registry"]
    assert not any(target.startswith("ctxir.explain") for target in graph["ctxir.rerank.registry"])


def test_the_cycle_check_sees_a_cycle_through_a_late_import_inside_one_subpackage(tmp_path, monkeypatch):
    _fake_ctxir(
        tmp_path,
        monkeypatch,
        {
            "encoders/heads.py": "from ctxir.encoders.models import resolve_model\n",
            "encoders/models.py": "def load():\n    from ctxir.encoders.heads import apply_top_layers\n",
        },
    )
    assert _cycles(_graph(late=False)) == []
    assert _cycles(_graph(late=True)) == [["ctxir.encoders.heads", "ctxir.encoders.models"]]


def test_the_cycle_check_follows_relative_imports_and_from_package_import_module(tmp_path, monkeypatch):
    _fake_ctxir(
        tmp_path,
        monkeypatch,
        {
            "a.py": "from ctxir.sub import b\n",
            "sub/b.py": "from .. import c\n",
            "c.py": "import ctxir.a\n\ndef late():\n    from ctxir import d\n",
            "d.py": "from ctxir import c\n",
        },
    )
    assert _cycles(_graph(late=False)) == [["ctxir.a", "ctxir.c", "ctxir.sub.b"]]
    assert _cycles(_graph(late=True)) == [["ctxir.a", "ctxir.c", "ctxir.d", "ctxir.sub.b"]]


@pytest.mark.parametrize("old", OLD_PATHS)
def test_no_old_module_path_imports(old):
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert not any(
        type(f).__module__.startswith("ctxir") for f in sys.meta_path
    )  # no finder answers for old paths


def test_every_name_ctxir_exports_is_importable_from_ctxir():
    import ctxir
    from ctxir.rerank.pipeline import Pipeline
    from ctxir.rerank.rankers import CrossEncoderReranker
    from ctxir.rerank.registry import load_reranker

    for name in ctxir.__all__:
        assert getattr(ctxir, name) is not None, name
    assert ctxir.CrossEncoderReranker is CrossEncoderReranker and ctxir.Pipeline is Pipeline
    assert ctxir.load_reranker is load_reranker


def test_ctxir_help_lists_every_subcommand_from_any_folder(tmp_path):
    """The console script (installed by the README's set-up) and ``python -m ctxir``, run outside the checkout."""
    import shutil

    from ctxir.cli import COMMANDS

    script = shutil.which("ctxir")
    assert script, (
        "no `ctxir` on PATH: install the checkout (pip install -r requirements-dev.txt installs it, -e .)"
    )
    for command in ([script, "--help"], [sys.executable, "-m", "ctxir", "--help"]):
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert all(f"  {name} " in done.stdout for name in COMMANDS), done.stdout
    done = subprocess.run([script, "evaluat"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "unknown command 'evaluat'" in done.stderr


@pytest.mark.parametrize("command", ["evaluate", "report", "hub push", "classify", "compare"])
def test_every_subcommand_shows_its_flags(command, monkeypatch, capsys):
    """In process (the subprocess test above covers the installed script): each subcommand's own --help."""
    from ctxir.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxir"])  # main names the command in argv[0] for argparse's usage line
    with pytest.raises(SystemExit) as done:
        main([*command.split(), "--help"])
    assert done.value.code == 0
    assert f"usage: ctxir {command.split()[0]}" in capsys.readouterr().out


# Where a re-ranker kind's or a published model type's name may be spelled as a string: ctxir.kinds spells each once
# and the registries key their entries by those names; a registry's words for a kind that happen to match its name
# (a label, a Hub tag) are registry knowledge too.
KIND_NAME_HOMES = {
    "ctxir/kinds.py",
    "ctxir/rerank/registry.py",
    "ctxir/publish/model_types.py",
    "ctxir/retrieval/registry.py",
}
# A string that equals a kind's name without naming the kind: (file, string) → why.
NOT_A_KIND_NAME = {
    ("scripts/results_training.py", "cls-lr"): "run B's output folder, outputs/cls-lr",
}


def _kind_name_literals(root: Path, names: set[str]) -> list[str]:
    """``file:line 'name'`` for each string constant equal to one of ``names`` in the Python files of ctxir/,
    training/, scripts/ and app.py under ``root``, outside ``KIND_NAME_HOMES``; docstrings are prose, not code."""
    files = [
        root / "app.py",
        *(p for d in ("ctxir", "training", "scripts") for p in (root / d).rglob("*.py")),
    ]
    found = []
    for path in files:
        if not path.is_file():
            continue
        where = path.relative_to(root).as_posix()
        if where in KIND_NAME_HOMES:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        found += [
            f"{where}:{node.lineno} {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and node.value in names
            and id(node) not in docstrings
            and (where, node.value) not in NOT_A_KIND_NAME
        ]
    return sorted(found)


def _kind_names() -> set[str]:
    from ctxir import kinds
    from ctxir.publish.model_types import MODEL_TYPES
    from ctxir.rerank.registry import CLS_LR, CROSS_ENCODER, STS_CROSS_ENCODER

    names = {kind.name for kind in (CROSS_ENCODER, CLS_LR, STS_CROSS_ENCODER)} | set(MODEL_TYPES)
    assert names == {kinds.CROSS_ENCODER, kinds.CLS_LR, kinds.STS_CROSS_ENCODER, kinds.BI_ENCODER}
    return names


def test_no_kind_name_literal_outside_the_registries():
    """Issue #33: the registries are the only place that knows a re-ranker kind's or a model type's name; code
    elsewhere reads it from ``ctxir.kinds`` or a registry entry (tests may spell it: they check the strings)."""
    assert _kind_name_literals(ROOT, _kind_names()) == []


def test_the_kind_name_check_sees_a_literal_and_lets_docstrings_be(tmp_path):
    (tmp_path / "ctxir" / "rerank").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "ctxir" / "rerank" / "rankers.py").write_text(
        'class CrossEncoderReranker:\n    """Its name is "cross-encoder"."""\n\n    name = "cross-encoder"\n'
    )
    (tmp_path / "ctxir" / "rerank" / "registry.py").write_text('CROSS_ENCODER = "cross-encoder"\n')
    (tmp_path / "scripts" / "results_training.py").write_text('RUNS = [("run B", "cls-lr")]\n')
    (tmp_path / "app.py").write_text(
        '"""Explains with the "bi-encoder"."""\nMODEL = {"model": "bi-encoder"}\n'
    )
    assert _kind_name_literals(tmp_path, _kind_names()) == [
        "app.py:2 'bi-encoder'",
        "ctxir/rerank/rankers.py:4 'cross-encoder'",
    ]
