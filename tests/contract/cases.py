"""What the contract suite runs on every profile: each library task with a valid input, canned answers, and
the checks of issue #26's "done when" (rejections, bounds, strictness, usage)."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the real-model suite's samplers

from real_llm.llm_samples import library_tasks, sample_input  # noqa: E402

from memorykit.memory.working_tools import UPDATE_BY_FORMAT  # noqa: E402

from .fake_server import FakeServer  # noqa: E402

ANSWERS = {
    "extract_memories": {"memories": [{"type": "episodic", "content": "User moved from Paris to Berlin last month"}]},
    "decide_memory": {"action": "ADD", "target": None, "reason": "a new fact about the user", "content": None},
    "summarize": {"facts": ["User moved from Paris to Berlin last month"]},
    "analyze_feedback": {"examples": [{"query": "Suggest a dinner for tonight.",
                                       "response": "Try a Thai peanut noodle salad.", "label": "negative",
                                       "signal": "explicit", "reason": "the user is allergic to peanuts"}]},
    "update_working_memory": {"changed": False, "content": None, "reason": "nothing new for the profile"},
}
TOOLS = [{"type": "function", "function": {
    "name": "search_memory", "description": "Search the user's memory",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
                   "required": ["query"]}}}]


def all_tasks() -> dict[str, object]:
    """Every Task the library declares, plus working memory's per-format variants."""
    tasks = dict(library_tasks())
    tasks.update({f"update_working_memory[{fmt}]": task for fmt, task in UPDATE_BY_FORMAT.items()})
    return tasks


def prompts() -> dict[str, str]:
    return {task.prompt.strip()[:60]: task.name for task in all_tasks().values()}


def working_input(task, fmt: str):
    inp = sample_input(task)
    if fmt != "schema":
        return inp.model_copy(update={"format": fmt})
    return inp.model_copy(update={"format": "schema", "template": None, "current": {"name": "Lena"},
                                  "json_schema": {"type": "object", "properties": {"name": {"type": "string"}}}})


def open_schema(schema: dict) -> bool:
    """True when some object in ``schema`` takes keys it does not name (cannot be strict)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and schema.get("additionalProperties") not in (None, False):
            return True
        return any(open_schema(v) for v in schema.values())
    if isinstance(schema, list):
        return any(open_schema(v) for v in schema)
    return False


def violations(fake: FakeServer) -> list[str]:
    """The contract's "done when", checked on everything the fake saw: at most one rejected request per
    parameter, every accepted request bounded, structured requests strict where the server checks them."""
    out = [f"{param} rejected {n} times" for param, n in Counter(e.param for e in fake.rejected()).items() if n > 1]
    out += [f"unbounded request for {e.task}: {sorted(e.body)}" for e in fake.log if e.unbounded]
    for e in fake.log:
        fmt = e.body.get("response_format") or {}
        spec = fmt.get("json_schema") or {}
        if e.status == 200 and fake.profile.strict and fmt and not spec.get("strict") and not open_schema(spec):
            out.append(f"{e.task}: structured output not strict: {fmt}")
        if e.status == 200 and fake.profile.strict:
            out += [f"tool {t['function']['name']} not strict" for t in e.body.get("tools") or []
                    if not t["function"].get("strict")]
    return out
