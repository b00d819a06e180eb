"""Deduplication benchmark: decision quality on held-out pairs, model calls per fact, write-path cost.

    .venv/bin/python benchmarks/dedup.py              # the configured decider (offline: the learned model)
    .venv/bin/python benchmarks/dedup.py --quick      # skip the end-to-end replay and the timing

Prints what this run measured:
1. decision quality of each tier on data/dedup/train.jsonl, data/dedup/heldout.jsonl and
   data/independent/dedup.jsonl (written apart from the method; neither is ever used to train or
   tune the offline model; only totals are printed), with a 95 % interval;
2. end to end on a store: each held-out pair replayed through add() + remember(), and how many
   updates left only the fresh fact current;
3. model calls per remembered fact when one user's facts arrive as a stream (the cascade)
   against asking the model for every fact that has any stored memory to compare with;
4. the write path: ms per call of add() vs remember() (embeddings cached first).
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid

import memorykit as mk
from memorykit.course import dedup_eval as ev
from memorykit.llm import track_usage
from memorykit.memory import dedup


def store_in(r, emb, prefix: str = "bench") -> mk.MemoryStore:
    return mk.MemoryStore(r, emb, namespace=prefix + uuid.uuid4().hex[:8])


def quality(emb, llm) -> None:
    for split in ("train", "heldout", "independent"):
        pairs = ev.load_pairs(split)
        df = ev.predict_pairs(pairs, emb, llm)
        right = int((df["decided"] == df["label"]).sum())
        low, high = ev.accuracy_interval(right, len(df))
        print(f"\n{split}: {len(df)} pairs; cascade accuracy {right / len(df):.3f} (95% CI {low:.2f}-{high:.2f}); "
              f"model calls per pair {df['model_calls'].mean():.2f}")
        print(ev.tier_scores(df).to_string())
        print(ev.confusion(df).to_string())


def replay(r, emb, llm) -> None:
    store = store_in(r, emb)
    try:
        df = ev.replay_pairs(store, ev.load_pairs("heldout"), llm)
    finally:
        store.drop()
    updates = df[df["label"] == "update"]
    print(f"\nreplayed on a store: accuracy {(df['said'] == df['label']).mean():.3f}; "
          f"{int(updates['fresh_only'].sum())} of {len(updates)} updates left only the fresh fact current")


def calls_per_fact(r, emb, llm) -> None:
    pairs = ev.load_pairs("heldout")
    stream = [ev.as_fact(p["existing"]) for p in pairs] + [ev.as_fact(p["existing"]) for p in pairs[::5]] + \
        [ev.as_fact(p["new"]) for p in pairs]
    store = store_in(r, emb)
    try:
        with track_usage() as calls:
            decisions = [store.remember(fact, user_id="stream", llm=llm) for fact in stream]
    finally:
        store.drop()
    asked = sum(d.model_calls for d in decisions)
    naive = len(stream) - 1  # every fact after the first has a memory to compare with
    tiers = statistics.multimode([d.tier for d in decisions])
    print(f"\nstream of {len(stream)} facts for one user: {asked} model calls "
          f"({asked / len(stream):.2f} per fact; task calls recorded: {len(calls)}), against {naive} "
          f"if every fact were decided by the model ({asked / naive:.0%}); most frequent tier: {tiers}")
    for tier in dedup.TIERS:
        print(f"  decided by {tier:9} {sum(d.tier == tier for d in decisions):4d} facts")


def write_path(r, emb, llm, repeats: int = 3) -> None:
    pairs = ev.load_pairs("heldout")[:60]
    emb.embed_many([p["existing"] for p in pairs] + [p["new"] for p in pairs])
    times = {"add": [], "remember": []}
    for _ in range(repeats):
        for path, out in times.items():
            store = store_in(r, emb)
            try:
                store.add_many([dict(content=p["existing"], user_id=p["id"]) for p in pairs])
                start = time.perf_counter()
                for p in pairs:
                    getattr(store, path)(p["new"], user_id=p["id"], **({"llm": llm} if path == "remember" else {}))
                out.append((time.perf_counter() - start) * 1000 / len(pairs))
            finally:
                store.drop()
    add, rem = statistics.median(times["add"]), statistics.median(times["remember"])
    print(f"\nwrite path, {len(pairs)} facts each with one similar memory (median of {repeats} runs): "
          f"add() {add:.1f} ms, remember() {rem:.1f} ms per fact: {rem / add:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="decision quality and calls per fact only")
    args = parser.parse_args()
    r = mk.connect()
    emb = mk.get_embedder(r)
    llm = mk.get_llm(default="offline")
    print(f"decider: {llm!r}")
    quality(emb, llm)
    calls_per_fact(r, emb, llm)
    if not args.quick:
        replay(r, emb, llm)
        write_path(r, emb, llm)


if __name__ == "__main__":
    main()
