"""Short-term memory benchmark: append / read-window latency, and prompt tokens per turn
over 500 turns for full history, trimming and summarization. Prints ratios from one run.

    .venv/bin/python benchmarks/short_term.py [--turns 500]
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import time
from pathlib import Path

import memorykit as mk
from memorykit import Message

NS = "bench_short_term"
DATA = Path(__file__).resolve().parent.parent / "data" / "conversations" / "long_coaching.jsonl"


def clean(r) -> None:
    for k in r.scan_iter(f"{NS}:*"):
        r.delete(k)


def timed(fn, n: int) -> float:
    """Median seconds per call over ``n`` calls."""
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def latency(r) -> None:
    h = mk.ChatHistory(r, "bench", "latency", namespace=NS)
    msg = Message(role="user", content="My resting heart rate is 72 bpm. " * 4)
    append = timed(lambda: h.append(msg), 2000)
    read10 = timed(lambda: h.messages(last_n=10), 1000)
    read_all = timed(lambda: h.messages(), 50)
    ping = timed(r.ping, 1000)
    print(f"thread of {len(h)} messages; ratios to one PING round trip:")
    print(f"  append (RPUSH + EXPIRE + ZADD in one MULTI)  {append / ping:6.1f}x")
    print(f"  read last 10 (LRANGE -10 -1 + decode)        {read10 / ping:6.1f}x")
    print(f"  read all {len(h)} (LRANGE 0 -1 + decode)      {read_all / ping:6.1f}x")
    print(f"  read all / read last 10                      {read_all / read10:6.1f}x")


def turns(n: int) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    pairs = [(u["content"], a["content"]) for u, a in zip(rows[::2], rows[1::2])]
    return [pairs[i % len(pairs)] if i < len(pairs) else
            (f"{pairs[i % len(pairs)][0]} (week {i // len(pairs) + 1})", pairs[i % len(pairs)][1])
            for i in range(n)]


def tokens_per_turn(r, n: int) -> None:
    llm = mk.get_llm()
    strategies = {"full": None, "trim (last 20)": None,
                  "summarize ByCount(10, 4)": mk.ByCount(max_messages=10, keep_last=4),
                  "summarize ByTokens(1000, 10)": mk.ByTokens(max_tokens=1000, keep_last=10)}
    results: dict[str, list[int]] = {}
    calls: dict[str, int] = {}
    kept: dict[str, int] = {}
    keywords = [row["keyword"] for row in csv.DictReader(open(DATA.with_name("long_coaching_facts.csv")))]
    for name, policy in strategies.items():
        h = mk.ChatHistory(r, "bench", name.split()[0] + str(len(results)), namespace=NS)
        h.append(Message(role="system", content="You are a friendly running coach."))
        results[name], calls[name] = [], 0
        for user, assistant in turns(n):
            h.append(Message(role="user", content=user))
            if policy is not None:
                calls[name] += mk.summarize_if_needed(h, llm, policy=policy)
            prompt = h.prompt_messages()
            if name.startswith("trim"):
                prompt = mk.trim_last(prompt, 20)
            results[name].append(mk.count_tokens(prompt))
            h.append(Message(role="assistant", content=assistant))
        text = "\n".join(m.content for m in prompt)
        kept[name] = sum(bool(re.search(rf"\b{re.escape(k)}\b", text)) for k in keywords)
    full = results["full"]
    marks = [m for m in (10, 50, 100, 250, 500, n) if m <= n]
    marks = sorted(set(marks))
    print("\nfacts = planted facts (data/conversations/long_coaching_facts.csv) still in the last prompt")
    print(f"prompt tokens per turn (chars/4 estimate), as a share of full history; {n} turns")
    print(f"{'strategy':30}" + "".join(f"{'t=' + str(m):>9}" for m in marks) + f"{'mean':>9}{'calls':>7}{'facts':>7}")
    for name, toks in results.items():
        cells = "".join(f"{toks[m - 1] / full[m - 1]:9.0%}" for m in marks)
        print(f"{name:30}{cells}{statistics.mean(toks) / statistics.mean(full):9.0%}{calls[name]:7}{kept[name]:>5}/{len(keywords)}")
    for name in strategies:
        if name.startswith("summarize"):
            print(f"{name}: {1 - results[name][-1] / full[-1]:.1%} fewer prompt tokens than full history at turn {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    args = parser.parse_args()
    r = mk.connect()
    clean(r)
    try:
        latency(r)
        tokens_per_turn(r, args.turns)
    finally:
        clean(r)


if __name__ == "__main__":
    main()
