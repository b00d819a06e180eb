"""One small chat interface and two backends: an OpenAI-compatible client and an offline one.

``chat(messages, tools=None, response_format=None) -> Message`` is all the course needs.

* :class:`OpenAIChat` talks to OpenAI or any OpenAI-compatible server (Ollama, vLLM,
  LM Studio) chosen by ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` / ``MEMORYKIT_LLM``.
* :class:`OfflineChat` is the default without a key: deterministic and rule-based,
  labelled "offline" in every reply. It is not a language model. Each prompt memorykit
  builds names its task in the system message (``[task: extract_memories]``); the offline
  backend runs the matching *skill*, a plain function registered with
  :func:`offline_skill` by the module that owns the task. A real model simply reads the
  same prompt.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any, Callable, Protocol, Sequence

from ..config import settings
from ..errors import LLMError
from ..messages import Message, as_message, to_openai

log = logging.getLogger(__name__)

OFFLINE_LABEL = "offline"
TASK_MARKER = re.compile(r"\[task:\s*([a-z_]+)\]")


class ChatModel(Protocol):
    """What every backend provides."""

    label: str

    def chat(self, messages: Sequence[Message | dict], tools: list[dict] | None = None,
             response_format: dict | None = None) -> Message: ...


def task_prompt(task: str, text: str) -> str:
    """A system prompt that names its task, so the offline backend can run the right skill."""
    return f"[task: {task}]\n{text.strip()}"


# ---------------------------------------------------------------- JSON from model output
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def parse_json(text: str) -> Any:
    """The first JSON value in a model's reply: tolerates code fences and prose around it.

    Raises ``ValueError`` when no JSON value can be found.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty model output")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        candidate = candidate.strip()
        for i, ch in enumerate(candidate):
            if ch in "[{":
                try:
                    value, _ = decoder.raw_decode(candidate[i:])
                    return value
                except json.JSONDecodeError:
                    continue
    raise ValueError(f"no JSON found in model output: {text[:80]!r}")


# ---------------------------------------------------------------- OpenAI-compatible backend
class OpenAIChat:
    """OpenAI or any OpenAI-compatible server. Retries 429 / 5xx (the SDK's backoff), then raises LLMError."""

    def __init__(self, model: str | None = None, *, api_key: str | None = None,
                 base_url: str | None = None, timeout: float | None = None,
                 max_retries: int = 2, temperature: float = 0.0):
        import openai

        cfg = settings()
        self.model = model or cfg.llm_model
        base_url = base_url or cfg.openai_base_url
        api_key = api_key or cfg.openai_api_key or ("not-needed" if base_url else None)
        if not api_key:
            raise LLMError("OpenAIChat needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server).")
        self.temperature = temperature
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url,
                                    timeout=timeout or cfg.llm_timeout, max_retries=max_retries)
        self.label = f"{self.model} @ {base_url}" if base_url else self.model

    def chat(self, messages, tools=None, response_format=None) -> Message:
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": to_openai(messages),
                                  "temperature": self.temperature}
        if tools:
            kwargs["tools"] = tools
        if response_format:
            kwargs["response_format"] = response_format
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.APIStatusError as exc:
            raise LLMError(f"the model server answered HTTP {exc.status_code}: {exc.message}") from exc
        except openai.APIError as exc:
            raise LLMError(f"the model call failed: {exc}") from exc
        if not response.choices:
            raise LLMError("the model returned no choices")
        reply = Message.from_openai(response.choices[0].message)
        reply.role = "assistant"
        return reply

    def __repr__(self) -> str:
        return f"OpenAIChat({self.label})"


# ---------------------------------------------------------------- offline backend
Skill = Callable[..., "Message | str"]
SKILLS: dict[str, Skill] = {}


def offline_skill(task: str) -> Callable[[Skill], Skill]:
    """Register ``fn(messages, tools=None, response_format=None) -> Message | str`` for a task."""

    def register(fn: Skill) -> Skill:
        SKILLS[task] = fn
        return fn

    return register


def find_task(messages: Sequence[Message]) -> str:
    for m in messages:
        if m.role == "system":
            found = TASK_MARKER.search(m.content)
            if found:
                return found.group(1)
    return "reply"


class OfflineChat:
    """Deterministic, rule-based stand-in for a model; every reply is labelled offline."""

    label = OFFLINE_LABEL

    def chat(self, messages, tools=None, response_format=None) -> Message:
        msgs = [as_message(m) for m in messages]
        task = find_task(msgs)
        skill = SKILLS.get(task)
        if skill is None:
            raise LLMError(f"the offline model has no skill for task {task!r}; known: {sorted(SKILLS)}")
        out = skill(msgs, tools=tools, response_format=response_format)
        reply = out if isinstance(out, Message) else Message(role="assistant", content=out)
        reply.name = OFFLINE_LABEL
        return reply

    def __repr__(self) -> str:
        return "OfflineChat(rule-based, deterministic)"


def get_llm(kind: str | None = None) -> ChatModel:
    """``MEMORYKIT_LLM`` (offline | openai) if set; else OpenAI when a key or base URL is set; else offline."""
    cfg = settings()
    kind = (kind or cfg.llm or "").lower()
    if kind == "offline" or (not kind and not (cfg.openai_api_key or cfg.openai_base_url)):
        return OfflineChat()
    if kind in ("", "openai"):
        return OpenAIChat()
    raise LLMError(f"MEMORYKIT_LLM must be 'offline' or 'openai', got {kind!r}")


def why_llm() -> str:
    """One sentence on which backend get_llm() picks and why (shown in notebook 00)."""
    cfg = settings()
    if (cfg.llm or "").lower() == "offline":
        return "OfflineChat, because MEMORYKIT_LLM=offline"
    if (cfg.llm or "").lower() == "openai" or cfg.openai_api_key or cfg.openai_base_url:
        return f"OpenAIChat ({cfg.llm_model}), because an OpenAI key or base URL is set"
    return "OfflineChat (rule-based, deterministic), because no OPENAI_API_KEY or OPENAI_BASE_URL is set"


# ---------------------------------------------------------------- the default skill: a reply
_NAME_INTRO = re.compile(
    r"\b(?:my name is|my name's|i am called|i'm called|call me|name's)\s+([A-Z][\w'-]+)"
    r"|\b(?:i am|i'm)\s+([A-Z][a-z][\w'-]+)\b", re.IGNORECASE)
_NAME_FACT = re.compile(r"\bname(?: is|'s|:)\s*([A-Z][\w'-]+)|\bcall(?:s|ed)? (?:me|them|the user)\s+([A-Z][\w'-]+)")
_ANAPHORA = re.compile(r"\b(that|it|this|those|these|they)\b", re.IGNORECASE)
_RECALL_PREFIX = re.compile(r"^\d{4}-\d{2}-\d{2} (?:user|assistant): ")
_MEMORY_LINE = re.compile(r"^\s*(?:[-*•]\s*)?(?:\[(?:[A-Z_]+)\]\s*)?(.+?)\s*$")
_NOT_A_NAME = {"not", "so", "very", "just", "going", "planning", "looking", "trying", "a", "the", "from",
               "in", "at", "allergic", "vegan", "vegetarian", "married", "happy", "sorry", "fine", "good",
               "here", "back", "new", "interested", "afraid", "sure", "also", "still", "really", "learning"}


def offline_name(text: str) -> str | None:
    """A name the user gives for themselves ("my name's Raphael", "call me Sam"), else None."""
    for m in _NAME_INTRO.finditer(text):
        name = m.group(1) or m.group(2)
        if name and name.lower() not in _NOT_A_NAME and name[0].isupper():
            return name
    return None


def _context_facts(messages: Sequence[Message]) -> list[str]:
    """Candidate facts: memory lines in system prompts, tool results, earlier user sentences."""
    from .text import sentences

    facts: list[str] = []
    for m in messages[:-1] if messages and messages[-1].role == "user" else messages:
        if m.role == "system":
            for line in m.content.splitlines():
                if TASK_MARKER.search(line) or line.strip().endswith(":") or not line.strip():
                    continue
                body = _MEMORY_LINE.match(line)
                if body and line.lstrip().startswith(("-", "*", "•", "[")):
                    fact = _RECALL_PREFIX.sub("", body.group(1))
                    if not fact.endswith("?") and " assistant: " not in f" {body.group(1)[:25]}":
                        facts.append(fact)
        elif m.role == "tool":
            facts.extend(_tool_facts(m.content))
        elif m.role == "user":
            facts.extend(s for s in sentences(m.content) if not s.endswith("?"))
    return facts


def _tool_facts(content: str) -> list[str]:
    try:
        data = json.loads(content)
    except ValueError:
        return [content]
    items = data.get("results", data.get("memories", [data])) if isinstance(data, dict) else data
    out = []
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, dict):
            out.append(str(item.get("content") or item.get("text") or json.dumps(item)))
        else:
            out.append(str(item))
    return out


def _best_fact(question: str, facts: Sequence[str]) -> tuple[float, str | None]:
    from .text import content_words, expand

    q = content_words(question)
    best, best_fact = 0.0, None
    for fact in facts:
        f = content_words(fact)
        if not q or not f:
            continue
        score = sum(1.0 if w in f else 0.6 if expand({w}) & f else 0.0 for w in q) / len(q)
        score += 0.5 * len({w for w in q & f if w.isdigit()})
        if score > best:
            best, best_fact = score, fact
    return best, best_fact


def _wants_memory_tool(question: str, tools: list[dict] | None, messages: Sequence[Message]) -> dict | None:
    names = {t.get("function", {}).get("name") for t in tools or []}
    if "search_memory" not in names:
        return None
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    if any(m.role == "tool" for m in messages[last_user:]):
        return None
    if not re.search(r"\b(i|my|me|mine|we|our)\b", question, re.IGNORECASE):
        return None
    return {"id": "call_" + hashlib.sha1(question.encode()).hexdigest()[:10], "type": "function",
            "function": {"name": "search_memory", "arguments": json.dumps({"query": question})}}


@offline_skill("reply")
def offline_reply(messages: Sequence[Message], tools=None, response_format=None) -> Message | str:
    """Answer from what is in the prompt: memories, tool results and earlier turns. No invention."""
    from .text import content_words, to_second_person

    users = [m for m in messages if m.role == "user"]
    if not users:
        return "(offline) Hello! How can I help?"
    question = users[-1].content.strip()
    is_question = question.endswith("?") or bool(re.match(
        r"^(what|where|when|who|which|how|why|do|does|did|is|are|can|could|should|tell me)\b",
        question, re.IGNORECASE))
    name = offline_name(question)
    if name and not is_question:
        return f"(offline) Nice to meet you, {name}! I'll keep that in mind for this conversation."
    if not is_question:
        return "(offline) Thanks, noted. What would you like to do next?"
    call = _wants_memory_tool(question, tools, messages)
    if call:
        return Message(role="assistant", content="", tool_calls=[call])
    earlier = users[:-1]
    if _ANAPHORA.search(question) and len(content_words(question)) <= 2 and earlier:
        return (f"(offline) You're asking about what you said before: \u201c{earlier[-1].content.strip()}\u201d. "
                "I can see it because the thread is in my prompt.")
    facts = _context_facts(messages)
    if re.search(r"\bmy name\b|\bwho am i\b|\bcall me\b", question, re.IGNORECASE):
        for fact in reversed(facts):
            found = offline_name(fact) or next((g for m in _NAME_FACT.finditer(fact) for g in m.groups() if g), None)
            if found:
                return f"(offline) Your name is {found}."
        return "(offline) I don't know your name yet: you haven't told me in this conversation."
    score, fact = _best_fact(question, facts)
    if fact and score >= 0.34:
        return f"(offline) From what I know: {to_second_person(fact).rstrip('.')}."
    if _ANAPHORA.search(question):
        if earlier:
            return (f"(offline) You're asking about what you said before: \u201c{earlier[-1].content.strip()}\u201d. "
                    "I can see it because the thread is in my prompt.")
    return "(offline) I don't know that yet: nothing in this conversation or my memory tells me."
