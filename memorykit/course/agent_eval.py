"""Scripted users for notebook 08: the same conversations against each memory mode, scored and costed.

``load_script()`` reads ``data/agent/scripted_questions.jsonl``; ``run_script(agent, ...)`` plays
it (one row per turn: what was said, the reply, whether it answered, model calls, tokens, step timings);
``compare_modes(...)`` does that for a stateless, a short-term-only and a full-memory agent.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from ..agent.memory_agent import MemoryAgent
from ..config import data_path
from ..errors import ValidationError

NOT_KNOWN = re.compile(r"\b(don't know|do not know|not sure|no idea|can't tell|cannot tell)\b", re.IGNORECASE)


def load_script(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Scripted users: what each tells the agent (``setup``), then ``questions`` asked in the same
    thread (``follow-up``) or in a new one (``cross-session``), each with expected answer keywords."""
    path = Path(path) if path is not None else data_path("agent", "scripted_questions.jsonl")
    scenarios = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for s in scenarios:
        if not s.get("user_id") or not s.get("setup") or not s.get("questions"):
            raise ValidationError(f"a scenario needs user_id, setup and questions: {s}")
    return scenarios


def answered(reply: str, expect: Sequence[str]) -> bool:
    """Correct = every expected keyword appears and the reply does not say it doesn't know."""
    text = reply.lower()
    return not NOT_KNOWN.search(reply) and all(word.lower() in text for word in expect)


def run_script(agent: MemoryAgent, scenarios: Sequence[dict[str, Any]], user_suffix: str = "") -> list[dict[str, Any]]:
    """Play each scenario with ``agent``; one row per turn (``kind`` "setup" for the statements).

    Rows are read after ``agent.flush()``, so ``model_calls`` and the token counts include
    the background work (extraction, dedup decisions, working memory, summaries).
    """
    rows = []
    for s in scenarios:
        user = f"{s['user_id']}{user_suffix}"
        played = [("setup", text, "first", None) for text in s["setup"]]
        played += [(q["kind"], q["ask"], "first" if q["kind"] == "follow-up" else f"later-{i}", q["expect"])
                   for i, q in enumerate(s["questions"])]
        turns = [(kind, expect, agent.chat(text, user_id=user, thread_id=thread))
                 for kind, text, thread, expect in played]
        agent.flush()
        for kind, expect, turn in turns:
            rows.append({"user": s["user_id"], "kind": kind, "question": turn.user_message.content,
                         "reply": turn.reply or f"(error: {turn.error})",
                         "correct": None if expect is None else bool(turn.ok and answered(turn.reply, expect)),
                         "model_calls": turn.model_calls, "tokens_in": turn.tokens_in,
                         "tokens_out": turn.tokens_out, "failed_steps": ", ".join(sorted(turn.failed_steps)),
                         "timings_ms": dict(turn.timings_ms)})
    return rows


def compare_modes(r, llm=None, embedder=None, namespace: str = "memorykit",
                  scenarios: Sequence[dict[str, Any]] | None = None,
                  modes: Sequence[str | bool] = (False, "short_term", "full")):
    """The same scripted users against a stateless, a short-term-only and a full-memory agent.

    Returns a pandas DataFrame with one row per (mode, turn); each mode uses its own user
    ids (``raphael@full``), so the modes cannot see each other's memories. Score the
    questions with ``df[df["kind"] != "setup"]``.
    """
    import pandas as pd

    scenarios = scenarios if scenarios is not None else load_script()
    rows = []
    for mode in modes:
        name = mode or "stateless"
        agent = MemoryAgent(r, llm=llm, embedder=embedder, namespace=namespace, memory=mode)
        try:
            for i, row in enumerate(run_script(agent, scenarios, user_suffix=f"@{name}")):
                rows.append({"mode": name, "turn": i + 1, **row})
        finally:
            agent.close()
    return pd.DataFrame(rows)
