"""Message recall: find an old message by meaning, across a user's threads, never another user's.

Every user and assistant message with text is a JSON document ``ns:msgvec:{user}:{thread}:{id}``
in the index ``ns_messages``. :meth:`MessageIndex.history` returns a ``ChatHistory`` whose
appends are indexed and whose deliberate deletions remove the vectors too; summaries delete
nothing, so recall still finds what a summary folded in.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import redis
from redisvl.query import CountQuery, FilterQuery
from redisvl.query.filter import FilterExpression, Num, Tag

from urllib.parse import unquote

from ..errors import ValidationError
from ..keys import check_id, check_namespace, user_key
from ..messages import Message
from .index import ensure_index, nearest, owner_field, owner_filter, owner_tag, vector_field
from .short_term import ChatHistory, head_length

log = logging.getLogger(__name__)

INDEXED_ROLES = ("user", "assistant")
STRATEGIES = ("prepend", "append", "interleave")
RECALL_HEADER = "Messages recalled from earlier conversations (oldest first):"
_RETURN = ["message_id", "thread_id", "role", "text", "name", "created_at"]


def message_schema(namespace: str, dims: int) -> dict[str, Any]:
    """The RedisVL schema of the message index ``{namespace}_messages``."""
    return {
        "index": {"name": f"{namespace}_messages", "prefix": f"{namespace}:msgvec",
                  "storage_type": "json"},
        "fields": [
            {"name": "text", "type": "text"},
            {"name": "message_id", "type": "tag", "attrs": {"case_sensitive": True}},
            owner_field("user_id"),      # $.user_tag: the encoded owner
            owner_field("thread_id"),    # $.thread_tag
            {"name": "role", "type": "tag"},
            {"name": "created_at", "type": "numeric"},
            vector_field(dims),
        ],
    }


@dataclass
class RecalledMessage:
    """A past message found by meaning: the message, its thread and its cosine distance to the query."""

    message: Message
    thread_id: str
    distance: float

    def __repr__(self) -> str:
        return f"RecalledMessage({self.distance:.3f}, {self.thread_id!r}, {self.message.role}: {self.message.content[:50]!r})"


def indexable(message: Message) -> bool:
    """Only user and assistant messages with text are worth recalling (not tool calls or system prompts)."""
    return message.role in INDEXED_ROLES and bool((message.content or "").strip())


class IndexedHistory(ChatHistory):
    """A ChatHistory wired to a :class:`MessageIndex`: appends are indexed (unless ``index_appends``
    is False, for callers that index later), deletions remove the vectors, and it can search."""

    def __init__(self, r: redis.Redis, user_id: str, thread_id: str, ttl: int | None = 3600,
                 namespace: str = "memorykit", *, index: "MessageIndex", index_appends: bool = True):
        super().__init__(r, user_id, thread_id, ttl=ttl, namespace=namespace)
        self.index = index
        self.index_appends = index_appends

    def append(self, message) -> list[Message]:
        msgs = super().append(message)
        if self.index_appends and msgs:
            try:
                self.index.add(self.user_id, self.thread_id, msgs)
            except Exception:
                log.exception("messages stored in %s but not indexed for recall", self.key)
        return msgs

    def _unindex(self, msgs: Sequence[Message]) -> list[Message]:
        if msgs:
            self.index.remove(self.user_id, self.thread_id, [m.id for m in msgs])
        return list(msgs)

    def clear_messages(self) -> list[Message]:
        return self._unindex(super().clear_messages())

    def delete_first(self, n: int) -> list[Message]:
        return self._unindex(super().delete_first(n))

    def delete_where(self, predicate: Callable[[Message], bool]) -> list[Message]:
        return self._unindex(super().delete_where(predicate))

    def search_messages(self, query: str, k: int = 5, thread_id: str | None = None,
                        distance_threshold: float | None = None, **kwargs) -> list[RecalledMessage]:
        """Semantically search this user's past messages, in every thread (or ``thread_id``)."""
        return self.index.search(query, user_id=self.user_id, thread_id=thread_id, k=k,
                                 distance_threshold=distance_threshold, **kwargs)


class MessageIndex:
    """Embeds stored messages and searches them, scoped to one user (optionally one thread).
    ``max_messages_per_thread``: after each ``add``, older messages leave the list and the index together."""

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit", *,
                 max_messages_per_thread: int | None = None):
        if max_messages_per_thread is not None and max_messages_per_thread < 2:
            raise ValidationError("max_messages_per_thread must be at least 2 (or None for no limit)")
        self.redis = redis_client
        self.embedder = embedder
        self.namespace = check_namespace(namespace)
        self.max_messages_per_thread = max_messages_per_thread
        self.schema = message_schema(namespace, embedder.dims)
        self.index = ensure_index(redis_client, self.schema)

    def __repr__(self) -> str:
        return f"MessageIndex({self.schema['index']['name']}, limit={self.max_messages_per_thread})"

    def key(self, user_id: str, thread_id: str, message_id: str) -> str:
        return user_key(self.namespace, "msgvec", user_id, thread_id, message_id)

    def _thread_pattern(self, user_id: str, thread_id: str) -> str:
        return user_key(self.namespace, "msgvec", check_id(user_id, "user_id"), check_id(thread_id, "thread_id")) + ":*"

    def add(self, user_id: str, thread_id: str, messages: Sequence[Message]) -> int:
        """Embed and index the recallable messages; returns how many were indexed."""
        check_id(user_id, "user_id")
        check_id(thread_id, "thread_id")
        todo = [m for m in messages if indexable(m)]
        if todo:
            vectors = self.embedder.embed_many([m.content for m in todo])
            docs = [{"message_id": m.id, "user_id": user_id, "thread_id": thread_id, "role": m.role,
                     "user_tag": owner_tag(user_id), "thread_tag": owner_tag(thread_id),
                     "text": m.content, "name": m.name or "", "created_at": float(m.created_at),
                     "embedding": v} for m, v in zip(todo, vectors)]
            self.index.load(docs, keys=[self.key(user_id, thread_id, m.id) for m in todo])
        if self.max_messages_per_thread:
            self.prune(user_id, thread_id, self.max_messages_per_thread)
        return len(todo)

    def remove(self, user_id: str, thread_id: str, message_ids: Iterable[str]) -> int:
        """Delete these messages' vectors; returns how many existed."""
        keys = [self.key(user_id, thread_id, mid) for mid in message_ids]
        return int(self.redis.delete(*keys)) if keys else 0

    def history(self, user_id: str, thread_id: str, ttl: int | None = None, *,
                index_appends: bool = True) -> IndexedHistory:
        """The thread as an IndexedHistory: appends indexed here, deletions there remove vectors here."""
        return IndexedHistory(self.redis, user_id, thread_id, ttl=ttl, namespace=self.namespace,
                              index=self, index_appends=index_appends)

    def prune(self, user_id: str, thread_id: str, keep_last: int) -> list[Message]:
        """Delete the thread's oldest messages beyond ``keep_last`` from list and index (through
        ``delete_first``: tool-call boundaries respected, atomic against concurrent appends)."""
        if keep_last < 0:
            raise ValidationError("keep_last must be >= 0")
        h = self.history(user_id, thread_id)
        view = h.view()
        excess = view.start + len(view.raws) - len(view.head) - keep_last
        return h.delete_first(excess) if excess > 0 else []

    def vector_ids(self, user_id: str, thread_id: str) -> set[str]:
        """Ids of the messages of a thread that have a vector."""
        return {k.rsplit(":", 1)[1] for k in self.redis.scan_iter(match=self._thread_pattern(user_id, thread_id),
                                                                  count=1000)}

    def check(self, user_id: str, thread_id: str) -> dict[str, set[str]]:
        """List vs index: ``orphans`` (vectors whose message is gone), ``missing`` (messages not indexed)."""
        stored = {m.id: m for m in self.history(user_id, thread_id).messages()}
        have = self.vector_ids(user_id, thread_id)
        want = {mid for mid, m in stored.items() if indexable(m)}
        return {"orphans": have - set(stored), "missing": want - have}

    def sync(self, user_id: str, thread_id: str) -> dict[str, int]:
        """Repair a thread's index (e.g. after the list expired by TTL): drop orphans, index missing."""
        found = self.check(user_id, thread_id)
        removed = self.remove(user_id, thread_id, found["orphans"])
        missing = [m for m in self.history(user_id, thread_id).messages() if m.id in found["missing"]]
        added = self.add(user_id, thread_id, missing) if missing else 0
        return {"removed": removed, "added": added}

    def _scope(self, user_id: str, thread_id: str | None, roles: Sequence[str] | None,
               since: float | None, until: float | None) -> FilterExpression:
        expr = owner_filter(user_id)
        if thread_id is not None:
            expr = expr & owner_filter(thread_id, "thread_id")
        if roles:
            expr = expr & (Tag("role") == list(roles))
        if since is not None:
            expr = expr & (Num("created_at") >= since)
        if until is not None:
            expr = expr & (Num("created_at") <= until)
        return expr

    @staticmethod
    def _row(row: dict[str, Any]) -> tuple[Message, str]:
        msg = Message(role=row["role"], content=row["text"], name=row.get("name") or None,
                      created_at=float(row["created_at"]), id=row["message_id"])
        return msg, unquote(row["thread_id"])

    def search(self, query: str, user_id: str, thread_id: str | None = None, k: int = 5,
               distance_threshold: float | None = None, *, roles: Sequence[str] | None = None,
               exclude_ids: Iterable[str] = (), since: float | None = None,
               until: float | None = None, vector: Sequence[float] | None = None) -> list[RecalledMessage]:
        """The user's (or thread's) past messages closest in meaning to ``query``, closest first;
        ``exclude_ids`` drops messages you already have (the window)."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("search needs a non-empty query")
        if k <= 0:
            return []
        exclude = set(exclude_ids)
        expr = self._scope(user_id, thread_id, roles, since, until)
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        out = []
        for row in nearest(self.index, vector, expr, k + len(exclude), distance_threshold, _RETURN):
            msg, thread = self._row(row)
            if msg.id not in exclude:
                out.append(RecalledMessage(msg, thread, float(row["vector_distance"])))
        return out[:k]

    def count(self, user_id: str, thread_id: str | None = None) -> int:
        """How many messages of this user (or thread) have a vector."""
        return int(self.index.query(CountQuery(filter_expression=self._scope(user_id, thread_id, None, None, None))))

    def messages(self, user_id: str, thread_id: str | None = None, limit: int = 1000) -> list[RecalledMessage]:
        """Indexed messages of a user (or thread), oldest first, without a query."""
        q = FilterQuery(filter_expression=self._scope(user_id, thread_id, None, None, None),
                        return_fields=_RETURN, num_results=limit)
        q.sort_by("created_at", asc=True)
        return [RecalledMessage(*self._row(row), distance=0.0) for row in self.index.query(q)]

    def drop(self) -> None:
        """Drop the index and every message vector of this namespace."""
        self.index.delete(drop=True)


def _as_message(item: RecalledMessage | Message) -> Message:
    return item.message if isinstance(item, RecalledMessage) else item


def _fingerprint(m: Message) -> tuple[str, str]:
    return m.role, " ".join((m.content or "").split()).casefold()


def merge_recalled(window: Sequence[Message], recalled: Sequence[RecalledMessage | Message],
                   strategy: str = "prepend") -> list[Message]:
    """The recent window plus recalled messages, none repeated (same id or same role + text):
    before it (``prepend``), after it (``append``) or by time (``interleave``); system head first."""
    if strategy not in STRATEGIES:
        raise ValidationError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    window = list(window)
    head = head_length(window)
    system, recent = window[:head], window[head:]
    seen_ids = {m.id for m in window}
    seen_text = {_fingerprint(m) for m in recent}
    extra: list[Message] = []
    for item in recalled:
        m = _as_message(item)
        if m.id in seen_ids or _fingerprint(m) in seen_text:
            continue
        seen_ids.add(m.id)
        seen_text.add(_fingerprint(m))
        extra.append(m)
    extra.sort(key=lambda m: m.created_at)
    if strategy == "prepend":
        body = extra + recent
    elif strategy == "append":
        body = recent + extra
    else:
        body = sorted(recent + extra, key=lambda m: m.created_at)  # stable: ties keep window order
    return system + body


def recall_block(recalled: Sequence[RecalledMessage | Message], header: str = RECALL_HEADER) -> Message | None:
    """Recalled messages as one system message (dated lines), for prompts that keep roles strict."""
    items = sorted((_as_message(r) for r in recalled), key=lambda m: m.created_at)
    if not items:
        return None
    lines = [f"- {time.strftime('%Y-%m-%d', time.gmtime(m.created_at))} {m.role}: {m.content.strip()}"
             for m in items]
    return Message(role="system", content=header + "\n" + "\n".join(lines))
