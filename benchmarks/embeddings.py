"""Query embedding: memorykit's embedder against the bare SentenceTransformer model, in one run.

    python benchmarks/embeddings.py [--n 64] [--threads 1]

Prints the median time to embed one question (cache miss: every text is new) for the bare
all-MiniLM-L6-v2 model in float32 and for ``memorykit.get_embedder()``, and their ratio (the
target is at most 1.15x); the same per text for a batch; what a cache hit costs; the float64
model memorykit used before (vectors then did not depend on the batch; now every text is
encoded alone in float32); and whether a text's vector is the same alone and in a batch.
"""
import argparse
import os
import statistics
import time
import uuid

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

import memorykit as mk
from memorykit.embeddings import model_path


def interleaved_ms(fns: dict, items: dict) -> dict[str, float]:
    """Median milliseconds of each ``fns[name](item)`` over ``items[name]``, the variants taking turns
    item by item, so a busy moment on a shared machine hits every variant alike."""
    times = {name: [] for name in fns}
    for row in zip(*(items[name] for name in fns)):
        for name, item in zip(fns, row):
            start = time.perf_counter()
            fns[name](item)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def main(n: int = 64, threads: int | None = None) -> None:
    if threads:
        torch.set_num_threads(threads)
    r = mk.connect()
    emb = mk.get_embedder(r)
    bare = SentenceTransformer(model_path(), device="cpu")
    f64 = SentenceTransformer(model_path(), device="cpu", model_kwargs={"torch_dtype": torch.float64})
    tag = uuid.uuid4().hex[:8]
    words = "garden pottery marathon Lisbon recipe cousin violin deadline beagle vegan".split()

    marker = dict(zip(["bare", "mk", "f64", "same"] + [f"{v}{i}" for v in ("bare", "mk", "f64") for i in range(64)],
                      "red blue green white".split() + [f"{c} {i}" for c in ("gold", "silver", "black") for i in range(64)]))

    def texts(kind: str, count: int) -> list[str]:  # new texts, of the same length for every variant: cache misses
        kind = marker[kind]
        return [f"What did {words[i % 10]} {kind} {tag} {i} mean for the trip in {2000 + i % 24}?"
                for i in range(count)]

    for model in (bare, f64):
        model.encode(["warm up"] * 4)
    emb.embed(f"warm up {tag}")
    single = interleaved_ms({"bare": bare.encode, "mk": emb.embed, "f64": f64.encode},
                            {name: texts(name, n) for name in ("bare", "mk", "f64")})
    emb.flush()  # the cache writes of the misses above have landed
    hit = interleaved_ms({"hit": emb.embed}, {"hit": texts("mk", n)})["hit"]
    batches = {name: [texts(f"{name}{i}", 16) for i in range(max(n // 16, 3))] for name in ("bare", "mk", "f64")}
    batch = {name: ms / 16 for name, ms in interleaved_ms(
        {"bare": lambda b: bare.encode(b, batch_size=64), "mk": lambda b: emb.embed_many(b, progress=False),
         "f64": lambda b: f64.encode(b, batch_size=64)}, batches).items()}
    same = texts("same", 16)
    alone = [emb.embed(t) for t in same]
    emb.forget(same)
    together = emb.embed_many(same)
    identical = all(np.array_equal(a, b) for a, b in zip(alone, together))
    emb.forget(texts("mk", n) + same + [t for b in batches["mk"] for t in b])

    print(f"{'one question (median ms, cache miss)':<48}{'ms':>8}{'ratio':>9}")
    print(f"{'  bare SentenceTransformer, float32':<48}{single['bare']:>8.1f}{1:>8.2f}x")
    print(f"{'  memorykit embedder (Redis cache miss)':<48}{single['mk']:>8.1f}{single['mk'] / single['bare']:>8.2f}x")
    print(f"{'  memorykit embedder (Redis cache hit)':<48}{hit:>8.1f}{hit / single['bare']:>8.2f}x")
    print(f"{'  before: the float64 model memorykit used':<48}{single['f64']:>8.1f}{single['f64'] / single['bare']:>8.2f}x")
    print(f"{'a batch of 16 (median ms per text, cache miss)':<48}{'':>8}")
    print(f"{'  bare SentenceTransformer, float32, batched':<48}{batch['bare']:>8.1f}{1:>8.2f}x")
    print(f"{'  memorykit embed_many (each text alone)':<48}{batch['mk']:>8.1f}{batch['mk'] / batch['bare']:>8.2f}x")
    print(f"{'  before: float64 model, batched':<48}{batch['f64']:>8.1f}{batch['f64'] / batch['bare']:>8.2f}x")
    print(f"same vector alone and in a batch (bit for bit): {identical}")
    print(f"torch threads: {torch.get_num_threads()}, load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=64, help="questions per measurement")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for every variant (1 keeps a shared, busy machine from skewing the ratio)")
    args = p.parse_args()
    main(args.n, args.threads)
