"""Phrases that say how a clause of a user's message is to be read, from English structure (2026-11-27).

* ``LABEL``: a short span that only labels what follows it ("My target is IELTS 7.5", "Small update: ...");
* ``INSTEAD``: "X instead" sets X in place of something the turn does not name (applied in :mod:`.working_turn`);
* ``NO_LONGER_CLAUSE``: a message with no fact that says something holds no longer gives something up.

Used by :func:`.working_read.read_facts` and :func:`.working_read.read`. Also here: :func:`released`, the item a
turn that names nothing new gives up.
"""
from __future__ import annotations

from . import working_read
from .working_models import _is_word, clause_matrix, models, tokens
from .working_read import FIRST_PERSON, Fact, _span, clause_pieces, names_something, pair_rows

LABEL = 1                 # a span that only labels what follows it ("My target" of "My target is IELTS 7.5", "Small
                          # update" of "Small update: ...") is read again from after the colon or the "is"
_DETERMINERS = {"my", "our", "the", "this", "that", "a", "an", "new", "main", "one"}
LEAD_LABEL = 1            # ... and so is a span that is only the lead of its clause before a comma, read as no fact on
                          # its own ("Small update, the gym ... is closed"; "Wait, scrap dairy-free"): read from after the
                          # comma if that reads as a fact, else no fact (2026-11-27). A lead that is a value ("Spanish,
                          # French and German ...") reads as something on its own and stays
LEAD_NONE = 0.85          # ... "no fact" when the clause classifier gives the lead alone at least this for none
INSTEAD = 1               # a clause "X instead" (no "of"), not a question, read as no fact or as a dislike, sets X in
                          # place of something: in a changing turn it replaces the item the revision model is sure
                          # the turn gives up, in that item's list ("Cardiologist said no. Cold showers instead.")
INSTEAD_FLOOR = 0.1       # ... ranked first by the revision model at least this sure (and ``RELEASE_MARGIN`` ahead):
                          # "instead" says something is replaced, the model only which (as ``CHANGE_FLOOR``)
INSTEAD_ANY = 1           # ... and so does a span of any fact kind ending in "instead" ("Maybe I'll just do walking along
                          # the river in the evenings instead", read as a goal): kept as an ordinary fact when the turn
                          # gives nothing up surely (2026-11-27)
INSTEAD_ASK = 1           # ... and a request asked as a question, "can / could we|you|i X instead?" ("can we do breathing
                          # exercises instead?"): X is the value (2026-11-27)
INSTEAD_CHANGE = 0.2      # with INSTEAD_ANY: a swap replaces in a turn the change model gives more than this ("instead"
                          # says something is replaced; the revision model says which, at ``INSTEAD_FLOOR``)
QUESTION_START = {"can", "could", "should", "would", "will", "shall", "may", "do", "does", "did", "is", "are", "am",
                  "what", "how", "why", "which", "where", "when", "who"}   # a clause asking, not stating
NO_LONGER_CLAUSE = 1      # a message with no fact and a statement that something holds no longer ("so that goal is
                          # no longer necessary") gives something up whatever the change model says: a release
                          # (``released`` still removes an item only when the revision model is sure which one)


def clause_probs(text: str) -> dict[str, float]:
    """The clause classifier's probability of each fact kind (and "none") for a piece of text read alone."""
    m = models()
    return {str(k): float(p) for k, p in zip(m.clause.classes_, m.clause.predict_proba(
        clause_matrix(m.clause_vec, [text]))[0])}


def clause_kind(text: str) -> str | None:
    """The fact kind the clause classifier reads a piece of text alone as; None for no fact or an unsure one."""
    probs = clause_probs(text)
    kind = max(probs, key=probs.get)
    return None if kind == "none" or probs[kind] < working_read.CLAUSE_THRESHOLD else kind


def _says_nothing(text: str) -> bool:
    """Whether the clause classifier reads a piece of text alone as no fact, surely (``LEAD_NONE``)."""
    return clause_probs(text)["none"] >= LEAD_NONE


def after_lead(piece: str, span: str) -> tuple[str, str] | None | bool:
    """``LEAD_LABEL``: when the span starts with the lead of its clause before a comma ("Small update, ...", "Wait,
    scrap ...") and that lead says nothing alone, the (kind, span) read from after the comma, or None (no fact
    there); False when there is no such lead."""
    comma = piece.find(",")
    lead = piece[:comma] if comma > 0 else ""
    words = [t for t in tokens(lead) if _is_word(t)]
    if not LEAD_LABEL or not words or len(words) > 3 or not piece.lower().startswith(span.lower()[:comma + 1]) \
            or len(span) < comma or not _says_nothing(lead):
        return False
    rest = piece[comma + 1:].strip(" ,:")
    if len([t for t in tokens(rest) if _is_word(t)]) < 2 or not names_something(rest):
        return None
    kind = clause_kind(rest)
    if kind is None:
        return None
    value = _span(rest, kind)
    return (kind, value) if value and names_something(value) else None


REFER_BACK = 1            # a span that is only a determiner and one word ("the goal") right after "that" / "this" / "it"
                          # ("so let's make that the goal") names what was said before it: read from there
_DEMONSTRATIVES = {"that", "this", "it"}


def refers_back(piece: str, span: str, before: str = "") -> str | None:
    """``REFER_BACK``: when the span is only a determiner and a word and its clause points back ("make that the
    goal"), the text it points to: the clause's words before the pointing word (before its last comma) if they name
    something (at least three words), else the clause before (``before``); None for any other span."""
    words = [t for t in tokens(span) if _is_word(t)]
    at = piece.lower().find(span.lower())
    if not REFER_BACK or at <= 0 or len(words) != 2 or words[0].low not in _DETERMINERS:
        return None
    back = tokens(piece[:at])[-1:]   # right before the span ("make that the goal"; not "report that I passed the exam")
    if not back or back[0].low not in _DEMONSTRATIVES:
        return None
    head = piece[:back[-1].start].strip(" ,;")
    head = head[:head.rfind(",")].strip() if "," in head else ""   # "X, so let's make that ...": X
    own = len([t for t in tokens(head) if _is_word(t)]) >= 3 and names_something(head)
    return head if own else before or None


def after_label(piece: str, span: str, kind: str = "goal") -> str:
    """``LABEL``: the span read from what a short span labels ("My target is IELTS 7.5" -> "IELTS 7.5", "Small
    update: ..."): a span of at most three words right before a colon, or before "is" when it starts with a
    determiner ("my", "the"); the span itself when it is no label or nothing named follows."""
    at = piece.lower().find(span.lower())
    toks = tokens(span)
    if at < 0 or not toks or len([t for t in toks if _is_word(t)]) > 3:
        return span
    after = tokens(piece[at + len(span):])
    if not after or not (after[0].text == ":" or after[0].low in ("is", "=") and toks[0].low in _DETERMINERS):
        return span
    rest = piece[at + len(span):][after[0].end:].strip(" ,:")
    if not rest or not names_something(rest):
        return span
    value = _span(rest, kind) or rest
    return value if names_something(value) else rest


def instead_value(piece: str) -> str | None:
    """X of a clause "X instead" ("Cold showers instead"), not a question; None for any other clause."""
    toks = [t for t in tokens(piece) if _is_word(t)]
    if len(toks) < 2 or toks[-1].low != "instead":
        return None
    if piece.rstrip().endswith("?") or toks[0].low in QUESTION_START:
        wh = {"what", "how", "why", "which", "where", "when", "who"}   # "What can I drink instead?" asks, not requests
        ask = [k for k in range(len(toks) - 3) if toks[k].low in ("can", "could") and toks[k + 1].low in
               ("we", "you", "u", "i") and not wh & {t.low for t in toks[:k]}]
        if not INSTEAD_ASK or not ask:
            return None
        value = piece[toks[ask[-1] + 2].start:toks[-2].end].strip(" ,")   # "..., can we do breathing exercises instead?"
        return value if names_something(value) else None
    value = piece[:toks[-2].end].strip(" ,")
    return value if names_something(value) and not any(t.low in FIRST_PERSON for t in toks) else None


def instead_span(piece: str, span: str) -> str | None:
    """``INSTEAD_ANY``: a span read as a fact that ends in "instead", in a clause that is no question: the span without
    it ("just do walking along the river in the evenings"); None for any other span."""
    toks = [t for t in tokens(span) if _is_word(t)]
    if not INSTEAD_ANY or len(toks) < 2 or toks[-1].low != "instead" or piece.rstrip().endswith("?"):
        return None
    value = span[:toks[-2].end].strip(" ,")
    return value if names_something(value) else None


def says_no_longer(text: str) -> bool:
    """Whether a clause of the message, not a question, says something holds no longer ("that goal is no longer
    necessary", "I don't need the tables any more")."""
    from .working_turn import no_longer
    return any(no_longer(piece) for piece in clause_pieces(text) if not piece.endswith("?"))


def about_goal(text: str) -> float:
    """How much more a turn is about a goal than a preference: the clause classifier's goal + drop share
    of its fact kinds (none left out), over the turn read as one clause."""
    share = {k: p for k, p in clause_probs(text).items() if k != "none"}
    total = sum(share.values()) or 1.0
    return (share.get("goal", 0.0) + share.get("drop", 0.0)) / total


def released(fact: Fact, lists: dict[str, list[str]], floor: float | None = None) -> tuple[str, str] | None:
    """(list, item) that a turn naming nothing new gives up ("the half marathon is off", "pandas is fine now"):
    the revision model's first-ranked stored goal or preference (weighed by whether the turn reads as about a
    goal or a preference), when it is sure and clearly ahead of the next; else None (unclear: left as it is)."""
    ranked, group = [], about_goal(fact.span)
    for section, items in lists.items():
        if items:
            kind, prior = ("drop", group) if section == "goal" else ("release", 1 - group)
            probs = models().pairs.predict_proba(pair_rows(kind, fact.span, fact.clause, items, section))[:, 1]
            ranked += [(float(p) * prior * 2, float(p), section, item) for p, item in zip(probs, items)]
    ranked.sort(key=lambda r: -r[0])
    if not ranked or ranked[0][1] <= (working_read.RELEASE_FLOOR if floor is None else floor):
        return None
    if len(ranked) > 1 and ranked[0][0] - ranked[1][0] < working_read.RELEASE_MARGIN:
        return None
    return ranked[0][2], ranked[0][3]
