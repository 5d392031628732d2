"""The README's screenshot: ``python app.py`` on a free port, one re-ranked search drawn in headless Chromium
(Debian's /usr/bin/chromium and Playwright's Python package).

    python scripts/screenshot.py --output shot.png --query "where do otters live along the river bank"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.app import start_app, stop_app  # noqa: E402
from ctxir.kinds import CROSS_ENCODER  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]


def shoot(url: str, output: Path, query: str) -> None:
    """Search ``query`` re-ranked by the cross-encoder and save the page's first screen as a PNG."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1500}, device_scale_factor=1)
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
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"error: no chromium at {CHROMIUM}: apt-get install -y chromium", file=sys.stderr)
        return 2
    process, url, _ = start_app({"TOKENIZERS_PARALLELISM": "false"}, 300)
    try:
        shoot(url, Path(args.output), args.query)
    finally:
        stop_app(process)
    print(f"wrote {args.output} ({Path(args.output).stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
