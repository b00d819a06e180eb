"""Extraction: turn a conversation into candidate long-term memories (the ``extract_memories`` task).

:class:`ExtractedMemories` accepts the shapes real models return (a bare list, one object,
``{"episodic": [...]}``, odd key case), drops unusable items with a warning and fails only
when nothing usable is left, so the runner repairs once. A failed task yields no memories.
"""
from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ValidationError, model_validator

from ..llm.task import Task, TaskFailed, Text, is_placeholder, parse_json, run_task
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

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


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


_TYPE_KEYS = ("type", "memory_type", "kind", "category")
_CONTENT_KEYS = ("content", "text", "memory", "fact", "statement", "value")


def _field(item: dict[str, Any], names: Sequence[str]) -> Any:
    lowered = {str(k).strip().lower(): v for k, v in item.items()}
    return next((lowered[n] for n in names if n in lowered), None)


def _normalize_type(value: Any, content: str) -> str | None:
    if value is None:
        return "episodic" if re.match(r"(the )?user\b", content, re.IGNORECASE) else "semantic"
    text = str(value).strip().lower()
    return next((t for t in TYPES if t in text), None)


def _items(data: Any) -> list[Any]:
    """The list of memory items in whatever shape the model chose."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        inner = _field(data, ("memories", "items", "results", "facts", "data"))
        if isinstance(inner, list):
            return inner
        if _field(data, _CONTENT_KEYS) is not None:
            return [data]
        return [{"type": k, "content": c} for k, v in data.items() if _normalize_type(k, "")
                for c in (v if isinstance(v, list) else [v])]
    return []


def _clean(item: Any) -> dict[str, str] | None:
    """One usable ``{"type", "content"}`` item, or None (logged) for anything else."""
    if isinstance(item, str):
        item = {"content": item}
    if not isinstance(item, dict):
        log.warning("memory extraction: skipped item %.80r (not an object)", item)
        return None
    content = _field(item, _CONTENT_KEYS)
    if not isinstance(content, str) or is_placeholder(content):
        log.warning("memory extraction: skipped item without content: %.80r", item)
        return None
    content = " ".join(content.split())[:MAX_CONTENT_CHARS]
    mtype = _normalize_type(_field(item, _TYPE_KEYS), content)
    if mtype is None:
        log.warning("memory extraction: skipped item of unknown type %.80r", item)
        return None
    return {"type": mtype, "content": content}


class ExtractedMemories(BaseModel):
    """The task's output: the memories worth keeping (possibly none)."""

    memories: list[CandidateMemoryModel]

    @model_validator(mode="before")
    @classmethod
    def _tolerant(cls, data: Any) -> Any:
        items = _items(data)
        if not items and data not in ([], {}, {"memories": []}):
            raise ValueError(f"expected {{'memories': [...]}}, got {str(data)[:80]!r}")
        cleaned = {}  # by casefolded content: the first of each duplicate wins
        for got in filter(None, map(_clean, items)):
            cleaned.setdefault(got["content"].casefold(), got)
        if items and not cleaned:
            raise ValueError("no item has a type (episodic or semantic) and real content")
        return {"memories": list(cleaned.values())}


EXTRACT = Task("extract_memories", EXTRACTION_PROMPT, input=ExtractInput, output=ExtractedMemories,
               max_tokens=400, render=lambda inp: f"Conversation:\n{transcript(inp.messages)}")


def parse_memories(text: str | None) -> list[CandidateMemory]:
    """Candidate memories from a model's raw reply; never raises (garbage -> [] and a warning)."""
    if text is None or not str(text).strip():
        return []
    try:
        out = ExtractedMemories.model_validate(parse_json(str(text)))
    except (ValueError, ValidationError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        log.warning("memory extraction: unusable model reply (%s), no memories: %.120r", reason, text)
        return []
    return [CandidateMemory(m.type, m.content) for m in out.memories]


def extract_memories(messages: str | Message | Sequence[Message | dict], llm=None) -> list[CandidateMemory]:
    """Candidate memories from a conversation (a str is one user message); [] (logged) if the task fails."""
    msgs = as_messages(messages)
    if not any(m.role == "user" and m.content.strip() for m in msgs):
        return []
    if llm is None:
        from ..llm import get_llm
        llm = get_llm()
    try:
        out = run_task(llm, EXTRACT, ExtractInput(messages=msgs))
    except TaskFailed as exc:
        log.warning("memory extraction failed (%s); no memories stored", exc.reason)
        return []
    return [CandidateMemory(m.type, m.content) for m in out.memories]
