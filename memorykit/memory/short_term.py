"""Short-term memory: a thread is a Redis LIST of JSON messages (one RPUSH per append, a sliding TTL).

A summary is a *view* beside the complete list (text + a cursor past the entries it covers), so summarizing
loses nothing; deleting is a deliberate script that removes entries by value and moves the cursor.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Callable, Iterable, Sequence

import redis

from ..errors import MemoryKitError, ValidationError
from ..keys import check_id, check_namespace, check_text, registry_key, user_key
from ..messages import Message, as_message, count_tokens

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 16_000_000
SUMMARY_HEADER = "Summary of the earlier conversation:"
CORRUPT = "__corrupt__"


def head_length(messages: Sequence[Message]) -> int:
    """How many system messages open the list (the system prompt, a summary): always kept."""
    return next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))


def _call_owner(messages: Sequence[Message]) -> list[int | None]:
    """For each tool message, the index of the assistant message that requested it (None if orphan)."""
    owner: dict[str, int] = {}
    out: list[int | None] = []
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            owner |= {str(c["id"]): i for c in m.tool_calls if isinstance(c, dict) and c.get("id")}
        out.append(owner.get(str(m.tool_call_id)) if m.role == "tool" else None)
    return out


def valid_cuts(messages: Sequence[Message]) -> list[int]:
    """Indices where a kept window may start: a user message that no later tool result reaches across."""
    owners = _call_owner(messages)
    cuts, earliest_owner = [], len(messages)
    for i in range(len(messages) - 1, -1, -1):
        if owners[i] is not None:
            earliest_owner = min(earliest_owner, owners[i])
        if messages[i].role == "user" and earliest_owner >= i:
            cuts.append(i)
    return cuts[::-1]


def drop_orphans(messages: Sequence[Message]) -> list[Message]:
    """Remove tool results whose assistant tool call is not in the list."""
    return [m for m, o in zip(messages, _call_owner(messages)) if m.role != "tool" or o is not None]


def _window(messages: Sequence[Message | dict], fits: Callable[[int], bool]) -> list[Message]:
    """The system head + the rest from the first valid cut ``c`` where ``fits(c)``: after the head the
    window starts with a user message, and no tool result is separated from the call that asked for it."""
    msgs = [as_message(m) for m in messages]
    h = head_length(msgs)
    cut = next((c for c in valid_cuts(msgs) if c >= h and fits(c)), len(msgs))
    return msgs[:h] + drop_orphans(msgs[cut:])


def fix_boundaries(messages: Sequence[Message | dict], start: int = 0) -> list[Message]:
    """The system head + the rest from the first valid cut at or after ``start``."""
    return _window(messages, lambda c: c >= start)


def trim_last(messages: Sequence[Message | dict], n: int) -> list[Message]:
    """The system head + at most the last ``n`` other messages, starting on a valid boundary (if any).
    ``n`` is a hard limit: when the last turn alone (a question and its tool calls) is longer, only the head is
    left, so a prompt built mid tool loop needs an ``n`` that holds a whole turn."""
    if n < 0:
        raise ValidationError(f"n must be >= 0, got {n}")
    return fix_boundaries(messages, len(messages) - n)


def trim_to_tokens(messages: Sequence[Message | dict], max_tokens: int) -> list[Message]:
    """The system head + the longest valid recent window whose tokens (``count_tokens``) fit ``max_tokens``;
    only the head when the last turn alone does not fit (see :func:`trim_last`)."""
    if max_tokens <= 0:
        raise ValidationError(f"max_tokens must be > 0, got {max_tokens}")
    msgs = [as_message(m) for m in messages]
    # Tokens of each message (an orphaned tool result is dropped, so free) and of every suffix msgs[c:]:
    # a valid cut never separates a result from its call, so one pass over the list prices every window.
    sizes = [0 if m.role == "tool" and o is None else count_tokens([m]) for m, o in zip(msgs, _call_owner(msgs))]
    head, suffix = sum(sizes[:head_length(msgs)]), [*accumulate(reversed(sizes))][::-1] + [0]
    return _window(msgs, lambda c: head + suffix[c] <= max_tokens)


def check_message(message: Message | dict) -> Message:
    """A message fit to store: known role, non-blank content (or tool calls), bounded size."""
    m = as_message(message)
    if not m.content.strip() and not (m.role == "assistant" and m.tool_calls):
        raise ValidationError(f"a {m.role} message must have non-empty content (got {m.content!r}); nothing was stored")
    if len(m.content) > MAX_MESSAGE_CHARS:
        raise ValidationError(f"message is {len(m.content):,} characters; the limit is {MAX_MESSAGE_CHARS:,}. "
                              "Store large documents elsewhere and keep a reference in the thread.")
    check_text(m.content, f"a {m.role} message")
    if m.role == "tool" and not m.tool_call_id:
        raise ValidationError("a tool message needs the tool_call_id of the call it answers")
    return m


def _decode(raws: Iterable[str], where: str) -> list[Message]:
    """Stored entries as Messages; a corrupt one is logged and kept as an empty placeholder named CORRUPT."""
    out = []
    for raw in raws:
        try:
            out.append(Message.from_json(raw))
        except (ValueError, TypeError, KeyError, MemoryKitError) as exc:
            log.warning("skipping corrupt entry in %s: %s (%d characters)", where, exc, len(raw))
            out.append(Message(role="assistant", content="", name=CORRUPT))
    return out


def readable(messages: Iterable[Message]) -> list[Message]:
    """The messages without the placeholders of corrupt entries."""
    return [m for m in messages if m.name != CORRUPT]


def digest(raws: Sequence[str]) -> str:
    """SHA-1 of entries joined by newlines: what the scripts compare to detect a changed range."""
    return hashlib.sha1("\n".join(raws).encode("utf-8")).hexdigest()


def parse_summary(raw: str | None) -> dict[str, Any] | None:
    """The summary record (JSON: text, facts, cursor, covers, ...); None if there is none or it is unreadable."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    facts = data.get("facts") if isinstance(data.get("facts"), list) else []  # Lua's cjson writes [] as {}
    return {**data, "cursor": int(data.get("cursor") or 0), "covers": int(data.get("covers") or 0), "facts": facts}


# The summary record and its cursor (0 when there is none, or it is unreadable).
_READ_CURSOR = """
local s, rec, cursor = redis.call('GET', KEYS[2]), nil, 0
if s then
  local ok, d = pcall(cjson.decode, s)
  if ok and type(d) == 'table' and tonumber(d.cursor) then rec, cursor = d, tonumber(d.cursor) end
end
"""

# The view in one step: the summary, the start (the cursor, or past the leading system messages), the
# system head, and every entry from the start on. A cursor past the list's end is stale: that summary goes.
_VIEW = _READ_CURSOR + """
local len = redis.call('LLEN', KEYS[1])
if cursor > len then redis.call('DEL', KEYS[2]); s, cursor = false, 0 end
local out, n = {s or '', 0, 0}, 0
while n < (cursor > 0 and cursor or len) do
  local raw = redis.call('LINDEX', KEYS[1], n)
  local ok, m = pcall(cjson.decode, raw)
  if not (ok and type(m) == 'table' and m.role == 'system') then break end
  out[#out + 1] = raw
  n = n + 1
end
out[2], out[3] = math.max(cursor, n), n
local tail = redis.call('LRANGE', KEYS[1], out[2], -1)
for i = 1, #tail do out[#out + 1] = tail[i] end
return out
"""

# Advance the cursor: store a new summary only if the summary is still the one we read and the
# entries it newly covers are still at the same positions. Appends (at the tail) never conflict.
_ADVANCE = """
local current = redis.call('GET', KEYS[2]) or ''
if redis.sha1hex(current) ~= ARGV[1] then return 0 end
local from, to = tonumber(ARGV[2]), tonumber(ARGV[3])
local got = redis.call('LRANGE', KEYS[1], from, to - 1)
if #got ~= to - from or redis.sha1hex(table.concat(got, '\\n')) ~= ARGV[4] then return 0 end
redis.call('SET', KEYS[2], ARGV[5])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
"""

# Remove entries by value; every removed entry before the cursor moves it back by one. If
# ARGV[1] == '1' and a covered entry was removed, the summary is dropped (it may repeat what
# was meant to be forgotten); otherwise it is kept with the moved cursor.
_REMOVE = _READ_CURSOR + """
local covered = 0
for i = 2, #ARGV do
  local pos = redis.call('LPOS', KEYS[1], ARGV[i])
  if pos then
    redis.call('LREM', KEYS[1], 1, ARGV[i])
    if pos < cursor then cursor, covered = cursor - 1, covered + 1 end
  end
end
if rec and covered > 0 then
  if ARGV[1] == '1' then redis.call('DEL', KEYS[2])
  else rec.cursor = cursor; redis.call('SET', KEYS[2], cjson.encode(rec), 'KEEPTTL') end
end
return covered
"""


# Slide the TTL (ARGV[1] seconds; 0: none) of the thread and its summary, and keep its recall vectors (the keys in
# the set KEYS[3]; they and the set share one expiry) alive at least as long. The vectors are touched only when
# their expiry is closer than the thread's new one: then they get a quarter more (VECTOR_SLACK), so a busy thread
# touches its n vectors once per quarter TTL, not on every append (an expired thread's vectors outlive it by at
# most that quarter, and recall drops hits whose thread is gone).
_TOUCH = """
local ttl = tonumber(ARGV[1])
for i = 1, 2 do
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) else redis.call('PERSIST', KEYS[i]) end
end
local left = redis.call('PTTL', KEYS[3])  -- -2: no vectors; -1: kept without a TTL
if left == -2 or (ttl == 0 and left == -1) or (ttl > 0 and left >= ttl * 1000) then return 0 end
local keys = redis.call('SMEMBERS', KEYS[3])
keys[#keys + 1] = KEYS[3]
for i = 1, #keys do
  if ttl > 0 then redis.call('EXPIRE', keys[i], ttl + math.ceil(ttl * tonumber(ARGV[2]))) else redis.call('PERSIST', keys[i]) end
end
return #keys
"""
VECTOR_SLACK = 0.25  # a thread's recall vectors live up to this share of its TTL longer than it (see _TOUCH)

# Remove thread ids (ARGV) from the user's thread list (KEYS[1]) whose thread (KEYS[i + 2]) and recall vectors are
# still gone, and their vectors' set from the user's key registry (KEYS[2]): checked and removed in one step, so a
# thread an append brings back meanwhile stays listed, and vectors outliving their thread stay findable by
# forget_user until a later listing finds them gone too.
_PRUNE = """
local n = 0
for i = 1, #ARGV do
  local vectors = KEYS[i + 2] .. ':vectors'  -- its recall set (it may outlive the thread), in the key registry
  if redis.call('EXISTS', KEYS[i + 2]) == 0 and redis.call('EXISTS', vectors) == 0 then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('SREM', KEYS[2], vectors)
  end
end
return n
"""

# Delete the thread, its summary, its recall vectors (the keys listed in its set) and the set.
_DROP = """
local doomed = redis.call('SMEMBERS', KEYS[3])
for i = 1, #doomed do redis.call('DEL', doomed[i]) end
local raws = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
return raws
"""


@dataclass
class View:
    """A thread read atomically: system head, summary, and the entries from position ``start`` on."""
    head: list[Message]
    summary: dict[str, Any] | None
    summary_raw: str | None
    start: int
    raws: list[str]
    messages: list[Message]

    @property
    def recent(self) -> list[Message]:
        """The readable messages after the cursor (tool results without their call dropped)."""
        return drop_orphans(readable(self.messages))


class ChatHistory:
    """One conversation thread of one user: a complete Redis LIST, a summary view, a sliding TTL. With an
    ``index`` (see ``MessageIndex.history``) appends are indexed for recall and deletions unindexed."""

    def __init__(self, r: redis.Redis, user_id: str, thread_id: str, ttl: int | None = 3600,
                 namespace: str = "memorykit", *, index=None, index_appends: bool = True):
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0):
            raise ValidationError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        self.r = r
        self.user_id = check_id(user_id, "user_id")
        self.thread_id = check_id(thread_id, "thread_id")
        self.namespace = check_namespace(namespace)
        self.ttl, self.index, self.index_appends = ttl, index, index_appends
        self.key = user_key(namespace, "thread", user_id, thread_id)
        self.summary_key = f"{self.key}:summary"
        self.vectors_key = f"{self.key}:vectors"  # the keys of this thread's recall vectors (MessageIndex)
        self.threads_key = user_key(namespace, "user", user_id, "threads")
        self._view, self._advance, self._remove, self._drop, self._prune = map(
            r.register_script, (_VIEW, _ADVANCE, _REMOVE, _DROP, _PRUNE))

    def __repr__(self) -> str:
        return f"ChatHistory(user_id={self.user_id!r}, thread_id={self.thread_id!r}, namespace={self.namespace!r})"

    def append(self, message: Message | dict | Iterable[Message | dict], *,
               also: Callable[[Any, list[Message]], None] | None = None) -> list[Message]:
        """RPUSH one or more messages (all validated first: nothing is stored if one is bad); ``also(pipe,
        messages)`` queues more writes in the same transaction (the agent's backlog of what to remember)."""
        if isinstance(message, (str, bytes)):
            raise ValidationError("append takes a Message (or an OpenAI message dict), not a string: "
                                  "use Message(role='user', content=...)")
        msgs = [check_message(m) for m in ([message] if isinstance(message, (Message, dict)) else message)]
        if not msgs:
            return []
        with self.r.pipeline(transaction=True) as pipe:
            pipe.rpush(self.key, *(m.to_json() for m in msgs))
            self._touch(pipe)
            if also is not None:
                also(pipe, msgs)
            pipe.execute()
        if self.index is not None and self.index_appends:
            try:
                self.index.add(self.user_id, self.thread_id, msgs)
            except Exception:
                log.exception("messages stored in %s but not indexed for recall", self.key)
        return msgs

    def _touch(self, pipe) -> None:
        """Slide the TTL of the thread, its summary and its recall vectors; record activity in the user's thread set."""
        # EVAL (not a registered script): it needs no script cache and works in a cluster's pipeline too
        pipe.execute_command("EVAL", _TOUCH, 3, self.key, self.summary_key, self.vectors_key, self.ttl or 0,
                             VECTOR_SLACK)
        pipe.zadd(self.threads_key, {self.thread_id: time.time()})

    def messages(self, last_n: int | None = None) -> list[Message]:
        """The stored messages, oldest first (only the last ``last_n`` if given); corrupt entries skipped."""
        if last_n is not None and last_n <= 0:
            return []
        return readable(_decode(self.r.lrange(self.key, -last_n if last_n else 0, -1), self.key))

    def __len__(self) -> int:
        """How many entries are stored (a summary never changes this)."""
        return int(self.r.llen(self.key))

    def view(self) -> View:
        """The system head, the summary and the entries after its cursor, read in one script call."""
        out = self._view(keys=[self.key, self.summary_key])
        summary_raw, start, n_head = out[0] or None, int(out[1]), int(out[2])
        head, raws = readable(_decode(out[3:3 + n_head], self.key)), out[3 + n_head:]
        return View(head, parse_summary(summary_raw), summary_raw, start, raws, _decode(raws, self.key))

    def summary_info(self) -> dict[str, Any] | None:
        """The stored summary record: text, facts, cursor, covers (messages folded in), updated_at."""
        return parse_summary(self.r.get(self.summary_key))

    def summary(self) -> str | None:
        """The current summary text, or None if the thread was never summarized."""
        return (self.summary_info() or {}).get("text")

    def prompt_messages(self, system: str | None = None, view: View | None = None) -> list[Message]:
        """What to send a model: system prompt, stored system head, the summary, the messages after it."""
        view = view or self.view()
        out = [Message(role="system", content=system)] if system else []
        text = (view.summary or {}).get("text")
        summary = [Message(role="system", content=f"{SUMMARY_HEADER}\n{text}")] if text else []
        return out + view.head + summary + view.recent

    def advance(self, view: View, cut: int, record: dict[str, Any]) -> bool:
        """Store ``record`` as the summary covering everything before ``view.start + cut``, atomically:
        only if the summary is still ``view``'s and those entries did not move. False: re-read, retry."""
        end = view.start + cut
        args = [digest([view.summary_raw or ""]), view.start, end, digest(view.raws[:cut]),
                json.dumps({**record, "cursor": end}, ensure_ascii=False)]
        return bool(self._advance(keys=[self.key, self.summary_key], args=args))

    def clear(self) -> int:
        """Delete the thread, its summary, its recall vectors and its entry in the user's thread list, in one
        script; returns messages deleted."""
        raws = self._drop(keys=[self.key, self.summary_key, self.vectors_key, self.threads_key], args=[self.thread_id])
        return len(self._deleted(readable(_decode(raws, self.key))))  # vectors from before the set: by id

    def _deleted(self, messages: list[Message]) -> list[Message]:
        """What a deletion removed; their recall vectors go too."""
        if self.index is not None:
            self.index.remove(self.user_id, self.thread_id, [m.id for m in messages])
        return messages

    def delete_first(self, n: int) -> list[Message]:
        """Delete the first ``n`` messages after the system head, up to the next valid boundary; a summary
        that covered them keeps their gist (its cursor moves back)."""
        if n <= 0:
            return []
        raws = self.r.lrange(self.key, 0, -1)
        msgs = _decode(raws, self.key)
        h = head_length(msgs)
        cut = next((c for c in valid_cuts(msgs) if c >= h + n), len(msgs))
        self._remove(keys=[self.key, self.summary_key], args=["0", *raws[h:cut]])
        return self._deleted(readable(msgs[h:cut]))

    def delete_where(self, predicate: Callable[[Message], bool]) -> list[Message]:
        """Delete every match by value (concurrent appends survive), with its tool call and results, and cut
        the rest to a valid start. A summary that covered one is dropped (it is rebuilt from what is left)."""
        raws = self.r.lrange(self.key, 0, -1)
        entries = [(raw, m) for raw, m in zip(raws, _decode(raws, self.key)) if m.name != CORRUPT]
        msgs = [m for _, m in entries]
        owners = _call_owner(msgs)
        doomed = {i for i, m in enumerate(msgs) if predicate(m)}
        doomed |= {owners[i] for i in doomed if owners[i] is not None}
        kept = {id(m) for m in fix_boundaries([m for i, m in enumerate(msgs) if i not in doomed])}
        gone = [(raw, m) for raw, m in entries if id(m) not in kept]
        if not gone:
            return []
        self._remove(keys=[self.key, self.summary_key], args=["1", *(raw for raw, _ in gone)])
        return self._deleted([m for _, m in gone])

    def search_messages(self, query: str, k: int = 5, **kwargs) -> list:
        """This user's past messages closest in meaning to ``query``, in every thread (``thread_id=``: one)."""
        if self.index is None:
            raise MemoryKitError("search_messages needs a message index for recall: get the history from "
                                 "mk.MessageIndex(r, embedder, namespace).history(user_id, thread_id)")
        return self.index.search(query, user_id=self.user_id, k=k, **kwargs)

    def list_threads(self) -> list[tuple[str, float]]:
        """This user's live threads, most recent first, as (thread_id, last_activity). Expired ones are pruned
        from the list and from the user's key registry: an app that never lists threads should call this now
        and then (a periodic job), or both grow by one entry per expired thread."""
        entries = self.r.zrevrange(self.threads_key, 0, -1, withscores=True)
        if not entries:
            return []
        with self.r.pipeline(transaction=False) as pipe:
            for thread_id, _ in entries:
                pipe.exists(user_key(self.namespace, "thread", self.user_id, thread_id))
            alive = pipe.execute()
        gone = [t for (t, _), ok in zip(entries, alive) if not ok]
        if gone:
            self._prune(keys=[self.threads_key, registry_key(self.namespace, self.user_id),
                              *(user_key(self.namespace, "thread", self.user_id, t) for t in gone)],
                        args=gone)
        return [(t, score) for (t, score), ok in zip(entries, alive) if ok]
