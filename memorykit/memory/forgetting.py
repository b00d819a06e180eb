"""Forgetting policies for long-term memory (as in Redis's agent-memory-server): by age, by
inactivity, by a per-user budget. A store that only grows gets slower and, for facts that change,
more often wrong. Pinned memories (``metadata.pinned``) are never forgotten.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from redisvl.query import FilterQuery

from .index import SYSTEM_USER, delete_keys, owner_filter
from .retrieval import DAY, Recency, as_float

_FIELDS = ["id", "$.user_id", "$.content", "$.created_at", "$.last_accessed", "$.invalid_at", "$.metadata.pinned"]


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
    """One memory a policy selects, and why."""

    id: str
    user_id: str
    content: str
    reason: str


def plan(store, policy: ForgettingPolicy, *, user_id: str | None = None,
         now: float | None = None) -> list[Forget]:
    """The dry run: what the policy would delete and why, never a pinned memory (``user_id``: one owner)."""
    now = time.time() if now is None else now
    everyone = FilterQuery(filter_expression=owner_filter(user_id) if user_id is not None else "*",
                           return_fields=_FIELDS, num_results=1000)  # current and superseded
    out: dict[str, Forget] = {}
    kept: dict[str, list[tuple[float, str, dict]]] = defaultdict(list)
    rows = [row for page in store.index.paginate(everyone, page_size=1000) for row in page]
    used_at = _last_used(store, rows)
    for row in rows:
        mid = row["id"].rsplit(":", 1)[-1]
        owner = row.get("$.user_id", "")
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
        info = dict(id=mid, user_id=owner, content=row.get("$.content", ""))
        if reason:
            out[mid] = Forget(reason=reason, **info)
        elif invalid is None:
            kept[owner].append((policy.recency.score(created, used, now), mid, info))
    if policy.budget is not None:
        for owner, items in kept.items():
            if owner == SYSTEM_USER and user_id != SYSTEM_USER:
                continue
            items.sort(key=lambda t: (-t[0], t[1]))
            for place, (score, mid, info) in enumerate(items[policy.budget:], policy.budget + 1):
                out[mid] = Forget(reason=f"over budget: #{place} of {len(items)} by recency "
                                         f"({score:.2f}), budget {policy.budget}", **info)
    return sorted(out.values(), key=lambda f: (f.user_id, f.reason, f.id))


def _last_used(store, rows: list[dict]) -> dict[str, float]:
    """When a search last returned each row's memory, from its owner's access set (one read per owner)."""
    by_owner: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row.get("$.user_id"):
            by_owner[row["$.user_id"]].append(row["id"].rsplit(":", 1)[-1])
    used: dict[str, float] = {}
    for owner, ids in by_owner.items():
        used.update(store.last_used([owner], ids))
    return used


def forget(store, policy: ForgettingPolicy, *, user_id: str | None = None, now: float | None = None) -> list[Forget]:
    """Apply the policy (:func:`plan` is its dry run): returns what was deleted."""
    doomed = plan(store, policy, user_id=user_id, now=now)
    if doomed:
        delete_keys(store.redis, [store.key(f.id) for f in doomed])
        pipe = store.redis.pipeline(transaction=False)
        for f in doomed:
            pipe.zrem(store.access_key(f.user_id), f.id)
        pipe.execute()
    return doomed


def pin(store, memory_id: str, pinned: bool = True) -> bool:
    """Exempt a memory from every forgetting policy (or lift the exemption)."""
    key = store.key(memory_id)
    if not store.redis.exists(key):
        return False
    store.redis.json().set(key, "$.metadata.pinned", bool(pinned))
    return True
