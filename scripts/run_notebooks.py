"""Execute notebooks top to bottom and save their outputs (what nbval later checks).

    python scripts/run_notebooks.py                 # every notebook, in course order
    python scripts/run_notebooks.py 05 08           # the ones whose names start with these

Runs with the offline model, as CI does, so the saved outputs are the ones CI reproduces.
Cells tagged ``nbval-skip`` (exercise stubs, opt-in cells) are not run and keep their outputs.
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


def skipped_by_nbval(cell) -> bool:
    """nbval will not run this cell: tagged ``nbval-skip`` (or the older ``# NBVAL_SKIP`` comment)."""
    return "nbval-skip" in cell.metadata.get("tags", []) or cell.source.lstrip().startswith("# NBVAL_SKIP")


def main(prefixes: list[str]) -> None:
    os.environ["MEMORYKIT_LLM"] = "offline"
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"  # figures saved in the notebook (Agg shows none)
    os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".memorykit" / "numba_cache"))
    paths = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if not prefixes or p.name.startswith(tuple(prefixes)))
    for path in paths:
        started = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        skipped = [c for c in nb.cells if c.cell_type == "code" and skipped_by_nbval(c)]
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
