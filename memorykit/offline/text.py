"""Small text helpers shared by the offline methods: sentences, words, stems, person, names, vectors.

Deliberately plain (regular expressions, a stop-word list, a suffix stemmer) plus the local
embedding model for meaning: the offline backend is a readable stand-in for a model.
"""
from __future__ import annotations

import re
import unicodedata
from collections import OrderedDict
from typing import Sequence

import numpy as np

STOPWORDS = frozenset(
    """a an the and or but if then so of to in on at by for with about from into over after before
    is am are was were be been being do does did doing have has had having will would shall should
    can could may might must this that these those it its it's i me my mine myself you your yours
    yourself we us our ours he him his she her hers they them their what which who whom whose when
    where why how there here not no yes just also very too really quite some any all each every
    much many more most other such only own same than as up down out off again further once
    tell know remember please thanks thank hi hello hey ok okay well oh um uh like get got go
    going went back""".split()
)

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_WORD = re.compile(r"[\w'’-]+", re.UNICODE)


def normalize(text: str) -> str:
    """NFKC, curly quotes to straight, collapsed whitespace."""
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    return re.sub(r"\s+", " ", text).strip()


_ABBREVIATION = re.compile(r"\b(St|Dr|Mr|Mrs|Ms|Prof|Jr|Sr|Mt|vs|etc|e\.g|i\.e|approx|U\.S|U\.K)\.(?=\s)",
                          re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """Split text into sentences (and lines); empty pieces dropped; "St." or "e.g." is no end."""
    protected = _ABBREVIATION.sub(lambda m: m.group(0)[:-1] + "\u2024", normalize(text))
    return [s.strip().replace("\u2024", ".") for s in _SENTENCE.split(protected) if s.strip()]


def words(text: str) -> list[str]:
    return [w.strip("'-").lower() for w in _WORD.findall(normalize(text)) if w.strip("'-")]


def stem(word: str) -> str:
    """A light suffix stemmer: travelled/traveling/travels -> travel, cities -> city."""
    w = word.lower()
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + repl
            break
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiousl":
        w = w[:-1]
    return w


def content_words(text: str) -> set[str]:
    """Stemmed words that carry meaning (no stop words, no one-letter words)."""
    return {stem(w) for w in words(text) if w not in STOPWORDS and len(w) > 1}


def overlap(a: str, b: str) -> float:
    """Share of ``a``'s content words that also occur in ``b`` (0..1)."""
    wa = content_words(a)
    return len(wa & content_words(b)) / len(wa) if wa else 0.0


_PERSON = [
    (r"\bthe user's\b", "your"), (r"\buser's\b", "your"), (r"\bthe user\b", "you"),
    (r"\buser\b", "you"), (r"\bI am\b", "you are"), (r"\bI'm\b", "you're"), (r"\bI was\b", "you were"),
    (r"\bI've\b", "you've"), (r"\bI'd\b", "you'd"), (r"\bI'll\b", "you'll"), (r"\bI\b", "you"),
    (r"\bmy\b", "your"), (r"\bmine\b", "yours"), (r"\bme\b", "you"), (r"\bmyself\b", "yourself"),
    (r"\bour\b", "your"), (r"\bwe\b", "you"), (r"\bus\b", "you"),
    (r"\btheir\b", "your"), (r"\bthey\b", "you"), (r"\bthem\b", "you"),
]


def to_second_person(text: str) -> str:
    """'User went to Paris with their wife' -> 'you went to Paris with your wife'."""
    out = text
    for pattern, repl in _PERSON:
        out = re.sub(pattern, repl, out, flags=re.IGNORECASE)
    return re.sub(r"\byou (\w+)\b", lambda m: "you " + _AGREE.get(m.group(1).lower(), m.group(1)), out,
                  flags=re.IGNORECASE)


_AGREE = {"is": "are", "was": "were", "has": "have", "does": "do", "goes": "go", "likes": "like",
          "loves": "love", "hates": "hate", "prefers": "prefer", "wants": "want", "needs": "need",
          "lives": "live", "works": "work", "enjoys": "enjoy", "plans": "plan", "owns": "own",
          "plays": "play", "drinks": "drink", "eats": "eat", "uses": "use", "speaks": "speak",
          "studies": "study", "teaches": "teach", "runs": "run", "swims": "swim", "visits": "visit",
          "travels": "travel", "wishes": "wish", "avoids": "avoid", "follows": "follow"}


def third_person(text: str, subject: str = "User") -> str:
    """'I went to Paris with my wife' -> 'User went to Paris with their wife'."""
    out = normalize(text)
    rules = [
        (r"\bI am\b", f"{subject} is"), (r"\bI'm\b", f"{subject} is"), (r"\bI was\b", f"{subject} was"),
        (r"\bI've\b", f"{subject} has"), (r"\bI have\b", f"{subject} has"), (r"\bI'd\b", f"{subject} would"),
        (r"\bI'll\b", f"{subject} will"), (r"\bI\b", subject), (r"\bmy\b", "their"), (r"\bMy\b", "Their"),
        (r"\bmine\b", "theirs"), (r"\bme\b", "them"), (r"\bmyself\b", "themselves"),
        (r"\bwe\b", f"{subject} and family"), (r"\bWe\b", f"{subject} and family"), (r"\bour\b", "their"),
        (r"\bOur\b", "Their"), (r"\bus\b", "them"),
    ]
    for pattern, repl in rules:
        out = re.sub(pattern, repl, out)
    # verb agreement after the subject: "User love" -> "User loves"
    out = re.sub(
        rf"\b{subject} (love|like|hate|prefer|want|need|live|work|enjoy|plan|own|play|drink|eat|use|speak|study|teach|run|swim|have|do|go)\b",
        lambda m: f"{subject} " + {"have": "has", "do": "does", "go": "goes"}.get(m.group(1), m.group(1) + "s"),
        out,
    )
    out = out.rstrip(" .") + "."
    return out[:1].upper() + out[1:]


SYNONYM_GROUPS = [
    {"live", "liv", "move", "mov", "reside", "resid", "home", "based", "bas", "relocat", "stay", "city", "address"},
    {"work", "job", "employ", "employer", "company", "career", "occupation", "profession", "boss", "join"},
    {"like", "lik", "love", "lov", "enjoy", "prefer", "favorite", "favourite", "fan", "fond"},
    {"hate", "hat", "dislike", "dislik", "avoid", "can't", "stand"},
    {"allergic", "allergy", "allergi", "intolerant", "intoleranc"},
    {"travel", "trip", "visit", "vacation", "holiday", "honeymoon", "journey", "fly", "flew", "go", "went"},
    {"name", "call", "called"},
    {"eat", "food", "diet", "meal", "cook", "cuisine", "dish"},
    {"drink", "coffee", "tea", "beverage"},
    {"pet", "dog", "cat", "puppy", "kitten"},
    {"goal", "aim", "target", "plan", "want", "hope", "train", "training"},
    {"born", "birthday", "age", "old"},
    {"married", "marri", "wife", "husband", "partner", "spouse"},
    {"kid", "child", "children", "son", "daughter"},
    {"exercise", "workout", "gym", "run", "running", "training", "sport"},
    {"sleep", "bed", "bedtime", "rest", "nap"},
]
_SYNONYMS: dict[str, set[str]] = {}
for _group in SYNONYM_GROUPS:
    for _w in _group:
        _SYNONYMS.setdefault(_w, set()).update(_group)


def expand(stems: set[str]) -> set[str]:
    """Stems plus their small, general synonym groups (live ~ move ~ home, job ~ work, ...)."""
    out = set(stems)
    for s in stems:
        out |= _SYNONYMS.get(s, set())
    return out


# ---------------------------------------------------------------- names and meaning
_NAME_INTRO = re.compile(
    r"\b(?:my name is|my name's|i am called|i'm called|call me|name's|i go by)\s+([A-Z][\w'-]+)"
    r"|\b(?:i am|i'm)\s+([A-Z][a-z][\w'-]+)\b", re.IGNORECASE)


def offline_name(text: str) -> str | None:
    """A name the user gives for themselves ("my name's Raphael", "call me Sam", "I'm Lena"), else None.

    The name must be capitalized as written, so "I'm going" or "I'm allergic" is no introduction.
    """
    for m in _NAME_INTRO.finditer(text):
        name = m.group(1) or m.group(2)
        if name and name[0].isupper() and name.lower() not in STOPWORDS:
            return name
    return None


_VECTORS: OrderedDict[str, np.ndarray] = OrderedDict()
_MAX_CACHED = 4096


def vectors(texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of ``texts`` from the local embedding model (kept in a small in-process cache)."""
    from ..embeddings import get_embedder, training

    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    if training():  # training texts: embedded in batches, kept out of this run-time memo
        vecs = np.asarray(get_embedder(cache=False, kind="local").embed_many(list(texts)), dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.where(norms > 0, norms, 1.0)
    missing = [t for t in dict.fromkeys(texts) if t not in _VECTORS]
    if missing:
        embedder = get_embedder(cache=False, kind="local")
        for text, vec in zip(missing, embedder.embed_many(missing)):
            v = np.asarray(vec, dtype=np.float32)
            _VECTORS[text] = v / (float(np.linalg.norm(v)) or 1.0)
            if len(_VECTORS) > _MAX_CACHED:
                _VECTORS.popitem(last=False)
    return np.stack([_VECTORS[t] for t in texts])


class Encoder:
    """Sentence vectors for the offline models' features: the local model, cached in Redis when it is
    reachable and in this process (up to ``size`` texts; training vectors, embedded in batches, apart)."""

    def __init__(self, embedder=None, size: int = 20_000):
        self.embedder, self.size = embedder, size
        self.memo: dict[bool, dict[str, np.ndarray]] = {}  # keyed by embeddings.training()

    def _load(self):
        from ..embeddings import get_embedder

        try:
            return get_embedder(kind="local")
        except Exception:  # no Redis: embed without the cache
            return get_embedder(cache=False, kind="local")

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        from ..embeddings import training

        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        memo = self.memo.setdefault(training(), {})
        missing = sorted({t for t in texts if t not in memo})
        if len(memo) + len(missing) > self.size:
            memo.clear()
            missing = sorted(set(texts))
        if missing:
            self.embedder = self.embedder or self._load()
            for text, vec in zip(missing, self.embedder.embed_many(missing, progress=False)):
                memo[text] = np.asarray(vec, dtype=np.float32)
        return np.stack([memo[t] for t in texts])
