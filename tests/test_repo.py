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


def test_the_app_package_docstring_lists_every_module():
    import ctxir.app

    listed = set(re.findall(r"^    (\w+)\.py ", ctxir.app.__doc__, flags=re.M))
    assert listed == {p.stem for p in (ROOT / "ctxir/app").glob("*.py")} - {"__init__"}


def test_code_stats_counts_named_parameters_and_long_functions():
    """scripts/code_stats.py, the clean-up record's numbers: named parameters (not self, *args, **kwargs) and
    function lengths, counted from the source text."""

    from scripts import code_stats

    source = "def f(self, a, b=1, *rest, c, **more):\n    pass\n\n\ndef g(a, b, c, d, e, f, g, h, i):\n    return 1\n"
    assert code_stats.parameters(ast.parse(source).body[0]) == 3
    assert code_stats.many_parameters({"pkg/m.py": source, "tests/t.py": source}) == [(9, "pkg/m.py:g")]
    assert code_stats.functions({"m.py": source}) == [(2, "m.py:g"), (2, "m.py:f")]


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
