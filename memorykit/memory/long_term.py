"""Long-term memory: episodic and semantic memories as JSON documents in a RedisVL index.

Every memory belongs to one user, or is shared knowledge (semantic, written with ``shared=True``, owned by a
tag no user id can produce): a user reads their own memories plus shared ones, and every by-id call names its
owner (another user's id answers like a missing one). A changed fact never overwrites the old one
(:mod:`.dedup`): searches return current ones.
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
from ..keys import check_id, check_namespace, key
from ..messages import new_id
from . import dedup, retrieval
from .index import (MEMORY_TYPES, SHARED_TAG, content_hash, delete_keys, ensure_index, forget_user, json_docs,
                    memory_type_list, nearest, owner_field, owner_of, readable_tags, row_ids, tag_of, user_scope,
                    validity, vector_field, visible_tags)

log = logging.getLogger(__name__)

MAX_MEMORY_CHARS = 20_000


@dataclass
class Memory:
    """One long-term memory. ``invalid_at`` is None while the memory is current; ``user_id`` is None
    for shared knowledge."""

    content: str
    user_id: str | None = None
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

    @property
    def shared(self) -> bool:
        """Shared knowledge: every user reads it, only ``shared=True`` calls change it."""
        return self.user_id is None


_FIELDS = tuple(f.name for f in fields(Memory))
_READ = (*(f"$.{f}" for f in _FIELDS), "$.user_tag")


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

    touch_interval: float = 60.0

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit"):
        self.redis = redis_client
        self.embedder = embedder
        self.namespace = check_namespace(namespace)
        self.schema = memory_schema(namespace, embedder.dims)
        self.index = ensure_index(redis_client, self.schema)
        self._drop_script = redis_client.register_script(dedup.DROP_MEMORY)
        self._ledger_cas = redis_client.register_script(dedup.LEDGER_CAS)

    def key(self, memory_id: str) -> str:
        return key(self.namespace, "memory", memory_id)

    def _new(self, content: str, owner: str | None, memory_type: str, *, topics: Sequence[str] | None = None,
             observed_at: float | None = None, **extra) -> Memory:
        """A validated memory of ``owner`` (a user id, or None: shared knowledge), not yet stored."""
        if memory_type not in MEMORY_TYPES:
            raise ValidationError(f"memory_type must be one of {MEMORY_TYPES}, got {memory_type!r}")
        if owner is None and memory_type != "semantic":
            raise ValidationError(f"shared knowledge is semantic; a {memory_type} memory needs a user_id")
        if not isinstance(content, str) or not content.strip():
            raise ValidationError("a memory needs non-empty content")
        if len(content) > MAX_MEMORY_CHARS:
            raise ValidationError(f"a memory is limited to {MAX_MEMORY_CHARS} characters (got {len(content)}): "
                                  "store a short statement, not a document")
        owner, now = owner if owner is None else check_id(owner, "user_id"), time.time()
        topics = [t.strip().lower() for t in topics or [] if t and t.strip()]
        return Memory(content=content.strip(), user_id=owner, memory_type=memory_type, topics=topics,
                      content_hash=content_hash(content), created_at=now, updated_at=now,
                      valid_from=now if observed_at is None else observed_at, **extra)

    def _doc(self, memory: Memory, vector: list[float]) -> dict[str, Any]:
        doc = {k: v for k, v in asdict(memory).items() if v is not None}  # missing invalid_at == current
        return {**doc, "user_tag": tag_of(memory.user_id), "embedding": vector}

    def add(self, content: str, user_id: str | None = None, memory_type: str | None = None, *,
            shared: bool = False, topics: Sequence[str] | None = None, metadata: dict | None = None,
            source_thread: str | None = None, source_messages: Sequence[str] | None = None,
            observed_at: float | None = None) -> Memory:
        """Store one memory as is, for ``user_id`` or (``shared=True``) as shared knowledge every user reads
        (no dedup: see :meth:`remember`). ``memory_type`` defaults to episodic, semantic when shared."""
        return self.add_many([dict(content=content, user_id=user_id, memory_type=memory_type, shared=shared,
                                   topics=topics, metadata=metadata, source_thread=source_thread,
                                   source_messages=source_messages, observed_at=observed_at)])[0]

    def add_many(self, items: Iterable[dict[str, Any]], batch_size: int = 64) -> list[Memory]:
        """Store many memories (each dict: ``content`` and ``user_id`` or ``shared=True``, ...): embedded in
        batches, written in pipelines. All are checked before any is written."""
        memories = []
        for item in items:
            item = dict(item)
            owner = owner_of(item.pop("user_id", None), bool(item.pop("shared", False)))
            memory_type = item.pop("memory_type", None) or ("semantic" if owner is None else "episodic")
            memories.append(self._new(
                item.pop("content"), owner, memory_type,
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

    def _parse(self, raw: dict[str, list] | None) -> tuple[Memory | None, str | None]:
        """A memory and its owner tag out of a JSON.GET of :data:`_READ` (None, None if missing)."""
        if not raw:
            return None, None
        tag = next(iter(raw.get("$.user_tag") or []), None)
        return Memory(**{p[2:]: v[0] for p, v in raw.items() if v and p != "$.user_tag"}), tag

    def _load(self, memory_ids: Sequence[str]) -> list[tuple[Memory | None, str | None]]:
        """Memories and owner tags by id, unscoped (callers check the tag), in one round trip."""
        return [self._parse(raw) for raw in json_docs(self.redis, [self.key(mid) for mid in memory_ids], *_READ)]

    def get(self, memory_id: str, user_id: str | None = None, *, shared: bool = False) -> Memory | None:
        """One memory the caller may read (their own or shared; ``shared=True``: shared only), else None."""
        return self.get_many([memory_id], user_id, shared=shared)[0]

    def get_many(self, memory_ids: Sequence[str], user_id: str | None = None, *,
                 shared: bool = False) -> list[Memory | None]:
        """Read memories by id in one round trip; None for missing ones and for another user's."""
        allowed = readable_tags(owner_of(user_id, shared))
        return [m if tag in allowed else None for m, tag in self._load(memory_ids)]

    def update(self, memory_id: str, content: str | None = None, *, user_id: str | None = None,
               shared: bool = False, topics: Sequence[str] | None = None, metadata: dict | None = None) -> Memory:
        """Change the owner's memory in place: only the changed paths (JSON.MERGE) in a WATCH transaction, so a
        concurrent invalidation survives; new content is re-embedded and the exact-match ledger follows it."""
        owner = owner_of(user_id, shared)
        fresh = self._new(content, owner, "semantic") if content is not None else None
        vector = self.embedder.embed(fresh.content) if fresh else None
        k = self.key(memory_id)

        def attempt(pipe) -> Memory:
            memory, tag = self._parse(pipe.json().get(k, *_READ))
            self._check_owner(memory_id, memory, tag, owner)
            changes: dict[str, Any] = {"updated_at": time.time()}
            if fresh is not None and fresh.content != memory.content:
                changes.update(content=fresh.content, content_hash=fresh.content_hash, embedding=vector)
            if topics is not None:
                changes["topics"] = [t.strip().lower() for t in topics if t and t.strip()]
            if metadata is not None:
                changes["metadata"] = {**memory.metadata, **metadata}
            moves = dedup.ledger_moves(self, pipe, memory, changes.get("content_hash", memory.content_hash))
            pipe.multi()
            pipe.json().merge(k, "$", changes)
            moves(pipe)
            for name, value in changes.items():
                if name != "embedding":
                    setattr(memory, name, value)
            return memory

        return self.redis.transaction(attempt, k, value_from_callable=True)

    @staticmethod
    def _check_owner(memory_id: str, memory: Memory | None, tag: str | None, owner: str | None) -> None:
        """Raise unless ``owner`` may change this memory; another user's answers exactly like a missing one."""
        if memory is not None and tag == SHARED_TAG and owner is not None:
            raise ValidationError(f"memory {memory_id!r} is shared knowledge: change it with shared=True")
        if memory is None or tag != tag_of(owner):
            raise ValidationError(f"no memory with id {memory_id!r}")

    def delete(self, memory_id: str, *, user_id: str | None = None, shared: bool = False) -> bool:
        """Hard delete the owner's memory and its exact-match ledger entry in one script; False if there is no
        such memory for this owner (history links to it are left dangling on purpose)."""
        owner = owner_of(user_id, shared)
        done = self._drop([(memory_id, owner)])[0]
        if done < 0:
            raise ValidationError(f"memory {memory_id!r} is shared knowledge: delete it with shared=True")
        return bool(done)

    def _drop(self, owned: Sequence[tuple[str, str | None]]) -> list[int]:
        """Delete (id, owner) pairs with :data:`dedup.DROP_MEMORY`, pipelined: 1 deleted, 0 absent or
        another owner's, -1 shared knowledge asked for by a user."""
        pipe = self.redis.pipeline(transaction=False)
        for memory_id, owner in owned:
            ledgers = [dedup.ledger_key(self, owner, t) for t in MEMORY_TYPES]
            self._drop_script(keys=[self.key(memory_id), *ledgers],
                              args=[tag_of(owner), memory_id, SHARED_TAG if owner is not None else ""], client=pipe)
        return [int(x) for x in pipe.execute()]

    def touch(self, memories: Sequence[Memory]) -> int:
        """Set ``last_accessed`` to now, skipping memories touched less than ``touch_interval`` ago
        (any write to a JSON document makes Redis re-index all of it, vector included)."""
        now = time.time()
        stale = [m for m in memories if m.last_accessed is None or now - m.last_accessed >= self.touch_interval]
        if stale:
            pipe = self.redis.pipeline(transaction=False)
            for m in stale:
                pipe.json().set(self.key(m.id), "$.last_accessed", now)
            pipe.execute(raise_on_error=False)  # a memory deleted meanwhile is simply skipped
            for m in stale:
                m.last_accessed = now
        return len(stale)

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
        return hits

    def _hits(self, rows, user_id, memory_types) -> list[MemoryHit]:
        """Rows -> MemoryHits, read in one pipeline; drops anything outside the user's scope."""
        allowed = {(t, tag) for t in memory_type_list(memory_types) for tag in visible_tags(user_id, t)}
        hits = []
        for (memory, tag), row in zip(self._load(row_ids(rows)), rows):
            if memory is None:
                continue
            if (memory.memory_type, tag) not in allowed:  # defence in depth
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
        allowed = readable_tags(user_id)
        return [m for m, tag in self._load(row_ids(self.index.query(q))) if m and tag in allowed]

    def count(self, user_id: str | None = None, memory_types: Sequence[str] = ("episodic", "semantic")) -> int:
        return int(self.index.query(CountQuery(filter_expression=self._filter(user_id, memory_types))))

    def history(self, memory_id: str, *, user_id: str | None = None, shared: bool = False) -> list[Memory]:
        """The supersession chain ``memory_id`` belongs to, oldest first (a missing link ends it); the caller
        reads their own chains and shared ones, and another user's id answers like a missing one."""
        start = self.get(memory_id, user_id, shared=shared)
        if start is None:
            raise ValidationError(f"no memory with id {memory_id!r}")
        chain, seen = [start], {start.id}
        for link in ("supersedes", "superseded_by"):
            cur = start
            while getattr(cur, link) and getattr(cur, link) not in seen:
                nxt = self.get(getattr(cur, link), user_id, shared=shared)
                cur = nxt if nxt is not None and nxt.user_id == start.user_id else None
                if cur is None:
                    break
                seen.add(cur.id)
                chain.insert(0 if link == "supersedes" else len(chain), cur)
        return chain

    remember = dedup.remember  # the agent's write path: hash -> vectors -> decision -> apply (memory/dedup.py)

    def forget_user(self, user_id: str) -> int:
        """Remove everything memorykit stored for this user in exactly this namespace (shared knowledge
        stays), without scanning the keyspace; returns keys deleted."""
        return forget_user(self.redis, self.namespace, user_id, embedder=self.embedder)

    def drop(self) -> None:
        """Drop the index, every memory document and the dedup ledgers of this namespace."""
        self.index.delete(drop=True)
        delete_keys(self.redis, self.redis.scan_iter(match=key(self.namespace, "memhash") + ":*", count=1000))


MEMORY_CONTEXT_HEADER = (
    "Long-term memories about this user and the world (use them when they help; "
    "do not mention that you have a memory unless the user asks):")


def format_memories(items: Iterable[MemoryHit | Memory], header: str = MEMORY_CONTEXT_HEADER) -> str:
    """A system-prompt block, one ``- [EPISODIC] ...`` line per memory (hits or memories); "" if none."""
    memories = [getattr(item, "memory", item) for item in items or []]
    lines = [f"- [{m.memory_type.upper()}] {' '.join(m.content.split())}" for m in memories if m.content.strip()]
    return "\n".join([header, *lines]) if lines else ""
