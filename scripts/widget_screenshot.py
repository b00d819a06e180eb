"""Save docs/chat_widget.png: notebook 08's chat widget in JupyterLab, after a question, Long-term tab open.

    python scripts/widget_screenshot.py

A saved notebook cannot show a live widget, so notebook 08 shows this picture under its widget cell.
Opens JupyterLab on a two-cell notebook (notebook 08's widget cells, in namespace ``nb08shot``), asks
the question notebook 08 suggests, opens the memory panel's Long-term tab and screenshots the widget
with Debian's Chromium through Playwright (as tests/browser does). Offline model; about a minute.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "chat_widget.png"
NAMESPACE = "nb08shot"
FIRST = "Hi, my name's Raphael. My wife and I went to Paris in 2009 for our honeymoon."
QUESTION = "Where did I go back in 2009?"
SETUP = f"""import memorykit as mk
r = mk.connect()
for name in r.execute_command("FT._LIST"):
    if name.startswith("{NAMESPACE}_"):
        r.execute_command("FT.DROPINDEX", name)
doomed = list(r.scan_iter(match="{NAMESPACE}:*"))
doomed and r.delete(*doomed)
play_agent = mk.MemoryAgent(r, llm=mk.course_llm(), embedder=mk.get_embedder(r), namespace="{NAMESPACE}")
widget = mk.ChatWidget(play_agent, user_id="raphael", thread_id="play")
widget.send({FIRST!r}).reply"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_lab(folder: Path) -> tuple[subprocess.Popen, str]:
    """JupyterLab on loopback with a token, serving ``folder``; returns the process and the notebook's URL."""
    settings = folder / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), "memorykit-shot"
    env = dict(os.environ, MEMORYKIT_HOME=str(ROOT), MEMORYKIT_LLM="offline", PYTHONPATH=str(ROOT),
               JUPYTERLAB_SETTINGS_DIR=str(folder / "lab-settings"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={folder}"],
        env=env, stdout=open(folder / "lab.log", "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
            return proc, f"http://127.0.0.1:{port}/lab/tree/widget.ipynb?token={token}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("JupyterLab did not start: " + (folder / "lab.log").read_text()[-2000:])
            time.sleep(0.5)


def _screenshot(url: str, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    from memorykit.course.widgets import PLACEHOLDER

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=[
            "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(url)
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=180_000)
            page.click("#jp-MainMenu >> text=Run")
            page.click("text=Run All Cells")
            box = page.locator(f"input[placeholder='{PLACEHOLDER}']").last
            box.wait_for(timeout=300_000)
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=300_000)
            widget = box.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][last()]")
            box.scroll_into_view_if_needed()
            box.fill(QUESTION)
            widget.locator("button:has-text('Send')").click()
            widget.locator("text=🤖 agent").nth(1).wait_for(timeout=120_000)  # the second reply
            widget.locator(".lm-TabBar-tab:has-text('Long-term')").click()
            widget.locator("text=used in the last reply").first.wait_for(timeout=60_000)
            page.wait_for_timeout(500)
            widget.screenshot(path=str(OUT))
        finally:
            browser.close()


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        nb = new_notebook(cells=[new_code_cell(SETUP), new_code_cell("widget")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, folder / "widget.ipynb")
        proc, url = _start_lab(folder)
        try:
            _screenshot(url, chromium)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    import memorykit as mk

    r = mk.connect()
    for name in r.execute_command("FT._LIST"):
        if name.startswith(NAMESPACE + "_"):
            r.execute_command("FT.DROPINDEX", name)
    doomed = list(r.scan_iter(match=NAMESPACE + ":*"))
    if doomed:
        r.delete(*doomed)
    print(f"saved {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
