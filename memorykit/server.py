"""Connecting to Redis: ``REDIS_URL`` if set, else the course's embedded server.

The embedded server (started on first use, shared by every kernel of a checkout) lives in
:mod:`memorykit.course.redis_server`; in your own project set ``REDIS_URL`` and only this
module is needed.

    python -m memorykit.server start|stop|status
"""
from __future__ import annotations

import contextlib
import sys

import redis

from .config import settings
from .errors import ModuleMissingError, ServerError

REQUIRED_MODULES = {"search": "RediSearch (FT.* commands)", "ReJSON": "RedisJSON (JSON.* commands)"}


def redis_url() -> str:
    """``REDIS_URL`` if set, else the URL of the embedded server (started if needed)."""
    if settings().redis_url:
        return settings().redis_url
    from .course.redis_server import start

    return start().url


def check_modules(client: redis.Redis) -> None:
    """Raise ModuleMissingError naming each missing module."""
    names = set()
    with contextlib.suppress(redis.ResponseError):
        for mod in client.module_list():
            name = mod.get("name") if isinstance(mod, dict) else None
            name = name or mod.get(b"name", b"")
            names.add(name.decode() if isinstance(name, bytes) else name)
    missing = [label for name, label in REQUIRED_MODULES.items() if name not in names]
    if missing and not names:  # Redis 8 builds modules in; MODULE LIST may be restricted
        commands = {"search": "FT.INFO", "ReJSON": "JSON.GET"}
        missing = []
        for name, label in REQUIRED_MODULES.items():
            try:
                info = client.command_info(commands[name])
            except redis.ResponseError:
                info = None
            if not info:
                missing.append(label)
    if missing:
        raise ModuleMissingError(
            f"Redis at {client.connection_pool.connection_kwargs.get('host')}:"
            f"{client.connection_pool.connection_kwargs.get('port')} lacks {', '.join(missing)}. "
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
