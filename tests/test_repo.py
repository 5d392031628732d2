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
    assert tests.index("ruff check .") < tests.index("ruff format --check .") < tests.index("pytest")
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == tests


def test_space_front_matter_matches_the_pinned_gradio():
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front == yaml.safe_load((ROOT / "docs/space_front_matter.yaml").read_text().split("---\n")[1])
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert front["sdk"] == "gradio" and front["sdk_version"] == pins["gradio"]
    assert front["app_file"] == "app.py" and (ROOT / front["app_file"]).is_file()
    assert pins["torch"] == "2.13.0"  # an unpinned torch pulls the CUDA build (GBs)


def _imports_within(folders: tuple[str, ...]) -> dict[str, set[str]]:
    """{module: the modules of ``folders`` it imports}, at module level or inside functions (TYPE_CHECKING too)."""
    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for folder in folders
        for p in (ROOT / folder).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in paths:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    found.add(name)
        graph[module] = found
    return graph


def _in_a_cycle(graph: dict[str, set[str]]) -> set[str]:
    """The modules from which an import path leads back to themselves."""

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        return seen

    return {module for module in graph if module in reach(module)}


def test_no_two_scripts_or_benchmarks_import_each_other_directly_or_in_a_loop():
    """ctxir's own modules are checked by tests/test_layout.py; the scripts and benchmarks are held here."""
    assert _in_a_cycle(_imports_within(("scripts", "benchmarks"))) == set()
    assert _in_a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {"a", "b", "c"}


def test_no_ctxir_module_imports_the_package_root():
    """A module imports what it needs from the submodule that defines it: ``ctxir/__init__.py`` imports the
    submodules, so a submodule importing the root is an arrow back up."""
    back = set()
    for path in (ROOT / "ctxir").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "ctxir" for a in node.names):
                back.add(path.relative_to(ROOT).as_posix())
            if isinstance(node, ast.ImportFrom) and node.module == "ctxir" and not node.level:
                back |= {
                    f"{path.relative_to(ROOT).as_posix()}: {a.name}"
                    for a in node.names
                    if not (ROOT / "ctxir" / a.name).with_suffix(".py").is_file()
                    and not (ROOT / "ctxir" / a.name / "__init__.py").is_file()
                }
    assert back == set()


def test_ci_turns_missing_data_or_browser_into_a_failure_not_a_skip(tmp_path):
    """.ci/run always sets CTXIR_REQUIRE=data,browser (whatever its machine has); with it, a missing data folder
    stops the run, named (a missing chromium likewise: tests/conftest.py)."""
    import os
    import subprocess
    import sys

    ci = (ROOT / ".ci/run").read_text().splitlines()
    assert "export CTXIR_REQUIRE=data,browser" in ci and not any("CTXIR_REQUIRE=$" in line for line in ci)
    env = {**os.environ, "CTXIR_REQUIRE": "data", "CTXIR_TEST_DATA": str(tmp_path / "absent")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_checks.py"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4 and "CTXIR_REQUIRE=data but the benchmark data is not at" in done.stderr
    done = subprocess.run(
        command, cwd=ROOT, env={**env, "CTXIR_REQUIRE": "gpu"}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 4 and "CTXIR_REQUIRE names 'gpu': use data, browser" in done.stderr
