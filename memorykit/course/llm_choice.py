"""The course's choice of model: whatever is configured, else the offline stand-in, said out loud."""
from __future__ import annotations

from ..llm.factory import get_llm, why_llm
from ..llm.task import ChatModel


def course_llm(default: str = "offline") -> ChatModel:
    """The configured model (a key, a base URL or ``MEMORYKIT_LLM``), else ``default``; prints which one
    and why, so a notebook never runs on the stand-in without saying so."""
    print(f"LLM: {why_llm(default=default)}")
    return get_llm(default=default)
