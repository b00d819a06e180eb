"""Summaries of long threads: when to write one (policies), the model task, a trace check, the atomic write.

``summarize_if_needed`` folds the messages after the cursor (all but the last ``keep_last``) into the previous
summary, keeps the facts that trace to a source, and stores them with the new cursor only if nothing moved.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
from pydantic import BaseModel, Field

from ..errors import ValidationError
from ..llm.task import ChatModel, Task, TaskFailed, Text, run_task
from ..messages import Message, count_tokens
from .short_term import ChatHistory, readable, valid_cuts

log = logging.getLogger(__name__)

SUMMARY_INSTRUCTIONS = """\
You keep a running summary of a conversation between a user and an assistant.
Merge the previous summary (if any) and the new messages into one updated list of facts.
Keep every concrete fact about the user: names, dates, numbers, places, preferences,
plans and decisions. When a new message contradicts the previous summary, keep the newer fact.
One short fact per item, in the third person ("User ..."), using only what the messages say.
Leave out greetings and small talk. Return at most `max_facts` facts."""

MAX_CHARS_PER_MESSAGE = 4000
MAX_FACTS = 30
MAX_BATCH = 40  # messages folded in per call at most (a model's context is bounded): a long thread catches up



class SummaryPolicy(Protocol):
    """When to summarize a thread, and how many recent messages to keep verbatim."""
    keep_last: int

    def triggered(self, prompt: Sequence[Message], conversation: Sequence[Message]) -> bool: ...


@dataclass(frozen=True)
class ByCount:
    """Summarize when more than ``max_messages`` follow the summary; keep the last ``keep_last`` verbatim."""
    max_messages: int = 10
    keep_last: int = 4

    def __post_init__(self) -> None:
        if not 0 <= self.keep_last < self.max_messages:
            raise ValidationError("ByCount needs 0 <= keep_last < max_messages")

    def triggered(self, prompt: Sequence[Message], conversation: Sequence[Message]) -> bool:
        return len(conversation) > self.max_messages


@dataclass(frozen=True)
class ByTokens:
    """Summarize when the prompt (summary included) is over ``max_tokens``; keep the last ``keep_last``."""
    max_tokens: int = 4000
    keep_last: int = 20

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or self.keep_last < 0:
            raise ValidationError("ByTokens needs max_tokens > 0 and keep_last >= 0")

    def triggered(self, prompt: Sequence[Message], conversation: Sequence[Message]) -> bool:
        return count_tokens(prompt) > self.max_tokens


class SummarizeInput(BaseModel):
    """The previous summary's facts, the messages to fold in, and how many facts may be kept."""
    previous: list[str] = Field(default_factory=list)
    messages: list[Message]
    max_facts: int = MAX_FACTS


class Summary(BaseModel):
    """The updated summary: one short fact per item."""
    facts: list[Text]

    @property
    def text(self) -> str:
        return "\n".join(f"- {f}" for f in self.facts)


def source(messages: Sequence[Message]) -> list[Message]:
    """Messages as the task sees them: role + text (tool calls spelled out, very long text cut)."""
    out = []
    for m in messages:
        text = " ".join(m.content.split())
        if len(text) > MAX_CHARS_PER_MESSAGE:
            text = text[:MAX_CHARS_PER_MESSAGE] + " [...]"
        for call in m.tool_calls or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            text += f" [calls {fn.get('name', '?')}({fn.get('arguments', '')})]"
        if text.strip():
            out.append(Message(role=m.role, content=text.strip()))
    return out


def render(inp: SummarizeInput) -> str:
    """The user message a model gets: the previous facts, then one line per new message."""
    previous = "\n".join(f"- {f}" for f in inp.previous) or "(none)"
    lines = "\n".join(f"{m.role}: {m.content}" for m in inp.messages)
    return (f"Previous summary:\n{previous}\n\nNew messages:\n{lines}\n\nmax_facts: {inp.max_facts}\n"
            'Answer with JSON: {"facts": ["...", "..."]}')


SUMMARIZE = Task("summarize", prompt=SUMMARY_INSTRUCTIONS, input=SummarizeInput, output=Summary,
                 max_tokens=600, render=render)


def summarize_messages(messages: Sequence[Message], llm: ChatModel, previous: Sequence[str] = (),
                       max_facts: int = MAX_FACTS) -> Summary:
    """Run the summarize task on ``messages`` folded into the ``previous`` facts; raises TaskFailed."""
    inp = SummarizeInput(previous=list(previous), messages=source(messages), max_facts=max_facts)
    return run_task(llm, SUMMARIZE, inp)


_WORD = re.compile(r"[^\W_]+(?:[.,:'’][^\W_]+)*", re.UNICODE)
_ROLE_WORDS = {"user", "user's", "assistant", "assistant's", "i"}
TRACE_THRESHOLD = 0.45  # least cosine similarity of a fact to a source (see benchmarks/short_term.py --check)


def anchors(text: str) -> set[str]:
    """Tokens a fact cannot invent: numbers and capitalised words past the first (names, places, months)."""
    tokens = _WORD.findall(text)
    numbers = {t.lower() for t in tokens if any(c.isdigit() for c in t)}
    return numbers | {t.lower() for t in tokens[1:] if t[0].isupper() and t.lower() not in _ROLE_WORDS}


@dataclass
class Trace:
    """A fact, the source it is closest to (index into the sources) and whether it traces; ``message``: the
    closest of the sources from ``trace``'s ``first_message`` on (-1 without any) and its similarity."""
    fact: str
    source: int
    similarity: float
    missing: set[str]
    message: int = -1
    message_similarity: float = 0.0

    @property
    def close(self) -> bool:
        """Close in meaning to its source (it may still name something the source does not hold)."""
        return self.similarity >= TRACE_THRESHOLD

    @property
    def ok(self) -> bool:
        return not self.missing and self.close


def trace(facts: Sequence[str], sources: Sequence[str], embedder, first_message: int = 0) -> list[Trace]:
    """For each fact: its closest source by embedding similarity, its closest source from ``first_message`` on
    (the sources before it are earlier summary facts), and the anchors no source contains."""
    if not facts or not sources:
        return [Trace(f, -1, 0.0, anchors(f)) for f in facts]
    vecs = np.asarray(embedder.embed_many([*facts, *sources]), dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True).clip(1e-9)
    sims = vecs[: len(facts)] @ vecs[len(facts):].T
    vocabulary = {t.lower() for s in sources for t in _WORD.findall(s)}
    traces = [Trace(f, int(sims[i].argmax()), float(sims[i].max()), anchors(f) - vocabulary)
              for i, f in enumerate(facts)]
    if first_message < len(sources):
        for t, row in zip(traces, sims[:, first_message:]):
            t.message, t.message_similarity = first_message + int(row.argmax()), float(row.max())
    return traces


def checked(traces: Sequence[Trace], sources: Sequence[Message], previous: Sequence[str]) -> tuple[list[str], int,
                                                                                                 list[Trace]]:
    """(facts to keep, how many are quotes, facts dropped), for traces made with ``first_message=len(previous)``.
    A fact naming what its sources do not hold ("New York City" for "NYC") gives way to the closest new message
    if it is close, quoted: the summary keeps what was said instead of losing it from the prompt, and a new
    message is newer than any earlier fact ("User lives in Munich, Germany" quotes "I moved to Munich", it does
    not bring back "User lives in Berlin."). Failing that, to the earlier summary fact it is close to ("France"
    for "Paris"): that fact's messages are behind the summary, so dropping it would take them from the prompt.
    A fact close to nothing is dropped."""
    kept, quotes, dropped = [], 0, []
    for t in traces:
        text = t.fact if t.ok else None
        if text is None and t.message >= 0 and t.message_similarity >= TRACE_THRESHOLD:
            near = sources[t.message - len(previous)]
            text = f'{near.role.capitalize()} said: "{near.content}"'
            quotes += text not in kept
        elif text is None and t.close:  # closest to an earlier fact, and no new message is close
            text = previous[t.source]
        if text is None:
            dropped.append(t)
        elif text not in kept:
            kept.append(text)
    return kept, quotes, dropped


def _cut(msgs: Sequence[Message], keep_last: int) -> int:
    """Where the kept tail starts: the first valid boundary keeping at most ``keep_last`` messages (else the
    last one before it), moved back to at most MAX_BATCH messages in when a valid boundary allows."""
    cuts = [c for c in valid_cuts(msgs) if c > 0]
    later = [c for c in cuts if c >= len(msgs) - keep_last]
    cut = later[0] if later else (cuts[-1] if cuts else 0)
    if cut > MAX_BATCH:
        within = [c for c in cuts if c <= MAX_BATCH]
        cut = within[-1] if within else cuts[0]
    return cut


def summarize_if_needed(history: ChatHistory, llm: ChatModel, policy: SummaryPolicy | None = None, *,
                        embedder=None) -> bool:
    """Fold the older messages of ``history`` into its summary if ``policy`` says so; True if written.
    The model runs outside any transaction; a conflicting write means re-read and retry, a failed task skips."""
    policy = policy or ByCount()
    for _ in range(3):
        view = history.view()
        if not policy.triggered(history.prompt_messages(view=view), readable(view.messages)):
            return False
        cut = _cut(view.messages, policy.keep_last)
        if cut <= 0:
            return False
        old = view.summary or {}
        batch, previous = readable(view.messages[:cut]), old.get("facts", [])
        try:
            summary = summarize_messages(batch, llm, previous=previous)
        except TaskFailed as exc:
            log.warning("summary of %s skipped, the thread is unchanged: %s", history.key, exc)
            return False
        if embedder is None:
            from ..embeddings import get_embedder

            embedder = get_embedder(history.r)
        sources = source(batch)
        traces = trace(summary.facts, [*previous, *(m.content for m in sources)], embedder, len(previous))
        kept, quoted, dropped = checked(traces, sources, previous)
        if dropped and not kept:
            log.warning("summary of %s skipped: none of its %d facts traces to a message", history.key, len(dropped))
            return False
        if previous and not kept:  # nothing new to keep is no reason to erase the earlier facts: carried on
            log.info("summary of %s: the model kept none of the %d earlier facts; they stay", history.key,
                     len(previous))
            kept = list(previous)
        for t in dropped:  # the fact's words at DEBUG only: they restate the user
            log.info("summary fact dropped, it traces to no message (similarity %.2f, %d words missing)",
                     t.similarity, len(t.missing))
            log.debug("dropped summary fact %r (missing %s)", t.fact, sorted(t.missing))
        record = {"text": Summary(facts=kept).text, "facts": kept, "covers": old.get("covers", 0) + cut,
                  "dropped": len(dropped), "quoted": quoted, "updated_at": time.time(),
                  "last_id": view.messages[cut - 1].id}
        if history.advance(view, cut, record):
            return True
    return False
