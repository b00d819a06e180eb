"""Hybrid retrieval for long-term memory: BM25 full text + KNN fused in rank space, plus recency.

Both lists run inside Redis under the same user / type / validity filter and are fused by reciprocal
rank fusion (RRF), which needs no score calibration. Works on RediSearch 2.10 (no FT.HYBRID). An
optional recency term, as in Redis's agent-memory-server, is mixed into the fused score.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from redisvl.query import CountQuery, TextQuery, VectorQuery
from redisvl.query.filter import Text
from redisvl.utils.stopwords import get_stopwords

from ..errors import ValidationError
from .index import json_docs

MODES = ("vector", "text", "hybrid")
DAY = 86400.0
_RETURN = ["id", "created_at", "last_accessed"]
# RRF's usual k and equal weights for the two lists; the common-word share was tuned on the dev
# split of data/longmem only (notebook 09 reports the test split).
RRF_K = 60
MAX_TERM_SHARE = 0.2  # a word in a larger share of the user's memories (and in more than MIN_COMMON) is dropped
MIN_COMMON = 3
DEPTH = 50  # candidates fetched per list


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
        """Recency in [0, 1] at ``now`` (1 = created and used just now)."""
        if created_at is None:
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
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Lower-cased words of a question minus English stopwords and possessive endings."""
    words = (w.lower().removesuffix("'s").replace("'", "") for w in _WORD.findall(text.replace("’", "'")))
    return list(dict.fromkeys(w for w in words if len(w) > 1 and w not in _STOP))


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def scoped_terms(index, terms: Sequence[str], expr, max_share: float) -> list[str]:
    """Drop terms found in more than ``max_share`` (and ``MIN_COMMON``) of the memories in scope: BM25's IDF
    is global to the index, so a word common in this user's memories (their own name) would dominate."""
    if not terms or max_share >= 1:
        return list(terms)
    with_term = [expr & (Text("content") % re.sub(r"(\W)", r"\\\1", t)) for t in terms]
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
    queries = {}
    if mode in ("vector", "hybrid"):
        queries["vector"] = VectorQuery(list(vector), "embedding", return_fields=_RETURN, num_results=depth,
                                        filter_expression=expr)
    if mode in ("text", "hybrid") and terms:
        queries["text"] = TextQuery(" ".join(terms), "content", text_scorer="BM25STD", filter_expression=expr,
                                    return_fields=_RETURN, num_results=depth, stopwords=None)
    lists = dict(zip(queries, index.batch_query(list(queries.values()), batch_size=max(len(queries), 1))))
    found: dict[str, Candidate] = {}
    for name, rows in lists.items():
        for row in rows:
            c = found.setdefault(row["id"], Candidate(row["id"]))
            c.created_at = as_float(row.get("created_at"))
            c.last_accessed = as_float(row.get("last_accessed"))
            if name == "vector":
                c.distance = float(row["vector_distance"])
            else:
                c.text_score = float(row["score"])
    fused = rrf({n: [row["id"] for row in rows] for n, rows in lists.items()}, {}, RRF_K)
    best = sum(1 for rows in lists.values() if rows) / (RRF_K + 1) or 1.0
    now = recency.now if recency and recency.now is not None else time.time()
    for c in found.values():
        c.score = fused[c.id] / best  # 1.0 = first in every list
        if mode == "vector":
            c.score = 1.0 - c.distance / 2  # cosine similarity in [0, 1], as agent-memory-server
        if recency is not None:
            c.recency = recency.score(c.created_at, c.last_accessed, now)
            c.score = (1 - recency.weight) * c.score + recency.weight * c.recency
    return sorted(found.values(), key=lambda c: (-c.score, c.id))[:k]


def search(store, query: str, vector: Sequence[float], expr, *, user_id, memory_types, k: int = 5,
           mode: str = "hybrid", recency: Recency | bool | None = None) -> list:
    """MemoryStore.search for ``mode="text" | "hybrid"`` or with ``recency``: MemoryHits whose
    ``distance``, ``text_score``, ``recency``, ``score`` and ``rank`` explain the order."""
    recency = Recency() if recency is True else recency or None
    found = rank(store.index, query, vector, expr, k=k, mode=mode, recency=recency)
    missing = [c for c in found if c.distance is None]  # found by the text query only: read their (unit) vectors
    for c, got in zip(missing, json_docs(store.redis, [c.id for c in missing], "$.embedding")):
        c.distance = float(1.0 - np.dot(vector, got[0])) if got else float("nan")
    by_id = {c.id.rsplit(":", 1)[-1]: c for c in found}
    hits = store._hits([{"id": c.id, "vector_distance": c.distance} for c in found], user_id, memory_types)
    for position, hit in enumerate(hits, 1):
        c = by_id[hit.memory.id]
        hit.text_score, hit.recency, hit.score, hit.rank = c.text_score, c.recency, c.score, position
    return hits
