"""The reply as a typed task: the question, the thread and what memory retrieved, in one prompt."""
from __future__ import annotations

from pydantic import BaseModel, Field

from ..llm.task import Task
from ..messages import Message

DEFAULT_SYSTEM = ("You are a helpful assistant with memory. Use what you know about the user "
                  "when it helps; say so when you don't know something.")


class ReplyInput(BaseModel):
    """What the reply sees: the question, the thread before it and what memory retrieved for it."""

    question: str
    history: list[Message] = Field(default_factory=list, description="the thread before the question")
    memories: list[str] = Field(default_factory=list, description="long-term memories, most relevant first")
    working_memory: str | None = Field(None, description="the working-memory scratchpad (Markdown or JSON)")
    recalled: list[str] = Field(default_factory=list, description="'user: ...' / 'assistant: ...' from other threads")
    guidance: str | None = Field(None, description="feedback examples: replies to follow and to avoid")
    suggestion: str | None = Field(None, description="tools that answered a similar question well")
    steps: list[Message] = Field(default_factory=list, description="the tool exchange so far")


def system_block(inp: ReplyInput, prompt: str = DEFAULT_SYSTEM) -> str:
    """The system message: instructions, then one titled block per kind of memory that has content."""
    parts = [prompt.strip()]
    if inp.memories:
        parts.append("Long-term memories about the user (most relevant first):\n"
                     + "\n".join(f"- {m}" for m in inp.memories))
    if inp.working_memory:
        parts.append(f"Working memory (a scratchpad about the user, kept across conversations):\n"
                     f"{inp.working_memory.strip()}")
    if inp.recalled:
        parts.append("Messages recalled from earlier conversations:\n" + "\n".join(f"- {r}" for r in inp.recalled))
    parts += [p for p in (inp.guidance, inp.suggestion) if p]
    return "\n\n".join(parts)


def build_reply(inp: ReplyInput, prompt: str = DEFAULT_SYSTEM) -> list[Message]:
    """The whole prompt: system block, the thread, the question, then the tool exchange so far."""
    return [Message(role="system", content=system_block(inp, prompt)), *inp.history,
            Message(role="user", content=inp.question), *inp.steps]


def reply_task(system_prompt: str = DEFAULT_SYSTEM) -> Task:
    """The ``reply`` task with this system prompt (``output=None``: a message that may call tools)."""
    def build(inp: ReplyInput) -> list[Message]:
        return build_reply(inp, system_prompt)

    return Task("reply", prompt=system_prompt, input=ReplyInput, output=None, max_tokens=400,
                render=lambda inp: "\n\n".join(m.content for m in build(inp)), build=build)


REPLY = reply_task()
