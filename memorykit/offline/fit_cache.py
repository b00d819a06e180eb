"""Fitted offline models cached on disk, keyed by what they were trained from.

The key hashes a version string, scikit-learn's version, the training files and the source files
that define the model, so changing any of them retrains; a cache that cannot be read (another
environment) retrains too. One pickle per model name is kept.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import pickle
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from ..config import settings
from ..embeddings import TRAINING_BATCH, training_batches

log = logging.getLogger(__name__)
T = TypeVar("T")


def fingerprint(version: str, files: Iterable[Path]) -> str:
    """A short hash of ``version``, scikit-learn's version, how training texts are embedded and the bytes
    of ``files`` (missing: empty)."""
    import sklearn

    h = hashlib.sha256(f"{version} {sklearn.__version__} batched={TRAINING_BATCH}".encode())
    for path in files:
        h.update(path.read_bytes() if path.exists() else b"")
    return h.hexdigest()[:16]


def cached(name: str, key: str, fit: Callable[[], T], batched: bool = True) -> T:
    """``fit()``'s result, loaded from ``<data_dir>/offline/<name>-<key>.pkl`` when present, else fitted
    and stored there (older pickles of ``name`` removed). ``batched``: the fit embeds its training texts in
    batches (:func:`~memorykit.embeddings.training_batches`); off for a model whose fit magnifies their
    ~3e-7 difference (a tree ensemble's splits), so that a faster fit never changes its decisions."""
    path = settings().data_dir / "offline" / f"{name}-{key}.pkl"
    if path.exists():
        try:
            return pickle.loads(path.read_bytes())
        except Exception as exc:  # a cache from another environment: retrain
            log.info("retraining the offline %s model (%s)", name, exc)
    with training_batches() if batched else contextlib.nullcontext():  # batched: a cold fit in a fraction of the time
        fitted = fit()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f"{name}-*.pkl"):
            stale.unlink()
        path.write_bytes(pickle.dumps(fitted))
    except OSError as exc:
        log.info("could not cache the offline %s model: %s", name, exc)
    return fitted
