"""Shared RedisVL index helpers: index creation with schema checks, owner tags and scope filters.

Owners are indexed percent-encoded (:func:`owner_tag`) in case-sensitive TAG fields, and every
scoped query is built by :func:`owner_filter` or :func:`user_scope`: no store writes tag syntax.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import operator
import re
import time
import unicodedata
import uuid
from typing import Any, Iterable, Sequence

import redis
from redisvl.index import SearchIndex
from redisvl.migration.utils import canonicalize_schema
from redisvl.query import FilterQuery, VectorQuery, VectorRangeQuery
from redisvl.query.filter import FilterExpression, Num, Tag
from redisvl.schema import IndexSchema

from ..errors import SchemaMismatchError, ValidationError
from ..keys import SHARED_OWNER, backlog_key, check_id, encode, index_names, key, registry_key, user_key

MEMORY_TYPES = ("episodic", "semantic", "procedural")
log = logging.getLogger(__name__)
SHARED_TAG = SHARED_OWNER  # the indexed owner of shared knowledge: outside owner_tag's alphabet


def content_hash(text: str) -> str:
    """Hash of the normalized text: case, whitespace, punctuation and unicode forms ignored."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    norm = "".join(" " if unicodedata.category(c).startswith(("P", "S")) else c for c in norm)
    norm = re.sub(r"\s+", " ", norm).strip()
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:32]


def _parts(schema: IndexSchema) -> dict[str, Any]:
    """The index settings and each field, as RedisVL normalises them for comparison."""
    spec = canonicalize_schema(schema.to_dict(), strip_excluded=True)
    return {"index": spec["index"], **{f"field {f['name']!r}": f for f in spec["fields"]}}


def has_query_engine(client) -> bool:
    """Whether the server answers the query engine's commands (a cluster of plain Redis nodes does not)."""
    try:
        client.execute_command("FT._LIST")
        return True
    except (redis.ResponseError, redis.exceptions.RedisClusterException):
        return False


_MISSING_INDEX = ("no such index", "unknown index name")  # RediSearch's words for it, newer and older
REINDEX_WAIT_SECONDS = 1.0  # a query that recreated its index waits at most this long for the documents


class _SelfHealingIndex(SearchIndex):
    """A SearchIndex that creates itself again when Redis lost it (restarted without its data, failed over to an
    empty replica, flushed) and runs the command once more, instead of failing every query until the app
    restarts. The documents it finds then are the ones Redis still holds (FT.CREATE indexes existing keys)."""

    def _again(self, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            if not any(words in str(exc).lower() for words in _MISSING_INDEX):
                raise
            log.warning("index %s is missing in Redis (restarted without its data?): creating it again", self.name)
            try:
                self.create(overwrite=False)
            except Exception:  # another process created it first
                if not self.exists():
                    raise
            deadline = time.monotonic() + REINDEX_WAIT_SECONDS  # Redis indexes the documents it holds meanwhile
            while time.monotonic() < deadline and float(self.info().get("percent_indexed", 1)) < 1:
                time.sleep(0.02)
            return call(*args, **kwargs)

    def search(self, *args, **kwargs):
        return self._again(super().search, *args, **kwargs)

    def batch_search(self, *args, **kwargs):
        return self._again(super().batch_search, *args, **kwargs)

    def aggregate(self, *args, **kwargs):
        return self._again(super().aggregate, *args, **kwargs)


def ensure_index(client: redis.Redis, schema_dict: dict[str, Any]) -> SearchIndex:
    """Create the index if missing (idempotent); if it exists with another schema, say so clearly. The index
    returned creates itself again if Redis loses it later."""
    wanted = IndexSchema.from_dict(schema_dict)
    index = _SelfHealingIndex(wanted, redis_client=client)
    if not index.exists():
        try:
            index.create(overwrite=False)
            return index
        except Exception:  # another process created it between exists() and create()
            if not index.exists():
                raise
    name = schema_dict["index"]["name"]
    want, have = _parts(wanted), _parts(SearchIndex.from_existing(name, redis_client=client).schema)
    diffs = [f"{k}: index has {have.get(k)!r}, code expects {want.get(k)!r}"
             for k in sorted(want.keys() | have.keys()) if want.get(k) != have.get(k)]
    if diffs:
        raise SchemaMismatchError(
            f"index {name!r} exists in Redis with a different schema than this code expects:\n  "
            + "\n  ".join(diffs)
            + f"\nDrop it (`FT.DROPINDEX {name}`: the documents stay, and are indexed again if their layout is "
            "unchanged) or use another namespace. Not migrated: long-term memories written before their vectors "
            "moved to Vector Sets (add them again), and recall messages stored as JSON before 2026-11-26 (they "
            "are HASHes now: old ones are no longer found, expire with their threads, and forget_user deletes "
            "them). Long-term memories written before their `terms` field (2026-11-27) need "
            "`memorykit.memory.retrieval.backfill_terms(redis, namespace)` once, after the drop, for text "
            "search to find words with accents, C++ / C# or CJK in them.")
    return index


def row_ids(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Document ids out of query rows (``ns:memory:<id>`` -> ``<id>``)."""
    return [row["id"].rsplit(":", 1)[-1] for row in rows]


def vector_field(dims: int) -> dict[str, Any]:
    """The schema entry of an embedding: HNSW, cosine distance, float32."""
    return {"name": "embedding", "type": "vector",
            "attrs": {"algorithm": "hnsw", "dims": dims, "distance_metric": "cosine", "datatype": "float32"}}


def nearest(index: SearchIndex, vector: Sequence[float], expr: FilterExpression | None, k: int,
            threshold: float | None = None, fields: Sequence[str] = ("id",)) -> list[dict[str, Any]]:
    """KNN rows (a range query when ``threshold`` is set), closest first, with ``vector_distance``."""
    kw = dict(return_fields=list(fields), num_results=k, filter_expression=expr)
    if threshold is None:
        return index.query(VectorQuery(list(vector), "embedding", **kw))
    return index.query(VectorRangeQuery(list(vector), "embedding", distance_threshold=threshold, **kw))


def decoded(reply: Any) -> Any:
    """A JSON.GET reply as Python data: a cluster pipeline under WATCH hands back the raw JSON text."""
    return json.loads(reply) if isinstance(reply, (str, bytes)) else reply


def json_docs(client: redis.Redis, keys: Sequence[str], *paths: str) -> list[Any]:
    """JSON documents (or these paths of them) in one round trip; None where a key is missing."""
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.json().get(k, *paths)
    return [None if isinstance(d, Exception) else d for d in pipe.execute(raise_on_error=False)]


def delete_keys(client: redis.Redis, keys: Iterable[str]) -> int:
    """Delete keys in batches of 500; returns how many existed."""
    keys, deleted = sorted(keys), 0
    for i in range(0, len(keys), 500):
        deleted += client.delete(*keys[i : i + 500])
    return deleted


_TAG_SAFE = str.maketrans({"_": "%5F", ".": "%2E", "-": "%2D", "~": "%7E"})


def owner_tag(user_id: str) -> str:
    """The indexed form of an id, percent-encoded down to letters, digits and ``%``: no id looks like another
    to a TAG field (which splits on commas, trims spaces, folds case) or breaks the query syntax."""
    return encode(user_id).translate(_TAG_SAFE)


def owner_field(name: str = "user_id") -> dict[str, Any]:
    """The schema entry of an owner TAG field: case-sensitive, read from ``$.<name minus _id>_tag``."""
    return {"name": name, "path": f"$.{name.removesuffix('_id')}_tag", "type": "tag", "attrs": {"case_sensitive": True}}


def owner_filter(user_id: str | Sequence[str], field: str = "user_id") -> FilterExpression:
    """Documents owned by this id (or any of these ids), matched on their encoded owner tag."""
    ids = [user_id] if isinstance(user_id, str) else list(user_id)
    if not ids:
        raise ValidationError(f"owner_filter needs at least one {field}")
    tags = [owner_tag(check_id(i, field)) for i in ids]
    return Tag(field) == (tags[0] if len(tags) == 1 else tags)


def memory_type_list(memory_types: str | Sequence[str] | None) -> list[str]:
    """Normalize ``"episodic"`` / ``["EPISODIC", "semantic"]`` / None (all readable types)."""
    if memory_types is None:
        memory_types = ["episodic", "semantic"]
    types = [memory_types] if isinstance(memory_types, str) else list(memory_types)
    out = [str(t).strip().lower() for t in types]
    if not out or any(t not in MEMORY_TYPES for t in out):
        raise ValidationError(f"memory_types must be among {MEMORY_TYPES}, got {types}")
    return out


def owner_of(user_id: str | None, shared: bool = False) -> str | None:
    """Who a call acts for: a checked user id, or None for shared knowledge (``shared=True``). Exactly
    one of the two: a missing owner is an error, never a default."""
    if shared:
        if user_id is not None:
            raise ValidationError("pass either user_id (a user's memories) or shared=True (shared knowledge), not both")
        return None
    if user_id is None:
        raise ValidationError("say whose memory this is: user_id='...' for a user's own, "
                              "or shared=True for shared knowledge every user reads")
    return check_id(user_id, "user_id")


def tag_of(owner: str | None) -> str:
    """The indexed owner tag of a user id, or of shared knowledge (None)."""
    return SHARED_TAG if owner is None else owner_tag(owner)


def readable_tags(owner: str | None) -> set[str]:
    """Owner tags a by-id read may return: a user's own plus shared knowledge; shared knowledge only for None."""
    return {SHARED_TAG} if owner is None else {owner_tag(owner), SHARED_TAG}


def visible_tags(user_id: str | None, memory_type: str) -> list[str]:
    """Whose memories of this type a user may search: own ones, plus shared knowledge for semantic ones."""
    own = [owner_tag(check_id(user_id, "user_id"))] if user_id is not None else []
    return own + [SHARED_TAG] if memory_type == "semantic" else own


def user_scope(user_id: str | None, memory_types: str | Sequence[str] | None) -> FilterExpression:
    """Who may see what: own episodic / procedural memories, own + shared semantic ones."""
    parts = []
    for mtype in memory_type_list(memory_types):
        tags = visible_tags(user_id, mtype)
        if tags:
            parts.append((Tag("memory_type") == mtype) & (Tag("user_id") == (tags[0] if len(tags) == 1 else tags)))
    if not parts:
        raise ValidationError("a user_id is needed to search episodic or procedural memories")
    return functools.reduce(operator.or_, parts)


def validity(as_of: float | None = None) -> FilterExpression:
    """Current memories, or those that were true at ``as_of`` (a Unix time)."""
    if as_of is None:
        return Num("invalid_at").is_missing()
    return (Num("valid_from") <= as_of) & (Num("invalid_at").is_missing() | (Num("invalid_at") > as_of))


# How long a forgotten user's mark lives: far longer than any queued memory write waits.
FORGET_MARK_SECONDS = 86_400


def forget_mark_key(namespace: str, user_id: str) -> str:
    """``ns:forgotten:<digest>``: set by :func:`forget_user`, read by writers in every process. The key holds a
    digest of the id, not the id (nothing of the user is kept), and ``forget_user`` does not delete it."""
    return key(namespace, "forgotten", hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()[:32])


def forget_mark(client: redis.Redis, namespace: str, user_id: str) -> str | None:
    """The token of this user's latest ``forget_user`` (None: not forgotten within FORGET_MARK_SECONDS). A
    writer that read it before its work and finds another one after it must write nothing back."""
    return client.get(forget_mark_key(namespace, user_id))


def forgotten_since(client: redis.Redis, namespace: str, user_id: str):
    """Read the user's forget mark now; the function returned tells if ``forget_user`` ran since (call it just
    before writing what slow work, a model call, learned about the user)."""
    before = forget_mark(client, namespace, user_id)
    return lambda: forget_mark(client, namespace, user_id) != before


def forget_user(client: redis.Redis, namespace: str, user_id: str, embedder=None) -> int:
    """Delete one user's documents and keys in exactly this namespace, and (given ``embedder``) the
    cached embeddings of their texts. Nothing is scanned: long-term memories come from the user's id
    registry, other documents from the namespace's fixed indexes (when the server has a query engine), keys
    from fixed names, the user's thread list and the user's key registry. A new :func:`forget_mark` is set
    first, so writers begun earlier, in any process, can tell (``MemoryAgent`` checks it before each write)."""
    check_id(user_id, "user_id")  # what a recovery could claim goes first: one that reads the mark after it finds none
    client.delete(backlog_key(namespace, user_id), backlog_key(namespace, user_id) + ":tries")
    client.set(forget_mark_key(namespace, user_id), uuid.uuid4().hex, ex=FORGET_MARK_SECONDS)
    ids = client.zrange(_memids(namespace, user_id), 0, -1)
    memories = [user_key(namespace, "memory", user_id, mid) for mid in ids]
    doomed: set[str] = set(memories)
    texts: list[str] = [got[0] for got in json_docs(client, memories, "$.content") if got] if embedder else []
    for index in _indexes(client, namespace):
        fields = ["id"] + [f for f in ("content", "text") if f in index.schema.fields]
        q = FilterQuery(filter_expression=owner_filter(user_id), return_fields=fields, num_results=1000)
        for row in (row for page in index.paginate(q, page_size=500) for row in page):
            doomed.add(row["id"])
            texts.extend(row[f] for f in fields[1:] if row.get(f))
    doomed.update(user_keys(client, namespace, user_id))
    if embedder is not None and texts:
        embedder.forget(texts)
    return delete_keys(client, doomed)


def _indexes(client: redis.Redis, namespace: str) -> list[SearchIndex]:
    """This namespace's indexes that exist and hold memorykit's encoded owner tags (JSON documents read them
    from ``$.user_tag``; HASHes, the message index's, store the encoded tag as ``user_id``)."""
    if not has_query_engine(client):
        return []
    names = {n.decode() if isinstance(n, bytes) else n for n in client.execute_command("FT._LIST")}
    found = [SearchIndex.from_existing(n, redis_client=client) for n in index_names(namespace) if n in names]
    return [i for i in found if (i.schema.index.storage_type.value == "hash" and "user_id" in i.schema.fields)
            or getattr(i.schema.fields.get("user_id"), "path", None) == owner_field()["path"]]


def _memids(namespace: str, user_id: str) -> str:
    return user_key(namespace, "memids", user_id)


def user_keys(client: redis.Redis, namespace: str, user_id: str) -> set[str]:
    """A user's non-indexed keys: fixed names, every thread of the thread list, and the registry's members."""
    threads_key, registry = user_key(namespace, "user", user_id, "threads"), registry_key(namespace, user_id)
    profile = user_key(namespace, "working:user", user_id)
    found = {threads_key, registry, profile, profile + ":history",
             user_key(namespace, "memaccess", user_id), user_key(namespace, "memvec", user_id),
             _memids(namespace, user_id), *(backlog_key(namespace, user_id) + s for s in ("", ":tries")),
             *(user_key(namespace, "memhash", user_id, t) for t in MEMORY_TYPES),
             *(key(namespace, "memhash", user_id, t) for t in MEMORY_TYPES)}  # ledgers named before the hash tag
    for thread in client.zrange(threads_key, 0, -1):
        thread = thread.decode() if isinstance(thread, bytes) else thread
        chat, notes = (user_key(namespace, s, user_id, thread) for s in ("thread", "working:conversation"))
        found |= {chat, chat + ":summary", chat + ":vectors", notes, notes + ":history"}
    tag = ":{" + encode(user_id) + "}"  # the user's hash tag, as keys hold it
    listed = {k.decode() if isinstance(k, bytes) else k for k in client.smembers(registry)}
    sets = sorted(k for k in found | listed if k.endswith(":vectors"))  # a thread's recall set lists its messages'
    pipe = client.pipeline(transaction=False)  # keys, whatever layout wrote them (an index finds only its own)
    for k in sets:
        pipe.smembers(k)
    listed |= {m.decode() if isinstance(m, bytes) else m for members in (pipe.execute() if sets else []) for m in members}
    return found | {k for k in listed if k.startswith(f"{namespace}:") and tag in k}  # never another user's key
