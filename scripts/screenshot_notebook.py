"""A picture of a saved notebook as a static viewer shows it (no kernel): HTML by nbconvert, PNG by Chromium.

    python scripts/screenshot_notebook.py notebooks/08_memory_agent.ipynb docs/screenshots/08.png
    python scripts/screenshot_notebook.py notebooks/02_summarization.ipynb out.png --figure 0

Reviewers use it to look at what a reader on GitHub sees: saved figures, outputs, no widgets running.
The HTML is written next to the notebook (then removed), so relative image links resolve as on GitHub.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path


def screenshot(notebook: Path, png: Path, *, height: int = 2600, figure: int | None = None) -> Path:
    """The top ``height`` pixels of the rendered notebook, or that much around its ``figure``-th saved image."""
    from playwright.sync_api import sync_playwright

    html = notebook.with_name(f"_{notebook.stem}.screenshot.html")
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(notebook),
                    "--output", html.stem], check=True, capture_output=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or shutil.which("chromium-browser"),
                                        headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": height})
            page.goto(html.resolve().as_uri())
            top = 0.0
            if figure is not None:
                box = page.locator(".jp-OutputArea-output img").nth(figure).bounding_box()
                top = max(0.0, box["y"] - height / 2)
            png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(png), full_page=True, clip={"x": 0, "y": top, "width": 1100, "height": height})
            browser.close()
    finally:
        html.unlink(missing_ok=True)
    return png


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--height", type=int, default=2600)
    ap.add_argument("--figure", type=int, default=None, help="centre on this saved image (0 = the first)")
    args = ap.parse_args()
    print(screenshot(args.notebook, args.png, height=args.height, figure=args.figure))
