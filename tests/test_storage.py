"""The storage budget of long-term memory, through the public API on 3,000 memories.

Bytes per memory is INFO used_memory before and after ``add_many`` in a fresh namespace (embeddings
computed first, so the embeddings cache is not counted); the budget is issue 28's: at most 3,000 bytes
(a JSON document holding its vector took ~15,000). Recall@10 compares VSIM on one user's Vector Set
(8-bit quantized, HNSW) with exact cosine search in numpy over the same float32 vectors.

Embedding 3,000 texts one at a time takes minutes on 2 cores, so the vectors are MiniLM embeddings of 300 of
the texts, each reused for ten texts with a little noise (clustered like real embeddings, all distinct), handed
to the store by a lookup in place of the model; the texts stored are the 3,000 distinct ones.
"""
import gc
import itertools
import uuid

import numpy as np
import pytest

import memorykit as mk

from conftest import drop_namespace

pytestmark = pytest.mark.slow  # embeds and stores 3,000 memories

N = 3000
BIG = "system"  # the adversarial-looking id holds a third of the memories: the recall check searches it
OTHERS = ["{x}", "a|b", "ana", "Ana", *[f"user{i}" for i in range(55)]]
BUDGET = 3000
SUBJECTS = ["User", "User's sister", "User's manager", "User's neighbour", "User's son", "User's friend Sam"]
ACTS = ["went hiking in", "bought a flat in", "ran a half marathon in", "took a cooking class in",
        "lost a suitcase in", "met an old classmate in", "celebrated a birthday in", "started a new job in",
        "visited a museum in", "had food poisoning in"]
PLACES = ["Lisbon", "Berlin", "Oslo", "Kyoto", "Lima", "Nairobi", "Toronto", "Hanoi", "Krakow", "Porto",
          "Seville", "Dublin", "Quito", "Perth", "Tunis", "Riga", "Bergen", "Cusco", "Izmir", "Lyon"]


def _texts() -> list[str]:
    combos = itertools.product(SUBJECTS, ACTS, PLACES, range(2000, 2026))
    rng = np.random.default_rng(7)
    pool = [f"{s} {a} {p} in {y}" for s, a, p, y in combos]
    return [pool[i] for i in rng.choice(len(pool), N, replace=False)]


def _used(r) -> int:
    gc.collect()
    return int(r.info("memory")["used_memory"])


class Lookup:
    """The embedder interface over precomputed vectors: text -> its vector."""

    def __init__(self, table: dict[str, list[float]], dims: int):
        self.table, self.dims = table, dims

    def embed(self, text: str) -> list[float]:
        return self.table[text]

    def embed_many(self, texts, batch_size: int = 64) -> list[list[float]]:
        return [self.table[t] for t in texts]

    def forget(self, texts) -> None:
        pass


@pytest.fixture(scope="module")
def filled(r, emb):
    """3,000 memories of 60 users (a third of them ``system``'s) in a fresh namespace, and the bytes they took."""
    ns = "st" + uuid.uuid4().hex[:8]
    store = mk.MemoryStore(r, emb, namespace=ns)
    texts = _texts()
    owners = [BIG if i % 3 == 0 else OTHERS[i % len(OTHERS)] for i in range(N)]
    base = np.asarray(emb.embed_many(texts[::10]), dtype=np.float32)
    noisy = np.repeat(base, 10, axis=0) + np.random.default_rng(3).normal(0, 0.03, (N, base.shape[1]))
    vectors = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    store.embedder = Lookup(dict(zip(texts, vectors.tolist())), emb.dims)
    before = _used(r)
    memories = store.add_many([{"content": t, "user_id": u} for t, u in zip(texts, owners)])
    after = _used(r)
    yield store, memories, vectors, (after - before) / N
    drop_namespace(r, ns)


def test_bytes_per_memory_within_budget(filled):
    store, memories, _, per_memory = filled
    print(f"bytes per memory: {per_memory:.0f}")
    assert per_memory <= BUDGET
    assert store.count(BIG, ["episodic"]) == N // 3 and store.count("{x}", ["episodic"]) > 0


def test_vsim_recall_at_10_and_distances_match_numpy(filled):
    store, memories, vectors, _ = filled
    mine = [i for i, m in enumerate(memories) if m.user_id == BIG]
    ids, theirs = [memories[i].id for i in mine], vectors[mine]
    rng = np.random.default_rng(11)
    recalls, errors = [], []
    for q in rng.choice(len(mine), 50, replace=False):
        query = theirs[q] + rng.normal(0, 0.02, theirs.shape[1]).astype(np.float32)  # near, not on, a memory
        exact = 1.0 - theirs @ query / np.linalg.norm(query)
        truth = {ids[j] for j in np.argsort(exact)[:10]}
        hits = store.search("", user_id=BIG, memory_types=["episodic"], k=10, vector=query.tolist(), touch=False)
        recalls.append(len(truth & {h.memory.id for h in hits}) / 10)
        errors += [abs(h.distance - exact[ids.index(h.memory.id)]) for h in hits]
        assert {h.memory.user_id for h in hits} == {BIG}
    print(f"recall@10 {np.mean(recalls):.3f}, max |distance - numpy| {max(errors):.4f}")
    assert np.mean(recalls) >= 0.95
    assert max(errors) < 0.02  # VSIM's similarity, converted, is numpy's cosine distance up to 8-bit rounding
