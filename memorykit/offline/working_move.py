"""The user's own move, read in all its forms, for the timezone field (2026-11-27).

A statement that the user (or a group the user moves with: "we", "my family", "my lab", "my team", "the company
is moving me") moved, relocated, was transferred, is now based / living / settled in, or arrived in a place names
where the user is now. :func:`moved_to` finds such a statement and reads the place after it from the gazetteer,
written in any case and of any size ("moved to faro for the lab", "based in rotorua", "just moved to nyc"), which
the place model, reading context, can leave under its threshold.

Not a move: someone else's ("my brother moved to Perth", "Fiona's moved out to Perth"), one still ahead or only
thought of ("Moving to Vancouver next month", "i got transferred to perth, moving next month", "I plan move to Oslo":
the labelled dialogs keep the old home until the user says they are there), one in the past ("Before I was living in
Kyiv"), a trip. ``MOVE_CLEAR``: a past move of the user's whose new place
cannot be read ("we moved last week") leaves the stored timezone empty rather than keeping the old one.
"""
from __future__ import annotations

import re

from .text import STOPWORDS
from .working_geo import ACRONYM, Place, fold, gazetteer, lookup

_GROUP = r"(?:my|our)\s+(?:whole\s+|entire\s+)?(?:family|lab|team|group|company|office|department|firm|household)"
_SUBJECT = r"(?:\b(?:i|i'm|im|i've|ive|i'd|we|we're|we've|weve|us|me)\b|" + _GROUP + r")"
# verb forms that say the user changed home; the place follows "to", "in", "into" or "back to"
_VERB = (r"\b(?:moved|moving|move|relocated|relocating|relocate|transferred|transfer|transferring|seconded|posted|"
         r"settled|arrived|landed|based|living)\b")
_TARGET = re.compile(_VERB + r"(?:\s+(?:me|us|here|back|over|out|up|down|permanently|now|home|just))*"
                     r"\s+(?:to|in|into)\s+(?:the\s+)?", re.IGNORECASE)
_FUTURE = re.compile(r"\b(?:next\s+(?:week|wk|month|year|spring|summer|autumn|fall|winter)|soon|tomorrow|will|'ll|"
                     r"going\s+to|gonna|planning|plan|thinking|might|may|hope|wants?|would\s+like|about|idea|considering|anymore|"
                     r"no\s+longer|before|used\s+to|was|grew\s+up|when|in\s+(?:spring|summer|autumn|fall|winter))\b",
                     re.IGNORECASE)
_THERE = re.compile(r"\b(?:i'?m|i\s+am|i'll\s+be|ill\s+be|we'?re|we\s+are)\s+(?:already\s+)?(?:there|here|living\s+there)"
                    r"|\b(?:new|the)\s+(?:flat|apartment|house|place)\b|\balready\s+(?:here|there)\b", re.IGNORECASE)
_PAST_MOVE = re.compile(r"\b(?:i|we)(?:'ve|\s+have|\s+just|\s+finally|\s+recently)*\s+(?:moved|relocated)\s+(?:(?:away|abroad|"
                        r"countries|cities|overseas|for|last|this|recently|again)\b|[.!,]|$)", re.IGNORECASE)
_STAY = {"based", "living", "settled"}   # where one is, said by "I" / "we" only
_OTHERS = {"he", "she", "they", "he's", "she's", "they're", "his", "her", "their", "brother", "sister", "mom", "mum",
           "dad", "father", "mother", "son", "daughter", "friend", "husband", "wife", "partner", "boyfriend",
           "girlfriend", "cousin", "parents", "kids", "aunt", "uncle"}
_NOT_PLACE = STOPWORDS | {"city", "area", "office", "flat", "apartment", "house", "place", "town", "country",
                          "uk", "us", "spare", "room", "part", "time", "new"}


def _place_after(text: str, at: int) -> Place | None:
    """The gazetteer place named by the 1-4 words right after offset ``at`` (longest first), any case or size;
    a state or country after a comma narrows it down ("Santa Fe, New Mexico")."""
    toks = [(m.group(0), m.start() + at, m.end() + at) for m in re.finditer(r"[^\W\d_]+(?:['’.-][^\W\d_]+)*",
                                                                           text[at:at + 80])]
    for n in (4, 3, 2, 1):
        if len(toks) < n or any(text[toks[k][2]:toks[k + 1][1]].strip() for k in range(n - 1)):
            continue   # the words must follow one another (no comma inside)
        name = " ".join(t[0] for t in toks[:n])
        if fold(name) in _NOT_PLACE or len(fold(name)) < 3:
            continue
        places = gazetteer().get(ACRONYM + name.upper()) if n == 1 and len(name) <= 4 else None
        if not places and name.lower() in ("nyc", "la", "sf", "dc") and name.upper() != name:
            places = gazetteer().get(ACRONYM + name.upper())
        place = (places or [None])[0] or lookup(name)
        if place is None:
            continue
        rest = text[toks[n - 1][2]:]
        outer = re.match(r",\s*([^\W\d_]+(?:\s+[^\W\d_]+)?)", rest)
        if outer:
            place = lookup(name, outer.group(1)) or place
        return place
    return None


def _own(clause: str, groups: bool = True) -> bool:
    """Whether the move before the end of ``clause`` is the user's: a first-person word or a group of the user's (or,
    for a move verb, no subject at all: "moved to faro for the lab"), and no one else named as the subject after the
    last such word ("I cook now that Fiona's moved out")."""
    subjects = list(re.finditer(_SUBJECT if groups else _SUBJECT.split("|" + _GROUP)[0] + ")", clause, flags=re.IGNORECASE))
    if not subjects and (not groups or re.search(r"\b(?:my|our|the|his|her|their)\b", clause, flags=re.IGNORECASE)):
        return False   # no subject at all is the user's ("wait just moved to nyc"); "my brother moved" is not
    from .working_models import _lexicon
    first = _lexicon()["first_name"]
    after = re.findall(r"[\w']+", clause[subjects[-1].end() if subjects else 0:])
    return not any(w.lower() in _OTHERS or re.sub(r"'s$", "", w.lower()) in _OTHERS
                   or w[:1].isupper() and re.sub(r"'s$", "", w.lower()) in first - STOPWORDS for w in after)


def moved_to(text: str) -> tuple[bool, Place | None]:
    """(the message states a move of the user's that is done or under way now, the place moved to or None)."""
    for m in _TARGET.finditer(text):
        start = max(text.rfind(c, 0, m.start()) for c in ".!?;\n") + 1
        clause = text[start:m.end()]
        verb = m.group(0).split()[0].lower()
        if not _own(clause, verb not in _STAY) and not re.search(r"\b(?:me|us)\b", m.group(0), re.IGNORECASE):
            continue
        end = min([k for k in (text.find(c, m.end()) for c in ".!?;\n") if k >= 0] or [len(text)])
        if _FUTURE.search(text[start:end]) and not _THERE.search(text):
            continue   # "Moving to Vancouver next month": not there yet
        place = _place_after(text, m.end())
        if place is not None:
            return True, place
    return bool(_PAST_MOVE.search(text)) and not _FUTURE.search(text), None
