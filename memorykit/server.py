"""Connecting to Redis: ``REDIS_URL`` if set, else the course's embedded server.

The embedded server (started on first use, shared by every kernel of a checkout) lives in
:mod:`memorykit.course.redis_server`; in your own project set ``REDIS_URL`` and only this
module is needed.

    python -m memorykit.server start|stop|status
"""
from __future__ import annotations

import sys

import redis

from .config import settings
from .errors import ModuleMissingError, ServerError

# One harmless command per module: it works whether the module is loaded or built in (Redis 8).
PROBES = {"RediSearch (FT.* commands)": ("FT._LIST",), "RedisJSON (JSON.* commands)": ("JSON.TYPE", "memorykit:probe")}


def redis_url() -> str:
    """``REDIS_URL`` if set, else the URL of the embedded server (started if needed)."""
    if settings().redis_url:
        return settings().redis_url
    from .course.redis_server import start

    return start().url


def check_modules(client: redis.Redis) -> None:
    """Raise ModuleMissingError naming each module whose commands this Redis does not know."""
    missing = []
    for label, command in PROBES.items():
        try:
            client.execute_command(*command)
        except redis.ResponseError as exc:
            if "unknown command" in str(exc).lower():
                missing.append(label)
    if missing:
        kw = client.connection_pool.connection_kwargs
        raise ModuleMissingError(
            f"Redis at {kw.get('host')}:{kw.get('port')} lacks {', '.join(missing)}. "
            "Use Redis 8, Redis Stack, the Docker Compose service, or unset REDIS_URL "
            "to use memorykit's embedded server."
        )


def connect(url: str | None = None, *, decode_responses: bool = True) -> redis.Redis:
    """A ``redis.Redis`` with search + JSON: ``url``, else ``REDIS_URL``, else the embedded server."""
    url = url or redis_url()
    client = redis.Redis.from_url(url, decode_responses=decode_responses, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        where = "REDIS_URL" if settings().redis_url else "the embedded server"
        raise ServerError(
            f"cannot reach Redis at {url} ({where}): {exc}. Is it running? "
            "Unset REDIS_URL to use memorykit's embedded server, or start yours."
        ) from exc
    check_modules(client)
    return client


if __name__ == "__main__":
    from .course.redis_server import main

    sys.exit(main())
