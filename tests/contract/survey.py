"""Every task, twice, against every profile: what each server rejected, which requests ran unbounded or
non-strict, which tasks failed, and the usage the client recorded. Uses only APIs the client has had from
the start, so it can measure an older checkout too:

    PYTHONPATH=/path/to/checkout python tests/contract/survey.py
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memorykit as mk  # noqa: E402
from memorykit.llm import TaskFailed, run_task, track_usage  # noqa: E402

from contract.cases import ANSWERS, TOOLS, all_tasks, prompts, sample_input, violations, working_input  # noqa: E402
from contract.fake_server import PROFILES, FakeServer  # noqa: E402


def survey(name: str) -> dict:
    profile = PROFILES[name]
    fake = FakeServer(profile, ANSWERS, prompts())
    os.environ.update(OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="sk-survey", MEMORYKIT_LLM="openai",
                      MEMORYKIT_LLM_MODEL=profile.model, MEMORYKIT_LLM_FAMILY=profile.family)
    llm, failed = mk.get_llm(), 0
    with track_usage() as calls:
        for _ in range(2):
            for key, task in all_tasks().items():
                fmt = key.partition("[")[2].rstrip("]")
                try:
                    run_task(llm, task, working_input(task, fmt) if fmt else sample_input(task),
                             tools=TOOLS if task.output is None else None)
                except TaskFailed:
                    failed += 1
    fake.close()
    first = next((e for e in fake.log if e.status != 200), None)
    return {"profile": name, "requests": len(fake.log), "rejected": dict(Counter(e.param for e in fake.rejected())),
            "first rejection": first and f"{first.status} {first.param}",
            "unbounded": sum(e.unbounded for e in fake.log), "violations": len(violations(fake)),
            "tasks failed": f"{failed}/{2 * len(all_tasks())}",
            "usage estimated": f"{sum(c.estimated for c in calls)}/{len(calls)}"}


def probe(name: str, inject: list[str], task_name: str, runs: int = 2) -> str:
    """One scripted fault (a cut-off answer, a refusal, a transient 500), then ``runs`` calls of a task: what
    the server saw (format, token budget) and how the calls ended."""
    profile = PROFILES[name]
    fake = FakeServer(profile, ANSWERS, prompts(), inject=list(inject))
    os.environ.update(OPENAI_BASE_URL=fake.url, MEMORYKIT_LLM_MODEL=profile.model, MEMORYKIT_LLM_FAMILY=profile.family)
    llm, task, ends = mk.get_llm(), all_tasks()[task_name], []
    for _ in range(runs):
        try:
            run_task(llm, task, sample_input(task))
            ends.append("ok")
        except TaskFailed as exc:
            ends.append(f"TaskFailed({exc.reason[:50]!r})")
    fake.close()
    seen = [f"{e.status}:{(e.body.get('response_format') or {}).get('type')}:"
            f"{e.body.get('max_tokens', e.body.get('max_completion_tokens'))}" for e in fake.log]
    return f"{name} {inject}: requests {seen} -> {ends}"


if __name__ == "__main__":
    for profile in PROFILES:
        print(survey(profile))
    for profile in ("openai-chat", "vllm"):
        print(probe(profile, ["transient500"], "summarize"))
        print(probe(profile, ["length"], "extract_memories", runs=1))
        print(probe(profile, ["refusal"], "summarize", runs=1))
