"""What one ``MemoryAgent.chat()`` did (or one ``recover()`` of what a crashed process left)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from ..errors import ConfigurationError, LLMError, redact
from ..llm.task import TaskFailed, Usage, total_cost
from ..memory.long_term import MemoryHit
from ..messages import Message

FOREGROUND_STEPS = ("load", "retrieve", "model", "store")
BACKGROUND_STEPS = ("index", "extract", "remember", "working", "summarize")


@dataclass
class Turn:
    """What one ``chat()`` did: the reply, the memory it used and stored, timings, usage, failures
    (the background parts once ``agent.flush()`` has returned)."""

    user_id: str
    thread_id: str
    user_message: Message
    reply: str = ""
    reply_message: Message | None = None
    memories_used: list[MemoryHit] = field(default_factory=list)
    memories_stored: list[Any] = field(default_factory=list)
    recalled: list[Any] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    prompt: list[Message] = field(default_factory=list)
    prompt_tokens: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    reply_ms: float = 0.0  # what the user waited: chat() call to return (inline writes included)
    error: str | None = None
    failed_steps: dict[str, str] = field(default_factory=dict)
    usage: list[Usage] = field(default_factory=list)
    working_version: str | None = field(default=None, repr=False)  # the working memory the prompt showed
    saved: list[Message] = field(default_factory=list, repr=False)  # written to the thread by this turn, in order

    @property
    def ok(self) -> bool:
        """True once the user's message and the reply are both written to Redis."""
        return self.error is None

    @property
    def background_ms(self) -> float:
        return sum(v for k, v in self.timings_ms.items() if k in BACKGROUND_STEPS)

    @property
    def model_calls(self) -> int:
        return len(self.usage)

    @property
    def tokens_in(self) -> int:
        return sum(u.prompt_tokens for u in self.usage)

    @property
    def tokens_out(self) -> int:
        return sum(u.completion_tokens for u in self.usage)

    @property
    def cost(self) -> float | None:
        """USD for this turn's model calls (see ``total_cost``)."""
        return total_cost(self.usage)

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error else f"reply={self.reply!r}"
        failed = f", failed={sorted(self.failed_steps)}" if self.failed_steps else ""
        return (f"Turn({self.user_id!r}/{self.thread_id!r}, {state}, used={len(self.memories_used)}, "
                f"stored={len(self.memories_stored)}, tool_calls={len(self.tool_calls)}{failed})")


def reason(exc: Exception) -> str:
    """The whole error, for the log and ``failed_steps``: credentials in it masked."""
    return redact(str(exc) if isinstance(exc, TaskFailed) else f"{type(exc).__name__}: {exc}")


def _http_libraries() -> list:
    """httpx and httpx2 (the openai SDK's transport in newer releases), whichever are installed."""
    import importlib.util

    return [importlib.import_module(m) for m in ("httpx", "httpx2") if importlib.util.find_spec(m)]


def said(exc: Exception) -> str:
    """``turn.error``, which an app may show its user: Redis's connection errors name the server and a model
    server's error its address, our key or the user's words, so both say only their kind (:func:`reason`
    keeps the text for the log)."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return f"Redis is unavailable ({type(exc).__name__})"
    import openai

    chain = [exc]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    model = next((e for e in chain if isinstance(e, LLMError) and not isinstance(e, ConfigurationError)), None)
    http = _http_libraries()
    transport = next((e for e in chain if isinstance(e, (openai.APIError, *(h.HTTPError for h in http)))), None)
    if model is None and transport is None:
        return reason(exc)
    kind, code = (model.kind, model.status) if model is not None else ("unusable", None)
    if kind == "unusable" and transport is not None:  # another client's error around the SDK's or httpx's own
        kind = ("timeout" if isinstance(transport, (openai.APITimeoutError, *(h.TimeoutException for h in http)))
                else "unreachable" if isinstance(transport, (openai.APIConnectionError,
                                                             *(h.TransportError for h in http))) else kind)
        response = getattr(transport, "response", None) if isinstance(
            transport, (openai.APIStatusError, *(h.HTTPStatusError for h in http))) else None
        if response is not None:
            code = response.status_code
            kind = "server" if code >= 500 else "refused"
    status = f" (HTTP {code})" if code else ""
    return {"timeout": "the model did not answer in time", "unreachable": "the model server could not be reached",
            "refusal": "the model refused to answer", "filtered": "the model server's content filter withheld "
            "the answer", "refused": f"the model server refused the request{status}",
            "server": f"the model server failed{status}"}.get(kind, "the model gave no usable answer")
