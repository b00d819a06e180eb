"""Execute notebooks top to bottom and save their outputs (what nbval later checks).

    python scripts/run_notebooks.py                 # every notebook, in course order
    python scripts/run_notebooks.py 05 08           # the ones whose names start with these

Runs with the offline model, as CI does, so the saved outputs are the ones CI reproduces.
Cells nbval skips (tag ``nbval-skip`` or a ``# NBVAL_SKIP`` comment line: exercise stubs, opt-in
cells) are not run and keep their outputs.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SKIP = "skip-execution"


def nbval_skips(cell) -> bool:
    """nbval skips this code cell: tagged ``nbval-skip`` or with a ``# NBVAL_SKIP`` comment line."""
    if cell.cell_type != "code":
        return False
    comments = {line.strip().lstrip("#").strip() for line in cell.source.splitlines() if line.strip().startswith("#")}
    return "nbval-skip" in cell.metadata.get("tags", []) or "NBVAL_SKIP" in comments


def main(prefixes: list[str]) -> None:
    os.environ["MEMORYKIT_LLM"] = "offline"
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".memorykit" / "numba_cache"))
    paths = sorted(p for p in NOTEBOOKS.glob("[0-9]*.ipynb") if not prefixes or p.name.startswith(tuple(prefixes)))
    for path in paths:
        started = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        skipped = [c for c in nb.cells if nbval_skips(c)]
        for cell in skipped:  # exercise stubs and opt-in cells: not run, their saved outputs kept
            cell.metadata.setdefault("tags", []).append(SKIP)
        NotebookClient(nb, timeout=300, kernel_name="python3", skip_cells_with_tag=SKIP,
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        for cell in skipped:
            cell.metadata["tags"].remove(SKIP)
            if not cell.metadata["tags"]:
                del cell.metadata["tags"]
        nbformat.write(nb, path)
        print(f"{path.name}: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
