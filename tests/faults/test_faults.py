"""Fault suite: kill -9 the embedded Redis between turns and during a turn's background
writes, restart it on the same data dir and port, and check that nothing acknowledged is lost.

Each test runs its own embedded server (MEMORYKIT_HOME points at a temp dir), so killing
it never disturbs the shared server the rest of the suite uses.

The server runs with ``appendonly yes`` and ``appendfsync everysec``: Redis writes each
command to the append-only file before it answers, and fsyncs once a second. A killed
*process* therefore loses nothing it acknowledged (the bytes are in the kernel); only a
crash of the machine itself can lose up to one second. These tests check the first half.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import redis

import memorykit as mk
from memorykit.course import process, redis_server as server
from memorykit.errors import ModuleMissingError

pytestmark = pytest.mark.faults


@pytest.fixture
def own_server(tmp_path, monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("MEMORYKIT_HOME", str(tmp_path))
    info = server.start()
    yield info
    server.stop()


def kill9(info: server.ServerInfo) -> None:
    os.kill(info.pid, signal.SIGKILL)
    try:
        os.waitpid(info.pid, 0)  # reap it: it is our child
    except ChildProcessError:
        pass
    deadline = time.monotonic() + 5
    while process.port_is_free(info.port) is False and time.monotonic() < deadline:
        time.sleep(0.05)


def stored_texts(r, user, thread, ns):
    return [m.content for m in mk.ChatHistory(r, user, thread, namespace=ns).messages()]


@pytest.fixture
def agent_on(own_server):
    def make(ns: str):
        r = mk.connect()
        emb = mk.get_embedder(r)
        return r, mk.MemoryAgent(r, llm=mk.get_llm("offline"), embedder=emb, namespace=ns, memory="full")
    return make


def test_embedded_server_uses_aof_everysec(own_server):
    r = mk.connect()
    config = r.config_get("append*")
    assert config["appendonly"] == "yes" and config["appendfsync"] == "everysec"


def test_restart_comes_back_on_the_same_port(own_server):
    r = mk.connect()
    r.set("fault:k", "v")
    kill9(own_server)
    again = server.start()
    assert again.port == own_server.port and again.pid != own_server.pid
    assert r.get("fault:k") == "v"  # the old client reconnects by itself


def test_kill_between_turns_loses_no_acknowledged_message(agent_on, own_server):
    r, agent = agent_on("fault1")
    said = [f"Note {i}: my favourite number this week is {i}." for i in range(4)]
    for text in said:
        turn = agent.chat(text, user_id="ana", thread_id="t1")
        assert turn.ok  # acknowledged: the user message and the reply are in Redis
    agent.flush()
    kill9(own_server)
    server.start()
    more = [f"Note {i}: I walked {i} kilometres today." for i in range(4, 7)]
    for text in more:
        turn = agent.chat(text, user_id="ana", thread_id="t1")
        assert turn.error is None
    agent.flush()
    stored = stored_texts(r, "ana", "t1", "fault1")
    assert [t for t in stored if t.startswith("Note")] == said + more
    assert len(stored) == 2 * len(said + more)  # every user message and every reply, once
    agent.close()


def test_kill_during_background_writes_keeps_the_acknowledged_turn(agent_on, own_server):
    r, agent = agent_on("fault2")
    turn = agent.chat("My name is Ana and I live in Porto.", user_id="ana", thread_id="t1")
    assert turn.ok  # acknowledged: user message and reply are written before chat() returns
    kill9(own_server)  # the background writes (index, extract, remember, ...) may be mid-flight
    agent.flush()
    server.start()
    stored = stored_texts(r, "ana", "t1", "fault2")
    assert stored[0] == "My name is Ana and I live in Porto." and len(stored) == 2
    follow = agent.chat("Where do I live?", user_id="ana", thread_id="t1")
    assert follow.error is None
    agent.flush()
    assert len(stored_texts(r, "ana", "t1", "fault2")) == 4
    agent.close()


def test_while_redis_is_down_the_message_is_kept_for_the_next_turn(agent_on, own_server):
    r, agent = agent_on("fault3")
    agent.chat("First message.", user_id="ana", thread_id="t1")
    agent.flush()
    kill9(own_server)
    down = agent.chat("Written while Redis was down.", user_id="ana", thread_id="t1")
    assert down.error and "kept" in down.error  # a clear error on the turn, not an exception
    assert not down.ok
    server.start()
    back = agent.chat("Redis is back.", user_id="ana", thread_id="t1")
    assert back.error is None
    agent.flush()
    stored = stored_texts(r, "ana", "t1", "fault3")
    assert "Written while Redis was down." in stored
    assert stored.index("Written while Redis was down.") < stored.index("Redis is back.")
    assert stored.count("Written while Redis was down.") == 1
    agent.close()


def test_a_server_without_the_search_module_is_named(tmp_path):
    binary, _modules = server.binaries()
    port = process.free_port()
    proc = subprocess.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=port).ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)
        with pytest.raises(ModuleMissingError, match="RediSearch"):
            mk.connect(f"redis://127.0.0.1:{port}/0")
    finally:
        proc.kill()
        proc.wait()


def test_a_paused_redis_gives_a_clear_error_and_keeps_the_message(agent_on, own_server, monkeypatch):
    """SIGSTOP the server (it accepts connections, answers nothing): the turn reports the stall after the
    Redis timeout instead of hanging; after SIGCONT the kept message is saved with the next turn."""
    monkeypatch.setenv("MEMORYKIT_REDIS_TIMEOUT", "1")
    r, agent = agent_on("faultstall")
    first = agent.chat("I'm Ana.", user_id="a|b", thread_id="t")
    agent.flush()
    os.kill(own_server.pid, signal.SIGSTOP)
    try:
        stalled = agent.chat("My locker code is 4711.", user_id="a|b", thread_id="t")
        assert not stalled.ok and "Redis is unavailable" in stalled.error and "Timeout" in stalled.error
        assert [m.content for m in agent.unsaved("a|b", "t")] == ["My locker code is 4711."]
    finally:
        os.kill(own_server.pid, signal.SIGCONT)
    later = agent.chat("What is my locker code?", user_id="a|b", thread_id="t")
    agent.close()
    assert first.ok and later.ok and agent.unsaved("a|b", "t") == []
    assert [m.content for m in mk.ChatHistory(r, "a|b", "t", namespace="faultstall").messages()
            if m.role == "user"] == ["I'm Ana.", "My locker code is 4711.", "What is my locker code?"]
    assert mk.ChatHistory(r, "system", "t", namespace="faultstall").messages() == []
