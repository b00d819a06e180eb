"""Load suite: 8 memory agents on one user and thread, and 8 on eight users, 30 turns each,
with summaries and dedup running in the background. Nothing lost, nothing doubled, one
current version of each fact, and no user ever sees another user's memory.

Turns per agent: ``MEMORYKIT_LOAD_TURNS`` (default 30: the shared thread still gets 480 messages, so many
summaries, and each agent says three shared facts that other agents repeat; 60 took 394 s + 140 s of a
2-core CI run on 2026-11-28, 100 took 7.5 min earlier). The figures are printed (``-s``).
"""
from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

import memorykit as mk
from memorykit.memory.summarize import ByCount

pytestmark = pytest.mark.load

TURNS = int(os.environ.get("MEMORYKIT_LOAD_TURNS", "30"))
AGENTS = 8
SHARED_FACTS = ["I am allergic to peanuts.", "My sister is called Ines.", "I work as a nurse."]


def run_agents(r, emb, ns, users, thread_for, text_for):
    agents = [mk.MemoryAgent(r, llm=mk.get_llm("offline"), embedder=emb, namespace=ns, memory="full",
                             summary_policy=ByCount(max_messages=24, keep_last=8)) for _ in users]
    errors: list[str] = []

    def work(i):
        for j in range(TURNS):
            turn = agents[i].chat(text_for(i, j), user_id=users[i], thread_id=thread_for(i))
            if turn.error:
                errors.append(turn.error)
        agents[i].flush()

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(users))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for agent in agents:
        agent.close()
    return errors, elapsed


def text_for_shared(i, j):
    if j % 10 == 0:
        return SHARED_FACTS[(i + j // 10) % len(SHARED_FACTS)]
    return f"Agent {i} turn {j}: today I drank {j % 7 + 1} glasses of water."


def test_eight_agents_one_user_one_thread(r, emb):
    ns = "load" + uuid.uuid4().hex[:6]
    errors, elapsed = run_agents(r, emb, ns, ["shared"] * AGENTS, lambda i: "t", text_for_shared)
    history = mk.ChatHistory(r, "shared", "t", namespace=ns)
    stored = history.messages()
    sent = [text_for_shared(i, j) for i in range(AGENTS) for j in range(TURNS)]
    users = [m.content for m in stored if m.role == "user"]
    replies = [m for m in stored if m.role == "assistant"]
    lost = sum(max(0, sent.count(t) - users.count(t)) for t in set(sent))
    doubled = sum(max(0, users.count(t) - sent.count(t)) for t in set(sent))
    store = mk.MemoryStore(r, embedder=emb, namespace=ns)
    current = {f: [m for m in store.list(user_id="shared", memory_types=("episodic", "semantic"))
                   if m.content.rstrip(".").lower().endswith(f.split(" ", 2)[-1].rstrip(".").lower())]
               for f in SHARED_FACTS}
    print(f"\nsame user+thread: {AGENTS} agents x {TURNS} turns in {elapsed:.1f} s; sent {len(sent)}, "
          f"stored {len(users)} user + {len(replies)} replies, lost {lost}, doubled {doubled}, "
          f"turn errors {len(errors)}, summary {'yes' if history.summary() else 'no'}; "
          f"current versions per fact: {[len(v) for v in current.values()]}")
    assert not errors
    assert lost == 0 and doubled == 0 and len(replies) == len(sent)
    assert history.summary() is not None  # summaries ran, and the thread is still complete
    assert all(len(v) == 1 for v in current.values()), current


def test_eight_agents_eight_users_never_cross(r, emb):
    ns = "load" + uuid.uuid4().hex[:6]
    users = [f"user {i}" for i in range(AGENTS)]

    def text_for(i, j):
        if j % 5 == 0:
            return f"My locker code is {1000 + 111 * i}."
        return f"Turn {j}: I am planning a trip to city number {i}."

    errors, elapsed = run_agents(r, emb, ns, users, lambda i: f"thread-{i}", text_for)
    store = mk.MemoryStore(r, embedder=emb, namespace=ns)
    cross = 0
    for i, user in enumerate(users):
        for hit in store.search("what is my locker code?", user_id=user, k=20, distance_threshold=2.0):
            if hit.memory.user_id not in (user, "system"):
                cross += 1
        stored = mk.ChatHistory(r, user, f"thread-{i}", namespace=ns).messages()
        assert sum(m.role == "user" for m in stored) == TURNS
        assert all(f"{1000 + 111 * k}" not in m.content for m in stored for k in range(AGENTS) if k != i)
    print(f"\neight users: {AGENTS} agents x {TURNS} turns in {elapsed:.1f} s; turn errors {len(errors)}, "
          f"cross-user hits {cross}")
    assert not errors
    assert cross == 0
