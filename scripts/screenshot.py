"""The README's screenshot: ``python app.py`` served on a free port, one re-ranked search drawn in headless Chromium.

    python scripts/screenshot.py                      # writes docs/app.png
    python scripts/screenshot.py --output shot.png --query "where do otters live along the river bank"

Needs Debian's chromium at /usr/bin/chromium and Playwright's Python package (the browser tests' setup).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.kinds import CROSS_ENCODER  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, timeout: float) -> subprocess.Popen:
    """``python app.py`` on ``port``, once it accepts connections."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"error: python app.py did not start within {timeout:.0f} s (exit code {proc.poll()})")


def shoot(url: str, output: Path, query: str, width: int, height: int) -> None:
    """Search ``query`` re-ranked by the cross-encoder and save the page's first screen as a PNG."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            page.goto(url)
            page.wait_for_selector("#search-button", timeout=120_000)
            page.fill("#search-query textarea", query)
            page.locator("#search-reranker").get_by_text(CROSS_ENCODER).click()
            page.click("#search-button")
            page.wait_for_function(
                "() => (document.querySelector('#search-summary')?.innerText || '').includes('results')",
                timeout=120_000,
            )
            page.wait_for_timeout(500)  # let the table settle
            page.screenshot(path=str(output), full_page=False)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(ROOT / "docs" / "app.png"), help="the PNG to write")
    parser.add_argument("--query", default="how do bats find insects at night", help="the search shown")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    parser.add_argument("--timeout", type=float, default=300, help="seconds the app may take to start")
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"error: no chromium at {CHROMIUM}: apt-get install -y chromium", file=sys.stderr)
        return 2
    port = free_port()
    proc = start_app(port, args.timeout)
    try:
        shoot(f"http://127.0.0.1:{port}/", Path(args.output), args.query, args.width, args.height)
    finally:
        proc.kill()
        proc.wait()
    print(f"wrote {args.output} ({Path(args.output).stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
