"""The embedded Redis: modules present, reuse, persistence, stale state, clear failures."""
import json
import socket
import subprocess
import time

import pytest

import memorykit as mk
from memorykit.course import process, redis_server as server
from memorykit.errors import ModuleMissingError, ServerError


def test_connect_has_search_and_json(r):
    assert r.ping()
    names = {m["name"] for m in r.module_list()}
    assert {"search", "ReJSON"} <= names


def test_embedded_server_is_loopback_only(r):
    assert r.config_get("bind")["bind"] == "127.0.0.1"
    assert r.config_get("appendonly")["appendonly"] == "yes"


@pytest.fixture
def private_home(tmp_path, monkeypatch):
    """A second checkout: its own data dir, so stop/start never touches the shared server."""
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setenv("MEMORYKIT_HOME", str(tmp_path))
    monkeypatch.delenv("REDIS_URL", raising=False)
    yield tmp_path
    server.stop()


def test_start_is_reused_and_data_survives_restart(private_home):
    first = server.start()
    assert server.start() == first  # a second start reuses the running server
    client = mk.connect()
    client.set("nbtest:k", "kept")
    client.json().set("nbtest:doc", "$", {"a": 1})
    assert server.stop() is True
    assert server.status() is None
    client = mk.connect()  # starts again, replays the append-only file
    assert client.get("nbtest:k") == "kept"
    assert client.json().get("nbtest:doc") == {"a": 1}


def test_stale_state_file_is_replaced(private_home):
    state = private_home / ".memorykit" / "redis" / "server.json"
    state.parent.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    state.write_text(json.dumps({"pid": dead.pid, "port": 1}))
    assert server.status() is None
    info = server.start()
    assert info.pid != dead.pid and mk.connect().ping()


def test_killed_server_is_restarted(private_home):
    info = server.start()
    subprocess.run(["kill", "-9", str(info.pid)], check=True)
    deadline = time.monotonic() + 5
    while process.alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mk.connect().ping()
    assert server.status().pid != info.pid


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_url_fails_clearly(monkeypatch):
    url = f"redis://127.0.0.1:{_free_port()}/0"
    monkeypatch.setenv("REDIS_URL", url)
    with pytest.raises(ServerError, match="cannot reach Redis"):
        mk.connect()


def test_redis_without_modules_is_named(tmp_path):
    binary, _modules = server.binaries()
    port = _free_port()
    proc = subprocess.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not server._pings(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ModuleMissingError, match="RediSearch.*RedisJSON"):
            mk.connect(f"redis://127.0.0.1:{port}/0")
    finally:
        proc.terminate()
        proc.wait()


def test_cli_status_reports_running(r):
    out = subprocess.run([".venv/bin/python", "-m", "memorykit.server", "status"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "running" in out.stdout


def test_cli_runs_without_a_runtime_warning():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "memorykit.server", "status"], capture_output=True, text=True)
    assert out.returncode in (0, 1) and "RuntimeWarning" not in out.stderr, out.stderr


def test_memorykit_home_moves_only_server_data(tmp_path, monkeypatch):
    from memorykit.config import data_path, settings

    before = data_path("dedup")
    monkeypatch.setenv("MEMORYKIT_HOME", str(tmp_path))
    assert settings().data_dir == tmp_path / ".memorykit"
    assert data_path("dedup") == before and before.is_dir()


def test_import_memorykit_stays_light():
    import subprocess
    import sys

    code = ("import memorykit, sys; print([m for m in ('pandas', 'ipywidgets', 'matplotlib', 'umap') "
            "if m in sys.modules]); print(len(memorykit.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, count = out.stdout.split("\n")[:2]
    assert heavy == "[]" and int(count) <= 40
