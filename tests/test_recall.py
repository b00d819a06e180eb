"""MessageIndex: what gets indexed, recall scoped to one user, merge strategies, list/vector consistency."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import memorykit as mk
from memorykit.memory.index import forget_user
from memorykit.course.recall import merge_recalled, recall_block
from memorykit.memory.recall import RecalledMessage

DATA = Path(__file__).resolve().parent.parent / "data" / "working"
DAY = 86400.0
NOW = 1_717_200_000.0  # fixed "now" so created_at values are reproducible


@pytest.fixture
def idx(r, emb, ns):
    return mk.MessageIndex(r, emb, ns)


def history(r, ns, idx, user, thread):
    h = idx.history(user, thread)
    assert isinstance(h, mk.ChatHistory) and h.index is idx and h.ttl is None
    return h


def seed_threads(r, ns, idx):
    """The course's recall data set: one user's older threads plus another user's thread."""
    for line in (DATA / "threads.jsonl").read_text().splitlines():
        t = json.loads(line)
        start = NOW - t["days_ago"] * DAY
        msgs = [mk.Message(role=role, content=text, created_at=start + i * 60)
                for i, (role, text) in enumerate(t["messages"])]
        history(r, ns, idx, t["user_id"], t["thread_id"]).append(msgs)


def msg(role, content, t):
    return mk.Message(role=role, content=content, created_at=t)


# ------------------------------------------------------------------ indexing
def test_only_user_and_assistant_text_is_indexed(r, ns, idx):
    h = history(r, ns, idx, "u1", "t1")
    h.append([mk.Message(role="system", content="You are helpful."),
              mk.Message(role="user", content="What's the weather in Oslo?"),
              mk.Message(role="assistant", content="", tool_calls=[{"id": "c1", "type": "function",
                         "function": {"name": "weather", "arguments": "{}"}}]),
              mk.Message(role="tool", content='{"temp": 3}', tool_call_id="c1"),
              mk.Message(role="assistant", content="It is 3 degrees in Oslo.")])
    assert idx.count("u1") == 2
    assert {m.message.role for m in idx.search("weather", user_id="u1", k=10)} == {"user", "assistant"}
    key = idx.key("u1", "t1", h.messages()[1].id)
    assert r.type(key) == "hash" and r.hstrlen(key, "embedding") == 4 * idx.embedder.dims  # float32 bytes
    assert r.hmget(key, "user_id", "thread_id", "text") == ["u1", "t1", "What's the weather in Oslo?"]


def test_search_finds_by_meaning_across_threads(r, ns, idx):
    seed_threads(r, ns, idx)
    h = history(r, ns, idx, "ana", "today")
    hits = h.search_messages("what did I say about pricing?", k=3)
    assert hits[0].thread_id == "pricing-review"
    assert "9 dollars" in " ".join(x.message.content for x in hits)
    in_thread = idx.search("pricing", user_id="ana", thread_id="weekend-trip", k=5)
    assert {x.thread_id for x in in_thread} == {"weekend-trip"}
    last_week = idx.search("pricing", user_id="ana", k=10, since=NOW - 14 * DAY, until=NOW - 7 * DAY)
    assert last_week and {x.thread_id for x in last_week} == {"pricing-review"}


def test_recall_never_crosses_users(r, ns, idx):
    seed_threads(r, ns, idx)
    hits = idx.search("pricing idea 500 dollars", user_id="ana", k=20)
    assert hits and all("500" not in x.message.content for x in hits)
    assert all(x.message.content != "" for x in hits)
    assert {x.thread_id for x in idx.search("pricing", user_id="mallory", k=20)} == {"brainstorm"}
    # tag look-alikes: case variants, separators and query syntax stay separate users
    for user in ("Ana", "ANA", "ana,mallory", "ana mallory", "*", "ana|mallory"):
        assert idx.search("pricing", user_id=user, k=20) == [], user


def test_distance_threshold_and_exclude(r, ns, idx):
    seed_threads(r, ns, idx)
    far = idx.search("quantum chromodynamics lecture notes", user_id="ana", k=5, distance_threshold=0.3)
    assert far == []
    near = idx.search("starter plan price", user_id="ana", k=2)
    rest = idx.search("starter plan price", user_id="ana", k=2, exclude_ids=[near[0].message.id])
    assert near[0].message.id not in {x.message.id for x in rest} and rest[0].message.id == near[1].message.id


# ------------------------------------------------------------------ merging
def window():
    return [msg("system", "prompt", 0), msg("user", "a", 100), msg("assistant", "b", 110), msg("user", "c", 120)]


def test_merge_strategies_order_and_no_repeats():
    w = window()
    old1, old2 = msg("user", "old one", 10), msg("assistant", "old two", 20)
    late = msg("user", "late", 115)
    recalled = [RecalledMessage(old2, "t0", 0.2), RecalledMessage(w[1], "t1", 0.1), old1,
                msg("user", "  A ", 50), late]
    pre = merge_recalled(w, recalled, "prepend")
    assert [m.content for m in pre] == ["prompt", "old one", "old two", "late", "a", "b", "c"]
    app = merge_recalled(w, recalled, "append")
    assert [m.content for m in app] == ["prompt", "a", "b", "c", "old one", "old two", "late"]
    inter = merge_recalled(w, recalled, "interleave")
    assert [m.content for m in inter] == ["prompt", "old one", "old two", "a", "b", "late", "c"]
    with pytest.raises(mk.ValidationError):
        merge_recalled(w, recalled, "shuffle")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=8), st.lists(st.integers(0, 30), max_size=8),
       st.sampled_from(["prepend", "append", "interleave"]))
def test_merge_property(window_times, recalled_times, strategy):
    pool = {t: msg("user", f"m{t}", float(t)) for t in set(window_times) | set(recalled_times)}
    w = sorted({pool[t].id: pool[t] for t in window_times}.values(), key=lambda m: m.created_at)
    rec = [pool[t] for t in recalled_times]
    out = merge_recalled(w, rec, strategy)
    ids = [m.id for m in out]
    assert len(ids) == len(set(ids))
    assert set(ids) == {m.id for m in w} | {m.id for m in rec}
    kept = [m.id for m in out if m.id in {x.id for x in w}]
    assert kept == [m.id for m in w]
    if strategy == "interleave":
        assert [m.created_at for m in out] == sorted(m.created_at for m in out)


def test_recall_block_lists_dated_lines():
    block = recall_block([msg("user", "Price the starter plan at 9 dollars", NOW - 8 * DAY)])
    assert block.role == "system" and "2024-05-24 user: Price the starter plan at 9 dollars" in block.content
    assert recall_block([]) is None


# ------------------------------------------------------------------ list and vectors stay consistent
def fill(h, n):
    for i in range(n):
        h.append([mk.Message(role="user", content=f"question {i} about topic {i}"),
                  mk.Message(role="assistant", content=f"answer {i}")])


def check(r, idx, user_id, thread_id):
    """List vs index: ``orphans`` (vectors whose message is gone), ``missing`` (messages not indexed)."""
    stored = mk.ChatHistory(r, user_id, thread_id, namespace=idx.namespace).messages()
    have = {k.rsplit(":", 1)[1] for k in r.scan_iter(match=idx.key(user_id, thread_id, "") + "*")}
    want = {m.id for m in stored if m.role in ("user", "assistant") and m.content.strip()}
    return {"orphans": have - {m.id for m in stored}, "missing": want - have}


def test_recall_vectors_outlive_their_thread_without_each_append_touching_them_all(r, ns, idx):
    """The thread slides to 100 s on every append; its vectors (and their set) share one expiry, never before the
    thread's and at most a quarter later, moved only when the thread's would pass it; a TTL of None keeps all."""
    h = idx.history("u1", "t1", ttl=100)

    def expiries():
        keys = sorted(r.smembers(h.vectors_key))
        return [r.pttl(k) for k in [h.vectors_key, *keys]], r.pttl(h.key)

    fill(h, 2)
    vectors, thread = expiries()
    assert len(vectors) == 5 and all(thread <= v <= 125_000 for v in vectors)
    for k in [h.vectors_key, *r.smembers(h.vectors_key)]:
        r.pexpire(k, 110_000)  # as a while later: still past the thread's next expiry
    fill(h, 1)
    vectors, thread = expiries()
    assert len(vectors) == 7 and all(thread <= v <= 110_000 for v in vectors)  # the old ones not touched
    for k in [h.vectors_key, *r.smembers(h.vectors_key)]:
        r.pexpire(k, 90_000)  # later still: the thread's next expiry passes them
    fill(h, 1)
    vectors, thread = expiries()
    assert len(vectors) == 9 and all(115_000 < v <= 125_000 for v in vectors)  # all moved together
    idx.history("u1", "t1", ttl=None).append(mk.Message(role="user", content="keep this thread"))
    vectors, thread = expiries()
    assert thread == -1 and vectors == [-1] * 10
    idx.history("u1", "t1", ttl=100).append(mk.Message(role="user", content="a TTL again"))
    vectors, thread = expiries()
    assert len(vectors) == 11 and all(thread <= v <= 125_000 for v in vectors)


def test_delete_first_removes_messages_and_vectors_together(r, ns, idx):
    h = history(r, ns, idx, "u1", "t1")
    fill(h, 6)
    deleted = h.delete_first(8)
    assert len(deleted) == 8 and len(h) == 4
    assert check(r, idx, "u1", "t1") == {"orphans": set(), "missing": set()}
    assert idx.count("u1", "t1") == 4
    found = idx.search("question", user_id="u1", thread_id="t1", k=10)
    assert {x.message.content for x in found} == {m.content for m in h.messages()}


def test_messages_indexed_after_they_left_the_thread_are_not_recalled(r, ns, idx):
    """Indexing runs later (another process, the agent's background): a message cleared or deleted meanwhile,
    even in a thread written again since, must not become recallable; one still there is indexed."""
    h = idx.history("a|b", "t1", index_appends=False)
    secret = h.append(mk.Message(role="user", content="my password hint is zebra"))
    h.clear()  # "Clear chat" before the first turn was indexed
    hello = h.append(mk.Message(role="user", content="hello again"))
    assert idx.add("a|b", "t1", secret) == 0 and idx.add("a|b", "t1", hello) == 1
    assert [x.message.content for x in h.search_messages("password hint zebra", k=5)] == ["hello again"]
    older = h.append([mk.Message(role="user", content=f"note {i} about my knee") for i in range(70)])
    h.delete_first(1)  # "hello again" is deleted; 70 later notes sit between it and the end
    assert idx.add("a|b", "t1", [*hello, *older[:1]]) == 1  # found 70 entries from the end, and the gone one not
    assert check(r, idx, "a|b", "t1")["orphans"] == set()
    assert "hello again" not in {x.message.content for x in h.search_messages("hello again", k=80)}


def test_deletes_and_summarization_keep_index_consistent(r, ns, idx, llm):
    h = history(r, ns, idx, "u1", "t1")
    fill(h, 6)
    h.delete_where(lambda m: m.content == "question 2 about topic 2")
    assert check(r, idx, "u1", "t1") == {"orphans": set(), "missing": set()}
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=2))
    assert check(r, idx, "u1", "t1") == {"orphans": set(), "missing": set()}
    assert idx.count("u1", "t1") == len([m for m in h.messages() if m.role != "system"]) == 11
    h.clear()
    assert idx.count("u1", "t1") == 0


def test_recall_finds_what_a_summary_folded_in(r, ns, idx, llm):
    h = history(r, ns, idx, "u1", "t1")
    h.append([mk.Message(role="user", content="The wifi password at the cabin is bluefinch42."),
              mk.Message(role="assistant", content="Saved.")])
    fill(h, 6)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=2))
    assert "bluefinch42" not in " ".join(m.content for m in h.view().recent)
    hits = h.search_messages("what is the cabin wifi password?", k=1)
    assert hits and "bluefinch42" in hits[0].message.content


def test_search_takes_a_vector_to_embed_once(r, emb, ns, idx):
    seed_threads(r, ns, idx)
    vector = emb.embed("what did I say about pricing?")

    class NoEmbed:
        dims = emb.dims

        def embed(self, text):
            raise AssertionError("embedded again")

    idx.embedder = NoEmbed()
    hits = idx.search("what did I say about pricing?", user_id="ana", k=3, vector=vector)
    assert hits[0].thread_id == "pricing-review"


def test_forget_user_removes_message_vectors(r, emb, ns, idx):
    seed_threads(r, ns, idx)
    assert idx.count("ana") > 0
    assert list(r.scan_iter(match=f"{ns}:msgvec:{{ana}}:*")) and list(r.scan_iter(match=f"{ns}:thread:{{ana}}:*"))
    h = idx.history("ana", "pricing-review")  # a message stored by an older layout: a JSON document no index finds
    old = idx.key("ana", "pricing-review", "01OLDLAYOUT")
    r.json().set(old, "$", {"text": "my card ends in 4417", "user_tag": "ana"})
    r.sadd(h.vectors_key, old)
    forget_user(r, ns, "ana", emb)
    assert idx.count("ana") == 0 and list(r.scan_iter(match=f"{ns}:msgvec:{{ana}}:*")) == []
    assert list(r.scan_iter(match=f"{ns}:*{{ana}}*")) == []
    assert idx.count("mallory") == 2


def test_lookalike_user_and_thread_ids_never_share_messages(r, emb, ns):
    """Redis trims and case-folds raw tags; ids are indexed encoded so look-alikes stay apart."""
    index = mk.MessageIndex(r, emb, namespace=ns)
    ids = ["bob", "Bob", "bob ", " bob", "bob,eve", "eve"]
    for u in ids:
        index.history(u, "t1").append(mk.Message(role="user", content=f"my locker code is {ids.index(u)}"))
        index.history(u, "t1 ").append(mk.Message(role="user", content=f"spare locker code {ids.index(u)}"))
    for u in ids:
        hits = index.search("locker code", user_id=u, k=20)
        assert {h.message.content[-1] for h in hits} == {str(ids.index(u))}
        assert {h.thread_id for h in index.search("locker", user_id=u, thread_id="t1 ", k=20)} == {"t1 "}


def test_expired_threads_leave_the_thread_list_and_the_key_registry_when_listed(r, ns, idx):
    from memorykit.keys import registry_key
    threads = [idx.history("u1", f"session {i}", ttl=100) for i in range(5)]
    for h in threads:
        h.append(mk.Message(role="user", content=f"hello from {h.thread_id}"))
    other = idx.history("u2", "session 0", ttl=100)
    other.append(mk.Message(role="user", content="another user's thread of the same name"))
    registry = registry_key(ns, "u1")
    assert r.smembers(registry) == {h.vectors_key for h in threads}
    for h in threads[:4]:  # as if expired: the thread, then its recall vectors
        r.delete(h.key, *r.smembers(h.vectors_key), h.vectors_key)
    assert [t for t, _ in threads[0].list_threads()] == ["session 4"]
    assert r.smembers(registry) == {threads[4].vectors_key} and r.zcard(threads[0].threads_key) == 1
    r.delete(threads[4].key)  # expired, while its vectors still outlive it: they stay registered and listed
    assert threads[0].list_threads() == [] and r.smembers(registry) == {threads[4].vectors_key}
    assert r.zcard(threads[0].threads_key) == 1
    r.delete(*r.smembers(threads[4].vectors_key), threads[4].vectors_key)
    assert threads[0].list_threads() == [] and not r.exists(registry, threads[0].threads_key)
    assert [t for t, _ in other.list_threads()] == ["session 0"]
    assert r.smembers(registry_key(ns, "u2")) == {other.vectors_key}
    assert idx.search("hello", user_id="u2", k=5)
