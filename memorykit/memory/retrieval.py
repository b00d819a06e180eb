"""Hybrid retrieval for long-term memory: BM25 full text + KNN fused in rank space, plus recency.

Both lists run inside Redis under the same user / type / validity filter and are fused by reciprocal
rank fusion (RRF), which needs no score calibration. Works on RediSearch 2.10 (no FT.HYBRID). A
question naming a known speaker or a date adds lists restricted to it (a boost, never a filter); an
optional recency term, as in Redis's agent-memory-server, is mixed into the fused score.
"""
from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import numpy as np
from redisvl.query import CountQuery, TextQuery, VectorQuery
from redisvl.query.filter import FilterExpression, Num, Tag, Text
from redisvl.utils.stopwords import get_stopwords

from ..errors import ValidationError
from .index import json_docs

MODES = ("vector", "text", "hybrid")
DAY = 86400.0
_RETURN = ["id", "created_at", "last_accessed"]
# RRF's usual k and equal weights for the two main lists; the cue weight and the common-word share
# were tuned on the dev split of data/longmem only (notebook 09 reports the test split).
RRF_K = 60
CUE_WEIGHT = 0.5  # each speaker- or date-restricted list
MAX_TERM_SHARE = 0.2  # a word in a larger share of the user's memories (and in more than MIN_COMMON) is dropped
MIN_COMMON = 3
DEPTH = 50  # candidates fetched per list


@dataclass(frozen=True)
class Recency:
    """Recency boost: ``novelty`` halves every ``half_life_created_days`` since ``created_at``,
    ``freshness`` every ``half_life_last_access_days`` since ``last_accessed`` (or creation);
    ``weight`` is the recency share of the final score. ``now`` defaults to the clock."""

    half_life_created_days: float = 30.0
    half_life_last_access_days: float = 7.0
    novelty_weight: float = 0.4
    freshness_weight: float = 0.6
    weight: float = 0.2
    now: float | None = None

    def score(self, created_at: float | None, last_accessed: float | None = None,
              now: float | None = None) -> float:
        """Recency in [0, 1] (1 = created and used just now)."""
        if created_at is None:
            return 0.0
        now = now if now is not None else (self.now if self.now is not None else time.time())
        used = last_accessed if last_accessed is not None else created_at
        novelty = 0.5 ** (max(now - created_at, 0.0) / DAY / max(self.half_life_created_days, 1e-3))
        freshness = 0.5 ** (max(now - used, 0.0) / DAY / max(self.half_life_last_access_days, 1e-3))
        total = self.novelty_weight + self.freshness_weight
        return (self.novelty_weight * novelty + self.freshness_weight * freshness) / (total or 1.0)


@dataclass
class Candidate:
    """One memory and its score components (``ranks``: 1-based rank in each list that holds it)."""

    id: str
    distance: float | None = None
    text_score: float | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    created_at: float | None = None
    last_accessed: float | None = None
    fused: float = 0.0
    recency: float | None = None
    score: float = 0.0


_STOP = get_stopwords("english")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)


def _words(text: str) -> list[str]:
    return [w.lower().removesuffix("'s") for w in _WORD.findall(text.replace("’", "'"))]


def query_terms(text: str) -> list[str]:
    """Lower-cased words of a question minus English stopwords and possessive endings."""
    words = (w.replace("'", "") for w in _words(text))
    return list(dict.fromkeys(w for w in words if len(w) > 1 and w not in _STOP))


_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATE = re.compile(
    rf"\b(?:(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?P<month>{_MONTH}|{'|'.join(_SEASONS)})\.?"
    rf"(?:\s+(?P<day2>\d{{1,2}})(?:st|nd|rd|th)?)?,?\s+(?:of\s+)?(?P<year>(?:19|20)\d\d)\b"
    rf"|\b(?:in|during|of)\s+(?P<lone>(?:19|20)\d\d)\b", re.IGNORECASE)


def _utc(y: int, m: int, d: int = 1) -> float:
    y, m = y + (m - 1) // 12, (m - 1) % 12 + 1
    return datetime(y, m, d, tzinfo=timezone.utc).timestamp()


def date_window(text: str, slack_days: float = 7.0) -> tuple[float, float] | None:
    """The time window a question names ("on 8 May 2023", "in June 2023", "summer of 2023",
    "in 2023"), widened by ``slack_days`` for "last week"-style turns; None if it names none."""
    m = _DATE.search(text)
    if not m:
        return None
    if m.group("lone"):
        y = int(m.group("lone"))
        start, end = _utc(y, 1), _utc(y + 1, 1)
    else:
        y, word = int(m.group("year")), m.group("month").lower()
        day = m.group("day") or m.group("day2")
        if word in _SEASONS:
            first, length = _SEASONS[word]
            start, end = _utc(y, first), _utc(y, first + length)
        elif day:
            start = _utc(y, _MONTHS[word], min(int(day), 28))
            end = start + DAY
        else:
            start, end = _utc(y, _MONTHS[word]), _utc(y, _MONTHS[word] + 1)
    return start, end + slack_days * DAY


def mentioned_speakers(index, text: str) -> list[str]:
    """Speakers indexed in ``speaker`` (FT.TAGVALS) whose name appears as a word of ``text``."""
    if "speaker" not in index.schema.fields:
        return []
    words = set(_words(text))
    values = index.client.execute_command("FT.TAGVALS", index.name, "speaker")
    values = [v.decode() if isinstance(v, bytes) else v for v in values]
    return sorted(v for v in values if v in words)


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def vector_query(vector: Sequence[float], expr: FilterExpression | None, n: int) -> VectorQuery:
    """KNN: rows ``id``, ``vector_distance`` and the timestamps, closest first."""
    return VectorQuery(list(vector), "embedding", return_fields=_RETURN, num_results=n, filter_expression=expr)


def text_query(terms: Sequence[str], expr: FilterExpression | None, n: int) -> TextQuery:
    """BM25 over ``content`` for any of ``terms``: rows ``id``, ``score`` and the timestamps, best first."""
    return TextQuery(" ".join(terms), "content", text_scorer="BM25STD", filter_expression=expr,
                     return_fields=_RETURN, num_results=n, stopwords=None)


def _and(expr: FilterExpression | None, extra: FilterExpression) -> FilterExpression:
    return extra if expr is None else expr & extra


def scoped_terms(index, terms: Sequence[str], expr, max_share: float) -> list[str]:
    """Drop terms found in more than ``max_share`` of the memories in scope (and in more than
    ``MIN_COMMON``: in a handful of memories no word is common).

    BM25's IDF is global to the index, so a word rare across all users but common in this user's
    memories (their own name, a pet they mention daily) would dominate the text ranking while
    telling nothing apart. One pipelined count per term measures its frequency inside the scope.
    """
    if not terms or max_share >= 1:
        return list(terms)
    with_term = [_and(expr, Text("content") % re.sub(r"(\W)", r"\\\1", t)) for t in terms]
    total, *counts = index.batch_query([CountQuery(e) for e in [expr, *with_term]], batch_size=len(terms) + 1)
    return [t for t, n in zip(terms, counts) if n <= max(max_share * total, MIN_COMMON)]


def rrf(lists: dict[str, Sequence[str]], weights: dict[str, float], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion: ``sum_l weight_l / (k + rank_l(doc))`` over the lists holding doc."""
    scores: dict[str, float] = {}
    for name, ids in lists.items():
        for rank, doc in enumerate(ids, 1):
            scores[doc] = scores.get(doc, 0.0) + weights.get(name, 1.0) / (k + rank)
    return scores


def rank(index, query: str, vector: Sequence[float] | None, expr, *, k: int = 5, mode: str = "hybrid",
         recency: Recency | None = None) -> list[Candidate]:
    """The ``k`` best candidates for ``query`` under ``mode``, each with its score components."""
    if mode not in MODES:
        raise ValidationError(f"mode must be one of {MODES}, got {mode!r}")
    depth = max(DEPTH, k) if (mode == "hybrid" or recency) else k
    terms = scoped_terms(index, query_terms(query), expr, MAX_TERM_SHARE) if mode != "vector" else []
    scopes = {"": expr}  # the cue lists: "@date" / "@speaker" restrict the scope further
    if mode == "hybrid":
        window = date_window(query)
        if window:
            scopes["@date"] = _and(expr, (Num("valid_from") >= window[0]) & (Num("valid_from") < window[1]))
        speakers = mentioned_speakers(index, query)
        if speakers:
            scopes["@speaker"] = _and(expr, Tag("speaker") == speakers)
    queries, weights = {}, {}
    for cue, scope in scopes.items():
        if mode in ("vector", "hybrid"):
            queries["vector" + cue] = vector_query(vector, scope, depth)
            weights["vector" + cue] = CUE_WEIGHT if cue else 1.0
        if mode in ("text", "hybrid") and terms:
            queries["text" + cue] = text_query(terms, scope, depth)
            weights["text" + cue] = CUE_WEIGHT if cue else 1.0
    lists = dict(zip(queries, index.batch_query(list(queries.values()), batch_size=max(len(queries), 1))))
    found: dict[str, Candidate] = {}
    for name, rows in lists.items():
        for r, row in enumerate(rows, 1):
            c = found.setdefault(row["id"], Candidate(row["id"]))
            c.ranks[name] = r
            c.created_at = as_float(row.get("created_at"))
            c.last_accessed = as_float(row.get("last_accessed"))
            if "vector_distance" in row:
                c.distance = float(row["vector_distance"])
            if name == "text":
                c.text_score = float(row["score"])
    fused = rrf({n: [row["id"] for row in rows] for n, rows in lists.items()}, weights, RRF_K)
    best = sum(weights[n] for n, rows in lists.items() if rows) / (RRF_K + 1) or 1.0
    now = recency.now if recency and recency.now is not None else time.time()
    for c in found.values():
        c.fused = fused.get(c.id, 0.0) / best  # 1.0 = first in every list
        if mode == "vector" and c.distance is not None:
            c.fused = 1.0 - c.distance / 2  # cosine similarity in [0, 1], as agent-memory-server
        c.score = c.fused
        if recency is not None:
            c.recency = recency.score(c.created_at, c.last_accessed, now)
            c.score = (1 - recency.weight) * c.fused + recency.weight * c.recency
    return sorted(found.values(), key=lambda c: (-c.score, c.id))[:k]


def _distances(store, candidates: list[Candidate], vector: Sequence[float] | None) -> None:
    """Cosine distance for candidates that only the text query found (read their embeddings)."""
    missing = [c for c in candidates if c.distance is None]
    if not missing or vector is None:
        return
    q = np.asarray(vector, dtype=float)
    for c, got in zip(missing, json_docs(store.redis, [c.id for c in missing], "$.embedding")):
        if got:
            e = np.asarray(got[0], dtype=float)
            c.distance = float(1.0 - q @ e / ((np.linalg.norm(q) or 1.0) * (np.linalg.norm(e) or 1.0)))


def search(store, query: str, vector: Sequence[float] | None, expr, *, user_id, memory_types,
           k: int = 5, mode: str = "hybrid", recency: Recency | bool | None = None) -> list:
    """MemoryStore.search for ``mode="text" | "hybrid"`` or with ``recency``: MemoryHits whose
    ``distance``, ``text_score``, ``recency``, ``score`` and ``rank`` explain the order."""
    if recency is True:
        recency = Recency()
    candidates = rank(store.index, query, vector, expr, k=k, mode=mode, recency=recency or None)
    _distances(store, candidates, vector)
    rows = [{"id": c.id, "vector_distance": c.distance if c.distance is not None else float("nan")}
            for c in candidates]
    by_id = {c.id.rsplit(":", 1)[-1]: c for c in candidates}
    hits = store._hits(rows, user_id, memory_types)
    for position, hit in enumerate(hits, 1):
        c = by_id[hit.memory.id]
        hit.text_score, hit.recency, hit.score, hit.rank = c.text_score, c.recency, c.score, position
    return hits
