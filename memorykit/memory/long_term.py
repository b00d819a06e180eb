"""Long-term memory: episodic and semantic memories as JSON documents, their vectors in per-owner Vector Sets.

Each owner's memories live under their hash tag: documents ``ns:memory:{<user>}:<id>`` (JSON, no vector), the
vectors in ``ns:memvec:{<user>}`` (:mod:`.vectors`), the ids in ``ns:memids:{<user>}`` (a registry: id ->
created_at, so list, count and forgetting need no index). One owner's writes are one transaction in one slot,
which a Redis Cluster accepts. A RediSearch index over the documents (no vector field) serves text and hybrid
search where the server has a query engine. Every memory belongs to one user, or is shared knowledge
(semantic, written with ``shared=True``, owned by a tag no user id can produce): a user reads their own
memories plus shared ones, and every by-id call names its owner (another user's id answers like a missing
one). A changed fact never overwrites the old one (:mod:`.dedup`): searches return current ones.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, fields
from typing import Any, Iterable, Sequence

import redis
from redis.cluster import RedisCluster
from redisvl.query import FilterQuery
from redisvl.query.filter import FilterExpression, Tag

from ..errors import ModuleMissingError, ValidationError
from ..keys import check_id, check_namespace, check_text, key, shared_key, user_key
from . import dedup, retrieval, vectors
from .index import (MEMORY_TYPES, content_hash, decoded, delete_keys, ensure_index, forget_user, has_query_engine,
                    json_docs, memory_type_list, owner_field, owner_of, readable_tags, tag_of, user_scope, validity,
                    visible_tags)
from .records import MEMORY_CONTEXT_HEADER, Memory, MemoryHit, format_memories, topic_list  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

MAX_MEMORY_CHARS = 20_000
_FIELDS = tuple(f.name for f in fields(Memory))


def memory_schema(namespace: str) -> dict[str, Any]:
    """The RedisVL schema of the memory text index (the travel-agent demo's ``memoryIdx`` minus the vector,
    which lives in the owner's Vector Set): text, owner, type, topics and times. The content hash is not indexed:
    exact matches go through the per-owner ledger, and a unique tag per memory costs ~150 bytes each."""
    return {
        "index": {"name": f"{namespace}_memories", "prefix": f"{namespace}:memory:{{", "storage_type": "json"},
        "fields": [
            {"name": "content", "type": "text"},
            owner_field("user_id"),
            {"name": "memory_type", "type": "tag"},
            {"name": "topics", "path": "$.topics[*]", "type": "tag"},
            {"name": "created_at", "type": "numeric"},
            {"name": "last_accessed", "type": "numeric"},
            {"name": "valid_from", "type": "numeric"},
            {"name": "invalid_at", "type": "numeric", "attrs": {"index_missing": True}},
            {"name": "terms", "type": "text"},  # what the tokenizer misses in content: retrieval.index_terms
        ],
    }


class MemoryStore:
    """Add, search, list, update and delete long-term memories for many users (``redis.Redis`` or
    ``RedisCluster``: every transaction and script stays in one owner's slot)."""

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit"):
        self.redis, self.embedder, self.namespace = redis_client, embedder, check_namespace(namespace)
        self.schema = memory_schema(namespace)
        self.index = ensure_index(redis_client, self.schema) if has_query_engine(redis_client) else None
        self._drop_script = redis_client.register_script(dedup.DROP_MEMORY)
        self._ledger_cas = redis_client.register_script(dedup.LEDGER_CAS)

    def _owned(self, structure: str, owner: str | None, *parts: str) -> str:
        """A key under the owner's hash tag (``{%shared}`` for shared knowledge, owner None)."""
        if owner is None:
            return shared_key(self.namespace, structure, *parts)
        return user_key(self.namespace, structure, owner, *parts)

    def key(self, memory_id: str, owner: str | None) -> str:
        """``ns:memory:{<owner>}:<id>``: the memory's JSON document (owner None: shared knowledge)."""
        return self._owned("memory", owner, memory_id)

    def vectors_key(self, owner: str | None) -> str:
        """``ns:memvec:{<owner>}``: the owner's Vector Set (element = memory id)."""
        return self._owned("memvec", owner)

    def ids_key(self, owner: str | None) -> str:
        """``ns:memids:{<owner>}``: the owner's registry, memory id -> created_at."""
        return self._owned("memids", owner)

    def need_index(self, what: str):
        """The text index, or a clear error on a server without a query engine (a cluster without one)."""
        if self.index is None:
            raise ModuleMissingError(f"{what} needs Redis's query engine (RediSearch), which this server lacks; "
                                     "vector search, remember, list, history and forgetting work without it")
        return self.index

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
            raise ValidationError(f"a memory is a short statement, not a document: {len(content)} > {MAX_MEMORY_CHARS} characters")
        check_text(content, "a memory")
        owner, now = owner if owner is None else check_id(owner, "user_id"), time.time()
        if observed_at is not None and not (isinstance(observed_at, (int, float)) and observed_at <= now + 300):
            raise ValidationError(f"observed_at must be a Unix time not in the future, got {observed_at!r}")
        topics = topic_list(topics)
        return Memory(content=content.strip(), user_id=owner, memory_type=memory_type, topics=topics,
                      content_hash=content_hash(content), created_at=now, updated_at=now,
                      valid_from=now if observed_at is None else observed_at, **extra)

    @staticmethod
    def _doc(memory: Memory) -> dict[str, Any]:
        doc = {**asdict(memory), "terms": retrieval.index_terms(memory.content)}  # None left out: no invalid_at = current
        return {**{k: v for k, v in doc.items() if v is not None}, "user_tag": tag_of(memory.user_id)}

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
        embedded = self.embedder.embed_many([m.content for m in memories], batch_size=batch_size)
        by_owner: dict[str | None, list] = {}
        for pair in zip(memories, embedded):
            by_owner.setdefault(pair[0].user_id, []).append(pair)
        for pairs in by_owner.values():  # one transaction per owner and batch: one slot each
            for i in range(0, len(pairs), batch_size):
                pipe = self.redis.pipeline(transaction=True)
                for memory, vector in pairs[i : i + batch_size]:
                    self._write(memory, vector, pipe)
                pipe.execute()
        return memories

    def _write(self, memory: Memory, vector: list[float] | None = None, pipe=None) -> None:
        """Queue (or run) the document, its registry entry and its vector (None: keep the stored vector and
        rewrite its attributes)."""
        client, owner = pipe if pipe is not None else self.redis.pipeline(transaction=True), memory.user_id
        client.json().set(self.key(memory.id, owner), "$", self._doc(memory))
        client.zadd(self.ids_key(owner), {memory.id: memory.created_at})
        if vector is None:
            vectors.set_attributes(client, self.vectors_key(owner), memory)
        else:
            vectors.add(client, self.vectors_key(owner), memory, vector)
        if pipe is None:
            client.execute()

    def _parse(self, raw: Any) -> tuple[Memory | None, str | None]:
        """A memory and its owner tag out of a whole-document JSON.GET (``[doc]``); (None, None) if missing."""
        doc = raw[0] if isinstance(raw, list) and raw else raw
        if not isinstance(doc, dict):
            return None, None
        return Memory(**{f: doc[f] for f in _FIELDS if doc.get(f) is not None}), doc.get("user_tag")

    def _load(self, keys: Sequence[str]) -> list[tuple[Memory | None, str | None]]:
        """Memories and owner tags by document key (callers check the tag), in one round trip."""
        return [self._parse(raw) for raw in json_docs(self.redis, keys, "$")]

    def get(self, memory_id: str, user_id: str | None = None, *, shared: bool = False) -> Memory | None:
        """One memory the caller may read (their own or shared; ``shared=True``: shared only), else None."""
        return self.get_many([memory_id], user_id, shared=shared)[0]

    def get_many(self, memory_ids: Sequence[str], user_id: str | None = None, *,
                 shared: bool = False) -> list[Memory | None]:
        """Read memories by id in one round trip (the user's key and the shared one); None for missing ones and
        for another user's."""
        owner = owner_of(user_id, shared)
        owners = [owner] if owner is None else [owner, None]
        found = iter(self._load([self.key(mid, o) for mid in memory_ids for o in owners]))
        allowed = readable_tags(owner)
        out = []
        for _ in memory_ids:
            got = [m for m, tag in (next(found) for _ in owners) if m is not None and tag in allowed]
            out.append(got[0] if got else None)
        return out

    def update(self, memory_id: str, content: str | None = None, *, user_id: str | None = None,
               shared: bool = False, topics: Sequence[str] | None = None, metadata: dict | None = None) -> Memory:
        """Correct the owner's memory in place (:meth:`revise` keeps the old text as history): the changed paths
        (JSON.MERGE) in a WATCH transaction, so a concurrent invalidation survives; new content is re-embedded
        and the exact-match ledger follows it."""
        owner = owner_of(user_id, shared)
        fresh = self._new(content, owner, "semantic") if content is not None else None
        vector = self.embedder.embed(fresh.content) if fresh else None
        k = self.key(memory_id, owner)

        def attempt(pipe) -> Memory:
            memory, tag = self._parse(decoded(pipe.json().get(k, "$")))
            self._check_owner(memory_id, memory, tag, owner)
            changes: dict[str, Any] = {"updated_at": time.time()}
            if fresh is not None and fresh.content != memory.content:  # terms None: JSON.MERGE removes them
                changes.update(content=fresh.content, content_hash=fresh.content_hash, terms=retrieval.index_terms(fresh.content))
            if topics is not None:
                changes["topics"] = topic_list(topics)
            if metadata is not None:
                changes["metadata"] = {**memory.metadata, **metadata}
            moves = dedup.ledger_moves(self, pipe, memory, changes.get("content_hash", memory.content_hash))
            pipe.multi()
            pipe.json().merge(k, "$", changes)
            moves(pipe)
            for name in changes.keys() & set(_FIELDS):
                setattr(memory, name, changes[name])
            if "content" in changes:  # the new vector, in the same transaction as the text
                vectors.add(pipe, self.vectors_key(owner), memory, vector)
            elif "topics" in changes:
                vectors.set_attributes(pipe, self.vectors_key(owner), memory)
            return memory

        return self.redis.transaction(attempt, k, value_from_callable=True)

    def _check_owner(self, memory_id: str, memory: Memory | None, tag: str | None, owner: str | None) -> None:
        """Raise unless ``owner`` may change this memory; another user's answers exactly like a missing one."""
        if memory is None or tag != tag_of(owner):
            self._not_shared(memory_id, owner, "change")
            raise ValidationError(f"no memory with id {memory_id!r}")

    def _not_shared(self, memory_id: str, owner: str | None, verb: str) -> None:
        """A user naming a shared memory's id gets told how to reach it (its document is in the shared slot)."""
        if owner is not None and self.redis.exists(self.key(memory_id, None)):
            raise ValidationError(f"memory {memory_id!r} is shared knowledge: {verb} it with shared=True")

    def delete(self, memory_id: str, *, user_id: str | None = None, shared: bool = False) -> bool:
        """Hard delete the owner's memory and its exact-match ledger entry in one script; False if there is no
        such memory for this owner (history links to it are left dangling on purpose)."""
        owner = owner_of(user_id, shared)
        done = self._drop([(memory_id, owner)])[0]
        if not done:
            self._not_shared(memory_id, owner, "delete")
        return bool(done)

    def _drop(self, owned: Sequence[tuple[str, str | None]]) -> list[int]:
        """Delete (id, owner) pairs with :data:`dedup.DROP_MEMORY` (document, vector, registry, ledger and
        access entries: all in the owner's slot), pipelined: 1 deleted, 0 absent or another owner's."""
        calls = [dict(keys=[self.key(memory_id, owner), *(dedup.ledger_key(self, owner, t) for t in MEMORY_TYPES),
                            self.access_key(owner), self.vectors_key(owner), self.ids_key(owner)],
                      args=[tag_of(owner), memory_id]) for memory_id, owner in owned]
        if isinstance(self.redis, RedisCluster):  # redis-py runs no scripts in a cluster pipeline: one call each
            return [int(self._drop_script(**call)) for call in calls]
        pipe = self.redis.pipeline(transaction=False)
        for call in calls:
            self._drop_script(**call, client=pipe)
        return [int(x) for x in pipe.execute()]

    def access_key(self, owner: str | None) -> str:
        """The owner's sorted set of memory id -> last time a search returned it (``ns:memaccess:{user}``;
        shared knowledge: ``ns:memaccess:{%shared}``)."""
        return self._owned("memaccess", owner)

    def _access_of(self, doc_key: str) -> tuple[str, str]:
        """(the owner's access set, memory id) of a document key ``ns:memory:{<owner>}:<id>``."""
        tagged, memory_id = doc_key.removeprefix(f"{self.namespace}:memory:").rsplit(":", 1)
        return f"{self.namespace}:memaccess:{tagged}", memory_id

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

    @staticmethod
    def _scopes(user_id: str | None, memory_types) -> list[tuple[str | None, list[str]]]:
        """Whose memories of which types a user sees: their own, plus shared knowledge for semantic ones."""
        types = memory_type_list(memory_types)
        scopes = [(check_id(user_id, "user_id"), types)] if user_id is not None else []
        scopes += [(None, ["semantic"])] if "semantic" in types else []
        if not scopes:
            raise ValidationError("a user_id is needed to search episodic or procedural memories")
        return scopes

    def search(self, query: str, user_id: str | None = None,
               memory_types: Sequence[str] = ("episodic", "semantic"), k: int = 5,
               distance_threshold: float | None = None, *, topics: Sequence[str] | None = None,
               filters: FilterExpression | None = None, as_of: float | None = None, touch: bool = True,
               vector: Sequence[float] | None = None, mode: str = "vector", recency=None) -> list[MemoryHit]:
        """Nearest memories the user may see (none farther than ``distance_threshold``), closest first, with
        cosine distances (0 = same); ``mode="text" | "hybrid"`` and ``recency`` rank as in :mod:`.retrieval`.
        ``filters`` (a RedisVL expression over the indexed fields) needs the query engine."""
        self._scopes(user_id, memory_types)
        if k <= 0:
            return []
        vector = list(vector) if vector is not None else self.embedder.embed(query)

        def near(count: int) -> list[tuple[str, float, float | None]]:
            return self._nearest(vector, user_id, memory_types, count, as_of=as_of, topics=topics, filters=filters)

        if mode != "vector" or recency:
            expr = self._filter(user_id, memory_types, as_of)
            if topics:
                expr = expr & (Tag("topics") == topic_list(topics))
            if filters is not None:
                expr = expr & filters
            hits = retrieval.search(self, query, vector, expr, near, user_id=user_id, memory_types=memory_types,
                                    k=k, mode=mode, recency=recency, distance_threshold=distance_threshold)
        else:
            rows = [(key, d) for key, d, _ in near(k) if distance_threshold is None or d <= distance_threshold]
            return self._hits([{"id": key, "vector_distance": d} for key, d in rows], user_id, memory_types, touch)
        if touch:
            self.touch([h.memory for h in hits])
        else:
            used = self.last_used({h.memory.user_id for h in hits}, [h.memory.id for h in hits])
            for h in hits:
                h.memory.last_accessed = max(filter(None, (h.memory.last_accessed, used.get(h.memory.id))), default=None)
        return hits

    def _nearest(self, vector, user_id, memory_types, count: int, *, as_of=None, topics=None,
                 filters: FilterExpression | None = None) -> list[tuple[str, float, float | None]]:
        """(document key, cosine distance, created_at) of the ``count`` nearest memories the user sees."""
        if filters is None:
            return vectors.nearest(self, self._scopes(user_id, memory_types), vector, count, as_of,
                                   topic_list(topics) if topics else topics)
        expr = self._filter(user_id, memory_types, as_of) & filters
        if topics:
            expr = expr & (Tag("topics") == topic_list(topics))
        return vectors.filtered(self.redis, self.need_index("search(filters=...)"), expr, vector, count)

    def _hits(self, rows, user_id, memory_types, touch: bool | None = None) -> list[MemoryHit]:
        """Rows (document key, distance) -> MemoryHits, read in one pipeline; drops anything outside the scope.
        ``touch`` True / False also records the use / reads the last use in that same round trip."""
        allowed = {(t, tag) for t in memory_type_list(memory_types) for tag in visible_tags(user_id, t)}
        keys, now = [row["id"] for row in rows], time.time()
        pipe = self.redis.pipeline(transaction=False)
        for k in keys:
            pipe.json().get(k, "$")
        used: dict[str, list[str]] = {}  # the owners' access sets -> memory ids
        for k in keys if touch is not None else ():
            access, mid = self._access_of(k)
            used.setdefault(access, []).append(mid)
        for access, ids in used.items():
            pipe.zadd(access, dict.fromkeys(ids, now)) if touch else pipe.zmscore(access, ids)
        replies = pipe.execute(raise_on_error=False)
        last = {mid: now for ids in used.values() for mid in ids} if touch else {
            mid: float(t) for (_, ids), scores in zip(used.items(), replies[len(keys):]) for mid, t in zip(ids, scores)
            if t is not None}
        hits = []
        for raw, row in zip(replies[:len(keys)], rows):
            memory, tag = self._parse(None if isinstance(raw, Exception) else raw)
            if memory is None:
                continue
            if (memory.memory_type, tag) not in allowed:  # defence in depth
                log.error("memory %s of another user matched a scoped search; dropped", memory.id)
                continue
            if touch is not None:
                memory.last_accessed = max(filter(None, (memory.last_accessed, last.get(memory.id))), default=None)
            hits.append(MemoryHit(memory, float(row["vector_distance"])))
        return hits

    def list(self, user_id: str | None = None, memory_types: Sequence[str] = ("episodic", "semantic"),
             *, include_superseded: bool = False, limit: int = 1000) -> list[Memory]:
        """Memories a user may see (newest first), without a query: read from the owners' id registries."""
        scopes = self._scopes(user_id, memory_types)
        pipe = self.redis.pipeline(transaction=False)
        for owner, _ in scopes:
            pipe.zrange(self.ids_key(owner), 0, -1, withscores=True)
        entries = sorted(((-created, mid, owner, tuple(types)) for (owner, types), got in zip(scopes, pipe.execute())
                          for mid, created in got))
        out: list[Memory] = []
        for i in range(0, len(entries), 200):
            batch = entries[i : i + 200]
            for (_, _, owner, types), (m, tag) in zip(batch, self._load([self.key(e[1], e[2]) for e in batch])):
                if m is not None and tag == tag_of(owner) and m.memory_type in types and (
                        include_superseded or m.is_current):
                    out.append(m)
            if len(out) >= limit:
                break
        return out[:limit]

    def count(self, user_id: str | None = None, memory_types: Sequence[str] = ("episodic", "semantic")) -> int:
        """How many current memories of these types the user sees (their own and shared ones)."""
        return len(self.list(user_id, memory_types, limit=10**9))

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
                cur = self.get(getattr(cur, link), user_id, shared=shared)
                if cur is None or cur.user_id != start.user_id:
                    break
                seen.add(cur.id)
                chain.insert(0 if link == "supersedes" else len(chain), cur)
        return chain

    remember = dedup.remember  # the agent's write path: hash -> vectors -> decision -> apply (memory/dedup.py)
    revise = dedup.revise  # a new version of a memory named by id, the old one kept as history

    def forget_user(self, user_id: str) -> int:
        """Remove everything memorykit stored for this user in exactly this namespace (shared knowledge
        stays), without scanning the keyspace; returns keys deleted."""
        return forget_user(self.redis, self.namespace, user_id, embedder=self.embedder)

    def drop(self) -> None:
        """Drop the text index and every memory document, vector set, registry, ledger and access set of this
        namespace (a scan: for clean-up, never for one user)."""
        if self.index is not None:
            self.index.delete(drop=False)
        for structure in ("memory", "memvec", "memids", "memhash", "memaccess"):
            delete_keys(self.redis, self.redis.scan_iter(match=key(self.namespace, structure) + ":*", count=1000))
