"""Hybrid retrieval against its own parts and their plain RRF, on one data set, in one run.

    python benchmarks/retrieval.py                                   # data/longmem, split "test"
    python benchmarks/retrieval.py --split dev                       # the only split to tune on
    python benchmarks/retrieval.py --data data/locomo/locomo10.json  # LoCoMo (never tuned on)

Every turn becomes a memory of its dialog's user (``memorykit.course.eval.ingest``); each question
must find a turn that answers it. Outside Redis, over the same texts and vectors: brute-force
cosine, plain-Python BM25 with per-dialog statistics, and their plain reciprocal rank fusion
(k = 60). Then ``MemoryStore.search`` in each mode. Prints recall@1/5/10 and MRR with 95%
bootstrap intervals, the paired difference hybrid - plain RRF, and search latency with a given
vector (embedding excluded).
"""
import argparse
import statistics
import time

import memorykit as mk
from memorykit.course import eval as ev
from memorykit.memory.long_term import MemoryStore


def latency_ms(store, data, mode: str, n: int = 100) -> float:
    """Median milliseconds of one search with a precomputed question vector."""
    times = []
    for q in data.questions[:n]:
        vector = store.embedder.embed(q.question)
        start = time.perf_counter()
        store.search(q.question, user_id=q.dialog_id, k=10, mode=mode, vector=vector, touch=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="data/longmem (default) or a LoCoMo / LongMemEval JSON file")
    p.add_argument("--split", default=None, help='dev / test (default for data/longmem: "test"; others: all)')
    p.add_argument("--recency", action="store_true", help="also hybrid + recency")
    p.add_argument("--namespace", default="benchretrieval")
    args = p.parse_args(argv)
    data = ev.load_longmem(args.data)
    data = data.split(args.split or ("test" if args.data is None else None))
    r = mk.connect()
    emb = mk.get_embedder(r)
    store = MemoryStore(r, emb, namespace=args.namespace)
    store.drop()
    store = MemoryStore(r, emb, namespace=args.namespace)
    try:
        turn_of = ev.ingest(store, data)
        print(f"{data.name}: {len(data.dialogs)} dialogs, {len(turn_of)} memories, {len(data.questions)} questions")
        runs = ev.baselines(data, emb, k=5, depth=10)
        modes = [dict(mode="vector"), dict(mode="text"), dict(mode="hybrid")]
        if args.recency:
            modes.append(dict(mode="hybrid", recency=True))
        for m in modes:
            run = ev.evaluate(store, data, turn_of, k=5, depth=10, **m)
            run.name = "memorykit " + run.name
            runs.append(run)
        print(ev.compare(runs).to_string())
        plain = next(run for run in runs if run.name == "plain RRF")
        hybrid = next(run for run in runs if run.name == "memorykit hybrid")
        for metric in ev.METRICS:
            d, lo, hi = ev.paired_difference(hybrid.scores[metric], plain.scores[metric])
            print(f"memorykit hybrid - plain RRF, {metric:<9} {d:+.3f}  95% CI [{lo:+.3f}, {hi:+.3f}]")
        lat = {mode: latency_ms(store, data, mode) for mode in ("vector", "text", "hybrid")}
        print("search with a given vector, median ms: " + ", ".join(f"{m} {v:.1f}" for m, v in lat.items()))
    finally:
        store.drop()


if __name__ == "__main__":
    main()
