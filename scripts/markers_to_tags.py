"""Move nbval's marker comments (``# NBVAL_SKIP`` on a cell's first lines) into cell tags.

    python scripts/markers_to_tags.py notebooks/05_*.ipynb

The learner reads the source, the test runner reads the metadata: nbval honours the tags
``nbval-check-output``, ``nbval-skip``, ``nbval-ignore-output`` and ``raises-exception``. Idempotent.
"""
from __future__ import annotations

import re
import sys

import nbformat

TAGS = {"NBVAL_CHECK_OUTPUT": "nbval-check-output", "NBVAL_SKIP": "nbval-skip",
        "NBVAL_IGNORE_OUTPUT": "nbval-ignore-output", "NBVAL_RAISES_EXCEPTION": "raises-exception"}
MARKER = re.compile(r"^\s*#\s*(NBVAL_[A-Z_]+)\s*$")


def convert(path: str) -> int:
    """Rewrite one notebook; returns how many cells changed."""
    nb, changed = nbformat.read(path, as_version=4), 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = cell.source.split("\n")
        found = []
        while lines and (m := MARKER.match(lines[0])) and m.group(1) in TAGS:
            found.append(TAGS[m.group(1)])
            lines.pop(0)
        if found:
            tags = cell.metadata.setdefault("tags", [])
            tags.extend(t for t in found if t not in tags)
            cell.source, changed = "\n".join(lines), changed + 1
    if changed:
        nbformat.write(nb, path)
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p, convert(p))
