"""What a learner reads: plain words, objectives, a recap, what's next, and Redis opened up once."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
JARGON = re.compile(r"\bseeds?\b|\bseeded\b|reference agent", re.IGNORECASE)


def text_of(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells)


def code_of(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def test_there_are_ten_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(10)]


@pytest.mark.parametrize("path", [*NOTEBOOKS, ROOT / "README.md"], ids=lambda p: p.name[:9])
def test_no_words_a_learner_cannot_know(path):
    text = path.read_text() if path.suffix == ".md" else text_of(path)
    assert JARGON.findall(text) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_each_notebook_has_objectives_and_whats_next(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0].source.lower()
    assert nb.cells[0].cell_type == "markdown" and "learn" in first
    md = "\n".join(c.source.lower() for c in nb.cells if c.cell_type == "markdown")
    assert "what's next" in md or "what’s next" in md
    assert "further reading" in md


def test_redis_is_opened_up_somewhere():
    code = "\n".join(code_of(p) for p in NOTEBOOKS)
    for needle in ("FT.SEARCH", "FT.INFO", "register_script", "MULTI"):
        assert needle in code, needle
    assert "WATCH" in code or ".watch(" in code


def markdown_words(path: Path) -> int:
    """Words of prose a learner reads in one notebook: whitespace-separated tokens of its markdown cells."""
    nb = nbformat.read(path, as_version=4)
    return sum(len(re.findall(r"\S+", c.source)) for c in nb.cells if c.cell_type == "markdown")


def test_the_course_prose_fits_its_budget():
    words = {p.name[:2]: markdown_words(p) for p in NOTEBOOKS}
    assert sum(words.values()) <= 19_000, f"{sum(words.values()):,} words of markdown, over 19,000: {words}"


@pytest.mark.parametrize("path", [*NOTEBOOKS, ROOT / "notebooks" / "appendix_offline_stand_in.ipynb"],
                         ids=lambda p: p.stem[:2])
def test_no_code_cell_starts_with_an_nbval_comment(path):
    nb = nbformat.read(path, as_version=4)
    marked = [i for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and re.match(r"\s*#\s*NBVAL", c.source, re.IGNORECASE)]
    assert not marked, f"{path.name}: cells {marked} start with an nbval comment; use cell tags (nbval-check-output, ...)"


@pytest.mark.parametrize("path", [*NOTEBOOKS, ROOT / "notebooks" / "appendix_offline_stand_in.ipynb"],
                         ids=lambda p: p.stem[:2])
def test_every_plot_cell_keeps_its_image(path):
    """A reader on GitHub sees every chart: notebooks are executed for commit with an inline backend."""
    nb = nbformat.read(path, as_version=4)
    blank = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and re.search(r"plt\.(show|subplots)\(|\.plot\(", c.source)
             and "nbval-skip" not in c.metadata.get("tags", [])
             and not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert not blank, f"{path.name}: plot cells {blank} have no saved image (run scripts/run_notebooks.py with an inline backend)"
