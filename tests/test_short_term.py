"""ChatHistory on a real Redis list, its summary view, and the trimming policies (pure functions)."""
import logging
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

import memorykit as mk
from memorykit.memory.short_term import fix_boundaries, head_length, trim_last, trim_to_tokens, valid_cuts


def U(text):
    return mk.Message(role="user", content=text)


def A(text):
    return mk.Message(role="assistant", content=text)


def call(cid, name="heart_rate"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


class RecordingRecall:
    """Stands in for the message index of a ChatHistory: records what the history tells it."""

    def __init__(self):
        self.added, self.removed, self.queries = [], [], []
        self.lock = threading.Lock()

    def add(self, user_id, thread_id, messages):
        with self.lock:
            self.added += [(user_id, thread_id, m.id) for m in messages]

    def remove(self, user_id, thread_id, message_ids):
        with self.lock:
            self.removed += [(user_id, thread_id, i) for i in message_ids]

    def search(self, query, user_id, thread_id=None, k=5, distance_threshold=None):
        self.queries.append((query, user_id, thread_id, k, distance_threshold))
        return ["hit"]


def indexed(r, ns, rec, user="u", thread="t"):
    return mk.ChatHistory(r, user, thread, namespace=ns, index=rec)


# ---------------------------------------------------------------- storage
def test_append_and_read_back_in_order(r, ns):
    h = mk.ChatHistory(r, "u1", "t1", namespace=ns)
    h.append(U("Hi"))
    h.append([A("Hello!"), {"role": "user", "content": "My resting heart rate is 72 bpm."}])
    got = h.messages()
    assert [m.content for m in got] == ["Hi", "Hello!", "My resting heart rate is 72 bpm."]
    assert len(h) == 3
    assert [m.content for m in h.messages(last_n=2)] == ["Hello!", "My resting heart rate is 72 bpm."]
    assert h.messages(last_n=10) == got and h.messages(last_n=0) == []


def test_thread_is_a_plain_redis_list_of_json(r, ns):
    h = mk.ChatHistory(r, "u1", "t1", namespace=ns)
    m = h.append(U("Hi"))[0]
    assert h.key == f"{ns}:thread:{{u1}}:t1" and h.summary_key == f"{ns}:thread:{{u1}}:t1:summary"
    assert r.type(h.key) == "list"
    assert mk.Message.from_json(r.lindex(h.key, 0)) == m
    assert r.type(f"{ns}:user:{{u1}}:threads") == "zset"


def test_ids_are_encoded_in_keys(r, ns):
    h = mk.ChatHistory(r, "a:b*", "t{1}", namespace=ns)
    h.append(U("Hi"))
    assert h.key == f"{ns}:thread:{{a%3Ab%2A}}:t%7B1%7D"
    assert mk.ChatHistory(r, "x}y{", "t", namespace=ns).key == f"{ns}:thread:{{x%7Dy%7B}}:t"
    assert mk.ChatHistory(r, "a", "b*:t{1}", namespace=ns).messages() == []


def test_users_and_threads_are_isolated(r, ns):
    a1 = mk.ChatHistory(r, "alice", "t1", namespace=ns)
    a2 = mk.ChatHistory(r, "alice", "t2", namespace=ns)
    b1 = mk.ChatHistory(r, "bob", "t1", namespace=ns)
    a1.append(U("alice one"))
    a2.append(U("alice two"))
    b1.append(U("bob one"))
    assert [m.content for m in a1.messages()] == ["alice one"]
    assert [m.content for m in a2.messages()] == ["alice two"]
    assert [m.content for m in b1.messages()] == ["bob one"]
    assert [t for t, _ in a1.list_threads()] == ["t2", "t1"]
    assert [t for t, _ in b1.list_threads()] == ["t1"]
    b1.clear()
    assert a1.messages() and a2.messages() and b1.messages() == []
    assert b1.list_threads() == []


def test_list_threads_orders_by_last_activity(r, ns):
    t1 = mk.ChatHistory(r, "u", "t1", namespace=ns)
    t2 = mk.ChatHistory(r, "u", "t2", namespace=ns)
    t1.append(U("first"))
    t2.append(U("second"))
    t1.append(U("t1 again"))
    assert [t for t, _ in mk.ChatHistory(r, "u", "t", namespace=ns).list_threads()] == ["t1", "t2"]


def test_sliding_ttl_is_refreshed_on_each_write(r, ns):
    h = mk.ChatHistory(r, "u", "t", ttl=100, namespace=ns)
    h.append(U("Hi"))
    assert 90 < r.ttl(h.key) <= 100
    r.expire(h.key, 5)
    h.append(A("Hello"))
    assert 90 < r.ttl(h.key) <= 100


def test_ttl_none_keeps_the_thread(r, ns):
    h = mk.ChatHistory(r, "u", "t", ttl=60, namespace=ns)
    h.append(U("Hi"))
    mk.ChatHistory(r, "u", "t", ttl=None, namespace=ns).append(A("Hello"))
    assert r.ttl(h.key) == -1


def test_thread_expires_and_leaves_the_thread_list(r, ns):
    h = mk.ChatHistory(r, "u", "t", ttl=1, namespace=ns)
    h.append(U("short-lived"))
    r.pexpire(h.key, 50)
    time.sleep(0.15)
    assert h.messages() == [] and len(h) == 0
    assert h.list_threads() == []


def test_a_thread_written_again_while_the_list_is_pruned_stays_listed(r, ns):
    """list_threads finds t1 expired; an append brings it back before the prune: t1 must stay in the list
    (forget_user finds threads through it), while the still-expired t2 is pruned."""
    h, other = (mk.ChatHistory(r, "a|b", t, ttl=None, namespace=ns) for t in ("t1", "t2"))
    h.append(U("old")), other.append(U("old too"))
    r.delete(h.key, other.key)  # both expired
    prune = h._prune

    def append_then_prune(**kw):
        mk.ChatHistory(r, "a|b", "t1", ttl=None, namespace=ns).append(U("my new secret"))
        return prune(**kw)

    h._prune = append_then_prune
    assert h.list_threads() == []  # what it saw: both gone
    assert r.zscore(h.threads_key, "t1") is not None and r.zscore(h.threads_key, "t2") is None
    assert [t for t, _ in h.list_threads()] == ["t1"]


@pytest.mark.parametrize("bad", [0, -5, 1.5, "60"])
def test_bad_ttl_is_rejected(r, ns, bad):
    with pytest.raises(mk.ValidationError):
        mk.ChatHistory(r, "u", "t", ttl=bad, namespace=ns)


@pytest.mark.parametrize("user_id,thread_id", [("", "t"), ("u", "   "), ("u\n", "t"), ("u", "x" * 300)])
def test_bad_ids_are_rejected(r, ns, user_id, thread_id):
    with pytest.raises(mk.ValidationError):
        mk.ChatHistory(r, user_id, thread_id, namespace=ns)


@pytest.mark.parametrize("bad", [U(""), U("   \n\t"), A(""), mk.Message(role="tool", content="x")])
def test_empty_or_incomplete_messages_are_rejected_and_nothing_is_stored(r, ns, bad):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    with pytest.raises(mk.ValidationError):
        h.append([U("fine"), bad])
    assert len(h) == 0 and not r.exists(h.threads_key)


def test_a_string_is_not_a_message(r, ns):
    with pytest.raises(mk.ValidationError, match="Message"):
        mk.ChatHistory(r, "u", "t", namespace=ns).append("hello")


def test_assistant_with_only_tool_calls_is_accepted(r, ns):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([U("rate?"), mk.Message(role="assistant", content="", tool_calls=[call("c1")]),
              mk.Message(role="tool", content="72", tool_call_id="c1")])
    assert [m.role for m in h.messages()] == ["user", "assistant", "tool"]
    assert h.messages()[1].tool_calls == [call("c1")]


def test_one_megabyte_message_round_trips_intact(r, ns):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    big = ("0123456789abcdéf€" * 70_000)[:1_048_576]
    h.append(U(big))
    assert h.messages()[0].content == big


def test_oversized_message_is_rejected(r, ns, monkeypatch):
    monkeypatch.setattr("memorykit.memory.short_term.MAX_MESSAGE_CHARS", 1000)
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    with pytest.raises(mk.ValidationError, match="limit"):
        h.append(U("x" * 1001))
    assert len(h) == 0


def test_corrupt_entries_are_skipped_with_a_warning(r, ns, caplog):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append(U("before"))
    r.rpush(h.key, "{not json", '{"role": "robot", "content": "x"}', "[1]", '{"content": "no role"}')
    h.append(A("after"))
    with caplog.at_level(logging.WARNING, logger="memorykit.memory.short_term"):
        assert [m.content for m in h.messages()] == ["before", "after"]
    assert sum("corrupt" in rec.message for rec in caplog.records) == 4
    assert [m.content for m in h.prompt_messages()] == ["before", "after"]


def test_eight_concurrent_writers_lose_nothing(r, ns):
    def write(w):
        h = mk.ChatHistory(r, "u", "t", namespace=ns)
        for i in range(25):
            h.append(U(f"writer {w} message {i}"))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    got = [m.content for m in mk.ChatHistory(r, "u", "t", namespace=ns).messages()]
    assert sorted(got) == sorted(f"writer {w} message {i}" for w in range(8) for i in range(25))
    for w in range(8):
        mine = [c for c in got if c.startswith(f"writer {w} ")]
        assert mine == [f"writer {w} message {i}" for i in range(25)]


def test_prompt_messages_puts_system_and_summary_first(r, ns):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([mk.Message(role="system", content="Be brief."), U("Hi"), A("Hello")])
    assert [m.role for m in h.prompt_messages()] == ["system", "user", "assistant"]
    r.set(h.summary_key, '{"text": "- User is called Sam.", "covers": 2}')
    p = h.prompt_messages(system="You are a coach.")
    assert [m.role for m in p] == ["system", "system", "system", "user", "assistant"]
    assert p[0].content == "You are a coach." and p[1].content == "Be brief."
    assert "User is called Sam." in p[2].content
    assert h.summary() == "- User is called Sam." and h.summary_info()["covers"] == 2


def test_follow_up_question_uses_the_previous_turn(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append(U("My resting heart rate is 72 bpm."))
    h.append(llm.chat(h.prompt_messages()))
    h.append(U("Is that normal?"))
    reply = llm.chat(h.prompt_messages())
    assert "72 bpm" in reply.content
    fresh = mk.ChatHistory(r, "u", "other", namespace=ns)
    fresh.append(U("Is that normal?"))
    assert "72" not in llm.chat(fresh.prompt_messages()).content


# ---------------------------------------------------------------- deleting from a stored thread
def tool_thread():
    return [mk.Message(role="system", content="sys"), U("q1"), A("a1"),
            U("rate?"), mk.Message(role="assistant", content="", tool_calls=[call("c1"), call("c2", "steps")]),
            mk.Message(role="tool", content="72", tool_call_id="c1"),
            mk.Message(role="tool", content="9000", tool_call_id="c2"), A("72 bpm, 9000 steps"),
            U("q3"), A("a3")]


def test_delete_first_keeps_system_and_extends_to_a_user_message(r, ns):
    rec = RecordingRecall()
    h = indexed(r, ns, rec)
    h.append(tool_thread())
    gone = h.delete_first(3)
    assert [m.content for m in gone] == ["q1", "a1", "rate?", "", "72", "9000", "72 bpm, 9000 steps"]
    assert [m.content for m in h.messages()] == ["sys", "q3", "a3"]
    assert {i for _, _, i in rec.removed} == {m.id for m in gone}
    assert h.delete_first(0) == []


def test_delete_first_all_but_system(r, ns):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append(tool_thread())
    h.delete_first(100)
    assert [m.content for m in h.messages()] == ["sys"]


def test_delete_where_takes_tool_calls_with_their_results(r, ns):
    rec = RecordingRecall()
    h = indexed(r, ns, rec)
    h.append(tool_thread())
    gone = h.delete_where(lambda m: m.content == "9000")
    assert sorted(m.content for m in gone) == ["", "72", "9000"]
    assert [m.content for m in h.messages()] == ["sys", "q1", "a1", "rate?", "72 bpm, 9000 steps", "q3", "a3"]
    assert len(rec.removed) == 3


def test_delete_where_fixes_the_start(r, ns):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append(tool_thread())
    h.delete_where(lambda m: m.content == "q1")
    assert [m.content for m in h.messages()][:2] == ["sys", "rate?"]
    assert fix_ok(h.messages())


def test_delete_where_keeps_concurrent_appends(r, ns):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([U("keep"), A("drop me")])
    snap_pred_calls = []

    def predicate(m):
        if not snap_pred_calls:
            mk.ChatHistory(r, "u", "t", namespace=ns).append(U("late arrival"))
        snap_pred_calls.append(m)
        return m.content == "drop me"

    h.delete_where(predicate)
    assert [m.content for m in h.messages()] == ["keep", "late arrival"]


def test_clear_removes_thread_summary_and_index_entries(r, ns):
    rec = RecordingRecall()
    h = indexed(r, ns, rec)
    h.append([U("a"), A("b")])
    r.set(h.summary_key, '{"text": "x", "covers": 1}')
    assert h.clear() == 2
    assert not r.exists(h.key, h.summary_key) and h.list_threads() == []
    assert sorted(rec.removed) == sorted(rec.added)


def test_recall_gets_every_append_and_search_delegates(r, ns):
    rec = RecordingRecall()
    h = indexed(r, ns, rec)
    stored = h.append([U("a"), A("b")]) + h.append(U("c"))
    assert rec.added == [("u", "t", m.id) for m in stored]
    assert h.search_messages("pricing?", k=3) == ["hit"]
    assert rec.queries == [("pricing?", "u", None, 3, None)]


def test_search_messages_without_recall_says_what_to_do(r, ns):
    with pytest.raises(mk.MemoryKitError, match="recall"):
        mk.ChatHistory(r, "u", "t", namespace=ns).search_messages("x")


# ---------------------------------------------------------------- trimming: validity rules
def fix_ok(msgs, original=None):
    """The validity rules: starts with user after the head; tool calls and results stay together."""
    h = head_length(msgs)
    if len(msgs) > h and msgs[h].role != "user":
        return False
    present = {m.id for m in msgs}
    ids_in = {}
    for m in msgs:
        if m.role == "assistant" and m.tool_calls:
            for c in m.tool_calls:
                ids_in[c["id"]] = m
    for m in msgs:
        if m.role == "tool" and m.tool_call_id not in ids_in:
            return False
    if original is not None:
        for m in original:
            if m.role == "tool" and m.tool_call_id in ids_in and m.id not in present:
                return False
    return True


@st.composite
def conversations(draw):
    msgs = []
    if draw(st.booleans()):
        msgs.append(mk.Message(role="system", content="You are helpful."))
    if draw(st.booleans()):
        msgs.append(A("Hello! How can I help?"))
    n_call = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["chat", "tools", "tools", "orphan", "user_only"]))
        msgs.append(U(draw(st.text("abc ", min_size=1, max_size=30)).strip() or "q"))
        if kind == "chat":
            msgs.append(A("a" * draw(st.integers(1, 60))))
        elif kind == "tools":
            k = draw(st.integers(1, 3))
            cids = [f"c{n_call + i}" for i in range(k)]
            n_call += k
            msgs.append(mk.Message(role="assistant", content="", tool_calls=[call(c) for c in cids]))
            for c in draw(st.permutations(cids)):
                msgs.append(mk.Message(role="tool", content="r" * draw(st.integers(1, 40)), tool_call_id=c))
            if draw(st.booleans()):
                msgs.append(A("done"))
        elif kind == "orphan":
            msgs.append(mk.Message(role="tool", content="stray", tool_call_id="nobody"))
    return msgs


def is_subsequence(out, msgs):
    it = iter(m.id for m in msgs)
    return all(any(x == y for y in it) for x in (m.id for m in out))


@given(conversations(), st.integers(0, 30))
@settings(max_examples=300, deadline=None)
def test_trim_last_is_valid_bounded_and_maximal(msgs, n):
    out = trim_last(msgs, n)
    h = head_length(msgs)
    assert out[:h] == msgs[:h] and is_subsequence(out, msgs)
    assert len(out) - h <= n
    assert fix_ok(out, msgs)
    starts = [c for c in valid_cuts(msgs) if c >= h and c >= len(msgs) - n]
    if starts:
        assert out[h] is msgs[starts[0]]
    else:
        assert out == msgs[:h]


@given(conversations(), st.integers(1, 400))
@settings(max_examples=300, deadline=None)
def test_trim_to_tokens_is_valid_within_budget_and_maximal(msgs, budget):
    out = trim_to_tokens(msgs, budget)
    h = head_length(msgs)
    assert out[:h] == msgs[:h] and is_subsequence(out, msgs) and fix_ok(out, msgs)
    if len(out) > h:
        assert mk.count_tokens(out) <= budget
        earlier = [c for c in valid_cuts(msgs) if h <= c < msgs.index(out[h])]
        if earlier:
            assert mk.count_tokens(fix_boundaries(msgs[:h] + msgs[earlier[-1]:])) > budget


@given(conversations(), st.integers(0, 40))
@settings(max_examples=300, deadline=None)
def test_fix_boundaries_after_an_arbitrary_cut(msgs, cut):
    h = head_length(msgs)
    out = fix_boundaries(msgs[:h] + msgs[max(h, cut):])
    assert is_subsequence(out, msgs) and fix_ok(out, msgs[:h] + msgs[max(h, cut):])


def test_trim_examples():
    msgs = tool_thread()
    assert [m.content for m in trim_last(msgs, 2)] == ["sys", "q3", "a3"]
    assert [m.content for m in trim_last(msgs, 4)] == ["sys", "q3", "a3"]
    assert [m.content for m in trim_last(msgs, 7)][:2] == ["sys", "rate?"]
    assert trim_last(msgs, 0) == msgs[:1]
    assert trim_to_tokens(msgs, 10_000) == msgs
    assert [m.content for m in trim_to_tokens(msgs, 25)] == ["sys", "q3", "a3"]
    with pytest.raises(mk.ValidationError):
        trim_last(msgs, -1)
    with pytest.raises(mk.ValidationError):
        trim_to_tokens(msgs, 0)
