"""The one place Redis keys are built: ids are data, never key or query syntax.

User and thread ids may hold anything a person types (`a|b`, `*`, `{x}`, spaces,
unicode). Keys embed them percent-encoded, so ``:`` ``*`` ``{`` ``}`` and friends
can never change a key's shape or match another user's keys in a SCAN pattern. Per-user keys carry the
user as a cluster hash tag (:func:`user_key`); shared knowledge has an owner no user id encodes to
(:data:`SHARED_OWNER`); a namespace's indexes are a fixed list (:func:`index_names`).
"""
from __future__ import annotations

import re
from urllib.parse import quote

from .errors import ValidationError

MAX_ID_LENGTH = 256
# The indexes a namespace can hold, ``<ns>_<name>``: a fixed list, so no code picks indexes by name prefix.
NAMESPACE_INDEXES = ("memories", "procedures", "feedback", "messages")
# The owner of shared knowledge. ``encode`` and ``index.owner_tag`` put two hex digits after every '%',
# so no user id, however spelled, produces "%shared" (the id "%shared" itself encodes to "%25shared").
SHARED_OWNER = "%shared"
# Shared by all namespaces; "f32one": float32 vectors of texts encoded one at a time (embeddings.py), not the
# float64 ones an older memorykit cached under "f64".
EMBEDDINGS_CACHE = "memorykit:embcache:f32one"
_NAMESPACE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")


def check_id(value: str, what: str = "id") -> str:
    """Return ``value`` if it is a usable id, else raise a clear ValidationError."""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError(f"{what} must not be empty or whitespace only")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if any(ord(c) < 32 for c in value):
        raise ValidationError(f"{what} must not contain control characters")
    return check_text(value, what)


def check_text(value: str, what: str = "text") -> str:
    """Refuse text Redis cannot store: a lone surrogate (what ``json.loads`` makes of a cut emoji escape such as
    ``"\\ud83d"`` that a browser sent) cannot be encoded as UTF-8."""
    if not value.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ValidationError(f"{what} must be valid Unicode text (it holds a lone surrogate, e.g. half an emoji)")
    return value


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValidationError(
            f"namespace {namespace!r} must start with a letter and hold only letters, digits, '_' or '-'"
        )
    return namespace


def encode(part: str) -> str:
    """Percent-encode an id for use inside a key (glob characters included)."""
    return quote(part, safe="").replace("*", "%2A")


def key(namespace: str, *parts: str) -> str:
    """``key("ns", "thread", user, thread)`` -> ``ns:thread:<user>:<thread>``, ids encoded."""
    return ":".join([namespace, *map(encode, parts)])


def user_key(namespace: str, structure: str, user_id: str, *parts: str) -> str:
    """``user_key("ns", "thread", user, thread)`` -> ``ns:thread:{<user>}:<thread>``, ids encoded.

    The user is a Redis Cluster hash tag: one user's keys share a slot, so scripts and transactions
    over them stay valid on a cluster.
    """
    return ":".join([namespace, structure, "{" + encode(user_id) + "}", *map(encode, parts)])


def shared_key(namespace: str, structure: str, *parts: str) -> str:
    """Like :func:`user_key` for shared knowledge: ``ns:<structure>:{%shared}:...``, a tag no user has."""
    return ":".join([namespace, structure, "{" + SHARED_OWNER + "}", *map(encode, parts)])


def index_names(namespace: str) -> list[str]:
    """Every index name a namespace may hold, exactly (``app`` never reaches ``app_v2``'s)."""
    return [f"{check_namespace(namespace)}_{name}" for name in NAMESPACE_INDEXES]


def registry_key(namespace: str, user_id: str) -> str:
    """``ns:keys:{<user>}``: a SET naming per-user keys no index or fixed name finds (see :func:`register`)."""
    return user_key(namespace, "keys", user_id)


def backlog_key(namespace: str, user_id: str) -> str:
    """``ns:backlog:{<user>}``: what the agent stored for the user but has not remembered yet (a sorted set;
    its claim counts at ``<key>:tries``)."""
    return user_key(namespace, "backlog", user_id)


def register(pipe, namespace: str, user_id: str, *keys: str) -> None:
    """Queue: record ``keys`` in the user's registry, in the same transaction that writes them, so
    ``forget_user`` finds them without scanning the keyspace."""
    if keys:
        pipe.sadd(registry_key(namespace, user_id), *keys)
