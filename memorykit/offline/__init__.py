"""The offline backend: a deterministic stand-in for a model, labelled in every reply.

``OfflineChat`` implements each task by its name, from the task's typed input, with a
small method of its own in one module per task (``offline/<module>.py`` exposes
``run(inp, tools=None)``). Those methods are learned or retrieval-based where they can
be (scikit-learn models trained on ``data/``, RedisVL routing, embeddings); no prompt is
parsed. Only :func:`memorykit.llm.get_llm` imports this package.
"""
from __future__ import annotations

import importlib
from typing import Any, Sequence

from ..errors import LLMError
from ..messages import Message, as_message

LABEL = "offline"
PREFIX = "(offline) "

# task name -> module in this package that implements it
TASKS = {
    "reply": "reply",
    "extract_memories": "extract",
    "decide_memory": "decide",
    "summarize": "summarize",
    "analyze_feedback": "feedback",
    "update_working_memory": "working",
    "plan_tools": "plan_tools",
}


def labelled(text: str) -> str:
    """Reply text as the offline backend shows it: always prefixed, so nobody mistakes it for a model."""
    return text if text.startswith(PREFIX) else PREFIX + text


class OfflineChat:
    """Deterministic, offline task backend; every reply is labelled ``(offline)``."""

    label = LABEL

    def perform(self, task, inp, tools: list[dict] | None = None) -> Any:
        module_name = TASKS.get(task.name)
        if module_name is None:
            raise LLMError(f"the offline backend has no method for task {task.name!r}; known: {sorted(TASKS)}")
        module = importlib.import_module(f"{__name__}.{module_name}")
        out = module.run(inp, tools=tools)
        if isinstance(out, Message):
            out.name = LABEL
            if out.content:
                out.content = labelled(out.content)
        return out

    def chat(self, messages: Sequence[Message | dict], *, tools: list[dict] | None = None,
             tool_choice=None, response_format=None, max_tokens=None) -> Message:
        """A plain chat call: answer the last user message from the messages given (the reply method)."""
        from .reply import reply_to_messages

        out = reply_to_messages([as_message(m) for m in messages], tools=tools)
        out.name = LABEL
        if out.content:
            out.content = labelled(out.content)
        return out

    def __repr__(self) -> str:
        return "OfflineChat(deterministic, offline)"
