"""Issue #13, files: the running app serves no file outside the folders it owns, caps uploads with a message, and
names an uploaded file by its own name in errors, never by the temporary path gradio stored it under."""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served(app_state, serve):
    """(url, demo) of the app on loopback, launched as app.py does (its output folder is the one allowed path)."""
    import app

    built = app.build_app(app_state)
    with serve(built) as url:
        yield url.rstrip("/"), built


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_no_file_outside_the_apps_folders_is_served(served, minilm_path, tmp_path):
    url, built = served
    inside = Path(built.outputs.root) / "probe.txt"
    inside.write_text("served")
    assert (
        status(f"{url}/gradio_api/file={inside}") == 200
    )  # the control: the route works for the app's own files
    secret = tmp_path / "secret.txt"
    secret.write_text("not for visitors")
    outside = [
        Path("/etc/passwd"),
        ROOT / "app.py",
        Path(minilm_path) / "model.safetensors",
        secret,
        Path(built.outputs.root) / ".." / secret.name,  # climbing out of the allowed folder
        Path.home() / ".cache" / "ctxir",
    ]
    for path in outside:
        for route in (
            f"/gradio_api/file={path}",
            f"/gradio_api/file={urllib.parse.quote(str(path), safe='')}",
            f"/file={path}",
        ):
            assert status(url + route) in (403, 404), route


def test_an_upload_over_the_cap_is_refused_by_its_own_name(app_state, tmp_path):
    from ctxir.app.search_tab import upload_corpus
    from ctxir.types import CtxirError

    big = tmp_path / "my big notes.txt"
    big.write_text("a line of text about otters\n" * 2000)  # ≈ 56 kB
    small = dataclasses.replace(app_state.config, max_upload_mb=0.01)
    original, app_state.config = app_state.config, small
    try:
        with pytest.raises(
            CtxirError,
            match=r"^my big notes\.txt is 0\.1 MB; this app accepts corpus files up to "
            r"0\.01 MB: upload a smaller sample",
        ):
            upload_corpus(app_state, big, owner="size-test")
    finally:
        app_state.config = original


def test_upload_errors_over_http_name_the_file_not_its_temporary_path(served, tmp_path):
    from gradio_client import handle_file

    from tests.conftest import api_client

    url, _ = served
    bad = tmp_path / "Lab notes (draft).txt"
    bad.write_bytes(b"caf\xe9 au lait\n")  # Latin-1, not UTF-8
    with pytest.raises(Exception) as info:
        api_client(url + "/").predict(handle_file(str(bad)), api_name="/upload_corpus")
    message = str(info.value)
    assert "Lab notes (draft).txt" in message and "not UTF-8" in message
    assert "/tmp" not in message and "gradio" not in message.lower(), message
    assert "/Lab notes (draft).txt" not in message  # not the hash-named folder gradio stored it in
