"""A picture of a saved notebook as a static viewer shows it (no kernel): HTML by nbconvert, PNG by Chromium.

    python scripts/screenshot_notebook.py notebooks/08_memory_agent.ipynb docs/screenshots/08.png

Reviewers use it to look at what a reader on GitHub sees: saved figures, outputs, no widgets running.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def screenshot(notebook: Path, png: Path, width: int = 1100, height: int | None = None) -> Path:
    """Render ``notebook`` to HTML (nbconvert's classic lab template) and save a full-page PNG of it."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(notebook),
                        "--output-dir", tmp], check=True, capture_output=True)
        html = Path(tmp) / (notebook.stem + ".html")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": width, "height": height or 900})
            page.goto(html.as_uri())
            png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(png), full_page=height is None)
            browser.close()
    return png


if __name__ == "__main__":
    print(screenshot(Path(sys.argv[1]), Path(sys.argv[2]), height=int(sys.argv[3]) if len(sys.argv) > 3 else None))
