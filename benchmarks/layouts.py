"""The storage layouts ``benchmarks/scale.py`` compares: how each writes a memory and runs the query.

Every layout stores the same synthetic memories (one vector, owner, type and times each) and
answers the same question: the 10 memories of one user closest to a query vector. The layouts
are written with raw commands here, independent of ``memorykit``'s own store, so the numbers
describe the layouts themselves:

- ``json_vector``: a JSON document per memory with the vector as a JSON array, in a RediSearch
  index (text, tags, numerics, HNSW FLOAT32): ``memorykit``'s first layout.
- ``hash_float32`` / ``hash_float16``: a HASH per memory with the vector as a binary blob.
- ``vset_noquant`` / ``vset_q8`` / ``vset_bin``: one Vector Set per user (element = memory id,
  small JSON attributes for type and validity), VSIM on the user's own set. Only the vector and
  attributes: the memory's text has to live elsewhere.
- ``json_text_vset_q8``: the chosen combination: a JSON document without the vector, a RediSearch
  index without a vector field (full text, tags, numerics), one Vector Set per user (Q8) and a
  sorted set of the user's ids.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import redis

DIMS = 384
K = 10
TEXT_FIELDS = ["content", "TEXT", "user_id", "TAG", "CASESENSITIVE", "memory_type", "TAG", "topics", "TAG",
               "content_hash", "TAG", "created_at", "NUMERIC", "last_accessed", "NUMERIC", "valid_from",
               "NUMERIC", "invalid_at", "NUMERIC", "INDEXMISSING"]
JSON_PATHS = {"content": "$.content", "user_id": "$.user_id", "memory_type": "$.memory_type",
              "topics": "$.topics[*]", "content_hash": "$.content_hash", "created_at": "$.created_at",
              "last_accessed": "$.last_accessed", "valid_from": "$.valid_from", "invalid_at": "$.invalid_at",
              "embedding": "$.embedding"}
VSIM_FILTER = '.type in ["episodic", "semantic"] and .invalid_at == 0'


@dataclass
class Corpus:
    """The memories every layout stores: unit vectors, an owner index and a text for each."""

    vectors: np.ndarray
    users: np.ndarray
    texts: list[str]
    now: float = field(default_factory=time.time)

    def owner(self, i: int) -> str:
        return f"user{self.users[i]}"

    def doc(self, i: int) -> dict:
        """The memory document's fields (no vector), as ``memorykit`` writes them."""
        t = self.now - i
        return {"id": f"m{i}", "user_id": self.owner(i), "memory_type": "episodic",
                "content": self.texts[i % len(self.texts)], "content_hash": f"{i:032x}", "topics": [],
                "created_at": t, "updated_at": t, "valid_from": t, "metadata": {}}

    def attrs(self, i: int) -> str:
        """A Vector Set element's attributes: what FILTER needs for type and validity (0 = current)."""
        t = int(self.now - i)
        return json.dumps({"type": "episodic", "created": t, "valid_from": t, "invalid_at": 0})


@dataclass(frozen=True)
class Layout:
    """One way to store a memory: how to create, write, and search one user's memories."""

    name: str
    label: str
    setup: Callable[[redis.Redis], None]
    write: Callable[[redis.client.Pipeline, Corpus, int], None]
    search: Callable[[redis.Redis, np.ndarray, str], list[str]]
    command: str
    keeps: dict[str, str]
    index: str | None = None


def _ft_create(r: redis.Redis, name: str, on: str, prefix: str, vector: str | None) -> None:
    fields = []
    for word in TEXT_FIELDS:
        fields += [JSON_PATHS[word], "AS", word] if on == "JSON" and word in JSON_PATHS else [word]
    if vector:
        fields += ([JSON_PATHS["embedding"], "AS", "embedding"] if on == "JSON" else ["embedding"])
        fields += ["VECTOR", "HNSW", 6, "TYPE", vector, "DIM", DIMS, "DISTANCE_METRIC", "COSINE"]
    if on == "HASH":  # a HASH has no arrays: topics as a comma-separated TAG
        i = fields.index("topics")
        fields[i + 1:i + 2] = ["TAG", "SEPARATOR", ","]
    r.execute_command("FT.CREATE", name, "ON", on, "PREFIX", 1, prefix, "SCHEMA", *fields)


def ft_knn(r: redis.Redis, index: str, blob: bytes, user: str | None, k: int = K, ef: int | None = None) -> list[str]:
    """KNN over a RediSearch index, scoped to one user when ``user`` is given; returns memory ids."""
    scope = f"(@user_id:{{{user}}})" if user else "*"
    params = ["vec", blob] + (["ef", ef] if ef else [])
    q = f"{scope}=>[KNN {k} @embedding $vec{' EF_RUNTIME $ef' if ef else ''} AS d]"
    res = r.execute_command("FT.SEARCH", index, q, "SORTBY", "d", "LIMIT", 0, k, "NOCONTENT",
                            "PARAMS", len(params), *params, "DIALECT", 2)
    ids = res[1:] if isinstance(res, list) else [d["id"] for d in res["results"]]
    return [i.rsplit(":", 1)[-1] for i in ids]


def vsim(r: redis.Redis, key: str, vec: np.ndarray, k: int = K, filter_: str | None = None,
         ef: int | None = None) -> list[str]:
    """VSIM on one Vector Set: the ids of the ``k`` closest elements (NOTHREAD: in the main thread, so
    SLOWLOG's server time includes the search, as it does for FT.SEARCH)."""
    args = ["VSIM", key, "FP32", vec.astype(np.float32).tobytes(), "COUNT", k, "NOTHREAD"]
    if ef:
        args += ["EF", ef]
    if filter_:
        args += ["FILTER", filter_]
    return list(r.execute_command(*args))


def _json_vector() -> Layout:
    def write(pipe, c, i):
        pipe.execute_command("JSON.SET", f"jv:memory:m{i}", "$",
                             json.dumps({**c.doc(i), "embedding": c.vectors[i].tolist()}))
    return Layout("json_vector", "JSON doc, vector as JSON array + FT HNSW",
                  lambda r: _ft_create(r, "jv_idx", "JSON", "jv:memory:", "FLOAT32"), write,
                  lambda r, v, u: ft_knn(r, "jv_idx", v.astype(np.float32).tobytes(), u), "FT.SEARCH",
                  FT_KEEPS, index="jv_idx")


def _hash(dtype: str) -> Layout:
    np_type = np.float32 if dtype == "FLOAT32" else np.float16
    prefix, index = f"h{dtype[-2:]}:memory:", f"h{dtype[-2:]}_idx"

    def write(pipe, c, i):
        d = c.doc(i)
        pipe.hset(f"{prefix}m{i}", mapping={**{k: v for k, v in d.items() if k not in ("topics", "metadata")},
                                            "topics": "", "metadata": "{}",
                                            "embedding": c.vectors[i].astype(np_type).tobytes()})
    return Layout(f"hash_{dtype.lower()}", f"HASH, {dtype} vector + FT HNSW",
                  lambda r: _ft_create(r, index, "HASH", prefix, dtype), write,
                  lambda r, v, u: ft_knn(r, index, v.astype(np_type).tobytes(), u), "FT.SEARCH",
                  FT_KEEPS, index=index)


def _vset(quant: str) -> Layout:
    prefix = f"vs{quant.lower()}:"

    def write(pipe, c, i):
        pipe.execute_command("VADD", f"{prefix}{{{c.owner(i)}}}", "FP32", c.vectors[i].tobytes(), f"m{i}",
                             quant, "SETATTR", c.attrs(i))
    return Layout(f"vset_{quant.lower()}", f"Vector Set per user, {quant} (vector + attributes only)",
                  lambda r: None, write, lambda r, v, u: vsim(r, f"{prefix}{{{u}}}", v), "VSIM", VSET_KEEPS)


def _combination() -> Layout:
    def write(pipe, c, i):
        owner, doc = c.owner(i), c.doc(i)
        pipe.execute_command("JSON.SET", f"c:memory:{{{owner}}}:m{i}", "$", json.dumps(doc))
        pipe.execute_command("VADD", f"c:memvec:{{{owner}}}", "FP32", c.vectors[i].tobytes(), f"m{i}", "Q8",
                             "SETATTR", c.attrs(i))
        pipe.zadd(f"c:memids:{{{owner}}}", {f"m{i}": doc["created_at"]})
    return Layout("json_text_vset_q8", "JSON doc (no vector) + FT text index + Vector Set Q8 per user",
                  lambda r: _ft_create(r, "c_idx", "JSON", "c:memory:", None), write,
                  lambda r, v, u: vsim(r, f"c:memvec:{{{u}}}", v, filter_=VSIM_FILTER), "VSIM", COMBO_KEEPS,
                  index="c_idx")


FT_KEEPS = {"owner filter": "yes (TAG)", "type filter": "yes (TAG)", "full text": "yes (BM25)",
            "hybrid": "yes (KNN + BM25 in one engine)", "as_of": "yes (NUMERIC)",
            "OSS cluster, no coordinator": "no: each shard indexes only its own keys"}
VSET_KEEPS = {"owner filter": "yes (one set per user)", "type filter": "yes (FILTER on attributes)",
              "full text": "no", "hybrid": "no", "as_of": "yes (FILTER on attributes)",
              "OSS cluster, no coordinator": "yes: a set per user on the user's slot"}
COMBO_KEEPS = {"owner filter": "yes (one set per user)", "type filter": "yes (FILTER on attributes)",
               "full text": "yes (FT text index, query engine needed)",
               "hybrid": "yes (VSIM + BM25 fused, query engine needed)", "as_of": "yes (FILTER on attributes)",
               "OSS cluster, no coordinator": "vector search, dedup, list, forgetting: yes; text and hybrid: no"}


def all_layouts() -> list[Layout]:
    return [_json_vector(), _hash("FLOAT32"), _hash("FLOAT16"), _vset("NOQUANT"), _vset("Q8"), _vset("BIN"),
            _combination()]
