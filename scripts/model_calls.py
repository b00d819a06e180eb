"""How many model calls a full run of each notebook makes with a real model, and what it would cost.

    python scripts/model_calls.py            # every numbered notebook (~15-25 min on 2 cores)
    python scripts/model_calls.py 04 08      # some of them

Each notebook is executed top to bottom against the local model server (``MEMORYKIT_LLM=local``:
llama.cpp with SmolLM2-135M, ``make setup-llm``), with ``MEMORYKIT_USAGE_LOG`` set so memorykit's usage
client appends one JSON line per request it sends. Calls and tokens are counted from those lines (the
server's own token counts), priced with ``memorykit.config.PRICES`` for current small OpenAI models, and
written to ``docs/model_calls.json``, which each notebook's "With a real model" section shows. Call
counts depend a little on the model: a model that extracts more memories makes more dedup calls.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memorykit.config import price_for  # noqa: E402
from memorykit.course import local_model  # noqa: E402

OUT = ROOT / "docs" / "model_calls.json"
PRICED = ("gpt-5-nano", "gpt-5-mini", "gpt-4o-mini")


def run(notebook: Path, log: Path) -> tuple[bool, float]:
    """Execute ``notebook`` against the local model, the usage log at ``log``: (finished cleanly, seconds)."""
    env = dict(os.environ, MEMORYKIT_LLM="local", MEMORYKIT_USAGE_LOG=str(log))
    env.setdefault("MEMORYKIT_LLM_TIMEOUT", "300")  # counts, not speed: a busy machine must not fail a call
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", str(notebook),
             "--output-dir", tmp, "--ExecutePreprocessor.timeout=1200", "--ExecutePreprocessor.kernel_name=python3",
             "--ExecutePreprocessor.skip_cells_with_tag=nbval-skip"],  # exercise stubs, as in CI
            cwd=notebook.parent, env=env, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode == 0, time.monotonic() - start


def summarize(log: Path) -> dict:
    """Calls, requests and tokens of the model calls in ``log`` (the offline stand-in's records left out)."""
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    prompt, completion = sum(r["prompt_tokens"] for r in rows), sum(r["completion_tokens"] for r in rows)
    tasks: dict[str, int] = {}
    for r in rows:
        tasks[r["task"]] = tasks.get(r["task"], 0) + 1
    cost = {m: round((prompt * price_for(m)[0] + completion * price_for(m)[1]) / 1e6, 4) for m in PRICED}
    return {"calls": len(rows), "prompt_tokens": prompt,
            "completion_tokens": completion, "by_task": dict(sorted(tasks.items())), "cost_usd": cost}


def main(prefixes: list[str]) -> int:
    why = local_model.available()
    if why:
        print(f"the local model cannot run: {why} (make setup-llm)", file=sys.stderr)
        return 1
    server = local_model.start()
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    notebooks = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                       if not prefixes or p.name[:2] in prefixes)
    for nb in notebooks:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "usage.jsonl"
            ok, seconds = run(nb, log)
            row = {**summarize(log), "finished": ok, "minutes": round(seconds / 60, 1),
                   "model": f"local llama.cpp ({local_model.model_label(server.model)})",
                   "measured": time.strftime("%Y-%m-%d")}
        results[nb.name[:2]] = row
        print(f"{nb.name}: {row['calls']} calls, {row['prompt_tokens']:,} in / {row['completion_tokens']:,} out, "
              f"{row['minutes']} min{'' if ok else ', STOPPED WITH AN ERROR'}", flush=True)
        OUT.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
