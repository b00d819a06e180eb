"""The chat widget in a real browser: JupyterLab + Debian's Chromium, driven by Playwright.

Opens a copy of notebook 08, runs all cells, types into the widget, presses Send, checks
the reply and the memory panel, clicks 👍, and saves a screenshot. Skipped (with the
reason) when Chromium or Playwright is missing; `.ci/run` installs Chromium so CI runs it.
"""
import shutil
from pathlib import Path

import pytest

from memorykit.course import lab

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "08_memory_agent.ipynb"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(lab.chromium_path() is None, reason="Chromium is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def fitted_offline_models():
    """The two offline models kept per process (feedback, tools) fitted once here, so their training texts are
    in the Redis embeddings cache before the notebook's kernel needs them; the disk-cached models are fitted
    at session start (conftest.py)."""
    from memorykit.offline import feedback_model, tool_model

    feedback_model.feedback_model(), tool_model.tool_model()


@pytest.fixture
def lab_url(tmp_path, fitted_offline_models):
    """JupyterLab on loopback with a token, serving a copy of notebook 08."""
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    with lab.running_lab(tmp_path, NOTEBOOK.name, start_timeout=60) as url:
        yield url


@pytest.mark.timeout(1200)  # on a fresh checkout the fixture embeds the feedback and tool training texts
def test_chat_widget_in_jupyterlab(lab_url):
    from memorykit.course.widgets import PLACEHOLDER

    with lab.chromium_page() as page:
        try:
            lab.run_all(page, lab_url, timeout_ms=90_000)
            box, widget = lab.chat_widget(page, PLACEHOLDER)

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
