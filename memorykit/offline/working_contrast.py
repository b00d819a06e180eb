"""Contrasts inside one phrase: a new value set against an old one ("B1 instead of B2").

How English builds such a phrase ("X instead of / rather than Y", "X, not Y", "from A to B"), not the words
of any evaluation case: in a changing turn only the new side is stored, and the old side names the stored
item it replaces; the words of a replaced item are cut off the new fact's end (``without_old``). Used by
:mod:`.working` when it applies a fact, and by :func:`.working_read.rest_after`.
"""
from __future__ import annotations

from .text import STOPWORDS
from . import working_read
from .working_models import _is_word, coarse, content, tokens
from .working_read import Fact, _span, names_something, parse_item

CONTRAST = 1              # a span stating a contrast in a changing turn keeps only its new side (``new_side``)
                          # and its old side reads no second fact: 394, 18 -> 16 ("B1 instead of B2" -> "B1",
                          # "..., not organic chemistry"); cutting in every turn lost "miles not km" (393, 17)
CONTRAST_OLD = 1          # ... and its old side names the stored item it replaces (``named_old``): 394, 16 ...
OLD_SHARED = 1            # ... 15 when that item may share words with the new side too ("write a memoir")
CROSS_OLD = 1             # ... and when no item of the fact's own group has the old side's words, the one item of any
                          # list that has them ("so pescatarian now rather than vegan", read as a goal, with "keep
                          # recipes vegan" stored as a preference; 2026-11-27): ``named_anywhere``
STORED_OLD = 1            # a contrast whose old side names a stored item (any list) keeps only its new side in any turn:
                          # the profile never records the change ("English, not Spanish" with Spanish stored; 2026-11-27)
NEW_SIDE_ALWAYS = 0       # 1: a contrast keeps only its new side in every turn, a first statement too (2026-11-27 variant)
SWAP_VERBS = 1            # "swap / replace / trade X for|with Y" and "switch / change / move / go from X to Y" set Y
                          # against X as "Y instead of X" does (the verb's own grammar, 2026-11-27)
_SWAP = {"swap", "swapped", "swapping", "swaps", "replace", "replaced", "replacing", "replaces", "trade", "traded",
         "trading", "exchange", "exchanged", "exchanging", "substitute", "substituted", "substituting"}
_FROM = _SWAP | {"switch", "switched", "switching", "change", "changed", "changing", "move", "moved", "moving", "go",
                 "going", "went", "shift", "shifted", "shifting"}
NUMBERS_NEW = 1           # a number is a value of its own: "IELTS 7.5" after "IELTS 7.0" keeps its 7.5 (2026-11-26)
NUMBER_WORDS = frozenset("""one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred""".split())
_INSTEAD = (("instead", "of"), ("rather", "than"))
_NEGATED_AFTER = {"do", "does", "did", "am", "is", "are", "was", "were", "be", "will", "would", "shall", "should",
                  "can", "could", "may", "might", "must", "have", "has", "had", "i'm", "im", "it's", "its", "why",
                  "if", "or", "and", "but", "whether", "to", "just", "only", "please", "pls", "plz", "have", "dont"}


def _number(text: str) -> bool:
    return any(c.isdigit() for c in text)


def _cut(fact: Fact, span: str) -> Fact:
    return Fact(fact.kind, span.strip(" ,;:-"), fact.clause, fact.confidence, fact.change, fact.message)


def _says(text: str) -> bool:
    """Whether a side of a contrast holds a word beyond stopwords ("B1", "7.0", "every day")."""
    return any(t.low not in STOPWORDS and (t.text.isalnum() or any(c.isdigit() for c in t.text)) for t in tokens(text))


def contrast(span: str) -> tuple[str, str] | None:
    """(new side, old side) of a span that sets a new value against an old one, else None: "B1 instead of B2"
    -> ("B1", "B2"), "materials science, not organic chemistry" -> (..., "organic chemistry"), "run from five to
    eight km" -> ("run eight km", "five"). The new side must name something; a verb's own negation ("I do not
    eat meat", "not doing it") is no contrast: "not" sets off an old value only after a comma or a word that
    ends a phrase (not an auxiliary, a conjunction or the span's start)."""
    toks = tokens(span)
    low = [t.low for t in toks]
    for k in range(1, len(toks) - 2):
        if (low[k], low[k + 1]) in _INSTEAD:
            new, old = span[:toks[k].start], span[toks[k + 1].end:]
            return (new, old) if _says(new) and _says(old) else None
    for k in range(1, len(toks) - 1):
        if low[k] == "not" and low[k - 1] not in _NEGATED_AFTER and not low[k - 1].endswith("n't") and \
                (low[k - 1] == "," or _is_word(toks[k - 1])) and _is_word(toks[k + 1]) and low[k + 1] not in STOPWORDS:
            new, old = span[:toks[k].start], span[toks[k + 1].start:]
            if _says(new) and _says(old):
                return new, old
    for k in range(len(toks) - 3) if SWAP_VERBS else ():   # "swapped rice for quinoa", "switch from Spanish to English"
        if low[k] in _SWAP:
            m = next((m for m in range(k + 2, len(toks) - 1) if low[m] in ("for", "with")), None)
            if m is not None and _says(span[toks[k + 1].start:toks[m - 1].end]) and _says(span[toks[m + 1].start:]):
                return span[toks[m + 1].start:], span[toks[k + 1].start:toks[m - 1].end]
        if low[k] in _FROM and low[k + 1] == "from":
            m = next((m for m in range(k + 3, len(toks) - 1) if low[m] == "to"), None)
            if m is not None and _says(span[toks[k + 2].start:toks[m - 1].end]) and _says(span[toks[m + 1].start:]):
                return span[toks[m + 1].start:], span[toks[k + 2].start:toks[m - 1].end]
    for k in range(1, len(toks) - 3):   # "from A to B": A is one or two words, B follows "to"
        for m in (k + 2, k + 3):
            if m + 1 < len(toks) and low[k] == "from" and low[m] == "to" and all(_is_word(t) for t in toks[k + 1:m]):
                new = span[:toks[k].start] + span[toks[m + 1].start:]
                old = span[toks[k + 1].start:toks[m - 1].end]
                if any(c.isdigit() for c in old) or all(w in NUMBER_WORDS for w in old.lower().split()):
                    return (" ".join(new.split()), old) if _says(new) else None
    return None


def new_side(fact: Fact, change: float = 1.0) -> Fact:
    """The fact with only the new side of a contrast it states ("B1 instead of B2" -> "B1") in a turn that
    changes something (``change``: the turn's change probability; 1.0 when it replaced an item): the old value
    is not stored again next to the new one. A first statement keeps its contrast ("miles not km")."""
    if not CONTRAST or change <= working_read.CHANGE_THRESHOLD and not NEW_SIDE_ALWAYS:
        return fact
    found = contrast(fact.span)
    return _cut(fact, found[0]) if found else fact


def old_stored(fact: Fact, lists: dict[str, list[str]]) -> bool:
    """``STORED_OLD``: whether the old side of a contrast the span states names a stored item of any list (content
    words of the old side, not of the new, in the item)."""
    found = contrast(fact.span) if STORED_OLD and CONTRAST else None
    if not found:
        return False
    old = content(found[1]) - content(found[0])
    return any(content(parse_item(item, section)[1]) & old for section, items in lists.items() for item in items)


def named_old(fact: Fact, items: list[str], section: str) -> str | None:
    """The stored item a contrast's old side names ("B1 instead of B2" with "Pass German exam B2" stored; the
    contrast read from the span to its clause's end, "stories rather than a memoir, as ..."): the one item of the fact's kind sharing content words with the old side and not with the new; else None."""
    at = fact.clause.lower().find(fact.span.lower())
    found = contrast(fact.clause[at:] if at >= 0 else fact.span) if CONTRAST_OLD else None
    if not found:
        return None
    new, old = content(found[0]), content(found[1]) - content(found[0])
    hits = [item for item in items if coarse(parse_item(item, section)[0]) == coarse(fact.kind)
            and content(parse_item(item, section)[1]) & old and (OLD_SHARED or not content(parse_item(item, section)[1]) & new)]
    return hits[0] if len(hits) == 1 else None


def named_anywhere(fact: Fact, lists: dict[str, list[str]]) -> tuple[str, str] | None:
    """``CROSS_OLD``: (list, item) a contrast's old side names when it is the one stored item of any list sharing
    content words with the old side and not with the new, and it is not of the fact's own group (that is
    ``named_old``); else None."""
    at = fact.clause.lower().find(fact.span.lower())
    found = contrast(fact.clause[at:] if at >= 0 else fact.span) if CROSS_OLD and CONTRAST_OLD else None
    if not found:
        return None
    new, old = content(found[0]), content(found[1]) - content(found[0])
    hits = [(section, item) for section, items in lists.items() for item in items
            if content(parse_item(item, section)[1]) & old and not content(parse_item(item, section)[1]) & new]
    if len(hits) != 1 or coarse(parse_item(hits[0][1], hits[0][0])[0]) == coarse(fact.kind):
        return None
    return hits[0]


def without_old(fact: Fact, removed: list[tuple[str, str]]) -> Fact:
    """The fact with the words of the items it replaced cut off its end ("japanese instead of korean" ->
    "japanese"): the span model re-reads each stretch between old words and the fullest stretch is kept.
    ``removed``: (item, section) pairs; a span left naming nothing new stays as it was."""
    old = set().union(*(content(parse_item(item, section)[1]) for item, section in removed))
    numbers = {t.low for item, section in removed for t in tokens(parse_item(item, section)[1]) if _number(t.text)}
    toks = tokens(fact.span)
    marked = [bool(content(t.text) & old) or NUMBERS_NEW and _number(t.text) and t.low in numbers for t in toks]
    named = [k for k, t in enumerate(toks) if content(t.text) or NUMBERS_NEW and _number(t.text)]
    if not named or not marked[named[-1]]:   # only a trailing old part ("..., not Spanish") is cut ...
        return fact
    k = named[-1]
    while k > 0 and marked[k - 1]:
        k -= 1
    if k == 0 or content(toks[k - 1].text):   # ... set off from the new words ("detailed answers" stays)
        return fact
    best, runs, start = None, [], None
    for k, m in enumerate(marked + [True]):
        if not m and start is None:
            start = k
        elif m and start is not None:
            runs.append((start, k))
            start = None
    for a, b in runs:
        span = _span(fact.span[toks[a].start:toks[b - 1].end], fact.kind)
        if span and names_something(span) and (best is None or len(content(span)) >= len(content(best))):
            best = span
    return Fact(fact.kind, best, fact.clause, fact.confidence, fact.change, fact.message) if best else fact
