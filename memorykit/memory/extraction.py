"""Extraction: turn a conversation into candidate long-term memories (the ``extract_memories`` task).

:class:`ExtractedMemories` also takes a bare list or one object and drops unusable items (logged); it fails
only when nothing usable is left, so the runner repairs once. A failed task yields no memories.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..llm.task import Task, TaskFailed, Text, error_kinds, parse_json, run_task
from ..messages import Message, as_messages

log = logging.getLogger(__name__)

TYPES = ("episodic", "semantic")
MAX_CONTENT_CHARS = 500

EXTRACTION_PROMPT = """\
You are the long-term memory of a helpful assistant. Read the conversation and extract the
facts worth remembering in future conversations. Use only what the USER said; ignore the
assistant's words, questions, requests, greetings and small talk.

Two types of memory:
- EPISODIC: the user's own experiences, preferences, goals, plans and personal facts.
  Write them in the third person, starting with "User", e.g. "User went to Paris in 2009
  for their honeymoon", "User prefers window seats", "User's goal is to run a marathon".
- SEMANTIC: general facts about the world that are true for everyone, e.g.
  "Singapore requires a passport for entry", "Tokyo has excellent public transit".

Each memory is one short, self-contained statement. Do not invent anything.
Answer with a JSON object: {"memories": [{"type": "episodic" or "semantic", "content": "<statement>"}]}
Answer {"memories": []} when there is nothing worth remembering."""


@dataclass(frozen=True)
class CandidateMemory:
    """A memory proposed by extraction, not yet stored (``type`` is episodic or semantic)."""

    type: str
    content: str


def transcript(messages: Sequence[Message]) -> str:
    """``user: ...`` / ``assistant: ...`` lines; a message's extra lines are indented."""
    lines = []
    for m in messages:
        if m.role in ("user", "assistant") and m.content.strip():
            body = "\n  ".join(line.strip() for line in m.content.strip().splitlines() if line.strip())
            lines.append(f"{m.role}: {body}")
    return "\n".join(lines)


class ExtractInput(BaseModel):
    """The conversation to mine (only the user's words become memories)."""

    messages: list[Message]


class CandidateMemoryModel(BaseModel):
    """One proposed memory in the model's answer (``content`` may not be empty or a placeholder)."""

    type: Literal["episodic", "semantic"]
    content: Text

    @field_validator("type", mode="before")
    @classmethod
    def _lower(cls, value):
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("content")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return " ".join(value.split())[:MAX_CONTENT_CHARS]


class ExtractedMemories(BaseModel):
    """The task's output: the memories worth keeping (possibly none)."""

    memories: list[CandidateMemoryModel]

    @model_validator(mode="before")
    @classmethod
    def _tolerant(cls, data: Any) -> Any:
        """A bare list or one object stand for the list; unusable items are dropped (logged), repeats too."""
        if isinstance(data, dict):
            data = data.get("memories", [data] if "content" in data else None)
        if not isinstance(data, list):
            raise PydanticCustomError("not_a_list", "expected {'memories': [...]}")
        kept: dict[str, CandidateMemoryModel] = {}
        for item in data:
            try:
                memory = CandidateMemoryModel.model_validate(item)
            except ValidationError as exc:
                log.warning("memory extraction: skipped an unusable item (%s)", error_kinds(exc))
                continue
            kept.setdefault(memory.content.casefold(), memory)
        if data and not kept:
            raise PydanticCustomError("no_usable_item", "no item has a type (episodic or semantic) and real content")
        return {"memories": list(kept.values())}


EXTRACT = Task("extract_memories", EXTRACTION_PROMPT, input=ExtractInput, output=ExtractedMemories,
               max_tokens=400, render=lambda inp: f"Conversation:\n{transcript(inp.messages)}")


def parse_memories(text: str | None) -> list[CandidateMemory]:
    """Candidate memories from a model's raw reply; never raises (garbage -> [] and a warning)."""
    if text is None or not str(text).strip():
        return []
    try:
        out = ExtractedMemories.model_validate(parse_json(str(text)))
    except (ValueError, ValidationError) as exc:
        reason = error_kinds(exc) if isinstance(exc, ValidationError) else str(exc)
        log.warning("memory extraction: unusable model reply (%s), no memories", reason)
        return []
    return [CandidateMemory(m.type, m.content) for m in out.memories]


def extract_memories(messages: str | Message | Sequence[Message | dict], llm) -> list[CandidateMemory]:
    """Candidate memories from a conversation (a str is one user message) by ``llm``; [] (logged) if the
    task fails."""
    msgs = as_messages(messages)
    if not any(m.role == "user" and m.content.strip() for m in msgs):
        return []
    try:
        out = run_task(llm, EXTRACT, ExtractInput(messages=msgs))
    except TaskFailed as exc:
        log.warning("memory extraction failed (%s); no memories stored", exc.reason)
        return []
    return [CandidateMemory(m.type, m.content) for m in out.memories]
