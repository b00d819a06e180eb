"""OpenAI or any OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp), bounded.

Every request carries ``max_tokens``; a call has one deadline (``MEMORYKIT_LLM_TIMEOUT``)
and is retried only for 429, 5xx and connection errors while the deadline allows, never
after a timeout (the server may still be generating, and a retry would queue behind it).
Structured output is asked as ``json_schema``; a server that rejects that is asked for
``json_object``, then for plain text with the schema in the prompt, detected once per client.
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

FORMAT_MODES = ("json_schema", "json_object", "prompt")
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIChat:
    """A chat client with a per-call deadline, bounded output and a remembered JSON-mode fallback."""

    def __init__(self, model: str | None = None, *, api_key: str | None = None,
                 base_url: str | None = None, timeout: float | None = None, max_retries: int = 2,
                 temperature: float = 0.0, max_tokens: int | None = None, label: str | None = None):
        import openai

        cfg = settings()
        self.model = model or cfg.llm_model
        self.base_url = base_url or cfg.openai_base_url
        api_key = api_key or cfg.openai_api_key or ("not-needed" if self.base_url else None)
        if not api_key:
            raise LLMError("OpenAIChat needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server).")
        self.timeout = float(timeout or cfg.llm_timeout)
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens or cfg.llm_max_tokens
        self.format_mode = cfg.llm_json_mode if cfg.llm_json_mode in FORMAT_MODES else "json_schema"
        # The SDK's own retries would repeat a timed-out generation: we retry ourselves.
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=self.timeout,
                                    max_retries=0)
        self.label = label or (f"{self.model} @ {self.base_url}" if self.base_url else self.model)

    def __repr__(self) -> str:
        return f"OpenAIChat({self.label})"

    # ------------------------------------------------------------------ one request
    def chat(self, messages: Sequence[Message | dict], *, tools: list[dict] | None = None,
             tool_choice: str | dict | None = None, response_format: dict | None = None,
             max_tokens: int | None = None) -> Message:
        kwargs: dict[str, Any] = {"model": self.model, "messages": to_openai(messages),
                                  "temperature": self.temperature,
                                  "max_tokens": int(max_tokens or self.max_tokens)}
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = tool_choice or "auto"  # llama.cpp drops tools without it
        if response_format:
            self._apply_format(kwargs, response_format)
        return self._send(kwargs, response_format)

    def _apply_format(self, kwargs: dict[str, Any], response_format: dict) -> None:
        schema = response_format.get("json_schema", {}).get("schema")
        if response_format.get("type") != "json_schema" or self.format_mode == "json_schema":
            kwargs["response_format"] = response_format
            return
        if self.format_mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        kwargs["messages"] = [*kwargs["messages"], {
            "role": "system", "content": "Answer with one JSON object that matches this JSON schema:\n"
                                        + json.dumps(schema, separators=(",", ":"))}]

    def _send(self, kwargs: dict[str, Any], response_format: dict | None) -> Message:
        import openai

        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0.05:
                raise LLMError(f"the model call ran out of its {self.timeout:.0f} s deadline "
                               "(MEMORYKIT_LLM_TIMEOUT)")
            try:
                response = self.client.with_options(timeout=remaining).chat.completions.create(**kwargs)
                break
            except openai.APITimeoutError as exc:
                raise LLMError(f"the model did not answer within {self.timeout:.0f} s "
                               "(MEMORYKIT_LLM_TIMEOUT); not retried") from exc
            except openai.APIStatusError as exc:
                if exc.status_code in (400, 422) and response_format and self._downgrade(exc):
                    self._apply_format(kwargs, response_format)
                    continue
                if exc.status_code not in RETRY_STATUS or attempt >= self.max_retries:
                    raise LLMError(f"the model server answered HTTP {exc.status_code}: {exc.message}") from exc
            except openai.APIConnectionError as exc:
                if attempt >= self.max_retries:
                    raise LLMError(f"cannot reach the model server at {self.base_url or 'OpenAI'}: {exc}") from exc
            except openai.APIError as exc:
                raise LLMError(f"the model call failed: {exc}") from exc
            attempt += 1
            time.sleep(min(0.5 * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic() - 0.1)))
        if not response.choices:
            raise LLMError("the model returned no choices")
        reply = Message.from_openai(response.choices[0].message)
        reply.role = "assistant"
        if response.usage is not None:
            reply.usage = {"prompt_tokens": response.usage.prompt_tokens or 0,
                           "completion_tokens": response.usage.completion_tokens or 0}
        return reply

    def _downgrade(self, exc: Exception) -> bool:
        """A 400 about the response format: step down json_schema -> json_object -> prompt, once."""
        text = str(getattr(exc, "message", exc)).lower()
        if not any(word in text for word in ("response_format", "json_schema", "json schema", "json_object",
                                             "schema", "format")):
            return False
        index = FORMAT_MODES.index(self.format_mode)
        if index + 1 >= len(FORMAT_MODES):
            return False
        self.format_mode = FORMAT_MODES[index + 1]
        log.warning("%s rejected the structured-output request (%s); using %s from now on",
                    self.label, text[:120], self.format_mode)
        return True
