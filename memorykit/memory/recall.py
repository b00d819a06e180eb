"""Message recall: find an old message by meaning, across a user's threads, never another user's.

Each user and assistant message with text is a HASH ``ns:msgvec:{user}:{thread}:{id}`` (its vector as float32
bytes: 2.4 KB a message in Redis 8, where a JSON document took 14 KB); the histories
of :meth:`MessageIndex.history` index their appends and unindex their deletions (a summary deletes nothing).
A thread's vector keys are listed in ``ns:thread:{user}:{thread}:vectors``: they and the set share one expiry, never
before the thread's and at most a quarter of its TTL after it (moved only when the thread's would pass it, so an
append does not touch every vector); a search drops hits whose thread is gone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence
from urllib.parse import unquote

import logging

import redis
from redisvl.query import CountQuery
from redisvl.query.filter import FilterExpression, Num, Tag

from ..errors import ValidationError
from ..keys import check_id, check_namespace, registry_key, user_key
from ..messages import Message
from .index import delete_keys, ensure_index, nearest, owner_filter, owner_tag, vector_field
from .vectors import blob
from .short_term import VECTOR_SLACK, ChatHistory

_RETURN = ["message_id", "thread_id", "role", "text", "name", "created_at"]
log = logging.getLogger(__name__)

# Adopt new vector keys into the thread's set, in one step. ARGV[1]: VECTOR_SLACK; then key, message id, key, id...
# A key is adopted only if its message is still in the thread (looked for from the newest end, where a message
# being indexed usually is); one that is gone (the thread expired, was cleared, or the message deleted before
# it was indexed, perhaps by another process) is deleted: a cleared message never becomes recallable again.
# The set and all its keys share one expiry, never before the thread's (ChatHistory's _TOUCH keeps it so): a new
# key takes the set's; a new set (or one behind the thread's, after a TTL change) takes the thread's plus the slack.
_ADOPT = """
local n, adopted, pttl = redis.call('LLEN', KEYS[1]), 0, redis.call('PTTL', KEYS[1])
if n == 0 then  -- the thread is gone: nothing is adopted, and vectors left from it keep their expiry
  for i = 2, #ARGV, 2 do redis.call('DEL', ARGV[i]) end
  return 0
end
local left, keep = redis.call('PTTL', KEYS[2]), -1
if pttl >= 0 then keep = (left >= pttl) and left or pttl + math.ceil(pttl * tonumber(ARGV[1])) end
local function hold(k) if keep > 0 then redis.call('PEXPIRE', k, keep) else redis.call('PERSIST', k) end end
local function present(id)
  local needle, stop = '"id":"' .. id .. '"', -1
  while -stop - 1 < n do
    local chunk = redis.call('LRANGE', KEYS[1], stop - 63, stop)
    for i = #chunk, 1, -1 do if string.find(chunk[i], needle, 1, true) then return true end end
    stop = stop - 64
  end
  return false
end
if left ~= -2 and left ~= keep then  -- the set's expiry moves (rare): its keys move with it
  for _, k in ipairs(redis.call('SMEMBERS', KEYS[2])) do hold(k) end
end
for i = 2, #ARGV, 2 do
  if present(ARGV[i + 1]) then
    redis.call('SADD', KEYS[2], ARGV[i])
    hold(ARGV[i])
    adopted = adopted + 1
  else
    redis.call('DEL', ARGV[i])
  end
end
if adopted > 0 then
  redis.call('SADD', KEYS[3], KEYS[2])  -- the user's key registry: forget_user finds the set without a scan
end
if redis.call('EXISTS', KEYS[2]) == 1 then hold(KEYS[2]) end
return adopted
"""


@dataclass
class RecalledMessage:
    """A past message found by meaning: the message, its thread and its cosine distance to the query."""
    message: Message
    thread_id: str
    distance: float

    def __repr__(self) -> str:
        m = self.message
        return f"RecalledMessage({self.distance:.3f}, {self.thread_id!r}, {m.role}: {m.content[:50]!r})"


class MessageIndex:
    """Embeds stored messages and searches them, scoped to one user (optionally one thread)."""

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit"):
        self.redis, self.embedder, self.namespace = redis_client, embedder, check_namespace(namespace)
        self.schema = {
            "index": {"name": f"{namespace}_messages", "prefix": f"{namespace}:msgvec", "storage_type": "hash"},
            "fields": [{"name": "text", "type": "text"},
                       {"name": "message_id", "type": "tag", "attrs": {"case_sensitive": True}},
                       *({"name": f, "type": "tag", "attrs": {"case_sensitive": True}}  # ids encoded: owner_tag
                         for f in ("user_id", "thread_id")),
                       {"name": "role", "type": "tag"}, {"name": "created_at", "type": "numeric"},
                       vector_field(embedder.dims)],
        }
        self.index = ensure_index(redis_client, self.schema)
        self._adopt = redis_client.register_script(_ADOPT)

    def __repr__(self) -> str:
        return f"MessageIndex({self.schema['index']['name']})"

    def key(self, user_id: str, thread_id: str, message_id: str) -> str:
        return user_key(self.namespace, "msgvec", user_id, thread_id, message_id)

    def thread_key(self, user_id: str, thread_id: str) -> str:
        return user_key(self.namespace, "thread", user_id, thread_id)

    def add(self, user_id: str, thread_id: str, messages: Sequence[Message]) -> int:
        """Embed and index the recallable messages of a stored thread; returns how many were indexed (a message
        no longer in the thread, or in a thread that is gone, is not kept for recall)."""
        check_id(user_id, "user_id")
        check_id(thread_id, "thread_id")
        todo = [m for m in messages if m.role in ("user", "assistant") and m.content.strip()]  # no tool calls
        if todo:
            vectors = self.embedder.embed_many([m.content for m in todo])
            docs = [{"message_id": m.id, "user_id": owner_tag(user_id), "thread_id": owner_tag(thread_id),
                     "role": m.role, "text": m.content, "name": m.name or "", "created_at": float(m.created_at),
                     "embedding": blob(v)} for m, v in zip(todo, vectors)]
            keys = [self.key(user_id, thread_id, m.id) for m in todo]
            self.index.load(docs, keys=keys)
            thread = self.thread_key(user_id, thread_id)
            adopted = self._adopt(keys=[thread, thread + ":vectors", registry_key(self.namespace, user_id)],
                                  args=[VECTOR_SLACK, *(x for k, m in zip(keys, todo) for x in (k, m.id))])
            if adopted < len(todo):
                log.info("%d message(s) of %s are gone; not indexed for recall", len(todo) - adopted, thread)
            return adopted
        return 0

    def remove(self, user_id: str, thread_id: str, message_ids: Iterable[str]) -> int:
        """Delete these messages' vectors; returns how many existed."""
        keys = [self.key(user_id, thread_id, mid) for mid in message_ids]
        if keys:
            self.redis.srem(self.thread_key(user_id, thread_id) + ":vectors", *keys)
        return delete_keys(self.redis, keys)

    def history(self, user_id: str, thread_id: str, ttl: int | None = None, *,
                index_appends: bool = True) -> ChatHistory:
        """The thread as a ChatHistory wired to this index: appends are indexed (unless ``index_appends``
        is False, for callers that index later), deletions remove their vectors, ``search_messages`` works."""
        return ChatHistory(self.redis, user_id, thread_id, ttl=ttl, namespace=self.namespace,
                           index=self, index_appends=index_appends)

    def _scope(self, user_id: str, thread_id: str | None = None, roles: Sequence[str] | None = None,
               since: float | None = None, until: float | None = None) -> FilterExpression:
        """This user's (or thread's) messages; RedisVL turns a None role list or bound into no condition."""
        expr = owner_filter(user_id) & (Tag("role") == roles)
        expr = expr & (Num("created_at") >= since) & (Num("created_at") <= until)
        return expr if thread_id is None else expr & owner_filter(thread_id, "thread_id")

    @staticmethod
    def _recalled(row: dict[str, Any]) -> RecalledMessage:
        msg = Message(role=row["role"], content=row["text"], name=row.get("name") or None,
                      created_at=float(row["created_at"]), id=row["message_id"])
        return RecalledMessage(msg, unquote(row["thread_id"]), float(row.get("vector_distance", 0.0)))

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
        rows = nearest(self.index, vector, expr, k + len(exclude), distance_threshold, _RETURN)
        hits = [hit for hit in map(self._recalled, rows) if hit.message.id not in exclude][:k]
        return self._live(user_id, hits)

    def _live(self, user_id: str, hits: list[RecalledMessage]) -> list[RecalledMessage]:
        """The hits whose thread still exists (verified on read: an expired thread's text is never returned)."""
        threads = sorted({h.thread_id for h in hits})
        if not threads:
            return hits
        pipe = self.redis.pipeline(transaction=False)
        for t in threads:
            pipe.exists(self.thread_key(user_id, t))
        alive = {t for t, ok in zip(threads, pipe.execute()) if ok}
        return [h for h in hits if h.thread_id in alive]

    def count(self, user_id: str, thread_id: str | None = None) -> int:
        """How many messages of this user (or thread) have a vector."""
        return int(self.index.query(CountQuery(filter_expression=self._scope(user_id, thread_id))))
