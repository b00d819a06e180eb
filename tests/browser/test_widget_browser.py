"""The chat widget in a real browser: JupyterLab + Debian's Chromium, driven by Playwright.

Opens a copy of notebook 08, runs all cells, types into the widget, presses Send, checks
the reply and the memory panel, clicks 👍, and saves a screenshot. Skipped (with the
reason) when Chromium or Playwright is missing; `.ci/run` installs Chromium so CI runs it.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "08_memory_agent.ipynb"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on loopback with a token, serving a copy of notebook 08."""
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), "memorykit-test"
    env = dict(os.environ, MEMORYKIT_HOME=str(ROOT), MEMORYKIT_LLM="offline",
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"))
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={tmp_path}"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("JupyterLab did not start: " + (tmp_path / "lab.log").read_text()[-2000:])
            time.sleep(0.3)
    yield f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK.name}?token={token}"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_chat_widget_in_jupyterlab(lab):
    from memorykit.course.widgets import PLACEHOLDER

    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(lab)
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=90_000)
            page.click("#jp-MainMenu >> text=Run")
            page.click("text=Run All Cells")
            box = page.locator(f"input[placeholder='{PLACEHOLDER}']").last
            box.wait_for(timeout=180_000)
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=180_000)
            widget = box.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][last()]")
            box.scroll_into_view_if_needed()

            box.fill("Hi, my name's Lena. I'm allergic to peanuts.")
            widget.locator("button:has-text('Send')").click()
            widget.locator("text=Nice to meet you, Lena").first.wait_for(timeout=60_000)

            widget.locator(".lm-TabBar-tab:has-text('Long-term')").click()
            widget.locator("text=allergic to peanuts").first.wait_for(timeout=30_000)

            thumbs_up = widget.locator("button:has-text('👍')").last
            thumbs_up.click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('button')].some("
                "b => b.textContent.includes('👍') && b.classList.contains('mod-success'))", timeout=30_000)
            ARTIFACTS.mkdir(exist_ok=True)
            widget.screenshot(path=str(ARTIFACTS / "chat_widget.png"))
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
