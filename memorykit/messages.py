"""Chat messages: one dataclass, a JSON codec, OpenAI dict conversion, a token estimate."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Literal, Sequence, get_args

from ulid import ULID

from .errors import ValidationError

Role = Literal["system", "user", "assistant", "tool"]
ROLES = get_args(Role)


def new_id() -> str:
    """A sortable unique id (ULID) for messages and memories."""
    return str(ULID())


@dataclass
class Message:
    """One chat message, as stored in a thread and sent to a model."""
    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    created_at: float = field(default_factory=time.time)
    id: str = field(default_factory=new_id)
    usage: dict[str, int] | None = field(default=None, repr=False, compare=False)
    """Token counts the server reported for this reply; never stored."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValidationError(f"role must be one of {ROLES}, got {self.role!r}")
        if self.content is None:
            self.content = ""
        if not isinstance(self.content, str):
            raise ValidationError(f"content must be a string, got {type(self.content).__name__}")

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if k != "usage"}
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> "Message":
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("a stored message must be a JSON object")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "usage"})

    def to_openai(self) -> dict[str, Any]:
        """The dict an OpenAI-compatible chat API expects."""
        optional = {k: getattr(self, k) for k in ("name", "tool_calls", "tool_call_id") if getattr(self, k)}
        return {"role": self.role, "content": self.content, **optional}

    @classmethod
    def from_openai(cls, data: dict[str, Any] | Any) -> "Message":
        """From an OpenAI message dict or SDK object."""
        if not isinstance(data, dict):
            data = data.model_dump() if hasattr(data, "model_dump") else dict(data)
        tool_calls = [tc if isinstance(tc, dict) else tc.model_dump() for tc in data.get("tool_calls") or []]
        return cls(role=data["role"], content=data.get("content") or "", name=data.get("name"),
                   tool_calls=tool_calls or None, tool_call_id=data.get("tool_call_id"))


def as_message(m: Message | dict[str, Any]) -> Message:
    return m if isinstance(m, Message) else Message.from_openai(m)


def as_messages(items: str | Message | dict[str, Any] | Iterable[str | Message | dict[str, Any]]) -> list[Message]:
    """One message or many; a plain string is a user message."""
    items = [items] if isinstance(items, (str, Message, dict)) else items
    return [Message(role="user", content=m) if isinstance(m, str) else as_message(m) for m in items]


def to_openai(messages: Sequence[Message | dict[str, Any]]) -> list[dict[str, Any]]:
    return [as_message(m).to_openai() for m in messages]


TokenCounter = Callable[[str], int]


def chars_per_token(text: str) -> int:
    """The rough default: about four characters per token for English text."""
    return (len(text) + 3) // 4


_token_counter: TokenCounter = chars_per_token


def set_token_counter(counter: TokenCounter | None) -> None:
    """Plug in a real tokenizer (e.g. :func:`model_token_counter`); None restores chars/4."""
    global _token_counter
    _token_counter = counter or chars_per_token


def model_token_counter() -> TokenCounter:
    """Counts tokens with the embedding model's own tokenizer (ships offline with the model)."""
    from .embeddings import model_path
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path())
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def count_tokens(messages: Sequence[Message | dict[str, Any]] | str) -> int:
    """Estimated prompt tokens: content plus a small per-message overhead for role and framing."""
    if isinstance(messages, str):
        return _token_counter(messages)
    total = 0
    for m in map(as_message, messages):
        total += 4 + _token_counter(m.content)
        if m.tool_calls:
            total += _token_counter(json.dumps(m.tool_calls))
    return total
