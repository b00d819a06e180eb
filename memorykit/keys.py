"""The one place Redis keys are built: ids are data, never key or query syntax.

User and thread ids may hold anything a person types (`a|b`, `*`, `{x}`, spaces,
unicode). Keys embed them percent-encoded, so ``:`` ``*`` ``{`` ``}`` and friends
can never change a key's shape or match another user's keys in a SCAN pattern.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from .errors import ValidationError

MAX_ID_LENGTH = 256
# Key structures that embed a user id right after their name: ns:<structure>:<user>[:...]
USER_KEY_STRUCTURES = ("thread", "user", "feedback", "msgvec", "memhash", "memaccess",
                       "working:user", "working:conversation")
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
