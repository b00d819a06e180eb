"""Save docs/chat_widget.png: notebook 08's chat widget in JupyterLab, after a question, Long-term tab open.

    python scripts/widget_screenshot.py

A saved notebook cannot show a live widget, so notebook 08 shows this picture under its widget cell.
Opens JupyterLab on a two-cell notebook (notebook 08's widget cells, in namespace ``nb08shot``), asks
the question notebook 08 suggests, opens the memory panel's Long-term tab and screenshots the widget
with Debian's Chromium through Playwright (as tests/browser does). Offline model; about a minute.
"""
from __future__ import annotations

import tempfile
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


def _screenshot(url: str) -> None:
    """Run the two cells, ask the question, open the Long-term tab and save the widget's picture."""
    from memorykit.course import lab
    from memorykit.course.widgets import PLACEHOLDER

    with lab.chromium_page() as page:
        lab.run_all(page, url)
        box, widget = lab.chat_widget(page, PLACEHOLDER)
        box.fill(QUESTION)
        widget.locator("button:has-text('Send')").click()
        widget.locator("text=🤖 agent").nth(1).wait_for(timeout=120_000)  # the second reply
        widget.locator(".lm-TabBar-tab:has-text('Long-term')").click()
        widget.locator("text=used in the last reply").first.wait_for(timeout=60_000)
        page.wait_for_timeout(500)
        widget.screenshot(path=str(OUT))


def main() -> None:
    from memorykit.course import lab

    if lab.chromium_path() is None:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        nb = new_notebook(cells=[new_code_cell(SETUP), new_code_cell("widget")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, folder / "widget.ipynb")
        with lab.running_lab(folder, "widget.ipynb") as url:
            _screenshot(url)
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
