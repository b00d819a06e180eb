"""JupyterLab and headless Chromium for the course's browser checks: the widget test and screenshots.

``running_lab`` serves a folder on loopback with a token (no news, no update checks) and yields the URL
of one notebook in it; ``chromium_page`` opens a headless page in Debian's Chromium through Playwright;
``run_all`` starts every cell; ``chat_widget`` waits for them and finds the widget.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..config import project_root

CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


def chromium_path() -> str | None:
    """Debian's Chromium (``apt-get install chromium``), or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_lab(folder: Path, notebook: str, *, start_timeout: float = 120.0) -> Iterator[str]:
    """JupyterLab serving ``folder`` with the offline model; yields the URL of ``notebook`` in it.

    Raises RuntimeError with the end of JupyterLab's log when it does not answer in ``start_timeout`` s.
    """
    settings = folder / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), "memorykit-lab"
    code = Path(__file__).resolve().parents[2]   # this checkout, so the kernel imports the same memorykit
    env = dict(os.environ, MEMORYKIT_HOME=str(project_root()), MEMORYKIT_LLM="offline", PYTHONPATH=str(code),
               JUPYTERLAB_SETTINGS_DIR=str(folder / "lab-settings"))
    log_path = folder / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={folder}"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("JupyterLab did not start: " + log_path.read_text()[-2000:])
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/lab/tree/{notebook}?token={token}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def chromium_page(width: int = 1500, height: int = 1000) -> Iterator[Any]:
    """A Playwright page in headless Chromium; RuntimeError when Chromium is not installed."""
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    if chromium is None:
        raise RuntimeError("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def run_all(page, url: str, *, timeout_ms: int = 180_000) -> None:
    """Open ``url`` in JupyterLab once its kernel is idle and start Run All Cells (``chat_widget`` waits for the end)."""
    page.goto(url)
    page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=timeout_ms)
    page.click("#jp-MainMenu >> text=Run")
    page.click("text=Run All Cells")


def chat_widget(page, placeholder: str, *, timeout_ms: int = 300_000):
    """The last chat widget on the page once all cells ran: (its input box, the widget's outer box)."""
    box = page.locator(f"input[placeholder='{placeholder}']").last
    box.wait_for(timeout=timeout_ms)
    page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=timeout_ms)
    box.scroll_into_view_if_needed()
    return box, box.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][last()]")
