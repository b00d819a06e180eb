"""What a notebook costs with a real model: the call counts ``scripts/model_calls.py`` measured, and which
model a notebook's large evaluations use."""
from __future__ import annotations

import json
import os

from ..config import project_root

PRICED_NOTE = {"gpt-5-mini": " (plus its reasoning tokens, billed as output)",
               "gpt-5-nano": " (plus its reasoning tokens)"}


def model_calls(notebook: str) -> dict:
    """The measured row of notebook ``"05"`` from ``docs/model_calls.json`` (empty if never measured)."""
    path = project_root() / "docs" / "model_calls.json"
    return json.loads(path.read_text()).get(notebook, {}) if path.exists() else {}


def describe_model_calls(notebook: str) -> str:
    """A few lines a notebook prints: calls, tokens and the price on current small OpenAI models."""
    row = model_calls(notebook)
    if not row:
        return f"Notebook {notebook} has not been measured yet: run `python scripts/model_calls.py {notebook}`."
    if not row["calls"]:
        return f"A full run of notebook {notebook} makes no model calls: it runs the same with any model."
    least = "" if row.get("finished", True) else "at least "  # the measured run stopped before the end
    lines = [f"A full run of notebook {notebook} with a real model makes {least}{row['calls']:,} model calls: "
             f"{row['prompt_tokens']:,} tokens in, {row['completion_tokens']:,} out",
             f"(measured {row['measured']} with {row['model']}"
             + "".join(f"; the largest tasks: " + ", ".join(f"{t} x{n}" for t, n in top) for top in [
                 sorted(row.get("by_task", {}).items(), key=lambda x: -x[1])[:3]] if top) + ").",
             "At list prices the same tokens would cost:"]
    lines += [f"  {model:<12} ${cost:.4f}{PRICED_NOTE.get(model, '')}" for model, cost in row["cost_usd"].items()]
    return "\n".join(lines)


def evaluation_llm(llm):
    """The model a notebook's large evaluation runs on: ``llm`` when it is the offline stand-in or
    ``MEMORYKIT_FULL_EVAL=1`` opts in, else the offline models (a real model would make hundreds of calls)."""
    if llm.label == "offline" or os.environ.get("MEMORYKIT_FULL_EVAL") == "1":
        return llm
    from ..llm import get_llm

    return get_llm("offline")
