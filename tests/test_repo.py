"""The repository's promises about itself: README commands, CI, Space front matter, pins, no import cycles."""

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one_verbatim():
    app, tests = _readme_commands()[:2]
    assert app.endswith("python app.py") and "requirements.txt" in app
    assert "requirements-dev.txt" in tests and "pytest" in tests
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == tests


def test_space_front_matter_matches_the_pinned_gradio():
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front == yaml.safe_load((ROOT / "docs/space_front_matter.yaml").read_text().split("---\n")[1])
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert front["sdk"] == "gradio" and front["sdk_version"] == pins["gradio"]
    assert front["app_file"] == "app.py" and (ROOT / front["app_file"]).is_file()
    assert pins["torch"] == "2.13.0"  # an unpinned torch pulls the CUDA build (GBs)


def _module_level_imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """The ctxir modules ``module`` imports when it is imported: imports inside functions (run later, on call) and
    under ``if TYPE_CHECKING:`` (never run) are left out."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
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
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)
            return
        for name in names:
            while name and name not in modules:  # `from ctxir.app import figures` names a module; `import x.y` too
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):  # a parent package is always loaded
                found.add(name)
                break

    visit(ast.parse(path.read_text()))
    return found


def import_cycles(root: Path) -> list[list[str]]:
    """Every cycle of module-level imports between the modules of the package at ``root`` (one per cycle)."""
    paths = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    graph = {m: _module_level_imports(p, m, set(paths)) for m, p in paths.items()}
    cycles, done = [], set()

    def walk(module: str, stack: list[str]) -> None:
        if module in stack:
            cycles.append(stack[stack.index(module):])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            walk(target, [*stack, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])
    return cycles


def test_no_import_cycles_between_ctxir_modules(tmp_path):
    assert import_cycles(ROOT / "ctxir") == []
    # The check itself finds a cycle, through `from package import module` and relative imports alike, and skips
    # imports inside functions.
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub/__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub/b.py").write_text("from .. import c\n")
    (pkg / "c.py").write_text("import pkg.a\n\ndef late():\n    from pkg import d\n")
    (pkg / "d.py").write_text("from pkg import c\n")
    assert import_cycles(pkg) == [["pkg.a", "pkg.sub.b", "pkg.c"]]


def test_the_app_package_docstring_lists_every_module():
    import ctxir.app

    listed = set(re.findall(r"^    (\w+)\.py ", ctxir.app.__doc__, flags=re.M))
    assert listed == {p.stem for p in (ROOT / "ctxir/app").glob("*.py")} - {"__init__"}


def test_code_stats_counts_named_parameters_and_long_functions():
    """scripts/code_stats.py, the clean-up record's numbers: named parameters (not self, *args, **kwargs) and
    function lengths, counted from the source text."""
    import ast

    from scripts import code_stats

    source = "def f(self, a, b=1, *rest, c, **more):\n    pass\n\n\ndef g(a, b, c, d, e, f, g, h, i):\n    return 1\n"
    assert code_stats.parameters(ast.parse(source).body[0]) == 3
    assert code_stats.many_parameters({"pkg/m.py": source, "tests/t.py": source}) == [(9, "pkg/m.py:g")]
    assert code_stats.functions({"m.py": source}) == [(2, "m.py:g"), (2, "m.py:f")]
