"""Offline ``analyze_feedback``: each user turn is routed, then linked to the answer it reacts to.

Every sentence of a user turn goes through a RedisVL ``SemanticRouter`` trained on example
utterances (``data/routes/feedback.jsonl``): positive, negative, correction, format, meta,
question, polite, other. A turn's signal comes from its sentences (a negative one wins; a
bare "thanks" counts only when nothing else is asked), and a question asked again almost
verbatim is negative. Format, explanation and correction requests and repeats are
follow-ups: feedback after them belongs to the original question and the final answer.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..memory.feedback import FeedbackFound, FeedbackInput, FoundFeedback
from ..course.routing import Router, get_router
from .feedback_model import feedback_model
from .text import normalize

FEEDBACK = ("positive", "negative", "correction")
FOLLOW_UPS = {"format": "format", "meta": "meta", "correction": "clarification"}
ASKS = {"question", "format", "meta"}
OPENERS = {"polite", "other", "positive"}
REPEAT_SIMILARITY = 0.9     # cosine similarity of a question asked again (numbers must match too)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def router() -> Router:
    return get_router("feedback")


def sentences(text: str) -> list[str]:
    """Sentences of a user turn (split after . ! ? and at line breaks)."""
    return [s.strip() for s in _SENTENCE_END.split(normalize(text)) if s.strip()]


@lru_cache(maxsize=4096)
def routes_of(text: str) -> tuple[str, ...]:
    """The route of each sentence ("other" when no route is close enough)."""
    return tuple(router().route(s) or "other" for s in sentences(text)) or ("other",)


def signal_of(text: str) -> str | None:
    """positive / negative / correction, or None when the turn gives no feedback."""
    found = routes_of(text)
    for label in ("negative", "correction", "positive"):
        if label in found:
            return label
    if "polite" in found and not ASKS & set(found):
        return "positive"      # "Thanks!" on its own; "Thanks! What's my BMI?" opens a question instead
    return None


def followup_kind(text: str) -> str | None:
    """"format" | "meta" | "clarification" when the turn refers back to the last answer, else None."""
    for route in routes_of(text):
        if route in FOLLOW_UPS:
            return FOLLOW_UPS[route]
    return None


def query_text(text: str) -> str:
    """A user turn without a polite opener ("Thanks! How about my steps?" -> "How about my steps?")."""
    parts, found = sentences(text), list(routes_of(text))
    while len(parts) > 1 and found[0] in OPENERS:
        parts, found = parts[1:], found[1:]
    return " ".join(parts) or text.strip()


def repeats(text: str, previous: str) -> bool:
    """The same question again: nearly the same words' meaning and the same numbers."""
    if not previous.strip() or "question" not in routes_of(text):
        return False
    if sorted(_NUMBER.findall(text)) != sorted(_NUMBER.findall(previous)):
        return False
    a, b = (np.asarray(router().embed(t), dtype=np.float32) for t in (text, previous))
    return float(a @ b) >= REPEAT_SIMILARITY


def origin_of(pairs: Sequence[tuple[str, str]], k: int) -> int:
    """The question a follow-up chain started from (format, explanation, correction requests and repeats)."""
    while WALK and k > 0 and (repeats(pairs[k][0], pairs[k - 1][0]) or followup_kind(pairs[k][0]) is not None):
        k -= 1
    return k


WALK = True


def analyze(pairs: Sequence[tuple[str, str]]) -> list[FoundFeedback]:
    """Feedback in a window of (user, assistant) exchanges, one item per (question, answer)."""
    found: dict[tuple[str, str], FoundFeedback] = {}
    for j, k, label in feedback_model().found(pairs):
        query, response = pairs[origin_of(pairs, k)][0].strip(), pairs[k][1].strip()
        if query and response:
            found[(query, response)] = FoundFeedback(query=query, response=response, label=label,
                                                     reason=f"the user's turn {j + 1} reads as {label}")
    return list(found.values())


def run(inp: FeedbackInput, tools=None) -> FeedbackFound:
    return FeedbackFound(examples=analyze([(e.user, e.assistant) for e in inp.exchanges]))
