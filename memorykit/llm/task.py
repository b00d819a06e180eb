"""LLM tasks: every model job as a typed contract (:class:`Task`), and one runner, :func:`run_task`, that
asks for the output's JSON schema, validates, repairs once and raises :class:`TaskFailed`. A backend that
implements tasks itself (the offline one) exposes ``perform(task, input, tools)``, validated the same way.
"""
from __future__ import annotations

import json
import logging
import re
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Generic, Iterator, Protocol, Sequence, TypeVar

from pydantic import AfterValidator, BaseModel, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError

from ..config import price_for, settings
from ..errors import ConfigurationError, LLMError, MemoryKitError, redact
from ..messages import Message, count_tokens

log = logging.getLogger(__name__)

I = TypeVar("I", bound=BaseModel)
O = TypeVar("O", bound=BaseModel)


class TaskFailed(MemoryKitError):
    """A task got no valid answer: the server failed, timed out, or answered invalid output twice."""

    def __init__(self, task: str, reason: str, raw: str | None = None):
        super().__init__(f"task {task!r} failed: {reason}")
        self.task, self.reason, self.raw = task, reason, raw


class ChatModel(Protocol):
    """What every backend provides: one chat call, bounded and optionally structured."""

    label: str

    def chat(self, messages: Sequence[Message | dict], *, tools: list[dict] | None = None,
             tool_choice: str | dict | None = None, response_format: dict | None = None,
             max_tokens: int | None = None) -> Message: ...


_PLACEHOLDER = re.compile(r"^\s*(?:\.{3,}|…|<[^<>]{0,40}>|\[[^\[\]]{0,40}\]|string|str|text|null|none|"
                          r"todo|tbd|n/?a|your [a-z ]+ here|fact|memory|content|example)\s*\.?\s*$",
                          re.IGNORECASE)


def is_placeholder(text: str) -> bool:
    """True for an empty string or an example placeholder a model copied from a prompt ("...", "<fact>")."""
    return not text.strip() or bool(_PLACEHOLDER.match(text))


def _real_text(text: str) -> str:
    if is_placeholder(text):
        raise PydanticCustomError("placeholder", "'{text}' is empty or a placeholder, not content",
                                  {"text": text})
    return text.strip()


Text = Annotated[str, StringConstraints(min_length=1), AfterValidator(_real_text)]
"""A string field that rejects empty values and copied placeholders such as ``"..."``."""


@dataclass(frozen=True)
class Task(Generic[I, O]):
    """A model job: ``name``, system ``prompt``, ``input`` and ``output`` models, a token budget. ``render``
    turns the input into the user message; ``build`` replaces the whole message list (chat history)."""

    name: str
    prompt: str
    input: type[I]
    output: type[O] | None
    max_tokens: int = 400
    render: Callable[[I], str] = lambda inp: inp.model_dump_json(indent=1)
    build: Callable[[I], list[Message]] | None = None

    def messages(self, inp: I) -> list[Message]:
        if self.build is not None:
            return self.build(inp)
        return [Message(role="system", content=self.prompt.strip()), Message(role="user", content=self.render(inp))]

    def schema(self) -> dict[str, Any]:
        """The JSON schema the server is asked to follow (the output model's)."""
        return self.output.model_json_schema()


@dataclass
class Usage:
    """One task call: tokens in / out (from the server, or estimated), reasoning tokens (part of the
    output), the HTTP requests it took (a cut-off answer asked again counts twice), its cost and outcome.
    ``cost`` is USD by the price table: 0 for a local or offline model, None for a model not in the table."""

    task: str
    prompt_tokens: int
    completion_tokens: int
    ok: bool = True
    estimated: bool = False
    error: str | None = None
    reasoning_tokens: int = 0
    requests: int = 1
    model: str = ""
    cost: float | None = 0.0
    cached_tokens: int = 0   # of prompt_tokens, read from the server's prompt cache (billed lower)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def cost_of(llm: Any, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
    """USD for one call on ``llm``: priced by ``config.PRICES`` for OpenAI (the ``cached_tokens`` of
    ``prompt_tokens`` at the cached-input rate), 0 for other servers."""
    if not getattr(llm, "priced", False):
        return 0.0
    price = price_for(getattr(llm, "model", ""))
    if price is None:
        return None
    cached = min(cached_tokens, prompt_tokens)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    return ((prompt_tokens - cached) * price.input + cached * cached_rate + completion_tokens * price.output) / 1e6


_collectors: ContextVar[tuple[list[Usage], ...]] = ContextVar("memorykit_usage", default=())
_meters: dict[int, list["UsageMeter"]] = {}
_meters_lock = threading.Lock()


@contextmanager
def track_usage() -> Iterator[list[Usage]]:
    """Collect every task call made inside the block (in this thread / context); blocks nest."""
    calls: list[Usage] = []
    token = _collectors.set((*_collectors.get(), calls))
    try:
        yield calls
    finally:
        _collectors.reset(token)


def total_cost(usage: Sequence[Usage]) -> float | None:
    """USD for these calls by the price table (0 offline or local; None if any model is unpriced)."""
    costs = [u.cost for u in usage]
    return None if any(c is None for c in costs) else sum(costs)


@dataclass
class UsageMeter:
    """Every task call one model client made while the meter ran, from any thread: calls, tokens, cost."""

    calls: list[Usage]

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.calls)

    @property
    def cost(self) -> float | None:
        return total_cost(self.calls)

    def __str__(self) -> str:
        reasoning = sum(u.reasoning_tokens for u in self.calls)
        think = f" ({reasoning:,} reasoning)" if reasoning else ""
        guess = " (some estimated)" if any(u.estimated for u in self.calls) else ""
        cost = "cost unknown (model not in the price table)" if self.cost is None else f"${self.cost:.4f}"
        return f"{len(self.calls)} model calls, {self.tokens:,} tokens{think}{guess}, {cost}"


@contextmanager
def usage_meter(llm: Any) -> Iterator[UsageMeter]:
    """``with usage_meter(llm) as m: ...; print(m)`` -> "12 model calls, 8,431 tokens, $0.0031"."""
    meter = UsageMeter([])
    with _meters_lock:
        _meters.setdefault(id(llm), []).append(meter)
    try:
        yield meter
    finally:
        with _meters_lock:
            _meters[id(llm)].remove(meter)
            if not _meters[id(llm)]:
                del _meters[id(llm)]


_task_name: ContextVar[str] = ContextVar("memorykit_task", default="chat")


def log_request(model: str, usage: dict[str, int]) -> None:
    """Append one model request to ``MEMORYKIT_USAGE_LOG`` (a JSON-lines file) when it is set: how
    ``scripts/model_calls.py`` counts a whole notebook's calls, plain chats and tasks alike."""
    if path := settings().usage_log:
        with open(path, "a", encoding="utf-8") as log_file:
            log_file.write(json.dumps({"task": _task_name.get(), "model": model, **usage}) + "\n")


def _record(usage: Usage, llm: Any = None) -> Usage:
    for calls in _collectors.get():
        calls.append(usage)
    with _meters_lock:
        meters = list(_meters.get(id(llm), ()))
    for meter in meters:
        meter.calls.append(usage)
    return usage


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def parse_json(text: str) -> Any:
    """The first JSON value in a model's reply (code fences, prose around it, raw line breaks in strings tolerated);
    else ValueError saying where it failed, not what the reply said (it may restate the user, and errors reach logs)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty model output")
    decoder, problem = json.JSONDecoder(strict=False), f"no JSON found in the model output ({len(text)} characters)"
    for candidate in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        candidate = candidate.strip()
        for i, ch in enumerate(candidate):
            if ch in "[{":
                try:
                    return decoder.raw_decode(candidate[i:])[0]
                except json.JSONDecodeError as exc:
                    if problem.startswith("no JSON"):
                        problem = f"invalid JSON ({exc.msg}) at char {i + exc.pos} of {len(candidate)}"
    raise ValueError(problem)


def error_kinds(exc: ValidationError, part: str = "type") -> str:
    """A validation error by field and error type, never the value (a model's output may restate the user);
    ``part="msg"``: with pydantic's messages, for the model's repair prompt."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e[part]}" for e in exc.errors()[:3])


def _problem(exc: Exception) -> tuple[str, str]:
    """What was wrong with an answer: in full for the model's repair prompt, and by kind for reasons and logs."""
    if isinstance(exc, ValidationError):
        return error_kinds(exc, "msg"), error_kinds(exc)
    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return text, redact(text)  # positions, counts, the prompt's words or a server's error: never the answer


_QUOTED = re.compile(r'(?="([^"]{2,160})")')  # every quoted span, also those a stray quote would misalign
_WORDS = re.compile(r"[^\W_]+")
_FUNCTION_WORDS = set("user user's the a an to of in on at for with and or is are was be their his her my i".split())


def _norm(text: str) -> str:
    return " ".join(text.casefold().strip().rstrip(".").split())


def _strings(data: Any) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, (dict, list)):
        for value in data.values() if isinstance(data, dict) else data:
            yield from _strings(value)


def copied_example(task: Task, inp: BaseModel, out: BaseModel) -> str | None:
    """A value of ``out`` (three words or more) that the prompt quotes as an example and the input does not
    say, or None: small models copy an instruction's examples ("User prefers window seats")."""
    examples = {_norm(q) for q in _QUOTED.findall(task.prompt)}
    said = set(_WORDS.findall(task.render(inp).casefold()))
    for value in _strings(out.model_dump(mode="json")):
        words = set(_WORDS.findall(value.casefold())) - _FUNCTION_WORDS
        if len(value.split()) >= 3 and _norm(value) in examples and len(words & said) < len(words) / 2:
            return value
    return None


def _checked(task: Task, out: Any) -> Any:
    """``out`` as the task's output model; for a chat reply, an assistant message with text or tool calls."""
    if task.output is not None:
        return task.output.model_validate(out.model_dump() if isinstance(out, BaseModel) else out)
    if not isinstance(out, Message) or out.role != "assistant" or (is_placeholder(out.content) and not out.tool_calls):
        raise LLMError(f"the model returned an empty reply or no assistant message ({type(out).__name__})")
    return out


def run_task(llm: ChatModel, task: Task[I, O], inp: I, *, tools: list[dict] | None = None) -> O | Message:
    """Run ``task`` on ``llm``: the validated output (a ``Message`` for ``output=None``), or one
    :class:`TaskFailed` for every failure (server error, timeout, invalid output twice)."""
    if llm is None:
        raise ConfigurationError(f"task {task.name!r} needs a model: pass llm= (get_llm() builds the configured one)")
    if not isinstance(inp, task.input):
        inp = task.input.model_validate(inp)
    budget = settings().max_tokens_for(task.name, task.max_tokens)
    try:
        if not hasattr(llm, "perform"):
            return _run_remote(llm, task, inp, tools, budget)
        result = _checked(task, llm.perform(task, inp, tools=tools))
        _record(Usage(task.name, count_tokens(task.render(inp)), 0, estimated=True,
                      model=getattr(llm, "label", "")), llm)
        return result
    except TaskFailed:
        raise  # the failed call's usage record already says so
    except (ValueError, LLMError) as exc:  # pydantic's ValidationError is a ValueError
        reason, spent = _problem(exc)[1], getattr(exc, "usage", None) or {}  # a filtered answer is billed
        tokens = (spent.get("prompt_tokens", 0), spent.get("completion_tokens", 0), spent.get("cached_tokens", 0))
        _record(Usage(task.name, *tokens[:2], ok=False, error=reason, requests=spent.get("calls", 0),
                      model=getattr(llm, "model", ""), cost=cost_of(llm, *tokens) if spent else 0.0,
                      cached_tokens=tokens[2]), llm)
        raise TaskFailed(task.name, reason, getattr(exc, "text", None)) from exc


def _run_remote(llm: ChatModel, task: Task, inp: BaseModel, tools: list[dict] | None, budget: int):
    messages = task.messages(inp)
    if task.output is None:
        reply, usage = _chat(llm, task, messages, tools=tools or None, tool_choice="auto" if tools else None,
                             max_tokens=budget)
        try:
            return _checked(task, reply)
        except LLMError as exc:
            usage.ok, usage.error = False, str(exc)
            raise TaskFailed(task.name, usage.error, reply.content) from exc
    response_format = {"type": "json_schema",
                       "json_schema": {"name": re.sub(r"[^A-Za-z0-9_-]", "_", task.name)[:64],
                                       "schema": task.schema(), "strict": False}}
    for attempt in range(2):
        reply, usage = _chat(llm, task, messages, response_format=response_format, max_tokens=budget)
        try:
            out = _checked(task, parse_json(reply.content))
            copied = copied_example(task, inp, out)
            if copied is not None:
                raise ValueError(f"{copied!r} is the prompt's example, not taken from the input")
            return out
        except ValueError as exc:
            error, kind = _problem(exc)
            log.info("task %s: invalid output (%s), %s", task.name, kind,
                     "repairing once" if attempt == 0 else "giving up")
            log.debug("task %s: the invalid output was %r", task.name, reply.content)
            messages = [*messages, Message(role="assistant", content=reply.content or ""),
                        Message(role="user", content=f"That answer was invalid: {error}. Reply again with "
                                                     "only a JSON object that matches the schema.")]
    usage.ok, usage.error = False, f"invalid output after one repair: {kind}"
    raise TaskFailed(task.name, usage.error, reply.content)


def add_usage(a: dict[str, int] | None, b: dict[str, int] | None) -> dict[str, int] | None:
    """Two calls' usage summed (estimated if either was; truncated if the last was)."""
    if a is None or b is None:
        return a or b
    total = {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
    total["estimated"] = int(bool(a.get("estimated") or b.get("estimated")))
    total["truncated"] = b.get("truncated", 0)
    return total


def _chat(llm: ChatModel, task: Task, messages: list[Message], **kwargs: Any) -> tuple[Message, Usage]:
    """One chat call, recorded with the server's token counts (estimated when it sends none) and cost. An
    answer cut off at its budget (``finish_reason: length``) is asked for once more with twice the room (at
    most ``MEMORYKIT_LLM_MAX_TOKENS_CAP``); cut off again, the task fails. Both requests count."""
    token = _task_name.set(task.name)
    try:
        reply = llm.chat(messages, **kwargs)
    finally:
        _task_name.reset(token)
    if (getattr(reply, "usage", None) or {}).get("truncated"):
        budget = min(2 * kwargs["max_tokens"], settings().llm_max_tokens_cap)
        log.info("task %s: answer cut off at %d tokens; once more with %d", task.name, kwargs["max_tokens"], budget)
        token, first = _task_name.set(task.name), reply.usage
        try:
            reply = llm.chat(messages, **{**kwargs, "max_tokens": budget})
        except LLMError as exc:  # the first request is billed all the same
            exc.usage = add_usage(first, getattr(exc, "usage", None))
            raise
        finally:
            _task_name.reset(token)
        reply.usage = add_usage(first, reply.usage)
    counts = getattr(reply, "usage", None) or {}
    prompt, completion = counts.get("prompt_tokens"), counts.get("completion_tokens")
    prompt = count_tokens(messages) if prompt is None else prompt
    completion = count_tokens(reply.content or "") if completion is None else completion
    usage = _record(Usage(task.name, prompt, completion, estimated=bool(counts.get("estimated", not counts)),
                          reasoning_tokens=counts.get("reasoning_tokens", 0), requests=counts.get("calls", 1),
                          model=getattr(llm, "model", getattr(llm, "label", "")),
                          cost=cost_of(llm, prompt, completion, counts.get("cached_tokens", 0)),
                          cached_tokens=counts.get("cached_tokens", 0)), llm)
    if counts.get("truncated"):
        usage.ok, usage.error = False, "the answer was cut off at its token budget twice (finish_reason: length)"
        raise TaskFailed(task.name, usage.error + f"; raise MEMORYKIT_LLM_MAX_TOKENS_{task.name.upper()}",
                         reply.content)
    return reply, usage
