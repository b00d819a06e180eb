"""Long-term memory: episodic and semantic memories as JSON documents in a RedisVL index.

Episodic memories belong to one user; semantic ones to the ``system`` user unless a user id is given (all
read those). A changed fact never overwrites the old one (:mod:`.dedup`): searches return current ones.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Sequence

import redis
from redisvl.query import CountQuery, FilterQuery
from redisvl.query.filter import FilterExpression, Tag

from ..errors import ValidationError
from ..keys import check_id, check_namespace, key, user_key
from ..messages import new_id
from . import dedup, retrieval
from .index import (MEMORY_TYPES, content_hash, delete_keys, ensure_index, forget_user, json_docs, memory_type_list,
                    nearest, owner_field, owner_of, owner_tag, row_ids, user_scope, validity, vector_field,
                    visible_owners)

log = logging.getLogger(__name__)

MAX_MEMORY_CHARS = 20_000


@dataclass
class Memory:
    """One long-term memory. ``invalid_at`` is None while the memory is current."""

    content: str
    user_id: str
    memory_type: str = "episodic"
    id: str = field(default_factory=new_id)
    content_hash: str = ""
    topics: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    updated_at: float | None = None
    last_accessed: float | None = None
    valid_from: float | None = None
    invalid_at: float | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    source_thread: str | None = None
    source_messages: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_current(self) -> bool:
        return self.invalid_at is None


_FIELDS = tuple(f.name for f in fields(Memory))


@dataclass
class MemoryHit:
    """A memory found by a search: its cosine ``distance`` (0 = same meaning) and, when the
    search ranked by more than the vector (hybrid / recency), the score components."""

    memory: Memory
    distance: float
    text_score: float | None = None
    recency: float | None = None
    score: float | None = None
    rank: int | None = None

    def __repr__(self) -> str:
        return f"MemoryHit({self.distance:.3f}, [{self.memory.memory_type}] {self.memory.content!r})"


def memory_schema(namespace: str, dims: int) -> dict[str, Any]:
    """The RedisVL schema of the memory index (the travel-agent demo's ``memoryIdx``, extended)."""
    return {
        "index": {"name": f"{namespace}_memories", "prefix": f"{namespace}:memory",
                  "storage_type": "json"},
        "fields": [
            {"name": "content", "type": "text"},
            owner_field("user_id"),
            {"name": "memory_type", "type": "tag"},
            {"name": "topics", "path": "$.topics[*]", "type": "tag"},
            {"name": "content_hash", "type": "tag"},
            {"name": "created_at", "type": "numeric"},
            {"name": "last_accessed", "type": "numeric"},
            {"name": "valid_from", "type": "numeric"},
            {"name": "invalid_at", "type": "numeric", "attrs": {"index_missing": True}},
            vector_field(dims),
        ],
    }


class MemoryStore:
    """Add, search, list, update and delete long-term memories for many users."""

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit"):
        self.redis = redis_client
        self.embedder = embedder
        self.namespace = check_namespace(namespace)
        self.schema = memory_schema(namespace, embedder.dims)
        self.index = ensure_index(redis_client, self.schema)

    def key(self, memory_id: str) -> str:
        return key(self.namespace, "memory", memory_id)

    def _new(self, content: str, user_id: str | None, memory_type: str, *, topics: Sequence[str] | None = None,
             observed_at: float | None = None, **extra) -> Memory:
        if memory_type not in MEMORY_TYPES:
            raise ValidationError(f"memory_type must be one of {MEMORY_TYPES}, got {memory_type!r}")
        if not isinstance(content, str) or not content.strip():
            raise ValidationError("a memory needs non-empty content")
        if len(content) > MAX_MEMORY_CHARS:
            raise ValidationError(f"a memory is limited to {MAX_MEMORY_CHARS} characters (got {len(content)}): "
                                  "store a short statement, not a document")
        user_id, now = owner_of(user_id, memory_type), time.time()
        topics = [t.strip().lower() for t in topics or [] if t and t.strip()]
        return Memory(content=content.strip(), user_id=user_id, memory_type=memory_type, topics=topics,
                      content_hash=content_hash(content), created_at=now, updated_at=now,
                      valid_from=now if observed_at is None else observed_at, **extra)

    def _doc(self, memory: Memory, vector: list[float]) -> dict[str, Any]:
        doc = {k: v for k, v in asdict(memory).items() if v is not None}  # missing invalid_at == current
        return {**doc, "user_tag": owner_tag(memory.user_id), "embedding": vector}

    def add(self, content: str, user_id: str | None = None, memory_type: str = "episodic", *,
            topics: Sequence[str] | None = None, metadata: dict | None = None,
            source_thread: str | None = None, source_messages: Sequence[str] | None = None,
            observed_at: float | None = None) -> Memory:
        """Store one memory as is (no dedup: see :meth:`remember` for the agent's write path)."""
        return self.add_many([dict(content=content, user_id=user_id, memory_type=memory_type,
                                   topics=topics, metadata=metadata, source_thread=source_thread,
                                   source_messages=source_messages, observed_at=observed_at)])[0]

    def add_many(self, items: Iterable[dict[str, Any]], batch_size: int = 64) -> list[Memory]:
        """Store many memories: embedded in batches, written in pipelines."""
        memories = []
        for item in items:
            item = dict(item)
            memories.append(self._new(
                item.pop("content"), item.pop("user_id", None), item.pop("memory_type", "episodic"),
                metadata=item.pop("metadata", None) or {},
                source_messages=list(item.pop("source_messages", None) or []), **item))
        if not memories:
            return []
        vectors = self.embedder.embed_many([m.content for m in memories], batch_size=batch_size)
        self.index.load([self._doc(m, v) for m, v in zip(memories, vectors)], id_field="id",
                        batch_size=batch_size)
        return memories

    def _write(self, memory: Memory, vector: list[float] | None = None, pipe=None) -> None:
        if vector is None:  # unchanged content: keep the stored embedding
            got = self.redis.json().get(self.key(memory.id), "$.embedding")
            vector = got[0] if got else self.embedder.embed(memory.content)
        (pipe or self.redis).json().set(self.key(memory.id), "$", self._doc(memory, vector))

    def update(self, memory_id: str, content: str | None = None, *, topics: Sequence[str] | None = None,
               metadata: dict | None = None) -> Memory:
        """Change a memory in place (re-embedded when the content changes)."""
        memory = self.get(memory_id)
        if memory is None:
            raise ValidationError(f"no memory with id {memory_id!r}")
        vector = None
        if content is not None and content.strip() != memory.content:
            fresh = self._new(content, memory.user_id, memory.memory_type)
            memory.content, memory.content_hash = fresh.content, fresh.content_hash
            vector = self.embedder.embed(memory.content)
        if topics is not None:
            memory.topics = [t.strip().lower() for t in topics if t.strip()]
        if metadata is not None:
            memory.metadata = {**memory.metadata, **metadata}
        memory.updated_at = time.time()
        self._write(memory, vector)
        return memory

    def delete(self, memory_id: str) -> bool:
        """Hard delete one memory (history links to it are left dangling on purpose)."""
        return bool(self.redis.delete(self.key(memory_id)))

    def get(self, memory_id: str) -> Memory | None:
        return self.get_many([memory_id])[0]

    def get_many(self, memory_ids: Sequence[str]) -> list[Memory | None]:
        """Read memories by id in one round trip (None for missing ones)."""
        docs = json_docs(self.redis, [self.key(mid) for mid in memory_ids], *(f"$.{f}" for f in _FIELDS))
        return [Memory(**{p[2:]: v[0] for p, v in raw.items() if v}) if raw else None for raw in docs]

    def access_key(self, user_id: str) -> str:
        """The owner's sorted set of memory id -> last time a search returned it (``ns:memaccess:{user}``)."""
        return user_key(self.namespace, "memaccess", user_id)

    def touch(self, memories: Sequence[Memory]) -> int:
        """Record that these memories were just used, in their owners' access sets (one pipeline): the
        documents stay as they are, since any write to a JSON document makes Redis re-index all of it."""
        now, by_owner = time.time(), {}
        for m in memories:
            by_owner.setdefault(m.user_id, {})[m.id] = now
        if by_owner:
            pipe = self.redis.pipeline(transaction=False)
            for owner, ids in by_owner.items():
                pipe.zadd(self.access_key(owner), ids)
            pipe.execute()
        for m in memories:
            m.last_accessed = now
        return len(memories)

    def last_used(self, owners: Iterable[str], memory_ids: Sequence[str]) -> dict[str, float]:
        """When a search last returned each memory (any of these owners' access sets); absent: never."""
        ids, owners = [mid.rsplit(":", 1)[-1] for mid in memory_ids], list(dict.fromkeys(owners))
        if not ids or not owners:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for owner in owners:
            pipe.zmscore(self.access_key(owner), ids)
        used: dict[str, float] = {}
        for scores in pipe.execute():
            for full, score in zip(memory_ids, scores):
                if score is not None:
                    used[full] = max(float(score), used.get(full, 0.0))
        return used

    def _filter(self, user_id, memory_types, as_of=None, include_superseded=False) -> FilterExpression:
        expr = user_scope(user_id, memory_types)
        return expr if include_superseded else expr & validity(as_of)

    def search(self, query: str, user_id: str | None = None,
               memory_types: Sequence[str] = ("episodic", "semantic"), k: int = 5,
               distance_threshold: float | None = None, *, topics: Sequence[str] | None = None,
               filters: FilterExpression | None = None, as_of: float | None = None, touch: bool = True,
               vector: Sequence[float] | None = None, mode: str = "vector", recency=None) -> list[MemoryHit]:
        """Nearest memories the user may see, closest first, with cosine distances (0 = same);
        ``mode="text" | "hybrid"`` and ``recency`` rank as in :mod:`.retrieval`."""
        if user_id is not None:
            check_id(user_id, "user_id")
        expr = self._filter(user_id, memory_types, as_of)
        if topics:
            expr = expr & (Tag("topics") == [t.lower() for t in topics])
        if filters is not None:
            expr = expr & filters
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        if mode != "vector" or recency:
            hits = retrieval.search(self, query, vector, expr, user_id=user_id,
                                    memory_types=memory_types, k=k, mode=mode, recency=recency)
        else:
            hits = self._hits(nearest(self.index, vector, expr, k, distance_threshold), user_id, memory_types)
        if touch:
            self.touch([h.memory for h in hits])
        else:
            used = self.last_used({h.memory.user_id for h in hits}, [h.memory.id for h in hits])
            for h in hits:
                h.memory.last_accessed = max(filter(None, (h.memory.last_accessed, used.get(h.memory.id))), default=None)
        return hits

    def _hits(self, rows, user_id, memory_types) -> list[MemoryHit]:
        """Rows -> MemoryHits, read in one pipeline; drops anything outside the user's scope."""
        allowed = {(t, o) for t in memory_type_list(memory_types) for o in visible_owners(user_id, t)}
        hits = []
        for memory, row in zip(self.get_many(row_ids(rows)), rows):
            if memory is None:
                continue
            if (memory.memory_type, memory.user_id) not in allowed:  # defence in depth
                log.error("memory %s of another user matched a scoped search; dropped", memory.id)
                continue
            hits.append(MemoryHit(memory, float(row["vector_distance"])))
        return hits

    def list(self, user_id: str | None = None, memory_types: Sequence[str] = ("episodic", "semantic"),
             *, include_superseded: bool = False, limit: int = 1000) -> list[Memory]:
        """Memories a user may see (newest first), without a query."""
        expr = self._filter(user_id, memory_types, include_superseded=include_superseded)
        q = FilterQuery(filter_expression=expr, return_fields=["id"], num_results=limit)
        q.sort_by("created_at", asc=False)
        return [m for m in self.get_many(row_ids(self.index.query(q))) if m]

    def count(self, user_id: str | None = None, memory_types: Sequence[str] = ("episodic", "semantic")) -> int:
        return int(self.index.query(CountQuery(filter_expression=self._filter(user_id, memory_types))))

    def history(self, memory_id: str) -> list[Memory]:
        """The supersession chain ``memory_id`` belongs to, oldest first (a missing link ends it)."""
        start = self.get(memory_id)
        if start is None:
            raise ValidationError(f"no memory with id {memory_id!r}")
        chain, seen = [start], {start.id}
        for link in ("supersedes", "superseded_by"):
            cur = start
            while getattr(cur, link) and getattr(cur, link) not in seen:
                cur = self.get(getattr(cur, link))
                if cur is None:
                    break
                seen.add(cur.id)
                chain.insert(0 if link == "supersedes" else len(chain), cur)
        return chain

    remember = dedup.remember  # the agent's write path: hash -> vectors -> decision -> apply (memory/dedup.py)

    def forget_user(self, user_id: str) -> int:
        """Remove everything memorykit stored for this user in this namespace; returns keys deleted."""
        return forget_user(self.redis, self.namespace, user_id, embedder=self.embedder)

    def drop(self) -> None:
        """Drop the index, every memory document, the dedup ledgers and access sets of this namespace."""
        self.index.delete(drop=True)
        for structure in ("memhash", "memaccess"):
            delete_keys(self.redis, self.redis.scan_iter(match=key(self.namespace, structure) + ":*", count=1000))


MEMORY_CONTEXT_HEADER = (
    "Long-term memories about this user and the world (use them when they help; "
    "do not mention that you have a memory unless the user asks):")


def format_memories(items: Iterable[MemoryHit | Memory], header: str = MEMORY_CONTEXT_HEADER) -> str:
    """A system-prompt block, one ``- [EPISODIC] ...`` line per memory (hits or memories); "" if none."""
    memories = [getattr(item, "memory", item) for item in items or []]
    lines = [f"- [{m.memory_type.upper()}] {' '.join(m.content.split())}" for m in memories if m.content.strip()]
    return "\n".join([header, *lines]) if lines else ""
