"""A fact's versions: a chain of memories linked both ways (``supersedes`` / ``superseded_by``), each true from
``valid_from`` until ``invalid_at``. Queued inside the caller's optimistic transaction (:mod:`.dedup`).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Sequence

from . import vectors
from .index import decoded, tag_of

if TYPE_CHECKING:
    from .dedup import Decision
    from .long_term import Memory, MemoryStore

CHAIN_LIMIT = 64  # links followed from a closed version to the current one (a chain is rarely more than a few)


def said_again(store: MemoryStore, new: Memory, vector: Sequence[float], k: int = 5) -> tuple[Memory, Memory] | None:
    """(closed version with ``new``'s text, current version that replaced it) if ``new`` says again what a newer
    memory replaced ("plays tennis", "no longer plays tennis", "plays tennis"): the newer one is no longer true.
    None if no closed version says it, or its chain ends in a deleted version."""
    owner = new.user_id
    closed = vectors.where([new.memory_type], closed=True)
    rows = vectors.search(store.redis, [(store.vectors_key(owner), closed)], vector, k)[0]
    loaded = store._load([store.key(mid, owner) for mid, _, _ in rows])
    for old, tag in loaded:
        if old is None or tag != tag_of(owner) or old.content_hash != new.content_hash:
            continue
        head = old
        for _ in range(CHAIN_LIMIT):
            if head is None or head.is_current or not head.superseded_by:
                break
            head, tag = store._load([store.key(head.superseded_by, owner)])[0]
            head = head if tag == tag_of(owner) else None
        if head is not None and head.is_current and head.memory_type == new.memory_type:
            return old, head
    return None


def version(store: MemoryStore, pipe, memory_id: str | None, owner: str | None) -> Memory | None:
    """WATCH and read one version of a chain (None: no link, deleted, or not this owner's)."""
    if not memory_id:
        return None
    pipe.watch(store.key(memory_id, owner))
    memory, tag = store._parse(decoded(pipe.json().get(store.key(memory_id, owner), "$")))
    return memory if memory is not None and tag == tag_of(owner) else None


def into_the_past(store: MemoryStore, pipe, decision: Decision, vector) -> None:
    """Queue a fact observed before the current version ``decision.target``: it goes into that chain at its
    time, after the version it follows (closed then) and before the next (which now supersedes it), every
    version read under WATCH. If the version true at that time says the same, it already held: NOOP; if the
    next one says the same, that one held from this earlier time on."""
    new, owner = decision.memory, decision.target.user_id
    after, before = decision.target, version(store, pipe, decision.target.supersedes, owner)
    while before is not None and (before.valid_from or 0) > new.valid_from:
        after, before = before, version(store, pipe, before.supersedes, owner)
    pipe.multi()
    if before is not None and before.content_hash == new.content_hash:
        decision.action, decision.memory = "NOOP", before
        decision.reason += " (already known for that time)"
        return
    if after.content_hash == new.content_hash:
        pipe.json().merge(store.key(after.id, owner), "$", {"valid_from": new.valid_from, "updated_at": time.time()})
        after.valid_from = new.valid_from
        vectors.set_attributes(pipe, store.vectors_key(owner), after)
        if before is not None:
            close(store, pipe, before, new.valid_from, after.id)
        decision.action, decision.memory = "NOOP", after
        decision.reason += " (a later version says the same: it held from this earlier time)"
        return
    new.invalid_at, new.superseded_by, new.supersedes = after.valid_from, after.id, before.id if before else None
    decision.reason += " (older than the current memory: kept as history)"
    store._write(new, vector, pipe=pipe)
    if before is not None:
        close(store, pipe, before, new.valid_from, new.id)
    pipe.json().merge(store.key(after.id, owner), "$", {"supersedes": new.id})
    after.supersedes = new.id


def close(store: MemoryStore, pipe, memory: Memory, at: float, by: str) -> None:
    """Queue: ``memory`` stops being current at ``at``, replaced by ``by``: one JSON.MERGE, and the validity
    its vector's attributes carry for FILTER, in the same transaction."""
    now = time.time()
    pipe.json().merge(store.key(memory.id, memory.user_id), "$",
                      {"invalid_at": at, "superseded_by": by, "updated_at": now})
    memory.invalid_at, memory.superseded_by, memory.updated_at = at, by, now
    vectors.set_attributes(pipe, store.vectors_key(memory.user_id), memory)
