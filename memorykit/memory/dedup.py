"""Deduplication: is a new fact new, a duplicate, or an update?

:func:`remember` asks a model only when it must: **exact** (same content hash: NOOP) -> **semantic** (nothing
near: ADD; near-identical with the same numbers, names and negations: NOOP) -> **decided** (the ``decide_memory``
task: ADD | UPDATE | INVALIDATE | NOOP). An update closes the old memory and links both ways (``as_of``,
``history``). Writes are optimistic transactions per user and type (WATCH the ledger, MULTI/EXEC).
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np
import redis
from pydantic import BaseModel, field_validator, model_validator
from redisvl.query import FilterQuery
from redisvl.query.filter import FilterExpression, Tag

from ..errors import MemoryKitError
from ..keys import key
from ..llm.task import Task, TaskFailed, Text, is_placeholder, run_task
from .index import content_hash, json_docs, nearest, owner_filter, owner_of, row_ids, validity

if TYPE_CHECKING:
    from .long_term import Memory, MemoryHit, MemoryStore

log = logging.getLogger(__name__)

ACTIONS = ("ADD", "UPDATE", "INVALIDATE", "NOOP")
TIERS = ("exact", "semantic", "decided")  # Decision.tier: which step settled the fact
CANDIDATE_DISTANCE = 0.65       # loose: updates sit up to ~0.6 from what they replace
NEAR_DUPLICATE_DISTANCE = 0.04  # with the surface check: no non-duplicate of data/dedup/train.jsonl
MAX_RETRIES = 32
EXACT_SCAN_LIMIT = 500  # up to this many current memories per user and type, distances are exact


@dataclass
class Decision:
    """What remember() did: ``memory`` now holds the fact; ``target`` is the memory it duplicates
    (NOOP) or closed (UPDATE / INVALIDATE); ``model_calls`` counts decide_memory tasks run."""

    action: str
    memory: Memory | None = None
    target: Memory | None = None
    reason: str = ""
    tier: str = "decided"
    model_calls: int = 0

    def __repr__(self) -> str:
        target = f", target={self.target.content!r}" if self.target else ""
        return f"Decision({self.action} by {self.tier}{target}: {self.reason})"


def _scope(user_id: str, memory_type: str) -> FilterExpression:
    """Exactly this user's current memories of this type."""
    return owner_filter(user_id) & (Tag("memory_type") == memory_type) & validity()


def ledger_key(store: MemoryStore, user_id: str, memory_type: str) -> str:
    """``ns:memhash:<user>:<type>``: content hash -> id of the current memory; writers WATCH it."""
    return key(store.namespace, "memhash", user_id, memory_type)


def find_exact(store: MemoryStore, content: str, user_id: str | None,
               memory_type: str = "episodic") -> Memory | None:
    """The current memory with the same normalized text (case, spaces, punctuation ignored)."""
    user_id = owner_of(user_id, memory_type)
    digest = content_hash(content)
    mid = store.redis.hget(ledger_key(store, user_id, memory_type), digest)
    if mid is None:
        q = FilterQuery(filter_expression=_scope(user_id, memory_type) & (Tag("content_hash") == digest),
                        return_fields=["id"], num_results=1)
        q.sort_by("created_at", asc=True)
        mid = next(iter(row_ids(store.index.query(q))), None)
    found = store.get(mid) if mid else None
    return found if found is not None and found.is_current else None


def find_similar(store: MemoryStore, content: str, user_id: str | None, memory_type: str = "episodic",
                 k: int = 5, distance_threshold: float | None = CANDIDATE_DISTANCE,
                 vector: Sequence[float] | None = None) -> list[MemoryHit]:
    """The ``k`` nearest current memories of this user and type, within ``distance_threshold``."""
    from .long_term import MemoryHit

    user_id = owner_of(user_id, memory_type)
    vector = np.asarray(vector if vector is not None else store.embedder.embed(content), dtype=np.float32)
    scope = _scope(user_id, memory_type)
    # The ledger names every current memory remember() wrote, even one the index has not caught
    # up with under concurrent writes; the index adds those stored with add().
    ids = set(store.redis.hvals(ledger_key(store, user_id, memory_type)))
    ids |= set(row_ids(store.index.query(FilterQuery(filter_expression=scope, return_fields=["id"],
                                                     num_results=EXACT_SCAN_LIMIT + 1))))
    if len(ids) <= EXACT_SCAN_LIMIT:  # the usual case: exact cosine distances in numpy
        ids = sorted(ids)
        docs = json_docs(store.redis, [store.key(mid) for mid in ids], "$.embedding", "$.invalid_at")
        found = {mid: got["$.embedding"][0] for mid, got in zip(ids, docs)
                 if got and got.get("$.embedding") and not got.get("$.invalid_at")}
        if not found:
            return []
        distances = 1.0 - np.asarray(list(found.values()), dtype=np.float32) @ vector
        rows = sorted(zip(distances.tolist(), found))[:k]
    else:
        found = nearest(store.index, vector.tolist(), scope, k)
        rows = [(float(row["vector_distance"]), mid) for row, mid in zip(found, row_ids(found))]
    if distance_threshold is not None:
        rows = [row for row in rows if row[0] <= distance_threshold]
    memories = store.get_many([mid for _, mid in rows])
    return [MemoryHit(m, dist) for m, (dist, _) in zip(memories, rows) if m]


_SURFACE = re.compile(r"\d+|(?<!^)\b[A-Z]\w*|(?i:\b(?:not|no|never|longer|anymore)\b|n't)")


def _surface(text: str) -> set[str]:
    """Numbers, capitalised words and negations: what a sentence embedding barely notices."""
    return {t if t[0].isupper() else t.lower() for t in _SURFACE.findall(text) if t != "User"}


def near_identical(new: str, old: str, distance: float, threshold: float = NEAR_DUPLICATE_DISTANCE) -> bool:
    """A duplicate without asking a model: vectors almost equal and the same numbers, names, negations."""
    return distance <= threshold and _surface(new) == _surface(old)


DECIDE_PROMPT = """\
You maintain the long-term memory of one user. You get a NEW fact and EXISTING memories, each
with a small number. Decide what to do with the new fact:
- NOOP: an existing memory already says the same thing (a paraphrase counts as the same).
- UPDATE: the new fact changes the value of something an existing memory states and only one
  value can be true at a time (moved city, new employer, new age, switched preference).
- INVALIDATE: the new fact says an existing memory is no longer true (stopped, no longer, left,
  passed away).
- ADD: anything else, including facts that can have several values at once (another trip,
  a second pet, another allergy, a new hobby) and facts about other people.
Different years or dates usually mean different events: ADD.
For NOOP, UPDATE and INVALIDATE, "target" is the number of that existing memory; for ADD it is null.
Answer with a JSON object: "action", "target", a short "reason" in your own words, and
"content" (a better wording of the new fact to store, or null)."""


class ExistingFact(BaseModel):
    id: int  # a small number shown to the model, never a memory id
    fact: str


class DecideInput(BaseModel):
    """The new fact and the nearest current memories, numbered 0..n-1 (never memory ids)."""

    new: Text
    existing: list[ExistingFact]


class MemoryDecision(BaseModel):
    """The decider's answer; ``target`` numbers an existing fact, ``content`` optionally rewords the new one."""

    action: Literal["ADD", "UPDATE", "INVALIDATE", "NOOP"]
    target: int | None = None
    reason: Text
    content: str | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _upper(cls, value):
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("content")
    @classmethod
    def _real_content(cls, value):  # a copied placeholder or an empty string means "no rewording"
        return None if value is None or is_placeholder(value) else value.strip()

    @model_validator(mode="after")
    def _needs_target(self) -> "MemoryDecision":
        if self.action != "ADD" and self.target is None:
            raise ValueError(f"{self.action} needs the number of an existing memory as target")
        return self


def _render(inp: DecideInput) -> str:
    return "\n".join([f"NEW: {inp.new}", "EXISTING:", *(f"{e.id}: {e.fact}" for e in inp.existing)])


DECIDE = Task("decide_memory", prompt=DECIDE_PROMPT, input=DecideInput, output=MemoryDecision, max_tokens=150,
              render=_render)


def decide(new_fact: str, existing: Sequence[Memory | str], llm) -> MemoryDecision:
    """Ask ``llm`` what to do with ``new_fact``; never raises. No model, a failed task or a target that
    numbers no memory falls back to ADD: a duplicate at worst, never a wrong fact closed."""
    if not existing:
        return MemoryDecision(action="ADD", reason="no similar memory")
    if llm is None:
        return MemoryDecision(action="ADD", reason="no model given to decide (pass llm=): kept as new")
    facts = [getattr(m, "content", m) for m in existing]
    try:
        out = run_task(llm, DECIDE, DecideInput(new=new_fact, existing=[
            ExistingFact(id=i, fact=f) for i, f in enumerate(facts)]))
    except Exception as exc:  # TaskFailed, or a backend that broke in a way of its own: never lose the fact
        reason = exc.reason if isinstance(exc, TaskFailed) else f"{type(exc).__name__}: {exc}"
        log.warning("decider failed (%s); adding the fact instead", reason)
        return MemoryDecision(action="ADD", reason=f"decider failed: {reason}")
    if out.action == "ADD":
        return out.model_copy(update={"target": None})
    if not 0 <= out.target < len(facts):
        log.warning("decider named memory %s of 0..%d; adding the fact instead", out.target, len(facts) - 1)
        return MemoryDecision(action="ADD", reason=f"decider failed: target {out.target} names no memory")
    return out


def remember(store: MemoryStore, content: str, user_id: str | None = None, memory_type: str = "episodic",
             observed_at: float | None = None, llm=None, *, source_thread: str | None = None,
             source_messages: Sequence[str] | None = None) -> Decision:
    """hash -> vectors -> decision -> apply, atomically for this user and memory type."""
    user = owner_of(user_id, memory_type)
    new = store._new(content, user, memory_type, source_thread=source_thread,
                     source_messages=list(source_messages or []), observed_at=observed_at)
    vector = store.embedder.embed(new.content)
    ledger = ledger_key(store, user, memory_type)
    attempts, calls = [0], [0]

    def attempt(pipe) -> Decision:
        attempts[0] += 1
        if attempts[0] > MAX_RETRIES:
            raise MemoryKitError(f"remember() gave up after {MAX_RETRIES} conflicting writes for one user; "
                                 "retry later or write less concurrently")
        fresh = replace(new)  # each attempt starts from the fact as given
        decision = _cascade(store, fresh, vector, llm)
        calls[0] += decision.model_calls
        decision.model_calls = calls[0]
        if decision.action != "NOOP":
            reworded = decision.memory.content != new.content
            _apply(store, pipe, ledger, decision, store.embedder.embed(decision.memory.content) if reworded
                   else vector, stamp_now=observed_at is None)
        return decision

    return store.redis.transaction(attempt, ledger, value_from_callable=True)


def _cascade(store: MemoryStore, new: Memory, vector, llm) -> Decision:
    same = find_exact(store, new.content, new.user_id, new.memory_type)
    if same is not None:
        return Decision("NOOP", same, same, "the same text is already stored", "exact")
    hits = find_similar(store, new.content, new.user_id, new.memory_type, vector=vector)
    if not hits:
        return Decision("ADD", new, None, f"no memory within distance {CANDIDATE_DISTANCE}", "semantic")
    nearest = hits[0]
    if near_identical(new.content, nearest.memory.content, nearest.distance):
        return Decision("NOOP", nearest.memory, nearest.memory, "a near-identical memory", "semantic")
    out = decide(new.content, [h.memory for h in hits], llm)
    if out.action == "ADD":
        return Decision("ADD", new, None, out.reason, "decided", 1)
    target = hits[out.target]
    if out.action == "NOOP":
        return Decision("NOOP", target.memory, target.memory, out.reason, "decided", 1)
    if out.content:  # the model reworded the fact it wants stored
        new.content, new.content_hash = out.content, content_hash(out.content)
    return Decision(out.action, new, target.memory, out.reason, "decided", 1)


def _apply(store: MemoryStore, pipe, ledger: str, decision: Decision, vector, stamp_now: bool = True) -> None:
    """Queue the decision in the transaction (a WatchError makes it decide again). ``stamp_now``: the
    time is taken after the WATCHes, so it is later than every version this write can supersede."""
    new, target = decision.memory, decision.target
    closing = decision.action in ("UPDATE", "INVALIDATE") and target is not None
    if closing:
        pipe.watch(store.key(target.id))
        state = pipe.json().get(store.key(target.id), "$.invalid_at")
        if state is None or (state and state[0] is not None):  # deleted, or closed by another writer
            raise redis.WatchError("the target changed under us")
    if stamp_now:
        new.created_at = new.updated_at = new.valid_from = time.time()
    if closing:
        if new.valid_from < (target.valid_from or 0):  # observed_at says: older than what we know
            new.invalid_at, new.superseded_by = target.valid_from, target.id
            decision.reason += " (older than the current memory: kept as history)"
            closing = False
        else:
            new.supersedes = target.id
    pipe.multi()
    store._write(new, vector, pipe=pipe)
    if new.invalid_at is None:
        pipe.hset(ledger, new.content_hash, new.id)
    if closing:
        _close(store, pipe, target, new.valid_from, new.id)
        if target.content_hash != new.content_hash:
            pipe.hdel(ledger, target.content_hash)


def _close(store: MemoryStore, pipe, memory: Memory, at: float, by: str) -> None:
    """Queue: ``memory`` stops being current at ``at``, replaced by ``by`` (one JSON.MERGE: one re-index)."""
    now = time.time()
    pipe.json().merge(store.key(memory.id), "$", {"invalid_at": at, "superseded_by": by, "updated_at": now})
    memory.invalid_at, memory.superseded_by, memory.updated_at = at, by, now
