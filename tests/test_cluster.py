"""Short-term, working and long-term memory on a local three-node Redis Cluster (redis-py's RedisCluster).

The nodes are the embedded ``redis-server`` binary (Redis 8: Vector Sets built in) with RedisJSON loaded
and ``cluster-enabled yes`` (not RediSearch: this build has no cluster coordinator, so the cluster has no
query engine, and long-term memory must work without one), each on its
own loopback port and temp dir; slots are assigned with CLUSTER ADDSLOTSRANGE and the nodes
joined with CLUSTER MEET (the shipped redis-cli needs libssl 1.1, missing on Debian 12).
Every multi-key transaction and script of one user must stay in one slot, which the ``{user}``
hash tag in their keys guarantees.
"""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

import memorykit as mk
from memorykit.course.redis_server import binaries
from memorykit.agent.backlog import Backlog
from memorykit.keys import backlog_key, registry_key
from memorykit.memory import dedup

pytestmark = pytest.mark.cluster
SLOTS = 16384


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def cluster():
    server, modules = binaries()
    rejson = [m for m in modules if m.name == "rejson.so"]
    root = Path(tempfile.mkdtemp(prefix="mk-cluster-"))
    ports, bus = _free_ports(3), _free_ports(3)  # explicit bus ports: the default is port + 10000
    procs = []
    try:
        for port, bus_port in zip(ports, bus):
            d = root / str(port)
            d.mkdir()
            procs.append(subprocess.Popen(
                [str(server), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                 "--cluster-enabled", "yes", "--cluster-port", str(bus_port),
                 "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "3000", "--save", "", "--appendonly", "no",
                 "--logfile", "redis.log", *(a for m in rejson for a in ("--loadmodule", str(m)))],
                cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        nodes = [redis.Redis(port=p, decode_responses=True, retry=None) for p in ports]
        for node, proc, port in zip(nodes, procs, ports):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(redis.ConnectionError):
                    node.ping()
                    break
                time.sleep(0.05)
            else:
                log = (root / str(port) / "redis.log").read_text(errors="replace")[-800:]
                pytest.fail(f"cluster node on port {port} did not start:\n{log}")
        bounds = [0, SLOTS // 3, 2 * SLOTS // 3, SLOTS]
        for i, node in enumerate(nodes):
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
        for node in nodes[1:]:
            node.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0], bus[0])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            infos = [n.execute_command("CLUSTER", "INFO") for n in nodes]
            if all("cluster_state:ok" in str(i) and "cluster_known_nodes:3" in str(i) for i in infos):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"cluster did not converge: {infos}")
        rc = RedisCluster(host="127.0.0.1", port=ports[0], decode_responses=True)
        yield rc
        rc.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def test_cluster_spreads_keys_over_three_nodes(cluster):
    slots = {cluster.keyslot(f"k{i}") for i in range(50)}
    owners = {cluster.get_node_from_key(f"k{i}").port for i in range(50)}
    assert len(owners) == 3 and len(slots) > 40


def test_user_keys_share_one_slot(cluster):
    ns, user = "clu", "raphael"
    h = mk.ChatHistory(cluster, user_id=user, thread_id="t1", ttl=600, namespace=ns)
    wm_user = mk.WorkingMemory(cluster, namespace=ns, scope="user")
    wm_conv = mk.WorkingMemory(cluster, namespace=ns, scope="conversation")
    keys = [h.key, h.summary_key, h.threads_key,
            wm_user.key(user), wm_user.history_key(user),
            wm_conv.key(user, "t1"), wm_conv.history_key(user, "t1"),
            *Backlog(cluster, ns).keys(user)]
    by_slot = {}
    for k in keys:
        by_slot.setdefault(cluster.keyslot(k), []).append(k)
    assert len(by_slot) == 1, f"one user's keys fall in {len(by_slot)} slots: {by_slot}"


def test_chat_history_on_cluster(cluster):
    ns, user = f"clu{uuid.uuid4().hex[:6]}", "ana"
    h = mk.ChatHistory(cluster, user_id=user, thread_id="t1", ttl=600, namespace=ns)
    h.append(mk.Message(role="user", content="Hi, I'm Ana"))
    h.append([mk.Message(role="assistant", content="Hello Ana!"),
              mk.Message(role="user", content="I live in Porto")])
    assert [m.content for m in h.messages()] == ["Hi, I'm Ana", "Hello Ana!", "I live in Porto"]
    assert [m.content for m in h.messages(last_n=1)] == ["I live in Porto"]
    assert len(h) == 3
    assert 0 < cluster.ttl(h.key) <= 600
    other = mk.ChatHistory(cluster, user_id=user, thread_id="t2", ttl=600, namespace=ns)
    other.append(mk.Message(role="user", content="Second thread"))
    assert {t for t, _ in h.list_threads()} == {"t1", "t2"}
    removed = h.delete_first(1)  # extended to the next user message: a thread starts with one
    assert [m.content for m in removed] == ["Hi, I'm Ana", "Hello Ana!"]
    assert [m.content for m in h.messages()] == ["I live in Porto"]
    h.clear()
    other.clear()
    assert h.messages() == [] and other.messages() == []


def test_backlog_of_what_to_remember_on_cluster(cluster):
    """Entries written in the thread's own transaction, claimed by a script over two keys, and found by a SCAN
    of every node: all in the user's slot."""
    ns, users = f"clu{uuid.uuid4().hex[:6]}", ["ana", "{x}", "a|b", "system", "bo", "cy"]
    backlog = Backlog(cluster, ns, lease=0.2)
    for user in users:
        h = mk.ChatHistory(cluster, user_id=user, thread_id="t1", ttl=600, namespace=ns)
        h.append([mk.Message(role="user", content="I live in Porto"), mk.Message(role="assistant", content="Nice!")],
                 also=lambda pipe, msgs, u=user: backlog.add(pipe, u, "t1", msgs))
    assert len({cluster.get_node_from_key(backlog_key(ns, u)).port for u in users}) > 1  # spread over nodes
    assert sorted(backlog.users()) == sorted(users)
    time.sleep(0.3)
    taken, dropped = backlog.claim("ana")
    assert list(taken) == ["t1"] and len(taken["t1"]) == 2 and dropped == {}
    assert backlog.claim("ana") == ({}, {})  # leased again: a second claimer gets nothing
    assert not backlog.done("ana", "t1", taken["t1"][:1])  # the other is leased: not due
    assert cluster.hlen(backlog_key(ns, "ana") + ":tries") == 1  # its claim count, while it waits
    backlog.done("ana", "t1", taken["t1"][1:])
    assert not cluster.exists(*backlog.keys("ana"))  # an empty backlog leaves no key
    assert sorted(backlog.users()) == sorted(users[1:])
    for user in users:
        mk.ChatHistory(cluster, user_id=user, thread_id="t1", ttl=600, namespace=ns).clear()
        cluster.delete(*backlog.keys(user))


def test_summary_on_cluster(cluster):
    ns = f"clu{uuid.uuid4().hex[:6]}"
    h = mk.ChatHistory(cluster, user_id="bo", thread_id="t", ttl=600, namespace=ns)
    lines = ["I moved to Porto last spring.", "How do you like Porto?", "I love the river walks.",
             "Do you run there?", "Every morning before work.", "How far do you run?",
             "About eight kilometres.", "Impressive!", "I am training for a half marathon.",
             "When is the race?", "In October, in Lisbon.", "Good luck with the training!"]
    h.append([mk.Message(role="user" if i % 2 == 0 else "assistant", content=t) for i, t in enumerate(lines)])
    assert mk.summarize_if_needed(h, mk.get_llm(), policy=mk.ByCount(max_messages=6, keep_last=2))
    assert h.summary_info() is not None  # written by the summary script, in the thread's slot
    assert len(h.messages()) == 12  # a summary is a view: nothing stored is lost
    assert h.prompt_messages()[0].role == "system"
    h.clear()


@pytest.mark.parametrize("scope", ["user", "conversation"])
def test_working_memory_on_cluster(cluster, scope):
    ns = f"clu{uuid.uuid4().hex[:6]}"
    wm = mk.WorkingMemory(cluster, namespace=ns, scope=scope, template="# Profile\n- name:\n")
    thread = "t1" if scope == "conversation" else None
    wm.update("# Profile\n- name: Sam\n", "u1", thread)
    wm.update("# Profile\n- name: Sam\n- city: Oslo\n", "u1", thread)
    assert "Oslo" in wm.get("u1", thread)
    assert len(wm.history("u1", thread)) == 1
    assert "Oslo" not in wm.undo("u1", thread)
    assert wm.clear("u1", thread)
    assert wm.get("u1", thread) is None
    wm.delete_all("u1", thread)


# ------------------------------------------------------------------ long-term memory (no query engine)
USERS = ("ana", "system", "{x}", "a|b")  # one plain, three adversarial: a reserved-looking id, a hash tag, a pipe


@pytest.fixture
def lt(cluster):
    store = mk.MemoryStore(cluster, mk.get_embedder(), namespace=f"clu{uuid.uuid4().hex[:6]}")
    yield store
    for u in USERS:
        store.forget_user(u)
    store.drop()


def _slots(cluster, store, user):
    keys = [store.key("m1", user), store.vectors_key(user), store.ids_key(user), store.access_key(user),
            dedup.ledger_key(store, user, "episodic")]
    keys += [registry_key(store.namespace, user)] if user is not None else []
    return {cluster.keyslot(k) for k in keys}


def test_long_term_keys_of_one_owner_share_a_slot(cluster, lt):
    assert lt.index is None  # no query engine on this cluster
    for owner in (*USERS, None):
        assert len(_slots(cluster, lt, owner)) == 1
    assert len({cluster.keyslot(lt.ids_key(u)) for u in USERS}) > 1  # spread over the cluster


def test_long_term_memory_on_cluster(cluster, lt):
    llm = mk.get_llm("offline")
    mine = {u: lt.add(f"User {u} went to Porto in 2019 for a wedding", user_id=u) for u in USERS}
    lt.add_many([{"content": f"User {u} is allergic to peanuts", "user_id": u} for u in USERS])
    fact = lt.add("Porto is a city in the north of Portugal", shared=True)
    for u in USERS:
        hits = lt.search("Where did I travel in 2019?", user_id=u, k=3)
        assert hits[0].memory.id == mine[u].id and {h.memory.user_id for h in hits} <= {u, None}
        assert fact.id in {h.memory.id for h in lt.search("Porto", user_id=u, k=5)}  # own + shared, merged
        assert lt.get(mine[u].id, u) is not None and lt.get(fact.id, u).shared
        assert lt.count(u, ["episodic"]) == 2 and len(lt.list(u)) == 3
    assert lt.get(mine["ana"].id, "system") is None  # another user's id: missing
    with pytest.raises(mk.MemoryKitError, match="query engine"):
        lt.search("Porto", user_id="ana", mode="hybrid")


@pytest.mark.timeout(1500)  # the offline decider fits once per process
def test_remember_supersede_as_of_delete_and_forget_on_cluster(cluster, lt):
    llm, now = mk.get_llm("offline"), time.time()
    for u in ("system", "{x}"):
        first = lt.remember("User lives in Lisbon.", user_id=u, observed_at=now - 400 * 86400, llm=llm)
        assert (first.action, first.tier) == ("ADD", "semantic")
        exact = lt.remember("user lives in lisbon!", user_id=u, llm=llm)
        assert (exact.action, exact.tier, exact.memory.id) == ("NOOP", "exact", first.memory.id)
        near = lt.remember("User currently lives in Lisbon.", user_id=u, llm=llm)
        assert (near.action, near.tier) == ("NOOP", "semantic")
        moved = lt.remember("User moved to Berlin last month.", user_id=u, observed_at=now - 30 * 86400, llm=llm)
        assert (moved.action, moved.tier) == ("UPDATE", "decided")
        assert [h.memory.content for h in lt.search("Where do I live?", user_id=u, k=3)] == \
            ["User moved to Berlin last month."]
        past = lt.search("Where do I live?", user_id=u, k=3, as_of=now - 200 * 86400)
        assert [h.memory.content for h in past] == ["User lives in Lisbon."]
        assert [m.content for m in lt.history(first.memory.id, user_id=u)] == \
            ["User lives in Lisbon.", "User moved to Berlin last month."]
    shared = lt.remember("Lisbon is the capital of Portugal.", shared=True, llm=llm)
    assert lt.remember("lisbon is the capital of portugal", shared=True, llm=llm).action == "NOOP"
    with pytest.raises(mk.MemoryKitError, match="shared=True"):
        lt.delete(shared.memory.id, user_id="system")
    assert lt.delete(shared.memory.id, shared=True) is True and lt.get(shared.memory.id, "system") is None
    ids = {u: [m.id for m in lt.list(u, include_superseded=True)] for u in ("system", "{x}")}
    assert lt.forget_user("system") > 0
    assert lt.list("system", include_superseded=True) == [] and lt.search("Berlin", user_id="system") == []
    assert not cluster.exists(lt.vectors_key("system"), lt.ids_key("system"))
    assert [m.id for m in lt.list("{x}", include_superseded=True)] == ids["{x}"]  # the other user is untouched
