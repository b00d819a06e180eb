"""Long-term memory at 100k memories: recall, latency, ingest and memory, measured in one run.

    python benchmarks/scale.py                      # 100k memories, ~10 min on 2 cores
    python benchmarks/scale.py --n 5000 --quick     # the small run notebook 09 does

It starts its own throw-away redis-server (the embedded binaries, loopback, a temp dir, no
persistence) so nothing else on the machine shares its memory or CPU counters, then:

1. embeds ``--unique`` synthetic sentences built from a small vocabulary with MiniLM
   (raw model throughput), and stores 1,000 of them through ``MemoryStore.add_many``
   (end-to-end ingest throughput, as a share of the raw model throughput, itself measured
   before and after and averaged, since other processes share the cores);
2. loads ``--n`` memories for ``n / 50`` users in the memory index's own schema (JSON
   documents, HNSW M=16 EF_CONSTRUCTION=200). Embedding 100k texts with MiniLM on 2 cores
   would take longer than the whole budget, so their vectors are the unique sentences'
   embeddings plus Gaussian noise: clustered like real embeddings, all distinct;
3. measures bytes per memory (``INFO memory`` before / after, and ``FT.INFO``), Redis-side
   p50 / p99 latency (``SLOWLOG`` with every command logged: server time, no network) of the
   real query shape (one user's memories, k=10), and recall@10 of HNSW (the memory index) and
   FLAT (over FLOAT32 HASH copies of the vectors) against exact numpy search, with and
   without the user filter;
4. sweeps HNSW M x EF_CONSTRUCTION x EF_RUNTIME on vector-only indexes built over FLOAT32 HASH
   copies of the same vectors (parsing 100k JSON arrays again per build would dominate the
   run; ``--quick`` sweeps EF_RUNTIME on the memory index only): build time, recall@10, p50
   latency; writes ``docs/scale_results.json`` and ``docs/scale_hnsw_sweep.png``.
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

DIMS = 384
PER_USER = 50
SUBJECTS = ["I", "My sister", "My partner", "Our team", "My dad", "The kids", "My friend Sam", "My manager"]
VERBS = ["went hiking in", "booked a trip to", "started a pottery class in", "moved to", "ran a race in",
         "had dinner in", "lost a wallet in", "bought a bike in", "learned to cook in", "painted a mural in"]
PLACES = ["Lisbon", "Kyoto", "Leeds", "Oslo", "Lima", "Seoul", "Cairo", "Hanoi", "Quito", "Bergen",
          "Porto", "Osaka", "Bath", "Tromsø", "Madrid", "Chennai", "Lagos", "Hamburg", "Kraków", "Sheffield"]
WHEN = ["last spring", "in 2019", "two weeks ago", "over the winter", "on my birthday", "after the wedding",
        "during the heatwave", "at Easter", "in the autumn", "before the exams"]


def sentences(n: int) -> list[str]:
    """``n`` distinct memory-like sentences from the vocabulary above."""
    out = []
    for i in range(n):
        s, v, p, w = (i % 8, (i // 8) % 10, (i // 80) % 20, (i // 1600) % 10)
        out.append(f"{SUBJECTS[s]} {VERBS[v]} {PLACES[p]} {WHEN[w]} (note {i})")
    return out


@contextlib.contextmanager
def private_server():
    """A throw-away redis-server with search + JSON on a free loopback port."""
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


def knn_args(field: str, k: int, user: str | None, ef: int | None) -> tuple[str, list]:
    scope = f"(@user_id:{{{user}}})" if user else "*"
    ef_part = " EF_RUNTIME $ef" if ef else ""
    return f"{scope}=>[KNN {k} @{field} $vec{ef_part} AS d]", (["ef", ef] if ef else [])


def query(r, index, vec, k=10, user=None, ef=None, profile=False, field="embedding"):
    """One KNN query; returns (ids, FT.PROFILE total ms when ``profile``: 1 ms resolution on 2.10)."""
    q, extra = knn_args(field, k, user, ef)
    params = ["vec", vec.tobytes(), *extra]
    tail = ["SORTBY", "d", "LIMIT", 0, k, "NOCONTENT", "PARAMS", len(params), *params, "DIALECT", 2]
    if profile:
        raw = r.execute_command("FT.PROFILE", index, "SEARCH", "QUERY", q, *tail)
        res, prof = (raw, raw["profile"]) if isinstance(raw, dict) else (raw[0], raw[1])
        ms = _profile_ms(prof)
    else:
        res, ms = r.execute_command("FT.SEARCH", index, q, *tail), None
    ids = res[1:] if isinstance(res, list) else [d["id"] for d in res["results"]]
    return [i.rsplit(":", 1)[-1] for i in ids], ms


def _profile_ms(prof) -> float:
    if isinstance(prof, dict):
        return float(prof.get("Total profile time", 0))
    flat = prof if isinstance(prof, list) else []
    for item in flat:
        if isinstance(item, list) and item and item[0] == "Total profile time":
            return float(item[1])
    raise ValueError(f"no profile time in {prof!r:.200}")


def recall(found: list[list[str]], truth: list[list[str]]) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth) if t]))


def memory_schema(namespace: str, algorithm: str = "hnsw", **attrs) -> dict:
    from memorykit.memory.long_term import memory_schema as schema

    s = schema(namespace, DIMS)
    for f in s["fields"]:
        if f["type"] == "vector":
            f["attrs"] = {**f["attrs"], "algorithm": algorithm, **attrs}
    return s


def ingest_share(r: redis.Redis, texts: list[str]) -> dict:
    """Raw MiniLM throughput vs MemoryStore.add_many (embed + JSON write + index) on the same texts."""
    from memorykit.embeddings import get_embedder
    from memorykit.memory.long_term import MemoryStore

    emb = get_embedder(cache=False)
    emb.embed_many(texts[:32])  # warm the model
    t = time.perf_counter()
    vecs = emb.embed_many(texts, progress=False)
    raw1 = len(texts) / (time.perf_counter() - t)
    store = MemoryStore(r, emb, namespace="ingest")
    t = time.perf_counter()
    store.add_many([{"content": s, "user_id": f"u{i % 20}"} for i, s in enumerate(texts)])
    e2e = len(texts) / (time.perf_counter() - t)
    store.drop()
    t = time.perf_counter()
    emb.embed_many(texts, progress=False)
    raw = (raw1 + len(texts) / (time.perf_counter() - t)) / 2
    return {"texts": len(texts), "raw_embed_per_s": raw, "add_many_per_s": e2e,
            "share": e2e / raw, "vectors": np.asarray(vecs, np.float32)}


def load(r: redis.Redis, schema: dict, vectors: np.ndarray, users: np.ndarray, texts: list[str]) -> float:
    """Write one JSON memory document per vector (pipelines of 500); returns seconds incl. indexing."""
    from redisvl.index import SearchIndex

    SearchIndex.from_dict(schema, redis_client=r).create(overwrite=True)
    prefix, now = schema["index"]["prefix"], time.time()
    t = time.perf_counter()
    for start in range(0, len(vectors), 500):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + 500, len(vectors))):
            doc = {"id": f"m{i}", "user_id": f"user{users[i]}", "user_tag": f"user{users[i]}",
                   "memory_type": "episodic", "content": texts[i % len(texts)],
                   "content_hash": f"h{i}", "topics": [], "created_at": now - i, "updated_at": now - i,
                   "valid_from": now - i, "metadata": {}, "embedding": vectors[i].tolist()}
            pipe.json().set(f"{prefix}:m{i}", "$", doc)
        pipe.execute()
    wait_indexed(r, schema["index"]["name"])
    return time.perf_counter() - t


def hash_bytes_per_memory(r: redis.Redis, vectors: np.ndarray, users: np.ndarray, texts: list[str]) -> float:
    """Bytes per memory if the same fields were a HASH with the vector as a FLOAT32 blob."""
    r.execute_command("FT.CREATE", "hashalt", "ON", "HASH", "PREFIX", 1, "hashalt:", "SCHEMA",
                      "content", "TEXT", "user_id", "TAG", "memory_type", "TAG", "created_at", "NUMERIC",
                      "last_accessed", "NUMERIC", "invalid_at", "NUMERIC", "embedding", "VECTOR", "HNSW", 6,
                      "TYPE", "FLOAT32", "DIM", DIMS, "DISTANCE_METRIC", "COSINE")
    before, now = int(r.info("memory")["used_memory"]), time.time()
    for start in range(0, len(vectors), 500):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + 500, len(vectors))):
            pipe.hset(f"hashalt:m{i}", mapping={
                "id": f"m{i}", "user_id": f"user{users[i]}", "memory_type": "episodic",
                "content": texts[i % len(texts)], "created_at": now - i, "last_accessed": now - i,
                "embedding": vectors[i].tobytes()})
        pipe.execute()
    wait_indexed(r, "hashalt")
    used = (int(r.info("memory")["used_memory"]) - before) / len(vectors)
    r.execute_command("FT.DROPINDEX", "hashalt", "DD")
    return used


def load_vectors_as_hashes(r: redis.Redis, vectors: np.ndarray, users: np.ndarray) -> None:
    """The same vectors as FLOAT32 blobs in HASHes (no index yet): what FLAT and the sweep scan."""
    for start in range(0, len(vectors), 1000):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + 1000, len(vectors))):
            pipe.hset(f"vec:m{i}", mapping={"embedding": vectors[i].tobytes(), "user_id": f"user{users[i]}"})
        pipe.execute()


def hash_vector_index(r: redis.Redis, name: str, algorithm: str, **params) -> float:
    """A user TAG + vector index over the ``vec:`` HASHes; returns its build seconds."""
    args = ["TYPE", "FLOAT32", "DIM", DIMS, "DISTANCE_METRIC", "COSINE"]
    for key, value in params.items():
        args += [key.upper(), value]
    t = time.perf_counter()
    r.execute_command("FT.CREATE", name, "ON", "HASH", "PREFIX", 1, "vec:", "SCHEMA", "user_id", "TAG",
                      "CASESENSITIVE", "embedding", "VECTOR", algorithm.upper(), len(args), *args)
    wait_indexed(r, name)
    return time.perf_counter() - t


def ft_info_mb(r: redis.Redis, name: str) -> dict:
    info = r.ft(name).info()
    keys = ("vector_index_sz_mb", "inverted_sz_mb", "doc_table_size_mb", "offset_vectors_sz_mb",
            "sortable_values_size_mb", "key_table_size_mb", "tag_overhead_sz_mb", "text_overhead_sz_mb",
            "total_index_memory_sz_mb")
    return {k: float(info[k]) for k in keys if k in info}


def percentile(xs, p):
    return float(np.percentile(np.asarray(xs, float), p))


def run(n: int = 100_000, unique: int = 1000, queries: int = 200, quick: bool = False,
        noise: float = 0.03, ingest: int = 1000, embedder=None, log=print) -> dict:
    """Every measurement of the module docstring; returns the results dict.

    ``ingest=0`` skips the end-to-end ingest measurement; ``embedder`` (e.g. a cached one)
    embeds the unique sentences it did not already embed.
    """
    rng = np.random.default_rng(42)
    out: dict = {"n": n, "unique_texts": unique, "queries": queries, "dims": DIMS,
                 "vectors": f"MiniLM embeddings of {unique} synthetic sentences + Gaussian noise "
                            f"(std {noise} per dimension), normalized"}
    with private_server() as r:
        texts = sentences(unique)
        base = np.zeros((0, DIMS), np.float32)
        if ingest:
            ing = ingest_share(r, texts[: min(unique, ingest)])
            base = ing.pop("vectors")
            out["ingest"] = ing
            log(f"raw MiniLM {ing['raw_embed_per_s']:.0f} texts/s; MemoryStore.add_many "
                f"{ing['add_many_per_s']:.0f}/s = {ing['share']:.0%} of raw embedding throughput "
                f"({ing['texts']} texts)")
        if unique > len(base):
            from memorykit.embeddings import get_embedder

            more = (embedder or get_embedder(cache=False)).embed_many(texts[len(base):])
            base = np.vstack([base, np.asarray(more, np.float32)])

        users = rng.integers(0, max(1, n // PER_USER), size=n)
        vectors = unit(base[np.arange(n) % unique] + rng.normal(0, noise, (n, DIMS)))
        qbase = rng.integers(0, unique, size=queries)
        qvecs = unit(base[qbase] + rng.normal(0, noise, (queries, DIMS)))
        quser = users[rng.integers(0, n, size=queries)]
        sims = qvecs @ vectors.T
        truth = [[f"m{j}" for j in np.argsort(-s)[:10]] for s in sims]
        truth_user = []
        for s, u in zip(sims, quser):
            idx = np.flatnonzero(users == u)
            truth_user.append([f"m{j}" for j in idx[np.argsort(-s[idx])][:10]])

        before = int(r.info("memory")["used_memory"])
        schema = memory_schema("scale")
        secs = load(r, schema, vectors, users, texts)
        after = int(r.info("memory")["used_memory"])
        name = schema["index"]["name"]
        sample = [f"scale:memory:m{i}" for i in rng.integers(0, n, 200)]
        doc_bytes = float(np.mean([r.memory_usage(k) for k in sample]))
        out["load"] = {"seconds": secs, "memories_per_s": n / secs, "users": int(users.max() + 1)}
        out["memory"] = {"used_memory_delta_bytes": after - before, "bytes_per_memory": (after - before) / n,
                         "json_doc_bytes_mean": doc_bytes, "ft_info_mb": ft_info_mb(r, name)}
        m = min(n, 10_000)
        out["memory"]["hash_float32_bytes_per_memory"] = hash_bytes_per_memory(r, vectors[:m], users[:m], texts)
        log(f"loaded {n} memories for {users.max() + 1} users in {secs:.1f} s ({n / secs:.0f}/s incl. HNSW indexing)")
        log(f"memory: {(after - before) / n:.0f} bytes per memory (INFO used_memory delta), "
            f"of which the JSON document ~{doc_bytes:.0f} B; FT.INFO vector index "
            f"{out['memory']['ft_info_mb'].get('vector_index_sz_mb', 0):.1f} MB; as a HASH with a FLOAT32 "
            f"vector: {out['memory']['hash_float32_bytes_per_memory']:.0f} bytes per memory")

        def measure(index, qs, users_, ef=None, field="embedding", k=10):
            """Run the queries; Redis-side times come from SLOWLOG (every command logged, in µs)."""
            r.config_set("slowlog-log-slower-than", 0)
            r.config_set("slowlog-max-len", len(qs) + 100)
            r.slowlog_reset()
            found, client = [], []
            for q, u in zip(qs, users_):
                t = time.perf_counter()
                found.append(query(r, index, q, k, u, ef, field=field)[0])
                client.append((time.perf_counter() - t) * 1000)
            log_ = r.slowlog_get(len(qs) + 100)
            r.config_set("slowlog-log-slower-than", 10000)
            server = [e["duration"] / 1000 for e in log_ if "FT.SEARCH" in str(e.get("command", "")).upper()]
            return found, server, client

        results = {}
        for label, users_, tr in (("user", [f"user{u}" for u in quser], truth_user), ("global", [None] * queries, truth)):
            f, s, c = measure(name, qvecs, users_)
            results[f"hnsw_{label}"] = {"recall@10": recall(f, tr), "p50_ms": percentile(s, 50),
                                        "p99_ms": percentile(s, 99), "client_p50_ms": percentile(c, 50),
                                        "client_p99_ms": percentile(c, 99)}
        load_vectors_as_hashes(r, vectors, users)
        out["flat_build_s"] = hash_vector_index(r, "flat", "flat")
        for label, users_, tr in (("user", [f"user{u}" for u in quser], truth_user), ("global", [None] * queries, truth)):
            f, s, c = measure("flat", qvecs, users_)
            results[f"flat_{label}"] = {"recall@10": recall(f, tr), "p50_ms": percentile(s, 50),
                                        "p99_ms": percentile(s, 99), "client_p50_ms": percentile(c, 50),
                                        "client_p99_ms": percentile(c, 99)}
        r.ft("flat").dropindex(delete_documents=False)
        out["queries_k10"] = results
        for key, v in results.items():
            log(f"{key:12s} recall@10 {v['recall@10']:.3f}  Redis-side p50 {v['p50_ms']:.2f} ms  "
                f"p99 {v['p99_ms']:.2f} ms  (client p50 {v['client_p50_ms']:.2f} ms)")

        grid = [(16, 200)] if quick else [(16, 200), (8, 200), (32, 200), (16, 100)]
        efs = [10, 50, 200] if quick else [10, 20, 50, 100, 200, 400]
        sweep = []
        for m, efc in grid:
            if quick:  # the memory index itself (RedisVL's HNSW defaults: M=16, EF_CONSTRUCTION=200)
                index, build = name, secs
            else:  # vector-only indexes over FLOAT32 HASH copies (parsing JSON arrays would dominate)
                index = "sweep"
                build = hash_vector_index(r, index, "hnsw", m=m, ef_construction=efc)
            mb = ft_info_mb(r, index).get("vector_index_sz_mb", 0.0)
            for ef in efs:
                f, s, _ = measure(index, qvecs, [None] * queries, ef=ef)
                sweep.append({"M": m, "EF_CONSTRUCTION": efc, "EF_RUNTIME": ef, "build_s": build,
                              "index_mb": mb, "recall@10": recall(f, truth), "p50_ms": percentile(s, 50),
                              "p99_ms": percentile(s, 99)})
                log(f"HNSW M={m:<2} EFC={efc:<3} EF_RUNTIME={ef:<3} build {build:5.1f} s  "
                    f"recall@10 {sweep[-1]['recall@10']:.3f}  p50 {sweep[-1]['p50_ms']:.2f} ms")
            r.ft(index).dropindex(delete_documents=False)
        out["hnsw_sweep"] = sweep
        out["hnsw_sweep_note"] = ("each point: a vector-only HNSW index built over FLOAT32 HASH copies of the same "
                                  "vectors (build_s: FT.CREATE until fully indexed), queried without a filter")
    bpm = out["memory"]["bytes_per_memory"]
    out["sizing_gb"] = {"1M": bpm * 1e6 / 2**30, "100M": bpm * 1e8 / 2**30}
    log(f"sizing at {bpm:.0f} B/memory: 1M memories ~{out['sizing_gb']['1M']:.1f} GB, "
        f"100M ~{out['sizing_gb']['100M']:.0f} GB of RAM")
    return out


def plot_sweep(sweep: list[dict], path: Path | None = None):
    """Recall@10 vs Redis-side p50 latency, one line per (M, EF_CONSTRUCTION), points = EF_RUNTIME."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key in sorted({(s["M"], s["EF_CONSTRUCTION"]) for s in sweep}):
        pts = [s for s in sweep if (s["M"], s["EF_CONSTRUCTION"]) == key]
        ax.plot([p["p50_ms"] for p in pts], [p["recall@10"] for p in pts], marker="o",
                label=f"M={key[0]}, EF_CONSTRUCTION={key[1]}")
        for p in pts:
            ax.annotate(str(p["EF_RUNTIME"]), (p["p50_ms"], p["recall@10"]), fontsize=7,
                        textcoords="offset points", xytext=(3, -8))
    ax.set_xscale("log")
    ax.set_xlabel("Redis-side p50 latency per query (ms, SLOWLOG, log scale)")
    ax.set_ylabel("recall@10 vs exact search")
    ax.set_title("HNSW: recall vs latency (labels: EF_RUNTIME)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--unique", type=int, default=1000)
    p.add_argument("--ingest", type=int, default=1000, help="texts for the end-to-end ingest measurement")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--quick", action="store_true", help="one HNSW build and 3 EF_RUNTIME values")
    p.add_argument("--out", default=str(ROOT / "docs" / "scale_results.json"))
    args = p.parse_args(argv)
    t = time.perf_counter()
    res = run(args.n, args.unique, args.queries, args.quick, ingest=args.ingest)
    res["total_seconds"] = time.perf_counter() - t
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1) + "\n")
    plot_sweep(res["hnsw_sweep"], out.with_name("scale_hnsw_sweep.png"))
    print(f"wrote {out} and {out.with_name('scale_hnsw_sweep.png')} in {res['total_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
