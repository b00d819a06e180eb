"""What durability costs: thread appends per second with appendfsync always / everysec / no.

    python benchmarks/aof.py [--n 3000]

Each setting gets its own embedded server in a temp dir (MEMORYKIT_HOME), so the shared
one is untouched. Printed as ratios to ``everysec`` (the embedded server's default), measured
in one run on this machine.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from memorykit import server as client
from memorykit.course import redis_server as server
from memorykit.memory.short_term import ChatHistory
from memorykit.messages import Message


def appends_per_second(fsync: str, n: int) -> float:
    with tempfile.TemporaryDirectory() as home:
        os.environ["MEMORYKIT_HOME"] = home
        os.environ["MEMORYKIT_REDIS_APPENDFSYNC"] = fsync
        os.environ.pop("REDIS_URL", None)
        try:
            r = client.connect()
            assert r.config_get("appendfsync")["appendfsync"] == fsync
            history = ChatHistory(r, "bench", "t", namespace="aof")
            messages = [Message(role="user", content=f"message {i} " + "x" * 200) for i in range(n)]
            started = time.perf_counter()
            for m in messages:
                history.append(m)
            return n / (time.perf_counter() - started)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    rates = {fsync: appends_per_second(fsync, args.n) for fsync in ("everysec", "always", "no")}
    base = rates["everysec"]
    print(f"{'appendfsync':<12} {'appends/s':>10} {'vs everysec':>12}")
    for fsync, rate in rates.items():
        print(f"{fsync:<12} {rate:>10.0f} {rate / base:>11.2f}x")


if __name__ == "__main__":
    main()
