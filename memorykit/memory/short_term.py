"""Short-term memory: a thread is a Redis LIST of JSON messages, plus trimming policies.

Appends are a single RPUSH (never delete + rewrite, which loses messages when two
writers race); every write refreshes a sliding TTL. Trimming functions are pure: they
shape the list sent to a model and leave the stored thread untouched. Deletions from a
stored thread follow the same validity rules and remove entries in place (by count
or by value), so messages appended meanwhile are never lost.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import redis

from ..errors import MemoryKitError, ValidationError
from ..keys import check_id, check_namespace, key
from ..messages import Message, as_message, count_tokens

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 16_000_000
SUMMARY_HEADER = "Summary of the earlier conversation:"
CORRUPT = "__corrupt__"


# ---------------------------------------------------------------- trimming (pure functions)
def head_length(messages: Sequence[Message]) -> int:
    """How many system messages open the list (the system prompt, a summary): always kept."""
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return n


def _call_owner(messages: Sequence[Message]) -> list[int | None]:
    """For each tool message, the index of the assistant message that requested it (None if orphan)."""
    owner: dict[str, int] = {}
    out: list[int | None] = []
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            for call in m.tool_calls:
                if isinstance(call, dict) and call.get("id"):
                    owner[str(call["id"])] = i
        out.append(owner.get(str(m.tool_call_id)) if m.role == "tool" else None)
    return out


def valid_cuts(messages: Sequence[Message]) -> list[int]:
    """Indices where a kept window may start: a user message that no later tool result reaches across."""
    owners = _call_owner(messages)
    earliest_owner = len(messages)
    ok = [False] * len(messages)
    for i in range(len(messages) - 1, -1, -1):
        if owners[i] is not None:
            earliest_owner = min(earliest_owner, owners[i])
        ok[i] = messages[i].role == "user" and earliest_owner >= i
    return [i for i, good in enumerate(ok) if good]


def _drop_orphans(messages: Sequence[Message]) -> list[Message]:
    """Remove tool results whose assistant tool call is not in the list."""
    owners = _call_owner(messages)
    return [m for m, o in zip(messages, owners) if m.role != "tool" or o is not None]


def _window(messages: Sequence[Message], start_at_or_after: int) -> list[Message]:
    """Head + the conversation from the first valid cut at or after ``start_at_or_after``."""
    msgs = [as_message(m) for m in messages]
    h = head_length(msgs)
    cut = next((c for c in valid_cuts(msgs) if c >= max(h, start_at_or_after)), len(msgs))
    return msgs[:h] + _drop_orphans(msgs[cut:])


def fix_boundaries(messages: Sequence[Message | dict]) -> list[Message]:
    """Make a (possibly cut) list valid: after the system head it starts with a user message,
    and no tool result is separated from the assistant message that called it."""
    return _window(messages, 0)


def trim_last(messages: Sequence[Message | dict], n: int) -> list[Message]:
    """The system head + at most the last ``n`` other messages, starting on a valid boundary.

    If no user message starts a valid window within the last ``n``, only the head is returned.
    """
    if n < 0:
        raise ValidationError(f"n must be >= 0, got {n}")
    msgs = [as_message(m) for m in messages]
    return _window(msgs, len(msgs) - n)


def trim_to_tokens(messages: Sequence[Message | dict], max_tokens: int,
                   counter: Callable[[Sequence[Message]], int] = count_tokens) -> list[Message]:
    """The system head + the longest valid recent window whose estimated tokens fit ``max_tokens``."""
    if max_tokens <= 0:
        raise ValidationError(f"max_tokens must be > 0, got {max_tokens}")
    msgs = [as_message(m) for m in messages]
    h = head_length(msgs)
    budget = max_tokens - counter(msgs[:h])
    owners = _call_owner(msgs)
    per_message = [0 if m.role == "tool" and o is None else counter([m]) for m, o in zip(msgs, owners)]
    suffix = [0] * (len(msgs) + 1)
    for i in range(len(msgs) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + per_message[i]
    for cut in valid_cuts(msgs):
        if cut >= h and suffix[cut] <= budget:
            return msgs[:h] + _drop_orphans(msgs[cut:])
    return msgs[:h]


# ---------------------------------------------------------------- validation and codec
def check_message(message: Message | dict) -> Message:
    """A message fit to store: known role, non-blank content (or tool calls), bounded size."""
    m = as_message(message)
    if not m.content.strip() and not (m.role == "assistant" and m.tool_calls):
        raise ValidationError(f"a {m.role} message must have non-empty content (got {m.content!r}); nothing was stored")
    if len(m.content) > MAX_MESSAGE_CHARS:
        raise ValidationError(f"message is {len(m.content):,} characters; the limit is {MAX_MESSAGE_CHARS:,}. "
                              "Store large documents elsewhere and keep a reference in the thread.")
    if m.role == "tool" and not m.tool_call_id:
        raise ValidationError("a tool message needs the tool_call_id of the call it answers")
    return m


def _decode(raw: str, where: str) -> Message | None:
    try:
        return Message.from_json(raw)
    except (ValueError, TypeError, KeyError, MemoryKitError) as exc:
        log.warning("skipping corrupt entry in %s: %s (%.60r)", where, exc, raw)
        return None


def _digest(raws: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(raws).encode("utf-8")).hexdigest()


# Atomically: if the first #prefix entries and the summary are unchanged, drop them (keeping the
# system head), then set (or keep) the summary. Entries appended meanwhile sit at the tail, untouched.
_DROP_PREFIX = """
local n, head = tonumber(ARGV[2]), tonumber(ARGV[3])
if n > 0 then
  local got = redis.call('LRANGE', KEYS[1], 0, n - 1)
  if #got ~= n or redis.sha1hex(table.concat(got, '\\n')) ~= ARGV[1] then return 0 end
end
local summary = redis.call('GET', KEYS[2]) or ''
if redis.sha1hex(summary) ~= ARGV[4] then return 0 end
local kept = {}
if head > 0 then kept = redis.call('LRANGE', KEYS[1], 0, head - 1) end
redis.call('LTRIM', KEYS[1], n, -1)
for i = #kept, 1, -1 do redis.call('LPUSH', KEYS[1], kept[i]) end
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[2], ARGV[5])
  if tonumber(ARGV[6]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[6]) end
end
return 1
"""


def parse_summary(raw: str | None) -> dict[str, Any] | None:
    """The summary record stored as JSON (a plain string is read as text covering 0 messages)."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        data = raw
    return data if isinstance(data, dict) else {"text": str(data), "covers": 0}


def summary_text(raw: str | None) -> str | None:
    info = parse_summary(raw)
    return info.get("text") if info else None


@dataclass
class Snapshot:
    """A consistent read of a thread: raw entries, decoded messages (None if corrupt), the raw summary."""

    raws: list[str]
    messages: list[Message | None]
    summary_raw: str | None

    @property
    def valid(self) -> list[Message]:
        return [m for m in self.messages if m is not None]

    @property
    def positional(self) -> list[Message]:
        """One message per entry (corrupt ones as an empty placeholder), so indices match the list."""
        return [m if m is not None else Message(role="assistant", content="", name=CORRUPT)
                for m in self.messages]

    @property
    def head(self) -> int:
        """Leading entries that are (readable) system messages."""
        n = 0
        while n < len(self.messages) and self.messages[n] is not None and self.messages[n].role == "system":
            n += 1
        return n


# ---------------------------------------------------------------- the stored thread
class ChatHistory:
    """One conversation thread of one user, stored as a Redis LIST with a sliding TTL."""

    def __init__(self, r: redis.Redis, user_id: str, thread_id: str, ttl: int | None = 3600,
                 namespace: str = "memorykit", recall: Any = None):
        if ttl is not None and (not isinstance(ttl, int) or ttl <= 0):
            raise ValidationError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        self.r = r
        self.user_id = check_id(user_id, "user_id")
        self.thread_id = check_id(thread_id, "thread_id")
        self.namespace = check_namespace(namespace)
        self.ttl = ttl
        self.recall = recall
        self.key = key(namespace, "thread", user_id, thread_id)
        self.summary_key = key(namespace, "thread", user_id, thread_id, "summary")
        self.threads_key = key(namespace, "user", user_id, "threads")

    def __repr__(self) -> str:
        return f"ChatHistory(user_id={self.user_id!r}, thread_id={self.thread_id!r}, namespace={self.namespace!r})"

    # -- writing
    def append(self, message: Message | dict | Iterable[Message | dict]) -> list[Message]:
        """RPUSH one or more messages (all validated first: nothing is stored if one is bad)."""
        if isinstance(message, (str, bytes)):
            raise ValidationError("append takes a Message (or an OpenAI message dict), not a string: "
                                  "use Message(role='user', content=...)")
        items = [message] if isinstance(message, (Message, dict)) else list(message)
        msgs = [check_message(m) for m in items]
        if not msgs:
            return []
        with self.r.pipeline(transaction=True) as pipe:
            pipe.rpush(self.key, *(m.to_json() for m in msgs))
            self._touch(pipe)
            pipe.execute()
        if self.recall is not None:
            try:
                self.recall.add(self.user_id, self.thread_id, msgs)
            except Exception:
                log.exception("messages stored in %s but not indexed for recall", self.key)
        return msgs

    def _touch(self, pipe) -> None:
        """Slide the TTL of the thread and its summary; record activity in the user's thread set."""
        if self.ttl is not None:
            pipe.expire(self.key, self.ttl)
            pipe.expire(self.summary_key, self.ttl)
        else:
            pipe.persist(self.key)
            pipe.persist(self.summary_key)
        pipe.zadd(self.threads_key, {self.thread_id: time.time()})

    # -- reading
    def messages(self, last_n: int | None = None) -> list[Message]:
        """The stored messages, oldest first (only the last ``last_n`` if given); corrupt entries skipped."""
        if last_n is not None and last_n <= 0:
            return []
        raws = self.r.lrange(self.key, -last_n if last_n else 0, -1)
        return [m for raw in raws if (m := _decode(raw, self.key)) is not None]

    def __len__(self) -> int:
        return int(self.r.llen(self.key))

    def snapshot(self) -> Snapshot:
        """All raw entries and the summary, read together in one transaction."""
        with self.r.pipeline(transaction=True) as pipe:
            pipe.lrange(self.key, 0, -1)
            pipe.get(self.summary_key)
            raws, summary_raw = pipe.execute()
        return Snapshot(raws, [_decode(raw, self.key) for raw in raws], summary_raw)

    def summary_info(self) -> dict[str, Any] | None:
        """The stored summary record: text, covers (messages summarized in total), updated_at."""
        return parse_summary(self.r.get(self.summary_key))

    def summary(self) -> str | None:
        """The current summary text, or None if the thread was never summarized."""
        info = self.summary_info()
        return info.get("text") if info else None

    def prompt_messages(self, system: str | None = None) -> list[Message]:
        """What to send a model: the system prompt, the summary as a system message, the kept messages."""
        return self.prompt_from(self.snapshot(), system)

    @staticmethod
    def prompt_from(snap: Snapshot, system: str | None = None) -> list[Message]:
        """prompt_messages() for an already-read snapshot."""
        msgs = snap.valid
        h = head_length(msgs)
        out = [Message(role="system", content=system)] if system else []
        out += msgs[:h]
        text = summary_text(snap.summary_raw)
        if text:
            out.append(Message(role="system", content=f"{SUMMARY_HEADER}\n{text}"))
        return out + msgs[h:]

    # -- deleting
    def clear(self) -> int:
        """Delete the thread, its summary and its entry in the user's thread list; returns messages deleted."""
        with self.r.pipeline(transaction=True) as pipe:
            pipe.lrange(self.key, 0, -1)
            pipe.delete(self.key, self.summary_key)
            pipe.zrem(self.threads_key, self.thread_id)
            raws = pipe.execute()[0]
        self._forget([m for raw in raws if (m := _decode(raw, self.key)) is not None])
        return len(raws)

    def _forget(self, msgs: Sequence[Message]) -> None:
        if self.recall is not None and msgs:
            self.recall.remove(self.user_id, self.thread_id, [m.id for m in msgs])

    def drop_prefix(self, snap: Snapshot, count: int, new_summary: dict[str, Any] | None = None) -> bool:
        """Atomically remove the first ``count`` entries (system head kept) if they and the summary
        are still what ``snap`` saw; optionally store a new summary. False means: re-read and retry."""
        h = min(snap.head, count)
        raws = snap.raws[:count]
        summary_json = json.dumps(new_summary, ensure_ascii=False) if new_summary is not None else ""
        ok = self.r.eval(_DROP_PREFIX, 2, self.key, self.summary_key, _digest(raws), count, h,
                         hashlib.sha1((snap.summary_raw or "").encode("utf-8")).hexdigest(),
                         summary_json, self.ttl or 0)
        if ok:
            self._forget([m for m in snap.messages[h:count] if m is not None])
        return bool(ok)

    def delete_first(self, n: int, attempts: int = 5) -> list[Message]:
        """Delete the first ``n`` messages after the system head, extended to the next valid boundary
        (the rest then starts with a user message and keeps tool calls with their results)."""
        if n <= 0:
            return []
        for _ in range(attempts):
            snap = self.snapshot()
            msgs = snap.positional
            h = snap.head
            cut = next((c for c in valid_cuts(msgs) if c >= h + n), len(msgs))
            if cut <= h:
                return []
            if self.drop_prefix(snap, cut):
                return [m for m in snap.messages[h:cut] if m is not None]
        raise MemoryKitError(f"delete_first gave up after {attempts} attempts: the thread kept changing")

    def delete_where(self, predicate: Callable[[Message], bool]) -> list[Message]:
        """Delete every message matching ``predicate`` (by value, so concurrent appends survive);
        a tool call and its results go together, and the rest is cut to a valid start."""
        snap = self.snapshot()
        pairs = [(raw, m) for raw, m in zip(snap.raws, snap.messages) if m is not None]
        msgs = [m for _, m in pairs]
        doomed = {i for i, m in enumerate(msgs) if predicate(m)}
        owners = _call_owner(msgs)
        for i, o in enumerate(owners):
            if o is not None and (i in doomed or o in doomed):
                doomed |= {i, o}
        for i, o in enumerate(owners):
            if o is not None and o in doomed:
                doomed.add(i)
        kept = [i for i in range(len(msgs)) if i not in doomed]
        valid = {id(m) for m in fix_boundaries([msgs[i] for i in kept])}
        doomed |= {i for i in kept if id(msgs[i]) not in valid}
        if not doomed:
            return []
        with self.r.pipeline(transaction=True) as pipe:
            for i in sorted(doomed):
                pipe.lrem(self.key, 1, pairs[i][0])
            self._touch(pipe)
            pipe.execute()
        gone = [msgs[i] for i in sorted(doomed)]
        self._forget(gone)
        return gone

    # -- recall across threads
    def search_messages(self, query: str, k: int = 5, thread_id: str | None = None,
                        distance_threshold: float | None = None) -> list:
        """Semantically search this user's past messages (delegates to the ``recall`` index)."""
        if self.recall is None:
            raise MemoryKitError("search_messages needs a message index: create the history with "
                                 "ChatHistory(..., recall=mk.MessageRecall(r, embedder, namespace))")
        return self.recall.search(query, user_id=self.user_id, thread_id=thread_id, k=k,
                                  distance_threshold=distance_threshold)

    def list_threads(self) -> list[tuple[str, float]]:
        """This user's live threads, most recent first, as (thread_id, last_activity)."""
        return list_threads(self.r, self.user_id, self.namespace)


def list_threads(r: redis.Redis, user_id: str, namespace: str = "memorykit") -> list[tuple[str, float]]:
    """A user's live threads, most recent first, as (thread_id, last_activity); expired ones pruned."""
    threads_key = key(check_namespace(namespace), "user", check_id(user_id, "user_id"), "threads")
    entries = r.zrevrange(threads_key, 0, -1, withscores=True)
    if not entries:
        return []
    with r.pipeline(transaction=False) as pipe:
        for thread_id, _ in entries:
            pipe.exists(key(namespace, "thread", user_id, thread_id))
        alive = pipe.execute()
    gone = [t for (t, _), ok in zip(entries, alive) if not ok]
    if gone:
        r.zrem(threads_key, *gone)
    return [(t, score) for (t, score), ok in zip(entries, alive) if ok]
