"""See embeddings: a UMAP projection to 2-D and a matplotlib scatter coloured by label.

UMAP's first fit in a process compiles numba code (~13 s); set ``NUMBA_CACHE_DIR`` to a
persistent folder before importing umap so later kernels reuse the compiled code.
"""
from __future__ import annotations

import os
import warnings
from typing import Mapping, Sequence

import numpy as np

from ..config import settings


def _import_umap():
    os.environ.setdefault("NUMBA_CACHE_DIR", str(settings().data_dir / "numba_cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import umap
    return umap


def umap_project(vectors, *, n_neighbors: int = 15, min_dist: float = 0.1, random_state: int = 42,
                 metric: str = "cosine"):
    """Fit UMAP on ``vectors`` (n x d); returns ``(reducer, coords)`` with coords n x 2.

    A fixed ``random_state`` makes the picture the same on every run (UMAP then runs single-threaded).
    """
    umap = _import_umap()
    data = np.asarray(vectors, dtype=np.float32)
    reducer = umap.UMAP(n_neighbors=min(n_neighbors, len(data) - 1), min_dist=min_dist,
                        metric=metric, random_state=random_state, n_jobs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coords = reducer.fit_transform(data)
    return reducer, coords


def plot_umap(vectors, labels: Sequence[str], *, texts: Sequence[str] | None = None,
              annotate: Sequence[int] = (), queries: Mapping[str, Sequence[float]] | None = None,
              neighbors: Mapping[str, Sequence[int]] | None = None, title: str = "Memories in 2-D (UMAP)",
              random_state: int = 42, n_neighbors: int = 15, ax=None, reducer_coords=None):
    """Scatter the UMAP projection of ``vectors``, one colour per label.

    ``annotate``: indices of points to label with their (shortened) text. ``queries``: name ->
    vector, drawn as stars where UMAP places them; ``neighbors``: name -> indices of that
    query's nearest memories, joined to it by lines. Returns ``(ax, coords)``.
    """
    import matplotlib.pyplot as plt

    if len(vectors) != len(labels):
        raise ValueError(f"{len(vectors)} vectors but {len(labels)} labels")
    reducer, coords = reducer_coords or umap_project(vectors, n_neighbors=n_neighbors,
                                                     random_state=random_state)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 5))
    names = sorted(set(labels))
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    labels_arr = np.asarray(labels)
    for i, name in enumerate(names):
        pts = coords[labels_arr == name]
        ax.scatter(pts[:, 0], pts[:, 1], s=14, alpha=0.7, color=cmap(i % cmap.N), label=name)
    for i in annotate:
        text = (texts[i] if texts is not None else labels[i])
        text = text if len(text) <= 38 else text[:36] + "…"
        ax.annotate(text, coords[i], fontsize=7, xytext=(4, 4), textcoords="offset points")
    for name, vector in (queries or {}).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q = reducer.transform(np.asarray([vector], dtype=np.float32))[0]
        for j in (neighbors or {}).get(name, ()):
            ax.plot([q[0], coords[j, 0]], [q[1], coords[j, 1]], color="black", lw=0.6, alpha=0.6)
        ax.scatter([q[0]], [q[1]], marker="*", s=260, color="black", edgecolor="white", zorder=5)
        ax.annotate(name, q, fontsize=8, fontweight="bold", xytext=(6, -10), textcoords="offset points")
    ax.set_title(title)
    ax.set_xlabel("UMAP 1")
    ax.set_ylabel("UMAP 2")
    ax.legend(fontsize=7, markerscale=1.2, loc="best", title="topic")
    return ax, coords
