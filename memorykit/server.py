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
from .errors import ModuleMissingError, ServerError, ValidationError

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


def connect(url: str | None = None, *, decode_responses: bool = True, timeout: float | None = None) -> redis.Redis:
    """A ``redis.Redis`` with search + JSON: ``url``, else ``REDIS_URL``, else the embedded server.

    Every connect and command is bounded by ``timeout`` seconds (``MEMORYKIT_REDIS_TIMEOUT``, default 10):
    a stalled server raises ``redis.TimeoutError`` instead of hanging; idle connections are checked first."""
    url = url or redis_url()
    timeout = settings().redis_timeout if timeout is None else timeout
    if not timeout or timeout <= 0:
        raise ValidationError(f"the Redis timeout must be a positive number of seconds, got {timeout!r}")
    client = redis.Redis.from_url(url, decode_responses=decode_responses, socket_connect_timeout=timeout,
                                  socket_timeout=timeout, health_check_interval=30)
    try:
        client.ping()
    except redis.TimeoutError as exc:
        raise ServerError(
            f"Redis at {url} accepted the connection but did not answer within {timeout:g} s: it is stalled "
            "or overloaded (or this is not a Redis server). Check it, or raise MEMORYKIT_REDIS_TIMEOUT."
        ) from exc
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
