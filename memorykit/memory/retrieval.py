"""Hybrid retrieval for long-term memory: KNN and BM25 over the user's own memories, fused by plain RRF.

The vector list is VSIM on the owners' Vector Sets under the type / validity filter. The text list is BM25 with the
user's own statistics: Redis counts, under the same filter, the memories holding each question word and
returns them, and the score is computed here (RediSearch's BM25 counts words over every user's
memories). The two lists are fused by reciprocal rank fusion (RRF, k = 60), which needs no score
calibration; works on RediSearch 2.10 (no FT.HYBRID). An optional recency term, as in Redis's
agent-memory-server, is mixed into the fused score; "last used" comes from the owner's access set. Words are
compared folded (:func:`fold`: Zurich finds Zürich, C++ and C# are words) and CJK text by pairs of characters; a
memory's ``terms`` field gives Redis what its tokenizer would miss in the content.
"""
from __future__ import annotations

import json
import math
import re
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from redisvl.query import CountQuery, FilterQuery
from redisvl.query.filter import Text
from redisvl.utils.stopwords import get_stopwords

from ..errors import ValidationError
from ..keys import check_namespace, key
from . import vectors
from .index import memory_type_list

MODES = ("vector", "text", "hybrid")
DAY = 86400.0
_RETURN = ["id", "created_at", "last_accessed"]
# Plain RRF: the original paper's k and equal weights. Depths were checked on the dev split of data/longmem
# only (notebook 09 reports the test split; benchmarks/retrieval.py LoCoMo too).
RRF_K = 60
DEPTH = 100  # candidates kept per list
TERM_MATCHES = 1000  # memories read per query word (its document frequency is counted exactly regardless)
MAX_TERM_SHARE: float | None = 0.2  # see common(); chosen on the dev split
MIN_COMMON = 3
K1, B = 1.2, 0.75  # BM25's usual constants


@dataclass(frozen=True)
class Recency:
    """Recency: ``novelty`` halves every ``half_life_created_days``, ``freshness`` every
    ``half_life_last_access_days`` since last use; ``weight`` is its share of the score (``now``: the clock)."""

    half_life_created_days: float = 30.0
    half_life_last_access_days: float = 7.0
    novelty_weight: float = 0.4
    freshness_weight: float = 0.6
    weight: float = 0.2
    now: float | None = None

    def score(self, created_at: float | None, last_accessed: float | None, now: float) -> float:
        """Recency in [0, 1] at ``now`` (1 = created and used just now; 0 = created after ``now``, beyond 5
        minutes of clock difference between servers: it did not exist yet at the time asked about)."""
        if created_at is None or created_at > now + 300:
            return 0.0
        used = last_accessed if last_accessed is not None else created_at
        novelty = 0.5 ** (max(now - created_at, 0.0) / DAY / max(self.half_life_created_days, 1e-3))
        freshness = 0.5 ** (max(now - used, 0.0) / DAY / max(self.half_life_last_access_days, 1e-3))
        total = self.novelty_weight + self.freshness_weight
        return (self.novelty_weight * novelty + self.freshness_weight * freshness) / (total or 1.0)


@dataclass
class Candidate:
    """One memory and its score components (None: not found by that search, or no recency asked)."""

    id: str
    distance: float | None = None
    text_score: float | None = None
    created_at: float | None = None
    last_accessed: float | None = None
    recency: float | None = None
    score: float = 0.0


_STOP = get_stopwords("english")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)  # apostrophes split, as in Redis: maya's -> maya (s), l'hôtel -> hotel
# Han, kana and Hangul: written without spaces, so a run is read as its overlapping pairs of characters (as
# Lucene's CJK analyzer does): 北京烤鸭 -> 北京 京烤 烤鸭, and a question holding 北京 finds it.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_RUNS = re.compile(f"([{_CJK}]+)|[^{_CJK}]+")
# C++, C#, F#, X++ (C++17, 用C++写): a short name whose symbols are all of it; separators to Redis's tokenizer.
_SYMBOLS = re.compile(r"(?<![A-Za-z0-9+#])([A-Za-z][A-Za-z0-9]{0,2})(\+\+|#)(?![A-Za-z+#])")
_MARKS = re.compile("[\u0300-\u036f]")  # accents on Latin, Greek and Cyrillic letters (not kana's voicing marks)
_LETTERS = str.maketrans({"ł": "l", "ø": "o", "đ": "d", "ð": "d", "þ": "th", "æ": "ae", "œ": "oe", "ı": "i"})
# The separators Redis's default tokenizer surely splits on: what it gives a memory's content field (below)
_REDIS_SPLIT = re.compile(r"(?<!\\)[ \t,.<>{}\[\]\"':;!@#$%^&*()\-+=~?/|`]+")  # \- escapes a separator
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
MAX_QUERY_TERMS = 64  # a longer question is searched by its first 64 distinct terms (2 searches each)


def fold(text: str) -> str:
    """Text as search compares it: full-width forms made plain, accents dropped (Zürich -> zurich, Łódź ->
    lodz), case folded, and C++ / C# / F# spelled as words (cplusplus, csharp, fsharp)."""
    text = _MARKS.sub("", unicodedata.normalize("NFKD", text.replace("’", "'")))
    text = _SYMBOLS.sub(lambda m: f" {m[1]}{'plusplus' if m[2] == '++' else 'sharp'} ", text)
    return unicodedata.normalize("NFC", text).casefold().translate(_LETTERS)


def _split(word: str, single: bool = False) -> list[str]:
    """A word as search terms: CJK runs as overlapping pairs (a lone character as itself; ``single``: every
    character too), the rest whole."""
    terms = []
    for m in _RUNS.finditer(word):
        if m[1]:
            terms += [m[1][i:i + 2] for i in range(len(m[1]) - 1)] or [m[1]]
            terms += list(m[1]) if single and len(m[1]) > 1 else []
        elif len(m[0]) > 1 and m[0] not in _STOP:
            terms.append(m[0])
    return terms


def words(text: str, single: bool = False) -> list[str]:
    """A text's search terms, repeats kept: :func:`fold`-ed words minus English stopwords and one-letter words;
    CJK as pairs of characters (``single``: and as single characters, which a one-character question needs)."""
    return [t for w in _WORD.findall(fold(text)) for t in _split(w, single)]


def index_terms(content: str) -> str | None:
    """What a memory's ``terms`` field holds so that Redis finds it by every :func:`words` term: each term not
    surely among the tokens its ``content`` field gives Redis (split on the separators above, ASCII letters
    lower-cased): folded accents, non-ASCII capitals, C++ / C#, CJK, words joined by _. None for most
    English text."""
    plain = {w.translate(_ASCII_LOWER) for w in _REDIS_SPLIT.split(content)}
    extra = [t for t in dict.fromkeys(words(content, single=True)) if t not in plain]
    return " ".join(extra) or None


_SET_TERMS = """
local now = cjson.decode(redis.call('JSON.GET', KEYS[1], '$.content') or '[]')
if now[1] ~= ARGV[1] then return 0 end
if cjson.decode(redis.call('JSON.GET', KEYS[1], '$.terms') or '[]')[1] == cjson.decode(ARGV[2]) then return 0 end
redis.call('JSON.SET', KEYS[1], '$.terms', ARGV[2])
return 1
"""


def backfill_terms(client, namespace: str) -> int:
    """Give memories written before their ``terms`` field (2026-11-27) the field, so text search finds them by
    folded words too: a SCAN of the namespace, run once after upgrading (after the FT.DROPINDEX the schema
    check asks for). A memory whose content changes meanwhile is left to that change. Returns how many changed."""
    script, done = client.register_script(_SET_TERMS), 0
    for k in client.scan_iter(match=key(check_namespace(namespace), "memory") + ":*", count=1000):
        content = (client.json().get(k, "$.content") or [None])[0]
        terms = index_terms(content) if isinstance(content, str) else None
        if terms:
            done += script(keys=[k], args=[content, json.dumps(terms)])
    return done


def query_terms(text: str) -> list[str]:
    """The distinct :func:`words` of a question, in order, at most :data:`MAX_QUERY_TERMS`."""
    return list(dict.fromkeys(words(text)))[:MAX_QUERY_TERMS]


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def idf(total: int, with_term: int) -> float:
    """BM25's inverse document frequency: high for a word few of the ``total`` documents contain."""
    return math.log(1 + (total - with_term + 0.5) / (with_term + 0.5))


def bm25(term_docs: dict[str, dict[str, str]], df: dict[str, int], total: int) -> dict[str, float]:
    """Okapi BM25 (k1 = 1.2, b = 0.75) of the documents in ``term_docs`` (term -> {id: content}), with ``df``
    and ``total`` counted over the user's memories only; ``avgdl`` is the mean length of these documents."""
    content = {doc: text for docs in term_docs.values() for doc, text in docs.items()}
    tokens = {doc: words(text) for doc, text in content.items()}
    avgdl = sum(map(len, tokens.values())) / max(len(tokens), 1) or 1.0
    scores: dict[str, float] = {}
    for term, docs in term_docs.items():
        weight = idf(total, df[term])
        for doc in docs:  # Redis matched it (stemmed): at least once, more if the plain word repeats
            tf = max(1, sum(1 for w in tokens[doc] if w.startswith(term)))
            norm = K1 * (1 - B + B * len(tokens[doc]) / avgdl)
            scores[doc] = scores.get(doc, 0.0) + weight * tf * (K1 + 1) / (tf + norm)
    return scores


def rrf(lists: dict[str, Sequence[str]], weights: dict[str, float], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion: ``sum_l weight_l / (k + rank_l(doc))`` over the lists holding doc."""
    scores: dict[str, float] = {}
    for name, ids in lists.items():
        for rank, doc in enumerate(ids, 1):
            scores[doc] = scores.get(doc, 0.0) + weights.get(name, 1.0) / (k + rank)
    return scores


def _has(expr, term: str):
    """``expr`` and the memory holds ``term``, in its content or its :func:`index_terms` (RediSearch stems it:
    *painted* matches *paint*)."""
    term = re.sub(r"(\W)", r"\\\1", term)
    return expr & ((Text("content") % term) | (Text("terms") % term))


def common(df: dict[str, int], total: int, share: float | None) -> set[str]:
    """Words in more than ``share`` of the user's memories (and in more than ``MIN_COMMON``): a speaker's or
    the user's own name, which matches half of everything and ranks nothing."""
    return set() if share is None else {t for t, n in df.items() if n > max(share * total, MIN_COMMON)}


def text_scores(index, terms: Sequence[str], expr, df: dict[str, int], total: int) -> tuple[dict[str, float], list]:
    """BM25 over the user's own memories: the memories in scope holding each word (read from Redis) scored
    with the user's own counts ``df`` / ``total``, words in :func:`common` left out."""
    skip = common(df, total, MAX_TERM_SHARE)
    kept = [t for t in terms if df.get(t) and t not in skip]
    if not kept:
        return {}, []
    queries = [FilterQuery(_has(expr, t), return_fields=[*_RETURN, "content"], num_results=TERM_MATCHES)
               for t in kept]
    results = index.batch_search([(q.query, q.params) for q in queries], batch_size=len(queries))
    term_docs = {t: {d.id: getattr(d, "content", "") for d in res.docs} for t, res in zip(kept, results)}
    return bm25(term_docs, df, total), [d for res in results for d in res.docs]


def rank(index, query: str, near: Callable[[int], list[tuple[str, float, float | None]]] | None, expr, *,
         k: int = 5, mode: str = "hybrid", recency: Recency | None = None,
         last_used: Callable[[list[str]], dict[str, float]] | None = None) -> list[Candidate]:
    """The ``k`` best candidates for ``query`` under ``mode``, each with its score components.

    The vector list is ``near(depth)``: (document key, distance, created_at) rows, closest first; the text
    list is BM25 computed here over the user's own memories (Redis counts, then returns, per word the
    memories in scope that contain it: RediSearch's own BM25 would use index-wide counts). The two lists are
    fused by plain RRF; ``last_used`` maps memory keys to their last access time, for ``recency``."""
    if mode not in MODES:
        raise ValidationError(f"mode must be one of {MODES}, got {mode!r}")
    depth = max(DEPTH, k) if (mode == "hybrid" or recency) else k
    terms = query_terms(query) if mode != "vector" else []
    batch = [CountQuery(expr), *(CountQuery(_has(expr, t)) for t in terms)] if terms else []
    results = index.batch_search([(q.query, q.params) for q in batch], batch_size=len(batch)) if batch else []
    found: dict[str, Candidate] = {}
    lists: dict[str, list[str]] = {}

    def seen(doc) -> Candidate:
        c = found.setdefault(doc.id, Candidate(doc.id))
        c.created_at = as_float(getattr(doc, "created_at", None))
        c.last_accessed = as_float(getattr(doc, "last_accessed", None))
        return c

    if mode != "text":
        knn = near(depth)
        for key, distance, created in knn:
            found[key] = Candidate(key, distance=distance, created_at=as_float(created))
        lists["vector"] = [key for key, _, _ in knn]
    if terms:
        total, df = results[0].total, {t: res.total for t, res in zip(terms, results[1:])}
        scores, docs = text_scores(index, terms, expr, df, total)
        for doc in docs:
            seen(doc).text_score = scores[doc.id]
        lists["text"] = sorted(scores, key=lambda d: (-scores[d], d))[:depth]
    found = {d: found[d] for ids in lists.values() for d in ids}
    fused = rrf(lists, {}, RRF_K)
    best = sum(1 for ids in lists.values() if ids) / (RRF_K + 1) or 1.0
    now = recency.now if recency and recency.now is not None else time.time()
    used = last_used(list(found)) if recency is not None and last_used is not None else {}
    for c in found.values():
        c.score = fused.get(c.id, 0.0) / best  # 1.0 = first in every list
        if mode == "vector":
            c.score = 1.0 - c.distance / 2  # cosine similarity in [0, 1], as agent-memory-server
        if recency is not None:
            c.last_accessed = max(filter(None, (c.last_accessed, used.get(c.id))), default=None)
            c.recency = recency.score(c.created_at, c.last_accessed, now)
            c.score = (1 - recency.weight) * c.score + recency.weight * c.recency
    tie = {c.id: c.distance if c.distance is not None else 2.0 for c in found.values()}
    return sorted(found.values(), key=lambda c: (-c.score, tie[c.id], c.id))[:k]


def search(store, query: str, vector: Sequence[float], expr, near, *, user_id, memory_types, k: int = 5,
           mode: str = "hybrid", recency: Recency | bool | None = None,
           distance_threshold: float | None = None) -> list:
    """MemoryStore.search for ``mode="text" | "hybrid"`` or with ``recency``: MemoryHits whose
    ``distance``, ``text_score``, ``recency``, ``score`` and ``rank`` explain the order. Text needs the
    query engine; the vector list comes from ``near`` (the store's Vector Sets). ``distance_threshold``
    keeps the best ``k`` of the same ranking whose cosine distance is within it, in every mode."""
    recency = Recency() if recency is True else recency or None
    types = memory_type_list(memory_types)  # whose access sets: the user's own, and shared knowledge's
    owners = ([user_id] if user_id is not None else []) + ([None] if "semantic" in types else [])
    index = store.need_index(f"search(mode={mode!r})") if mode in ("text", "hybrid") else None
    found = rank(index, query, near, expr, k=k if distance_threshold is None else max(DEPTH, k), mode=mode,
                 recency=recency, last_used=lambda ids: store.last_used(owners, ids))
    missing = [c for c in found if c.distance is None]  # found by the text query only: read their vectors
    for c, d in zip(missing, vectors.distances(store.redis, [c.id for c in missing], vector)):
        c.distance = d
    if distance_threshold is not None:  # nan (no vector) is never within it
        found = [c for c in found if c.distance <= distance_threshold][:k]
    by_id = {c.id.rsplit(":", 1)[-1]: c for c in found}
    hits = store._hits([{"id": c.id, "vector_distance": c.distance} for c in found], user_id, memory_types)
    for position, hit in enumerate(hits, 1):
        c = by_id[hit.memory.id]
        hit.text_score, hit.recency, hit.score, hit.rank = c.text_score, c.recency, c.score, position
    return hits
