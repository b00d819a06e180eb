"""Embedding throughput on this machine, and what the Redis embeddings cache saves.

    python benchmarks/embeddings.py

Prints sentences/s for single and batched embedding, and cached vs uncached time per
text as a ratio, all measured in this one run.
"""
import time
import uuid

import memorykit as mk


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(n: int = 512) -> None:
    r = mk.connect()
    emb = mk.get_embedder(r)
    raw = mk.get_embedder(cache=False)
    tag = uuid.uuid4().hex[:8]
    texts = [f"Memory {tag} number {i}: the user mentioned topic {i % 37} on day {i % 90}." for i in range(n)]
    raw.embed("warm up")

    single = timed(lambda: [raw.embed(t) for t in texts[:64]]) / 64
    batched = timed(lambda: raw.embed_many(texts, batch_size=64, progress=False)) / n
    cold = timed(lambda: [emb.embed(t) for t in texts[:64]]) / 64
    warm = timed(lambda: [emb.embed(t) for t in texts[:64]]) / 64
    emb.forget(texts[:64])

    print(f"{'measure':<38}{'value':>12}")
    print(f"{'single embed (sentences/s)':<38}{1 / single:>12.0f}")
    print(f"{'batched embed_many, 64 (sentences/s)':<38}{1 / batched:>12.0f}")
    print(f"{'batched / single throughput':<38}{single / batched:>12.1f}x")
    print(f"{'cache miss / raw embed time':<38}{cold / single:>12.2f}x")
    print(f"{'cache hit / raw embed time':<38}{warm / single:>12.2f}x")


if __name__ == "__main__":
    main()
