"""OpenAI or any OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp), each in the request shape its
family documents, learned once per client: OpenAI takes ``max_completion_tokens`` and strict structured
outputs, its reasoning models no ``temperature`` but a ``reasoning_effort``; other servers ``max_tokens`` and
plain ``json_schema``, then a fallback ladder. Every request bounded; one deadline per call; retries only
for 429, 5xx and connection errors, never after a timeout; a 400 naming a parameter teaches the client once,
and a 400 refusing one schema in strict mode sends that schema non-strict from then on (the others stay strict).
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from email.utils import parsedate_to_datetime
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Sequence

from ..config import settings
from ..errors import LLMError, redact
from ..messages import Message, count_tokens, to_openai
from .schema import hoist_defs, strict_schema
from .task import add_usage, log_request  # noqa: F401  (add_usage re-exported for LlamaCppChat)

log = logging.getLogger(__name__)

FORMAT_MODES = ("json_schema", "json_object_schema", "json_object", "prompt")
FAMILIES = ("openai", "compatible")
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
_FORMAT_WORDS = ("response_format", "json_schema", "json schema", "json_object")
_REASONING = re.compile(r"^(o\d|gpt-5)(?!.*-chat)")
_VALIDATION = ("validation error", "literal_error", "input should be", "extra_forbidden")
MAX_LOOSE = 64   # schemas refused in strict mode a client remembers before it stops sending any strict
_TOO_LONG = ("maximum context length", "is too large", "too many tokens", "context_length_exceeded")


def is_reasoning(model: str) -> bool:
    """OpenAI's reasoning models (gpt-5*, o1/o3/o4...): no temperature, a reasoning effort instead."""
    return bool(_REASONING.match(model.lower()))


def family_of(base_url: str | None) -> str:
    """``MEMORYKIT_LLM_FAMILY`` if set; else "openai" for api.openai.com (or no base URL), else "compatible"."""
    chosen = (settings().llm_family or "").lower()
    if chosen:
        if chosen not in FAMILIES:
            raise LLMError(f"MEMORYKIT_LLM_FAMILY must be one of {FAMILIES}, got {chosen!r}")
        return chosen
    host = re.sub(r"^[a-z]+://", "", (base_url or "").lower()).split("/")[0].split(":")[0]
    openai_host = not base_url or host == "api.openai.com" or host.endswith(".openai.azure.com")
    return "openai" if openai_host else "compatible"   # Azure OpenAI's v1 API takes OpenAI's request rules


class Refusal(LLMError):
    """The model declined to answer (``message.refusal``); ``text`` is what it said."""

    def __init__(self, text: str):
        super().__init__(f"the model refused ({len(text)} characters, in .text)", kind="refusal")  # not logged
        self.text = text


class Filtered(LLMError):
    """The server's content filter withheld (part of) the answer (``finish_reason: content_filter``): what came
    is not the answer, so it is neither used nor repaired."""

    def __init__(self, usage: dict[str, int] | None = None) -> None:
        super().__init__("the model server's content filter withheld the answer (finish_reason: content_filter)",
                         kind="filtered")
        self.usage = usage


@dataclass(frozen=True)
class Shape:
    """What this client sends a server: the token parameter, temperature, reasoning effort, structured-
    output mode, strict schemas and tools, usage on streams. Changed only by a 400 naming a parameter."""

    tokens: str
    temperature: bool
    reasoning_effort: str | None
    format_mode: str
    strict: bool
    stream_usage: bool = True


@dataclass
class _Call:
    messages: list[dict]
    max_tokens: int
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None


class OpenAIChat:
    """A chat client with a per-call deadline, bounded output, exact usage where the server reports it,
    and request shapes per server family (llama-cpp-python's quirks: ``course.local_model``)."""

    def __init__(self, model: str | None = None, *, api_key: str | None = None, base_url: str | None = None,
                 timeout: float | None = None, max_retries: int = 2, label: str | None = None,
                 format_mode: str | None = None, family: str | None = None):
        import openai

        cfg = settings()
        self.model = model or cfg.llm_model
        self.base_url = base_url or cfg.openai_base_url
        api_key = api_key or cfg.openai_api_key or ("not-needed" if self.base_url else None)
        if not api_key:
            raise LLMError("OpenAIChat needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server).")
        mode = format_mode or cfg.llm_json_mode
        if mode not in FORMAT_MODES:
            raise LLMError(f"MEMORYKIT_LLM_JSON_MODE must be one of {FORMAT_MODES}, got {mode!r}")
        self.family = family or family_of(self.base_url)
        self.reasoning = self.family == "openai" and is_reasoning(self.model)
        self.thinks = False  # a model behind a compatible server that sent its thought (learned from a reply)
        openai_family = self.family == "openai"
        self._shape = Shape(tokens="max_completion_tokens" if openai_family else "max_tokens",
                            temperature=not self.reasoning,
                            reasoning_effort=cfg.llm_reasoning_effort if self.reasoning else None,
                            format_mode=mode, strict=openai_family)
        self._lock = threading.Lock()
        self._learned: set[str] = set()
        self._loose: frozenset[str] = frozenset()   # schemas a server refused in strict mode: sent non-strict
        self.timeout = float(timeout or cfg.llm_timeout)
        self.max_tokens = cfg.llm_max_tokens
        self.max_retries = max_retries
        # The SDK's own retries would repeat a timed-out generation: we retry ourselves.
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        self.label = redact(label or (f"{self.model} @ {self.base_url}" if self.base_url else self.model))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label})"

    @property
    def shape(self) -> Shape:
        """The request shape in use now (a snapshot)."""
        with self._lock:
            return self._shape

    @property
    def format_mode(self) -> str:
        return self.shape.format_mode

    @property
    def priced(self) -> bool:
        """True when calls cost money by the price table (OpenAI); a local or compatible server costs 0."""
        return self.family == "openai"

    def chat(self, messages: Sequence[Message | dict], *, tools: list[dict] | None = None,
             tool_choice: str | dict | None = None, response_format: dict | None = None,
             max_tokens: int | None = None) -> Message:
        """One bounded chat completion; raises :class:`LLMError` when it cannot get one in time."""
        return self._request(to_openai(messages), time.monotonic() + self.timeout, tools=tools,
                             tool_choice=tool_choice, response_format=response_format, max_tokens=max_tokens)

    def _request(self, plain: list[dict], deadline: float, *, tools: list[dict] | None = None,
                 tool_choice: str | dict | None = None, response_format: dict | None = None,
                 max_tokens: int | None = None) -> Message:
        call = _Call(plain, int(max_tokens or self.max_tokens), tools or None, tool_choice, response_format)
        return self._send(call, deadline)

    def budget(self, max_tokens: int) -> int:
        """The output budget sent: a reasoning model also gets room to think (MEMORYKIT_LLM_REASONING_TOKENS):
        OpenAI's by name, any other once a reply showed its thought or counted reasoning tokens (gpt-oss, Qwen3,
        DeepSeek-R1 on Ollama or vLLM; a gpt-5 deployment on Azure under a name of its own): they think inside the
        output budget, and a small task's budget ends in the thought, with no answer."""
        return max_tokens + (settings().llm_reasoning_tokens if self.reasoning or self.thinks else 0)

    def body(self, call: _Call, shape: Shape) -> dict[str, Any]:
        """The request for ``call`` in ``shape``."""
        body: dict[str, Any] = {"model": self.model, "messages": call.messages,
                                shape.tokens: self.budget(call.max_tokens)}
        if shape.temperature:
            body["temperature"] = 0.0
        if shape.reasoning_effort:
            body["reasoning_effort"] = shape.reasoning_effort
        if call.tools:
            body["tools"] = [_strict_tool(t) if shape.strict and _key(t) not in self._loose else _plain_tool(t)
                             for t in call.tools]
            body["tool_choice"] = call.tool_choice or "auto"  # llama.cpp drops tools without it
        if call.response_format:
            _apply_format(body, call, replace(shape, strict=shape.strict and _key(call.response_format)
                                              not in self._loose))
        return body

    def _send(self, call: _Call, deadline: float) -> Message:
        import openai

        attempt = 0
        while (remaining := deadline - time.monotonic()) > 0.05:
            shape = self.shape
            body = self.body(call, shape)
            try:
                reply, finish = self._complete(body, remaining, deadline)
            except openai.APITimeoutError as exc:
                raise self._timed_out() from exc
            except openai.APIStatusError as exc:
                if getattr(exc, "code", None) == "content_filter":  # Azure's filter on the prompt: an HTTP 400
                    raise Filtered() from exc
                if self._learn(exc, shape, call, body):
                    continue
                wait = _retry_after(exc)
                late = wait is not None and wait > deadline - time.monotonic() - 0.1
                if exc.status_code not in RETRY_STATUS or attempt >= self.max_retries or late:
                    asked = f" (asked to retry after {wait:g} s, past the deadline)" if late else ""
                    raise LLMError(f"the model server answered HTTP {exc.status_code}{asked}: "
                                   f"{redact(str(exc.message)[:300])}", status=exc.status_code,
                                   kind="server" if exc.status_code >= 500 else "refused") from exc
            except openai.APIConnectionError as exc:
                if attempt >= self.max_retries:
                    raise LLMError(redact(f"cannot reach the model server at {self.base_url or 'OpenAI'}: {exc}"),
                                   kind="unreachable") from exc
                wait = None
            except openai.APIError as exc:
                raise LLMError(f"the model call failed: {exc}") from exc
            else:
                reply.usage = reply.usage or estimated_usage(call.messages, reply.content)
                if reply.usage.get("reasoning_tokens") and not (self.reasoning or self.thinks):
                    self._thinking()
                reply.usage["truncated"] = int(finish == "length")  # run_task asks once more, with more room
                log_request(self.model, reply.usage)
                if finish == "content_filter":
                    raise Filtered(reply.usage)  # billed all the same
                return reply
            attempt += 1
            backoff = wait if wait is not None else 0.5 * 2 ** (attempt - 1)
            time.sleep(max(0.0, min(backoff, deadline - time.monotonic() - 0.1)))
        raise LLMError(f"the model call ran out of its {self.timeout:g} s deadline (MEMORYKIT_LLM_TIMEOUT)",
                       kind="timeout")

    def _timed_out(self) -> LLMError:
        return LLMError(f"the model did not answer within {self.timeout:g} s "
                        "(MEMORYKIT_LLM_TIMEOUT); not retried, the server may still be busy", kind="timeout")

    def _complete(self, body: dict[str, Any], remaining: float, deadline: float) -> tuple[Message, str | None]:
        """One request within the ``remaining`` seconds: the reply and its finish reason (a subclass may
        stream it)."""
        response = self.client.with_options(timeout=remaining).chat.completions.create(**body)
        message = getattr(response.choices[0], "message", None) if getattr(response, "choices", None) else None
        if not self.thinks and any(getattr(message, f, None) for f in ("reasoning_content", "reasoning")):
            self._thinking()
        return _reply(response)

    def _thinking(self) -> None:
        """From now on, requests (a cut-off task's second try among them) get room to think."""
        self.thinks = True
        log.warning("%s thinks before answering: each request now adds %d tokens for it "
                    "(MEMORYKIT_LLM_REASONING_TOKENS)", self.label, settings().llm_reasoning_tokens)

    def _learn(self, exc: Any, sent: Shape, call: _Call, body: dict[str, Any]) -> bool:
        """True when ``exc`` is a request the server refused for a parameter it names, and the shape now
        differs (learned here, once per parameter, or by another thread meanwhile), or for a schema it sent
        strict, now sent non-strict: send it again. A prompt too long for the model teaches nothing."""
        text = str(getattr(exc, "message", exc)).lower()
        validation = exc.status_code in (400, 415, 422) or (exc.status_code == 500 and any(
            w in text for w in _VALIDATION))  # llama-cpp-python answers a request it cannot parse with 500
        if not validation or any(w in text for w in _TOO_LONG):
            return False
        with self._lock:
            if "invalid schema" in text:  # before the parameter names a schema's own property may spell
                return self._loosen(call, body, text)
            if self._shape != sent:
                return True
            change = _lesson(text, sent, self.reasoning)
            if change is None or change[0] in self._learned:
                return False
            name, self._shape = change[0], replace(sent, **change[1])
            self._learned.add(name)
        log.warning("%s refused %s (%s); adjusted from now on", self.label, name,
                    redact(text[:120]).replace("\n", " "))
        return True

    def _loosen(self, call: _Call, body: dict[str, Any], text: str) -> bool:
        """A schema this request sent strict and the server refused ("invalid schema for function 'x'" / "for
        response_format 'y'") goes non-strict from now on: the one the message names, else every one sent strict.
        Other schemas, other users' among them, stay strict; past ``MAX_LOOSE`` refused schemas, none is sent
        strict (a server that refuses them all). Called under the lock."""
        names = {_key(t): t.get("function", {}).get("name", "")
                 for t, b in zip(call.tools or (), body.get("tools") or ()) if b.get("function", {}).get("strict")}
        spec = (body.get("response_format") or {}).get("json_schema") or {}
        if spec.get("strict"):
            names[_key(call.response_format)] = spec.get("name", "")
        mine = {k for k, name in names.items() if name and f"'{name.lower()}'" in text} or set(names)
        if not mine:
            return False  # nothing went strict: the refusal is about something else
        new = mine - self._loose
        if not new:
            return True  # another request marked them meanwhile: this one goes again, non-strict
        if len(self._loose) + len(new) > MAX_LOOSE:
            self._shape, self._loose = replace(self._shape, strict=False), frozenset()
            self._learned.add("strict")
        else:
            self._loose = self._loose | new
        log.warning("%s refused a schema in strict mode (%s); %s", self.label, redact(text[:120]).replace("\n", " "),
                    "strict mode is off for this client" if not self._shape.strict else "that schema goes non-strict")
        return True


def _lesson(text: str, shape: Shape, reasoning: bool) -> tuple[str, dict[str, Any]] | None:
    """What a refusal's message teaches: (parameter, shape change), or None when it names nothing we send."""
    if shape.tokens in text:
        other = "max_tokens" if shape.tokens == "max_completion_tokens" else "max_completion_tokens"
        return shape.tokens, {"tokens": other}
    if "temperature" in text and shape.temperature:
        return "temperature", {"temperature": False}
    if "reasoning_effort" in text and shape.reasoning_effort:
        return "reasoning_effort", {"reasoning_effort": None}
    if "stream_options" in text and shape.stream_usage:
        return "stream_options", {"stream_usage": False}
    if shape.strict and "strict" in text:  # the parameter itself ("unknown parameter: 'tools[0].function.strict'")
        return "strict", {"strict": False}
    if any(w in text for w in _FORMAT_WORDS) and shape.format_mode != FORMAT_MODES[-1]:
        step = FORMAT_MODES[FORMAT_MODES.index(shape.format_mode) + 1]
        return f"response_format {shape.format_mode}", {"format_mode": step}
    return None


def _key(entry: dict) -> str:
    """A tool entry or response format, identified by its content."""
    return hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()[:24]


@lru_cache(maxsize=256)
def _strict_cached(schema_json: str, nullable_optional: bool) -> str:
    return json.dumps(strict_schema(json.loads(schema_json), nullable_optional=nullable_optional))


def _strict(schema: dict, nullable_optional: bool = False) -> dict | None:
    return json.loads(_strict_cached(json.dumps(schema), nullable_optional))  # key order is meaning: kept


def _plain_tool(tool: dict) -> dict:
    """A tool entry without ``strict`` (a key servers other than OpenAI's may refuse)."""
    fn = tool.get("function", {})
    return {**tool, "function": {k: v for k, v in fn.items() if k != "strict"}} if "strict" in fn else tool


def _strict_tool(tool: dict) -> dict:
    """A tool entry with ``strict: true`` when its parameters can be strict (optional ones nullable), and its
    author did not say ``strict: false``."""
    fn = tool.get("function", {})
    if fn.get("strict") is False:
        return tool
    params = _strict(fn.get("parameters") or {"type": "object", "properties": {}}, nullable_optional=True)
    return tool if params is None else {**tool, "function": {**fn, "parameters": params, "strict": True}}


def _apply_format(body: dict[str, Any], call: _Call, shape: Shape) -> None:
    """``response_format`` (and, below json_object_schema, the system message) for the shape's mode."""
    requested = call.response_format
    if requested.get("type") != "json_schema":
        body["response_format"] = requested
        return
    spec = requested.get("json_schema", {})
    schema = hoist_defs(spec.get("schema") or {"type": "object"})
    mode = shape.format_mode
    if mode == "json_schema":
        strict = _strict(schema) if shape.strict else None
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": spec.get("name", "answer"), "schema": strict or schema, "strict": strict is not None}}
    elif mode == "json_object_schema":
        body["response_format"] = {"type": "json_object", "schema": schema}
    elif mode == "json_object":
        body["response_format"] = {"type": "json_object"}
    if mode in ("json_object", "prompt"):
        body["messages"] = _with_schema_instruction(call.messages, schema)


def _reply(response: Any) -> tuple[Message, str | None]:
    if not hasattr(response, "choices"):  # the SDK hands back the body as text when it is no JSON (a proxy's page)
        raise LLMError(f"the model server answered with no chat completion: {str(response)[:80]!r}")
    if not response.choices:
        raise LLMError("the model returned no choices")
    choice = response.choices[0]
    if getattr(choice.message, "refusal", None):
        raise Refusal(choice.message.refusal)
    reply = Message.from_openai(choice.message)
    reply.role, reply.usage = "assistant", usage_of(response.usage)
    return reply, choice.finish_reason


def usage_of(usage: Any) -> dict[str, int] | None:
    """A server's usage object as a dict: prompt, completion and reasoning tokens, one call, exact."""
    if usage is None:
        return None
    details = getattr(usage, "completion_tokens_details", None)
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None) or 0
    return {"prompt_tokens": usage.prompt_tokens or 0, "completion_tokens": usage.completion_tokens or 0,
            "reasoning_tokens": getattr(details, "reasoning_tokens", None) or 0, "cached_tokens": cached,
            "calls": 1, "estimated": 0}


def estimated_usage(plain: list[dict], text: str) -> dict[str, int]:
    """Counted here when a server reports nothing (marked ``estimated``)."""
    return {"prompt_tokens": count_tokens(json.dumps(plain)), "completion_tokens": count_tokens(text),
            "reasoning_tokens": 0, "calls": 1, "estimated": 1}


def _with_schema_instruction(messages: list[dict[str, Any]], schema: dict) -> list[dict[str, Any]]:
    """Put the schema into the (first) system message: some templates allow only one, first."""
    note = "Answer with one JSON object that matches this JSON schema:\n" + json.dumps(schema, separators=(",", ":"))
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0], content=f"{messages[0].get('content') or ''}\n\n{note}".strip())
        return [first, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _retry_after(exc: Any) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms`` (OpenAI), ``retry-after`` in seconds or as an HTTP
    date; None when it says nothing."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
            except (TypeError, ValueError):
                continue
    return None
