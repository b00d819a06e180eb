"""Many users on one store: who reads, changes and deletes what, and the derived data that must follow.

Property tests draw pairs of users from adversarial ids (``system``, tag and glob syntax, look-alikes that
differ by case, space, percent-encoding or a suffix, ids at the length limit, the shared owner's own tag)
and check that one never reaches the other's memories, while shared knowledge is read by all and changed
only through ``shared=True``. Integrity tests follow the exact-match ledger through every write path.
"""
from __future__ import annotations

import json
import threading
import uuid
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import memorykit as mk
from memorykit.errors import ValidationError
from memorykit.keys import MAX_ID_LENGTH, SHARED_OWNER, index_names
from memorykit.memory import dedup, forgetting as fg
from memorykit.memory.index import content_hash, forget_mark_key
from memorykit.memory.long_term import MAX_MEMORY_CHARS
from scripted import ScriptedModel

from conftest import drop_namespace

BASE = ["system", "a|b", "*", "{x}", " spaced ", "ユーザー", "é", "e\u0301", "Bob", "user:1", "a,b", "%2A",
        SHARED_OWNER, "%25shared", "{" + SHARED_OWNER + "}", "@user_id:{y}", "u" * MAX_ID_LENGTH]
LOOK_ALIKES = [str.upper, str.lower, str.swapcase, lambda s: s + " ", lambda s: " " + s, lambda s: s + "x",
               lambda s: quote(s, safe=""), lambda s: s.replace(" ", "%20"), lambda s: s[:-1] or "_"]
_chars = st.characters(blacklist_categories=("Cc", "Cs"))
IDS = st.one_of(st.sampled_from(BASE), st.text(_chars, min_size=1, max_size=12).filter(str.strip))


@st.composite
def pairs(draw) -> tuple[str, str]:
    """Two distinct valid user ids, often one a look-alike of the other (cut to the length limit)."""
    a = draw(IDS)
    b = draw(st.one_of(IDS, st.sampled_from(LOOK_ALIKES).map(lambda f: f(a))))[:MAX_ID_LENGTH]
    assume(a != b and b.strip())
    return a, b


CONTENTS = st.one_of(st.text(_chars, max_size=40), st.sampled_from(["", "   ", "\n\t"]),
                     st.integers(MAX_MEMORY_CHARS - 2, MAX_MEMORY_CHARS + 2).map(lambda n: "z" * n))
SLOW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def shared_store(r, emb):
    namespace = "tten" + uuid.uuid4().hex[:8]
    yield mk.MemoryStore(r, emb, namespace=namespace)
    drop_namespace(r, namespace)


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ValidationError) as err:
        fn(*args, **kwargs)
    return str(err.value)


@SLOW
@given(pair=pairs(), text=CONTENTS)
def test_one_user_never_reads_changes_or_deletes_anothers(shared_store, pair, text):
    store, (a, b), mark = shared_store, pair, uuid.uuid4().hex[:8]
    if not text.strip() or len(text.strip()) > MAX_MEMORY_CHARS:  # bad content: a clear error, nothing written
        before = store.count(a)
        _error(store.add, text, user_id=a)
        _error(store.remember, text, user_id=a)
        assert store.count(a) == before
        text = "User keeps a diary"
    text = text[:MAX_MEMORY_CHARS - 40]  # room for the example's mark
    mine = store.add(f"{text} {mark}", user_id=a)
    theirs = store.add(f"{text} {mark}", user_id=b)
    shared = store.add(f"Shared fact {mark}: {text}", shared=True)
    missing = mine.id[:-4] + "ZZZZ"
    # reads: get / get_many / search / list / history
    assert store.get(mine.id, b) is None and [m and m.id for m in store.get_many([mine.id, theirs.id], b)] == [None, theirs.id]
    assert mine.id not in {h.memory.id for h in store.search(f"{text} {mark}", user_id=b, k=50)}
    assert mine.id not in {m.id for m in store.list(b)}
    assert _error(store.history, mine.id, user_id=b) == _error(store.history, missing, user_id=b).replace(
        missing, mine.id)
    # changes: update / pin / remember
    assert _error(store.update, mine.id, "hijacked", user_id=b) == \
        _error(store.update, missing, "hijacked", user_id=b).replace(missing, mine.id)
    assert fg.pin(store, mine.id, user_id=b) is False
    d = store.remember(f"{text} {mark}", user_id=b)
    assert d.memory.user_id == b and (d.target is None or d.target.user_id == b)
    # deletes: delete / forget_user
    assert store.delete(mine.id, user_id=b) is False
    store.forget_user(b)
    after = store.get(mine.id, a)
    assert after is not None and after.content == mine.content and "pinned" not in after.metadata
    assert store.get(theirs.id, b) is None and store.get(theirs.id, a) is None
    # shared knowledge: read by all, changed only with shared=True
    for user in (a, b):
        assert store.get(shared.id, user) == store.get(shared.id, shared=True)
        assert "shared knowledge" in _error(store.update, shared.id, "hijacked", user_id=user)
        assert "shared knowledge" in _error(store.delete, shared.id, user_id=user)
        assert fg.pin(store, shared.id, user_id=user) is False
    assert shared.id in {h.memory.id for h in store.search(f"Shared fact {mark}", user_id=b, k=50)}
    assert store.get(mine.id, shared=True) is None and store.delete(mine.id, shared=True) is False
    assert store.update(shared.id, f"Shared fact {mark}, reworded", shared=True).content.endswith("reworded")
    assert store.delete(shared.id, shared=True) and store.get(shared.id, a) is None


@SLOW
@given(pair=pairs())
def test_dedup_decides_within_one_owner(shared_store, pair):
    store, (a, b), mark = shared_store, pair, uuid.uuid4().hex[:8]
    for user in (a, b):  # a clean slate: earlier examples may have used these ids
        store.forget_user(user)
    for old in store.list(None):
        store.delete(old.id, shared=True)
    fact = f"User collects stamps from {mark}."
    first = store.remember(fact, user_id=a)
    assert first.action == "ADD"
    other = store.remember(fact, user_id=b)  # the same text for another user is news to them
    assert other.action == "ADD" and other.memory.user_id == b
    assert dedup.find_exact(store, fact, a).id == first.memory.id
    assert dedup.find_exact(store, fact, shared=True) is None
    assert store.remember(fact.upper(), user_id=b).memory.id == other.memory.id  # NOOP on b's own
    shared = store.remember(fact, shared=True)
    assert shared.action == "ADD" and shared.memory.shared
    assert store.remember(fact, user_id=a).memory.id == first.memory.id  # a's own, not the shared one


# ------------------------------------------------------------------ the exact-match ledger
@pytest.fixture
def store(r, emb, ns):
    return mk.MemoryStore(r, emb, namespace=ns)


def ledger(store, owner, mtype="episodic", shared=False):
    return store.redis.hgetall(dedup.ledger_key(store, None if shared else owner, mtype))


def decide(action: str, target: int | None = 0) -> str:
    return json.dumps({"action": action, "target": target, "reason": "scripted", "content": None})


def test_update_moves_the_ledger_and_remember_decides_on_what_is_stored_now(store):
    tea, coffee = "User drinks tea every morning.", "User drinks coffee every morning."
    m = store.remember(tea, user_id="u").memory
    twin = store.remember(tea, user_id="system").memory  # an ordinary user with the same fact
    assert ledger(store, "u") == {content_hash(tea): m.id}
    store.update(m.id, coffee, user_id="u")
    assert ledger(store, "u") == {content_hash(coffee): m.id}
    assert ledger(store, "system") == {content_hash(tea): twin.id}
    assert dedup.find_exact(store, tea, "u") is None
    model = ScriptedModel(decide("ADD", None))
    d = store.remember(tea, user_id="u", llm=model)
    assert d.tier != "exact" and model.calls == 1  # decided against the coffee memory, not by the old hash
    assert d.action == "ADD" and sorted(x.content for x in store.list("u")) == [coffee, tea]


def test_delete_invalidate_and_forget_take_their_ledger_entry_along(store):
    model = ScriptedModel(decide("INVALIDATE"))
    dog = store.remember("User has a dog named Max.", user_id="u").memory
    store.remember("User has a dog named Max.", user_id="u x")
    gone = store.remember("User's dog Max passed away.", user_id="u", llm=model)
    assert gone.action == "INVALIDATE" and gone.target.id == dog.id
    assert ledger(store, "u") == {content_hash("User's dog Max passed away."): gone.memory.id}
    assert store.delete(gone.memory.id, user_id="u") and ledger(store, "u") == {}
    assert len(ledger(store, "u x")) == 1
    cat = store.remember("User has a cat.", user_id="u").memory
    assert [f.id for f in fg.forget(store, fg.ForgettingPolicy(budget=0), user_id="u")] == [cat.id]
    assert ledger(store, "u") == {} and len(ledger(store, "u x")) == 1
    store.forget_user("u x")
    assert not store.redis.exists(dedup.ledger_key(store, "u x", "episodic"))


def test_a_stale_or_foreign_ledger_entry_is_a_miss_and_repaired(store):
    mine = store.add("User likes jazz.", user_id="a")
    foreign = store.add("User likes opera.", user_id="a|b")
    key = dedup.ledger_key(store, "a", "episodic")
    store.redis.hset(key, mapping={content_hash("User likes opera."): foreign.id,  # another user's memory
                                   content_hash("User likes blues."): mine.id})     # a hash it no longer has
    assert dedup.find_exact(store, "User likes opera.", "a") is None
    assert dedup.find_exact(store, "User likes blues.", "a") is None
    assert store.redis.hgetall(key) == {}  # both repaired
    assert dedup.find_exact(store, "user likes JAZZ", "a").id == mine.id  # found by the index, then recorded
    assert store.redis.hgetall(key) == {content_hash("User likes jazz."): mine.id}


# ------------------------------------------------------------------ atomic in-place updates
def test_an_invalidation_between_updates_read_and_write_survives(store):
    m = store.add("User lives in Lisbon.", user_id="u")
    store.add("User lives in Lisbon.", user_id="U")
    parse, calls = store._parse, []

    def parse_then_close(raw):  # the first read of update(): another writer closes the memory right after
        calls.append(1)
        if len(calls) == 1:
            store.redis.json().merge(store.key(m.id, "u"), "$", {"invalid_at": 123.0, "superseded_by": "other"})
        return parse(raw)

    store._parse = parse_then_close
    store.update(m.id, "User lives in Porto.", user_id="u", metadata={"checked": True})
    store._parse = parse
    got = store.get(m.id, "u")
    assert len(calls) == 2  # WATCH saw the write and the update ran again on the new state
    assert (got.content, got.invalid_at, got.superseded_by, got.metadata) == \
        ("User lives in Porto.", 123.0, "other", {"checked": True})
    assert ledger(store, "u") == {}  # a closed memory claims no ledger entry


def test_concurrent_updates_and_invalidation_keep_every_write(store):
    m = store.add("User counts to zero.", user_id="u")
    other = store.add("User counts to zero.", user_id="u*")

    def updates():
        for i in range(1, 16):
            store.update(m.id, f"User counts to {i}.", user_id="u", metadata={f"k{i}": i})

    def close():
        pipe = store.redis.pipeline(transaction=True)
        dedup._close(store, pipe, store.get(m.id, "u"), 42.0, "next")
        pipe.execute()

    threads = [threading.Thread(target=updates), threading.Thread(target=close)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = store.get(m.id, "u")
    assert got.content == "User counts to 15." and got.invalid_at == 42.0 and got.superseded_by == "next"
    assert got.metadata == {f"k{i}": i for i in range(1, 16)}
    assert store.get(other.id, "u*").content == "User counts to zero."


# ------------------------------------------------------------------ forget_user
def _scans(r) -> int:
    return int(r.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def _owner(r, key: str) -> str | None:
    """Whose key this is: the hash tag in its name, else the owner tag in its JSON document."""
    if "{" in key:
        return key.split("{", 1)[1].split("}", 1)[0]
    return (r.json().get(key, "$.user_tag") or [None])[0] if r.type(key) == "ReJSON-RL" else None


def _fill(r, emb, namespace: str, users) -> None:
    store, recall = mk.MemoryStore(r, emb, namespace=namespace), mk.MessageIndex(r, emb, namespace=namespace)
    profile = mk.WorkingMemory(r, namespace=namespace, scope="user")
    notes = mk.WorkingMemory(r, namespace=namespace, scope="conversation")
    feedback, procs = mk.FeedbackStore(r, emb, namespace=namespace), mk.ProcedureStore(r, emb, namespace=namespace)
    for u in users:
        store.remember(f"User {u} likes tea.", user_id=u)
        store.add(f"User {u} knows Lisbon has trams.", user_id=u, memory_type="semantic")
        recall.history(u, "t1").append(mk.Message(role="user", content=f"hello from {u}"))
        profile.update(f"- name: {u}", user_id=u)
        notes.update(f"- notes of {u}", user_id=u, thread_id="side")
        notes.update(f"- more notes of {u}", user_id=u, thread_id="side")  # a history entry too
        feedback.mark(u, "how are you?", "fine", "positive")
        procs.store("compare my workouts", ["get_workout_data"], 0.9, 12.0, user_id=u)
    store.add("Lisbon is the capital of Portugal.", shared=True)


def test_forget_user_is_exact_per_namespace_and_scans_nothing(r, emb, ns):
    v2, users = ns + "_v2", ["u", "u*", "U", "system"]
    try:
        _fill(r, emb, ns, users)
        _fill(r, emb, v2, users)
        keys_v2 = sorted(r.scan_iter(match=f"{v2}:*", count=1000))
        others = sorted(k for k in r.scan_iter(match=f"{ns}:*", count=1000) if _owner(r, k) != "u")
        made = {n for n in r.execute_command("FT._LIST") if n.startswith(ns + "_") and not n.startswith(v2)}
        assert made == set(index_names(ns))  # a store with a new index must add it to keys.NAMESPACE_INDEXES
        before = _scans(r)
        deleted = mk.MemoryStore(r, emb, namespace=ns).forget_user("u")
        assert _scans(r) == before  # no SCAN: fixed names, indexes, the thread list and the key registry
        left = sorted(k for k in r.scan_iter(match=f"{ns}:*", count=1000) if k != forget_mark_key(ns, "u"))
        assert left == others, set(left) ^ set(others)  # and the forget mark, which holds no id
        assert deleted >= 12 and sorted(r.scan_iter(match=f"{v2}:*", count=1000)) == keys_v2  # app_v2 intact
        store = mk.MemoryStore(r, emb, namespace=ns)
        assert [m.content for m in store.list("u")] == ["Lisbon is the capital of Portugal."]  # shared stays
        assert {m.user_id for m in store.list("u*")} == {"u*", None}
    finally:
        drop_namespace(r, v2)
