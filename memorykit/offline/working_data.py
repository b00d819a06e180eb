"""The labelled messages the offline working-memory models learn from, and the dev split held out of them.

``data/working/profile_train.jsonl`` and ``revisions_train.jsonl`` were written with the course;
``data/independent_train/working.jsonl`` apart from the method, by a writer who saw only the task's
definition. Evaluation dialogs (``data/working/profile_heldout.jsonl``, ``data/independent/``) are
never read here.
"""
from __future__ import annotations

import hashlib
import json

from ..config import data_path
from .text import normalize
from .working_geo import fold
from .working_models import Token
from .working_read import clause_pieces

DEV_EVERY = 5   # every 5th message of the independent training data (by id hash) is the dev split


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in data_path("working", name).read_text().splitlines() if line.strip()]


def is_dev(row_id: str) -> bool:
    """Whether a message of the independent training data is in its dev split (a stable hash of its id)."""
    return int(hashlib.sha256(row_id.encode()).hexdigest(), 16) % DEV_EVERY == 0


def independent_rows(part: str = "all") -> list[dict]:
    """``data/independent_train/working.jsonl`` (written apart from the method) in the training format:
    ``place`` is where the user lives or works now (``home``), never a place only mentioned in passing.
    ``part``: "all", "fit" (without the dev split) or "dev"."""
    path = data_path("independent_train", "working.jsonl")
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    keep = {"all": lambda r: True, "fit": lambda r: not is_dev(r["id"]), "dev": lambda r: is_dev(r["id"])}[part]
    return [{"text": r["text"], "name": r.get("name"), "place": r.get("home"), "timezone": r.get("timezone"),
             "passing_places": r.get("passing_places") or [], "facts": r.get("facts") or []}
            for r in rows if keep(r)]


def profile_rows(part: str = "all") -> list[dict]:
    """Labelled messages the name, place and clause models learn from: the course's, the independent ones
    and the turns of the independent training dialogs (``part`` leaves both dev splits out, or keeps only them)."""
    return load("profile_train.jsonl") + independent_rows(part) + dialog_messages(part)


def _span_tokens(toks: list[Token], text: str, span: str) -> tuple[int, int] | None:
    i = text.lower().find(span.lower())
    if i < 0:
        return None
    inside = [k for k, t in enumerate(toks) if t.start >= i and t.end <= i + len(span)]
    return (inside[0], inside[-1] + 1) if inside else None


def labelled_clauses(part: str = "all") -> list[dict]:
    """Every clause of the training messages with its kind (or none) and its span, if any."""
    out = []
    rows = [(r["text"], r.get("facts") or []) for r in profile_rows(part)]
    rows += [(r["text"], [{"kind": r["kind"], "span": r["span"]}]) for r in load("revisions_train.jsonl")]
    for text, facts in rows:
        text = normalize(text)
        for piece in clause_pieces(text):
            hit = next((f for f in facts if f["span"].lower() in piece.lower()), None)
            out.append({"text": piece, "kind": hit["kind"] if hit else "none", "span": hit["span"] if hit else None})
    return out


def is_home(mention: str, home: str | None) -> bool:
    """Whether a mentioned place is (part of) where the user lives: "Austin" in "Austin, Texas"."""
    return bool(home) and f" {fold(mention)} " in f" {fold(home)} "


# ---------------------------------------------------------------------------- dialogs written apart from the method
DEV_DIALOG_FILES = ("working_dialogs.jsonl", "working_dialogs_2.jsonl", "working_dialogs_3.jsonl",
                    "working_dialogs_4.jsonl")   # every set; benchmarks/working_dev.py scores their dev quarters
DIALOG_FILES = DEV_DIALOG_FILES[:3]   # the reading and revision models learn from these ...
CHANGE_DIALOG_FILES = DIALOG_FILES     # ... and the change model. Set 4 is dev data only: trained on, dev said yes
# (readers and change model: recall 387 -> 396 of 460, superseded 24 -> 20 of 252; readers only: 396, 21; change
# model only: 387, 20), but written apart (one look each) the first went 194 -> 190 of 253 facts (13 -> 11 of 94
# superseded left) and the change model alone 193 of 253 (13 left): neither shipped.
FRESH_DIALOG_FILES = ("working_dialogs_5.jsonl", "working_dialogs_6.jsonl", "working_dialogs_7.jsonl")
# written unsteered (2026-11-26, 2026-11-27, 2026-11-27): all of it is "fresh dev", scored by
# benchmarks/working_dev.py (each set and all) and never trained on (no model, change model included, reads it)
DIALOG_DEV_EVERY = 4   # every 4th dialog (by id hash) of working_dialogs.jsonl is the dialog-level dev split


def is_dev_dialog(dialog_id: str) -> bool:
    """Whether a training dialog is in the dialog-level dev split (a stable hash of its id, about 25%)."""
    return int(hashlib.sha256(dialog_id.encode()).hexdigest(), 16) % DIALOG_DEV_EVERY == 0


def dialogs(part: str = "all", files: tuple[str, ...] | None = None) -> list[dict]:
    """``data/independent_train/working_dialogs*.jsonl`` (``files``, default the trained-on ``DIALOG_FILES``):
    dialogs written apart from the method, each turn labelled, with the profile they should leave.
    ``part``: "all", "fit" or "dev" (about a quarter of each file)."""
    rows = []
    for name in files or DIALOG_FILES:
        path = data_path("independent_train", name)
        if path.exists():
            rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    keep = {"all": lambda d: True, "fit": lambda d: not is_dev_dialog(d["id"]),
            "dev": lambda d: is_dev_dialog(d["id"])}[part]
    return [_kinds(d) for d in rows if keep(d)]


def _kinds(dialog: dict) -> dict:
    """The dialog with set 4's general "preference" (a diet, a language to answer in) read as kind "style":
    a preference kept in the user's words, as answer-style ones are."""
    for turn in dialog["turns"]:
        for x in (turn.get("facts") or []) + (turn.get("replaces") or []):
            x["kind"] = "style" if x["kind"] == "preference" else x["kind"]
    return dialog


def as_eval_dialog(dialog: dict) -> dict:
    """A training dialog in the evaluation format (turns as texts), to score it like an evaluation dialog."""
    return {"id": dialog["id"], "turns": [t["text"] for t in dialog["turns"]], "expected": dialog["expected"]}


def dialog_messages(part: str = "all") -> list[dict]:
    """Every turn of the training dialogs as a labelled message (the format of ``independent_rows``)."""
    return [{"text": t["text"], "name": t.get("name"), "place": t.get("home"), "timezone": t.get("timezone"),
             "passing_places": t.get("passing_places") or [], "facts": t.get("facts") or []}
            for d in dialogs(part) for t in d["turns"]]


def stored_item(kind: str, span: str) -> str:
    """How a fact is stored in a preferences / goals list (what the revision model compares against)."""
    text = " ".join(span.split()).strip(" .,;:!?-\"'")
    if kind == "like":
        return f"Likes {text}"
    if kind == "dislike":
        return f"Dislikes {text}"
    return text[:1].upper() + text[1:]


def dialog_revisions(part: str = "all") -> list[dict]:
    """Revision pairs from the training dialogs (format of ``revisions_train.jsonl``): each new goal or
    preference against every item of its list stored so far, with the ones the writer says it replaces;
    a turn that only gives something up ("the half marathon is off") is one pair, its text as the span,
    of kind "drop" (a goal) or "release" (a preference allowed again)."""
    out = []
    for d in dialogs(part):
        stored: list[tuple[str, str, str]] = []   # (coarse kind, span, item)
        for turn in d["turns"]:
            gone = {r["old"] for r in turn.get("replaces") or [] if r["kind"] not in ("name", "timezone")}
            for fact in turn.get("facts") or []:
                group = "goal" if fact["kind"] in ("goal", "drop") else "pref"
                old = [(s, i) for g, s, i in stored if g == group]
                if old:
                    out.append({"old": [i for _, i in old], "text": turn["text"], "kind": fact["kind"],
                                "span": fact["span"], "replaces": [i for s, i in old if s in gone]})
            if gone and not turn.get("facts"):   # given up, nothing new named: the whole turn is the "fact"
                for group, kind in (("goal", "drop"), ("pref", "release")):
                    old = [(s, i) for g, s, i in stored if g == group]
                    if any(s in gone for s, _ in old):
                        out.append({"old": [i for _, i in old], "text": turn["text"], "kind": kind,
                                    "span": turn["text"], "replaces": [i for s, i in old if s in gone]})
            stored = [x for x in stored if x[1] not in gone]
            stored += [("goal" if f["kind"] in ("goal", "drop") else "pref", f["span"],
                        stored_item(f["kind"], f["span"])) for f in turn.get("facts") or []]
    return out
