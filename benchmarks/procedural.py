"""Procedural memory: tool-set accuracy, LLM round trips and time, cold vs warm; suggestion latency.

    .venv/bin/python benchmarks/procedural.py [--queries data/routes/tools_heldout.jsonl] [--learn FILE]
    .venv/bin/python benchmarks/procedural.py --queries data/independent/tools.jsonl   # written by others

1. Learn: an agent with procedural memory answers the learning questions (default: the
   notebook's wellness questions and the tool routes' train split) and keeps the patterns
   that score >= 0.7.
2. Cold: an agent without procedural memory answers every question in ``--queries``
   (JSONL rows with ``query`` and ``tools``; default: the held-out set).
3. Warm: the agent with the learned patterns answers the same questions.
With the offline model an LLM round trip costs well under a millisecond, so the time ratio
here is dominated by tools and lookups; with a hosted model each saved round trip saves a
network call, which is what the steps ratio counts. A question that needs one tool takes
two round trips either way (call, answer), so the steps ratio depends on how many
questions need several tools: it is printed for those separately.
"""
from __future__ import annotations

import argparse
import statistics
import time

import memorykit as mk
from memorykit.config import data_path
from memorykit.course.procedural_eval import cold_warm, learning_questions, read_jsonl
from memorykit.memory.procedural import ProcedureStore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", default=str(data_path("routes", "tools_heldout.jsonl")))
    ap.add_argument("--learn", default=None, help="JSONL with a query or text field (default: see above)")
    args = ap.parse_args()
    r = mk.connect()
    emb = mk.get_embedder(r)
    llm = mk.get_llm("offline")
    learn = ([row.get("query") or row["text"] for row in read_jsonl(args.learn)] if args.learn
             else learning_questions())
    queries = read_jsonl(args.queries)
    cw = cold_warm(r, emb, llm, learn, queries)
    print(f"learned from {len(learn)} questions; evaluated on {len(queries)} ({args.queries})")
    print(cw.summary())
    print(f"{'questions':<22}{'n':>4}{'acc cold':>10}{'acc warm':>10}{'steps cold':>12}{'steps warm':>12}"
          f"{'ratio':>7}{'ms cold':>9}{'ms warm':>9}")
    groups = {"all": lambda x: True, "one tool": lambda x: len(x["tools"]) == 1,
              "several tools": lambda x: len(x["tools"]) > 1, "no tool": lambda x: not x["tools"]}
    for name, keep in groups.items():
        rows = [x for x in cw.rows if keep(x)]
        if not rows:
            continue
        m = {k: statistics.fmean(float(x[k]) for x in rows)
             for k in ("ok_cold", "ok_warm", "steps_cold", "steps_warm", "ms_cold", "ms_warm")}
        print(f"{name:<22}{len(rows):>4}{m['ok_cold']:>10.3f}{m['ok_warm']:>10.3f}{m['steps_cold']:>12.2f}"
              f"{m['steps_warm']:>12.2f}{m['steps_warm'] / m['steps_cold']:>7.2f}{m['ms_cold']:>9.1f}"
              f"{m['ms_warm']:>9.1f}")

    # suggestion latency vs one (uncached) embedding, on texts never seen before
    ns = "bench_proc_" + str(int(time.time()))
    procs = ProcedureStore(r, emb, namespace=ns)
    try:
        for q in learn[:20]:
            procs.store(q, ["get_health_metrics"], 1.0, 10, query_type="lookup", user_id="bench-user")
        texts = [f"{q['query']} (variant {time.time_ns()})" for q in queries[:30]]
        t0 = time.perf_counter()
        vectors = [emb.embed(t) for t in texts]
        embed_ms = (time.perf_counter() - t0) * 1000 / len(texts)
        t0 = time.perf_counter()
        for t, v in zip(texts, vectors):
            procs.suggest(t, k=3, user_id="bench-user", vector=v)
        suggest_ms = (time.perf_counter() - t0) * 1000 / len(texts)
        print(f"suggestion lookup with the turn's vector: {suggest_ms:.1f} ms vs one embedding {embed_ms:.1f} ms "
              f"-> ratio {suggest_ms / embed_ms:.2f}")
        emb.forget(texts)
    finally:
        procs.drop()


if __name__ == "__main__":
    main()
