"""The reply as a typed task: the question, the thread and what memory retrieved, in one prompt."""
from __future__ import annotations

from pydantic import BaseModel, Field

from ..llm.task import Task
from ..messages import Message

SYSTEM_PROMPT = ("You are a helpful assistant with memory. Use what you know about the user "
                 "when it helps; say so when you don't know something.")


class ReplyInput(BaseModel):
    """What the reply sees: the question, the thread before it and what memory retrieved for it."""

    question: str
    system: str = Field(SYSTEM_PROMPT, description="the assistant's instructions")
    history: list[Message] = Field(default_factory=list, description="the thread before the question")
    memories: list[str] = Field(default_factory=list, description="long-term memories, most relevant first")
    working_memory: str | None = Field(None, description="the working-memory scratchpad (Markdown or JSON)")
    recalled: list[str] = Field(default_factory=list, description="'user: ...' / 'assistant: ...' from other threads")
    guidance: str | None = Field(None, description="feedback examples: replies to follow and to avoid")
    steps: list[Message] = Field(default_factory=list, description="the tool exchange so far")


def build_reply(inp: ReplyInput) -> list[Message]:
    """The whole prompt: a system message with one titled block per kind of memory that has content,
    the thread, the question, then the tool exchange so far."""
    parts = [inp.system]
    if inp.memories:
        parts.append("Long-term memories about the user (most relevant first):\n"
                     + "\n".join(f"- {m}" for m in inp.memories))
    if inp.working_memory:
        parts.append(f"Working memory (a scratchpad about the user, kept across conversations):\n"
                     f"{inp.working_memory.strip()}")
    if inp.recalled:
        parts.append("Messages recalled from earlier conversations:\n" + "\n".join(f"- {r}" for r in inp.recalled))
    parts += [inp.guidance] if inp.guidance else []
    return [Message(role="system", content="\n\n".join(parts)), *inp.history,
            Message(role="user", content=inp.question), *inp.steps]


REPLY = Task("reply", prompt=SYSTEM_PROMPT, input=ReplyInput, output=None, max_tokens=400,
             render=lambda inp: "\n\n".join(m.content for m in build_reply(inp)), build=build_reply)
