"""The one tool loop: ask the model, run the tools it calls, feed the results back, repeat."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from ..llm.task import ChatModel, Task, TaskFailed, run_task
from ..llm.tools import Tool, call_tool, schemas
from ..messages import Message, new_id


@dataclass
class LoopResult:
    """The final reply and what happened on the way (assistant tool-call messages and tool results)."""

    reply: Message
    steps: list[Message] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)


def with_call_ids(reply: Message) -> Message:
    """The reply with an id on every tool call (some OpenAI-compatible servers omit it): a tool result
    must name the call it answers, or the thread could not store it."""
    if all(isinstance(c, dict) and c.get("id") for c in reply.tool_calls or []):
        return reply
    calls = [{**c, "id": c.get("id") or f"call_{new_id()}"} for c in reply.tool_calls if isinstance(c, dict)]
    return replace(reply, tool_calls=calls)


def run_tool_loop(llm: ChatModel, task: Task, inp, tools: Sequence[Tool] = (), *, max_steps: int = 4,
                  provisional: int = 0) -> LoopResult:
    """Run a reply-style task (``output=None``) with tools until the model answers in text; more than
    ``max_steps`` tool calls raise TaskFailed. The input's ``steps`` field carries the exchange so far;
    its first ``provisional`` messages (a replayed workflow) stand if the model answers from them and
    are set aside as soon as it calls tools instead."""
    result = LoopResult(reply=Message(role="assistant", content=""), steps=list(getattr(inp, "steps", [])))
    offered = schemas(tools) or None
    while len(result.tool_calls) <= max_steps:
        reply = run_task(llm, task, inp.model_copy(update={"steps": list(result.steps)}), tools=offered)
        if not reply.tool_calls:
            result.reply = reply
            return result
        if not tools:
            raise TaskFailed(task.name, "the model asked for a tool, but none is offered")
        reply = with_call_ids(reply)
        result.steps, provisional = result.steps[provisional:], 0
        result.steps.append(reply)
        for call in reply.tool_calls:
            output = call_tool(tools, call)
            result.tool_calls.append(call)
            result.tool_results.append(output)
            result.steps.append(Message(role="tool", content=output, tool_call_id=call.get("id"),
                                        name=call.get("function", {}).get("name")))
    raise TaskFailed(task.name, f"the model kept calling tools ({len(result.tool_calls)} calls) without answering")
