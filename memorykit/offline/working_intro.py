"""A user introducing themselves: a name that is also a place, and the one place of a short introduction.

Two second readings of a message after :func:`.working_read.read`, each taken only when the first reading left
the field empty:

* ``NAME_OR_PLACE``: a word read as a place that is also a first name ("I'm Sakura, I'm in Nagoya", "Kai here,
  honolulu") while another place is named too is read again as a name; kept if the name tagger then takes it.
* ``INTRO_FLOOR``: a message that gives the user's name and names exactly one place ("Dimitris from Thessaloniki
  here", "Riya here from Singapore") sets that place's timezone on a weaker reading of the place model.
* ``LONE_PLACE``: a sentence that is only a place ("Leicester.", "Mohammed. Riyadh. Type 2 diabetic.", "Halifax,
  NS.") says where the user is (2026-11-26, fresh dev set 5: 16 of 16 such sentences were the user's home; sets
  1-4: 38 of 45, the other 7 a greeting or a name read as a place - "Hola!", "rafa, recife" - which the rule leaves
  out: not the name read, not ending in "!" or "?", and a lowercase one only beside another sentence).
"""
from __future__ import annotations

import re

import numpy as np

from . import working_read
from .text import normalize
from .working_geo import abbreviations, explicit_timezones
from .working_models import (
    _lexicon, casual, context_similarity, embed_many, mention_context, models, place_features, place_tokens, tokens,
)
from .working_read import Reading, mentions, read_name_scored, read_place

NAME_OR_PLACE = 1
INTRO_FLOOR = 0.25        # the place model's probability for the only place of a message that gives the name
LONE_PLACE = 1
CALL_ME = 1               # a name the user asks to be called by ("call me Wang Fang") replaces a stored one whatever
                          # the tagger's probability (2026-11-27: fresh dev 396 -> 397 of 491, superseded 19 -> 18)

ASKED_NAME = 1            # of two names in one message, the one the user asks to be called by ("im zara but my gamer
                          # tag is zz so call me zz") wins over the one introduced (2026-11-27)


def asked_name(text: str, name: str) -> str | None:
    """``ASKED_NAME``: the word right after the message's last "call me" when the message also gives another name
    (``name``): an alphabetic word, no stopword or time word, capitalized unless the text is written casually;
    None when there is none or it is part of ``name``."""
    from .text import STOPWORDS
    from .working_read import TIME_UNITS
    from .working_read import titles
    found = re.findall(r"(\w+(?:'t)?\s+)?\bcall me\s+([^\W\d_]+(?:-[^\W\d_]+)?)", text, flags=re.IGNORECASE)
    if not found:
        return None
    before, word = found[-1][0].strip().lower(), found[-1][1]
    if before in ("don't", "dont", "not", "never", "t") or before.endswith("n't"):
        return None   # "Please don't call me Liz"
    low = word.lower()
    if low in STOPWORDS or low in TIME_UNITS or low in titles() or low in name.lower().split():
        return None   # "call me Mr. Chen": the tagger's reading keeps the title with the name
    if not word[:1].isupper() and not casual(text):
        return None
    return word if word[:1].isupper() else word[:1].upper() + word[1:]


def read(text: str) -> Reading:
    """:func:`.working_read.read`, with a name or a timezone an introduction gives read again when left empty."""
    reading = working_read.read(text)
    text = normalize(text)
    if CALL_ME and reading.name and re.search(r"\bcall me\s+" + re.escape(reading.name.lower()) + r"\b", text.lower()):
        reading.name_confidence = max(reading.name_confidence, 1.0)
    if ASKED_NAME and reading.name:
        reading.name = asked_name(text, reading.name) or reading.name
    if NAME_OR_PLACE and reading.name is None:
        _name_not_place(text, reading)
    if INTRO_FLOOR and reading.name and reading.timezone is None:
        _intro_place(text, reading)
    if LONE_PLACE and reading.timezone is None:
        reading.timezone = lone_place(text, reading.name)
    return reading


def lone_place(text: str, name: str | None = None) -> str | None:
    """The timezone of the one place written as a sentence of its own ("Leicester.", "Halifax, NS."), or None."""
    toks, lower = place_tokens(text), casual(text)
    own = set(name.lower().split()) if name else set()
    found = []
    for i, j, place in mentions(toks, lower):
        end = j + 2 if j + 1 < len(toks) and toks[j].text == "," else j   # "Halifax, NS"
        alone = (i == 0 or toks[i - 1].text in ".!?") and (end >= len(toks) or toks[end].text == ".")
        several = i > 0 or end + 1 < len(toks)
        if alone and not {t.low for t in toks[i:j]} & own and (toks[i].text[:1].isupper() or several):
            found.append(place)
    return found[0].timezone if len(found) == 1 else None


def _zone(text: str, place, timed) -> str | None:
    explicit = [(pos, 1, z) for pos, z in explicit_timezones(text)] + [(pos, 0, z) for pos, z in timed]
    return max(explicit)[2] if explicit else (place.timezone if place else None)


def _name_not_place(text: str, reading: Reading) -> None:
    toks, lower = tokens(text), casual(text)
    _, spans, _ = read_place(text, place_tokens(text), lower)
    first = _lexicon()["first_name"]
    named = {(a, b) for a, b in spans if " " not in text[a:b] and text[a:b].lower() in first}
    if not named or len(named) == len(spans):
        return
    taken = {k for k, t in enumerate(toks) if t.text in abbreviations() or t.text.upper() in ("UTC", "GMT")
             or any(a <= t.start < b for a, b in spans - named)}
    name, confidence = read_name_scored(text, toks, lower, taken)
    if name and any(text[a:b].lower() == name.lower() for a, b in named):
        place, _, timed = read_place(text, place_tokens(text), lower, frozenset(a for a, _ in named))
        reading.name, reading.name_confidence, reading.timezone = name, confidence, _zone(text, place, timed)


def _intro_place(text: str, reading: Reading) -> None:
    toks, lower = place_tokens(text), casual(text)
    own = set(reading.name.lower().split())
    found = [(i, j, p) for i, j, p in mentions(toks, lower) if not {t.low for t in toks[i:j]} & own]
    if len(found) != 1:
        return
    i, j, place = found[0]
    m = models()
    vector = embed_many([mention_context(text, toks, i, j)])
    vector = vector / (np.linalg.norm(vector, axis=1, keepdims=True) + 1e-9)
    ctx = context_similarity(vector, m.home_contexts, m.away_contexts)[0]
    prob = m.places.predict_proba([{**place_features(toks, i, j, place.kind, place.population, lower),
                                    "ctx": float(ctx) * 10}])[0, 1]
    if prob > INTRO_FLOOR:
        reading.timezone = place.timezone
