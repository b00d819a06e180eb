"""Offline ``decide_memory``: the learned pair model reads the new fact against each candidate.

Every (candidate, new fact) pair gets class probabilities from :mod:`.decide_model`; the
candidate most likely *not* to be unrelated wins, and its most probable label is the action
(duplicate -> NOOP, update -> UPDATE, invalidate -> INVALIDATE); when every candidate looks
unrelated, or "new" loses only a close call (``decide_model.NEW_MARGIN``), the fact is added.
"""
from __future__ import annotations

from ..memory.dedup import DecideInput, MemoryDecision
from .decide_model import decision, model

ACTION = {"duplicate": "NOOP", "update": "UPDATE", "invalidate": "INVALIDATE", "new": "ADD"}


def run(inp: DecideInput, tools=None) -> MemoryDecision:
    if not inp.existing:
        return MemoryDecision(action="ADD", reason="no similar memory")
    probs = model().predict_proba([e.fact for e in inp.existing], [inp.new] * len(inp.existing))
    best = max(range(len(probs)), key=lambda i: 1.0 - probs[i].get("new", 0.0))
    label = decision(probs[best])
    p = probs[best][label]
    if label == "new":
        return MemoryDecision(action="ADD", reason=f"learned model: unrelated to every candidate (p={p:.2f})")
    fact = inp.existing[best]
    return MemoryDecision(action=ACTION[label], target=fact.id,
                          reason=f"learned model: {label} of memory {fact.id} (p={p:.2f})")
