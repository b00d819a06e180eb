"""OpenAI or any OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp): every request carries
``max_tokens``; one deadline per call; retries only for 429, 5xx and connection errors, never after a timeout.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Sequence

from ..config import settings
from ..errors import LLMError
from ..messages import Message, to_openai

log = logging.getLogger(__name__)

FORMAT_MODES = ("json_schema", "json_object_schema", "json_object", "prompt")
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
_FORMAT_WORDS = ("response_format", "json_schema", "json schema", "json_object")


class OpenAIChat:
    """A chat client with a per-call deadline, bounded output and a remembered fallback from ``json_schema``
    down ``FORMAT_MODES`` (to the schema in the prompt). llama-cpp-python's quirks: ``course.local_model``."""

    def __init__(self, model: str | None = None, *, api_key: str | None = None, base_url: str | None = None,
                 timeout: float | None = None, max_retries: int = 2, label: str | None = None,
                 format_mode: str | None = None):
        import openai

        cfg = settings()
        self.model = model or cfg.llm_model
        self.base_url = base_url or cfg.openai_base_url
        api_key = api_key or cfg.openai_api_key or ("not-needed" if self.base_url else None)
        if not api_key:
            raise LLMError("OpenAIChat needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server).")
        self.format_mode = format_mode or cfg.llm_json_mode
        if self.format_mode not in FORMAT_MODES:
            raise LLMError(f"MEMORYKIT_LLM_JSON_MODE must be one of {FORMAT_MODES}, got {self.format_mode!r}")
        self.timeout = float(timeout or cfg.llm_timeout)
        self.max_tokens = cfg.llm_max_tokens
        self.max_retries = max_retries
        # The SDK's own retries would repeat a timed-out generation: we retry ourselves.
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        self.label = label or (f"{self.model} @ {self.base_url}" if self.base_url else self.model)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label})"

    def chat(self, messages: Sequence[Message | dict], *, tools: list[dict] | None = None,
             tool_choice: str | dict | None = None, response_format: dict | None = None,
             max_tokens: int | None = None) -> Message:
        """One bounded chat completion; raises :class:`LLMError` when it cannot get one in time."""
        return self._request(to_openai(messages), time.monotonic() + self.timeout, tools=tools,
                             tool_choice=tool_choice, response_format=response_format, max_tokens=max_tokens)

    def _request(self, plain: list[dict], deadline: float, *, tools: list[dict] | None = None,
                 tool_choice: str | dict | None = None, response_format: dict | None = None,
                 max_tokens: int | None = None) -> Message:
        kwargs: dict[str, Any] = {"model": self.model, "messages": plain, "temperature": 0.0,
                                  "max_tokens": int(max_tokens or self.max_tokens)}
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = tool_choice or "auto"  # llama.cpp drops tools without it
        if response_format:
            self._apply_format(kwargs, response_format, plain)
        return self._send(kwargs, response_format, plain, deadline)

    def _apply_format(self, kwargs: dict[str, Any], response_format: dict, plain: list[dict]) -> None:
        """Shape ``response_format`` (and, below json_object_schema, the system message) for the current mode."""
        mode = self.format_mode if response_format.get("type") == "json_schema" else "json_schema"
        schema = response_format.get("json_schema", {}).get("schema") or {"type": "object"}
        formats = {"json_schema": response_format, "json_object_schema": {"type": "json_object", "schema": schema},
                   "json_object": {"type": "json_object"}}
        kwargs.pop("response_format", None)
        if mode in formats:
            kwargs["response_format"] = formats[mode]
        kwargs["messages"] = _with_schema_instruction(plain, schema) if mode in ("json_object", "prompt") else plain

    def _send(self, kwargs: dict[str, Any], response_format: dict | None, plain: list[dict],
              deadline: float) -> Message:
        import openai

        attempt = 0
        while (remaining := deadline - time.monotonic()) > 0.05:
            try:
                return self._complete(kwargs, remaining, deadline)
            except openai.APITimeoutError as exc:
                raise self._timed_out() from exc
            except openai.APIStatusError as exc:
                if response_format and self._downgrade(exc):
                    self._apply_format(kwargs, response_format, plain)
                    continue
                if exc.status_code not in RETRY_STATUS or attempt >= self.max_retries:
                    raise LLMError(f"the model server answered HTTP {exc.status_code}: "
                                   f"{str(exc.message)[:300]}") from exc
                wait = _retry_after(exc)
            except openai.APIConnectionError as exc:
                if attempt >= self.max_retries:
                    raise LLMError(f"cannot reach the model server at {self.base_url or 'OpenAI'}: {exc}") from exc
                wait = None
            except openai.APIError as exc:
                raise LLMError(f"the model call failed: {exc}") from exc
            attempt += 1
            backoff = wait if wait is not None else 0.5 * 2 ** (attempt - 1)
            time.sleep(max(0.0, min(backoff, deadline - time.monotonic() - 0.1)))
        raise LLMError(f"the model call ran out of its {self.timeout:g} s deadline (MEMORYKIT_LLM_TIMEOUT)")

    def _timed_out(self) -> LLMError:
        return LLMError(f"the model did not answer within {self.timeout:g} s "
                        "(MEMORYKIT_LLM_TIMEOUT); not retried, the server may still be busy")

    def _complete(self, kwargs: dict[str, Any], remaining: float, deadline: float) -> Message:
        """One request within the ``remaining`` seconds (a subclass may stream it)."""
        return _reply(self.client.with_options(timeout=remaining).chat.completions.create(**kwargs))

    def _downgrade(self, exc: Any) -> bool:
        """A rejected response format (400/422, or llama-cpp-python's 500): step one mode down, once."""
        text = str(getattr(exc, "message", exc)).lower()
        refused = exc.status_code in (400, 415, 422, 500) and any(w in text for w in _FORMAT_WORDS)
        if not refused or self.format_mode == FORMAT_MODES[-1]:
            return False
        self.format_mode = FORMAT_MODES[FORMAT_MODES.index(self.format_mode) + 1]
        log.warning("%s rejected the structured-output request (%s); using %s from now on",
                    self.label, text[:120].replace("\n", " "), self.format_mode)
        return True


def _reply(response: Any) -> Message:
    if not response.choices:
        raise LLMError("the model returned no choices")
    reply = Message.from_openai(response.choices[0].message)
    reply.role, reply.usage = "assistant", _usage(response.usage)
    return reply


def _usage(usage: Any) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"prompt_tokens": usage.prompt_tokens or 0, "completion_tokens": usage.completion_tokens or 0}


def _with_schema_instruction(messages: list[dict[str, Any]], schema: dict) -> list[dict[str, Any]]:
    """Put the schema into the (first) system message: some templates allow only one, first."""
    note = "Answer with one JSON object that matches this JSON schema:\n" + json.dumps(schema, separators=(",", ":"))
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0], content=f"{messages[0].get('content') or ''}\n\n{note}".strip())
        return [first, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _retry_after(exc: Any) -> float | None:
    try:
        return float(exc.response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None
