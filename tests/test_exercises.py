"""Every notebook's exercise is checked in CI against its reference solution.

Learner notebooks ship a stub (a cell tagged ``exercise``) and a check cell (tagged
``check``) that prints ✅ or says what is wrong; nbval skips both (``# NBVAL_SKIP``), so a
learner really has to do the exercise. Here each stub is replaced by the matching section
of ``notebooks/solutions/<notebook>.py`` (sections start with ``# %% exercise N``), the
notebook runs top to bottom, and every check cell must print ✅.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
pytestmark = pytest.mark.exercises


def tagged(nb, tag: str) -> list:
    return [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]


def solutions(stem: str) -> list[str]:
    path = ROOT / "notebooks" / "solutions" / f"{stem}.py"
    parts = re.split(r"^# %% exercise \d+.*$", path.read_text(), flags=re.MULTILINE)
    return [p.strip("\n") for p in parts[1:]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_notebook_has_a_learner_exercise(path):
    nb = nbformat.read(path, as_version=4)
    stubs, checks = tagged(nb, "exercise"), tagged(nb, "check")
    assert stubs and checks, f"{path.name} needs an exercise cell and a check cell"
    for cell in stubs + checks:
        assert "NBVAL_SKIP" in cell.source, f"{path.name}: learner cells must be skipped by nbval"
    assert all("✅" in c.source for c in checks)
    assert len(solutions(path.stem)) == len(stubs), f"one solution section per exercise in {path.stem}.py"
    for stub, solution in zip(stubs, solutions(path.stem)):
        assert stub.source.strip() != solution.strip(), "the learner notebook must not ship the answer"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_reference_solution_passes_the_check(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    for stub, solution in zip(tagged(nb, "exercise"), solutions(path.stem)):
        stub.source = solution
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for check in tagged(nb, "check"):
        text = "".join(o.get("text", "") for o in check.get("outputs", []) if o.get("output_type") == "stream")
        assert "✅" in text, f"{path.name}: check cell did not pass:\n{text}"
