"""Scoring working-memory upkeep: play dialogs into a WorkingMemory, check the profile it ends with.

A dialog (``data/working/*.jsonl``, or ``data/independent/working.jsonl``, written apart from the
method) lists the user's turns and the expected facts: ``name``, ``timezone``, ``goals`` and
``preferences`` (text each must contain; a null ``name`` or ``timezone`` is not a fact to find),
and values that must be absent (``not_goals``, ``not_preferences``, ``not_name``, ``not_timezone``).

Two counts of absent values, because a ``not_*`` value is either *superseded* (the user changed it)
or only *mentioned in passing* (a city they visited, a friend's name):

* "superseded left": a ``not_goals`` / ``not_preferences`` value, or a ``not_name`` /
  ``not_timezone`` when the dialog expects a current name / timezone (so one replaced the other),
  still in the profile;
* "absent present": every ``not_*`` value still in the profile (passing mentions included).

Fact recall is found / expected over all dialogs.
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


INDEPENDENT = "independent/working.jsonl"   # the evaluation set written apart from the method


def load_dialogs(name: str) -> list[dict]:
    """Dialogs from ``data/working/<name>``, or ``data/<folder>/<file>`` when ``name`` has a folder
    (``INDEPENDENT``)."""
    path = data_path(*name.split("/")) if "/" in name else data_path("working", name)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _values(value) -> list[str]:
    """A ``not_*`` entry as a list: absent (None), one string, or a list of strings."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else [v for v in value if v]


def expected_facts(dialog: dict) -> tuple[list[str], list[str], list[str]]:
    """(facts that must be in the profile, superseded values that must not, every value that must not)."""
    exp = dialog["expected"]
    want = [v for v in (exp.get("name"), exp.get("timezone")) if v] + [*exp.get("goals", []),
                                                                       *exp.get("preferences", [])]
    gone = [*_values(exp.get("not_goals")), *_values(exp.get("not_preferences"))]
    gone += [v for k in ("name", "timezone") if exp.get(k) for v in _values(exp.get("not_" + k))]
    absent = [v for k in ("goals", "preferences", "name", "timezone") for v in _values(exp.get("not_" + k))]
    return want, gone, absent


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
    absent: int = 0
    present: int = 0
    missed: list[tuple[str, str]] = field(default_factory=list)
    stale: list[tuple[str, str]] = field(default_factory=list)
    profiles: dict[str, object] = field(default_factory=dict, repr=False)

    @property
    def recall(self) -> float:
        return self.found / self.facts if self.facts else 0.0

    def __str__(self) -> str:
        return (f"{self.mode}: fact recall {self.recall:.2f} ({self.found}/{self.facts}), "
                f"superseded values left {self.left}/{self.superseded}, "
                f"absent values present {self.present}/{self.absent}")


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
        want, gone, absent = expected_facts(dialog)
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
        for value in absent:
            score.absent += 1
            score.present += _norm(value) in text
    return score


def summary(scores: dict[str, ProfileScore]):
    """Aggregate scores, one row per named dialog set: only totals, never the cases."""
    import pandas as pd

    rows = [{"set": name, "dialogs": len(s.profiles), "fact recall": round(s.recall, 3),
             "facts found": f"{s.found}/{s.facts}", "superseded left": f"{s.left}/{s.superseded}",
             "absent present": f"{s.present}/{s.absent}"} for name, s in scores.items()]
    return pd.DataFrame(rows).set_index("set")


def compare_sets(r, llm, names=("profile_heldout.jsonl", "dialogs.jsonl", INDEPENDENT), *, namespace: str,
                 mode: str = "template"):
    """``summary`` of each dialog set side by side (the course's held-out dialogs and the set written
    apart from the method)."""
    return summary({name: score_profiles(r, llm, load_dialogs(name), namespace=namespace, mode=mode)
                    for name in names})
