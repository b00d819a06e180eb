"""Scoring working-memory upkeep: play dialogs into a WorkingMemory, check the profile it ends with.

A dialog (``data/working/*.jsonl``) lists the user's turns and the expected facts: ``name``,
``timezone``, ``goals`` and ``preferences`` (text each must contain), and superseded values that
must be gone (``not_goals``, ``not_preferences``, ``not_name``, ``not_timezone``). Fact recall is
found / expected over all dialogs; "superseded left" counts old values still in the profile.
"""
from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from ..config import data_path
from ..memory.working import PROFILE_TEMPLATE, WorkingMemory


class Profile(BaseModel):
    """The schema-mode profile the scorer uses."""

    name: str | None = None
    timezone: str | None = None
    goals: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)


MODES = {"template": {"template": PROFILE_TEMPLATE}, "schema": {"schema": Profile}, "text": {}}


def load_dialogs(name: str) -> list[dict]:
    """Dialogs from ``data/working/<name>``."""
    return [json.loads(line) for line in data_path("working", name).read_text().splitlines() if line.strip()]


def expected_facts(dialog: dict) -> tuple[list[str], list[str]]:
    """(facts that must be in the profile, superseded values that must not)."""
    exp = dialog["expected"]
    want = [exp["name"], exp["timezone"], *exp["goals"], *exp["preferences"]]
    gone = [*exp.get("not_goals", []), *exp.get("not_preferences", []),
            *[exp[k] for k in ("not_name", "not_timezone") if exp.get(k)]]
    return want, gone


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


@dataclass
class ProfileScore:
    """Fact recall and superseded values left, with the misses to read."""

    mode: str
    facts: int = 0
    found: int = 0
    superseded: int = 0
    left: int = 0
    missed: list[tuple[str, str]] = field(default_factory=list)
    stale: list[tuple[str, str]] = field(default_factory=list)
    profiles: dict[str, object] = field(default_factory=dict, repr=False)

    @property
    def recall(self) -> float:
        return self.found / self.facts if self.facts else 0.0

    def __str__(self) -> str:
        return (f"{self.mode}: fact recall {self.recall:.2f} ({self.found}/{self.facts}), "
                f"superseded values left {self.left}/{self.superseded}")


def score_profiles(r, llm, dialogs: list[dict], *, namespace: str, mode: str = "template") -> ProfileScore:
    """Play every dialog into a fresh user-scoped WorkingMemory and score the profile it ends with."""
    wm = WorkingMemory(r, namespace, scope="user", **MODES[mode])
    score = ProfileScore(mode)
    for dialog in dialogs:
        user = f"eval-{dialog['id']}"
        wm.delete_all(user)
        for turn in dialog["turns"]:
            wm.observe(turn, llm, user_id=user)
        got = wm.get(user)
        wm.delete_all(user)
        score.profiles[dialog["id"]] = got
        text = _norm(json.dumps(got, ensure_ascii=False) if isinstance(got, dict) else (got or ""))
        want, gone = expected_facts(dialog)
        for fact in want:
            score.facts += 1
            if _norm(fact) in text:
                score.found += 1
            else:
                score.missed.append((dialog["id"], fact))
        for old in gone:
            score.superseded += 1
            if _norm(old) in text:
                score.left += 1
                score.stale.append((dialog["id"], old))
    return score
