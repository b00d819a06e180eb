"""Deduplication: is a new fact new, a duplicate, or an update?

:func:`remember` asks a model only when it must: **exact** (same content hash: NOOP; the text of a version a
newer memory near it replaced, said again: UPDATE of that one) -> **semantic** (nothing near: ADD; near-identical with
the same numbers, names and negations: NOOP) -> **decided** (the ``decide_memory`` task: ADD | UPDATE |
INVALIDATE | NOOP). An update closes the old memory and links both ways (``as_of``,
``history``). Writes are optimistic transactions per user and type (WATCH the ledger, MULTI/EXEC).

The exact-match ledger (``ns:memhash:{owner}:<type>``, content hash -> id) is derived data: every write that
changes, closes or deletes a memory changes it in the same atomic step, and a hit is verified against the
stored document (owner, type, hash, still current) before it is trusted; a stale entry counts as a miss.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Sequence

import redis
from pydantic import BaseModel, field_validator, model_validator

from ..errors import MemoryKitError, ValidationError
from ..keys import shared_key, user_key
from ..llm.task import Task, TaskFailed, Text, is_placeholder, run_task
from . import vectors
from .chains import close as _close, into_the_past, said_again
from .index import content_hash, decoded, owner_of, tag_of

if TYPE_CHECKING:
    from .long_term import Memory, MemoryHit, MemoryStore

log = logging.getLogger(__name__)

ACTIONS = ("ADD", "UPDATE", "INVALIDATE", "NOOP")
TIERS = ("exact", "semantic", "decided")  # Decision.tier: which step settled the fact
CANDIDATE_DISTANCE = 0.65       # loose: updates sit up to ~0.6 from what they replace
NEAR_DUPLICATE_DISTANCE = 0.04  # with the surface check: no non-duplicate of data/dedup/train.jsonl
MAX_RETRIES = 32
SAID_AGAIN_DISTANCE = 0.5  # a text said again undoes its replacement only this near: 80% of the dedup training
#                            data's updates and invalidations sit within 0.5 of what they replace (a wrong earlier
#                            update, "cycles to work" over "uses Linux", is 0.54 away: left to the model)
LATE_QUESTIONS = 3  # a fact said before all its candidates: at most this many asked about, nearest first
EXACT_NEIGHBOURS = 5  # find_exact's fallback: the same normalized text is among this many nearest memories


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


# KEYS[1]: a memory, KEYS[2..4]: its owner's ledgers (episodic, semantic, procedural), KEYS[5]: its access set,
# KEYS[6]: its owner's Vector Set, KEYS[7]: its owner's id registry (all under the owner's hash tag: one slot).
# ARGV: the caller's owner tag, the memory id. Deletes the memory, its vector, its registry and ledger entries and
# its access time, atomically: 1; 0 if missing or another owner's (the same answer).
DROP_MEMORY = """
local raw = redis.call('JSON.GET', KEYS[1], '$.user_tag', '$.memory_type', '$.content_hash')
if not raw then return 0 end
local doc = cjson.decode(raw)
if doc['$.user_tag'][1] ~= ARGV[1] then return 0 end
local ledger = KEYS[({episodic = 2, semantic = 3, procedural = 4})[doc['$.memory_type'][1]] or 0]
local digest = doc['$.content_hash'][1]
if ledger and digest and redis.call('HGET', ledger, digest) == ARGV[2] then redis.call('HDEL', ledger, digest) end
redis.call('ZREM', KEYS[5], ARGV[2])
redis.call('VREM', KEYS[6], ARGV[2])
redis.call('ZREM', KEYS[7], ARGV[2])
return redis.call('DEL', KEYS[1])
"""
# KEYS[1]: a ledger. ARGV: a content hash, the id expected under it ('' = none), the id to put there ('' = remove).
LEDGER_CAS = """
if (redis.call('HGET', KEYS[1], ARGV[1]) or '') ~= ARGV[2] then return 0 end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 1
"""


def ledger_key(store: MemoryStore, owner: str | None, memory_type: str) -> str:
    """``ns:memhash:{<user>}:<type>`` (``{%shared}`` for shared knowledge): content hash -> id of the current
    memory; writers WATCH it."""
    if owner is None:
        return shared_key(store.namespace, "memhash", memory_type)
    return user_key(store.namespace, "memhash", owner, memory_type)


def _verified(store: MemoryStore, memory_id: str, owner: str | None, memory_type: str,
              digest: str) -> Memory | None:
    """The memory a ledger entry names, if it still is what the entry claims: this owner's, this type,
    this content hash, current. None otherwise (a stale entry)."""
    memory, tag = store._load([store.key(memory_id, owner)])[0]
    ok = (memory is not None and tag == tag_of(owner) and memory.memory_type == memory_type
          and memory.content_hash == digest and memory.is_current)
    return memory if ok else None


def find_exact(store: MemoryStore, content: str, user_id: str | None = None, memory_type: str = "episodic", *,
               shared: bool = False, repair: bool = True, vector: Sequence[float] | None = None) -> Memory | None:
    """The owner's current memory with the same normalized text (case, spaces, punctuation ignored). A ledger
    entry is verified first; a stale one is a miss (and, with ``repair``, removed). Then the nearest memories
    are checked: the same text has (nearly) the same vector, and ``add()`` writes no ledger entry."""
    owner = owner_of(user_id, shared)
    digest, ledger = content_hash(content), ledger_key(store, owner, memory_type)
    mid = store.redis.hget(ledger, digest)
    if mid is not None:
        found = _verified(store, mid, owner, memory_type, digest)
        if found is not None:
            return found
        if repair:
            store._ledger_cas(keys=[ledger], args=[digest, mid, ""])
    near = find_similar(store, content, user_id, memory_type, k=EXACT_NEIGHBOURS, distance_threshold=None,
                        vector=vector, shared=shared)
    same = sorted((h.memory for h in near if h.memory.content_hash == digest), key=lambda m: (m.created_at, m.id))
    if same and repair:
        store._ledger_cas(keys=[ledger], args=[digest, "", same[0].id])
    return same[0] if same else None


def ledger_moves(store: MemoryStore, pipe, memory: Memory, new_hash: str):
    """Read, under WATCH, what the ledger must change when ``memory`` takes ``new_hash``; returns a function
    that queues those changes after MULTI (the old entry goes if it names this memory; the new one is
    claimed unless another current memory verifiably holds it)."""
    if new_hash == memory.content_hash:
        return lambda pipe: None
    ledger = ledger_key(store, memory.user_id, memory.memory_type)
    pipe.watch(ledger)
    drop = pipe.hget(ledger, memory.content_hash) == memory.id
    holder = pipe.hget(ledger, new_hash)
    claim = memory.is_current and (holder in (None, memory.id) or _verified(
        store, holder, memory.user_id, memory.memory_type, new_hash) is None)

    def queue(pipe) -> None:
        if drop:
            pipe.hdel(ledger, memory.content_hash)
        if claim:
            pipe.hset(ledger, new_hash, memory.id)
    return queue


def find_similar(store: MemoryStore, content: str, user_id: str | None = None, memory_type: str = "episodic",
                 k: int = 5, distance_threshold: float | None = CANDIDATE_DISTANCE,
                 vector: Sequence[float] | None = None, *, shared: bool = False) -> list[MemoryHit]:
    """The ``k`` nearest current memories of this owner and type, within ``distance_threshold``: VSIM on the
    owner's Vector Set (written in the same transaction as each document, so never behind it)."""
    from .long_term import MemoryHit

    owner = owner_of(user_id, shared)
    vector = vector if vector is not None else store.embedder.embed(content)
    rows = vectors.search(store.redis, [(store.vectors_key(owner), vectors.where([memory_type]))], vector, k)[0]
    rows = [(mid, d) for mid, d, _ in rows if distance_threshold is None or d <= distance_threshold]
    loaded = store._load([store.key(mid, owner) for mid, _ in rows])
    return [MemoryHit(m, d) for (m, tag), (_, d) in zip(loaded, rows)
            if m is not None and tag == tag_of(owner) and m.memory_type == memory_type and m.is_current]


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
        reason = exc.reason if isinstance(exc, TaskFailed) else type(exc).__name__  # its text may quote facts
        log.warning("decider failed (%s); adding the fact instead", reason)
        return MemoryDecision(action="ADD", reason=f"decider failed: {reason}")
    if out.action == "ADD":
        return out.model_copy(update={"target": None})
    if not 0 <= out.target < len(facts):
        log.warning("decider named memory %s of 0..%d; adding the fact instead", out.target, len(facts) - 1)
        return MemoryDecision(action="ADD", reason=f"decider failed: target {out.target} names no memory")
    return out


def remember(store: MemoryStore, content: str, user_id: str | None = None, memory_type: str | None = None,
             observed_at: float | None = None, llm=None, *, shared: bool = False, source_thread: str | None = None,
             source_messages: Sequence[str] | None = None) -> Decision:
    """hash -> vectors -> decision -> apply, atomically for this owner (``user_id``, or ``shared=True`` for
    shared knowledge) and memory type (default: episodic, semantic when shared)."""
    owner = owner_of(user_id, shared)
    memory_type = memory_type or ("semantic" if owner is None else "episodic")
    new = store._new(content, owner, memory_type, source_thread=source_thread,
                     source_messages=list(source_messages or []), observed_at=observed_at)
    vector = store.embedder.embed(new.content)
    ledger = ledger_key(store, owner, memory_type)
    attempts, calls, decided = [0], [0], {}  # decided: the model's answers by candidate set, kept across retries

    def attempt(pipe) -> Decision:
        attempts[0] += 1
        if attempts[0] > MAX_RETRIES:
            raise MemoryKitError(f"remember() gave up after {MAX_RETRIES} conflicting writes for one user; "
                                 "retry later or write less concurrently")
        fresh = replace(new)  # each attempt starts from the fact as given
        decision = _cascade(store, fresh, vector, llm, decided)
        if decision.tier == "exact" and observed_at is not None and observed_at < (decision.target.valid_from or 0):
            decision = Decision("UPDATE", fresh, decision.target, "the same text, observed earlier", "exact")
        calls[0] += decision.model_calls
        decision.model_calls = calls[0]
        if decision.action != "NOOP":
            reworded = decision.memory.content != new.content
            _apply(store, pipe, ledger, decision, store.embedder.embed(decision.memory.content) if reworded
                   else vector, stamp_now=observed_at is None)
        return decision

    return store.redis.transaction(attempt, ledger, value_from_callable=True)


def revise(store: MemoryStore, memory_id: str, content: str, user_id: str | None = None, *,
           shared: bool = False) -> Decision:
    """A new version of the owner's current memory ``memory_id``, said as ``content``: written and the old one
    closed (kept as history, linked both ways) in one transaction, as remember()'s UPDATE does. What an agent's
    "update this memory" means ("I moved to Berlin"); :meth:`MemoryStore.update` edits in place instead. The
    same text is a NOOP; a memory closed or changed meanwhile raises ValidationError (search again)."""
    owner = owner_of(user_id, shared)
    first = store.get(memory_id, user_id, shared=shared)
    if first is None or first.user_id != owner:
        raise ValidationError(f"no memory with id {memory_id!r}")
    memory_type = first.memory_type
    new = store._new(content, owner, memory_type, topics=first.topics, metadata=dict(first.metadata))
    vector, read = store.embedder.embed(new.content), [first]

    def attempt(pipe) -> Decision:  # a retry reads the memory again; the WATCH below checks it is unchanged
        target = read.pop() if read else store.get(memory_id, user_id, shared=shared)
        if target is None or target.user_id != owner or not target.is_current:
            raise ValidationError(f"memory {memory_id!r} was closed or deleted meanwhile"
                                  + (f" (its newer version is {target.superseded_by!r})" if target else ""))
        if target.content_hash == new.content_hash:
            return Decision("NOOP", target, target, "the same text is already stored", "request")
        same = find_exact(store, new.content, user_id=user_id, memory_type=memory_type, shared=shared,
                          repair=False, vector=vector)  # the ledger is WATCHed
        if same is not None:  # another memory says it already: that one replaces the old, no second copy
            drop = _watch_current(store, pipe, ledger, target)
            pipe.multi()
            _close(store, pipe, target, max(time.time(), target.valid_from or 0), same.id)
            if drop:
                pipe.hdel(ledger, target.content_hash)
            return Decision("UPDATE", same, target, "the new text was already stored: it replaces the old", "request")
        decision = Decision("UPDATE", replace(new), target, "a new version, asked for by id", "request")
        _apply(store, pipe, ledger, decision, vector)
        return decision

    ledger = ledger_key(store, owner, memory_type)
    return store.redis.transaction(attempt, ledger, value_from_callable=True)


def _cascade(store: MemoryStore, new: Memory, vector, llm, decided: dict | None = None) -> Decision:
    """Exact, near-identical, then the model. ``decided`` keeps the model's answer per set of candidates: a
    retry after another write for the same owner asks again only if the candidates changed."""
    owner = dict(user_id=new.user_id, shared=new.user_id is None)
    same = find_exact(store, new.content, memory_type=new.memory_type, repair=False, vector=vector,
                      **owner)  # the ledger is WATCHed
    if same is not None:
        return Decision("NOOP", same, same, "the same text is already stored", "exact")
    hits = find_similar(store, new.content, memory_type=new.memory_type, vector=vector, **owner)
    near = {h.memory.id for h in hits if h.distance <= SAID_AGAIN_DISTANCE}
    again = said_again(store, new, vector) if near else None  # replaced by a memory near it: that one is not true
    if again is not None and again[1].id in near and new.valid_from >= again[1].valid_from:
        return Decision("UPDATE", new, again[1], f"said again after {again[1].content!r} replaced it", "exact")
    if not hits:
        return Decision("ADD", new, None, f"no memory within distance {CANDIDATE_DISTANCE}", "semantic")
    nearest = hits[0]
    if near_identical(new.content, nearest.memory.content, nearest.distance):
        return Decision("NOOP", nearest.memory, nearest.memory, "a near-identical memory", "semantic")
    decided = {} if decided is None else decided
    if all(new.valid_from < (h.memory.valid_from or 0) for h in hits):
        return _decide_late(new, hits, llm, decided)
    seen = tuple((h.memory.id, h.memory.content_hash, h.memory.invalid_at) for h in hits)
    calls = 0 if seen in decided else 1
    out = decided[seen] = decided.get(seen) or decide(new.content, [h.memory for h in hits], llm)
    if out.action == "ADD":
        return Decision("ADD", new, None, out.reason, "decided", calls)
    target = hits[out.target]
    if out.action == "NOOP":
        return Decision("NOOP", target.memory, target.memory, out.reason, "decided", calls)
    if out.content:  # the model reworded the fact it wants stored
        new.content, new.content_hash = out.content, content_hash(out.content)
    return Decision(out.action, new, target.memory, out.reason, "decided", calls)


def _decide_late(new: Memory, hits, llm, decided: dict) -> Decision:
    """A fact said before every candidate (a message remembered late, after an outage) is asked about in the
    order the user said things: each candidate, nearest first, as the NEW fact, this one as the EXISTING. Asked
    the other way round, "User lives in Porto" (said first) looks like news about "User moved to Berlin" (said
    after it). A candidate that replaces or ends it keeps it as history; one that says the same makes it NOOP."""
    calls, out = 0, None
    for hit in hits[:LATE_QUESTIONS]:
        key = ("late", hit.memory.id, hit.memory.content_hash, hit.memory.invalid_at)
        calls += key not in decided
        out = decided[key] = decided.get(key) or decide(hit.memory.content, [new.content], llm)
        if out.action == "NOOP":
            return Decision("NOOP", hit.memory, hit.memory, f"{out.reason} (said before it)", "decided", calls)
        if out.action in ("UPDATE", "INVALIDATE"):
            return Decision(out.action, new, hit.memory, f"{out.reason} (said after this fact)", "decided", calls)
    return Decision("ADD", new, None, out.reason, "decided", calls)


def _apply(store: MemoryStore, pipe, ledger: str, decision: Decision, vector, stamp_now: bool = True) -> None:
    """Queue the decision in the transaction (a WatchError makes it decide again). ``stamp_now``: the
    time is taken after the WATCHes, so it is later than every version this write can supersede."""
    new, target = decision.memory, decision.target
    closing = decision.action in ("UPDATE", "INVALIDATE") and target is not None
    drop_target = _watch_current(store, pipe, ledger, target) if closing else False
    if stamp_now:  # a clock behind the one that wrote the target still makes the new fact the current one
        new.created_at = new.updated_at = time.time()
        new.valid_from = max(new.created_at, target.valid_from or 0) if closing else new.created_at
    if closing and new.valid_from < (target.valid_from or 0):  # observed_at says: older than what we know
        into_the_past(store, pipe, decision, vector)
        return
    if closing:
        new.supersedes = target.id
    pipe.multi()
    store._write(new, vector, pipe=pipe)
    if new.invalid_at is None:
        pipe.hset(ledger, new.content_hash, new.id)
    if closing:
        _close(store, pipe, target, new.valid_from, new.id)
        if drop_target and target.content_hash != new.content_hash:
            pipe.hdel(ledger, target.content_hash)


def _watch_current(store: MemoryStore, pipe, ledger: str, target: Memory) -> bool:
    """WATCH ``target`` and check it is still current and unchanged (else WatchError: decide again); True if
    the exact-match ledger points to it."""
    pipe.watch(store.key(target.id, target.user_id))
    state = decoded(pipe.json().get(store.key(target.id, target.user_id), "$.invalid_at", "$.content_hash"))
    if not state or state["$.invalid_at"] or state["$.content_hash"] != [target.content_hash]:
        raise redis.WatchError("the target changed under us")  # deleted, closed or edited by another writer
    return pipe.hget(ledger, target.content_hash) == target.id
