"""Deduplication and consolidation: is a new fact new, a duplicate, or an update?

Three tiers, each usable alone, chained by :func:`remember` (the agent's write path):

* **exact** -- :func:`find_exact`: the normalized content hash (``content_hash`` TAG),
  same user and memory type, current memories only;
* **semantic** -- :func:`find_similar`: the nearest current memories of that user and type
  within a distance; alone, :func:`semantic_verdict` calls a duplicate anything closer than
  ``SEMANTIC_DUPLICATE_DISTANCE`` (calibrated in notebook 05, and fooled by near traps);
* **decided** -- :func:`decide`: a model (or the offline rules) reads the new fact and its
  nearest memories and answers ADD | UPDATE | INVALIDATE | NOOP with a target and a reason.

Nothing is overwritten: UPDATE / INVALIDATE close the old memory (``invalid_at``,
``superseded_by``) and write the new one linking back (``supersedes``), so
``search(as_of=t)`` and :func:`history` can tell what was true when. Writes for one user and
memory type are serialized optimistically: WATCH the user's ``memhash`` ledger, decide,
MULTI/EXEC, retry when another writer got there first.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import redis
from redisvl.query import FilterQuery, VectorQuery
from redisvl.query.filter import Tag

from ..errors import MemoryKitError, ValidationError
from ..keys import check_id, key
from ..llm import offline_skill, parse_json, task_prompt
from .long_term import SYSTEM_USER, Memory, MemoryHit, MemoryStore, content_hash, owner_tag, validity
from ..messages import Message
from ..offline.text import normalize, stem, third_person, words

log = logging.getLogger(__name__)

ACTIONS = ("ADD", "UPDATE", "INVALIDATE", "NOOP")
TIERS = ("exact", "semantic", "decided")
CANDIDATE_DISTANCE = 0.65         # loose: updates sit up to ~0.6 from what they replace
SEMANTIC_DUPLICATE_DISTANCE = 0.13  # the semantic tier alone: best F1 on data/dedup (notebook 05)
CONSOLIDATE_DISTANCE = 0.2        # every pair in a merged cluster must be at least this close
MAX_RETRIES = 32
EXACT_SCAN_LIMIT = 500      # up to this many current memories per user and type, candidates are exact


@dataclass
class Decision:
    """What remember() did: ``memory`` is the memory now holding the fact; ``target`` the one it
    duplicates (NOOP) or closed (UPDATE / INVALIDATE)."""

    action: str
    memory: Memory | None = None
    target: Memory | None = None
    reason: str = ""
    tier: str = "decided"
    distance: float | None = None

    def __repr__(self) -> str:
        target = f", target={self.target.content!r}" if self.target else ""
        return f"Decision({self.action} by {self.tier}{target}: {self.reason})"


# ---------------------------------------------------------------------------- the fact
_THEIR = re.compile(r"^(their|his|her)\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|our|us)\b", re.IGNORECASE)


def as_fact(text: str, subject: str = "User") -> str:
    """The stored form of a fact: third person, as the extractor writes it ("User lives in Lisbon.")."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("a fact needs non-empty text")
    text = normalize(text)
    if _FIRST_PERSON.search(text):
        text = third_person(text, subject)
        text = _THEIR.sub(f"{subject}'s", text)
    return text


# ---------------------------------------------------------------------------- tier 1: exact
def _owner(user_id: str | None, memory_type: str) -> str:
    if user_id is None:
        if memory_type != "semantic":
            raise ValidationError(f"{memory_type} memories need a user_id")
        return SYSTEM_USER
    return check_id(user_id, "user_id")


def _scope(user_id: str, memory_type: str):
    """Exactly this user's memories of this type (no shared 'system' facts), current only."""
    return (Tag("user_id") == owner_tag(user_id)) & (Tag("memory_type") == memory_type) & validity()


def find_exact(store: MemoryStore, content: str, user_id: str | None,
               memory_type: str = "episodic") -> Memory | None:
    """The current memory with the same normalized text (case, spaces, punctuation ignored)."""
    user_id = _owner(user_id, memory_type)
    expr = _scope(user_id, memory_type) & (Tag("content_hash") == content_hash(content))
    q = FilterQuery(filter_expression=expr, return_fields=["id"], num_results=1)
    q.sort_by("created_at", asc=True)
    rows = store.index.query(q)
    return store.get(rows[0]["id"].split(":")[-1]) if rows else None


# ---------------------------------------------------------------------------- tier 2: semantic
def find_similar(store: MemoryStore, content: str, user_id: str | None,
                 memory_type: str = "episodic", k: int = 5,
                 distance_threshold: float | None = CANDIDATE_DISTANCE,
                 vector: list[float] | None = None) -> list[MemoryHit]:
    """The ``k`` nearest current memories of this user and type, within ``distance_threshold``."""
    user_id = _owner(user_id, memory_type)
    vector = vector if vector is not None else store.embedder.embed(content)
    scope = _scope(user_id, memory_type)
    # The ledger (which writers WATCH) names every current memory written by remember();
    # the index adds those stored with add(). Under concurrent writes the index can briefly
    # miss a just-committed document, so the ledger keeps the candidate set complete.
    ids = set(store.redis.hvals(ledger_key(store, user_id, memory_type)))
    ids |= {row["id"].split(":")[-1] for row in store.index.query(
        FilterQuery(filter_expression=scope, return_fields=["id"], num_results=EXACT_SCAN_LIMIT + 1))}
    if len(ids) <= EXACT_SCAN_LIMIT:
        # few memories (the usual case for one user and type): exact cosine distances in numpy
        ids = sorted(ids)
        pipe = store.redis.pipeline(transaction=False)
        for mid in ids:
            pipe.json().get(store.key(mid), "$.embedding", "$.invalid_at")
        found = [(mid, got["$.embedding"][0]) for mid, got in zip(ids, pipe.execute())
                 if got and got.get("$.embedding") and not got.get("$.invalid_at")]
        if not found:
            return []
        matrix = np.asarray([v for _, v in found], dtype=np.float32)
        distances = 1.0 - matrix @ np.asarray(vector, dtype=np.float32)
        rows = sorted(zip(distances.tolist(), [mid for mid, _ in found]))[:k]
    else:
        q = VectorQuery(vector, "embedding", return_fields=["id"], num_results=k, filter_expression=scope)
        rows = sorted((float(row["vector_distance"]), row["id"].split(":")[-1]) for row in store.index.query(q))
    if distance_threshold is not None:
        rows = [row for row in rows if row[0] <= distance_threshold]
    memories = store.get_many([mid for _, mid in rows])
    return [MemoryHit(m, dist) for m, (dist, _) in zip(memories, rows) if m]


def semantic_verdict(hits: Sequence[MemoryHit],
                     threshold: float = SEMANTIC_DUPLICATE_DISTANCE) -> tuple[str, int | None]:
    """The semantic tier alone: NOOP on the nearest hit if it is close enough, else ADD."""
    if hits and hits[0].distance <= threshold:
        return "NOOP", 0
    return "ADD", None


# ---------------------------------------------------------------------------- tier 3: decided
DECIDE_PROMPT = """\
You maintain the long-term memory of one user. You get the NEW fact and EXISTING memories
(each with a small integer id). Decide what to do with the new fact:
- NOOP: an existing memory already says the same thing (a paraphrase counts as the same).
- UPDATE: the new fact changes the value of something an existing memory states and only one
  value can be true at a time (moved city, new employer, new age, switched preference), or it
  says the same thing with more detail. Give the id of the memory it replaces.
- INVALIDATE: the new fact says an existing memory is no longer true (stopped, no longer, left,
  passed away). Give that memory's id.
- ADD: anything else, including facts that can have several values at once (another trip,
  a second pet, another allergy, a new hobby) and facts about other people.
Different years or dates usually mean different events: ADD.
Answer with JSON only: {"action": "ADD|UPDATE|INVALIDATE|NOOP", "id": <existing id or null>,
"reason": "<one short sentence>"}"""


def decision_prompt(new_fact: str, existing: Sequence[Memory]) -> list[Message]:
    """The decider's messages: small integer ids stand in for memory ids (models copy them better)."""
    payload = {"existing": [{"id": i, "fact": m.content} for i, m in enumerate(existing)],
               "new": new_fact}
    return [Message(role="system", content=task_prompt("decide_memory", DECIDE_PROMPT)),
            Message(role="user", content=json.dumps(payload, ensure_ascii=False))]


def parse_decision(text: str, n_existing: int) -> tuple[str, int | None, str]:
    """(action, index into existing or None, reason); anything unusable falls back to ADD."""
    try:
        data = parse_json(text)
        if isinstance(data, list) and data:
            data = data[0]
        action = str(data.get("action", "")).strip().upper()
        reason = str(data.get("reason") or "").strip()
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        if action == "ADD":
            return "ADD", None, reason
        raw = data.get("id")
        idx = int(raw) if raw is not None and not isinstance(raw, bool) else None
        if idx is None or not 0 <= idx < n_existing:
            raise ValueError(f"{action} names id {raw!r}, not one of 0..{n_existing - 1}")
        return action, idx, reason
    except (ValueError, TypeError, AttributeError) as exc:
        log.warning("memory decider gave an unusable answer (%s); adding the fact instead", exc)
        return "ADD", None, f"fallback: the decider's answer was unusable ({exc})"


def decide(new_fact: str, existing: Sequence[Memory], llm=None) -> tuple[str, int | None, str]:
    """Ask the model (default: ``get_llm()``) what to do; returns (action, index, reason)."""
    if not existing:
        return "ADD", None, "no similar memory"
    if llm is None:
        from ..llm import get_llm

        llm = get_llm()
    reply = llm.chat(decision_prompt(new_fact, existing), response_format={"type": "json_object"})
    return parse_decision(reply.content or "", len(existing))


# ---------------------------------------------------------------------------- the offline decider
# Facts are read as subject / predicate / value with word lists, not with sentence patterns.
_RELATIONS = {"wife": "partner", "husband": "partner", "partner": "partner", "spouse": "partner",
              "girlfriend": "partner", "boyfriend": "partner", "fiance": "partner", "fiancee": "partner",
              "sister": "sister", "brother": "brother", "mother": "mother", "mom": "mother", "mum": "mother",
              "father": "father", "dad": "father", "son": "son", "daughter": "daughter", "child": "child",
              "kid": "child", "parents": "parents", "friend": "friend", "boss": "manager",
              "manager": "manager", "colleague": "colleague", "coworker": "colleague", "roommate": "roommate",
              "grandmother": "grandmother", "grandfather": "grandfather", "aunt": "aunt", "uncle": "uncle",
              "cousin": "cousin", "neighbor": "neighbor", "neighbour": "neighbor", "team": "team",
              "doctor": "doctor", "therapist": "therapist", "coach": "coach"}
_SINGLE_RELATIONS = {"partner", "mother", "father", "manager", "doctor", "therapist", "coach"}
# (predicate, single-valued, cue regex, words that only signal the predicate)
_PREDICATES: list[tuple[str, bool, str, set[str]]] = [
    ("favorite", True, r"\bfavou?rite\b", {"favorite", "favourite"}),
    ("allergy", False, r"\ballerg|\bintoleran", {"allergic", "allergy", "allergies", "intolerant",
                                                  "intolerance", "severe", "mild"}),
    ("diet", True, r"\b(vegetarian|vegan|pescatarian|keto|paleo|omnivore|diet)\b",
     {"diet", "follow", "eat", "strict"}),
    ("pet", False, r"\b(dog|cat|puppy|kitten|pet|parrot|hamster|rabbit|bunny|horse|turtle|goldfish|"
                   r"guinea pig|dogs|cats|pets)\b", {"adopt", "own", "pet", "name", "call", "named",
                                                      "called", "get", "got"}),
    ("age", True, r"\b(years? old|year-old|aged?|turned|turns)\b|\b(is|am) \d{1,3}(?= ?(years?|yrs?)\b|[.,!]?$)",
     {"year", "old", "age", "turn", "aged"}),
    ("birthday", True, r"\b(birthday|born on|birth|date of birth|born in (?=\d))", {"birthday", "born", "bear",
                                                                                   "birth", "date"}),
    ("partner", True, r"\b(married|engaged|dating|wife|husband|spouse|fiancee?)\b",
     {"to", "wife", "husband", "spouse", "partner", "fiance", "fiancee", "name", "named", "call", "called"}),
    ("name", True, r"\b(name is|named|is called|goes by|called)\b", {"name", "named", "call", "called", "go"}),
    ("switch", True, r"\b(switched|switch|changed|swapped|replaced|traded)\b(?: \w+){0,3} (to|for|with)\b",
     {"switch", "change", "swap", "replace", "trade", "from"}),
    ("live", True, r"\b(lives?|living|resides?|residing|reside|based|moved|moving|relocat\w*|"
                   r"settled|home is|now in)\b", {"live", "reside", "resid", "base", "move", "relocate",
                                                  "settle", "home", "city", "country"}),
    ("origin", True, r"\b(is from|comes from|grew up|born in|hometown)\b",
     {"come", "grow", "grew", "born", "hometown", "originally"}),
    ("job", True, r"\b(works? as|working as|job is|job as|profession|promoted|became an?|role is|"
                  r"occupation|position)\b", {"work", "job", "profession", "promote", "become",
                                             "role", "occupation", "position", "title"}),
    ("work", True, r"\b(works? (at|for)|working (at|for)|employed|employer|joined|hired|job at|"
                   r"started (working )?at|company)\b", {"work", "employ", "employer", "join", "hire",
                                                         "job", "start", "company", "firm"}),
    ("work_in", True, r"\bworks? in\b", {"work"}),
    ("speak", False, r"\b(speaks?|speaking|fluent|native language|mother tongue)\b",
     {"speak", "fluent", "native", "language", "tongue", "mother"}),
    ("learn", False, r"\b(learning|learns?|studying|studies|study|taking (a )?class)\b",
     {"learn", "study", "take", "class", "course", "lesson"}),
    ("goal", False, r"\b(goal|training for|train for|preparing for|prepare for|aims? to|plans? to|"
                    r"planning to|wants? to|hopes? to|dream is|objective)\b",
     {"goal", "train", "prepare", "aim", "plan", "want", "hope", "dream", "objective", "target"}),
    ("trip", False, r"\b(went to|go to|been to|visited|visits?|travell?ed|travels?|trip|vacation|"
                    r"holiday|honeymoon\w*|flew to|toured|stayed in)\b",
     {"go", "went", "been", "visit", "travel", "trip", "vacation", "holiday", "fly", "flew", "tour",
      "stay", "take"}),
    ("play", False, r"\b(plays?|playing)\b", {"play"}),
    ("prefer", True, r"\b(prefers?|preferred|preference|would rather)\b", {"prefer", "preference", "rather"}),
    ("use", True, r"\b(uses?|using)\b", {"use"}),
    ("drive", True, r"\b(drives?|driving)\b", {"drive", "car"}),
    ("like", False, r"\b(likes?|loves?|enjoys?|into|fan of|hobby|hobbies|passionate|keen on|fond of)\b",
     {"like", "love", "enjoy", "into", "fan", "hobby", "hobbies", "passionate", "keen", "fond", "big"}),
    ("drink", True, r"\b(drinks?|drinking)\b", {"drink"}),
]
_NEGATION = re.compile(
    r"\b(no longer|not anymore|anymore|any more|stopped|quit|gave up|give up|left|doesn't|does not|"
    r"isn't|is not|not|never|passed away|died|lost|sold|gave away|broke up|divorced|ended|"
    r"outgrew|cancel(?:l)?ed|ex-)\b", re.IGNORECASE)
_CHANGE = re.compile(
    r"\b(now|moved|switched|changed|new|recently|became|become|turned|promoted|joined|started|"
    r"instead|anymore|no longer|upgraded|replaced|since)\b", re.IGNORECASE)
_FILLER = {"now", "new", "currently", "current", "still", "also", "recently", "just", "last", "this",
           "next", "ago", "today", "yesterday", "tomorrow", "week", "month", "year", "day", "lately",
           "already", "actually", "usually", "always", "often", "really", "use", "go", "do", "make",
           "get", "take", "try", "keep", "lot", "bit", "thing", "stuff", "second", "another", "again",
           "since", "instead", "user", "users", "person", "someone", "longer", "anymore", "stop",
           "quit", "give", "left", "leave", "away", "die", "lose", "lost", "sell", "sold",
           "can", "able", "based", "by", "every", "each", "once", "twice", "ever", "never", "not",
           "is", "are", "was", "be"}
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
_IRREGULAR = {"went": "go", "gone": "go", "ran": "run", "bought": "buy", "flew": "fly", "met": "meet",
              "saw": "see", "ate": "eat", "drank": "drink", "swam": "swim", "wrote": "write",
              "began": "begin", "got": "get", "gotten": "get", "made": "make", "took": "take",
              "children": "child", "kids": "child", "kid": "child", "people": "person", "wives": "wife",
              "honeymooned": "honeymoon", "employed": "employ", "studying": "study", "studies": "study",
              "living": "live", "lives": "live", "lived": "live", "moved": "move", "moving": "move",
              "married": "marry", "preferred": "prefer", "likes": "like", "liked": "like",
              "loves": "love", "loved": "love", "uses": "use", "used": "use", "using": "use",
              "hiking": "hike", "hiked": "hike", "hikes": "hike", "driving": "drive", "drives": "drive",
              "swimming": "swim", "running": "run", "cycling": "cycle", "dancing": "dance",
              "based": "base", "relocated": "relocate", "named": "name", "called": "call",
              "taking": "take", "making": "make", "coding": "code", "writing": "write"}
_CLASSES = {
    "drink": "tea coffee espresso latte cappuccino matcha water juice soda cola beer wine whisky milk "
             "kombucha chai cocoa",
    "display": "dark light mode theme",
    "seat": "window aisle seat",
    "device": "iphone android phone pixel samsung galaxy ios mac macbook windows linux laptop pc "
              "ipad tablet",
    "contact": "email mail call text sms slack whatsapp telegram signal",
    "daytime": "morning evening night afternoon",
    "vehicle": "car train bike bicycle bus plane flight subway metro scooter motorbike motorcycle "
               "toyota honda tesla bmw ford audi volkswagen vw corolla civic prius volvo kia hyundai",
    "editor": "vim emacs vscode pycharm neovim sublime",
    "code": "python javascript typescript java rust golang ruby kotlin swift scala haskell",
    "unit": "metric imperial celsius fahrenheit kilometer mile",
    "relationship": "single married engaged dating divorced widowed separated",
}
_SYNONYMS = [  # common words people use interchangeably in facts about themselves
    "home house flat apartment place", "food cuisine dishes meal", "fear afraid scared frighten",
    "bike bicycle cycle cycling biking", "car vehicle auto", "job work career", "kid child",
    "doctor physician", "film movie", "music songs", "sport sports", "run jog running jogging",
    "holiday vacation", "trip journey", "buy purchase", "begin start", "quit stop", "big large",
    "small little", "happy glad", "sick ill", "boss manager", "company firm employer",
    "study learn", "cook cooking", "read reading", "mum mom mother", "dad father", "tv television",
    "phone mobile cellphone smartphone", "pet animal", "exercise workout gym",
]
_SYNONYM_OF = {stem(w): ws.split()[0] for ws in _SYNONYMS for w in ws.split()}
_CLASS_OF = {stem(w): c for c, ws in _CLASSES.items() for w in ws.split()}
_YEAR = re.compile(r"^(1[89]|20)\d\d$")


@dataclass(frozen=True)
class Fact:
    """One fact read by the offline rules: who, which predicate, which value."""

    text: str
    subject: str
    predicate: str | None
    single: bool
    values: frozenset[str]
    numbers: frozenset[str]
    years: frozenset[str]
    negated: bool
    change: bool
    names: frozenset[str] = frozenset()

    @property
    def classes(self) -> set[str]:
        return {_CLASS_OF[v] for v in self.values if v in _CLASS_OF}


_SPELLING = {"colour": "color", "colours": "colors", "favourite": "favorite", "favourites": "favorites",
             "flavour": "flavor", "neighbour": "neighbor", "theatre": "theater", "centre": "center",
             "organise": "organize", "travelled": "traveled", "travelling": "traveling", "grey": "gray",
             "programme": "program", "licence": "license", "mum": "mom", "maths": "math"}


def _stem(word: str) -> str:
    word = word.lower().replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    word = _NUMBER_WORDS.get(word, word)
    word = _SPELLING.get(word, word)
    if word.isdigit():
        return word
    base = _IRREGULAR.get(word) or stem(word)
    return _SYNONYM_OF.get(base, base)


_SUBJECT = re.compile(r"^(?:the )?(?:user|[A-Z][a-z]+)(?:'s|’s) (?:new |current |former |older |younger |"
                      r"little |big |best )?([a-z]+)\b(.*)$", re.IGNORECASE)
_NAMED_RELATION = re.compile(r"\b([a-z]+) (?:named|called) ([A-Z][\w'-]+)")
_NAMING = re.compile(r"^\s*(?:'s name is|is named|is called|was named|named|called|is|was) ([A-Z][\w'-]+)\b")


def read_fact(text: str) -> Fact:
    """Reduce a third-person fact to subject / predicate / value with word lists and light rules."""
    text = as_fact(text)
    subject, body, predicate, single = "user", text, None, False
    m = _SUBJECT.match(text)
    if m and m.group(1).lower() in _RELATIONS:
        rel = _RELATIONS[m.group(1).lower()]
        naming = _NAMING.match(m.group(2).replace("’", "'"))
        if naming:
            predicate, single, body = f"rel:{rel}", rel in _SINGLE_RELATIONS, naming.group(1)
            if rel == "partner":
                predicate = "partner"
        else:
            subject, body = rel, m.group(2)
    named = _NAMED_RELATION.search(body) if predicate is None else None
    if named and named.group(1).lower() in _RELATIONS and subject == "user":
        rel = _RELATIONS[named.group(1).lower()]
        predicate, single, body = f"rel:{rel}", rel in _SINGLE_RELATIONS, named.group(2)
        if rel == "partner":
            predicate = "partner"
    lower = body.lower()
    cue_words: set[str] = set()
    spans: list[tuple[int, int]] = []
    if predicate is None:
        predicate, single, cue_words, spans = _find_predicate(lower)
    if predicate == "favorite":
        fav = re.search(r"favou?rite (\w+)", lower)
        if fav:
            predicate, cue_words = f"favorite:{_stem(fav.group(1))}", cue_words | {fav.group(1)}
    cue_stems = {_stem(w) for w in cue_words} | cue_words
    cue_stems |= {_stem(w.group()) for w in re.finditer(r"[\w'’-]+", lower)
                  if any(a < w.end() and w.start() < b for a, b in spans)}
    values, numbers, years = set(), set(), set()
    for w in words(body):
        s = _stem(w)
        if _YEAR.match(s):
            years.add(s)
        elif s.isdigit():
            numbers.add(s)
        elif w in _STOP or s in _STOP or s in cue_stems or w in cue_stems or len(s) < 2:
            continue
        else:
            values.add(s)
    if predicate not in _VALUE_CUES:  # "likes to drink tea": the object is tea, not drink
        objects = {v for v in values if not any(re.search(p[2], v) for p in _PREDICATES[_STRONG:])}
        values = objects or values
    names = {_stem(n) for n in _PROPER.findall(body) if n.lower() not in ("user", "the")}
    return Fact(text=text, subject=subject, predicate=predicate, single=single,
                values=frozenset(values), numbers=frozenset(numbers), years=frozenset(years),
                negated=bool(_NEGATION.search(body)), change=bool(_CHANGE.search(body)),
                names=frozenset(names & values))


_STOP = ({w for w in "a an the and or but of to in on at by for with about from into over after before is "
          "am are was were be been being do does did have has had having will would shall should can "
          "could may might must this that these those it its they them their his her he she there here "
          "very too quite some any all much many more most such only own same than as up out off so "
          "who whom whose which what when where why how".split()} | _FILLER)


_STRONG = 7  # the first predicates win wherever they occur; for the others the earliest cue wins
_VALUE_CUES = {"diet", "pet", "partner"}  # their cue word is also their value (vegetarian, dog)
_PROPER = re.compile(r"(?<!^)(?<![.!?] )\b([A-Z][a-z][\w'-]*)")
_DONE = re.compile(r"\b(passed|finished|completed|graduated|achieved|reached|ran|won|earned|got)\b")
_IDENTIFIED_BY_NAME = ("pet", "partner", "name")
_IS_A = re.compile(r"\b(?:is|was) an? (?!(?:big|huge|real) fan)")


def _find_predicate(lower: str) -> tuple[str | None, bool, set[str], list[tuple[int, int]]]:
    found = []
    for rank, (name, is_single, pattern, signal) in enumerate(_PREDICATES):
        hits = list(re.finditer(pattern, lower))
        if hits:
            if rank < _STRONG:
                found = [(0, rank, name, is_single, signal, hits)]
                break
            found.append((hits[0].start(), rank, name, is_single, signal, hits))
    if not found:
        is_a = _IS_A.search(lower)
        return ("job", True, {"job"}, [is_a.span()]) if is_a else (None, False, set(), [])
    _, _, name, is_single, signal, hits = min(found, key=lambda f: (f[0], f[1]))
    spans = [] if name in _VALUE_CUES else [h.span() for h in hits]
    return name, is_single, signal, spans


_KIN = {frozenset(p) for p in (("like", "prefer"), ("use", "prefer"), ("like", "play"), ("drink", "like"),
                               ("drink", "prefer"), ("job", "work"), ("like", "use"),
                               ("name", "pet"), ("name", "partner"))}


def _related(a: str | None, b: str | None) -> bool:
    return a == b or None in (a, b) or "switch" in (a, b) or frozenset((a, b)) in _KIN


def _clauses(text: str) -> list[str]:
    """'User sold the Corolla and now drives a Tesla' -> two facts about the same subject."""
    parts = re.split(r",? (?:and|but) (?=(?:now|then|since|recently|has|is|was|\w+s|\w+ed)\b)", text)
    if len(parts) == 1:
        return parts
    subject = re.match(r"^((?:the )?user(?:'s \w+)?|[A-Z][a-z]+)\b", parts[0], re.IGNORECASE)
    lead = subject.group(1) + " " if subject else ""
    return [parts[0]] + [lead + p for p in parts[1:]]


def compare_facts(old: Fact, new: Fact) -> tuple[str, str]:
    """The offline decision for one existing fact and one new one: (action, reason)."""
    if old.subject != new.subject:
        return "ADD", f"about {new.subject if new.subject != 'user' else 'the user'}, not {old.subject}"
    related = _related(old.predicate, new.predicate)
    shared = old.values & new.values
    if new.negated and not old.negated:
        if related and shared and (new.values <= old.values or len(shared) >= len(old.values) / 2):
            return "INVALIDATE", f"says '{old.text}' is no longer true"
        return "ADD", "a negative fact about something else"
    if old.negated and not new.negated and old.predicate == new.predicate and shared:
        return "UPDATE", "true again"
    if old.years and new.years and old.years != new.years and not old.single:
        return "ADD", "another year, so another event"
    old_all = old.values | old.numbers | old.years
    new_all = new.values | new.numbers | new.years
    same_pred = old.predicate == new.predicate
    switched = new.predicate == "switch" and old.predicate != "switch"  # "switched to coffee" vs "prefers tea over coffee"
    if related and new_all <= old_all and (same_pred or new.values) and new_all and not switched:
        return "NOOP", f"same as '{old.text}'"
    if same_pred and old_all < new_all and old.values:
        extra = new_all - old_all
        if len(extra) <= 2 and not (extra & (new.numbers | new.years)):
            return "NOOP", f"same as '{old.text}' (the new wording adds little)"
        return "UPDATE", "same fact with more detail"
    clash = {_CLASS_OF[v] for v in old.values ^ new.values if v in _CLASS_OF} & old.classes & new.classes
    if (old.names and old.names == new.names and related and not (old.years ^ new.years) and not clash
            and {old.predicate, new.predicate} & set(_IDENTIFIED_BY_NAME)
            | {p for p in (old.predicate, new.predicate) if p and p.startswith("rel:")}):
        return "NOOP", f"the same {new.predicate or old.predicate} ({', '.join(sorted(new.names))})"
    if old.predicate in ("goal", "learn") and shared and _DONE.search(new.text.lower()) and not new.change:
        return "UPDATE", "the goal was reached"
    if "switch" in (old.predicate, new.predicate):
        other = old if new.predicate == "switch" else new
        if (old.classes & new.classes) or (other.predicate in ("prefer", "use", "drive", "drink")
                                           and not (old.classes and new.classes)):
            return "UPDATE", "switched to something else"
        return "ADD", "a switch about something else"
    if not same_pred:
        return "ADD", "a different kind of fact"
    if old.values == new.values and old.numbers != new.numbers:
        return "UPDATE", "same fact, new number"
    if old.single:
        if old.classes and new.classes and not (old.classes & new.classes):
            return "ADD", "a preference about something else"
        if not (old.classes or new.classes) and old.predicate in ("prefer", "use", "drink") and not new.change:
            return "ADD", "a preference about something else"
        return "UPDATE", f"{old.predicate} has one value at a time"
    if new.change and (shared or (old.classes & new.classes)):
        return "UPDATE", "changed"
    return "ADD", f"a user can have several ({old.predicate or 'facts'})"


_PRIORITY = {"NOOP": 0, "UPDATE": 1, "INVALIDATE": 2, "ADD": 3}


def offline_decision(new_fact: str, existing: Sequence[str]) -> tuple[str, int | None, str]:
    """Compare the new fact (each of its clauses) with every existing one; NOOP > UPDATE > INVALIDATE > ADD."""
    best: tuple[str, int | None, str] = ("ADD", None, "nothing similar says this")
    clauses = [read_fact(c) for c in _clauses(as_fact(new_fact))]
    for i, text in enumerate(existing):
        old = read_fact(text)
        for new in clauses:
            action, reason = compare_facts(old, new)
            if _PRIORITY[action] < _PRIORITY[best[0]]:
                best = (action, None if action == "ADD" else i, reason)
    return best


@offline_skill("decide_memory")
def offline_decide(messages: Sequence[Message], tools=None, response_format=None) -> str:
    """The offline decider: reads the JSON the prompt carries, answers the JSON it asks for."""
    try:
        payload = parse_json(next(m.content for m in reversed(messages) if m.role == "user"))
        existing = {int(e["id"]): str(e["fact"]) for e in payload.get("existing", [])}
        new_fact = str(payload["new"])
    except (StopIteration, ValueError, KeyError, TypeError, AttributeError):
        return json.dumps({"action": "ADD", "id": None, "reason": "(offline) could not read the request"})
    ids = sorted(existing)
    action, idx, reason = offline_decision(new_fact, [existing[i] for i in ids])
    return json.dumps({"action": action, "id": None if idx is None else ids[idx],
                       "reason": f"(offline) {reason}"})


# ---------------------------------------------------------------------------- the write path
def ledger_key(store: MemoryStore, user_id: str, memory_type: str) -> str:
    """``ns:memhash:<user>:<type>``: content hash -> id of the current memory; writers WATCH it."""
    return key(store.namespace, "memhash", user_id, memory_type)


def remember(store: MemoryStore, content: str, user_id: str | None = None,
             memory_type: str = "episodic", observed_at: float | None = None, llm=None, *,
             tiers: Sequence[str] = TIERS, k: int = 5,
             candidate_distance: float | None = CANDIDATE_DISTANCE,
             duplicate_distance: float = SEMANTIC_DUPLICATE_DISTANCE,
             topics: Sequence[str] | None = None, metadata: dict | None = None,
             source_thread: str | None = None, source_messages: Sequence[str] | None = None) -> Decision:
    """hash -> semantic -> decision -> apply, atomically for this user and memory type.

    ``tiers`` picks the steps: ``("exact",)`` only drops verbatim repeats, ``("exact", "semantic")``
    treats anything within ``duplicate_distance`` as a duplicate, the default asks the decider.
    """
    unknown = set(tiers) - set(TIERS)
    if unknown:
        raise ValidationError(f"unknown tiers {sorted(unknown)}; choose from {TIERS}")
    fact = as_fact(content)
    user = _owner(user_id, memory_type)
    new = store._new(fact, user, memory_type, topics=topics, metadata=dict(metadata or {}),
                     source_thread=source_thread, source_messages=list(source_messages or []),
                     observed_at=observed_at)
    vector = store.embedder.embed(new.content)
    ledger = ledger_key(store, user, memory_type)
    for _ in range(MAX_RETRIES):
        with store.redis.pipeline() as pipe:
            try:
                pipe.watch(ledger)
                decision = _decide(store, new, vector, tiers, k, candidate_distance, duplicate_distance, llm)
                if decision.action == "NOOP":
                    pipe.unwatch()
                    return decision
                _apply(store, pipe, ledger, new, vector, decision, stamp_now=observed_at is None)
                return decision
            except redis.WatchError:
                continue
    raise MemoryKitError(f"remember() gave up after {MAX_RETRIES} conflicting writes for one user; "
                         "retry later or write less concurrently")


def _decide(store, new: Memory, vector, tiers, k, candidate_distance, duplicate_distance, llm) -> Decision:
    if "exact" in tiers:
        same = find_exact(store, new.content, new.user_id, new.memory_type)
        if same is not None:
            return Decision("NOOP", same, same, "the same text is already stored", "exact", 0.0)
    if "semantic" not in tiers and "decided" not in tiers:
        return Decision("ADD", new, None, "no exact duplicate", "exact")
    radius = candidate_distance if "decided" in tiers else duplicate_distance
    hits = find_similar(store, new.content, new.user_id, new.memory_type, k=k,
                        distance_threshold=radius, vector=vector)
    if "decided" not in tiers:
        action, idx = semantic_verdict(hits, duplicate_distance)
        if action == "NOOP":
            return Decision("NOOP", hits[0].memory, hits[0].memory,
                            f"a memory within distance {duplicate_distance}", "semantic", hits[0].distance)
        return Decision("ADD", new, None, "nothing close enough", "semantic")
    if not hits:
        return Decision("ADD", new, None, "no similar memory", "semantic")
    action, idx, reason = decide(new.content, [h.memory for h in hits], llm)
    if action == "ADD":
        return Decision("ADD", new, None, reason, "decided")
    target = hits[idx]
    memory = target.memory if action == "NOOP" else new
    return Decision(action, memory, target.memory, reason, "decided", target.distance)


def _apply(store: MemoryStore, pipe, ledger: str, new: Memory, vector, decision: Decision,
           stamp_now: bool = True) -> None:
    """Write the decision in one MULTI/EXEC; raises WatchError if another writer committed first.

    ``stamp_now``: a fact without ``observed_at`` became true when it is committed; the time is
    taken after the WATCHes, so it is later than every version this write can supersede.
    """
    target = decision.target
    closing = decision.action in ("UPDATE", "INVALIDATE") and target is not None
    if closing:
        pipe.watch(store.key(target.id))
        state = pipe.json().get(store.key(target.id), "$.invalid_at")
        if state is None or (state and state[0] is not None):
            raise redis.WatchError("the target changed under us")
    if stamp_now:
        new.created_at = new.updated_at = new.valid_from = time.time()
    if closing:
        if new.valid_from < (target.valid_from or 0):  # observed_at says: older than what we know
            new.invalid_at, new.superseded_by = target.valid_from, target.id
            decision.reason += " (older than the current memory: kept as history)"
            closing = False
        else:
            new.supersedes = target.id
    pipe.multi()
    store._write(new, vector, pipe=pipe)
    pipe.hset(ledger, new.content_hash, new.id)
    if closing:
        now = time.time()
        tkey = store.key(target.id)
        pipe.json().set(tkey, "$.invalid_at", new.valid_from)
        pipe.json().set(tkey, "$.superseded_by", new.id)
        pipe.json().set(tkey, "$.updated_at", now)
        if target.content_hash != new.content_hash:
            pipe.hdel(ledger, target.content_hash)
        target.invalid_at, target.superseded_by, target.updated_at = new.valid_from, new.id, now
    pipe.execute()


# ---------------------------------------------------------------------------- history
def history(store: MemoryStore, memory_id: str) -> list[Memory]:
    """The supersession chain ``memory_id`` belongs to, oldest first (missing links end it)."""
    start = store.get(memory_id)
    if start is None:
        raise ValidationError(f"no memory with id {memory_id!r}")
    seen = {start.id}
    older = _walk(store, start, "supersedes", seen)
    newer = _walk(store, start, "superseded_by", seen)
    return older[::-1] + [start] + newer


def _walk(store: MemoryStore, start: Memory, link: str, seen: set[str]) -> list[Memory]:
    """Follow ``link`` (supersedes / superseded_by) from ``start`` until it ends or loops."""
    chain, cur = [], start
    while getattr(cur, link) and getattr(cur, link) not in seen:
        nxt = store.get(getattr(cur, link))
        if nxt is None:
            break
        chain.append(nxt)
        seen.add(nxt.id)
        cur = nxt
    return chain


# ---------------------------------------------------------------------------- consolidation
@dataclass
class Merge:
    """One consolidated cluster: ``kept`` now carries the provenance of every ``merged`` memory."""

    kept: Memory
    merged: list[Memory] = field(default_factory=list)


def _vectors(store: MemoryStore, memories: Sequence[Memory]) -> np.ndarray:
    pipe = store.redis.pipeline(transaction=False)
    for m in memories:
        pipe.json().get(store.key(m.id), "$.embedding")
    vecs = np.array([got[0] for got in pipe.execute()], dtype=np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def consolidate(store: MemoryStore, user_id: str, *, memory_types: Sequence[str] = ("episodic", "semantic"),
                distance_threshold: float = CONSOLIDATE_DISTANCE, llm=None, use_decider: bool = True,
                dry_run: bool = False) -> list[Merge]:
    """Merge clusters of duplicates already stored for one user, type by type.

    A memory joins a cluster only if it is within ``distance_threshold`` of EVERY member
    (complete linkage: no chains of near neighbours) and, with ``use_decider``, the decider calls
    it a duplicate (NOOP) of the cluster's first member. The kept memory (the earliest) gains the
    members' source thread / message ids; the others are closed (``superseded_by`` = kept), not deleted.
    """
    user = check_id(user_id, "user_id")
    merges: list[Merge] = []
    for mtype in memory_types:
        memories = store.list(None if user == SYSTEM_USER and mtype == "semantic" else user, [mtype])
        memories = sorted((m for m in memories if m.user_id == user and m.memory_type == mtype),
                          key=lambda m: (m.valid_from or m.created_at, m.id))
        if len(memories) < 2:
            continue
        vecs = _vectors(store, memories)
        dist = 1.0 - vecs @ vecs.T
        taken: set[int] = set()
        for i in range(len(memories)):
            if i in taken:
                continue
            cluster = [i]
            order = sorted((j for j in range(i + 1, len(memories)) if j not in taken), key=lambda j: dist[i, j])
            for j in order:
                if dist[i, j] > distance_threshold:
                    break
                if any(dist[j, c] > distance_threshold for c in cluster):
                    continue
                if use_decider:
                    action, _, _ = decide(memories[j].content, [memories[i]], llm)
                    if action != "NOOP":
                        continue
                cluster.append(j)
            if len(cluster) > 1:
                taken.update(cluster)
                merges.append(Merge(memories[i], [memories[j] for j in cluster[1:]]))
    if not dry_run:
        for merge in merges:
            _merge(store, merge)
    return merges


def _merge(store: MemoryStore, merge: Merge) -> None:
    kept, now = merge.kept, time.time()
    threads = list(dict.fromkeys(t for t in [kept.source_thread, *kept.metadata.get("source_threads", []),
                                             *(m.source_thread for m in merge.merged)] if t))
    messages = list(dict.fromkeys([*kept.source_messages, *(x for m in merge.merged for x in m.source_messages)]))
    merged_from = list(dict.fromkeys([*kept.metadata.get("merged_from", []), *(m.id for m in merge.merged)]))
    kept.source_messages = messages
    kept.metadata = {**kept.metadata, "merged_from": merged_from, "source_threads": threads}
    kept.updated_at = now
    ledger = ledger_key(store, kept.user_id, kept.memory_type)
    pipe = store.redis.pipeline(transaction=True)
    pipe.json().set(store.key(kept.id), "$.source_messages", messages)
    pipe.json().set(store.key(kept.id), "$.metadata", kept.metadata)
    pipe.json().set(store.key(kept.id), "$.updated_at", now)
    for m in merge.merged:
        pipe.json().set(store.key(m.id), "$.invalid_at", now)
        pipe.json().set(store.key(m.id), "$.superseded_by", kept.id)
        pipe.json().set(store.key(m.id), "$.updated_at", now)
        m.invalid_at, m.superseded_by, m.updated_at = now, kept.id, now
        if m.content_hash != kept.content_hash:
            pipe.hdel(ledger, m.content_hash)
    pipe.execute()


# ---------------------------------------------------------------------------- evaluation on labelled pairs
LABEL_OF = {"NOOP": "duplicate", "UPDATE": "update", "INVALIDATE": "update", "ADD": "new"}
LABELS = ("duplicate", "update", "new")


def load_pairs(name: str = "pairs") -> list[dict[str, Any]]:
    """Labelled existing/new pairs from ``data/dedup/<name>.jsonl`` (duplicate / update / new)."""
    from ..config import project_root

    path = project_root() / "data" / "dedup" / f"{name}.jsonl"
    if not path.exists():
        raise ValidationError(f"no labelled pairs at {path}; run from the course checkout")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def predict_pairs(pairs: Sequence[dict[str, Any]], embedder, llm=None,
                  threshold: float = SEMANTIC_DUPLICATE_DISTANCE):
    """One row per pair: the cosine distance and each tier's label (exact / semantic / decided).

    ``decided`` is the full pipeline: exact hash, then the decider on candidates within
    ``CANDIDATE_DISTANCE`` (farther pairs are ADDed without asking), as :func:`remember` does.
    """
    import pandas as pd

    olds = [as_fact(p["existing"]) for p in pairs]
    news = [as_fact(p["new"]) for p in pairs]
    a = np.array(embedder.embed_many(olds), dtype=np.float32)
    b = np.array(embedder.embed_many(news), dtype=np.float32)
    dist = 1.0 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    rows = []
    for p, old, new, d in zip(pairs, olds, news, dist):
        same = content_hash(old) == content_hash(new)
        if same:
            decided = "NOOP"
        elif d > CANDIDATE_DISTANCE:
            decided = "ADD"
        else:
            decided = decide(new, [Memory(content=old, user_id="eval")], llm)[0]
        rows.append({"id": p["id"], "existing": p["existing"], "new": p["new"], "label": p["label"],
                     "distance": round(float(d), 3), "exact": "duplicate" if same else "new",
                     "semantic": "duplicate" if same or d <= threshold else "new",
                     "decided": LABEL_OF[decided]})
    return pd.DataFrame(rows)


def tier_scores(df, tiers: Sequence[str] = ("exact", "semantic", "decided")):
    """Accuracy and per-class precision / recall / F1 of each tier's column against ``label``."""
    import pandas as pd

    rows = []
    for tier in tiers:
        row: dict[str, Any] = {"tier": tier, "accuracy": round(float((df[tier] == df["label"]).mean()), 3)}
        f1s = []
        for label in LABELS:
            tp = int(((df[tier] == label) & (df["label"] == label)).sum())
            predicted, actual = int((df[tier] == label).sum()), int((df["label"] == label).sum())
            p = tp / predicted if predicted else 0.0
            rc = tp / actual if actual else 0.0
            f1 = 2 * p * rc / (p + rc) if p + rc else 0.0
            f1s.append(f1)
            row[f"F1 {label}"] = round(f1, 3)
            if label == "duplicate":
                row["P duplicate"], row["R duplicate"] = round(p, 3), round(rc, 3)
        row["macro F1"] = round(sum(f1s) / len(f1s), 3)
        rows.append(row)
    return pd.DataFrame(rows).set_index("tier")
