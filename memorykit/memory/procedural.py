"""Procedural memory: how to do things, learned from tool-use runs that worked.

:class:`ProcedureStore` keeps successful tool-use patterns ("compare my activity this month
vs last" -> get_health_metrics + get_workout_data) as JSON documents in a RedisVL index. Runs
scoring >= 0.7 (:func:`evaluate_workflow`) are kept; the same owner, query type and tool set
update one document, whose example phrasings each keep a vector and the tool calls they made,
so a close question can replay them. Feedback examples live in :mod:`.feedback`.

Patterns belong to one user (every call takes the ``user_id``; another user's pattern answers like a
missing one). ``ProcedureStore(..., shared=True)`` is an app's explicit shared pool: it keeps only the
query type, the tool names and the arguments the tool's schema bounds (booleans, enum values, numbers with
a minimum and a maximum), described and embedded without the user's words, so nothing one user typed (free
text, a date, an account number) reaches another.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import redis
from redisvl.query import CountQuery, FilterQuery
from redisvl.query.filter import Tag

from ..errors import ValidationError
from ..keys import check_id, check_namespace, key
from .index import SHARED_TAG, decoded, ensure_index, json_docs, nearest, owner_field, owner_tag, vector_field

log = logging.getLogger(__name__)

MIN_SUCCESS_SCORE = 0.7
MAX_TIME_MS = 30_000


# ================================================================ evaluating a run
@dataclass
class Evaluation:
    success: bool
    success_score: float
    reasons: list[str] = field(default_factory=list)


def tool_error(result: str) -> str | None:
    """The error of a tool result (tools return ``{"error": ...}`` as JSON), else None."""
    try:
        content = json.loads(result)
    except (TypeError, ValueError):
        return None
    return str(content["error"]) if isinstance(content, dict) and content.get("error") else None


def evaluate_workflow(tools_used: Sequence[str], tool_results: Sequence[str], response: str | None,
                      execution_time_ms: float) -> Evaluation:
    """Score a tool-using run (the CoALA wellness agent's rule): no tool errors, a response, under 30 s.

    Each rule weighs about a third, so failing any one of them drops the score below the
    0.7 storage gate. A slow run loses its timing credit gradually (zero at twice the limit).
    """
    errors = [e for e in map(tool_error, tool_results) if e]
    tools_ok, produced = bool(tools_used) and not errors, bool(response and response.strip())
    on_time = execution_time_ms <= MAX_TIME_MS
    if not tools_used:
        tools_reason = "no tools were called"
    elif errors:
        tools_reason = f"{len(errors)} tool error(s): {errors[0]}"
    else:
        tools_reason = f"{len(tools_used)} tool call(s) without errors"
    reasons = [tools_reason, "a response was produced" if produced else "no response was produced",
               f"finished within {MAX_TIME_MS / 1000:.0f} s" if on_time
               else f"slow: {execution_time_ms / 1000:.1f} s (limit {MAX_TIME_MS / 1000:.0f} s)"]
    time_credit = float(np.clip(2.0 - execution_time_ms / MAX_TIME_MS, 0.0, 1.0))
    score = round(0.34 * tools_ok + 0.33 * produced + 0.33 * time_credit, 3)
    return Evaluation(success=tools_ok and produced and on_time, success_score=score, reasons=reasons)


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
    user_id: str | None = None   # None: the shared pool's (it records no user)
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


def _nearest_calls(doc: dict[str, Any], vector: Sequence[float]) -> list[dict[str, Any]]:
    """The tool calls of the stored example phrasing closest to ``vector`` (unit vectors: the largest dot)."""
    calls, vectors = doc.get("calls") or [], np.asarray(doc.get("embeddings") or [], dtype=np.float32)
    if not calls or len(vectors) != len(calls):
        return []
    return list(calls[int(np.argmax(vectors @ np.asarray(vector, dtype=np.float32)))])


def _kept_value(value: Any, spec: dict[str, Any]) -> bool:
    """An argument a shared pattern may keep: a boolean, an enum value, or a number the tool's schema bounds
    (``minimum`` and ``maximum``: a setting such as ``days`` in 1..90). Free text, dates and unbounded numbers
    (an account number, an amount, a birthday) are what one user typed about themselves: never kept."""
    if isinstance(value, bool) or value is None:
        return True
    if value in (spec.get("enum") or []):
        return True
    if isinstance(value, (int, float)):
        low, high = spec.get("minimum"), spec.get("maximum")
        return low is not None and high is not None and low <= value <= high
    return False


def redact_calls(calls: Sequence[dict[str, Any]], parameters: dict[str, dict[str, Any]] | None = None
                 ) -> list[dict[str, Any]]:
    """Tool calls without the user's words: each argument kept only if the tool's schema names it and
    :func:`_kept_value` allows its value (an argument's name outside the schema is words too).
    ``parameters`` maps a tool name to its JSON-schema parameters."""
    out = []
    for call in calls:
        props = ((parameters or {}).get(call["name"]) or {}).get("properties") or {}
        args = {k: v for k, v in (call.get("arguments") or {}).items() if k in props and _kept_value(v, props[k])}
        out.append({"name": call["name"], "arguments": args})
    return out


def describe(query_type: str, tools: Sequence[str], calls: Sequence[dict[str, Any]]) -> str:
    """What a shared pattern shows instead of a user's question: its type and its (redacted) calls."""
    shown = calls or [{"name": t, "arguments": {}} for t in tools]
    parts = [f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in sorted(c['arguments'].items()))})" for c in shown]
    return f"{query_type} question answered with " + "; ".join(parts)


def procedure_schema(namespace: str, dims: int) -> dict[str, Any]:
    """Owner and vectors are all a lookup needs; one vector per example phrasing (a multi-value field)."""
    return {"index": {"name": f"{namespace}_procedures", "prefix": f"{namespace}:procedure", "storage_type": "json"},
            "fields": [owner_field("user_id"), {**vector_field(dims), "path": "$.embeddings[*]"}]}


class ProcedureStore:
    """Successful tool-use patterns, each user's own (``user_id`` on every call); with ``shared=True``, one
    pool for all users that stores no user text (see the module docstring).

    ``classify(query, vector) -> str`` names a question's type (default: one type for all), so
    one tool set can keep apart patterns for different kinds of question.
    """

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit",
                 distance_threshold: float | None = 0.4, max_examples: int = 8,
                 classify: Callable[[str, Sequence[float]], str] | None = None, *, shared: bool = False):
        self.redis, self.embedder, self.namespace = redis_client, embedder, check_namespace(namespace)
        self.distance_threshold, self.max_examples, self.shared = distance_threshold, max_examples, bool(shared)
        self.classify = classify or (lambda query, vector: "general")
        self.index = ensure_index(redis_client, procedure_schema(namespace, embedder.dims))

    def __repr__(self) -> str:
        return f"ProcedureStore({self.namespace!r}, {'shared pool' if self.shared else 'per user'})"

    def key(self, procedure_id: str) -> str:
        return key(self.namespace, "procedure", procedure_id)

    def _tag(self, user_id: str | None) -> str:
        """The owner tag this call reads or writes: the user's own, or the shared pool's."""
        if self.shared:
            return SHARED_TAG
        if user_id is None:
            raise ValidationError("procedures belong to a user: pass user_id=... "
                                  "(an app-wide pool is ProcedureStore(..., shared=True))")
        return owner_tag(check_id(user_id, "user_id"))

    def store(self, query: str, tools_used: Sequence[str], success_score: float, execution_time_ms: float,
              query_type: str | None = None, user_id: str | None = None,
              vector: Sequence[float] | None = None, calls: Sequence[dict[str, Any]] = (),
              parameters: dict[str, dict[str, Any]] | None = None) -> Procedure | None:
        """Keep the user's pattern when ``success_score >= 0.7``; returns it, or None when it was not kept.

        ``calls`` are the run's tool calls (``{"name", "arguments"}``), kept with this phrasing. In a shared
        pool the phrasing is replaced by :func:`describe` and free-text arguments are dropped
        (``parameters``: each tool's JSON-schema parameters, whose enum values may stay).
        """
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("a procedure needs the query that led to it")
        tools = list(dict.fromkeys(t for t in tools_used if t))
        calls = [{"name": str(c["name"]), "arguments": dict(c.get("arguments") or {})} for c in calls]
        if not tools:
            raise ValidationError("a procedure needs at least one tool name")
        if not 0.0 <= float(success_score) <= 1.0:
            raise ValidationError(f"success_score must be between 0 and 1, got {success_score!r}")
        if float(success_score) < MIN_SUCCESS_SCORE:
            log.info("not storing a pattern scoring %.2f (< %.2f)", success_score, MIN_SUCCESS_SCORE)
            return None
        tag, owner = self._tag(user_id), None if self.shared else user_id
        query = query.strip()
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        qtype = query_type or self.classify(query, vector)
        if self.shared:  # from here on, nothing the user typed: the description stands for the question
            calls = redact_calls(calls, parameters)
            query = describe(qtype, tools, calls)
            vector = self.embedder.embed(query)
        pid = hashlib.sha256(json.dumps([tag, qtype, sorted(tools)]).encode()).hexdigest()[:16]
        now = time.time()
        stored: dict[str, Any] = {}

        def upsert(pipe) -> None:   # same owner + query type + tool set -> same document
            doc = decoded(pipe.json().get(self.key(pid)))
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
                    doc["calls"].append(calls)
            else:
                doc = asdict(Procedure(id=pid, query=query, query_type=qtype, tools_used=tools,
                                       success_score=round(float(success_score), 4),
                                       execution_time_ms=round(float(execution_time_ms), 2),
                                       user_id=owner, examples=[query], calls=[calls],
                                       created_at=now, updated_at=now))
                doc["embeddings"] = [vector]
                doc["user_tag"] = tag
            pipe.json().set(self.key(pid), "$", doc)
            stored.update(doc)

        self.redis.transaction(upsert, self.key(pid))
        return Procedure.from_dict(stored)

    def _scope(self, user_id: str | None):
        return Tag("user_id") == self._tag(user_id)

    def suggest(self, query: str, k: int = 3, user_id: str | None = None,
                vector: Sequence[float] | None = None) -> list[ProcedureHit]:
        """Patterns of the user's own most similar past questions (or the shared pool's), within the
        store's ``distance_threshold``; ``vector`` is the query's embedding if already made.
        KNN, then the threshold: an HNSW range query over several vectors per document misses some."""
        scope = self._scope(user_id)
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        rows = [row for row in nearest(self.index, vector, scope, k)
                if self.distance_threshold is None or float(row["vector_distance"]) <= self.distance_threshold]
        hits = [ProcedureHit(Procedure.from_dict(doc), float(row["vector_distance"]), _nearest_calls(doc, vector))
                for doc, row in zip(json_docs(self.redis, [row["id"] for row in rows]), rows)
                if doc and doc.get("user_tag") == self._tag(user_id)]
        return sorted(hits, key=lambda h: (h.distance, -h.procedure.success_score))

    def get(self, procedure_id: str, user_id: str | None = None) -> Procedure | None:
        """The user's pattern with this id (the pool's, if shared); another owner's answers None, like a missing one."""
        tag = self._tag(user_id)
        if not isinstance(procedure_id, str) or not procedure_id.strip():
            return None
        doc = self.redis.json().get(self.key(procedure_id))
        return Procedure.from_dict(doc) if doc and doc.get("user_tag") == tag else None

    def list(self, user_id: str | None = None, limit: int = 1000) -> list[Procedure]:
        """The user's patterns (the pool's, if shared), most used first."""
        tag = self._tag(user_id)
        q = FilterQuery(filter_expression=self._scope(user_id), return_fields=["id"], num_results=limit)
        docs = json_docs(self.redis, [row["id"] for row in self.index.query(q)])
        return sorted((Procedure.from_dict(d) for d in docs if d and d.get("user_tag") == tag),
                      key=lambda p: (-p.uses, p.query))

    def count(self, user_id: str | None = None) -> int:
        """How many patterns the user has (the pool has, if shared)."""
        return int(self.index.query(CountQuery(self._scope(user_id))))

    def delete(self, procedure_id: str, user_id: str | None = None) -> bool:
        """Delete the user's pattern with this id; another owner's is left alone (False, like a missing one)."""
        tag, k = self._tag(user_id), self.key(procedure_id)

        def attempt(pipe) -> bool:
            mine = decoded(pipe.json().get(k, "$.user_tag")) == [tag]
            pipe.multi()
            if mine:
                pipe.delete(k)
            return mine

        return bool(self.redis.transaction(attempt, k, value_from_callable=True))

    def drop(self) -> None:
        self.index.delete(drop=True)


__all__ = ["Evaluation", "evaluate_workflow", "tool_error", "Procedure", "ProcedureHit", "ProcedureStore",
           "MIN_SUCCESS_SCORE", "redact_calls", "describe"]
