"""Load: 8 users at once on ONE MemoryAgent whose model takes time to answer (the offline model behind a
fixed delay), two threads per user, several turns each. Every message is stored exactly once, in order
per thread, with its reply right after it; background writes (recall vectors, working memory, summaries)
reach every thread; no user's words appear in another user's threads, recall or working memory.

Turns per thread: ``MEMORYKIT_LOAD_AGENT_TURNS`` (default 12); model delay 50 ms per call.
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

TURNS = int(os.environ.get("MEMORYKIT_LOAD_AGENT_TURNS", "12"))
USERS = ["system", "a|b", "*", "{x}", "user 1", "User 1", "ユーザー", "a"]
THREADS = ["t1", "t2"]


class Delayed:
    """The offline model plus a fixed delay per call (a hosted model's round trip, shortened)."""

    def __init__(self, inner, delay_s: float):
        self.inner, self.delay, self.label = inner, delay_s, f"offline + {delay_s * 1000:.0f} ms"

    def perform(self, task, inp, tools=None):
        time.sleep(self.delay)
        return self.inner.perform(task, inp, tools=tools)

    def chat(self, messages, **kwargs):
        time.sleep(self.delay)
        return self.inner.chat(messages, **kwargs)


def said(u: int, thread: str, j: int) -> str:
    return f"Note {j} in {thread}: my code word is cw{u}x{j}."


def test_eight_users_on_one_agent_lose_nothing_and_keep_order(r, emb):
    ns = "loadone" + uuid.uuid4().hex[:6]
    agent = mk.MemoryAgent(r, llm=Delayed(mk.get_llm("offline"), 0.05), embedder=emb, namespace=ns,
                           summary_policy=ByCount(max_messages=10, keep_last=4))
    errors: list[str] = []

    def user(u: int, thread: str) -> None:
        for j in range(TURNS):
            turn = agent.chat(said(u, thread, j), user_id=USERS[u], thread_id=thread)
            if turn.error or turn.failed_steps:
                errors.append(f"{USERS[u]}/{thread}: {turn.error or turn.failed_steps}")

    workers = [threading.Thread(target=user, args=(u, t)) for u in range(len(USERS)) for t in THREADS]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    agent.flush()
    elapsed = time.perf_counter() - started
    try:
        summaries = 0
        for u, uid in enumerate(USERS):
            for thread in THREADS:
                history = agent.history(uid, thread)
                stored = history.messages()
                assert [m.content for m in stored if m.role == "user"] == [said(u, thread, j) for j in range(TURNS)]
                assert [m.role for m in stored] == ["user", "assistant"] * TURNS  # each reply right after its message
                assert len({m.id for m in stored}) == len(stored)
                assert all(f"cw{k}x" not in m.content for m in stored for k in range(len(USERS)) if k != u)
                assert agent.recall.count(uid, thread) == 2 * TURNS  # indexed once each
                summaries += history.summary() is not None
            hits = agent.recall.search("what is my code word?", user_id=uid, k=50, distance_threshold=2.0)
            assert hits and all(f"cw{u}x" in h.message.content or h.message.role == "assistant" for h in hits)
            assert all(f"cw{k}x" not in h.message.content for h in hits for k in range(len(USERS)) if k != u)
        print(f"\none agent, {len(USERS)} users x {len(THREADS)} threads x {TURNS} turns in {elapsed:.1f} s; "
              f"turn errors {len(errors)}, threads summarized {summaries}")
        assert not errors, errors[:3]
        assert summaries == len(USERS) * len(THREADS)
    finally:
        agent.close()
        for name in r.execute_command("FT._LIST"):
            if name.startswith(ns + "_"):
                r.execute_command("FT.DROPINDEX", name)
        for key in r.scan_iter(match=ns + ":*", count=1000):
            r.delete(key)
