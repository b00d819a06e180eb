"""Recalled messages in a prompt, as notebook 07 compares: merged with the recent window, or as one block."""
from __future__ import annotations

import time
from typing import Sequence

from ..errors import ValidationError
from ..memory.recall import RecalledMessage
from ..memory.short_term import head_length
from ..messages import Message

STRATEGIES = ("prepend", "append", "interleave")
RECALL_HEADER = "Messages recalled from earlier conversations (oldest first):"


def _as_message(item: RecalledMessage | Message) -> Message:
    return item.message if isinstance(item, RecalledMessage) else item


def _fingerprint(m: Message) -> tuple[str, str]:
    return m.role, " ".join(m.content.split()).casefold()


def merge_recalled(window: Sequence[Message], recalled: Sequence[RecalledMessage | Message],
                   strategy: str = "prepend") -> list[Message]:
    """The recent window plus recalled messages, none repeated (same id or same role + text):
    before it (``prepend``), after it (``append``) or by time (``interleave``); system head first."""
    if strategy not in STRATEGIES:
        raise ValidationError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    h = head_length(window)
    system, recent = list(window[:h]), list(window[h:])
    seen_ids, seen_text = {m.id for m in window}, {_fingerprint(m) for m in recent}
    extra: list[Message] = []
    for m in map(_as_message, recalled):
        if m.id not in seen_ids and _fingerprint(m) not in seen_text:
            seen_ids.add(m.id)
            seen_text.add(_fingerprint(m))
            extra.append(m)
    extra.sort(key=lambda m: m.created_at)
    if strategy == "prepend":
        return system + extra + recent
    if strategy == "append":
        return system + recent + extra
    return system + sorted(recent + extra, key=lambda m: m.created_at)  # stable: ties keep window order


def recall_block(recalled: Sequence[RecalledMessage | Message], header: str = RECALL_HEADER) -> Message | None:
    """Recalled messages as one system message (dated lines), for prompts that keep roles strict."""
    items = sorted(map(_as_message, recalled), key=lambda m: m.created_at)
    if not items:
        return None
    lines = [f"- {time.strftime('%Y-%m-%d', time.gmtime(m.created_at))} {m.role}: {m.content.strip()}"
             for m in items]
    return Message(role="system", content=header + "\n" + "\n".join(lines))
