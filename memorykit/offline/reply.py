"""The offline reply: answer the user from what the reply task's input holds; never invent.

``run(inp, tools)`` implements the ``reply`` task from its typed fields (memories, working
memory, recalled messages, the thread, tool results); ``reply_to_messages(messages, tools)``
does the same for a plain chat call (notebook 00's stateless agent). Candidate facts are
ranked by meaning (the local embedding model) plus shared words; the threshold ``MATCH`` was
chosen on ``data/agent/reply_dev.jsonl`` and is measured on ``reply_heldout.jsonl`` (see
:func:`evaluate`). When the context does not clearly answer a question and ``search_memory``
is offered, it asks for that tool first, as a model would.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..messages import Message
from .text import content_words, offline_name, sentences, to_second_person, vectors

MATCH = 0.3
"""Lowest score (cosine + ``LEXICAL`` x shared words) for a fact to count as the answer (chosen on dev)."""
CONFIDENT = 0.6
"""With ``search_memory`` offered, answer from context without looking up only from this score up."""
LEXICAL = 0.3
"""Weight of the share of the question's content words (names, numbers) that the fact repeats."""

_QUESTION_START = re.compile(
    r"^(what|where|when|who|whom|whose|which|how|why|do|does|did|is|are|am|was|were|can|could|"
    r"should|would|will|have|has|tell me|remind me)\b", re.IGNORECASE)
_ASKS_NAME = re.compile(r"\b(my name|who am i|call me)\b", re.IGNORECASE)
_NAME_FACT = re.compile(r"\b(?i:name)(?: is|'s|:)\s*([A-Z][\w'-]+)|\bcall(?:s|ed)? (?:me|them|the user)\s+([A-Z][\w'-]+)")
_INTERROGATIVE = re.compile(r"\b(what|where|when|who|which|how|why)\s+(am|is|are|was|were|do|does|did|can|"
                            r"could|should|would|will)\b", re.IGNORECASE)
_ANAPHORA = re.compile(r"\b(that|it|this|those|these)\b", re.IGNORECASE)
_LINE_PREFIX = re.compile(r"^(?:\d{4}-\d{2}-\d{2} |\[[A-Za-z_]+\]\s*)")


@dataclass
class Context:
    """What the reply may use: the question, candidate facts (oldest first), earlier user messages."""

    question: str
    facts: list[str] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)
    looked_up: bool = False  # a tool result is already in this exchange


# ---------------------------------------------------------------- gathering facts
def _statements(text: str) -> list[str]:
    return [s for s in sentences(text) if not s.rstrip().endswith("?")]


def _tool_facts(content: str) -> list[str]:
    try:
        data = json.loads(content)
    except ValueError:
        return [content] if content.strip() else []
    if isinstance(data, dict) and "error" in data:
        return []
    items = data.get("results", data.get("memories", [data])) if isinstance(data, dict) else data
    out = []
    for item in items if isinstance(items, list) else [items]:
        value = item.get("content") or item.get("text") if isinstance(item, dict) else item
        if isinstance(value, str) and value.strip():
            out.append(value)
    return out


def _block_facts(text: str | None) -> list[str]:
    """The bullets of a Markdown block (with their section heading), or the fields of a JSON object."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return [f"{k}: {v}" for k, v in data.items() if v not in (None, "", [], {})]
    facts, heading = [], ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line[:1] in ("-", "*", "\u2022"):
            body = _LINE_PREFIX.sub("", line[1:].strip())
            if body and not body.endswith(":") and not body.startswith("("):
                facts.append(f"{heading}: {body}" if heading and ":" not in body else body)
    return facts


def _message_facts(messages: Sequence[Message]) -> list[str]:
    """Facts in messages: bullets of system blocks (memories, summaries), tool results, user statements."""
    facts: list[str] = []
    for m in messages:
        if m.role == "system":
            facts += _block_facts(m.content)
        elif m.role == "tool":
            facts += _tool_facts(m.content)
        elif m.role == "user":
            facts += _statements(m.content)
    return facts


# ---------------------------------------------------------------- the two entry points
def run(inp: Any, tools: list[dict] | None = None) -> Message:
    """The ``reply`` task from its typed input (``memorykit.agent.reply.ReplyInput``)."""
    recalled = [s for r in inp.recalled if r.startswith("user: ") for s in _statements(r.split(": ", 1)[1])]
    facts = [*_message_facts(inp.history), *recalled, *_block_facts(inp.working_memory), *inp.memories]
    facts += _message_facts([m for m in inp.steps if m.role == "tool"])
    ctx = Context(inp.question.strip(), facts, [m.content for m in inp.history if m.role == "user"],
                  looked_up=any(m.role == "tool" for m in inp.steps))
    return answer(ctx, tools)


def reply_to_messages(messages: Sequence[Message], tools: list[dict] | None = None) -> Message:
    """A plain chat call: answer the last user message from the messages before (and after) it."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        return Message(role="assistant", content="Hello! How can I help?")
    last = users[-1]
    before, after = list(messages[:last]), list(messages[last + 1:])
    ctx = Context(messages[last].content.strip(), _message_facts(before + [m for m in after if m.role == "tool"]),
                  [m.content for m in before if m.role == "user"],
                  looked_up=any(m.role == "tool" for m in after))
    return answer(ctx, tools)


# ---------------------------------------------------------------- deciding what to say
def is_question(text: str) -> bool:
    return text.rstrip().endswith("?") or bool(_QUESTION_START.match(text.strip()))


def _adds(fact: str, asked: set[str]) -> bool:
    """True when the fact says something the question does not (a word beyond its heading)."""
    heading, _, body = fact.rpartition(": ")
    return bool(content_words(body) - asked - {"user"}) if len(heading.split()) <= 3 else True


def best_fact(question: str, facts: Sequence[str]) -> tuple[float, str | None]:
    """The fact that best answers the question, and its score: cosine similarity of the two
    (meaning) plus ``LEXICAL`` times the share of the question's content words the fact repeats
    (exact names and numbers). Questions, and facts that only repeat the question, are no
    answers; later facts win ties."""
    asked = content_words(question)
    facts = [f for f in dict.fromkeys(facts) if f.strip() and not _INTERROGATIVE.search(f) and _adds(f, asked)]
    if not facts:
        return 0.0, None
    vecs = vectors([question, *facts])
    scores = [float(c) + (LEXICAL * len(asked & content_words(f)) / len(asked) if asked else 0.0)
              for f, c in zip(facts, vecs[1:] @ vecs[0])]
    i = max(range(len(facts)), key=lambda j: (round(scores[j], 3), j))
    return scores[i], facts[i]


def _say(text: str) -> Message:
    return Message(role="assistant", content=text)


def _search_call(question: str, tools: list[dict] | None, ctx: Context) -> Message | None:
    names = {t.get("function", {}).get("name") for t in tools or []}
    if "search_memory" not in names or ctx.looked_up:
        return None
    call = {"id": "call_" + hashlib.sha1(question.encode()).hexdigest()[:10], "type": "function",
            "function": {"name": "search_memory", "arguments": json.dumps({"query": question})}}
    return Message(role="assistant", content="", tool_calls=[call])


def _recall_earlier(ctx: Context) -> Message | None:
    if ctx.earlier and _ANAPHORA.search(ctx.question):
        return _say(f"You're asking about what you said before: \u201c{ctx.earlier[-1].strip()}\u201d. "
                    "I can see it because the thread is in my prompt.")
    return None


def _name_in(facts: Sequence[str]) -> str | None:
    for fact in reversed(facts):
        found = offline_name(fact) or next((g for m in _NAME_FACT.finditer(fact) for g in m.groups() if g), None)
        if found:
            return found
    return None


def answer(ctx: Context, tools: list[dict] | None = None) -> Message:
    """Greet, acknowledge, answer from the best fact, look it up with a tool, or say it is not known."""
    q = ctx.question
    if not is_question(q):
        name = offline_name(q)
        if name:
            return _say(f"Nice to meet you, {name}! I'll keep that in mind for this conversation.")
        return _say("Thanks, noted. What would you like to do next?")
    if _ASKS_NAME.search(q):
        name = _name_in(ctx.facts)
        if name:
            return _say(f"Your name is {name}.")
        return _search_call(q, tools, ctx) or _say(
            "I don't know your name yet: you haven't told me in this conversation.")
    if len(content_words(q)) <= 2:
        earlier = _recall_earlier(ctx)
        if earlier is not None:
            return earlier
    score, fact = best_fact(q, ctx.facts)
    if fact is not None and score >= CONFIDENT:
        return _say(f"From what I know: {to_second_person(fact).rstrip('. ')}.")
    call = _search_call(q, tools, ctx)  # not sure from context: look it up first, as a model would
    if call is not None:
        return call
    if fact is not None and score >= MATCH:
        return _say(f"From what I know: {to_second_person(fact).rstrip('. ')}.")
    return _recall_earlier(ctx) or _say("I don't know that yet: nothing in this conversation or my memory tells me.")


# ---------------------------------------------------------------- measuring it
def evaluate(split: str = "heldout", match: float | None = None) -> dict[str, float]:
    """Accuracy on ``data/agent/reply_<split>.jsonl``: answerable questions answered with every
    expected word, unanswerable ones declined. ``match`` overrides the threshold (tuning on dev)."""
    from ..config import data_path

    global MATCH
    saved, MATCH = MATCH, MATCH if match is None else match
    try:
        rows = [json.loads(x) for x in data_path("agent", f"reply_{split}.jsonl").read_text().splitlines() if x]
        hits = {"answer": [], "decline": []}
        for row in rows:
            reply = answer(Context(row["question"], list(row["facts"]))).content
            declined = "don't know" in reply
            if row["expect"] is None:
                hits["decline"].append(declined)
            else:
                hits["answer"].append(not declined and all(w.lower() in reply.lower() for w in row["expect"]))
    finally:
        MATCH = saved
    both = hits["answer"] + hits["decline"]
    return {"n": len(both), "accuracy": sum(both) / len(both),
            "answered": sum(hits["answer"]) / max(1, len(hits["answer"])),
            "declined": sum(hits["decline"]) / max(1, len(hits["decline"]))}
