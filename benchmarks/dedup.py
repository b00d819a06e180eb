"""Deduplication benchmark: what remember() costs over a raw add(), and how well each tier decides.

    .venv/bin/python benchmarks/dedup.py            # offline decider, data/dedup pairs + holdout

Prints ratios measured in this run (absolute times depend on the machine):
1. write path: ms per call of add() vs remember() into a store where every user already holds
   one similar memory (so remember() goes through hash -> semantic -> decider -> transaction);
   embeddings are cached first, so both sides pay the same for the model;
2. decision quality of each tier on the labelled pairs: accuracy and per-class F1.
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid

import memorykit as mk
from memorykit import dedup


def drop(r, namespace: str) -> None:
    for name in r.execute_command("FT._LIST"):
        if name.startswith(f"{namespace}_"):
            r.execute_command("FT.DROPINDEX", name)
    keys = list(r.scan_iter(match=f"{namespace}:*", count=1000))
    if keys:
        r.delete(*keys)


def write_path(r, emb, llm, pairs, repeats: int) -> dict[str, float]:
    """Median ms per call over ``repeats`` rounds, each in fresh namespaces."""
    emb.embed_many([dedup.as_fact(p["existing"]) for p in pairs] + [dedup.as_fact(p["new"]) for p in pairs])
    add_ms, rem_ms = [], []
    for _ in range(repeats):
        for path, out in (("add", add_ms), ("remember", rem_ms)):
            ns = "bench" + uuid.uuid4().hex[:8]
            try:
                store = mk.MemoryStore(r, emb, namespace=ns)
                store.add_many([dict(content=p["existing"], user_id=p["id"]) for p in pairs])
                start = time.perf_counter()
                for p in pairs:
                    if path == "add":
                        store.add(p["new"], user_id=p["id"])
                    else:
                        store.remember(p["new"], user_id=p["id"], llm=llm)
                out.append((time.perf_counter() - start) * 1000 / len(pairs))
            finally:
                drop(r, ns)
    add, rem = statistics.median(add_ms), statistics.median(rem_ms)
    return {"add_ms": add, "remember_ms": rem, "ratio": rem / add}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    r = mk.connect()
    emb = mk.get_embedder(r)
    llm = mk.get_llm()
    pairs = dedup.load_pairs("pairs")
    print(f"decider: {llm!r}")
    cost = write_path(r, emb, llm, pairs, args.repeats)
    print(f"\nwrite path over {len(pairs)} facts (median of {args.repeats} runs)")
    print(f"  add()       {cost['add_ms']:7.2f} ms per fact")
    print(f"  remember()  {cost['remember_ms']:7.2f} ms per fact")
    print(f"  remember() / add() = {cost['ratio']:.1f}x")
    for name in ("pairs", "holdout"):
        data = dedup.load_pairs(name)
        df = dedup.predict_pairs(data, emb, llm)
        print(f"\ndecision quality on data/dedup/{name}.jsonl ({len(data)} pairs; "
              f"semantic threshold {dedup.SEMANTIC_DUPLICATE_DISTANCE})")
        print(dedup.tier_scores(df).to_string())


if __name__ == "__main__":
    main()
