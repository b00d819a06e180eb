"""Deduplication: the three tiers, decisions applied without loss, validity, concurrency, consolidation."""
import json
import logging
import threading
import time
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

import memorykit as mk
from memorykit import dedup
from memorykit.errors import ValidationError

YEAR = 365 * 86400


@pytest.fixture
def store(r, emb, ns):
    return mk.MemoryStore(r, embedder=emb, namespace=ns)


class ScriptedLLM:
    """A stand-in model that answers the decider with fixed text (to test what we do with it)."""

    def __init__(self, content):
        self.content, self.calls = content, 0

    def chat(self, messages, tools=None, response_format=None):
        self.calls += 1
        return mk.Message(role="assistant", content=self.content)


# ------------------------------------------------------------------ exact tier
@pytest.mark.parametrize("variant", ["user lives in lisbon", "  User   lives in Lisbon!! ", "USER LIVES IN LISBON.",
                                     "User lives in Lisbon…", "Ｕｓｅｒ lives in Lisbon."])
def test_hash_ignores_case_spacing_punctuation_and_unicode_forms(variant):
    assert mk.content_hash(variant) == mk.content_hash("User lives in Lisbon.")


def test_hash_tells_different_facts_apart():
    assert mk.content_hash("User lives in Lisbon.") != mk.content_hash("User lives in Berlin.")
    assert mk.content_hash("User went to Kyoto in 2019.") != mk.content_hash("User went to Kyoto in 2015.")
    composed, decomposed = "Café in Zürich", unicodedata.normalize("NFD", "Café in Zürich")
    assert composed != decomposed and mk.content_hash(composed) == mk.content_hash(decomposed)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_hash_is_stable_under_case_and_whitespace(text):
    assert mk.content_hash(text) == mk.content_hash(f"  {text.upper()}  ".replace(" ", "   ")) or \
        text.upper().casefold() != text.casefold()


def test_first_person_input_is_stored_in_third_person():
    assert mk.as_fact("I live in Lisbon") == "User lives in Lisbon."
    assert mk.as_fact("My dog is called Max") == "User's dog is called Max."
    assert mk.as_fact("User lives in Lisbon.") == "User lives in Lisbon."
    with pytest.raises(ValidationError):
        mk.as_fact("   ")


def test_exact_tier_alone_drops_verbatim_repeats_only(store):
    first = store.remember("User lives in Lisbon.", user_id="u1", tiers=("exact",))
    again = store.remember("user lives in lisbon!", user_id="u1", tiers=("exact",))
    other = store.remember("User resides in Lisbon.", user_id="u1", tiers=("exact",))
    assert (first.action, again.action, other.action) == ("ADD", "NOOP", "ADD")
    assert again.tier == "exact" and again.memory.id == first.memory.id
    assert store.count("u1", ["episodic"]) == 2
    assert mk.find_exact(store, "USER LIVES IN LISBON", "u1").id == first.memory.id
    assert mk.find_exact(store, "User lives in Lisbon.", "u2") is None  # other users stay apart
    assert mk.find_exact(store, "User lives in Lisbon.", "u1", "semantic") is None


def test_first_person_repeat_is_an_exact_duplicate(store, llm):
    store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
    d = store.remember("I live in Lisbon", user_id="u1", llm=llm)
    assert (d.action, d.tier) == ("NOOP", "exact")


# ------------------------------------------------------------------ semantic tier
def test_semantic_tier_alone_merges_paraphrases_and_falls_for_traps(store):
    store.add("User went to Kyoto in 2019.", user_id="u1")
    store.add("User plays the guitar.", user_id="u1")
    para = store.remember("User plays guitar.", user_id="u1", tiers=("exact", "semantic"))
    trap = store.remember("User went to Kyoto in 2015.", user_id="u1", tiers=("exact", "semantic"))
    far = store.remember("User is allergic to peanuts.", user_id="u1", tiers=("exact", "semantic"))
    assert (para.action, para.tier) == ("NOOP", "semantic") and para.distance < 0.13
    assert trap.action == "NOOP"  # the trap: a different trip looks like a duplicate by distance
    assert far.action == "ADD"


def test_find_similar_stays_inside_user_type_and_current(store):
    store.add("User lives in Lisbon.", user_id="u1")
    store.add("User lives in Lisbon.", user_id="u2")
    store.add("User lives in Lisbon.", user_id="u1", memory_type="semantic")
    hits = mk.find_similar(store, "User resides in Lisbon.", "u1", "episodic")
    assert [h.memory.user_id for h in hits] == ["u1"] and hits[0].memory.memory_type == "episodic"


# ------------------------------------------------------------------ the decider
@pytest.mark.parametrize("old, new, action", [
    ("User lives in Lisbon.", "User is based in Lisbon.", "NOOP"),
    ("User lives in Lisbon.", "User moved to Berlin last month.", "UPDATE"),
    ("User works at Google.", "User joined Microsoft.", "UPDATE"),
    ("User is vegetarian.", "User is no longer vegetarian.", "INVALIDATE"),
    ("User went to Kyoto in 2019.", "User went to Kyoto in 2015.", "ADD"),
    ("User has a dog named Max.", "User adopted a cat named Luna.", "ADD"),
    ("User lives in Lisbon.", "User's sister lives in Lisbon.", "ADD"),
    ("User is allergic to peanuts.", "User is allergic to shellfish.", "ADD"),
])
def test_offline_decider_reads_subject_attribute_value(old, new, action):
    assert mk.offline_decision(new, [old])[0] == action


def test_offline_decider_answers_json_with_the_prompt_ids(llm):
    existing = [mk.Memory(content="User likes jazz.", user_id="u"), mk.Memory(content="User lives in Lisbon.", user_id="u")]
    reply = llm.chat(mk.decision_prompt("User relocated to Porto.", existing))
    data = json.loads(reply.content)
    assert data["action"] == "UPDATE" and data["id"] == 1 and reply.name == "offline"
    assert "[task: decide_memory]" in mk.decision_prompt("x", existing)[0].content
    assert '"id": 0' in mk.decision_prompt("x", existing)[1].content  # small ids, not ULIDs


@pytest.mark.parametrize("text, expected", [
    ('```json\n{"action": "update", "id": 0, "reason": "moved"}\n```', ("UPDATE", 0)),
    ('Sure! {"action": "NOOP", "id": "1"}', ("NOOP", 1)),
    ('{"action": "ADD", "id": 3}', ("ADD", None)),
])
def test_parse_decision_accepts_usable_answers(text, expected):
    assert mk.parse_decision(text, 2)[:2] == expected


@pytest.mark.parametrize("answer", ["I think you should update it", '{"action": "UPDATE", "id": 7}',
                                    '{"action": "MERGE", "id": 0}', '{"action": "NOOP"}',
                                    '{"action": "UPDATE", "id": true}', ""])
def test_unusable_decider_answer_adds_the_fact_and_warns(store, answer, caplog):
    store.add("User lives in Lisbon.", user_id="u1")
    fake = ScriptedLLM(answer)
    with caplog.at_level(logging.WARNING, logger="memorykit.dedup"):
        d = store.remember("User moved to Berlin.", user_id="u1", llm=fake)
    assert fake.calls == 1 and d.action == "ADD" and "fallback" in d.reason
    assert any("unusable" in rec.message for rec in caplog.records)
    assert sorted(m.content for m in store.list("u1", ["episodic"])) == ["User lives in Lisbon.", "User moved to Berlin."]


# ------------------------------------------------------------------ applying decisions
def test_add_noop_update_invalidate_are_applied_without_deleting(store, llm):
    base = store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
    noop = store.remember("User resides in Lisbon.", user_id="u1", llm=llm)
    assert noop.action == "NOOP" and noop.memory.id == base.memory.id and store.count("u1", ["episodic"]) == 1
    add = store.remember("User has a dog named Max.", user_id="u1", llm=llm)
    assert add.action == "ADD" and store.count("u1", ["episodic"]) == 2
    upd = store.remember("User moved to Berlin.", user_id="u1", llm=llm)
    assert upd.action == "UPDATE" and upd.target.id == base.memory.id
    old, new = store.get_many([base.memory.id, upd.memory.id])
    assert old.invalid_at == new.valid_from and old.superseded_by == new.id and new.supersedes == old.id
    gone = store.remember("User's dog Max passed away.", user_id="u1", llm=llm)
    assert gone.action == "INVALIDATE" and gone.target.id == add.memory.id
    assert store.get(add.memory.id).superseded_by == gone.memory.id
    current = sorted(m.content for m in store.list("u1", ["episodic"]))
    assert current == ["User moved to Berlin.", "User's dog Max passed away."]
    every = store.list("u1", ["episodic"], include_superseded=True)
    assert len(every) == 4  # nothing deleted


def test_lisbon_then_berlin_as_of_and_history(store, llm):
    now = time.time()
    lisbon = store.remember("I live in Lisbon", user_id="raphael", observed_at=now - 2 * YEAR, llm=llm)
    berlin = store.remember("I moved to Berlin last month", user_id="raphael", observed_at=now - 30 * 86400, llm=llm)
    assert berlin.action == "UPDATE"
    hits = store.search("Where do I live?", user_id="raphael", k=3)
    assert [h.memory.content for h in hits] == ["User moved to Berlin last month."]
    past = store.search("Where do I live?", user_id="raphael", k=3, as_of=now - YEAR)
    assert [h.memory.content for h in past] == ["User lives in Lisbon."]
    before = store.search("Where do I live?", user_id="raphael", k=3, as_of=now - 3 * YEAR)
    assert before == []
    chain = store.history(lisbon.memory.id)
    assert [m.content for m in chain] == ["User lives in Lisbon.", "User moved to Berlin last month."]
    assert [m.id for m in store.history(berlin.memory.id)] == [m.id for m in chain]
    with pytest.raises(ValidationError):
        store.history("01NOPE")


def test_backdated_fact_older_than_the_current_one_is_kept_as_history(store, llm):
    now = time.time()
    store.remember("User lives in Berlin.", user_id="u1", observed_at=now - 86400, llm=llm)
    d = store.remember("User lives in Lisbon.", user_id="u1", observed_at=now - YEAR, llm=llm)
    assert d.action == "UPDATE" and "history" in d.reason
    assert [m.content for m in store.list("u1", ["episodic"])] == ["User lives in Berlin."]
    assert [h.memory.content for h in store.search("home", user_id="u1", as_of=now - 100 * 86400)] == \
        ["User lives in Lisbon."]


def test_semantic_facts_without_user_belong_to_system(store, llm):
    d = store.remember("Paris is the capital of France.", memory_type="semantic", llm=llm)
    assert d.memory.user_id == "system"
    with pytest.raises(ValidationError):
        store.remember("User lives in Lisbon.", memory_type="episodic", llm=llm)
    with pytest.raises(ValidationError):
        store.remember("User lives in Lisbon.", user_id="u1", tiers=("fuzzy",))


# ------------------------------------------------------------------ concurrency
def _run(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_eight_writers_same_fact_leave_one_memory(store, llm):
    out = []
    _run([threading.Thread(target=lambda: out.append(store.remember(
        "User has a peanut allergy.", user_id="u1", llm=llm).action)) for _ in range(8)])
    assert sorted(out) == ["ADD"] + ["NOOP"] * 7
    assert store.count("u1", ["episodic"]) == 1


def test_eight_writers_updating_one_memory_leave_one_current_version(store, llm):
    first = store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
    cities = ["Rome", "Paris", "Madrid", "Oslo", "Vienna", "Prague", "Dublin", "Athens"]
    out = []
    _run([threading.Thread(target=lambda c=c: out.append(store.remember(
        f"User moved to {c}.", user_id="u1", llm=llm))) for c in cities])
    assert [d.action for d in out] == ["UPDATE"] * 8, out
    current = store.list("u1", ["episodic"])
    docs = [store.redis.json().get(k) for k in store.redis.scan_iter(f"{store.namespace}:memory:*")]
    truly = [(d["content"], d.get("valid_from"), d.get("invalid_at"), d.get("superseded_by")) for d in docs]
    assert len(current) == 1, (out, truly)
    chain = store.history(first.memory.id)
    assert len(chain) == 9 and chain[0].id == first.memory.id and chain[-1].id == current[0].id
    assert sorted(m.content for m in chain[1:]) == sorted(f"User moved to {c}." for c in cities)
    assert all(m.invalid_at is not None for m in chain[:-1])


# ------------------------------------------------------------------ consolidation
def test_consolidate_merges_duplicates_with_provenance_within_user_and_type(store, llm):
    a = store.add("User went to Paris in 2009 for their honeymoon.", user_id="u1", source_thread="t1",
                  source_messages=["m1"])
    b = store.add("User honeymooned in Paris in 2009.", user_id="u1", source_thread="t2", source_messages=["m7"])
    store.add("User went to Kyoto in 2019.", user_id="u1")
    store.add("User went to Kyoto in 2015.", user_id="u1")
    other_user = store.add("User honeymooned in Paris in 2009.", user_id="u2")
    other_type = store.add("User honeymooned in Paris in 2009.", user_id="u1", memory_type="semantic")
    merges = store.consolidate("u1", llm=llm)
    assert len(merges) == 1 and merges[0].kept.id == a.id and [m.id for m in merges[0].merged] == [b.id]
    kept, merged = store.get_many([a.id, b.id])
    assert kept.source_messages == ["m1", "m7"] and kept.metadata["source_threads"] == ["t1", "t2"]
    assert kept.metadata["merged_from"] == [b.id]
    assert merged.superseded_by == a.id and merged.invalid_at is not None  # closed, not deleted
    assert store.get(other_user.id).is_current and store.get(other_type.id).is_current
    assert len(store.list("u1", ["episodic"])) == 3  # both Kyoto trips stay
    assert store.consolidate("u1", llm=llm) == []


def test_consolidate_does_not_chain_neighbours_into_one_mega_memory(store, emb):
    texts = ["User likes tea.", "User likes green tea.", "User likes green tea ice cream."]
    v = [emb.embed(t) for t in texts]
    d = lambda x, y: 1 - sum(p * q for p, q in zip(x, y))  # noqa: E731  (normalized vectors)
    threshold = max(d(v[0], v[1]), d(v[1], v[2])) + 1e-4
    assert d(v[0], v[2]) > threshold  # a chain: 0~1, 1~2, but 0 far from 2
    for t in texts:
        store.add(t, user_id="u1")
    merges = store.consolidate("u1", distance_threshold=threshold, use_decider=False, dry_run=True)
    assert all(len(m.merged) == 1 for m in merges) and merges
    assert len(store.list("u1", ["episodic"])) == 3  # dry run changes nothing


# ------------------------------------------------------------------ privacy
def test_forget_user_leaves_no_history_or_hash_key(store, r, ns, llm):
    store.remember("User lives in Lisbon.", user_id="gone", llm=llm)
    store.remember("User moved to Berlin.", user_id="gone", llm=llm)
    store.remember("User lives in Lisbon.", user_id="stays", llm=llm)
    assert r.exists(dedup.ledger_key(store, "gone", "episodic"))
    store.forget_user("gone")
    assert store.list("gone", ["episodic"], include_superseded=True) == []
    assert not list(r.scan_iter(match=f"{ns}:memhash:gone*"))
    assert len(store.list("stays", ["episodic"])) == 1 and r.exists(dedup.ledger_key(store, "stays", "episodic"))
