"""Long-term memory at 100k memories: what each storage layout costs and finds, measured in one run.

    nice -n 10 python benchmarks/scale.py          # 100k memories for 2,000 users, ~20 min on 2 busy cores
    python benchmarks/scale.py --n 5000 --quick    # the small run notebook 09 does (under a minute)

It starts its own throw-away redis-server (the embedded binaries, loopback, a temp dir, no
persistence) so nothing else on the machine shares its memory or CPU counters, then:

1. embeds ``--unique`` synthetic sentences with MiniLM; the ``--n`` memories (50 per user) get
   those embeddings plus Gaussian noise (embedding 100k texts on 2 cores would take longer than
   the whole run): clustered like real embeddings, all distinct;
2. stores them in each layout of ``benchmarks/layouts.py`` in turn (JSON with the vector as a
   JSON array, HASH with FLOAT32 / FLOAT16 vectors, a Vector Set per user with NOQUANT / Q8 /
   BIN, and the chosen combination), one layout at a time on an emptied server, and measures
   bytes per memory (``INFO used_memory`` delta), insert rate (pipelines of 500, indexing
   included), Redis-side p50 / p99 latency of the real query shape (one user's memories, k=10;
   ``SLOWLOG`` with every command logged: server time, no network) and recall@10 against exact
   numpy search over the user's memories;
3. measures global KNN (no user scope) over all memories: the JSON index's HNSW, a FLAT index,
   and one big Vector Set per quantization, which shows HNSW recall at 100k; sweeps the HNSW
   search width (FT ``EF_RUNTIME``, VSIM ``EF``) on the FLOAT32 index and the big Q8 set;
4. writes ``docs/scale_results.json``, ``docs/scale_layouts.md`` (the table),
   ``docs/scale_layouts.png`` (bytes per memory vs recall) and ``docs/scale_hnsw_sweep.png``.

``--ingest N`` also measures ``MemoryStore.add_many`` against raw MiniLM throughput on N texts.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from layouts import DIMS, K, Corpus, Layout, all_layouts, ft_knn, vsim  # noqa: E402

PER_USER = 50
SUBJECTS = ["I", "My sister", "My partner", "Our team", "My dad", "The kids", "My friend Sam", "My manager"]
VERBS = ["went hiking in", "booked a trip to", "started a pottery class in", "moved to", "ran a race in",
         "had dinner in", "lost a wallet in", "bought a bike in", "learned to cook in", "painted a mural in"]
PLACES = ["Lisbon", "Kyoto", "Leeds", "Oslo", "Lima", "Seoul", "Cairo", "Hanoi", "Quito", "Bergen",
          "Porto", "Osaka", "Bath", "Tromsø", "Madrid", "Chennai", "Lagos", "Hamburg", "Kraków", "Sheffield"]
WHEN = ["last spring", "in 2019", "two weeks ago", "over the winter", "on my birthday", "after the wedding",
        "during the heatwave", "at Easter", "in the autumn", "before the exams"]
PRODUCT = "json_text_vset_q8"


def sentences(n: int) -> list[str]:
    """``n`` distinct memory-like sentences from the vocabulary above."""
    out = []
    for i in range(n):
        s, v, p, w = (i % 8, (i // 8) % 10, (i // 80) % 20, (i // 1600) % 10)
        out.append(f"{SUBJECTS[s]} {VERBS[v]} {PLACES[p]} {WHEN[w]} (note {i})")
    return out


@contextlib.contextmanager
def private_server():
    """A throw-away redis-server with search + JSON (and Vector Sets) on a free loopback port."""
    from memorykit.course.redis_server import binaries

    server, modules = binaries()
    tmp = Path(tempfile.mkdtemp(prefix="mk-scale-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [str(server), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp), "--save", "",
            "--appendonly", "no", "--protected-mode", "yes", "--logfile", "redis.log"]
    for m in modules:
        args += ["--loadmodule", str(m)]
    proc = subprocess.Popen(args, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, decode_responses=True)
    try:
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            time.sleep(0.05)
        yield client
    finally:
        with contextlib.suppress(redis.RedisError):
            client.shutdown(nosave=True)
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def wait_indexed(r: redis.Redis, name: str) -> None:
    while True:
        info = r.ft(name).info()
        if float(info.get("percent_indexed", 1)) >= 1 and str(info.get("indexing", "0")) in ("0", "False"):
            return
        time.sleep(0.2)


def recall(found: list[list[str]], truth: list[list[str]]) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth) if t]))


def percentile(xs, p) -> float:
    return float(np.percentile(np.asarray(xs, float), p)) if len(xs) else float("nan")


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def empty(r: redis.Redis) -> None:
    """Drop every index and key, so the next layout starts from the same baseline."""
    for name in r.execute_command("FT._LIST"):
        r.execute_command("FT.DROPINDEX", name)
    r.flushall(asynchronous=False)  # SYNC: Redis 8 frees lazily by default, which would skew the next baseline
    settle(r)


def settle(r: redis.Redis, tolerance: int = 64 * 1024) -> int:
    """Wait until background frees (lazy free, dropped indexes) are done: used_memory stops moving."""
    last = used_memory(r)
    for _ in range(300):
        time.sleep(0.2)
        now = used_memory(r)
        if abs(now - last) < tolerance and not int(r.info("memory").get("lazyfree_pending_objects", 0)):
            return now
        last = now
    return last


def timed_queries(r: redis.Redis, run_one, queries, command: str) -> tuple[list[list[str]], dict]:
    """Run ``run_one(q)`` per query; Redis-side times from SLOWLOG (every command logged, in µs)."""
    raw = redis.Redis(connection_pool=redis.ConnectionPool(port=r.connection_pool.connection_kwargs["port"]))
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", len(queries) + 100)
    r.slowlog_reset()
    found, client = [], []
    for q in queries:
        t = time.perf_counter()
        found.append(run_one(q))
        client.append((time.perf_counter() - t) * 1000)
    log_ = raw.execute_command("SLOWLOG", "GET", len(queries) + 100)
    r.config_set("slowlog-log-slower-than", 10000)
    server = [e[2] / 1000 for e in log_ if e[3] and e[3][0].upper() == command.encode()]
    return found, {"p50_ms": percentile(server, 50), "p99_ms": percentile(server, 99),
                   "client_p50_ms": percentile(client, 50), "client_p99_ms": percentile(client, 99)}


def load(r: redis.Redis, layout: Layout, c: Corpus, batch: int = 500) -> float:
    """Write every memory in ``layout`` (pipelines of ``batch``); seconds including indexing."""
    layout.setup(r)
    t = time.perf_counter()
    for start in range(0, len(c.vectors), batch):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + batch, len(c.vectors))):
            layout.write(pipe, c, i)
        pipe.execute()
    if layout.index:
        wait_indexed(r, layout.index)
    return time.perf_counter() - t


def measure_layout(r: redis.Redis, layout: Layout, c: Corpus, qvecs, quser, truth_user) -> dict:
    """Bytes per memory, insert rate, recall@10 and Redis-side latency of one user's k=10 search."""
    empty(r)
    before = used_memory(r)
    secs = load(r, layout, c)
    n = len(c.vectors)
    after = settle(r)
    found, lat = timed_queries(r, lambda q: layout.search(r, *q), list(zip(qvecs, quser)), layout.command)
    return {"label": layout.label, "bytes_per_memory": (after - before) / n,
            "inserts_per_s": n / secs, "recall@10": recall(found, truth_user), **lat,
            "query": layout.command, "keeps": layout.keeps}


def global_set(r: redis.Redis, c: Corpus, quant: str) -> tuple[float, float]:
    """All memories in one Vector Set (global KNN, no owner): (bytes per memory, inserts per s)."""
    empty(r)
    before, t = used_memory(r), time.perf_counter()
    for start in range(0, len(c.vectors), 500):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + 500, len(c.vectors))):
            pipe.execute_command("VADD", "all", "FP32", c.vectors[i].tobytes(), f"m{i}", quant)
        pipe.execute()
    rate = len(c.vectors) / (time.perf_counter() - t)
    return (settle(r) - before) / len(c.vectors), rate


def measure_global(r: redis.Redis, c: Corpus, qvecs, truth, efs, log) -> tuple[dict, list[dict]]:
    """Global k=10 KNN over all memories: FT HNSW (default and swept EF_RUNTIME), FT FLAT, Vector Sets."""
    out, sweep = {}, []
    hash32 = next(layout for layout in all_layouts() if layout.name == "hash_float32")
    empty(r)
    load(r, hash32, c)
    blobs = [q.astype(np.float32).tobytes() for q in qvecs]
    for ef in [None, *efs]:
        found, lat = timed_queries(r, lambda b: ft_knn(r, hash32.index, b, None, ef=ef), blobs, "FT.SEARCH")
        row = {"recall@10": recall(found, truth), **lat}
        if ef is None:
            out["ft_hnsw_float32"] = row
        else:
            sweep.append({"engine": "RediSearch HNSW (FLOAT32)", "ef": ef, **row})
    r.execute_command("FT.CREATE", "flat", "ON", "HASH", "PREFIX", 1, "h32:memory:", "SCHEMA", "embedding",
                      "VECTOR", "FLAT", 6, "TYPE", "FLOAT32", "DIM", DIMS, "DISTANCE_METRIC", "COSINE")
    wait_indexed(r, "flat")
    found, lat = timed_queries(r, lambda b: ft_knn(r, "flat", b, None), blobs, "FT.SEARCH")
    out["ft_flat_float32"] = {"recall@10": recall(found, truth), **lat}
    for quant in ("NOQUANT", "Q8", "BIN"):
        bpm, rate = global_set(r, c, quant)
        found, lat = timed_queries(r, lambda q: vsim(r, "all", q), qvecs, "VSIM")
        out[f"vset_{quant.lower()}"] = {"recall@10": recall(found, truth), **lat, "bytes_per_memory": bpm,
                                        "inserts_per_s": rate}
        if quant == "Q8":
            for ef in efs:
                found, lat = timed_queries(r, lambda q: vsim(r, "all", q, ef=ef), qvecs, "VSIM")
                sweep.append({"engine": "Vector Set HNSW (Q8)", "ef": ef, "recall@10": recall(found, truth), **lat})
    for name, v in out.items():
        log(f"global {name:16s} recall@10 {v['recall@10']:.3f}  p50 {v['p50_ms']:.2f} ms  p99 {v['p99_ms']:.2f} ms")
    empty(r)
    return out, sweep


def make_corpus(n: int, unique: int, queries: int, noise: float, embedder, rng) -> tuple:
    """Memories (MiniLM embeddings of ``unique`` sentences + noise), queries and exact top-10s."""
    texts = sentences(unique)
    if embedder is None:  # cached in the checkout's embedded Redis: a re-run skips the model
        import memorykit as mk

        embedder = mk.get_embedder()
    base = np.asarray(embedder.embed_many(texts), np.float32)
    users = rng.integers(0, max(1, n // PER_USER), size=n)
    vectors = unit(base[np.arange(n) % unique] + rng.normal(0, noise, (n, DIMS)))
    qvecs = unit(base[rng.integers(0, unique, size=queries)] + rng.normal(0, noise, (queries, DIMS)))
    quser = users[rng.integers(0, n, size=queries)]
    sims = qvecs @ vectors.T
    truth = [[f"m{j}" for j in np.argsort(-s)[:K]] for s in sims]
    truth_user = []
    for s, u in zip(sims, quser):
        idx = np.flatnonzero(users == u)
        truth_user.append([f"m{j}" for j in idx[np.argsort(-s[idx])][:K]])
    return Corpus(vectors, users, texts), qvecs, [f"user{u}" for u in quser], truth, truth_user


def ingest_share(r: redis.Redis, texts: list[str]) -> dict:
    """Raw MiniLM throughput vs ``MemoryStore.add_many`` (embed + write + index) on the same texts."""
    from memorykit.embeddings import get_embedder
    from memorykit.memory.long_term import MemoryStore

    emb = get_embedder(cache=False)
    emb.embed_many(texts[:32])  # warm the model
    t = time.perf_counter()
    emb.embed_many(texts)
    raw = len(texts) / (time.perf_counter() - t)
    store = MemoryStore(r, emb, namespace="ingest")
    t = time.perf_counter()
    store.add_many([{"content": s, "user_id": f"u{i % 20}"} for i, s in enumerate(texts)])
    e2e = len(texts) / (time.perf_counter() - t)
    return {"texts": len(texts), "raw_embed_per_s": raw, "add_many_per_s": e2e, "share": e2e / raw}


def run(n: int = 100_000, unique: int = 1000, queries: int = 200, quick: bool = False, noise: float = 0.03,
        ingest: int = 0, embedder=None, log=print) -> dict:
    """Every measurement of the module docstring; returns the results dict."""
    rng = np.random.default_rng(42)
    corpus, qvecs, quser, truth, truth_user = make_corpus(n, unique, queries, noise, embedder, rng)
    out: dict = {"n": n, "users": int(corpus.users.max() + 1), "per_user": PER_USER, "unique_texts": unique,
                 "queries": queries, "dims": DIMS, "k": K, "product_layout": PRODUCT,
                 "vectors": f"MiniLM embeddings of {unique} synthetic sentences + Gaussian noise "
                            f"(std {noise} per dimension), normalized",
                 "latency": "Redis-side p50/p99 from SLOWLOG (server time, no network); client_* include "
                            "the round trip from Python", "layouts": {}}
    with private_server() as r:
        out["redis_version"] = r.info("server")["redis_version"]
        for layout in all_layouts():
            row = measure_layout(r, layout, corpus, qvecs, quser, truth_user)
            out["layouts"][layout.name] = row
            log(f"{layout.name:18s} {row['bytes_per_memory']:7.0f} B/memory  {row['inserts_per_s']:6.0f} inserts/s  "
                f"recall@10 {row['recall@10']:.3f}  p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms")
        efs = [10, 50, 200] if quick else [10, 20, 50, 100, 200, 400]
        out["global_knn"], out["ef_sweep"] = measure_global(r, corpus, qvecs, truth, efs, log)
        if ingest:
            out["ingest"] = ingest_share(r, corpus.texts[:ingest])
    for name, row in out["layouts"].items():
        row["sizing_gb"] = {"1M": row["bytes_per_memory"] * 1e6 / 2**30, "100M": row["bytes_per_memory"] * 1e8 / 2**30}
    return out


def table(res: dict) -> "pandas.DataFrame":  # noqa: F821
    """One row per layout: cost, speed, recall and the features it keeps."""
    import pandas as pd

    rows = {}
    for name, v in res["layouts"].items():
        rows[name] = {"layout": v["label"], "bytes/memory": round(v["bytes_per_memory"]),
                      "inserts/s": round(v["inserts_per_s"]), "p50 ms": round(v["p50_ms"], 3),
                      "p99 ms": round(v["p99_ms"], 3), "recall@10": round(v["recall@10"], 3), **v["keeps"]}
    return pd.DataFrame(rows).T


def markdown(res: dict) -> str:
    """docs/scale_layouts.md: the table with how it was measured."""
    df = table(res)
    cols = ["layout", "bytes/memory", "inserts/s", "p50 ms", "p99 ms", "recall@10"]
    feats = [c for c in df.columns if c not in cols]
    lines = [f"# Storage layouts at {res['n']:,} memories ({res['users']:,} users x {res['per_user']})", "",
             f"Measured by `python benchmarks/scale.py` in one run on a private redis-server "
             f"{res['redis_version']} (RediSearch 2.10, RedisJSON 2.8, Vector Sets). Vectors: {res['vectors']}. "
             f"Query: the {res['k']} memories of one user closest to a query vector ({res['queries']} queries); "
             f"recall@10 against exact numpy search over that user's memories; {res['latency']}. "
             f"Bytes per memory: `INFO used_memory` growth over the whole load divided by the memories. "
             f"The product uses `{res['product_layout']}`.", "",
             "| name | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    lines += [f"| `{i}` | " + " | ".join(str(df.loc[i, c]) for c in cols) + " |" for i in df.index]
    lines += ["", "What each keeps:", "", "| name | " + " | ".join(feats) + " |", "|" + "---|" * (len(feats) + 1)]
    lines += [f"| `{i}` | " + " | ".join(str(df.loc[i, c]) for c in feats) + " |" for i in df.index]
    g = res["global_knn"]
    lines += ["", f"Global KNN (no owner scope, all {res['n']:,} memories in one index or one set), k=10:", "",
              "| index | recall@10 | p50 ms | p99 ms | bytes/memory |", "|---|---|---|---|---|"]
    lines += [f"| `{k}` | {v['recall@10']:.3f} | {v['p50_ms']:.3f} | {v['p99_ms']:.3f} | "
              f"{round(v['bytes_per_memory']) if 'bytes_per_memory' in v else ''} |" for k, v in g.items()]
    lines += ["", "The product stores one Vector Set per owner (`ns:memvec:{owner}`), so its searches are the "
              "per-user rows above; the global rows show what HNSW itself does at this size."]
    return "\n".join(lines) + "\n"


def plot_layouts(res: dict, path: Path | None = None):
    """Bytes per memory (log) vs recall@10 of one user's k=10 search, one marker per layout."""
    import matplotlib.pyplot as plt

    markers = {"json": "s", "hash": "D", "vset": "o"}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, v in res["layouts"].items():
        star = name == res["product_layout"]
        ax.scatter(v["bytes_per_memory"], v["recall@10"], s=160 if star else 50, alpha=0.85,
                   marker="*" if star else markers[name.split("_")[0]],
                   label=f"{name}: {v['bytes_per_memory']:,.0f} B, recall {v['recall@10']:.3f}, p50 {v['p50_ms']:.3f} ms")
    ax.set_xscale("log")
    ax.set_xlabel("bytes of Redis memory per memory (INFO used_memory growth, log scale)")
    ax.set_ylabel("recall@10, one user's memories, vs exact")
    ax.set_title(f"Storage layouts at {res['n']:,} memories: cost vs recall (★ = memorykit's)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def plot_sweep(sweep: list[dict], path: Path | None = None):
    """Global recall@10 vs Redis-side p50 latency as the HNSW search width grows (labels: EF)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for engine in sorted({s["engine"] for s in sweep}):
        pts = [s for s in sweep if s["engine"] == engine]
        ax.plot([p["p50_ms"] for p in pts], [p["recall@10"] for p in pts], marker="o", label=engine)
        for p in pts:
            ax.annotate(str(p["ef"]), (p["p50_ms"], p["recall@10"]), fontsize=7, textcoords="offset points",
                        xytext=(3, -8))
    ax.set_xscale("log")
    ax.set_xlabel("Redis-side p50 latency per query (ms, SLOWLOG, log scale)")
    ax.set_ylabel("recall@10 vs exact search (global)")
    ax.set_title("HNSW over all memories: recall vs latency (labels: EF)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--unique", type=int, default=1000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--ingest", type=int, default=0, help="texts for the MemoryStore.add_many ingest measurement")
    p.add_argument("--quick", action="store_true", help="3 search widths in the HNSW sweep instead of 6")
    p.add_argument("--out", default=str(ROOT / "docs" / "scale_results.json"))
    args = p.parse_args(argv)
    t = time.perf_counter()
    res = run(args.n, args.unique, args.queries, args.quick, ingest=args.ingest)
    res["total_seconds"] = time.perf_counter() - t
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1) + "\n")
    out.with_name("scale_layouts.md").write_text(markdown(res))
    plot_layouts(res, out.with_name("scale_layouts.png"))
    plot_sweep(res["ef_sweep"], out.with_name("scale_hnsw_sweep.png"))
    print(table(res).iloc[:, :6].to_string())
    print(f"wrote {out}, scale_layouts.md, scale_layouts.png, scale_hnsw_sweep.png in {res['total_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
