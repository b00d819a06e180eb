"""Procedural memory: LLM round trips and time per query, cold vs warm; suggestion latency.

    .venv/bin/python benchmarks/procedural.py [--rounds 5]

1. Learn: the agent answers the ``train`` queries of data/wellness/queries.jsonl and keeps
   the patterns that score >= 0.7.
2. Cold: a fresh agent without procedural memory answers every query (train + paraphrase).
3. Warm: the agent with the learned patterns answers the same queries.
Times are medians over ``--rounds`` repetitions, all measured in this run. With the
offline model an LLM round trip costs well under a millisecond, so the time ratio here
is dominated by tools and the suggestion lookup; with a hosted model each saved round
trip saves a network call, which is what the steps ratio counts.
Also: the suggestion lookup (embed + KNN + read) as a ratio of one embedding.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

import memorykit as mk

ROOT = Path(__file__).resolve().parent.parent
USER = "wellness_user"


def drop(r, ns: str) -> None:
    for name in r.execute_command("FT._LIST"):
        if name.startswith(f"{ns}_"):
            r.execute_command("FT.DROPINDEX", name)
    keys = list(r.scan_iter(match=f"{ns}:*", count=1000))
    if keys:
        r.delete(*keys)


def measure(agent, queries, rounds):
    rows = []
    for q in queries:
        runs = [agent.run(q["query"], user_id=USER) for _ in range(rounds)]
        rows.append({"id": q["id"], "split": q["split"], "steps": runs[0].steps,
                     "time_ms": statistics.median(r.execution_time_ms for r in runs),
                     "tools_ok": sorted(set(runs[0].tools_used)) == sorted(q["tools"]),
                     "suggested": runs[0].suggestion is not None})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    queries = [json.loads(x) for x in (ROOT / "data/wellness/queries.jsonl").read_text().splitlines() if x.strip()]
    r = mk.connect()
    emb = mk.get_embedder(r)
    llm = mk.OfflineChat()
    ns = "bench_proc_" + uuid.uuid4().hex[:6]
    try:
        store = mk.MemoryStore(r, emb, namespace=ns)
        for line in (ROOT / "data/wellness/goals.jsonl").read_text().splitlines():
            goal = json.loads(line)
            store.add(goal["content"], user_id=goal["user_id"])
        procs = mk.ProcedureStore(r, emb, namespace=ns)
        tools = mk.wellness_tools(USER, store=store, procedures=procs)
        learner = mk.ToolAgent(r, llm=llm, tools=tools, procedures=procs)
        for q in queries:
            if q["split"] == "train":
                learner.run(q["query"], user_id=USER)
        cold = measure(mk.ToolAgent(r, llm=llm, tools=tools), queries, args.rounds)
        warm = measure(mk.ToolAgent(r, llm=llm, tools=tools, procedures=procs, learn=False), queries, args.rounds)

        print(f"patterns learned from {sum(q['split'] == 'train' for q in queries)} train queries: {procs.count()}")
        print(f"{'split':<11}{'n':>3}{'hits':>6}{'steps cold':>12}{'steps warm':>12}{'ratio':>7}"
              f"{'ms cold':>9}{'ms warm':>9}{'ratio':>7}{'tools ok c/w':>14}")
        for split in ("train", "paraphrase", "all"):
            c = [x for x in cold if split in ("all", x["split"])]
            w = [x for x in warm if split in ("all", x["split"])]
            sc, sw = sum(x["steps"] for x in c), sum(x["steps"] for x in w)
            tc, tw = sum(x["time_ms"] for x in c), sum(x["time_ms"] for x in w)
            print(f"{split:<11}{len(c):>3}{sum(x['suggested'] for x in w):>6}{sc / len(c):>12.2f}"
                  f"{sw / len(w):>12.2f}{sw / sc:>7.2f}{tc / len(c):>9.1f}{tw / len(w):>9.1f}{tw / tc:>7.2f}"
                  f"{sum(x['tools_ok'] for x in c):>8}/{sum(x['tools_ok'] for x in w)}")

        # suggestion latency vs one (uncached) embedding, on texts never seen before
        n = 30
        texts = [f"{q['query']} (variant {i})" for i in range(n // len(queries) + 1) for q in queries][:n]
        t0 = time.perf_counter()
        for t in texts:
            emb.embed(t + " #embed")
        embed_ms = (time.perf_counter() - t0) * 1000 / n
        t0 = time.perf_counter()
        for t in texts:
            procs.suggest(t + " #suggest", k=3)
        suggest_ms = (time.perf_counter() - t0) * 1000 / n
        print(f"suggestion lookup: {suggest_ms:.1f} ms vs one embedding {embed_ms:.1f} ms "
              f"-> ratio {suggest_ms / embed_ms:.2f}")
        emb.forget([t + " #embed" for t in texts] + [t + " #suggest" for t in texts])
    finally:
        drop(r, ns)


if __name__ == "__main__":
    main()
