"""The vectors of long-term memory: one Redis Vector Set per owner (Redis 8's ``VADD`` / ``VSIM``).

A memory's document is JSON without its embedding; the embedding is an element of its owner's set
(``ns:memvec:{<user>}``, ``{%shared}`` for shared knowledge), named by the memory id, 8-bit quantized
(Q8: ~1.3 KB per memory, where the same vector as a JSON array took ~15 KB). Each element carries small
JSON attributes that ``VSIM ... FILTER`` reads: type, validity, creation time, topics. The hash tag keeps
an owner's set in the owner's slot, so it shards across any Redis 8 cluster.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
from redisvl.query import FilterQuery

from ..keys import encode

FILTERED_LIMIT = 10_000  # search(filters=...): memories the query engine may pre-select, then ranked exactly
FOREVER = 1e300  # "until" of a current memory: FILTER skips elements missing an attribute, so none is missing
M = 8  # HNSW links per node (Redis's default is 16): per-user sets are small, recall stays >= 0.99 (tests/test_storage.py)
EF = 200  # HNSW exploration factor of a search (at least COUNT); recall measured in tests/test_storage.py


def attributes(memory) -> str:
    """The element's FILTER attributes; topics percent-encoded, so no topic can change a filter's syntax."""
    attrs: dict[str, Any] = {"type": memory.memory_type, "from": memory.valid_from or memory.created_at,
                             "until": FOREVER if memory.invalid_at is None else memory.invalid_at,
                             "created": memory.created_at}
    if memory.topics:
        attrs["topics"] = [encode(t) for t in memory.topics]
    return json.dumps(attrs, separators=(",", ":"))


def blob(vector: Sequence[float]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def add(pipe, key: str, memory, vector: Sequence[float]) -> None:
    """Queue: put (or replace) ``memory``'s vector and attributes in its owner's set."""
    pipe.execute_command("VADD", key, "FP32", blob(vector), memory.id, "Q8", "M", M, "SETATTR", attributes(memory))


def set_attributes(pipe, key: str, memory) -> None:
    """Queue: rewrite ``memory``'s attributes (validity, topics) and keep its vector."""
    pipe.execute_command("VSETATTR", key, memory.id, attributes(memory))


def where(memory_types: Sequence[str], as_of: float | None = None, topics: Sequence[str] | None = None, *,
          closed: bool = False) -> str:
    """A FILTER expression: these types, current (or true at ``as_of``; ``closed``: no longer current), holding
    any of ``topics``."""
    parts = [f".type in {json.dumps(list(memory_types))}"]
    if closed:
        parts.append(".until < 1e300")
    elif as_of is None:
        parts.append(".until >= 1e300")  # FOREVER, spelled as the filter parser reads it (no "e+")
    else:
        parts.append(f".from <= {float(as_of):.6f} and .until > {float(as_of):.6f}")
    if topics:
        parts.append("(" + " or ".join(f'"{encode(t.lower())}" in .topics' for t in topics) + ")")
    return " and ".join(parts)


def distance(score: float) -> float:
    """VSIM's similarity (``(1 + cosine) / 2``, 1 = same) as the cosine distance the API returns (0 = same)."""
    return max(0.0, 2.0 * (1.0 - float(score)))


def search(client, queries: Sequence[tuple[str, str]], vector: Sequence[float],
           count: int) -> list[list[tuple[str, float, dict]]]:
    """Nearest elements of each (set key, FILTER) in one non-transactional pipeline (the sets may live on
    different cluster slots): per query, (memory id, cosine distance, attributes), closest first."""
    pipe, raw = client.pipeline(transaction=False), blob(vector)
    for key, flt in queries:
        pipe.execute_command("VSIM", key, "FP32", raw, "WITHSCORES", "WITHATTRIBS", "COUNT", count,
                             "EF", max(EF, count), "FILTER", flt)
    return [_rows(got) for got in pipe.execute()]


def _rows(got) -> list[tuple[str, float, dict]]:
    """VSIM's reply (redis-py's dict, or a flat list) as (id, distance, attributes)."""
    if isinstance(got, dict):
        items = [(mid, *v) for mid, v in got.items()]
    else:
        items = [tuple(got[i:i + 3]) for i in range(0, len(got), 3)]
    return [(mid if isinstance(mid, str) else mid.decode(), distance(score), json.loads(attrs) if attrs else {})
            for mid, score, attrs in items]


def embeddings(client, elements: Sequence[tuple[str, str]]) -> list[np.ndarray | None]:
    """Unit vectors of (set key, memory id) elements as stored (Q8-dequantized), one pipeline; None if absent."""
    pipe = client.pipeline(transaction=False)
    for key, mid in elements:
        pipe.execute_command("VEMB", key, mid)
    out = []
    for got in pipe.execute(raise_on_error=False):
        if not got or isinstance(got, Exception):
            out.append(None)
            continue
        v = np.asarray(got, dtype=np.float32)
        out.append(v / (np.linalg.norm(v) or 1.0))
    return out


def nearest(store, scopes: Sequence[tuple[str | None, Sequence[str]]], vector: Sequence[float], count: int,
            as_of: float | None = None, topics: Sequence[str] | None = None) -> list[tuple[str, float, float | None]]:
    """(document key, distance, created_at) of the ``count`` nearest memories over (owner, types) scopes: VSIM
    on each owner's set (the user's, and shared knowledge's for semantic types) in one pipeline, merged."""
    queries = [(store.vectors_key(owner), where(types, as_of, topics)) for owner, types in scopes]
    rows = [(d, store.key(mid, owner), attrs.get("created"))
            for (owner, _), found in zip(scopes, search(store.redis, queries, vector, count))
            for mid, d, attrs in found]
    return [(key, d, created) for d, key, created in sorted(rows)[:count]]


def filtered(client, index, expr, vector: Sequence[float], count: int) -> list[tuple[str, float, float | None]]:
    """Like :func:`nearest` for memories a RedisVL filter selects (the query engine picks them, up to
    ``FILTERED_LIMIT``), ranked exactly by their stored vectors."""
    rows = index.query(FilterQuery(filter_expression=expr, return_fields=["id", "created_at"],
                                   num_results=FILTERED_LIMIT))
    found = sorted((d, row["id"], float(row["created_at"]))
                   for d, row in zip(distances(client, [row["id"] for row in rows], vector), rows) if d == d)
    return [(key, d, created) for d, key, created in found[:count]]


def distances(client, keys: Sequence[str], vector: Sequence[float]) -> list[float]:
    """Cosine distances from ``vector`` to the stored vectors of these document keys (nan: no vector)."""
    elements = []
    for k in keys:  # ns:memory:{<owner>}:<id> -> (ns:memvec:{<owner>}, <id>)
        ns, _, tag, mid = k.split(":", 3)
        elements.append((f"{ns}:memvec:{tag}", mid))
    query = np.asarray(vector, dtype=np.float32)
    query = query / (np.linalg.norm(query) or 1.0)
    return [float("nan") if v is None else max(0.0, float(1.0 - v @ query)) for v in embeddings(client, elements)]
