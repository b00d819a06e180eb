"""Many users on one app: property tests that no store lets one user read, change or delete another's
data (ids drawn from adversarial look-alikes, empty and huge values), and one integrity test per write
path: working-memory compare-and-set under a race, recall vectors that expire with their thread, a
tool call without an id, a stalled Redis."""
from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
import redis
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import memorykit as mk
from memorykit.errors import MemoryKitError, ServerError
from memorykit.memory.working import WorkingMemoryConflict
from memorykit.messages import Message
from scripted import ScriptedModel

from conftest import drop_namespace

LOOKALIKES = ["system", "System", "a|b", "a", "b", "*", "{x}", "x", "a b", "a ", " a", "A", "ａ", "a,b",
              "user:1", "user%3A1", "ユーザー", "🙂", "%shared"]
CHARS = st.sampled_from(list("ab{}|*, :%")) | st.characters(exclude_categories=["Cs"])  # lone surrogates: see below
IDS = st.sampled_from(LOOKALIKES) | st.text(CHARS, min_size=1, max_size=12)
VALUES = st.sampled_from(["", " ", "x" * 60_000]) | st.text(min_size=1, max_size=40)
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def space(r, emb):
    """One namespace and one of each store for the whole module (creating indexes per example is slow)."""
    namespace = "ten" + uuid.uuid4().hex[:8]
    stores = {"procs": mk.ProcedureStore(r, emb, namespace=namespace, distance_threshold=None),
              "feedback": mk.FeedbackStore(r, emb, namespace=namespace, distance_threshold=None),
              "working": mk.WorkingMemory(r, namespace=namespace, scope="user"),
              "recall": mk.MessageIndex(r, emb, namespace=namespace), "ns": namespace}
    yield stores
    drop_namespace(r, namespace)


def attempt(fn, *args, **kwargs):
    """(True, value), or (False, None) for a clear MemoryKitError refusal (bad id, empty value)."""
    try:
        return True, fn(*args, **kwargs)
    except MemoryKitError as exc:
        assert str(exc)
        return False, None


def secret(value: str) -> str:
    """A marker text no other example uses, with the drawn value inside."""
    return f"secret {uuid.uuid4().hex} {value}"


@SETTINGS
@given(a=IDS, b=IDS, value=VALUES)
def test_chat_history_is_per_user(r, space, a, b, value):
    assume(a != b)
    thread = "t" + uuid.uuid4().hex[:6]
    ok, ha = attempt(mk.ChatHistory, r, a, thread, namespace=space["ns"])
    ok_b, hb = attempt(mk.ChatHistory, r, b, thread, namespace=space["ns"])
    assume(ok and ok_b)
    stored, _ = attempt(ha.append, Message(role="user", content=secret(value)))
    before = ha.messages()
    assert hb.messages() == [] and hb.clear() == 0 and hb.delete_where(lambda m: True) == []
    assert ha.messages() == before and len(before) == int(stored)


@SETTINGS
@given(a=IDS, b=IDS, value=VALUES)
def test_procedures_are_per_user(space, a, b, value):
    assume(a != b)
    procs, text = space["procs"], secret(value)
    tool = "tool_" + uuid.uuid4().hex[:8]  # its own pattern (one owner + type + tool set is one document)
    ok, kept = attempt(procs.store, text, [tool], 0.9, 10, user_id=a,
                       calls=[{"name": tool, "arguments": {"note": text}}])
    assume(ok and kept is not None)
    ok_b, hits = attempt(procs.suggest, text, k=20, user_id=b)
    assume(ok_b)
    assert all(text not in h.procedure.query and text not in str(h.calls) for h in hits)
    assert all(text not in p.query for p in procs.list(b))
    assert procs.get(kept.id, b) is None and procs.delete(kept.id, b) is False
    assert procs.get(kept.id, a).query == text.strip()


@SETTINGS
@given(a=IDS, b=IDS, value=VALUES)
def test_feedback_is_per_user(space, a, b, value):
    assume(a != b)
    fb, text = space["feedback"], secret(value)
    ok, _ = attempt(fb.mark, a, text, "the answer", "positive")
    ok_b, _ = attempt(fb.count, b)
    assume(ok and ok_b)
    assert fb.get(b, text, "the answer") is None and fb.delete(b, text, "the answer") is False
    assert all(e.query != text.strip() for e in fb.list(b))
    assert all(h.example.query != text.strip() for h in fb.search(text, b, k=10))
    assert fb.get(a, text, "the answer").label == "positive"


@SETTINGS
@given(a=IDS, b=IDS, value=VALUES)
def test_working_memory_is_per_user(space, a, b, value):
    assume(a != b)
    wm, text = space["working"], secret(value)[:1900]
    ok, _ = attempt(wm.update, text, a)
    ok_b, mine = attempt(wm.get, b)
    assume(ok and ok_b)
    assert mine is None or text.strip() not in mine
    wm.clear(b)
    attempt(wm.undo, b)
    assert wm.get(a) == text.strip() + "\n"
    wm.delete_all(b)
    assert wm.get(a) == text.strip() + "\n"


@SETTINGS
@given(a=IDS, b=IDS, value=VALUES)
def test_message_recall_is_per_user(space, a, b, value):
    assume(a != b)
    index, text, thread = space["recall"], secret(value), "t" + uuid.uuid4().hex[:6]
    ok, ha = attempt(index.history, a, thread)
    ok_b, hb = attempt(index.history, b, thread)
    assume(ok and ok_b)
    attempt(ha.append, Message(role="user", content=text))
    assert all(text not in h.message.content for h in index.search(text, user_id=b, k=20))
    hb.clear()
    assert index.count(a, thread) == int(bool(text.strip()))


# ---------------------------------------------------------------- integrity of each write path
class Gate:
    """The offline model, but each working-memory call first lets ``between()`` run (a concurrent writer)."""

    def __init__(self, inner, between):
        self.inner, self.between, self.label, self.calls = inner, between, "offline (gated)", 0

    def perform(self, task, inp, tools=None):
        self.calls += 1
        self.between(self.calls)
        return self.inner.perform(task, inp, tools=tools)

    def chat(self, messages, **kwargs):
        return self.inner.chat(messages, **kwargs)


def test_working_memory_observe_never_overwrites_a_concurrent_edit(r, ns, llm):
    """Thread 1 observes (reads, asks the model); thread 2 edits meanwhile; both changes survive."""
    wm = mk.WorkingMemory(r, namespace=ns, template=mk.PROFILE_TEMPLATE, scope="user")
    edited = threading.Event()

    def other_writer():
        wm.update(mk.PROFILE_TEMPLATE.replace("- Timezone:", "- Timezone: CET"), "sam")
        wm.update(mk.PROFILE_TEMPLATE.replace("- Timezone:", "- Timezone: PST"), "system")
        edited.set()

    def between(call):
        if call == 1:  # the model is "thinking" about the content it read: another thread edits now
            t = threading.Thread(target=other_writer)
            t.start()
            t.join()

    out = wm.observe(Message(role="user", content="Call me Sam"), Gate(llm, between), user_id="sam")
    assert edited.is_set() and out.changed
    assert "- Name: Sam" in wm.get("sam") and "- Timezone: CET" in wm.get("sam")
    assert "- Name" in wm.get("system") and "Sam" not in wm.get("system")


def test_working_memory_gives_up_clearly_when_it_keeps_changing(r, ns, llm):
    wm = mk.WorkingMemory(r, namespace=ns, template=mk.PROFILE_TEMPLATE, scope="user")

    def between(call):  # every read is stale by the time the model answers
        wm.update(mk.PROFILE_TEMPLATE.replace("- Timezone:", f"- Timezone: UTC+{call}"), "a|b")

    with pytest.raises(WorkingMemoryConflict, match="kept changing"):
        wm.observe(Message(role="user", content="Call me Sam"), Gate(llm, between), user_id="a|b")
    assert "UTC+3" in wm.get("a|b") and "Sam" not in wm.get("a|b")


def test_recall_vectors_expire_with_their_thread(r, emb, ns):
    index = mk.MessageIndex(r, emb, namespace=ns)
    short, kept = index.history("a|b", "t1", ttl=2), index.history("system", "t1", ttl=None)
    short.append(Message(role="user", content="my locker code is 4711"))
    kept.append(Message(role="user", content="my locker code is 1234"))
    vectors = sorted(r.smembers(short.vectors_key))
    assert len(vectors) == 1 and 2000 <= r.pttl(vectors[0]) + 50 and r.pttl(vectors[0]) <= 2500  # a quarter more
    time.sleep(1.2)
    short.append(Message(role="user", content="and my bike lock is 99"))  # the thread's TTL passes the vectors'
    vectors = sorted(r.smembers(short.vectors_key))
    assert len(vectors) == 2 and all(r.pttl(k) >= r.pttl(short.key) > 1500 for k in vectors)  # all slide
    deadline = time.time() + 10
    while r.exists(short.key) and time.time() < deadline:
        time.sleep(0.1)
    assert index.search("locker code", user_id="a|b", k=5, distance_threshold=2.0) == []  # dropped on read
    while any(r.exists(k) for k in vectors) and time.time() < deadline:  # at most a quarter of the TTL later
        time.sleep(0.1)
    assert not any(r.exists(k) for k in vectors)  # (reading an expired key also reclaims it at once)
    assert index.count("a|b") == 0
    assert [h.message.content for h in index.search("locker code", user_id="system", k=5)] == \
        ["my locker code is 1234"]
    assert index.add("a|b", "t1", [Message(role="user", content="late indexing")]) == 0  # the thread is gone
    assert index.count("a|b") == 0


def test_clearing_a_thread_deletes_its_vectors_without_the_index(r, emb, ns):
    index = mk.MessageIndex(r, emb, namespace=ns)
    index.history("{x}", "t").append(Message(role="user", content="remember the blue door"))
    index.history("x", "t").append(Message(role="user", content="remember the blue door"))
    assert mk.ChatHistory(r, "{x}", "t", namespace=ns).clear() == 1  # a plain history, no index given
    assert index.count("{x}") == 0 and index.count("x") == 1


def test_a_tool_call_without_an_id_is_stored_with_one(r, emb, llm, ns):
    call = {"type": "function", "function": {"name": "search_memory", "arguments": '{"query": "Paris"}'}}
    model = ScriptedModel(Message(role="assistant", content="", tool_calls=[call]), "You went to Paris.", then=llm)
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, retrieval="tools")
    try:
        turn = agent.chat("Where did I go in 2009?", user_id="*", thread_id="t")
        other = agent.chat("Hello there", user_id="a|b", thread_id="t")
    finally:
        agent.close()
    assert turn.ok and turn.reply == "You went to Paris." and "store" not in turn.failed_steps
    stored = agent.history("*", "t").messages()
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls[0]["id"] and stored[2].tool_call_id == stored[1].tool_calls[0]["id"]
    assert other.ok and [m.role for m in agent.history("a|b", "t").messages()] == ["user", "assistant"]


def test_a_reply_is_kept_when_its_tool_steps_are_rejected(r, emb, llm, ns, monkeypatch):
    """Even if a tool step cannot be stored, the reply is (and the turn says what was dropped)."""
    import memorykit.agent.memory_agent as ma

    agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns)
    broken = Message(role="tool", content="x", tool_call_id=None)  # a tool result that names no call
    monkeypatch.setattr(ma.MemoryAgent, "_call_model",
                        lambda self, turn, inp: (Message(role="assistant", content="Paris."), [broken]))
    try:
        turn = agent.chat("Where did I go?", user_id="u 1", thread_id="t")
    finally:
        agent.close()
    assert turn.ok and "store" in turn.failed_steps
    assert [m.content for m in agent.history("u 1", "t").messages()] == ["Where did I go?", "Paris."]


def test_a_stalled_redis_raises_a_clear_error_instead_of_hanging():
    """A server that accepts connections and never answers (a paused or overloaded Redis)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        with pytest.raises(ServerError, match="did not answer within 0.5 s"):
            mk.connect(f"redis://127.0.0.1:{port}/0", timeout=0.5)
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, socket_connect_timeout=0.5)
        with pytest.raises(redis.TimeoutError):
            client.get("x")
    finally:
        listener.close()


def test_forget_user_removes_recall_vectors_and_their_set(r, emb, ns):
    from memorykit.memory.index import forget_user

    index = mk.MessageIndex(r, emb, namespace=ns)
    for user in ("a|b", "system"):
        index.history(user, "t", ttl=None).append(Message(role="user", content="remember the red door"))
    forget_user(r, ns, "a|b")
    assert not r.exists(index.history("a|b", "t").vectors_key) and index.count("a|b") == 0
    assert r.exists(index.history("system", "t").vectors_key) and index.count("system") == 1
