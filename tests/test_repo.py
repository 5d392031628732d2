"""The repository's promises about itself: README commands, CI, Space front matter, pins."""

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
