"""`python app.py` stopped by SIGTERM (a container stop, a process manager) removes its output folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_removes_the_output_folder(tmp_path, minilm_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "CTXIR_CROSS_ENCODER": "none",
           "CTXIR_CLS_LR": "none", "CTXIR_TORCH_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            pytest.fail(f"the app did not start: {proc.stdout.read() if proc.poll() is not None else 'timeout'}")
        folders = list(tmp_path.glob("ctxir-app-*"))
        assert len(folders) == 1 and folders[0].is_dir()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert not folders[0].exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
