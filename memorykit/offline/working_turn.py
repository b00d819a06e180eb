"""A user's turn read as a whole before its facts are applied: which stored item it names as given up.

How a turn says that something stored no longer holds when no single phrase sets the new value against the old
(that case is :mod:`.working_contrast`): the old value is restated as a fact of its own before the new one
("twelve months is too slow, I want the card cleared in eight months now"), or a clause that states no fact names
the stored item ("tables do not display well ... Headed sections would be preferable"). Both are read from the
structure of the turn and the stored items' own words, not from the words of any evaluation case. Used by
:class:`.working.Lists` for each message's facts.
"""
from __future__ import annotations

from . import working_phrase, working_read
from .working_models import coarse, content, models, tokens
from .working_contrast import NUMBER_WORDS, contrast
from .working_read import TIME_UNITS, Fact, clause_pieces, pair_rows, parse_item

OLD_FIRST = 1             # in a changing turn, an earlier fact sharing words (not in the last fact of its group)
                          # with exactly one stored item is that item's old value: it is removed, not stored again
MENTION = 1               # a clause stating no fact that names exactly one stored item of the group a new fact of
                          # the turn belongs to gives that item up ...
MENTION_FLOOR = 0.5       # ... if the revision model gives the clause (as a drop / release) at least this for it
MENTION_CHANGE = 0.0      # ... in a turn the change model gives at least this
LEAD_OLD = 1              # a replacing fact "old part, new part" keeps the part after the comma (``lead_cut``)
RESTATED = 1              # in a changing turn, a dislike naming exactly one stored item, of either group, by words
                          # (not times or numbers) no other fact of the turn has, restates the old value: that item
                          # is given up and the fact is not stored ("the fasting is not for me", "I tried low-carb
                          # ... I'm going back to normal eating"). 2: any fact before another one too ("the abs
                          # thing ... I want to ..."): old dev 402 -> 398 (lost "Spanish", "20 minute talk"): not kept
NO_LONGER = 1             # a fact saying its value holds no longer ("I'm not pescatarian any more", "no longer
                          # vegetarian") is not stored: it gives up the one stored item it names, else it is read
                          # as a turn that gives something up and names nothing new (a release)
ON_HOLD = 1               # ... and so does a span that puts its value on hold ("I'm putting the Two Oceans on hold
                          # for this year", "put Spanish on hold"): a pause gives the item up; "on hold" without a
                          # verb putting something there ("I was on hold with the bank") is no such span
_NEGATION = {"not", "no", "never", "nor"}
_PUT = {"put", "puts", "putting", "place", "places", "placed", "placing"}


def _words(text: str) -> set[str]:
    """Content words, hyphenated ones apart too ("the screen-time limit" names "screen time")."""
    return content(text) | content(text.replace("-", " "))


def _named(text: str) -> set[str]:
    """Content words that can name a stored item: not times, numbers or number words ("two weeks")."""
    return {w for w in _words(text) if w not in TIME_UNITS and w not in NUMBER_WORDS and not w[:1].isdigit()}


def no_longer(span: str) -> bool:
    """Whether a span says its value holds no longer: "no longer X", "not X any more / anymore", "putting X on
    hold" (``ON_HOLD``)."""
    low = [t.low for t in tokens(span)]
    pairs = list(zip(low, low[1:]))
    if ("no", "longer") in pairs:
        return True
    if ON_HOLD and any(pair == ("on", "hold") and _PUT & set(low[:k]) for k, pair in enumerate(pairs)):
        return True
    ends = [k for k, pair in enumerate(pairs) if pair == ("any", "more")]
    ends += [k for k, w in enumerate(low) if w == "anymore"]
    return any(w in _NEGATION or w.endswith("n't") for k in ends for w in low[:k])


def _stored(lists: dict[str, list[str]], group: str) -> list[tuple[str, str, set[str]]]:
    """(section, item, content words of its object) of every stored item of a group ("goal" / "pref")."""
    out = []
    for section, items in lists.items():
        for item in items:
            kind, obj = parse_item(item, section)
            if coarse(kind) == group:
                out.append((section, item, content(obj)))
    return out


def given_up(facts: list[Fact], lists: dict[str, list[str]]) -> tuple[list[Fact], tuple[str, str] | None]:
    """(the facts of one message left to apply, the (section, item) the turn gives up or None)."""
    if not facts or facts[0].kind == "release":
        return facts, None
    change = facts[0].change
    swaps = [f for f in facts if f.swap]
    if swaps:   # "X instead": X in place of the item the turn surely gives up, else not stored
        facts = [f for f in facts if not f.swap]
        f = swaps[0]
        floor = working_phrase.INSTEAD_CHANGE if working_phrase.INSTEAD_ANY else working_read.CHANGE_THRESHOLD
        hit = working_phrase.released(Fact("release", f.message, f.message, 1.0, change, f.message), lists,
                                    working_phrase.INSTEAD_FLOOR) if change > floor else None
        if hit:
            kind = "goal" if hit[0] == "goal" else "like" if f.kind == "like" else "style"
            return facts + [Fact(kind, f.span, f.clause, f.confidence, change, f.message)], hit
        facts += [Fact(x.kind, x.span, x.clause, x.confidence, change, x.message) for x in swaps if x.keep]
        if not facts:
            return facts, None
    if NO_LONGER:
        for f in facts:
            if f.kind != "drop" and no_longer(f.span):
                rest = [x for x in facts if x is not f]
                hits = [(s, i) for group in ("goal", "pref") for s, i, _ in _stored(lists, group)
                        if _named(f.span) & _words(parse_item(i, s)[1])]
                if len(hits) == 1:
                    return rest, hits[0]
                return rest or [Fact("release", f.message, f.message, 1.0, change, f.message)], None
    for group in ("goal", "pref"):
        same = [f for f in facts if coarse(f.kind) == group and f.kind != "drop"]
        if not OLD_FIRST or len(same) < 2 or change <= working_read.CHANGE_THRESHOLD:
            continue
        newest = content(same[-1].span)
        for f in same[:-1]:
            hits = [(s, i) for s, i, words in _stored(lists, group) if (content(f.span) & words) - newest]
            if len(hits) == 1 and not contrast(f.span):   # "six hours instead of eight" is a new value
                return [x for x in facts if x is not f], hits[0]
    if RESTATED and change > working_read.CHANGE_THRESHOLD:
        for n, f in enumerate(facts):
            if f.kind == "drop" or not (f.kind == "dislike" or RESTATED > 1 and n < len(facts) - 1) or contrast(f.span):
                continue
            others = set().union(*(_words(x.span) for x in facts if x is not f))
            mine = _named(f.span) - others
            hits = [(s, i) for group in ("goal", "pref") for s, i, _ in _stored(lists, group)
                    if mine & _words(parse_item(i, s)[1])]
            if len(hits) == 1:
                return [x for x in facts if x is not f], hits[0]
    if not MENTION or change < MENTION_CHANGE:
        return facts, None
    spans = [f.span.lower() for f in facts]
    for group in ("goal", "pref"):
        new = set().union(*(content(f.span) for f in facts if coarse(f.kind) == group and f.kind != "drop"))
        if not new:
            continue
        stored = _stored(lists, group)
        for piece in clause_pieces(facts[0].message):
            if piece.endswith("?") or any(s in piece.lower() for s in spans):
                continue
            words = {w for w in _words(piece) - new if w not in TIME_UNITS}
            hits = [(s, i) for s, i, _ in stored if words & _words(parse_item(i, s)[1])]
            if len(hits) != 1:
                continue
            section, item = hits[0]
            items = lists[section]
            kind = "drop" if group == "goal" else "release"
            prob = models().pairs.predict_proba(pair_rows(kind, piece, piece, items, section))[:, 1][items.index(item)]
            if prob >= MENTION_FLOOR:
                return facts, hits[0]
    return facts, None


def _group_of(text: str) -> str | None:
    """The group ("goal" / "pref") the clause classifier reads a piece of text as, None if no fact."""
    kind = working_phrase.clause_kind(text)
    return None if kind is None else coarse(kind)


def lead_cut(fact: Fact, removed: list[tuple[str, str]]) -> Fact:
    """A fact that replaced an item, written "old part, new part" ("kpop now lol, into jpop these days"): only the
    part after the comma, when the part before shares words with the replaced item and the part after does not."""
    if not LEAD_OLD or "," not in fact.span:
        return fact
    old = set().union(*(content(parse_item(item, section)[1]) for item, section in removed))
    before, after = fact.span.split(",", 1)
    after = after.strip(" ,")
    if content(before) & old and not content(after) & old and working_read.names_something(after) and \
            _group_of(after) == coarse(fact.kind):
        return Fact(fact.kind, after, fact.clause, fact.confidence, fact.change, fact.message)
    return fact
