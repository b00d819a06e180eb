"""Long-term memory overheads, measured as ratios in one run.

    python benchmarks/long_term.py [--sizes 1000 10000] [--queries 200]
    python benchmarks/long_term.py --extraction     # offline extractor on held-out messages

At each store size it times, per query, (a) embedding the query (cached embedder, cache
miss), (b) a raw VSIM on the user's Vector Set with a precomputed vector and the same filter,
(c) ``MemoryStore.search`` end to end (embed + query + fetch + last_accessed update), and
prints search / (embed + raw). It also prints bulk ``add_many`` throughput as a share of
raw model embedding throughput (``embed_many`` on the bare model, no cache, no Redis).
Absolute times depend on the machine; the ratios are the result.

``--extraction`` scores the configured LLM's ``extract_memories`` on
``data/memories/extraction_heldout.jsonl`` (messages written apart from the notebooks and
tests, never tuned on): a found memory counts when its type matches and it lies within
cosine distance 0.2 of an expected one; messages that hold nothing must yield nothing.
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memorykit as mk  # noqa: E402
from memorykit.embeddings import _base_vectorizer  # noqa: E402
from memorykit.config import data_path, settings  # noqa: E402
from memorykit.memory import vectors  # noqa: E402
from memorykit.memory.index import content_hash  # noqa: E402

USERS = [f"user{i}" for i in range(20)]
VERBS = ["went to", "loves", "wants to visit", "works in", "studied in", "ran a race in", "lived in", "ate well in"]
CITIES = ["Paris", "Lisbon", "Tokyo", "Rome", "Berlin", "Oslo", "Kyoto", "Lima", "Seoul", "Quito", "Cairo", "Hanoi"]


def texts(tag: str, n: int) -> list[str]:
    """``n`` distinct memory-like sentences (distinct per tag, so the embeddings cache never helps)."""
    return [f"User {VERBS[i % len(VERBS)]} {CITIES[(i // 8) % len(CITIES)]} in {1950 + i % 70} "
            f"({tag} note {i})" for i in range(n)]


def questions(tag: str, n: int) -> list[str]:
    return [f"Where did I go in {1950 + i % 70}? ({tag} {i})" for i in range(n)]


def extraction_scores(llm=None, emb=None, match_distance: float = 0.2) -> dict[str, float]:
    """Precision / recall of ``extract_memories`` on the held-out messages (see the module doc)."""
    import numpy as np

    emb = emb or mk.get_embedder(mk.connect())
    llm = llm or mk.get_llm(default="offline")
    rows = [json.loads(line) for line in data_path("memories", "extraction_heldout.jsonl").open()]
    tp = found_n = expected_n = quiet_ok = quiet_n = exact = 0
    misses = []
    for row in rows:
        found = mk.extract_memories(row["text"], llm=llm)
        expected = row["expected"]
        found_n, expected_n = found_n + len(found), expected_n + len(expected)
        if not expected:
            quiet_n += 1
            quiet_ok += not found
            if found:
                misses.append(("extra", row["text"], [c.content for c in found]))
            continue
        used: set[int] = set()
        for want in expected:
            w = np.array(emb.embed(want["content"]))
            best, best_d = None, match_distance
            for i, c in enumerate(found):
                if i in used or c.type != want["type"]:
                    continue
                v = np.array(emb.embed(c.content))
                d = 1 - float(w @ v / (np.linalg.norm(w) * np.linalg.norm(v)))
                if d <= best_d:
                    best, best_d = i, d
            if best is None:
                misses.append(("missed", row["text"], want["content"], [c.content for c in found]))
            else:
                used.add(best)
                tp += 1
                exact += content_hash(found[best].content) == content_hash(want["content"])
    p, r = tp / max(found_n, 1), tp / max(expected_n, 1)
    return {"messages": len(rows), "expected": expected_n, "found": found_n, "matched": tp,
            "exact": exact, "precision": p, "recall": r, "f1": 2 * p * r / max(p + r, 1e-9),
            "quiet_correct": quiet_ok, "quiet": quiet_n, "misses": misses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--extraction", action="store_true", help="score extract_memories on held-out messages")
    ap.add_argument("--verbose", action="store_true", help="with --extraction: list every miss")
    args = ap.parse_args()
    if args.extraction:
        s = extraction_scores()
        print(f"{s['messages']} held-out messages, {s['expected']} expected memories, {s['found']} found")
        print(f"precision {s['precision']:.2f}  recall {s['recall']:.2f}  F1 {s['f1']:.2f}  "
              f"(exact wording {s['exact']}/{s['matched']}); quiet messages left quiet "
              f"{s['quiet_correct']}/{s['quiet']}")
        for miss in s["misses"] if args.verbose else []:
            print("  ", *miss)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still drop the namespace when killed

    r = mk.connect()
    emb = mk.get_embedder(r)
    raw_model = _base_vectorizer(settings().embedder)
    ns = "bench" + uuid.uuid4().hex[:8]
    store = mk.MemoryStore(r, emb, namespace=ns)
    run = uuid.uuid4().hex[:6]
    emb.embed_many(["warm up the model"] * 8)
    print(f"model {emb.name}, {emb.dims} dims; namespace {ns}; {args.queries} queries per measurement\n")
    try:
        stored = 0
        for size in sorted(args.sizes):
            n = size - stored
            add_s = embed_s = 0.0
            for start in range(stored, size, 500):  # alternate chunks, so load changes hit both alike
                chunk = range(start, min(start + 500, size))
                items = [{"content": c, "user_id": USERS[i % len(USERS)]}
                         for i, c in zip(chunk, texts(f"{run}-add", size)[chunk.start:chunk.stop])]
                t = time.perf_counter()
                store.add_many(items, batch_size=64)
                add_s += time.perf_counter() - t
                t = time.perf_counter()
                raw_model.embed_many(texts(f"{run}-raw", size)[chunk.start:chunk.stop], batch_size=64)
                embed_s += time.perf_counter() - t
            add_rate, embed_rate = n / add_s, n / embed_s
            stored = size

            q_embed, q_search = questions(f"{run}-e{size}", args.queries), questions(f"{run}-s{size}", args.queries)
            a, b, c = [], [], []
            for qe, qs in zip(q_embed, q_search):  # interleaved, so load changes hit all three alike
                user = USERS[len(a) % len(USERS)]
                t0 = time.perf_counter()
                vector = emb.embed(qe)
                t1 = time.perf_counter()
                r.execute_command("VSIM", store.vectors_key(user), "FP32", vectors.blob(vector), "COUNT", 5,
                                  "WITHSCORES", "FILTER", vectors.where(["episodic", "semantic"]))
                t2 = time.perf_counter()
                store.search(qs, user_id=user, k=5)
                t3 = time.perf_counter()
                a.append(t1 - t0), b.append(t2 - t1), c.append(t3 - t2)
            ma, mb, mc = (statistics.median(x) * 1000 for x in (a, b, c))
            print(f"== {size:,} memories ==")
            print(f"  (a) embed query         median {ma:7.2f} ms")
            print(f"  (b) raw VSIM (own set)  median {mb:7.2f} ms")
            print(f"  (c) MemoryStore.search  median {mc:7.2f} ms")
            print(f"  search / (embed + raw)         = {mc / (ma + mb):.2f}")
            print(f"  bulk add_many: {add_rate:,.0f} memories/s vs raw embedding {embed_rate:,.0f} texts/s"
                  f"  -> ratio {add_rate / embed_rate:.2f}\n")
    finally:
        store.drop()
        leftovers = list(r.scan_iter(match=f"{ns}:*"))
        if leftovers:
            r.delete(*leftovers)


if __name__ == "__main__":
    main()
