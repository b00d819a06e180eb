"""MemoryStore against the real Redis and the real model: scoping, thresholds, updates, forgetting."""
import time
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redisvl.query import FilterQuery
from redisvl.query.filter import Num, Tag

import memorykit as mk
from memorykit.errors import SchemaMismatchError, ValidationError
from memorykit.config import settings as mk_settings
from memorykit.keys import encode, user_key
from memorykit.memory import vectors
from memorykit.memory.index import content_hash, ensure_index, owner_filter, vector_field
from memorykit.memory.long_term import format_memories, memory_schema

from conftest import drop_namespace


@pytest.fixture
def store(r, emb, ns):
    return mk.MemoryStore(r, emb, namespace=ns)


def test_add_get_search_with_distances(store):
    m = store.add("User went to Paris in 2009 for their honeymoon", user_id="raphael")
    store.add("User prefers window seats", user_id="raphael")
    other = store.add("User went to Paris in 2009 for their honeymoon", user_id="raphael ")  # a look-alike
    assert store.get(m.id, "raphael").content == m.content
    assert store.get(m.id, "raphael ") is None and store.get(other.id, "raphael") is None
    with pytest.raises(ValidationError, match="shared=True"):
        store.get(m.id)  # a by-id read names its owner
    hits = store.search("Where did I travel in 2009?", user_id="raphael", k=2)
    assert [h.memory.id for h in hits][0] == m.id
    assert hits[0].distance <= hits[1].distance
    assert all(0 <= h.distance <= 2 for h in hits)
    assert [store.search("Paris", user_id="raphael", k=k, mode=mode) for k in (0, -1) for mode in ("vector", "hybrid")] \
        == [[]] * 4  # as every store answers: nothing asked, nothing found


def test_semantic_shared_episodic_private(store):
    store.add("Singapore requires a passport for entry", shared=True)
    store.add("User went to Singapore last spring", user_id="alice")
    store.add("Alice's private fact: Singapore trip notes", user_id="alice", memory_type="semantic")
    store.add("Singapore has no passport rules at all", user_id="system", memory_type="semantic")  # just a user
    bob = store.search("Singapore passport", user_id="bob", k=10)
    assert [h.memory.content for h in bob] == ["Singapore requires a passport for entry"]
    assert bob[0].memory.user_id is None and bob[0].memory.shared
    alice = {h.memory.content for h in store.search("Singapore", user_id="alice", k=10)}
    assert len(alice) == 3
    assert len(store.search("Singapore", user_id=None, memory_types=["semantic"], k=10)) == 1
    with pytest.raises(ValidationError):
        store.search("Singapore", user_id=None, memory_types=["episodic"])


def test_distance_threshold_turns_knn_into_range(store):
    store.add_many([{"content": t, "user_id": "u"} for t in
                    ("User loves sushi", "User is allergic to peanuts", "User plays the cello")])
    knn = store.search("What food do I like?", user_id="u", k=3)
    assert len(knn) == 3
    cut = (knn[0].distance + knn[-1].distance) / 2
    ranged = store.search("What food do I like?", user_id="u", k=3, distance_threshold=cut)
    assert 1 <= len(ranged) < 3
    assert all(h.distance <= cut for h in ranged)
    assert store.search("What food do I like?", user_id="u", distance_threshold=0.01) == []


@pytest.mark.parametrize("how", [dict(mode="text"), dict(mode="hybrid"), dict(mode="vector", recency=True),
                                 dict(mode="hybrid", recency=True)])
def test_distance_threshold_holds_in_every_mode(store, how):
    store.add_many([{"content": t, "user_id": "u"} for t in
                    ("User went to Paris in 2009", "User's cat is named Tom", "User is allergic to peanuts",
                     "User works as a nurse in 2009")])
    question = "Where did I travel in 2009?"
    every = store.search(question, user_id="u", k=10, **how)
    assert max(h.distance for h in every) > 0.5  # without it, a far memory comes back
    near = store.search(question, user_id="u", k=10, distance_threshold=0.5, **how)
    assert near and all(h.distance <= 0.5 for h in near)
    assert [h.memory.id for h in near] == [h.memory.id for h in every if h.distance <= 0.5]
    assert len(store.search(question, user_id="u", k=1, distance_threshold=0.5, **how)) == 1


def test_calibrated_default_threshold_recalls_the_raphael_question(store):
    store.add("User went to Paris in 2009 for their honeymoon", user_id="raphael")
    hits = store.search("Where did I go back in 2009?", user_id="raphael",
                        distance_threshold=mk_settings().distance_threshold)
    assert [h.memory.content for h in hits] == ["User went to Paris in 2009 for their honeymoon"]


def test_filters_are_redisvl_objects(store):
    old = store.add("User learned to ski", user_id="u", topics=["Sport"])
    time.sleep(0.01)
    t = time.time()
    store.add("User learned to sail", user_id="u", topics=["sport", "sea"])
    recent = store.search("learned", user_id="u", filters=Num("created_at") > t)
    assert [h.memory.content for h in recent] == ["User learned to sail"]
    assert {h.memory.id for h in store.search("learned", user_id="u", topics=["SPORT"])} >= {old.id}
    assert [h.memory.content for h in store.search("learned", user_id="u", topics=["sea"])] == ["User learned to sail"]
    assert [h.memory.content for h in store.search("learned", user_id="u", filters=Tag("topics") == "sea")] == \
        ["User learned to sail"]
    for mode in ("vector", "text", "hybrid"):  # a topic is matched the same way by every kind of search
        assert [h.memory.content for h in store.search("learned", user_id="u", topics="sea", mode=mode)] == \
            ["User learned to sail"], mode
    with pytest.raises(mk.ValidationError, match="comma"):
        store.add("User learned to row", user_id="u", topics=["sport,sea"])
    with pytest.raises(mk.ValidationError, match="comma"):
        store.search("learned", user_id="u", topics=["sport,sea"], mode="text")
    assert store.count("u") == 2


def test_last_accessed_updated_on_retrieval_only(store):
    m = store.add("User drinks green tea", user_id="u")
    store.add("User drinks green tea", user_id="U")
    assert store.last_used(["u"], [m.id]) == {}
    store.search("tea", user_id="u", touch=False)
    assert store.last_used(["u"], [m.id]) == {}
    before = time.time()
    hits = store.search("tea", user_id="u")
    assert hits[0].memory.last_accessed >= before
    first = store.last_used(["u"], [m.id])[m.id]
    assert first >= before
    time.sleep(0.01)
    store.search("tea", user_id="u")  # a write to the access set, not to the document (no re-indexing)
    assert store.last_used(["u"], [m.id])[m.id] > first
    assert store.get(m.id, "u").last_accessed is None


def test_update_re_embeds(store, r, emb):
    m = store.add("User lives in Lisbon", user_id="u")
    store.add("User lives in Lisbon", user_id="u|x")
    def stored():  # the vector in u's Vector Set (8-bit quantized), as a unit vector
        return vectors.embeddings(r, [(store.vectors_key("u"), m.id)])[0]

    v_old = stored()
    store.update(m.id, "User plays the violin in an orchestra", user_id="u")
    v_new = stored()
    assert float(v_new @ v_old) < 0.9
    assert float(v_new @ np.asarray(emb.embed("User plays the violin in an orchestra"))) > 0.999
    hit = store.search("User plays the violin in an orchestra", user_id="u", k=1)[0]
    assert hit.memory.id == m.id and hit.distance < 0.01
    assert store.get(m.id, "u").content_hash == content_hash("user plays the violin in an orchestra!")
    store.update(m.id, topics=["music"], user_id="u")  # no content change: the vector stays
    assert stored() == pytest.approx(v_new, rel=1e-6, abs=1e-12)
    assert [h.memory.id for h in store.search("violin", user_id="u", topics=["music"])] == [m.id]
    assert [h.memory.content for h in store.search("Lisbon", user_id="u|x")] == ["User lives in Lisbon"]
    with pytest.raises(ValidationError):
        store.update("no-such-id", "x", user_id="u")


class CountingEmbedder:
    def __init__(self, emb):
        self.emb, self.dims, self.calls = emb, emb.dims, 0

    def embed(self, text):
        self.calls += 1
        return self.emb.embed(text)

    def embed_many(self, texts, **kw):
        self.calls += 1
        return self.emb.embed_many(texts, **kw)


def test_search_with_the_turns_vector_embeds_nothing(r, emb, ns):
    counting = CountingEmbedder(emb)
    store = mk.MemoryStore(r, counting, namespace=ns)
    paris = store.add("User went to Paris in 2009 for their honeymoon", user_id="u")
    store.add("User prefers window seats", user_id="u")
    before = counting.calls
    vector = emb.embed("Where did I travel in 2009?")
    hits = store.search("Where did I travel in 2009?", user_id="u", k=2, vector=vector)
    assert counting.calls == before and hits[0].memory.id == paris.id
    assert [h.distance for h in hits] == [h.distance for h in store.search("Where did I travel in 2009?",
                                                                           user_id="u", k=2)]
    assert counting.calls == before + 1
    assert (hits[0].text_score, hits[0].recency, hits[0].score, hits[0].rank) == (None, None, None, None)


def test_history_is_the_supersession_chain_oldest_first(store):
    a, b, c = store.add_many([{"content": f"User lives in {city}", "user_id": "u"}
                              for city in ("Lisbon", "Berlin", "Oslo")])
    a.superseded_by, a.invalid_at = b.id, time.time()
    b.supersedes, b.superseded_by, b.invalid_at = a.id, c.id, time.time()
    c.supersedes = b.id
    for m in (a, b, c):
        store._write(m)
    assert [m.id for m in store.history(b.id, user_id="u")] == [a.id, b.id, c.id]
    assert [m.id for m in store.history(c.id, user_id="u")] == [a.id, b.id, c.id]
    assert [h.memory.id for h in store.search("Where does the user live?", user_id="u", k=3)] == [c.id]
    store.delete(a.id, user_id="u")
    assert [m.id for m in store.history(c.id, user_id="u")] == [b.id, c.id]  # a missing link ends the chain
    with pytest.raises(ValidationError):
        store.history("no-such-id", user_id="u")


def test_owner_filter_matches_one_owner_exactly(store):
    for u in ("bob", "Bob", "bob ", "bob,alice", "alice"):
        store.add(f"User {u!r} keeps a diary", user_id=u)
    for u in ("bob", "Bob", "bob ", "bob,alice"):
        q = FilterQuery(filter_expression=owner_filter(u), return_fields=["id"], num_results=10)
        owners = {m.user_id for m, _ in store._load([row["id"] for row in store.index.query(q)])}
        assert owners == {u}
    both = FilterQuery(filter_expression=owner_filter(["bob", "alice"]), return_fields=["id"], num_results=10)
    assert {m.user_id for m, _ in store._load([row["id"] for row in store.index.query(both)])} == {"bob", "alice"}
    with pytest.raises(ValidationError):
        owner_filter([])


def test_list_count_delete(store):
    ids = [m.id for m in store.add_many([{"content": f"User fact number {i}", "user_id": "u"} for i in range(5)])]
    store.add("General fact about Lisbon trams", shared=True)
    store.add("User fact number 0", user_id="U")
    assert store.count("u", ["episodic"]) == 5
    assert store.count("u") == 6
    listed = store.list("u", ["episodic"])
    assert [m.id for m in listed] == sorted(ids, reverse=True)  # newest first (ULIDs sort by time)
    assert store.delete(ids[0], user_id="U") is False  # another user's id: the answer for a missing one
    assert store.delete(ids[0], user_id="u") is True and store.delete(ids[0], user_id="u") is False
    assert store.get(ids[0], "u") is None and store.count("u", ["episodic"]) == 4
    assert store.get_many([ids[1], "missing"], "u")[1] is None and store.get_many([ids[1]], "U") == [None]


@pytest.mark.parametrize("bad", [dict(content="  "), dict(content="x", memory_type="EPISODIC!"),
                                 dict(content="x", user_id=None), dict(content="x" * 20_001),
                                 dict(content="x", shared=True), dict(content="x", user_id=None, shared=True),
                                 dict(content="x", user_id="   "), dict(content="x", user_id="a\nb"),
                                 dict(content="x", user_id="u" * 300), dict(content="x", user_id="")])
def test_bad_input_rejected_and_nothing_written(store, r, bad):
    args = {"user_id": "u", "memory_type": "episodic", **bad}
    with pytest.raises(ValidationError):
        store.add(**args)
    with pytest.raises(ValidationError):
        store.add_many([{"content": "a valid one", "user_id": "u"}, args])
    assert list(r.scan_iter(match=f"{store.namespace}:memory:*")) == []


@pytest.mark.parametrize("empty_looking", ["", " ", "\t", "\n", "\u3000", "\u00a0 ", "a\x00b"])
def test_empty_looking_ids_are_rejected_clearly(store, empty_looking):
    with pytest.raises(ValidationError, match="user_id"):
        store.search("anything", user_id=empty_looking)


def test_index_creation_is_idempotent_and_detects_schema_changes(r, emb, ns):
    a = mk.MemoryStore(r, emb, namespace=ns)
    m = a.add("User likes tea", user_id="u")
    b = mk.MemoryStore(r, emb, namespace=ns)  # same schema: reuse, data kept
    assert b.get(m.id, "u").content == "User likes tea"
    old_layout = memory_schema(ns)  # the index before vectors moved to Vector Sets
    old_layout["fields"].append(vector_field(emb.dims))
    with pytest.raises(SchemaMismatchError, match="embedding") as err:
        ensure_index(r, old_layout)
    assert "FT.DROPINDEX" in str(err.value) and "not migrated" in str(err.value).lower()
    case_blind = memory_schema(ns)
    case_blind["fields"][1]["attrs"]["case_sensitive"] = False
    with pytest.raises(SchemaMismatchError, match="case_sensitive"):
        ensure_index(r, case_blind)
    assert b.get(m.id, "u") is not None  # detection never drops anything


def test_forget_user_leaves_no_key_behind(r, emb, ns):
    store = mk.MemoryStore(r, emb, namespace=ns)
    notes = mk.WorkingMemory(r, namespace=ns, scope="conversation")
    victims, others = ["bob", "a|b*{x}", "system"], ["Bob", "bob ", "bob:2", "a", "alice", "{bob}"]
    for u in victims + others:
        store.add_many([{"content": f"User {u!r} secret {i}", "user_id": u} for i in range(3)])
        store.remember(f"User {u!r} own fact", user_id=u, memory_type="semantic")  # writes a ledger
        mk.ChatHistory(r, user_id=u, thread_id="t1", namespace=ns).append(mk.Message(role="user", content="hi"))
        notes.update(f"notes of {u}", user_id=u, thread_id="no-chat")  # a thread with no chat history
    store.add("Shared fact", shared=True)
    before = sum(1 for _ in r.scan_iter(match=f"{ns}:*"))
    per_user = 4 + 1 + 1 + 3 + 2  # memories, ledger, thread list + user's thread set, notes + registry, vectors + ids
    deleted = sum(store.forget_user(u) for u in victims)
    assert deleted == len(victims) * per_user
    marks = [k for k in r.scan_iter(match=f"{ns}:forgotten:*")]  # one per user, for writers in other processes
    left = [k for k in r.scan_iter(match=f"{ns}:*") if k not in marks]
    assert len(left) == before - deleted and len(marks) == len(victims)
    assert not any(u in k or encode(u) in k for k in marks for u in victims)  # a digest, not the id
    owners = {m.user_id for m, _ in store._load([k for k in left if k.startswith(f"{ns}:memory:")])}
    assert owners == set(others) | {None}
    for u in victims:
        assert store.count(u, ["episodic"]) == 0 and notes.get(u, "no-chat") is None
        assert not [k for k in left if user_key(ns, "x", u).split(":", 2)[2] in k]
    assert store.forget_user("bob") == 0


def test_format_memories_context_block(store):
    store.add("User went to Paris in 2009", user_id="u")
    store.add("Paris has a metro", shared=True)
    store.add("User went to Paris in 2010", user_id="U")
    block = format_memories(store.search("Paris", user_id="u"))
    lines = block.splitlines()
    assert "do not mention" in lines[0].lower() and not lines[0].startswith("- ")
    assert sorted(lines[1:]) == ["- [EPISODIC] User went to Paris in 2009", "- [SEMANTIC] Paris has a metro"]
    assert format_memories([]) == ""


# ---------------------------------------------------------------- isolation under adversarial ids
ADVERSARIAL = ["a|b", "a", "b", "*", "{x}", "x", "@user_id:{y}", "y", "-", "--", "a,b", "a b", " a", "a ",
               "'q'", '"q"', "q", "Bob", "bob", "BOB", "ü", "u", "用户", "%2A", "a%7Cb", "\\", "a\\|b", "(x)",
               "@", "$", "user:1", "user", "a*", "ab", "x -y", "-y", "~a", "a;b", "🙂", "e\u0301", "é",
               "a\u200bb", "ab ", "0", "00", "[x]", "a.b", "a_b", "@user_id", "user_id", "_", "__", ".", "~",
               "%5F", "a_", "1.5", "-1"]
_chars = st.characters(blacklist_categories=("Cc", "Cs"))
_ids = st.one_of(st.sampled_from(ADVERSARIAL),
                 st.builds(lambda a, t: a + t, st.sampled_from(ADVERSARIAL), st.text(_chars, max_size=6)),
                 st.text(_chars, min_size=1, max_size=24)).filter(lambda s: s.strip())


@pytest.fixture(scope="module")
def iso(r, emb):
    namespace = "tiso" + uuid.uuid4().hex[:8]
    store = mk.MemoryStore(r, emb, namespace=namespace)
    yield store, {}
    drop_namespace(r, namespace)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.lists(_ids, min_size=60, max_size=60, unique=True))
def test_no_search_returns_another_users_episodic_memory(iso, user_ids):
    store, counts = iso
    store.add_many([{"content": f"Private diary entry number {i % 7}", "user_id": u}
                    for i, u in enumerate(user_ids)])
    for u in user_ids:
        counts[u] = counts.get(u, 0) + 1
    counts[None] = counts.get(None, 0) + len(user_ids)  # total generated, distinct or not
    vector = store.embedder.embed("private diary entry")
    results = [store._nearest(vector, u, ["episodic"], 100) for u in user_ids]  # VSIM on each user's set
    keys = [key for rows in results for key, _, _ in rows]
    owner = {key: m.user_id for key, (m, _) in zip(keys, store._load(keys)) if m}
    for u, rows in zip(user_ids, results):
        seen = [owner[key] for key, _, _ in rows]
        assert set(seen) == {u}, f"id {u!r} saw memories of {set(seen) - {u}}"
        assert len(seen) == counts[u]
    for u in user_ids[:5]:  # the public API on top (its own post-check aside, same answer)
        assert {h.memory.user_id for h in store.search("diary", user_id=u, k=20)} == {u}


def test_isolation_property_covered_enough_ids(iso):
    store, counts = iso
    assert counts[None] >= 1000, "the property test above must generate at least 1,000 user ids"
    assert len(counts) > 500 and set(ADVERSARIAL) & set(counts)
