"""Forgetting policies: age, inactivity, per-user budget; pinned memories stay."""
from __future__ import annotations

import time

import pytest

from memorykit.memory import forgetting as fg
from memorykit.memory.long_term import MemoryStore

DAY = 86400.0


@pytest.fixture
def store(r, emb, ns):
    return MemoryStore(r, emb, namespace=ns)


def add(store, text, user="ana", created_days=0.0, used_days=None, now=None, mtype="episodic"):
    m = store.add(text, user_id=user, memory_type=mtype, shared=user is None)
    m.created_at = now - created_days * DAY
    if used_days is not None:
        m.last_accessed = now - used_days * DAY
    store._write(m)  # backdated: the document, its registry entry and its vector's attributes
    return m


def test_age_and_inactivity_with_reasons(store):
    now = time.time()
    old = add(store, "Ana lived in Leeds", created_days=400, used_days=2, now=now)
    idle = add(store, "Ana liked jazz", created_days=100, used_days=95, now=now)
    fresh = add(store, "Ana lives in Porto", created_days=3, now=now)
    twin = add(store, "Ana lived in Leeds", user="ana ", created_days=3, now=now)  # a look-alike owner
    policy = fg.ForgettingPolicy(max_age_days=365, max_inactive_days=90)
    plan = fg.plan(store, policy, now=now)
    why = {f.id: f.reason for f in plan}
    assert set(why) == {old.id, idle.id}
    assert why[old.id].startswith("age 400 d > 365 d")
    assert why[idle.id].startswith("not used for 95 d > 90 d")
    assert store.get(old.id, "ana") is not None  # a plan is a dry run
    assert fg.plan(store, policy, user_id="ana ", now=now) == []
    assert {f.id for f in fg.forget(store, policy, now=now)} == {old.id, idle.id}
    assert store.get(old.id, "ana") is None and store.get(idle.id, "ana") is None
    assert store.get(fresh.id, "ana") is not None and store.get(twin.id, "ana ") is not None


def test_pinned_memories_are_never_forgotten(store):
    now = time.time()
    keep = add(store, "Ana is allergic to penicillin", created_days=900, now=now)
    assert not fg.pin(store, keep.id, user_id="system")  # another user's memory: like a missing one
    assert [f.id for f in fg.plan(store, fg.ForgettingPolicy(max_age_days=30), now=now)] == [keep.id]
    assert fg.pin(store, keep.id, user_id="ana")
    assert fg.plan(store, fg.ForgettingPolicy(max_age_days=30, budget=0), now=now) == []
    assert fg.pin(store, keep.id, pinned=False, user_id="ana")
    assert [f.id for f in fg.plan(store, fg.ForgettingPolicy(max_age_days=30), now=now)] == [keep.id]
    assert not fg.pin(store, "no-such-id", user_id="ana")


def test_budget_keeps_the_most_recent_per_user(store):
    now = time.time()
    ana = [add(store, f"Ana fact {i}", created_days=10 * i, now=now) for i in range(5)]
    bo = [add(store, f"Bo fact {i}", user="bo", created_days=10 * i, now=now) for i in range(2)]
    used = add(store, "Ana fact used yesterday", created_days=200, used_days=1, now=now)
    plan = fg.plan(store, fg.ForgettingPolicy(budget=3), now=now)
    assert {f.id for f in plan} == {ana[2].id, ana[3].id, ana[4].id}  # "used" outranks newer ones
    assert used.id not in {f.id for f in plan}
    assert all(f.user_id == "ana" and "over budget" in f.reason for f in plan)
    assert fg.plan(store, fg.ForgettingPolicy(budget=3), user_id="bo", now=now) == []
    assert {f.id for f in fg.plan(store, fg.ForgettingPolicy(budget=1), user_id="bo", now=now)} == {bo[1].id}


def test_budget_skips_superseded_versions_and_shared_facts(store):
    now = time.time()
    sem = add(store, "Water boils at 100 C", user=None, created_days=500, now=now, mtype="semantic")
    epi = add(store, "Ana ran a marathon", created_days=500, now=now)
    epi.invalid_at = now - 40 * DAY
    store._write(epi)
    assert fg.plan(store, fg.ForgettingPolicy(budget=0), user_id="ana", now=now) == []  # superseded: not budgeted
    assert sem.id not in {f.id for f in fg.plan(store, fg.ForgettingPolicy(budget=0), now=now)}
    mine = add(store, "Water boils at 90 C up a mountain", user="system", created_days=500, now=now, mtype="semantic")
    assert mine.id in {f.id for f in fg.plan(store, fg.ForgettingPolicy(budget=0), now=now)}  # just a user
    assert [f.id for f in fg.plan(store, fg.ForgettingPolicy(budget=0), shared=True, now=now)] == [sem.id]
    assert [f.user_id for f in fg.forget(store, fg.ForgettingPolicy(budget=0), shared=True, now=now)] == [None]
    assert store.get(sem.id, shared=True) is None and store.get(mine.id, "system") is not None
