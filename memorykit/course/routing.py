"""Routing with RedisVL's ``SemanticRouter``: a choice among known options, by the nearest example.

Routes come from ``data/routes/<name>.jsonl``: ``train`` rows are the references, ``calibration`` rows
choose the distance threshold (and a multi-label margin); the held-out file is never read here. The
router index is built on first use, shared by every process and rebuilt when the data changes.
The course's routers: the offline backend's planner and feedback analyzer, and the wellness
demo's query types (:func:`query_classifier`, for ``ProcedureStore(classify=)``).
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import redis
from redisvl.extensions.router import Route, SemanticRouter
from redisvl.extensions.router.schema import DistanceAggregationMethod
from redisvl.index import SearchIndex

from ..config import data_path, settings
from ..embeddings import get_embedder

log = logging.getLogger(__name__)

ROUTES_NAMESPACE = "memorykit"
GRID = tuple(round(0.20 + 0.01 * i, 2) for i in range(61))   # candidate distance thresholds 0.20 .. 0.80
MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08)


@dataclass(frozen=True)
class Example:
    """One labelled utterance: its text, its labels (several for a multi-label router), its split."""

    text: str
    labels: tuple[str, ...]
    split: str


def load_examples(name: str) -> list[Example]:
    """Rows of ``data/routes/<name>.jsonl``: ``text`` with ``label`` (one) or ``tools`` (a set)."""
    lines = data_path("routes", f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [Example(row["text"], tuple(sorted(row["tools"] if "tools" in row else [row["label"]])),
                    row.get("split", "train")) for row in rows]


def readable(text: str) -> str:
    """Symbols spelled out (👍 -> "thumbs up sign"): the embedding model's vocabulary has no emoji."""
    return " ".join("".join(f" {unicodedata.name(c, '').lower()} " if unicodedata.category(c) == "So" else c
                            for c in text).split())


@dataclass(frozen=True)
class Calibration:
    """What the calibration split chose, and how well the choice did there."""

    threshold: float
    margin: float
    accuracy: float
    n_train: int
    n_calibration: int


def decide(distances: dict[str, float], threshold: float, margin: float | None) -> list[str]:
    """Routes whose nearest reference is under ``threshold`` and within ``margin`` of the best one.

    ``margin=None`` is single-label: the best route only. A reference labelled with two routes
    is stored in both, so a tie at distance d means "the nearest example needs both".
    """
    passing = sorted((k for k, d in distances.items() if d < threshold), key=lambda k: (distances[k], k))
    if margin is None or not passing:
        return passing[:1]
    return [k for k in passing if distances[k] <= distances[passing[0]] + margin + 1e-6]


def calibrate(train: Sequence[Example], train_vectors: np.ndarray, held: Sequence[Example],
              held_vectors: np.ndarray, multi_label: bool) -> Calibration:
    """The threshold (and margin) with the best accuracy on ``held``; ties go to the plateau's middle."""
    routes = sorted({label for e in train for label in e.labels})
    sims = held_vectors @ train_vectors.T
    nearest = {r: 1.0 - sims[:, [r in e.labels for e in train]].max(axis=1) for r in routes}
    dist = [{r: float(nearest[r][i]) for r in routes} for i in range(len(held))]
    scores = {(t, margin): sum(decide(d, t, margin) == list(e.labels) for d, e in zip(dist, held)) / max(1, len(held))
              for margin in (MARGINS if multi_label else (None,)) for t in GRID}
    top = max(scores.values())
    margin = next(m for (t, m), s in scores.items() if s == top)   # the smallest margin that scores best
    plateau = [t for (t, m), s in scores.items() if s == top and m == margin]
    return Calibration(plateau[len(plateau) // 2], margin if margin is not None else 0.0, round(top, 4),
                       len(train), len(held))


class Router:
    """A RedisVL ``SemanticRouter`` over one ``data/routes`` file, calibrated and cached in Redis."""

    def __init__(self, name: str, redis_client: redis.Redis, embedder, *, multi_label: bool = False,
                 namespace: str = ROUTES_NAMESPACE):
        self.name, self.redis, self.embedder, self.multi_label = name, redis_client, embedder, multi_label
        self.index_name = f"{namespace}_router_{name}"
        self.examples = load_examples(name)
        self._router = None
        self._calibration: Calibration | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Router({self.index_name!r}, routes={self.route_names})"

    @property
    def train(self) -> list[Example]:
        return [e for e in self.examples if e.split == "train" and e.labels]

    @property
    def route_names(self) -> list[str]:
        return sorted({label for e in self.train for label in e.labels})

    def embed(self, text: str) -> list[float]:
        return self.embedder.embed(readable(text) or text)

    @property
    def calibration(self) -> Calibration:
        if self._calibration is None:
            held = [e for e in self.examples if e.split == "calibration"]
            tv, hv = (np.asarray(self.embedder.embed_many([readable(e.text) for e in rows], progress=False),
                                 dtype=np.float32) for rows in (self.train, held))
            self._calibration = calibrate(self.train, tv, held, hv, self.multi_label)
        return self._calibration

    def routes(self) -> list[Route]:
        t = self.calibration.threshold
        return [Route(name=r, distance_threshold=t,
                      references=list(dict.fromkeys(readable(e.text) for e in self.train if r in e.labels)))
                for r in self.route_names]

    @property
    def router(self):
        """The ``SemanticRouter``, attached to the index in Redis (created there on first use)."""
        with self._lock:
            if self._router is None:
                self._router = self._attach()
            return self._router

    def _attach(self) -> SemanticRouter:
        routes = self.routes()
        wanted = sorted((r.name, tuple(sorted(r.references)), r.distance_threshold) for r in routes)
        with self.redis.lock(f"{self.index_name}:lock", timeout=300, blocking_timeout=300):
            config = self.redis.json().get(f"{self.index_name}:route_config")
            stored = sorted((r["name"], tuple(sorted(r["references"])), r["distance_threshold"])
                            for r in (config or {}).get("routes", []))
            if config is None or stored != wanted:   # new, changed or half-built: (re)build it
                log.info("router %s: building the index from data/routes", self.index_name)
                drop_router(self.redis, self.index_name)
            kwargs = dict(name=self.index_name, routes=routes, vectorizer=self.embedder.vectorizer,
                          redis_client=self.redis)
            try:
                return SemanticRouter(**kwargs, overwrite=False)
            except ValueError:  # an index of that name with another schema: ours to replace
                drop_router(self.redis, self.index_name)
                return SemanticRouter(**kwargs, overwrite=True)

    def distances(self, text: str | None = None, vector: Sequence[float] | None = None) -> dict[str, float]:
        """Distance from the query to each route's nearest reference, for routes under the threshold."""
        kwargs = dict(vector=list(vector) if vector is not None else self.embed(text or ""),
                      max_k=len(self.route_names), aggregation_method=DistanceAggregationMethod.min)
        try:
            matches = self.router.route_many(**kwargs)
        except redis.ResponseError:  # the index was dropped under us: build it again once
            self._router = None
            matches = self.router.route_many(**kwargs)
        return {m.name: float(m.distance) for m in matches if m.name}

    def route(self, text: str | None = None, vector: Sequence[float] | None = None) -> str | None:
        return next(iter(decide(self.distances(text, vector), self.calibration.threshold, None)), None)

    def labels(self, text: str | None = None, vector: Sequence[float] | None = None) -> list[str]:
        """Every route that passes: under the threshold and within the calibrated margin of the best."""
        c = self.calibration
        return decide(self.distances(text, vector), c.threshold, c.margin if self.multi_label else None)

    def delete(self) -> None:
        with self._lock:
            self._router = None
            drop_router(self.redis, self.index_name)


def drop_router(client: redis.Redis, index_name: str) -> None:
    """Delete one router: its index, its reference documents and its stored config."""
    with contextlib.suppress(Exception):  # no such index
        SearchIndex.from_existing(index_name, redis_client=client).delete(drop=True)
    client.delete(f"{index_name}:route_config")


def drop_routers(client: redis.Redis, namespace: str = ROUTES_NAMESPACE) -> int:
    """Delete every router of a namespace (they are rebuilt from ``data/routes`` on next use)."""
    names = [n.decode() if isinstance(n, bytes) else n for n in client.execute_command("FT._LIST")]
    doomed = [n for n in names if n.startswith(f"{namespace}_router_")]
    for name in doomed:
        drop_router(client, name)
    _ROUTERS.clear()
    return len(doomed)


@functools.lru_cache(maxsize=4)
def _default_client(redis_url: str | None) -> redis.Redis:
    """One client per configured server for the routers of the offline backend (which gets no client)."""
    from ..server import connect

    return connect(redis_url)


_ROUTERS: dict[tuple[Any, ...], Router] = {}
_ROUTERS_LOCK = threading.Lock()


def get_router(name: str, redis_client: redis.Redis | None = None, embedder=None, *,
               multi_label: bool = False) -> Router:
    """One :class:`Router` per (server, name) in this process, built on first use."""
    client = redis_client if redis_client is not None else _default_client(settings().redis_url)
    kw = client.connection_pool.connection_kwargs
    cache_key = (kw.get("host"), kw.get("port"), kw.get("path"), kw.get("db"), name)
    with _ROUTERS_LOCK:
        if cache_key not in _ROUTERS:
            _ROUTERS[cache_key] = Router(name, client, embedder or get_embedder(client), multi_label=multi_label)
        return _ROUTERS[cache_key]



def query_classifier(redis_client: redis.Redis | None = None, embedder=None):
    """The wellness demo's query types (comparison, goal, trend, summary, lookup) by the nearest
    example question: ``ProcedureStore(..., classify=query_classifier(r, emb))``."""
    router = get_router("query_types", redis_client, embedder)
    return lambda query, vector=None: router.route(query, vector=vector) or "lookup"
