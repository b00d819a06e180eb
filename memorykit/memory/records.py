"""The records of long-term memory: a memory, a search hit, and the prompt block that shows them to a model."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import ValidationError
from ..messages import new_id


@dataclass
class Memory:
    """One long-term memory. ``invalid_at`` is None while the memory is current; ``user_id`` is None
    for shared knowledge."""

    content: str
    user_id: str | None = None
    memory_type: str = "episodic"
    id: str = field(default_factory=new_id)
    content_hash: str = ""
    topics: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    updated_at: float | None = None
    last_accessed: float | None = None
    valid_from: float | None = None
    invalid_at: float | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    source_thread: str | None = None
    source_messages: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_current(self) -> bool:
        return self.invalid_at is None

    @property
    def shared(self) -> bool:
        """Shared knowledge: every user reads it, only ``shared=True`` calls change it."""
        return self.user_id is None


@dataclass
class MemoryHit:
    """A memory found by a search: its cosine ``distance`` (0 = same meaning) and, when the
    search ranked by more than the vector (hybrid / recency), the score components."""

    memory: Memory
    distance: float
    text_score: float | None = None
    recency: float | None = None
    score: float | None = None
    rank: int | None = None

    def __repr__(self) -> str:
        return f"MemoryHit({self.distance:.3f}, [{self.memory.memory_type}] {self.memory.content!r})"


MEMORY_CONTEXT_HEADER = (
    "Long-term memories about this user and the world (use them when they help; "
    "do not mention that you have a memory unless the user asks):")


def format_memories(items: Iterable[MemoryHit | Memory], header: str = MEMORY_CONTEXT_HEADER) -> str:
    """A system-prompt block, one ``- [EPISODIC] ...`` line per memory (hits or memories); "" if none."""
    memories = [getattr(item, "memory", item) for item in items or []]
    lines = [f"- [{m.memory_type.upper()}] {' '.join(m.content.split())}" for m in memories if m.content.strip()]
    return "\n".join([header, *lines]) if lines else ""


def topic_list(topics: Iterable[str] | None) -> list[str]:
    """Topics as stored and matched: trimmed, lower case, blanks dropped. A comma is refused: the search index
    splits tags at commas, so "a,b" would match "a" in text search but not in vector search."""
    topics = [topics] if isinstance(topics, str) else topics or []  # one topic given as a bare string
    out = [t.strip().lower() for t in topics if isinstance(t, str) and t.strip()]
    bad = [t for t in out if "," in t]
    if bad:
        raise ValidationError(f"a topic cannot contain a comma: {bad[0]!r} (pass separate topics instead)")
    return out
