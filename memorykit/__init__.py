"""memorykit: agent memory with Redis, the support package of the course.

    import memorykit as mk
    r = mk.connect(); emb = mk.get_embedder(r); llm = mk.get_llm()   # or mk.course_llm(): offline if unset

Names load on first use, so ``import memorykit`` stays fast and pulls in neither pandas,
ipywidgets, matplotlib nor umap. Everything else lives in the subpackages:
``memorykit.llm`` (tasks and backends), ``memorykit.memory`` (the memory layers),
``memorykit.agent`` (tools, the tool loop, the memory agent), ``memorykit.course``
(widgets, plots, the wellness demo domain, evaluation helpers).
"""
from __future__ import annotations

import importlib

__version__ = "0.2.0"

_WHERE = {
    # core
    "connect": "server", "redis_url": "server", "get_embedder": "embeddings",
    "Message": "messages", "count_tokens": "messages",
    "MemoryKitError": "errors", "ValidationError": "errors",
    # the seam
    "get_llm": "llm", "why_llm": "llm", "Task": "llm", "run_task": "llm", "TaskFailed": "llm",
    "usage_meter": "llm", "ConfigurationError": "errors",
    "Tool": "llm.tools",
    # memory layers
    "ChatHistory": "memory.short_term",
    "ByCount": "memory.summarize", "ByTokens": "memory.summarize", "summarize_if_needed": "memory.summarize",
    "MemoryStore": "memory.long_term", "Memory": "memory.long_term", "MemoryHit": "memory.long_term",
    "extract_memories": "memory.extraction", "CandidateMemory": "memory.extraction",
    "Decision": "memory.dedup",
    "ProcedureStore": "memory.procedural", "FeedbackStore": "memory.feedback",
    "analyze_feedback": "memory.feedback",
    "WorkingMemory": "memory.working", "PROFILE_TEMPLATE": "memory.working",
    "MessageIndex": "memory.recall",
    # agents
    "memory_tools": "agent.tools", "ToolAgent": "agent.tool_agent",
    "MemoryAgent": "agent.memory_agent", "Turn": "agent.memory_agent",
    # course helpers (heavy imports: loaded only when used)
    "course_llm": "course.llm_choice", "ChatWidget": "course.widgets", "wellness_tools": "course.wellness", "plot_umap": "course.plots",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'memorykit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
