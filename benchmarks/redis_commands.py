"""Redis commands per turn of one agent (``INFO commandstats`` before and after, commands run inside scripts
included): what keeping a backlog of what is left to remember (``ns:backlog:{user}``) costs.

Full memory, the offline model, 4 users, 20 turns, each turn flushed::

    .venv/bin/python benchmarks/redis_commands.py [--turns 20]

Measured 2026-11-27, the same script on the code before the backlog (bc90a0a) and after: 73.4 commands per turn
before, 89.4 after (+16: per append one EVAL inside the append's existing transaction that runs TIME, ZADD and
EXPIRE; per background job one EVALSHA that runs TIME, ZREM, HDEL, EXISTS and DEL or ZRANGEBYSCORE). Round trips:
none more that the user waits for, one more per background job.
"""
from __future__ import annotations

import argparse
import uuid

import memorykit as mk

TEXTS = ["I live in Lisbon.", "I like jazz.", "What do I like?", "I work as a nurse.", "Where do I live?"]


def per_turn(r, agent, turns: int) -> dict[str, float]:
    before = {k: v["calls"] for k, v in r.info("commandstats").items()}
    for i in range(turns):
        agent.chat(TEXTS[i % len(TEXTS)], user_id=f"user{i % 4}", thread_id="t1")
        agent.flush()
    after = {k: v["calls"] for k, v in r.info("commandstats").items()}
    delta = {k.removeprefix("cmdstat_"): (after[k] - before.get(k, 0)) / turns for k in after}
    return {k: v for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v > 0 and k != "info"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    r = mk.connect()
    ns = "benchcmd" + uuid.uuid4().hex[:6]
    agent = mk.MemoryAgent(r, llm=mk.get_llm("offline"), embedder=mk.get_embedder(r), namespace=ns)
    agent.chat("warm up", user_id="warm", thread_id="t"), agent.flush()
    stats = per_turn(r, agent, args.turns)
    agent.close()
    print(f"commands per turn: {sum(stats.values()):.1f} (offline model, {args.turns} turns, 4 users)")
    print("the backlog's:", {k: round(stats.get(k, 0), 2) for k in ("zadd", "expire", "evalsha", "eval")})
    print("all:", {k: round(v, 2) for k, v in stats.items()})
    for k in r.scan_iter(match=f"{ns}:*"):
        r.delete(k)


if __name__ == "__main__":
    main()
