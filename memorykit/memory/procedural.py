"""Procedural memory: how to do things, learned from tool-use runs that worked.

:class:`ProcedureStore` keeps successful tool-use patterns ("compare my activity this month
vs last" -> get_health_metrics + get_workout_data) as JSON documents in a RedisVL index. Runs
scoring >= 0.7 (:func:`evaluate_workflow`) are kept; the same query type (routed by a RedisVL
``SemanticRouter``) with the same tool set updates one document, whose example phrasings each
keep a vector and the tool calls they made, so a close question can replay them.
Feedback examples, the other kind of procedural memory, live in :mod:`.feedback`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import redis
from redisvl.query import FilterQuery, VectorQuery

from ..errors import ValidationError
from ..keys import check_id, check_namespace, key
from .index import SYSTEM_USER, ensure_index, owner_field, owner_filter, owner_tag
from .routing import get_router

log = logging.getLogger(__name__)

MIN_SUCCESS_SCORE = 0.7
MAX_TIME_MS = 30_000
DEFAULT_QUERY_TYPE = "lookup"


# ================================================================ evaluating a run
@dataclass
class Evaluation:
    success: bool
    success_score: float
    reasons: list[str] = field(default_factory=list)


def tool_error(result: Any) -> str | None:
    """The error message inside a tool result (a JSON string or a dict), else None."""
    content = result.get("content", result) if isinstance(result, dict) and "content" in result else result
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return None
    if isinstance(content, dict) and content.get("error"):
        return str(content["error"])
    return None


def evaluate_workflow(tools_used: Sequence[str], tool_results: Sequence[Any], response: str | None,
                      execution_time_ms: float, max_time_ms: float = MAX_TIME_MS) -> Evaluation:
    """Score a tool-using run (the CoALA wellness agent's rule): no tool errors, a response, under 30 s.

    Each rule weighs about a third, so failing any one of them drops the score below the
    0.7 storage gate. A slow run loses its timing credit gradually (zero at twice the limit).
    """
    errors = [e for e in (tool_error(r) for r in tool_results) if e]
    tools_ok, produced = bool(tools_used) and not errors, bool(response and response.strip())
    on_time = execution_time_ms <= max_time_ms
    time_credit = 1.0 if on_time else max(0.0, 1.0 - (execution_time_ms - max_time_ms) / max_time_ms)
    if not tools_used:
        tools_reason = "no tools were called"
    elif errors:
        tools_reason = f"{len(errors)} tool error(s): {errors[0]}"
    else:
        tools_reason = f"{len(tools_used)} tool call(s) without errors"
    reasons = [tools_reason, "a response was produced" if produced else "no response was produced",
               f"finished within {max_time_ms / 1000:.0f} s" if on_time
               else f"slow: {execution_time_ms / 1000:.1f} s (limit {max_time_ms / 1000:.0f} s)"]
    score = round(0.34 * tools_ok + 0.33 * produced + 0.33 * time_credit, 3)
    return Evaluation(success=tools_ok and produced and on_time, success_score=score, reasons=reasons)


def classify_query(query: str, redis_client: redis.Redis | None = None, embedder=None,
                   vector: Sequence[float] | None = None) -> str:
    """The query type (comparison, goal, trend, summary, lookup), routed by the nearest example question."""
    router = get_router("query_types", redis_client, embedder)
    return router.route(query, vector=vector) or DEFAULT_QUERY_TYPE


# ================================================================ tool-use patterns
@dataclass
class Procedure:
    """One successful tool-use pattern, averaged over every run that used it."""

    id: str
    query: str
    query_type: str
    tools_used: list[str]
    success_score: float
    execution_time_ms: float
    uses: int = 1
    user_id: str = SYSTEM_USER
    examples: list[str] = field(default_factory=list)
    calls: list[list[dict[str, Any]]] = field(default_factory=list)   # per example: its tool calls
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Procedure":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class ProcedureHit:
    """A pattern found for a question, and the calls of its nearest stored example."""

    procedure: Procedure
    distance: float
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def similarity(self) -> float:
        return 1.0 - self.distance

    def __repr__(self) -> str:
        return (f"ProcedureHit({self.similarity:.2f}, {self.procedure.query_type}: "
                f"{' + '.join(self.procedure.tools_used)})")


def _nearest_calls(doc: dict[str, Any], vector: Sequence[float]) -> list[dict[str, Any]]:
    """The tool calls of the stored example phrasing closest to ``vector`` (unit vectors: the largest dot)."""
    calls, vectors = doc.get("calls") or [], np.asarray(doc.get("embeddings") or [], dtype=np.float32)
    if not calls or len(vectors) != len(calls):
        return []
    return list(calls[int(np.argmax(vectors @ np.asarray(vector, dtype=np.float32)))])


def procedure_schema(namespace: str, dims: int) -> dict[str, Any]:
    return {
        "index": {"name": f"{namespace}_procedures", "prefix": f"{namespace}:procedure",
                  "storage_type": "json"},
        "fields": [
            {"name": "query", "type": "text"},
            {"name": "query_type", "type": "tag"},
            {"name": "tools", "path": "$.tools_used[*]", "type": "tag"},
            owner_field("user_id"),
            {"name": "success_score", "type": "numeric"},
            {"name": "uses", "type": "numeric"},
            {"name": "updated_at", "type": "numeric"},
            {"name": "embeddings", "path": "$.embeddings[*]", "type": "vector",
             "attrs": {"algorithm": "hnsw", "dims": dims, "distance_metric": "cosine", "datatype": "float32"}},
        ],
    }


class ProcedureStore:
    """Successful tool-use patterns, shared by all users unless stored with a ``user_id``.

    Each document holds up to ``max_examples`` example queries, each with its own
    embedding (a multi-value vector field), so a pattern is found from any of the
    phrasings that led to it.
    """

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit",
                 distance_threshold: float | None = 0.4, min_score: float = MIN_SUCCESS_SCORE,
                 max_examples: int = 8):
        self.redis = redis_client
        self.embedder = embedder
        self.namespace = check_namespace(namespace)
        self.distance_threshold = distance_threshold
        self.min_score = min_score
        self.max_examples = max_examples
        self.index = ensure_index(redis_client, procedure_schema(namespace, embedder.dims))

    def pattern_id(self, query_type: str, tools_used: Sequence[str], user_id: str = SYSTEM_USER) -> str:
        """Same owner + query type + tool set -> same document."""
        raw = json.dumps([user_id, query_type, sorted(set(tools_used))])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def key(self, procedure_id: str) -> str:
        return key(self.namespace, "procedure", procedure_id)

    def query_type(self, query: str, vector: Sequence[float] | None = None) -> str:
        """comparison / goal / trend / summary / lookup, from the query-type router."""
        return classify_query(query, self.redis, self.embedder, vector=vector)

    def store(self, query: str, tools_used: Sequence[str], success_score: float, execution_time_ms: float,
              query_type: str | None = None, user_id: str | None = None,
              vector: Sequence[float] | None = None,
              calls: Sequence[dict[str, Any]] = ()) -> Procedure | None:
        """Keep a pattern when ``success_score >= 0.7``; returns it, or None when it was not kept.

        ``calls`` are the run's tool calls (``{"name", "arguments"}``), kept with this phrasing.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("a procedure needs the query that led to it")
        tools = list(dict.fromkeys(t for t in tools_used if t))
        calls = [{"name": str(c["name"]), "arguments": dict(c.get("arguments") or {})} for c in calls]
        if not tools:
            raise ValidationError("a procedure needs at least one tool name")
        if not 0.0 <= float(success_score) <= 1.0:
            raise ValidationError(f"success_score must be between 0 and 1, got {success_score!r}")
        if float(success_score) < self.min_score:
            log.info("not storing a pattern scoring %.2f (< %.2f)", success_score, self.min_score)
            return None
        owner = check_id(user_id, "user_id") if user_id is not None else SYSTEM_USER
        query = query.strip()
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        qtype = query_type or self.query_type(query, vector=vector)
        pid = self.pattern_id(qtype, tools, owner)
        now = time.time()
        stored: dict[str, Any] = {}

        def upsert(pipe) -> None:
            doc = pipe.json().get(self.key(pid))
            pipe.multi()
            if doc:
                n = int(doc["uses"])
                doc["success_score"] = round((doc["success_score"] * n + success_score) / (n + 1), 4)
                doc["execution_time_ms"] = round((doc["execution_time_ms"] * n + execution_time_ms) / (n + 1), 2)
                doc["uses"] = n + 1
                doc["updated_at"] = now
                if query not in doc["examples"] and len(doc["examples"]) < self.max_examples:
                    doc["examples"].append(query)
                    doc["embeddings"].append(vector)
                    doc.setdefault("calls", [[] for _ in doc["examples"][:-1]]).append(calls)
            else:
                doc = asdict(Procedure(id=pid, query=query, query_type=qtype, tools_used=tools,
                                       success_score=round(float(success_score), 4),
                                       execution_time_ms=round(float(execution_time_ms), 2),
                                       user_id=owner, examples=[query], calls=[calls],
                                       created_at=now, updated_at=now))
                doc["embeddings"] = [vector]
                doc["user_tag"] = owner_tag(owner)
            pipe.json().set(self.key(pid), "$", doc)
            stored.update(doc)

        self.redis.transaction(upsert, self.key(pid))
        return Procedure.from_dict(stored)

    def _scope(self, user_id: str | None):
        return owner_filter(SYSTEM_USER if user_id is None else [SYSTEM_USER, user_id])

    def suggest(self, query: str, k: int = 3, distance_threshold: float | None = ...,
                user_id: str | None = None, vector: Sequence[float] | None = None) -> list[ProcedureHit]:
        """Patterns of the most similar past questions (shared ones, plus the user's own if given).

        ``distance_threshold`` defaults to the store's (cosine distance; similarity = 1 - distance).
        ``vector`` is the query's embedding when the caller already has it.
        """
        threshold = self.distance_threshold if distance_threshold is ... else distance_threshold
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        q = VectorQuery(vector, "embeddings", return_fields=["id"], num_results=k,
                        filter_expression=self._scope(user_id))
        rows = [row for row in self.index.query(q)
                if threshold is None or float(row["vector_distance"]) <= threshold]
        docs = self._docs([row["id"].rsplit(":", 1)[-1] for row in rows])
        hits = [ProcedureHit(Procedure.from_dict(doc), float(row["vector_distance"]), _nearest_calls(doc, vector))
                for doc, row in zip(docs, rows) if doc]
        return sorted(hits, key=lambda h: (h.distance, -h.procedure.success_score))[:k]

    def _docs(self, ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """Several stored documents in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for pid in ids:
            pipe.json().get(self.key(pid))
        return pipe.execute() if ids else []

    def _read(self, ids: Sequence[str]) -> list[Procedure | None]:
        return [Procedure.from_dict(doc) if doc else None for doc in self._docs(ids)]

    def get(self, procedure_id: str) -> Procedure | None:
        return self._read([procedure_id])[0]

    def list(self, user_id: str | None = None, limit: int = 1000) -> list[Procedure]:
        """Patterns visible to ``user_id`` (shared only when None), most used first."""
        q = FilterQuery(filter_expression=self._scope(user_id), return_fields=["id"], num_results=limit)
        procs = self._read([row["id"].rsplit(":", 1)[-1] for row in self.index.query(q)])
        return sorted((p for p in procs if p), key=lambda p: (-p.uses, p.query))

    def count(self) -> int:
        return int(self.index.info()["num_docs"])

    def delete(self, procedure_id: str) -> bool:
        return bool(self.redis.delete(self.key(procedure_id)))

    def drop(self) -> None:
        self.index.delete(drop=True)


__all__ = ["Evaluation", "evaluate_workflow", "tool_error", "classify_query", "Procedure", "ProcedureHit",
           "ProcedureStore", "MIN_SUCCESS_SCORE"]
