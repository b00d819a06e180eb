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
from .working_models import Token, clauses

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
    """Labelled messages the name, place and clause models learn from: the course's and the independent ones."""
    return load("profile_train.jsonl") + independent_rows(part)


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
        for a, b in clauses(text):
            piece = text[a:b]
            hit = next((f for f in facts if f["span"].lower() in piece.lower()), None)
            out.append({"text": piece, "kind": hit["kind"] if hit else "none", "span": hit["span"] if hit else None})
    return out


def is_home(mention: str, home: str | None) -> bool:
    """Whether a mentioned place is (part of) where the user lives: "Austin" in "Austin, Texas"."""
    return bool(home) and f" {fold(mention)} " in f" {fold(home)} "
