"""What the agent stored but has not remembered yet, kept in Redis beside the thread, so a crash loses nothing.

The background steps (recall index, extraction, long-term and working memory) run in the process that served
the turn. If that process dies with them queued (a deploy, an out-of-memory kill), or a step fails (a model
outage), the messages are stored but their memory is never written. So every stored message also gets an entry
in its user's backlog, a sorted set written in the same transaction as the message: member ``[thread, message
id]``, score the time after which anyone may remember it (a lease, on Redis's clock, so hosts whose clocks
differ agree). The turn's background job removes its entries when its steps succeed. Entries still there when
their lease passes belong to a process that died or a step that failed: the user's next turn, in any process,
claims them (a script moves their lease on, so one claimer wins) and runs the same steps again, and
``MemoryAgent.recover`` does it for users who do not come back. Each claim after the first doubles the lease (an
outage of hours is waited out) and an entry is claimed at most ``MAX_TRIES`` times, then dropped with a warning.

Work is done at least once: a job still queued past its lease in a live process may run twice. Long-term memory
absorbs a repeat (the same fact is a duplicate, a back-dated one goes into its chain at its time; a recall vector
is written under its message's id). Working memory cannot: it keeps the latest word, and a recovered message may
be older than what it has read since (in any thread, in any process), so a recovery leaves working memory alone;
what the message said reaches the profile through long-term memory, not by overwriting newer words. The way
Redis Agent Memory Server keeps its background tasks in Redis, and LangGraph's checkpointers keep pending writes
next to the thread.
"""
from __future__ import annotations

import json
from typing import Iterable, Iterator
from urllib.parse import unquote

import redis

from ..errors import ValidationError
from ..keys import backlog_key
from ..messages import Message

MAX_TRIES = 5  # claims of one entry after its own job; with leases doubling, ~32 leases in all (2.7 h at 300 s)
KEEP_SECONDS = 7 * 86_400  # a backlog nobody claims from expires a week after its last write

_NOW = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) + tonumber(t[2]) / 1e6\n"
_ADD = _NOW + """
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
"""
_CLAIM = _NOW + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local taken, dropped = {}, {}
for _, m in ipairs(due) do
  local tries = redis.call('HINCRBY', KEYS[2], m, 1)
  if tries > tonumber(ARGV[2]) then
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
    table.insert(dropped, m)
  else
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]) * 2 ^ (tries - 1), m)
    table.insert(taken, m)
  end
end
if #due > 0 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
return {taken, dropped}
"""
_DONE = _NOW + """
for i = 1, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if redis.call('EXISTS', KEYS[1]) == 0 then  -- nothing waits: no claim counts are left behind
  redis.call('DEL', KEYS[2])
  return 0
end
return #redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
"""


def _member(thread_id: str, message_id: str) -> str:
    return json.dumps([thread_id, message_id], ensure_ascii=False)


class Backlog:
    """One namespace's backlogs. ``lease``: seconds a stored message is left to the process that stored it."""

    def __init__(self, r: redis.Redis, namespace: str, lease: float = 300.0):
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not lease > 0:
            raise ValidationError(f"lease must be a positive number of seconds, got {lease!r}")
        self.r, self.namespace, self.lease = r, namespace, float(lease)
        self._claim, self._done = r.register_script(_CLAIM), r.register_script(_DONE)

    def keys(self, user_id: str) -> list[str]:
        """The user's entries and their claim counts."""
        key = backlog_key(self.namespace, user_id)
        return [key, f"{key}:tries"]

    def add(self, pipe, user_id: str, thread_id: str, messages: Iterable[Message]) -> None:
        """Queue entries for ``messages`` on ``pipe``: the transaction that appends them to the thread."""
        members = [_member(thread_id, m.id) for m in messages]
        if members:  # EVAL (not a registered script): it works in a cluster's pipeline too
            pipe.execute_command("EVAL", _ADD, 1, backlog_key(self.namespace, user_id), self.lease, KEEP_SECONDS,
                                 *members)

    def done(self, user_id: str, thread_id: str, message_ids: Iterable[str]) -> bool:
        """Their memory is written (or will never be): remove their entries. Returns :meth:`due`, in the same round
        trip."""
        members = [_member(thread_id, i) for i in message_ids]
        return bool(self._done(keys=self.keys(user_id), args=members))

    def due(self, user_id: str) -> bool:
        """Some entry's lease has passed (one cheap call)."""
        return self.done(user_id, "", ())

    def claim(self, user_id: str, limit: int = 200) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Take up to ``limit`` entries whose lease has passed (each gets a new lease, doubled after the first
        claim; one claimer wins): ``({thread: message ids}, {thread: ids dropped after MAX_TRIES claims})``."""
        taken, dropped = self._claim(keys=self.keys(user_id), args=[self.lease, MAX_TRIES, limit, KEEP_SECONDS])
        return _by_thread(taken), _by_thread(dropped)

    def users(self) -> Iterator[str]:
        """Users with a backlog in this namespace (a SCAN over the keyspace: for a sweeper, not for a turn)."""
        prefix = f"{self.namespace}:backlog:{{"
        for raw in self.r.scan_iter(match=f"{self.namespace}:backlog:*", count=1000):
            name = raw.decode() if isinstance(raw, bytes) else raw
            if name.startswith(prefix) and name.endswith("}"):
                yield unquote(name[len(prefix):-1])


def stored(history, ids: list[str]) -> list[Message]:
    """The messages of ``ids`` still in the thread, in its order (its tail first: they are usually the last)."""
    wanted = set(ids)
    found = [m for m in history.messages(last_n=len(ids) + 50) if m.id in wanted]
    if len(found) < len(wanted):
        found = [m for m in history.messages() if m.id in wanted]
    return found


def _by_thread(members) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for raw in members:
        thread_id, message_id = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        found.setdefault(thread_id, []).append(message_id)
    return found
