"""Every notebook's exercise check accepts right answers and rejects a wrong one, run in CI.

Learner notebooks ship a stub (a cell tagged ``exercise``) and a check cell (tagged ``check``) that
prints ✅ or says what is wrong; nbval skips both (tag ``nbval-skip``), so a learner really has to do
the exercise. ``notebooks/solutions/<notebook>.py`` holds, per exercise, the reference solution
(``# %% exercise N``), at least one other correct answer (``# %% exercise N also correct``: another
way a learner could write it) and at least one wrong answer (``# %% exercise N wrong``: a mistake a
learner could make). The notebook runs top to bottom once; at each exercise the cells from the stub to
its check run once per answer (the reference last, so the rest of the notebook sees it): every correct
answer must print ✅, every wrong one must not (an exception counts as rejected).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SECTION = re.compile(r"^# %% exercise (\d+)[ \t]*(.*)$", re.MULTILINE)
KINDS = ("", "also correct", "wrong")

pytestmark = pytest.mark.exercises


def tagged(nb, tag: str) -> list:
    return [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]


def answers(stem: str) -> dict[int, list[tuple[str, str]]]:
    """Exercise number -> [(kind, source)] from the solutions file, in file order."""
    text = (ROOT / "notebooks" / "solutions" / f"{stem}.py").read_text()
    found: dict[int, list[tuple[str, str]]] = {}
    heads = list(SECTION.finditer(text))
    for head, nxt in zip(heads, [*heads[1:], None]):
        kind = head.group(2).strip().lower()
        assert kind in KINDS, f"{stem}.py: unknown section kind {kind!r} (use one of {KINDS})"
        body = text[head.end(): nxt.start() if nxt else len(text)].strip("\n")
        found.setdefault(int(head.group(1)), []).append((kind, body))
    return found


def passed(cell) -> bool:
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    return "✅" in text and not any(o.get("output_type") == "error" for o in cell.get("outputs", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_notebook_has_a_learner_exercise(path):
    nb = nbformat.read(path, as_version=4)
    stubs, checks = tagged(nb, "exercise"), tagged(nb, "check")
    assert stubs and len(checks) == len(stubs), f"{path.name} needs an exercise cell and a check cell per exercise"
    for cell in stubs + checks:
        assert "nbval-skip" in cell.metadata.get("tags", []), f"{path.name}: learner cells must be skipped by nbval"
        assert not cell.source.lstrip().startswith("# NBVAL"), f"{path.name}: nbval markers belong in cell tags"
    assert all("✅" in c.source for c in checks)
    found = answers(path.stem)
    assert sorted(found) == list(range(1, len(stubs) + 1)), f"one solutions section group per exercise in {path.stem}.py"
    for (number, variants), stub in zip(sorted(found.items()), stubs):
        kinds = [k for k, _ in variants]
        assert kinds.count("") == 1 and "also correct" in kinds and "wrong" in kinds, (
            f"{path.stem}.py exercise {number}: needs the reference, an 'also correct' and a 'wrong' answer")
        assert all(stub.source.strip() != body.strip() for k, body in variants if k != "wrong"), (
            "the learner notebook must not ship the answer")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_correct_answer_passes_and_a_wrong_one_does_not(path):
    nb = nbformat.read(path, as_version=4)
    stubs, checks = tagged(nb, "exercise"), tagged(nb, "check")
    position = {id(c): i for i, c in enumerate(nb.cells)}
    found = answers(path.stem)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    verdicts: list[str] = []
    with client.setup_kernel():
        done = 0
        for number, (stub, check) in enumerate(zip(stubs, checks), 1):
            start, end = position[id(stub)], position[id(check)]
            for i in range(done, start):
                client.execute_cell(nb.cells[i], i)
            ordered = sorted(found[number], key=lambda kv: kv[0] == "")  # the reference last
            for kind, body in ordered:
                stub.source = body
                try:
                    for i in range(start, end + 1):
                        client.execute_cell(nb.cells[i], i)
                    ok = passed(check)
                except CellExecutionError:
                    ok = False
                if ok != (kind != "wrong"):
                    verdicts.append(f"exercise {number} ({kind or 'reference'}): check {'passed' if ok else 'failed'}")
            done = end + 1
        for i in range(done, len(nb.cells)):
            client.execute_cell(nb.cells[i], i)
    assert not verdicts, f"{path.name}: " + "; ".join(verdicts)
