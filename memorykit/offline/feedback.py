"""Offline ``analyze_feedback``: which user turns are feedback, and on which earlier answer.

Learned models (:mod:`.feedback_model`) classify each user turn (feedback or not, then positive
or negative) and attach a feedback turn to the exchange it is about (by what it quotes and talks
about, not only the latest answer). A question asked again almost verbatim is negative. The
course's ``SemanticRouter`` over example sentences (``data/routes/feedback.jsonl``) marks
follow-ups: format, explanation and correction requests and repeats, so feedback after them
belongs to the original question (with the answer it reacted to), and a negative turn that
corrects the answer is labelled a correction.
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

FOLLOW_UPS = {"format": "format", "meta": "meta", "correction": "clarification"}
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


def signal_of(text: str, previous: str = "") -> str | None:
    """positive / negative for a user turn on its own (after ``previous``), or None when it is not feedback."""
    model = feedback_model()
    p = model.turn_probabilities([(previous, "-"), (text, "")])[0]
    if 1.0 - p[0] < model.threshold:
        return None
    return "positive" if p[1] >= p[2] else "negative"


def followup_kind(text: str) -> str | None:
    """"format" | "meta" | "clarification" when the turn refers back to the last answer, else None."""
    for route in routes_of(text):
        if route in FOLLOW_UPS:
            return FOLLOW_UPS[route]
    return None


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
    while k > 0 and (repeats(pairs[k][0], pairs[k - 1][0]) or followup_kind(pairs[k][0]) is not None):
        k -= 1
    return k


def analyze(pairs: Sequence[tuple[str, str]], model=None) -> list[FoundFeedback]:
    """Feedback in a window of (user, assistant) exchanges, one item per (question, answer).

    The learned models say which turns are feedback and on which earlier exchange; a question
    asked again almost verbatim is negative feedback on the previous answer (implicit).
    """
    model = model or feedback_model()
    again = {j for j in range(1, len(pairs)) if repeats(pairs[j][0], pairs[j - 1][0])}
    turns = [(j, k, label, "explicit") for j, k, label in model.found(pairs) if j not in again]
    turns += [(j, j - 1, "negative", "implicit") for j in again]
    found: dict[tuple[str, str], FoundFeedback] = {}
    for j, k, label, signal in sorted(turns):
        query, response = pairs[origin_of(pairs, k)][0].strip(), pairs[k][1].strip()
        if label == "negative" and signal == "explicit" and "correction" in routes_of(pairs[j][0]):
            label = "correction"
        if query and response:
            found[(query, response)] = FoundFeedback(
                query=query, response=response, label=label, signal=signal,
                reason="asked the same question again" if signal == "implicit" else f"turn {j + 1} reads as {label}")
    return list(found.values())


def run(inp: FeedbackInput, tools=None) -> FeedbackFound:
    return FeedbackFound(examples=analyze([(e.user, e.assistant) for e in inp.exchanges]))
