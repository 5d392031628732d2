"""`python app.py` stopped by SIGTERM (a container stop, a process manager) removes its output folder."""

from __future__ import annotations

import os
import signal


def test_sigterm_removes_the_output_folder(tmp_path, minilm_path, app_process):
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "CTXIR_CROSS_ENCODER": "none",
        "CTXIR_CLS_LR": "none",
        "CTXIR_TORCH_THREADS": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    proc = app_process(env)
    folders = list(tmp_path.glob("ctxir-app-*"))
    assert len(folders) == 1 and folders[0].is_dir()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not folders[0].exists()
