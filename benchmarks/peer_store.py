"""memorykit's MemoryStore next to LangGraph's RedisStore: bytes, inserts and search, in one run.

    pip install -e ".[bench]"            # langgraph-checkpoint-redis, pinned
    python benchmarks/peer_store.py      # 3,000 memories for 60 users, 200 searches

Both stores get the same MiniLM embeddings, computed once beforehand (memorykit's embedder,
cached in the embedded Redis): memorykit through an embedder that looks the vectors up, RedisStore
through an ``embed`` function that does the same, so no timing below includes the model. To keep
the model's share of the run small on a busy machine, ``--unique`` distinct LoCoMo turns are
embedded and each is reused for ``n / unique`` memories (text + a copy number, vector + Gaussian
noise of std 0.03, renormalized: all distinct); ``--unique 3000`` embeds every memory. They
share a private throw-away redis-server (``benchmarks/scale.py``), loaded one after the other:

- bytes per memory: ``INFO used_memory`` growth while each store loads ``--n`` memories;
- insert rate: ``MemoryStore.add_many`` vs ``RedisStore.batch`` of ``PutOp``s, chunks of 100;
- search: one user's 10 closest memories for a query vector, interleaved query by query,
  client-side wall time (Python and every round trip each library makes). memorykit's search
  runs as an agent calls it (it records the memories' use) and with ``touch=False``.

Prints a table with ratios and writes ``docs/peer_store.json``.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import percentile, private_server, used_memory  # noqa: E402

CHUNK = 100


class Lookup:
    """An embedder that returns precomputed vectors: the stores are timed, not the model."""

    def __init__(self, vectors: dict[str, list[float]], dims: int, name: str = "precomputed"):
        self.vectors, self.dims, self.name = vectors, dims, name

    def embed(self, text: str, **_) -> list[float]:
        return self.vectors[text]

    def embed_many(self, texts, batch_size: int = 64, **_) -> list[list[float]]:
        return [self.vectors[t] for t in texts]

    def __call__(self, texts: list[str]) -> list[list[float]]:  # LangGraph's ``embed`` function shape
        return self.embed_many(texts)


def corpus(n: int, users: int, searches: int, unique: int, questions: int):
    """Memories of ``users`` owners built from ``unique`` LoCoMo turns, and ``searches`` (question, owner)
    pairs over ``questions`` distinct LoCoMo questions."""
    from memorykit.course import eval as ev

    data = ev.load_longmem(ROOT / "data" / "locomo" / "locomo10.json")
    turns = list(dict.fromkeys(f"{t.speaker}: {t.text}" for d in data.dialogs for t in d.turns))[:unique]
    asked = list(dict.fromkeys(q.question for q in data.questions))[:questions]
    texts = [turns[i % len(turns)] + ("" if i < len(turns) else f" ({i // len(turns)})") for i in range(n)]
    mems = [{"content": t, "user_id": f"u{i % users}"} for i, t in enumerate(texts)]
    rng = np.random.default_rng(7)
    return turns, mems, [(asked[i % len(asked)], f"u{int(rng.integers(users))}") for i in range(searches)]


def vectors(turns: list[str], mems: list[dict], asked, embedder) -> dict[str, list[float]]:
    """Text -> vector for every memory and question: MiniLM for the turns and questions, + noise for copies."""
    qs = list(dict.fromkeys(q for q, _ in asked))
    got = np.asarray(embedder.embed_many(turns + qs), np.float32)
    rng = np.random.default_rng(11)
    out = {t: v.tolist() for t, v in zip(turns + qs, got)}
    for i, m in enumerate(mems[len(turns):], len(turns)):
        v = got[i % len(turns)] + rng.normal(0, 0.03, got.shape[1])
        out[m["content"]] = (v / np.linalg.norm(v)).astype(np.float32).tolist()
    return out


def load_memorykit(r, mems, emb) -> tuple[object, float]:
    from memorykit.memory.long_term import MemoryStore

    store = MemoryStore(r, emb, namespace="peer")
    t = time.perf_counter()
    for i in range(0, len(mems), CHUNK):
        store.add_many(mems[i:i + CHUNK])
    return store, time.perf_counter() - t


def load_redisstore(r, mems, emb, storage: str) -> tuple[object, float]:
    from langgraph.store.base import PutOp
    from langgraph.store.redis import RedisStore

    cfg = {"dims": emb.dims, "embed": emb, "fields": ["text"], "vector_storage_type": storage}
    store = RedisStore(r, index=cfg, store_prefix=f"lg{storage}", vector_prefix=f"lg{storage}_vectors")
    store.setup()
    t = time.perf_counter()
    for i in range(0, len(mems), CHUNK):
        store.batch([PutOp(("memories", m["user_id"]), f"m{i + j}", {"text": m["content"]})
                     for j, m in enumerate(mems[i:i + CHUNK])])
    return store, time.perf_counter() - t


def run(n: int = 3000, users: int = 60, searches: int = 200, unique: int = 300, questions: int = 50,
        log=print) -> dict:
    import redis

    import memorykit as mk

    turns, mems, asked = corpus(n, users, searches, unique, questions)
    t = time.perf_counter()
    base = mk.get_embedder()  # cached in the checkout's embedded Redis: a re-run skips the model
    emb = Lookup(vectors(turns, mems, asked, base), base.dims)
    log(f"embedded {len(turns)} turns and {questions} questions with {base.name} in "
        f"{time.perf_counter() - t:.0f} s (not timed below)")
    out = {"n": n, "users": users, "queries": len(asked), "k": 10,
           "data": f"LoCoMo turns (data/locomo): {len(turns)} embedded with MiniLM, each reused for about "
                   f"{n // len(turns)} memories (copy number in the text, Gaussian noise std 0.03 on the vector)",
           "versions": {p: version(p) for p in ("langgraph-checkpoint-redis", "langgraph", "redisvl", "redis")},
           "stores": {}}
    with private_server() as r:
        out["redis_version"] = r.info("server")["redis_version"]
        raw = redis.Redis(port=r.connection_pool.connection_kwargs["port"])  # RedisStore reads bytes itself
        stores = {}
        for name, loader in (("memorykit MemoryStore", lambda: load_memorykit(r, mems, emb)),
                             ("LangGraph RedisStore (default: JSON)", lambda: load_redisstore(raw, mems, emb, "json")),
                             ("LangGraph RedisStore (vector_storage_type=hash)",
                              lambda: load_redisstore(raw, mems, emb, "hash"))):
            before = used_memory(r)
            stores[name], secs = loader()
            out["stores"][name] = {"bytes_per_memory": (used_memory(r) - before) / n, "inserts_per_s": n / secs}
        searches = {
            "memorykit MemoryStore": lambda q, u: stores["memorykit MemoryStore"].search(
                q, user_id=u, k=10, vector=emb.embed(q)),
            **{name: (lambda s: lambda q, u: s.search(("memories", u), query=q, limit=10))(s)
               for name, s in stores.items() if name.startswith("LangGraph")}}
        if "touch" in inspect.signature(stores["memorykit MemoryStore"].search).parameters:
            searches["memorykit MemoryStore (touch=False)"] = lambda q, u: stores["memorykit MemoryStore"].search(
                q, user_id=u, k=10, vector=emb.embed(q), touch=False)
        times: dict[str, list[float]] = {name: [] for name in searches}
        for i, (q, u) in enumerate(asked):  # interleaved, order rotated: machine load hits all alike
            names = list(searches)
            for name in names[i % len(names):] + names[:i % len(names)]:
                t = time.perf_counter()
                searches[name](q, u)
                times[name].append((time.perf_counter() - t) * 1000)
        for name, ts in times.items():
            row = out["stores"].setdefault(name, dict(out["stores"].get(name.split(" (touch")[0], {})))
            row.update(search_p50_ms=percentile(ts, 50), search_p99_ms=percentile(ts, 99))
    return out


def report(res: dict) -> str:
    """The table with ratios against memorykit's MemoryStore as an agent calls it."""
    import pandas as pd

    df = pd.DataFrame(res["stores"]).T[["bytes_per_memory", "inserts_per_s", "search_p50_ms", "search_p99_ms"]]
    ref = df.loc["memorykit MemoryStore"]
    df["bytes vs memorykit"] = df["bytes_per_memory"] / ref["bytes_per_memory"]
    df["inserts vs memorykit"] = df["inserts_per_s"] / ref["inserts_per_s"]
    df["p50 vs memorykit"] = df["search_p50_ms"] / ref["search_p50_ms"]
    return df.round(2).to_string()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--users", type=int, default=60)
    p.add_argument("--queries", type=int, default=200, help="searches, over --questions distinct questions")
    p.add_argument("--unique", type=int, default=300, help="distinct LoCoMo turns embedded")
    p.add_argument("--questions", type=int, default=50)
    p.add_argument("--out", default=str(ROOT / "docs" / "peer_store.json"))
    args = p.parse_args(argv)
    try:
        import langgraph.store.redis  # noqa: F401
    except ImportError:  # `make bench` runs every benchmark: skip rather than fail without the extra
        print('skipped: LangGraph\'s RedisStore is not installed (pip install -e ".[bench]")')
        return 0
    res = run(args.n, args.users, args.queries, args.unique, args.questions)
    text = report(res)
    res["table"] = text
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"{res['n']} memories, {res['users']} users, {res['queries']} searches (k=10, query vector given), "
          f"redis {res['redis_version']}, " + ", ".join(f"{k} {v}" for k, v in res["versions"].items()))
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
