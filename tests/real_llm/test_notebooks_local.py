"""Notebooks 04, 05 and 08 run top to bottom with the local 135M model (outputs not compared).

A real model returns less than the offline backend (few memories, odd decisions): the
notebooks must say so in prose and go on, never stop with an error cell.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
LOCAL_NOTEBOOKS = ("04_", "05_", "08_")

# Minutes each against the 135M model on 2 cores: `make test-all` and `make test-llm` set
# MEMORYKIT_LOCAL_NOTEBOOKS=1; a plain `pytest tests/real_llm` leaves them out.
pytestmark = pytest.mark.skipif(os.environ.get("MEMORYKIT_LOCAL_NOTEBOOKS") != "1",
                                reason="set MEMORYKIT_LOCAL_NOTEBOOKS=1 to run notebooks against the local model")


def _notebook(prefix: str) -> Path:
    (path,) = sorted(NOTEBOOKS.glob(f"{prefix}*.ipynb"))
    return path


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("prefix", LOCAL_NOTEBOOKS)
def test_notebook_runs_with_the_local_model(local_server, prefix, tmp_path):
    source = _notebook(prefix)
    out = tmp_path / source.name
    env = dict(os.environ, MEMORYKIT_LLM="local")
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", str(source),
         "--output", str(out), "--ExecutePreprocessor.timeout=900", "--ExecutePreprocessor.kernel_name=python3"],
        cwd=source.parent, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{source.name} stopped with MEMORYKIT_LLM=local:\n{proc.stderr[-3000:]}"
    nb = nbformat.read(out, as_version=4)
    errors = [(i, o.get("ename"), o.get("evalue")) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{source.name}: error cells {errors}"
