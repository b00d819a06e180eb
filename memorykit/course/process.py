"""A background server per checkout, shared by every kernel, test run and CLI call.

The embedded Redis (:mod:`.redis_server`) and the local llama.cpp server
(:mod:`.local_model`) both live in a directory holding ``server.json`` (pid, port, ...),
``server.lock`` (start / stop are serialized across processes, so two kernels starting at
once share one server) and a log. A state file whose process is gone is stale and removed.
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
from pathlib import Path
from typing import Any, Callable, Iterable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Free to listen on, as a server does (SO_REUSEADDR: a killed server's TIME_WAIT sockets don't count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def alive(pid: int) -> bool:
    """The process exists (an exited child of ours is reaped, not counted as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


@contextlib.contextmanager
def locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "server.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def read_state(directory: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((directory / "server.json").read_text())
        state["pid"], state["port"] = int(state["pid"]), int(state["port"])
        return state
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def write_state(directory: Path, **state: Any) -> None:
    (directory / "server.json").write_text(json.dumps(state))


def running(directory: Path, ready: Callable[[int], bool]) -> dict[str, Any] | None:
    """The live server's state, or None (a stale state file is removed)."""
    state = read_state(directory)
    if state is None:
        return None
    if alive(state["pid"]) and ready(state["port"]):
        return state
    (directory / "server.json").unlink(missing_ok=True)
    return None


def log_tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


def launch(start: Callable[[int], subprocess.Popen], ready: Callable[[int], bool], ports: Iterable[int], *,
           timeout: float, poll: float, log: Path, error: Callable[[str], Exception]) -> tuple[int, int]:
    """Start on the first of ``ports`` and wait until ``ready``; the next port only if this one was
    taken meanwhile. Returns (pid, port); raises ``error(log tail)`` otherwise."""
    tail = ""
    for port in ports:
        proc = start(port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if ready(port):
                return proc.pid, port
            time.sleep(poll)
        if proc.poll() is None:
            proc.kill()
        tail = log_tail(log)
        if "address already in use" not in tail.lower():
            break
    raise error(tail)


def halt(directory: Path, state: dict[str, Any] | None, ask: Callable[[dict], None] | None = None) -> bool:
    """Remove the state file; stop its process (``ask``, else SIGTERM; SIGKILL after 10 s). True if it ran."""
    (directory / "server.json").unlink(missing_ok=True)
    if state is None or not alive(state["pid"]):
        return False
    with contextlib.suppress(ProcessLookupError):
        ask(state) if ask else os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 10
    while alive(state["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(state["pid"]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGKILL)
    return True


def stop(directory: Path, ask: Callable[[dict], None] | None = None) -> bool:
    with locked(directory):
        return halt(directory, read_state(directory), ask)


def cli(argv: list[str] | None, prog: str, doc: str, name: str, *, start: Callable, stop: Callable,
        status: Callable, describe: Callable[[Any], str], errors: tuple = (), **extra: Callable[[], str]) -> int:
    """``start|stop|status`` (and ``extra`` commands that print what they return); status exits 3 when down."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", *extra])
    cmd = parser.parse_args(argv).command
    try:
        if cmd == "start":
            print(f"{name} running: {describe(start())}")
        elif cmd == "stop":
            print("stopped" if stop() else "not running")
        elif cmd == "status":
            info = status()
            print(f"running: {describe(info)}" if info else "not running")
            return 0 if info else 3
        else:
            print(extra[cmd]())
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
