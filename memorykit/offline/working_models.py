"""The small models behind the offline working-memory upkeep, trained on the labelled messages of
:mod:`.working_data` (the course's, and those written apart from the method).

* a **name tagger**: is this word (part of) the name the user wants to be called? Logistic
  regression over the word, its neighbours, gazetteer flags and its masked context's embedding;
* a **place classifier**: is this gazetteer place where the user lives or works now? The words around
  it and its masked context's embedding against labelled ones ("I live in X" / "we honeymooned in X");
* a **clause classifier**: goal / drop (a goal given up) / like / dislike / style (how to answer) /
  none, from the clause's sentence embedding plus its word n-grams;
* **span boundaries**: where the goal or preference starts and ends inside the clause;
* a **revision model**: does a new fact replace an item already stored (a reversed preference, a
  dropped or changed goal)? Features: embedding similarity, shared words, the clause's words.

Fitted models are cached in ``.memorykit/offline/`` under a hash of the data and this code (later runs load them).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import data_path
from .fit_cache import cached, fingerprint
from .text import STOPWORDS, Encoder, normalize, stem, words
from .working_geo import fold, gazetteer


VERSION = "3"   # bump when features change: the cached models are keyed by it
# Chosen by cross-validation on the training data only (never on the held-out dialogs):
NAME_C, NAME_WEIGHT = 1.0, {0: 1, 1: 3}   # name tagger: 0.90 of messages fully right
PLACE_C = 1.0                             # place classifier: 0.78 of messages right
CLAUSE_C, EMBED_WEIGHT = 4.0, 1.0         # clause classifier: accuracy 0.89
TRAIN_FILES = ("working/profile_train.jsonl", "working/revisions_train.jsonl", "independent_train/working.jsonl",
               "independent_train/working_dialogs.jsonl", "independent_train/working_dialogs_2.jsonl",
               "independent_train/working_dialogs_3.jsonl")
NEGATIONS = {"not", "never", "no", "don't", "dont", "n't", "didn't", "isn't", "won't", "nobody", "stop"}
_TOKEN = re.compile(r"\w+(?:['’\-.]\w+)*|[^\w\s]")
_SPLIT = re.compile(
    r"[.!?;]+(?:\s+|$)|\s+[—–-]+\s+|\s*—\s*|\n+"
    r"|,?\s+(?:and|but|so|because|though|although|while|whereas|since)\s+(?=(?:i|i'm|i've|i'd|i'll|my|we|we're)\b)"
    r"|[,:]\s+(?=(?:i|i'm|i've|i'd|i'll|im|my|we|we're)\b)", re.IGNORECASE)
_ABBREV = re.compile(r"\b(?:dr|mr|mrs|ms|st|prof|e\.g|i\.e|vs|approx)$", re.IGNORECASE)


# ---------------------------------------------------------------------------- text pieces
@dataclass(frozen=True)
class Token:
    text: str
    start: int
    end: int

    @property
    def low(self) -> str:
        return self.text.lower().replace("’", "'")


def tokens(text: str, offset: int = 0) -> list[Token]:
    return [Token(m.group(0), m.start() + offset, m.end() + offset) for m in _TOKEN.finditer(text)]


def place_tokens(text: str) -> list[Token]:
    """Tokens with hyphenated words split ("Lyon-based" -> Lyon, -, based), so places inside them are seen."""
    return [Token(m.group(0), m.start(), m.end()) for m in re.finditer(r"\w+(?:['’.]\w+)*|[^\w\s]", text)]


def clauses(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause: sentences, split again where a new clause has its own subject."""
    cuts, start = [], 0
    for m in _SPLIT.finditer(text):
        if m.start() > start and _ABBREV.search(text[start:m.start()]) and m.group(0).startswith("."):
            continue
        cuts.append((start, m.start()))
        start = m.end()
    cuts.append((start, len(text)))
    out = []
    for a, b in cuts:
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip(" ,\"'()"))
        trail = len(piece.rstrip(" ,\"'()"))
        if trail > lead and re.search(r"\w", piece):
            out.append((a + lead, a + trail))
    return out


def _low(toks: list[Token], i: int) -> str:
    return toks[i].low if 0 <= i < len(toks) else ("<s>" if i < 0 else "</s>")


def _is_word(tok: Token) -> bool:
    return bool(re.match(r"\w", tok.text))


def casual(text: str) -> bool:
    """Written without capitals (texting style: "im in rome"), so capitalization says nothing about names."""
    toks = [t for t in tokens(text) if _is_word(t)]
    return bool(toks) and (toks[0].text[:1].islower() or any(t.text in ("i", "im", "i'm", "i've", "i'd") for t in toks))


@functools.lru_cache(maxsize=1)
def _lexicon() -> dict[str, set[str]]:
    """Word lists from maintained packages: first names (Faker's person providers, every locale), and
    words that look like names but are not: languages and nationalities, countries, days, months (CLDR)."""
    import importlib
    import pkgutil

    import faker.providers.person as person
    from babel import Locale

    first = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = getattr(importlib.import_module(f"{person.__name__}.{module.name}"), "Provider", None)
        for attr in dir(provider):
            value = getattr(provider, attr, None) if attr.startswith("first_name") else None
            if isinstance(value, (dict, tuple, list, set)):
                first.update(str(x).lower() for x in value)
    en = Locale("en")
    lang = {w.lower() for v in en.languages.values() for w in v.split()}
    land = {w.lower() for v in en.territories.values() for w in v.split()}
    cal = {v.lower() for ctx in (en.days, en.months) for width in ctx["format"].values() for v in width.values()}
    return {"first_name": first, "lang": lang, "land": land, "calendar": cal}


# ---------------------------------------------------------------------------- features
def context_candidate(toks: list[Token], i: int, lower_msg: bool) -> bool:
    """Words worth an embedding of their context: capitalized, first names, or any word in casual text."""
    w = toks[i].low
    return toks[i].text.isalpha() and w not in STOPWORDS and (
        toks[i].text[:1].isupper() or lower_msg or w in _lexicon()["first_name"])


def masked(text: str, tok: Token) -> str:
    """The message around a word with the word replaced by X: "Friends call me X." (what the word's context says)."""
    return f"{text[max(0, tok.start - 80):tok.start]}X{text[tok.end:tok.end + 50]}".strip()


def context_similarity(vectors: np.ndarray, positives: np.ndarray, negatives: np.ndarray, k: int = 3) -> np.ndarray:
    """For each masked context: mean cosine to its k nearest name contexts minus to its k nearest non-name ones."""
    def top(ref):
        if len(ref) == 0:
            return np.zeros(len(vectors))
        sims = vectors @ ref.T
        return np.sort(sims, axis=1)[:, -k:].mean(axis=1)
    return top(positives) - top(negatives)


def name_features(toks: list[Token], i: int, lower_msg: bool, ctx: float | None = None) -> dict[str, float]:
    tok, w = toks[i], toks[i].low
    lex = _lexicon()
    f = {"bias": 1.0, "w=" + w: 1.0, "p2p1=" + _low(toks, i - 2) + "_" + _low(toks, i - 1): 1.0,
         "n1n2=" + _low(toks, i + 1) + "_" + _low(toks, i + 2): 1.0}
    for k in (1, 2, 3):
        f[f"p{k}=" + _low(toks, i - k)] = 1.0
    for k in (1, 2):
        f[f"n{k}=" + _low(toks, i + k)] = 1.0
    cap = tok.text[:1].isupper() and not lower_msg
    first = w in lex["first_name"]
    f["cap"] = float(cap)
    f["first_cap"] = float(first and cap)
    f["first_lower"] = float(first and lower_msg)
    if first:
        f["first_p1=" + _low(toks, i - 1)] = 1.0
    if cap:
        f["cap_p1=" + _low(toks, i - 1)] = 1.0
    f["allcaps"] = float(tok.text.isupper() and len(tok.text) > 1)
    f["lower_msg"] = float(lower_msg)
    f["sent_start"] = float(i == 0 or toks[i - 1].text in ".!?")
    f["stop"] = float(w in STOPWORDS)
    f["place"] = float(fold(tok.text) in gazetteer())
    for name, words_ in lex.items():
        f[name] = float(w in words_)
    f["digit"] = float(any(c.isdigit() for c in w))
    f["neg"] = float(any(_low(toks, j) in NEGATIONS for j in range(i - 3, i)))
    if ctx is not None:
        f["ctx"] = ctx * 10
    return f


def place_features(toks: list[Token], i: int, j: int, kind: str, population: int, lower_msg: bool) -> dict[str, float]:
    """Features of the mention toks[i:j]: the words around it, its kind and size, capitalization."""
    f = {"bias": 1.0, "kind=" + kind: 1.0, "p2p1=" + _low(toks, i - 2) + "_" + _low(toks, i - 1): 1.0,
         "pop": math.log10(max(population, 10)) / 7}
    for k in (1, 2, 3, 4):
        f[f"p{k}=" + _low(toks, i - k)] = 1.0
    for k in (0, 1):
        f[f"n{k + 1}=" + _low(toks, j + k)] = 1.0
    for k in range(max(0, i - 6), i):
        f["before=" + toks[k].low] = 0.5
    f["cap"] = float(toks[i].text[:1].isupper())
    f["lower_msg"] = float(lower_msg)
    f["neg"] = float(any(_low(toks, k) in NEGATIONS for k in range(i - 4, i)))
    return f


def start_features(toks: list[Token], k: int, kind: str) -> dict[str, float]:
    f = {"bias": 1.0, "kind=" + kind: 1.0, "w=" + _low(toks, k): 1.0, "p1=" + _low(toks, k - 1): 1.0,
         "p2=" + _low(toks, k - 2): 1.0, "p2p1=" + _low(toks, k - 2) + "_" + _low(toks, k - 1): 1.0,
         "n1=" + _low(toks, k + 1): 1.0, "first": float(k == 0), "punct": float(not _is_word(toks[k])),
         "kind_p1=" + kind + "_" + _low(toks, k - 1): 1.0, "stop": float(_low(toks, k) in STOPWORDS)}
    return f


def end_features(toks: list[Token], e: int, kind: str) -> dict[str, float]:
    """Features of ending the span before toks[e] (e == len(toks): at the end of the clause)."""
    return {"bias": 1.0, "kind=" + kind: 1.0, "last=" + _low(toks, e - 1): 1.0, "next=" + _low(toks, e): 1.0,
            "next2=" + _low(toks, e + 1): 1.0, "at_end": float(e == len(toks)),
            "next_punct": float(e < len(toks) and not _is_word(toks[e])),
            "last_stop": float(_low(toks, e - 1) in STOPWORDS)}


def content(text: str) -> set[str]:
    return {stem(w) for w in words(text) if w not in STOPWORDS and len(w) > 1}


def coarse(kind: str) -> str:
    return "goal" if kind in ("goal", "drop") else "pref"


def _prefix_overlap(a: set[str], b: set[str]) -> float:
    """Share of words that match a word of the other side on their first five letters (promotion ~ promoted)."""
    if not a or not b:
        return 0.0
    hits = sum(any(x[:5] == y[:5] for y in b) for x in a) + sum(any(y[:5] == x[:5] for x in a) for y in b)
    return hits / (len(a) + len(b))


def pair_features(kind: str, span: str, clause: str, old_kind: str, old_obj: str, cos: float,
                  best: bool, margin: float) -> dict[str, float]:
    """Does a new fact (kind, span, clause) replace a stored item? ``best``: it is the most similar one."""
    a, b = content(span), content(old_obj)
    f = {"bias": 1.0, "cos": cos, "cos2": cos * cos, "jac": len(a & b) / max(1, len(a | b)),
         "prefix": _prefix_overlap(a, b), "best": float(best), "margin": margin,
         f"best_{coarse(kind)}": float(best), "drop_best": float(best and kind == "drop"),
         "head": float(bool(a and b) and sorted(a)[-1:] == sorted(b)[-1:]),
         f"pair={kind}>{old_kind}": 1.0, f"coarse={coarse(kind)}>{coarse(old_kind)}": 1.0,
         "flip": float({kind, old_kind} == {"like", "dislike"})}
    for w in set(words(clause)):
        f["cw=" + w] = cos
    return f


# ---------------------------------------------------------------------------- embeddings
_ENCODE = Encoder(size=50_000)


def embed_many(texts: list[str]) -> np.ndarray:
    """Sentence embeddings, each text embedded once per process (:class:`.text.Encoder`)."""
    return _ENCODE(texts)


def cosine(a: str, b: str) -> float:
    va, vb = embed_many([a, b])
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb) + 1e-9))


# ---------------------------------------------------------------------------- fitting and caching
@dataclass
class Models:
    names: object
    name_contexts: np.ndarray     # embedded masked contexts of names in the training messages
    other_contexts: np.ndarray    # ... and of other candidate words
    places: object
    home_contexts: np.ndarray     # embedded masked contexts of where users live ("I live in X")
    away_contexts: np.ndarray     # ... and of places only mentioned ("we honeymooned in X")
    clause_vec: object
    clause: object
    starts: object
    ends: object
    pairs: object


def _fit_dict(rows: list[dict], labels: list, c: float = 1.0, weight: str | None = "balanced"):
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(DictVectorizer(), LogisticRegression(C=c, max_iter=3000, class_weight=weight))
    return model.fit(rows, labels)


def clause_matrix(vec, texts: list[str]):
    from scipy.sparse import csr_matrix, hstack

    return hstack([vec.transform(texts), csr_matrix(embed_many(texts) * EMBED_WEIGHT)]).tocsr()


def token_data(train: list[dict]):
    """Name-tagger and place-classifier examples: (name X, name y, place X, place y), per message."""
    from . import working_read as read
    from .working_data import is_home

    name_x, name_y, name_ctx, place_x, place_y, place_ctx = [], [], [], [], [], []
    for row in train:
        text = normalize(row["text"])
        toks, lower = tokens(text), casual(text)
        gold = [n for n in [row.get("name"), *(row.get("aka") or [])] if n]
        marked = set()
        for name in gold:
            want = [t.low for t in tokens(normalize(name))]
            for i in range(len(toks) - len(want) + 1):
                if [t.low for t in toks[i:i + len(want)]] == want:
                    marked.update(range(i, i + len(want)))
        name_x.append([name_features(toks, i, lower) for i, t in enumerate(toks) if _is_word(t)])
        name_y.append([int(i in marked) for i, t in enumerate(toks) if _is_word(t)])
        name_ctx.append([masked(text, t) if context_candidate(toks, i, lower) else None
                         for i, t in enumerate(toks) if _is_word(t)])
        ptoks = place_tokens(text)
        found = read.mentions(ptoks, lower)
        place_x.append([place_features(ptoks, i, j, p.kind, p.population, lower) for i, j, p in found])
        place_y.append([int(is_home(text[ptoks[i].start:ptoks[j - 1].end], row.get("place"))) for i, j, _ in found])
        place_ctx.append([mention_context(text, ptoks, i, j) for i, j, _ in found])
    add_contexts(name_x, name_y, name_ctx)
    add_contexts(place_x, place_y, place_ctx)
    return name_x, name_y, place_x, place_y


def mention_context(text: str, toks: list[Token], i: int, j: int) -> str:
    """The message around the place toks[i:j], the place replaced by X ("we honeymooned in X")."""
    return masked(text, Token(text[toks[i].start:toks[j - 1].end], toks[i].start, toks[j - 1].end))


def context_sets(name_y: list[list[int]], name_ctx: list[list[str | None]]) -> tuple[np.ndarray, np.ndarray, list]:
    """Embedded masked contexts of the training words: (name contexts, other contexts, (message, word) of each)."""
    where = [(m, k) for m, ctxs in enumerate(name_ctx) for k, c in enumerate(ctxs) if c is not None]
    vectors = embed_many([name_ctx[m][k] for m, k in where]) if where else np.zeros((0, 384), np.float32)
    vectors = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-9)
    return vectors, np.array([name_y[m][k] for m, k in where], dtype=int), where


def _top_mean(sims: np.ndarray, k: int) -> np.ndarray:
    """Each row's mean of its k largest finite values (0 for a row with none)."""
    k = min(k, sims.shape[1])
    if k == 0:
        return np.zeros(len(sims))
    top = np.sort(np.partition(sims, -k, axis=1)[:, -k:], axis=1)
    finite = np.isfinite(top)
    count = finite.sum(axis=1)
    return np.where(count > 0, np.where(finite, top, 0.0).sum(axis=1) / np.maximum(count, 1), 0.0)


def add_contexts(name_x, name_y, name_ctx, chunk: int = 512) -> None:
    """Give each training word its context similarity (as :func:`context_similarity`), leaving its own
    message out (no self-match); a block of rows at a time, not one word at a time (an n^2 copy)."""
    vectors, labels, where = context_sets(name_y, name_ctx)
    messages = np.array([m for m, _ in where])
    for start in range(0, len(where), chunk):
        sims = vectors[start:start + chunk] @ vectors.T
        sims[messages[start:start + chunk, None] == messages[None, :]] = -np.inf
        ctx = _top_mean(sims[:, labels == 1], 3) - _top_mean(sims[:, labels == 0], 3)
        for n, value in enumerate(ctx, start):
            m, k = where[n]
            name_x[m][k] = {**name_x[m][k], "ctx": float(value) * 10}


def place_contexts(train: list[dict]) -> list[list[str]]:
    """The masked context of every gazetteer place in the training messages, per message."""
    from . import working_read as read
    out = []
    for row in train:
        text = normalize(row["text"])
        ptoks = place_tokens(text)
        out.append([mention_context(text, ptoks, i, j) for i, j, _ in read.mentions(ptoks, casual(text))])
    return out


def _flat(groups: list[list]) -> list:
    return [x for g in groups for x in g]


def fit(part: str = "all") -> Models:
    """Train every model from ``TRAIN_FILES`` (deterministic); ``part="fit"`` leaves the dev split out."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from . import working_read as read
    from .working_data import _span_tokens, dialog_revisions, labelled_clauses, load, profile_rows

    train = profile_rows(part)
    name_x, name_y, place_x, place_y = token_data(train)
    contexts = [[masked(normalize(r["text"]), t) if context_candidate(toks, i, casual(normalize(r["text"]))) else None
                 for i, t in enumerate(toks) if _is_word(t)]
                for r in train for toks in [tokens(normalize(r["text"]))]]
    vectors, labels, _ = context_sets(name_y, contexts)
    place_vectors, place_labels, _ = context_sets(place_y, place_contexts(train))
    rows = labelled_clauses(part)
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[\w']+|[?!]").fit(
        [r["text"] for r in rows])
    clause = LogisticRegression(C=CLAUSE_C, max_iter=3000, class_weight="balanced").fit(
        clause_matrix(vec, [r["text"] for r in rows]), [r["kind"] for r in rows])
    start_x, start_y, end_x, end_y = [], [], [], []
    for r in rows:
        toks = tokens(r["text"])
        gold = _span_tokens(toks, r["text"], r["span"]) if r["span"] else None
        if gold is None:
            continue
        for k in range(len(toks)):
            start_x.append(start_features(toks, k, r["kind"]))
            start_y.append(int(k == gold[0]))
        for e in range(gold[0] + 1, len(toks) + 1):
            end_x.append(end_features(toks, e, r["kind"]))
            end_y.append(int(e == gold[1]))
    pair_x, pair_y = [], []
    for r in load("revisions_train.jsonl") + dialog_revisions(part):
        section = "goal" if coarse(r["kind"]) == "goal" else "style"
        pair_x += read.pair_rows(r["kind"], r["span"], normalize(r["text"]), r["old"], section)
        pair_y += [int(old in r["replaces"]) for old in r["old"]]
    return Models(_fit_dict(_flat(name_x), _flat(name_y), NAME_C, NAME_WEIGHT), vectors[labels == 1],
                  vectors[labels == 0], _fit_dict(_flat(place_x), _flat(place_y), PLACE_C, None),
                  place_vectors[place_labels == 1], place_vectors[place_labels == 0],
                  vec, clause,
                  _fit_dict(start_x, start_y, 1.0), _fit_dict(end_x, end_y, 1.0), _fit_dict(pair_x, pair_y, 0.5))


@functools.lru_cache(maxsize=1)
def models() -> Models:
    """The fitted models: loaded from the cache when the data and code are unchanged, else trained."""
    files = [data_path(*name.split("/")) for name in TRAIN_FILES]
    files += [Path(__file__).parent / m for m in ("working_models.py", "working_read.py", "working_data.py")]
    return cached("working", fingerprint(VERSION, files), fit)
