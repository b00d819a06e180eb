"""What the agent stored but has not remembered yet, kept in Redis beside the thread, so a crash loses nothing.

The background steps (recall index, extraction, long-term and working memory) run in the process that served
the turn. If that process dies with them queued (a deploy, an out-of-memory kill), or a step fails (a model
outage), the messages are stored but their memory is never written. So every stored message also gets an entry
in its user's backlog, a sorted set written in the same transaction as the message: member ``[thread, message
id]``, score the time after which anyone may remember it (a lease). The turn's background job removes its
entries when its steps succeed. Entries still there when their lease passes belong to a process that died or a
step that failed: the user's next turn, in any process, claims them (a script moves their lease on, so one
claimer wins) and runs the same steps again, and ``MemoryAgent.recover`` does it for users who do not come back.
Each entry is claimed at most ``MAX_TRIES`` times, then dropped with a warning. Work is done at least once: a
job still queued past its lease in a live process may run twice, which deduplication absorbs (the same fact is
an exact duplicate; a recall vector is written under its message's id). The way Redis Agent Memory Server keeps
its background tasks in Redis, and LangGraph's checkpointers keep pending writes next to the thread.
"""
from __future__ import annotations

import json
import time
from typing import Iterable, Iterator
from urllib.parse import unquote

import redis

from ..keys import backlog_key
from ..messages import Message

MAX_TRIES = 3  # claims of one entry after its first job (a crash, then failures) before it is dropped
KEEP_SECONDS = 7 * 86_400  # a backlog nobody claims from expires a week after its last write

_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[4]))
local taken, dropped = {}, {}
for _, m in ipairs(due) do
  if redis.call('HINCRBY', KEYS[2], m, 1) > tonumber(ARGV[3]) then
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
    table.insert(dropped, m)
  else
    redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[1]) + tonumber(ARGV[2]), m)
    table.insert(taken, m)
  end
end
if #due > 0 then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[5])) end
return {taken, dropped}
"""


def _member(thread_id: str, message_id: str) -> str:
    return json.dumps([thread_id, message_id], ensure_ascii=False)


class Backlog:
    """One namespace's backlogs. ``lease``: seconds a stored message is left to the process that stored it."""

    def __init__(self, r: redis.Redis, namespace: str, lease: float = 300.0):
        self.r, self.namespace, self.lease = r, namespace, lease
        self._claim = r.register_script(_CLAIM)

    def add(self, pipe, user_id: str, thread_id: str, messages: Iterable[Message]) -> None:
        """Queue entries for ``messages`` on ``pipe``: the transaction that appends them to the thread."""
        entries = {_member(thread_id, m.id): time.time() + self.lease for m in messages}
        if entries:
            key = backlog_key(self.namespace, user_id)
            pipe.zadd(key, entries)
            pipe.expire(key, KEEP_SECONDS)  # its claim counts get theirs when a claim writes them

    def done(self, user_id: str, thread_id: str, message_ids: Iterable[str]) -> bool:
        """Their memory is written (or will never be): remove their entries. Returns :meth:`due` (same round trip)."""
        key, members = backlog_key(self.namespace, user_id), [_member(thread_id, i) for i in message_ids]
        with self.r.pipeline(transaction=True) as pipe:
            if members:
                pipe.zrem(key, *members)
                pipe.hdel(f"{key}:tries", *members)
            pipe.zrangebyscore(key, "-inf", time.time(), start=0, num=1)
            return bool(pipe.execute()[-1])

    def due(self, user_id: str) -> bool:
        """Some entry's lease has passed (one cheap read)."""
        return self.done(user_id, "", ())

    def claim(self, user_id: str, limit: int = 200) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Take the entries whose lease has passed (each gets a new lease; one claimer wins): ``({thread: message
        ids}, {thread: ids dropped after MAX_TRIES claims})``, oldest first."""
        key = backlog_key(self.namespace, user_id)
        taken, dropped = self._claim(keys=[key, f"{key}:tries"], args=[time.time(), self.lease, MAX_TRIES, limit,
                                                                         KEEP_SECONDS])
        return _by_thread(taken), _by_thread(dropped)

    def users(self) -> Iterator[str]:
        """Users with a backlog in this namespace (a SCAN over the keyspace: for a sweeper, not for a turn)."""
        prefix = f"{self.namespace}:backlog:{{"
        for raw in self.r.scan_iter(match=f"{self.namespace}:backlog:*", count=1000):
            name = raw.decode() if isinstance(raw, bytes) else raw
            if name.startswith(prefix) and name.endswith("}"):
                yield unquote(name[len(prefix):-1])


def _by_thread(members) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for raw in members:
        thread_id, message_id = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        found.setdefault(thread_id, []).append(message_id)
    return found
