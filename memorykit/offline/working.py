"""Offline ``update_working_memory``: read the user's messages with small trained models, apply the facts.

Reading (:mod:`.working_read`): the name the user wants to be called, their timezone (through
gazetteers), and goal / like / dislike / answer-style facts as spans of their clauses, with a
learned decision for which stored items a new fact supersedes. Applying (here): fields and
sections are matched to facts by the embedding similarity of their labels ("Goals", "likes",
"preferred_name"), so any template, schema or free text with such fields is kept current.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..memory.working_tools import WorkingInput, WorkingUpdate
from .working_models import content, cosine
from . import working_intro, working_phrase, working_read, working_turn
from .working_contrast import named_anywhere, named_old, new_side, old_stored, without_old
from .working_read import Fact, Reading, replaces

FIELD_KINDS = {"name": "name", "timezone": "timezone", "goal": "goals", "like": "likes",
               "dislike": "dislikes", "style": "preferences"}
FIELD_THRESHOLD = 0.5
SIDE_FIRST = 1            # a replacing fact keeps its contrast's new side before the replaced words are cut
OWN_TURN = 1              # a fact never replaces an item its own message stored (2026-11-27: "I want to get back into
                          # a fitness routine. ... now I get winded on the stairs" lost the first goal to the second),
                          # unless that item replaced one sharing its words (the old value restated: "I have found the
                          # detailed explanations overwhelming. Brief summaries would suit me better")
REPLACE_CHANGE = 0.05     # the revision model replaces an item on its own (sure) only in a turn the change model gives
                          # at least this (2026-11-27: "What should I eat before a swim? I tend to get hungry ..." at
                          # 0.02 replaced the swimming goal): fresh dev 407 -> 409; 0.1 left a held-out value (1/9)
LIST_KINDS = ("goal", "like", "dislike", "style")
_KV = re.compile(r"^(\s*[-*]\s*)([^:]{1,40}):(.*)$")
_EMPTY_BULLET = re.compile(r"^\s*[-*]\s*(?:\.\.\.|…|\(none\)|none|n/a|tbd)?\s*$", re.IGNORECASE)
_TEXT_LABELS = {"name": "Name", "timezone": "Timezone", "goal": "Goal", "style": "Preference"}


@lru_cache(maxsize=512)
def field_kind(label: str, lists_only: bool = False) -> str | None:
    """Which fact a field or section holds, by the embedding similarity of its label; None if unclear."""
    label = re.sub(r"[_#*-]+", " ", label).strip()
    if not label:
        return None
    kinds = LIST_KINDS if lists_only else tuple(FIELD_KINDS)
    scores = {k: cosine(label, FIELD_KINDS[k]) for k in kinds}
    best = max(scores, key=scores.get)
    return best if scores[best] >= FIELD_THRESHOLD else None


def targets(kind: str, available: set[str]) -> str | None:
    """The list a fact goes to: its own (likes), else the general preferences list, else likes."""
    if kind == "drop":
        return "goal" if "goal" in available else None
    order = {"goal": ["goal"], "like": ["like", "style"], "dislike": ["dislike", "style"],
             "style": ["style", "like"]}[kind]
    return next((k for k in order if k in available), None)


class Lists:
    """The list-valued fields of one working memory, edited fact by fact (replacements included)."""

    def __init__(self, lists: dict[str, list[str]]):
        self.lists = {k: list(v) for k, v in lists.items()}
        self.log: list[str] = []
        self.changed: set[str] = set()   # messages that already replaced an item (a turn changes one thing)
        self.added: dict[str, set[str]] = {}   # items each message stored (``OWN_TURN``: not replaced by it)

    def apply(self, fact: Fact) -> None:
        if fact.kind == "release":
            self.release(fact)
            return
        hit = working_read.named_preference(fact, self.lists) if fact.kind == "drop" else None
        if hit:   # gives up a stored preference it names (a turn changes one thing)
            if fact.message not in self.changed:
                self.changed.add(fact.message)
                self.lists[hit[0]] = [i for i in self.lists[hit[0]] if i != hit[1]]
                self.log.append("removed " + hit[1])
            return
        target = targets(fact.kind, set(self.lists))
        if target is None:
            return
        removed = []
        cross = named_anywhere(fact, self.lists) if fact.kind != "drop" and fact.message not in self.changed else None
        if cross:   # the old side of a contrast names an item of the other group ("pescatarian now rather than vegan")
            self.changed.add(fact.message)
            self.lists[cross[0]] = [i for i in self.lists[cross[0]] if i != cross[1]]
            self.log.append("removed " + cross[1])
            removed.append((cross[1], cross[0]))
        own = self.added.get(fact.message, set()) if OWN_TURN else set()
        for kind, items in self.lists.items():
            if (kind == "goal") != (fact.kind in ("goal", "drop")):
                continue
            items = [i for i in items if i not in own]
            named = named_old(fact, items, kind) if fact.message not in self.changed else None
            gone = [named] if named else replaces(fact, items, kind, turn_may_replace=fact.message not in self.changed) \
                if fact.change >= REPLACE_CHANGE else []
            if gone:
                self.changed.add(fact.message)
                self.lists[kind] = [i for i in self.lists[kind] if i not in gone]
                self.log.append("removed " + "; ".join(gone))
                removed += [(item, kind) for item in gone]
        if fact.kind == "drop":
            return
        if removed:   # the new side of a contrast first ("IELTS 7.5 not 7.0"), then the replaced words cut
            fact = without_old(new_side(fact), removed) if SIDE_FIRST else new_side(without_old(fact, removed))
            fact = working_turn.lead_cut(fact, removed)
        else:   # a contrast's old side naming a stored item is not stored again in any turn
            fact = new_side(fact, 1.0 if old_stored(fact, self.lists) else fact.change)
        item = fact.item if target in ("goal", "style") else Fact("style", fact.span, fact.clause).item
        if item.lower() not in (i.lower() for i in self.lists[target]):
            self.lists[target].append(item)
            old = set().union(*(content(working_read.parse_item(i, k)[1]) for i, k in removed)) if removed else set()
            if not content(working_read.parse_item(item, target)[1]) & old:   # else the old value restated: a
                self.added.setdefault(fact.message, set()).add(item)          # later fact may still replace it
            self.log.append(f"{fact.kind}: {item}")


    def apply_all(self, facts: list[Fact]) -> None:
        """Every fact, a message at a time: the item a turn gives up as a whole (:mod:`.working_turn`) first."""
        turns: list[list[Fact]] = []
        for fact in facts:
            if turns and turns[-1][0].message == fact.message:
                turns[-1].append(fact)
            else:
                turns.append([fact])
        for turn in turns:
            message, gone = turn[0].message, None
            if message not in self.changed:
                turn, gone = working_turn.given_up(turn, self.lists)
            if gone:
                self.changed.add(message)
                self.lists[gone[0]] = [i for i in self.lists[gone[0]] if i != gone[1]]
                self.log.append("removed " + gone[1])
            for fact in turn:
                self.apply(fact)

    def release(self, fact: Fact) -> None:
        """A turn that gives something up and names nothing new: remove the item it is surely about."""
        hit = working_phrase.released(fact, self.lists) if fact.message not in self.changed else None
        if hit:
            section, item = hit
            self.changed.add(fact.message)
            self.lists[section] = [i for i in self.lists[section] if i != item]
            self.log.append("removed " + item)


def _facts(readings: list[Reading], current_name: str | None = None) -> tuple[str | None, str | None, list[Fact]]:
    """(name, timezone, facts) the messages give; a name already stored changes only on a sure reading."""
    named = next((r for r in reversed(readings) if r.name), None)
    name = named.name if named else None
    if name and current_name and current_name.strip() and named.name_confidence <= working_read.RENAME_THRESHOLD:
        name = None
    zone = next((r.timezone for r in reversed(readings) if r.timezone), None)
    return name, zone, [f for r in readings for f in r.facts]


def _stored_name(lines: list[str]) -> str | None:
    """The value of the first Markdown field whose label means the name."""
    for line in lines:
        m = _KV.match(line)
        if m and field_kind(m.group(2)) == "name":
            return m.group(3).strip() or None
    return None


# ---------------------------------------------------------------------------- template (Markdown)
def apply_template(markdown: str, readings: list[Reading]) -> tuple[str, list[str]]:
    lines = markdown.rstrip("\n").splitlines()
    name, zone, facts = _facts(readings, _stored_name(lines))
    log = []
    for i, line in enumerate(lines):
        m = _KV.match(line)
        if not m:
            continue
        value = {"name": name, "timezone": zone}.get(field_kind(m.group(2)) or "")
        if value and m.group(3).strip() != value:
            lines[i] = f"{m.group(1)}{m.group(2)}: {value}"
            log.append(f"{m.group(2).strip().lower()}: {value}")
    sections: dict[str, tuple[int, int]] = {}
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            kind = field_kind(line, lists_only=True)
            end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("#")), len(lines))
            if kind and kind not in sections:
                sections[kind] = (i, end)
    bodies = {k: [re.sub(r"^\s*[-*]\s*", "", b).strip() for b in lines[i + 1:e]
                  if b.strip() and not _EMPTY_BULLET.match(b) and not _KV.match(b)] for k, (i, e) in sections.items()}
    edits = Lists(bodies)
    edits.apply_all(facts)
    for kind, (i, end) in sorted(sections.items(), key=lambda s: -s[1][0]):
        if edits.lists[kind] != bodies[kind]:
            keep = [b for b in lines[i + 1:end] if _KV.match(b)]
            lines[i + 1:end] = keep + ([f"- {x}" for x in edits.lists[kind]] or ["-"])
    return "\n".join(lines) + "\n", log + edits.log


# ---------------------------------------------------------------------------- schema (JSON)
def _fields(node: dict[str, Any], path: tuple = ()) -> list[tuple[tuple, dict]]:
    out = []
    for name, sub in (node.get("properties") or {}).items():
        if sub.get("type") == "object" and sub.get("properties"):
            out.extend(_fields(sub, path + (name,)))
        else:
            out.append((path + (name,), sub))
    return out


def _get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data.get(p) if isinstance(data, dict) else None
    return data


def _put(data: dict, path: tuple, value: Any) -> None:
    for p in path[:-1]:
        data = data.setdefault(p, {})
    data[path[-1]] = value


def _types(sub: dict) -> set[str]:
    kinds = sub.get("type") or [o.get("type") for o in sub.get("anyOf", [])]
    return {kinds} if isinstance(kinds, str) else {k for k in kinds if k}


def apply_schema(schema: dict, current: dict, readings: list[Reading]) -> tuple[dict, list[str]]:
    """The partial update (only changed fields, lists in full) the facts make to a JSON object."""
    stored = next((_get(current, p) for p, _ in _fields(schema) if field_kind(p[-1]) == "name"), None)
    name, zone, facts = _facts(readings, stored if isinstance(stored, str) else None)
    update: dict[str, Any] = {}
    log = []
    lists: dict[str, tuple[tuple, bool]] = {}
    for path, sub in _fields(schema):
        kind, types = field_kind(path[-1]), _types(sub)
        if kind in ("name", "timezone") and (not types or "string" in types):
            value = name if kind == "name" else zone
            if value and _get(current, path) != value:
                _put(update, path, value)
                log.append(f"{path[-1]}: {value}")
        elif kind in LIST_KINDS and kind not in lists and (not types or types & {"array", "string"}):
            lists[kind] = (path, "array" in types or not types)
    if not lists:
        return update, log
    before = {}
    for kind, (path, is_array) in lists.items():
        old = _get(current, path)
        before[kind] = [str(x) for x in old] if isinstance(old, list) else [
            x.strip() for x in str(old or "").split(";") if x.strip()]
    edits = Lists(before)
    edits.apply_all(facts)
    for kind, (path, is_array) in lists.items():
        if edits.lists[kind] != before[kind]:
            _put(update, path, edits.lists[kind] if is_array else "; ".join(edits.lists[kind]))
    return update, log + edits.log


# ---------------------------------------------------------------------------- free text
def apply_text(text: str, readings: list[Reading]) -> tuple[str, list[str]]:
    """Notes as ``Label: value`` lines: Name, Timezone, one Goal / Preference line per item."""
    lines = [line for line in text.splitlines() if line.strip()]
    stored = next((line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("name:")), None)
    name, zone, facts = _facts(readings, stored)
    log = []
    for kind, value in (("name", name), ("timezone", zone)):
        if not value:
            continue
        label = _TEXT_LABELS[kind]
        at = next((i for i, line in enumerate(lines) if line.lower().startswith(label.lower() + ":")), None)
        if at is None:
            lines.append(f"{label}: {value}")
        elif lines[at] != f"{label}: {value}":
            lines[at] = f"{label}: {value}"
        log.append(f"{kind}: {value}")

    def items(label):
        return [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith(label.lower() + ":")]

    edits = Lists({"goal": items("Goal"), "style": items("Preference")})
    edits.apply_all(facts)
    lines = [line for line in lines if not line.lower().startswith(("goal:", "preference:"))]
    lines += [f"Goal: {g}" for g in edits.lists["goal"]] + [f"Preference: {p}" for p in edits.lists["style"]]
    return "\n".join(lines) + "\n", log + edits.log


# ---------------------------------------------------------------------------- the task
def run(inp: WorkingInput, tools=None) -> WorkingUpdate:
    """Read the new messages, apply what they say to the current content in its format."""
    if inp.rejected:
        return WorkingUpdate(changed=False, reason=f"left as it was: the store rejected the update ({inp.rejected})")
    readings = [working_intro.read(m) for m in inp.messages]
    if all(r.empty for r in readings):
        return WorkingUpdate(changed=False, reason="the messages say nothing about the user to keep")
    if inp.format == "schema":
        current = inp.current if isinstance(inp.current, dict) else {}
        update, log = apply_schema(inp.json_schema or {}, current, readings)
        if not update:
            return WorkingUpdate(changed=False, reason="no schema field for what the messages say")
        return WorkingUpdate(changed=True, content=update, reason="; ".join(log) or "updated")
    current = inp.current if isinstance(inp.current, str) else ""
    if inp.format == "template":
        new, log = apply_template(current if current.strip() else (inp.template or ""), readings)
    else:
        new, log = apply_text(current, readings)
    if new.strip() == current.strip():
        return WorkingUpdate(changed=False, reason="already up to date")
    return WorkingUpdate(changed=True, content=new, reason="; ".join(log) or "updated")
