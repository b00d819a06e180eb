"""Every notebook's exercise is checked in CI against its reference solution.

Learner notebooks ship a stub (a cell tagged ``exercise``) and a check cell (tagged
``check``) that prints ✅ or says what is wrong; nbval skips both (tag ``nbval-skip``, or a
``# NBVAL_SKIP`` comment line), so a
learner really has to do the exercise. Here each stub is replaced by the matching section
of ``notebooks/solutions/<notebook>.py`` (sections start with ``# %% exercise N``), the
notebook runs top to bottom, and every check cell must print ✅.
"""
from __future__ import annotations

import contextlib
import io
import json
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


def nbval_skips(cell) -> bool:
    """nbval skips the cell: tagged ``nbval-skip`` or with a ``# NBVAL_SKIP`` comment line (both work)."""
    comments = {line.strip().lstrip("#").strip() for line in cell.source.splitlines() if line.strip().startswith("#")}
    return "nbval-skip" in cell.get("metadata", {}).get("tags", []) or "NBVAL_SKIP" in comments


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
        assert nbval_skips(cell), f"{path.name}: learner cells must be skipped by nbval"
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


NB09 = ROOT / "notebooks" / "09_retrieval_quality_and_scale.ipynb"
ANSWERS_09 = {  # notebook 09's check, run on its own: every correct filter passes, every wrong one fails
    "reference": (solutions(NB09.stem)[0], True),
    "another correct one": ('''
def as_of_filter(t, types):
    kinds = " or ".join(f'.type == "{k}"' for k in types)
    return f"({kinds}) and not (.valid_from > {t}) and (.invalid_at == 0 or not (.invalid_at <= {t}))"
''', True),
    "drops facts still true": ('''
def as_of_filter(t, types):
    return f".type in {json.dumps(types)} and .valid_from <= {t} and .invalid_at > {t}"
''', False),
    "keeps a fact that stopped at t": ('''
def as_of_filter(t, types):
    return f".type in {json.dumps(types)} and .valid_from <= {t} and (.invalid_at == 0 or .invalid_at >= {t})"
''', False),
    "raises KeyError": ("def as_of_filter(t, types):\n    return {}[t]\n", False),
    "not an expression": ("def as_of_filter(t, types):\n    return 'type is ' + types[0]\n", False),
}


@pytest.mark.parametrize("name", ANSWERS_09)
def test_09_check_accepts_every_correct_filter_and_rejects_wrong_ones(name):
    import memorykit as mk

    answer, correct = ANSWERS_09[name]
    check = tagged(nbformat.read(NB09, as_version=4), "check")[0].source
    env = {"r": mk.connect(), "NS": "t09check", "json": json}
    exec(answer, env)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(check, env)
    assert ("✅" in out.getvalue()) == correct, out.getvalue()
    assert not env["r"].exists("t09check:exercise:{check}")
