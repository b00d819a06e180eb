"""Forgetting policies for long-term memory (as in Redis's agent-memory-server): by age, by
inactivity, by a per-user budget. A store that only grows gets slower and, for facts that change,
more often wrong. Pinned memories (``metadata.pinned``) are never forgotten. Deletions go through the
store's owner-checked script, so the exact-match ledger loses each entry in the same step.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from redisvl.query import FilterQuery

from .index import SHARED_TAG, decoded, json_docs, owner_of, tag_of
from .retrieval import DAY, Recency, as_float

_FIELDS = ["$.id", "$.user_id", "$.user_tag", "$.content", "$.created_at", "$.last_accessed", "$.invalid_at", "$.metadata.pinned"]


@dataclass(frozen=True)
class ForgettingPolicy:
    """What may be forgotten (unset rules do nothing). ``budget`` keeps each user's most recent current
    memories by :class:`Recency`, so a memory used yesterday outranks one merely created yesterday."""

    max_age_days: float | None = None
    max_inactive_days: float | None = None
    budget: int | None = None
    recency: Recency = field(default_factory=Recency)


@dataclass
class Forget:
    """One memory a policy selects, and why (``user_id`` None: shared knowledge)."""

    id: str
    user_id: str | None
    content: str
    reason: str


def plan(store, policy: ForgettingPolicy, *, user_id: str | None = None, shared: bool = False,
         now: float | None = None) -> list[Forget]:
    """The dry run: what the policy would delete and why, never a pinned memory. ``user_id``: one user's
    memories; ``shared=True``: shared knowledge only; neither: everyone's (the budget spares shared knowledge)."""
    now = time.time() if now is None else now
    out: dict[str, Forget] = {}
    kept: dict[str, list[tuple[float, str, dict]]] = defaultdict(list)
    rows = _rows(store, _keys(store, user_id, shared))
    used_at = _last_used(store, rows)
    for row in rows:
        mid = row["$.id"]
        owner = row.get("$.user_tag", "")
        if str(row.get("$.metadata.pinned", "")).lower() in ("true", "1"):
            continue
        created = as_float(row.get("$.created_at")) or now
        used = max(filter(None, (as_float(row.get("$.last_accessed")), used_at.get(mid))), default=created)
        invalid = as_float(row.get("$.invalid_at"))
        age, idle = (now - created) / DAY, (now - used) / DAY
        reason = None
        if policy.max_age_days is not None and age > policy.max_age_days:
            reason = f"age {age:.0f} d > {policy.max_age_days:g} d"
        elif policy.max_inactive_days is not None and idle > policy.max_inactive_days:
            reason = f"not used for {idle:.0f} d > {policy.max_inactive_days:g} d"
        info = dict(id=mid, user_id=None if owner == SHARED_TAG else row.get("$.user_id"), content=row.get("$.content", ""))
        if reason:
            out[mid] = Forget(reason=reason, **info)
        elif invalid is None:
            kept[owner].append((policy.recency.score(created, used, now), mid, info))
    if policy.budget is not None:
        for owner, items in kept.items():
            if owner == SHARED_TAG and not shared:
                continue
            items.sort(key=lambda t: (-t[0], t[1]))
            for place, (score, mid, info) in enumerate(items[policy.budget:], policy.budget + 1):
                out[mid] = Forget(reason=f"over budget: #{place} of {len(items)} by recency "
                                         f"({score:.2f}), budget {policy.budget}", **info)
    return sorted(out.values(), key=lambda f: (f.user_id or "", f.reason, f.id))


def _keys(store, user_id: str | None, shared: bool) -> list[str]:
    """Document keys of one owner's memories (current and superseded), from the owner's id registry; everyone's
    (neither given) from the text index, which needs the query engine."""
    if user_id is None and not shared:
        everyone = FilterQuery(filter_expression="*", return_fields=["id"], num_results=1000)
        index = store.need_index("a forgetting policy over every user (pass user_id= or shared=True)")
        return [row["id"] for page in index.paginate(everyone, page_size=1000) for row in page]
    owner = owner_of(user_id, shared)
    return [store.key(mid, owner) for mid in store.redis.zrange(store.ids_key(owner), 0, -1)]


def _rows(store, keys: list[str]) -> list[dict]:
    """The fields a policy reads, per memory (path -> value; absent paths left out)."""
    docs = json_docs(store.redis, keys, *_FIELDS)
    return [{p: v[0] for p, v in doc.items() if v} for doc in docs if doc and doc.get("$.id")]


def _last_used(store, rows: list[dict]) -> dict[str, float]:
    """When a search last returned each row's memory, from its owner's access set (one read per owner)."""
    by_owner: dict[str | None, list[str]] = defaultdict(list)
    for row in rows:
        owner = None if row.get("$.user_tag") == SHARED_TAG else row.get("$.user_id")
        if owner is not None or row.get("$.user_tag") == SHARED_TAG:
            by_owner[owner].append(row["$.id"])
    used: dict[str, float] = {}
    for owner, ids in by_owner.items():
        used.update(store.last_used([owner], ids))
    return used


def forget(store, policy: ForgettingPolicy, *, user_id: str | None = None, shared: bool = False,
           now: float | None = None) -> list[Forget]:
    """Apply the policy (:func:`plan` is its dry run): returns what was deleted, each memory with its
    ledger entry and access time in one step (a memory changed owner or vanished meanwhile is left alone)."""
    doomed = plan(store, policy, user_id=user_id, shared=shared, now=now)
    done = store._drop([(f.id, f.user_id) for f in doomed]) if doomed else []
    return [f for f, ok in zip(doomed, done) if ok > 0]


def pin(store, memory_id: str, pinned: bool = True, *, user_id: str | None = None, shared: bool = False) -> bool:
    """Exempt the owner's memory from every forgetting policy (or lift the exemption); False if there is no
    such memory for this owner (another user's included). One JSON path written, under WATCH."""
    owner = owner_of(user_id, shared)
    tag, key = tag_of(owner), store.key(memory_id, owner)

    def attempt(pipe) -> bool:
        if decoded(pipe.json().get(key, "$.user_tag")) != [tag]:
            return False
        pipe.multi()
        pipe.json().set(key, "$.metadata.pinned", bool(pinned))
        return True

    return store.redis.transaction(attempt, key, value_from_callable=True)
