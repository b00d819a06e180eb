"""Summarization policies for long threads, and a race-free rewrite of the stored thread.

A policy says *when* (more than N messages, or more than a token budget) and how much
to keep verbatim; ``summarize_if_needed`` then summarizes the older prefix (rolling:
the previous summary is folded in) and drops exactly that prefix, by count, in one
atomic step. Messages appended while the model was writing the summary are untouched.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..errors import LLMError, ValidationError
from ..llm import ChatModel, offline_skill, task_prompt
from ..messages import Message, count_tokens
from .short_term import CORRUPT, ChatHistory, Snapshot, parse_summary, valid_cuts
from ..offline.text import content_words, normalize, sentences, third_person, words

SUMMARY_INSTRUCTIONS = """\
You keep a running summary of a conversation between a user and an assistant.
Merge the previous summary (if any) and the new messages into one updated summary.
Keep every concrete fact about the user: names, dates, numbers, places, preferences,
plans and decisions. When a new message contradicts the previous summary, keep the newer fact.
Write one short bullet per fact, in the third person ("- User ..."). Leave out greetings
and small talk. Answer with the bullet list only."""

MAX_CHARS_PER_MESSAGE = 4000


# ---------------------------------------------------------------- policies
class SummaryPolicy(Protocol):
    """When to summarize a thread, and how many recent messages to keep verbatim."""

    keep_last: int

    def triggered(self, prompt: Sequence[Message], conversation: Sequence[Message]) -> bool: ...


@dataclass(frozen=True)
class ByCount:
    """Summarize when the thread holds more than ``max_messages`` (system prompt not counted);
    afterwards: system prompt + one summary + the last ``keep_last`` messages."""

    max_messages: int = 10
    keep_last: int = 4

    def __post_init__(self) -> None:
        if not 0 <= self.keep_last < self.max_messages:
            raise ValidationError("ByCount needs 0 <= keep_last < max_messages")

    def triggered(self, prompt: Sequence[Message], conversation: Sequence[Message]) -> bool:
        return len(conversation) > self.max_messages


@dataclass(frozen=True)
class ByTokens:
    """Summarize when the prompt (summary included) is estimated above ``max_tokens``;
    afterwards: summary + the last ``keep_last`` messages."""

    max_tokens: int = 4000
    keep_last: int = 20

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or self.keep_last < 0:
            raise ValidationError("ByTokens needs max_tokens > 0 and keep_last >= 0")

    def triggered(self, prompt: Sequence[Message], conversation: Sequence[Message]) -> bool:
        return count_tokens(prompt) > self.max_tokens


# ---------------------------------------------------------------- the prompt
def render(messages: Sequence[Message]) -> str:
    """One line per message, ``role: text``; tool calls spelled out; very long messages cut."""
    lines = []
    for m in messages:
        text = " ".join(m.content.split())
        if len(text) > MAX_CHARS_PER_MESSAGE:
            text = text[:MAX_CHARS_PER_MESSAGE] + " [...]"
        for call in m.tool_calls or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            text += f" [calls {fn.get('name', '?')}({fn.get('arguments', '')})]"
        lines.append(f"{m.role}: {text.strip()}")
    return "\n".join(lines)


def summary_prompt(messages: Sequence[Message], previous: str | None = None) -> list[Message]:
    """The messages a model gets to write (or update) a summary."""
    body = f"Previous summary:\n{previous.strip() if previous else '(none)'}\n\nNew messages:\n{render(messages)}"
    return [Message(role="system", content=task_prompt("summarize", SUMMARY_INSTRUCTIONS)),
            Message(role="user", content=body)]


def summarize_messages(messages: Sequence[Message], llm: ChatModel, previous: str | None = None) -> str:
    """Ask the model for an updated rolling summary of ``previous`` + ``messages``."""
    reply = llm.chat(summary_prompt(messages, previous))
    text = (reply.content or "").strip()
    if not text:
        raise LLMError("the model returned an empty summary; the thread was left unchanged")
    return text


# ---------------------------------------------------------------- the race-free rewrite
def _cut(msgs: Sequence[Message], head: int, keep_last: int) -> int:
    """Where the kept tail starts: a valid boundary keeping at most ``keep_last`` messages,
    else the latest valid boundary before (keeping a few more rather than none)."""
    cuts = [c for c in valid_cuts(msgs) if c > head]
    later = [c for c in cuts if c >= len(msgs) - keep_last]
    if later:
        return later[0]
    return cuts[-1] if cuts else head


def summarize_if_needed(history: ChatHistory, llm: ChatModel, policy: SummaryPolicy | None = None,
                        attempts: int = 3) -> bool:
    """Summarize the older part of ``history`` if ``policy`` says so; True if the thread was rewritten.

    Reads a snapshot, asks the model (slow, outside any transaction), then atomically drops the
    summarized prefix by count if it is unchanged. On a conflict (another summarizer or a deletion
    won the race) it re-reads and retries; appends never conflict.
    """
    policy = policy or ByCount()
    for _ in range(attempts):
        snap: Snapshot = history.snapshot()
        msgs, head = snap.positional, snap.head
        conversation = [m for m in msgs[head:] if m.name != CORRUPT]
        if not policy.triggered(history.prompt_from(snap), conversation):
            return False
        cut = _cut(msgs, head, policy.keep_last)
        if cut <= head:
            return False
        old = parse_summary(snap.summary_raw) or {"text": None, "covers": 0}
        prefix = [m for m in msgs[head:cut] if m.name != CORRUPT]
        text = summarize_messages(prefix, llm, previous=old.get("text"))
        record = {"text": text, "covers": int(old.get("covers", 0)) + (cut - head),
                  "updated_at": time.time(), "last_id": msgs[cut - 1].id}
        if history.drop_prefix(snap, cut, record):
            return True
    return False


# ---------------------------------------------------------------- the offline summarizer
_MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
           "sept", "oct", "nov", "dec", "monday", "tuesday", "wednesday", "thursday", "friday",
           "saturday", "sunday", "today", "tomorrow", "yesterday", "tonight", "weekend", "birthday",
           "anniversary"}
_RELATIVE = {"today", "tomorrow", "yesterday", "tonight", "weekend"}
_LIKE = re.compile(r"\b(?:i|we|really|also|don't|do not|would|i'd|they|she|he)\s+(?:really\s+)?like\b", re.IGNORECASE)
_CUES = {"love", "prefer", "hate", "dislike", "favorite", "favourite", "allergic", "allergy",
         "vegetarian", "vegan", "name", "call", "live", "work", "born", "married", "wife", "husband",
         "partner", "daughter", "son", "kid", "child", "children", "mother", "father", "mom", "mum",
         "dad", "sister", "brother", "friend", "dog", "cat", "want", "need", "plan", "goal", "always",
         "never", "usually", "avoid", "enjoy", "move", "moved", "job", "remind", "deadline", "budget",
         "can't", "cannot", "don't", "won't", "intolerant", "diabetic", "afraid", "booked"}
_CUE_STEMS = {w.rstrip("s") for w in _CUES} | _CUES
_TOKEN = re.compile(r"[A-Za-z][\w'-]*")
_NOT_PROPER = {"I", "I'm", "I've", "I'd", "I'll", "User", "User's", "Assistant"}
MAX_BULLETS = 30
MAX_BULLET_CHARS = 220


def fact_score(sentence: str) -> float:
    """How much a sentence looks like a fact worth keeping: names, numbers, dates, preferences."""
    ws = words(sentence)
    proper = [t for t in _TOKEN.findall(sentence)[1:] if t[0].isupper() and t not in _NOT_PROPER]
    score = 2.0 * min(len(proper), 3)
    score += 2.0 * min(sum(any(c.isdigit() for c in w) for w in ws), 3)
    score += 2.0 * min(sum(w in _MONTHS for w in ws), 2)
    cues = sum(w in _CUES or w.rstrip("sd") in _CUE_STEMS for w in ws) + len(_LIKE.findall(sentence))
    score += 2.0 * min(cues, 2)
    score += 1.0 if any(w in ("i", "my", "me", "we", "our", "i'm", "i've") for w in ws) else 0.0
    return score + 0.5 * min(len(content_words(sentence)), 4)


_INTERJECTION = re.compile(r"^(?:(?:hi|hello|hey|oh|well|ok|okay|so|yes|yeah|no|thanks|thank you|great|cool|sure|"
                           r"alright|right|also|anyway|btw|by the way|actually)\b[\s,!.:-]*)+", re.IGNORECASE)


def _names_a_date_or_entity(sentence: str) -> bool:
    """A number together with a name or a calendar date: what an assistant or tool line must carry to be kept."""
    ws = words(sentence)
    named = any(t[0].isupper() and t not in _NOT_PROPER for t in _TOKEN.findall(sentence)[1:])
    dated = any(w in _MONTHS and w not in _RELATIVE for w in ws)
    return any(c.isdigit() for c in sentence) and (named or dated)


def _bullet(sentence: str, speaker: str) -> str:
    sentence = _INTERJECTION.sub("", sentence).strip() or sentence
    text = third_person(sentence) if speaker == "user" else f"{speaker.capitalize()}: {normalize(sentence)}"
    text = re.sub(r"^Their\b", "User's", text)
    text = re.sub(r"([!?])\.$", r"\1", text)
    if len(text) > MAX_BULLET_CHARS:
        text = text[:MAX_BULLET_CHARS].rsplit(" ", 1)[0] + "..."
    return text


def _facts_from(transcript: str) -> list[str]:
    out = []
    for line in transcript.splitlines():
        role, _, text = line.partition(": ")
        if role not in ("user", "assistant", "tool") or text.startswith("(offline)"):
            continue
        for s in sentences(text):
            score = fact_score(s)
            question = s.endswith("?")
            if role == "user" and not question and score >= 3:
                out.append(_bullet(s, "user"))
            elif role == "user" and question and score >= 6:
                out.append(_bullet(f"User asked: {s}", "assistant")[len("Assistant: "):])
            elif role != "user" and score >= 6 and _names_a_date_or_entity(s):
                out.append(_bullet(s, role))
    return out


def merge_bullets(old: Sequence[str], new: Sequence[str], limit: int = MAX_BULLETS) -> list[str]:
    """Old + new facts, near-duplicates collapsed to the newer wording, the weakest dropped past ``limit``."""
    merged: list[str] = []
    for fact in [*old, *new]:
        cw = content_words(fact)
        merged = [f for f in merged if not (cw and content_words(f) <= cw) and normalize(f) != normalize(fact)]
        if not any(cw <= content_words(f) for f in merged if cw):
            merged.append(fact)
    while len(merged) > limit:
        weakest = min(range(len(merged)), key=lambda i: (fact_score(merged[i]), i))
        merged.pop(weakest)
    return merged


@offline_skill("summarize")
def offline_summarize(messages: Sequence[Message], tools=None, response_format=None) -> str:
    """Extractive: keeps the sentences that carry facts (third person), folds in the previous summary."""
    body = next((m.content for m in reversed(messages) if m.role == "user"), "")
    previous, _, transcript = body.partition("New messages:")
    old = [line.strip()[2:].strip() for line in previous.splitlines()
           if line.strip().startswith("- ") and not line.strip().startswith("- (")]
    bullets = merge_bullets(old, _facts_from(transcript))
    if not bullets:
        return "- (nothing worth keeping yet)"
    return "\n".join(f"- {b}" for b in bullets)
