"""Many users on one agent: does a user wait for other users' memory writes?

One ``MemoryAgent`` (full memory, the offline model behind a fixed simulated delay per call,
labelled, default 0.5 s: a hosted model's round trip) serves first one user, then 8 users at
once (one thread each, several turns each, each user in their own conversation thread). Every
turn is timed from ``chat()`` to its return (what the user waits, including the wait for that
thread's earlier background writes). Prints, measured in one run:

- median reply ratio: median reply time with 8 users / with 1 user (target <= 1.5x);
- throughput ratio: turns per second with 8 users / with 1 user (target >= 5x);
- busy-neighbour ratio: seconds until one user's turn is remembered (its background writes done) just after
  another user started slow writes (3 s) in as many threads as the agent has writers / with nobody else
  (target <= 1.5x).

    .venv/bin/python benchmarks/multiuser.py [--users 8] [--turns 4] [--llm-latency-ms 500]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

import memorykit as mk
from agent import Delayed  # benchmarks/agent.py: the offline model plus a fixed delay per call

NS = "benchmultiuser"
LINES = ["Hi, my name is {name} and I live in {city}.", "I started running three times a week.",
         "My goal is to sleep eight hours a night.", "What do you remember about me?",
         "I prefer short answers.", "Where do I live?"]
PEOPLE = [("Ana", "Lisbon"), ("Bo", "Oslo"), ("Chen", "Taipei"), ("Dara", "Dublin"), ("Eli", "Quito"),
          ("Femi", "Lagos"), ("Gus", "Perth"), ("Hana", "Kyoto"), ("Ivo", "Split"), ("Jun", "Busan")]


def clean(r, namespace: str) -> None:
    for name in r.execute_command("FT._LIST"):
        if name.startswith(namespace + "_"):
            r.execute_command("FT.DROPINDEX", name)
    doomed = list(r.scan_iter(match=namespace + ":*"))
    for i in range(0, len(doomed), 500):
        r.delete(*doomed[i:i + 500])


def user_turns(i: int, turns: int) -> list[str]:
    name, city = PEOPLE[i % len(PEOPLE)]
    return [LINES[t % len(LINES)].format(name=name, city=city) for t in range(turns)]


def run(agent, users: int, turns: int) -> tuple[list[float], float, list[str]]:
    """Every user chats in their own thread at once; returns reply times (ms), wall time (s), failures."""
    replies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def user(i: int) -> None:
        for text in user_turns(i, turns):
            turn = agent.chat(text, user_id=f"user {i}", thread_id="chat")
            with lock:
                replies.append(turn.reply_ms)
                if turn.error:
                    failures.append(turn.error)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    agent.flush()
    return replies, wall, failures


class SlowWrites(Delayed):
    """``Delayed``, and ``extra_ms`` more for memory extraction of a message that mentions a marathon: the
    heavy user's background writes are slow (a long message, a slow model), their replies are not."""

    def __init__(self, inner, delay_ms: float, extra_ms: float = 3000.0):
        super().__init__(inner, delay_ms)
        self.extra = extra_ms / 1000

    def perform(self, task, inp, tools=None):
        if task.name == "extract_memories" and "marathon" in inp.model_dump_json():
            time.sleep(self.extra)
        return super().perform(task, inp, tools=tools)


def remembered_after(agent, heavy_threads: int = 0) -> float:
    """Seconds from one light user's turn until its memory writes are done, just after a heavy user said
    something slow to remember in ``heavy_threads`` threads at once."""
    heavy = [threading.Thread(target=lambda t=t: agent.chat("I am training for a marathon.", user_id="heavy",
                                                            thread_id=f"t{t}")) for t in range(heavy_threads)]
    for h in heavy:
        h.start()
    for h in heavy:
        h.join()
    start = time.perf_counter()
    agent.chat("I am allergic to penicillin.", user_id="light", thread_id="chat")
    while agent.pending("light", "chat"):
        time.sleep(0.01)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--llm-latency-ms", type=float, default=500.0)
    args = parser.parse_args()
    r = mk.connect()
    emb = mk.get_embedder(r)
    llm = Delayed(mk.get_llm("offline"), args.llm_latency_ms)
    results = {}
    warm = mk.MemoryAgent(r, llm=mk.get_llm("offline"), embedder=emb, namespace=NS + "warm")
    try:  # every task once, undelayed: the offline models load lazily, and neither run should pay for it
        run(warm, 1, len(LINES))
    finally:
        warm.close()
        clean(r, NS + "warm")
    for users in (1, args.users):
        namespace = f"{NS}{users}"
        clean(r, namespace)
        agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=namespace)
        try:
            replies, wall, failures = run(agent, users, args.turns)
        finally:
            agent.close()
            clean(r, namespace)
        if failures:
            raise SystemExit(f"{len(failures)} turns failed, first: {failures[0]}")
        results[users] = (statistics.median(replies), len(replies) / wall)
        print(f"{users} user(s) x {args.turns} turns, {llm.label}: median reply {results[users][0]:.0f} ms, "
              f"p90 {sorted(replies)[int(0.9 * (len(replies) - 1))]:.0f} ms, "
              f"throughput {results[users][1]:.2f} turns/s ({wall:.1f} s wall)")
    (m1, t1), (mn, tn) = results[1], results[args.users]
    print(f"median reply ratio {args.users} users / 1 user: {mn / m1:.2f}x (target <= 1.5x)")
    print(f"throughput ratio {args.users} users / 1 user: {tn / t1:.2f}x (target >= 5x)")
    took = {}
    for heavy in (0, 8):
        namespace = f"{NS}n{heavy}"
        clean(r, namespace)
        slow = SlowWrites(mk.get_llm("offline"), args.llm_latency_ms)
        agent = mk.MemoryAgent(r, llm=slow, embedder=emb, namespace=namespace, writers=8)
        try:
            took[heavy] = remembered_after(agent, heavy)
        finally:
            agent.close()
            clean(r, namespace)
        print(f"a turn remembered after {took[heavy]:.2f} s, {heavy} threads of another user writing for 3 s "
              f"(8 writers)")
    print(f"busy-neighbour ratio: {took[8] / took[0]:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
