"""Deduplication: the cascade's tiers, the decider task, the learned offline model measured on held-out
pairs, decisions applied without loss, validity, concurrency, consolidation."""
import json
import logging
import threading
import time
import unicodedata
import uuid

import pytest
from hypothesis import given, settings, strategies as st

import memorykit as mk
from conftest import drop_namespace
from scripted import ScriptedModel
from memorykit.config import data_path
from memorykit.course import dedup_eval
from memorykit.errors import LLMError, ValidationError
from memorykit.llm.task import run_task, track_usage
from memorykit.memory import dedup
from memorykit.memory.index import content_hash

YEAR = 365 * 86400


@pytest.fixture
def store(r, emb, ns):
    return mk.MemoryStore(r, embedder=emb, namespace=ns)


# ------------------------------------------------------------------ exact tier
@pytest.mark.parametrize("variant", ["user lives in lisbon", "  User   lives in Lisbon!! ", "USER LIVES IN LISBON.",
                                     "User lives in Lisbon…", "Ｕｓｅｒ lives in Lisbon."])
def test_hash_ignores_case_spacing_punctuation_and_unicode_forms(variant):
    assert content_hash(variant) == content_hash("User lives in Lisbon.")


def test_hash_tells_different_facts_apart():
    assert content_hash("User lives in Lisbon.") != content_hash("User lives in Berlin.")
    assert content_hash("User went to Kyoto in 2019.") != content_hash("User went to Kyoto in 2015.")
    composed, decomposed = "Café in Zürich", unicodedata.normalize("NFD", "Café in Zürich")
    assert composed != decomposed and content_hash(composed) == content_hash(decomposed)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_hash_is_stable_under_case_and_whitespace(text):
    assert content_hash(text) == content_hash(f"  {text.upper()}  ".replace(" ", "   ")) or \
        text.upper().casefold() != text.casefold()


def test_course_pairs_are_rewritten_in_third_person():
    assert dedup_eval.as_fact("I live in Lisbon") == "User lives in Lisbon."
    assert dedup_eval.as_fact("My dog is called Max") == "User's dog is called Max."
    assert dedup_eval.as_fact("User lives in Lisbon.") == "User lives in Lisbon."
    with pytest.raises(ValidationError):
        dedup_eval.as_fact("   ")


def test_exact_tier_drops_verbatim_repeats(store, llm):
    first = store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
    again = store.remember("user lives in lisbon!", user_id="u1", llm=llm)
    assert (first.action, again.action) == ("ADD", "NOOP")
    assert again.tier == "exact" and again.memory.id == first.memory.id
    assert store.count("u1", ["episodic"]) == 1
    assert dedup.find_exact(store, "USER LIVES IN LISBON", "u1").id == first.memory.id
    assert dedup.find_exact(store, "User lives in Lisbon.", "u2") is None  # other users stay apart
    assert dedup.find_exact(store, "User lives in Lisbon.", "u1", "semantic") is None


# ------------------------------------------------------------------ semantic tier
def test_find_similar_stays_inside_user_type_and_current(store):
    store.add("User lives in Lisbon.", user_id="u1")
    store.add("User lives in Lisbon.", user_id="u2")
    store.add("User lives in Lisbon.", user_id="u1", memory_type="semantic")
    hits = dedup.find_similar(store, "User resides in Lisbon.", "u1", "episodic")
    assert [h.memory.user_id for h in hits] == ["u1"] and hits[0].memory.memory_type == "episodic"


# ------------------------------------------------------------------ the cascade asks a model only when it must
def test_cascade_asks_the_model_only_in_the_ambiguous_band(store, llm):
    with track_usage() as calls:
        first = store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
        repeat = store.remember("user lives in Lisbon!", user_id="u1", llm=llm)
        near = store.remember("User currently lives in Lisbon.", user_id="u1", llm=llm)
        far = store.remember("User is allergic to peanuts.", user_id="u1", llm=llm)
        assert [c.task for c in calls] == []
        moved = store.remember("User moved to Berlin.", user_id="u1", llm=llm)
    assert [(d.tier, d.model_calls) for d in (first, repeat, near, far)] == \
        [("semantic", 0), ("exact", 0), ("semantic", 0), ("semantic", 0)]
    assert (near.action, near.reason) == ("NOOP", "a near-identical memory")
    assert (moved.action, moved.tier, moved.model_calls) == ("UPDATE", "decided", 1)
    assert [c.task for c in calls] == ["decide_memory"]


def test_near_identical_needs_the_same_numbers_names_and_negations():
    assert dedup.near_identical("User plays guitar.", "User plays the guitar.", 0.01)
    assert not dedup.near_identical("User has a meeting with Sarah on Friday.",
                                    "User has a meeting with Sarah on Monday.", 0.01)
    assert not dedup.near_identical("User went to Kyoto in 2015.", "User went to Kyoto in 2019.", 0.01)
    assert not dedup.near_identical("User isn't vegan.", "User is vegan.", 0.01)
    assert not dedup.near_identical("User plays guitar.", "User plays the guitar.", 0.2)


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
def test_offline_decider_on_course_examples(old, new, action, llm):
    assert dedup.decide(new, [old], llm).action == action


def test_decide_task_shows_small_numbers_and_no_marker(llm):
    inp = dedup.DecideInput(new="User relocated to Porto.", existing=[
        dedup.ExistingFact(id=0, fact="User likes jazz."), dedup.ExistingFact(id=1, fact="User lives in Lisbon.")])
    system, user = dedup.DECIDE.messages(inp)
    assert "[task:" not in system.content and "(offline)" not in system.content
    assert user.content.splitlines() == ["NEW: User relocated to Porto.", "EXISTING:", "0: User likes jazz.",
                                         "1: User lives in Lisbon."]
    out = run_task(llm, dedup.DECIDE, inp)
    assert (out.action, out.target) == ("UPDATE", 1) and out.reason
    assert dedup.DECIDE.max_tokens <= 200


@pytest.mark.parametrize("text, expected", [
    ('```json\n{"action": "update", "target": 0, "reason": "moved"}\n```', ("UPDATE", 0)),
    ('Sure! {"action": "NOOP", "target": "1", "reason": "same"}', ("NOOP", 1)),
    ('{"action": "ADD", "target": 3, "reason": "another fact"}', ("ADD", None)),
])
def test_decide_accepts_usable_answers(text, expected):
    out = dedup.decide("User moved to Berlin.", ["User lives in Lisbon.", "User likes jazz."], ScriptedModel(then=text))
    assert (out.action, out.target) == expected


@pytest.mark.parametrize("answer, calls", [
    ("I think you should update it", 2), ('{"action": "UPDATE", "target": 7, "reason": "moved"}', 1),
    ('{"action": "MERGE", "target": 0, "reason": "same"}', 2), ('{"action": "NOOP", "reason": "same"}', 2),
    ('{"action": "UPDATE", "target": 0, "reason": "..."}', 2), ("", 2),
])
def test_unusable_decider_answer_adds_the_fact_and_warns(store, answer, calls, caplog):
    store.add("User lives in Lisbon.", user_id="u1")
    fake = ScriptedModel(then=answer)
    with caplog.at_level(logging.WARNING, logger="memorykit.memory.dedup"):
        d = store.remember("User moved to Berlin.", user_id="u1", llm=fake)
    assert fake.calls == calls and d.action == "ADD" and d.reason.startswith("decider failed")
    assert any("decider" in rec.message for rec in caplog.records)
    assert sorted(m.content for m in store.list("u1", ["episodic"])) == ["User lives in Lisbon.", "User moved to Berlin."]


@pytest.mark.parametrize("content, stored", [
    ("User lives in Berlin (moved from Lisbon).", "User lives in Berlin (moved from Lisbon)."),
    ("...", "User moved to Berlin."), (None, "User moved to Berlin."),
])
def test_update_may_store_the_models_wording_but_never_a_placeholder(store, content, stored):
    old = store.add("User lives in Lisbon.", user_id="u1")
    answer = json.dumps({"action": "UPDATE", "target": 0, "reason": "moved", "content": content})
    d = store.remember("User moved to Berlin.", user_id="u1", llm=ScriptedModel(then=answer))
    assert d.action == "UPDATE" and d.target.id == old.id
    assert [m.content for m in store.list("u1", ["episodic"])] == [stored]
    assert store.search("Berlin", user_id="u1", k=1)[0].memory.content == stored


@settings(max_examples=25, deadline=None)
@given(st.one_of(st.text(max_size=60), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                 st.builds(lambda a, t, r: f'{{"action": {a!r}, "target": {t}, "reason": {r!r}}}'.replace("'", '"'),
                           st.sampled_from(["ADD", "UPDATE", "NOOP", "INVALIDATE", "DELETE", ""]),
                           st.sampled_from(["null", "0", "-1", "99", '"x"', "1.5", "[]"]), st.text(max_size=10))))
def test_garbage_model_output_never_raises_from_remember(r, emb, answer):
    """Whatever a backend answers, remember() stores or keeps the fact and never raises."""
    ns = "t" + uuid.uuid4().hex[:10]
    store = mk.MemoryStore(r, embedder=emb, namespace=ns)
    try:
        store.add("User lives in Lisbon.", user_id="u1")
        d = store.remember("User moved to Berlin.", user_id="u1", llm=ScriptedModel(then=answer))
        assert d.action in dedup.ACTIONS
        current = [m.content for m in store.list("u1", ["episodic"])]
        assert "User moved to Berlin." in current or d.action == "NOOP"
        assert len(current) >= 1
    finally:
        drop_namespace(r, ns)


@pytest.mark.parametrize("error", [LLMError("server said 500"), TimeoutError("stalled"), ConnectionError("gone"),
                                   RuntimeError("a backend bug")])
def test_a_backend_that_raises_never_breaks_remember(store, error):
    store.add("User lives in Lisbon.", user_id="u1")
    d = store.remember("User moved to Berlin.", user_id="u1", llm=ScriptedModel(then=error))
    assert d.action == "ADD" and d.reason.startswith("decider failed") and d.model_calls == 1
    assert store.count("u1", ["episodic"]) == 2


# ------------------------------------------------------------------ the learned offline model, held out
HELDOUT_FLOOR = 0.85  # measured 0.92 on the 181 held-out pairs; the floor leaves a margin


def test_learned_model_meets_its_floor_on_the_heldout_pairs():
    from memorykit.offline import decide_model

    with open(data_path("dedup", "heldout.jsonl"), encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f if line.strip()]
    train = {(p["existing"], p["new"]) for p in decide_model.training_pairs()}
    with open(data_path("independent", "dedup.jsonl"), encoding="utf-8") as f:
        independent = {(p["existing"], p["new"]) for p in map(json.loads, filter(str.strip, f))}
    assert len(train) > 900 and len(pairs) >= 150 and not train & {(p["existing"], p["new"]) for p in pairs}
    assert not train & independent  # the evaluation set written apart from the method is never trained on
    score = decide_model.evaluate(pairs)
    assert score.n == len(pairs) and sum(map(sum, (r.values() for r in score.confusion.values()))) == len(pairs)
    assert score.accuracy >= HELDOUT_FLOOR, score
    for label in ("duplicate", "update", "new"):  # no class is sacrificed for the others
        row = score.confusion[label]
        assert row[label] / sum(row.values()) >= 0.75, (label, row)


def test_every_heldout_update_it_recognises_leaves_only_the_fresh_fact_current(store, llm):
    """End to end on a store, the held-out update pairs: stored, then remembered. Measured: 57 of 60
    recognised, and each of those left exactly one current memory, the new fact."""
    from memorykit.course.dedup_eval import load_pairs, replay_pairs

    updates = [p for p in load_pairs("heldout") if p["label"] in ("update", "invalidate")]
    rows = replay_pairs(store, updates, llm=llm)
    said_update = rows[rows.said == "update"]
    assert len(rows) >= 50 and len(said_update) >= 0.85 * len(rows), rows.said.value_counts()
    assert said_update.fresh_only.all(), said_update[~said_update.fresh_only.astype(bool)]


# ------------------------------------------------------------------ applying decisions
def test_add_noop_update_invalidate_are_applied_without_deleting(store, llm):
    base = store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
    noop = store.remember("User resides in Lisbon.", user_id="u1", llm=llm)
    assert noop.action == "NOOP" and noop.memory.id == base.memory.id and store.count("u1", ["episodic"]) == 1
    add = store.remember("User has a dog named Max.", user_id="u1", llm=llm)
    assert add.action == "ADD" and store.count("u1", ["episodic"]) == 2
    upd = store.remember("User moved to Berlin.", user_id="u1", llm=llm)
    assert upd.action == "UPDATE" and upd.target.id == base.memory.id
    old, new = store.get_many([base.memory.id, upd.memory.id], "u1")
    assert old.invalid_at == new.valid_from and old.superseded_by == new.id and new.supersedes == old.id
    gone = store.remember("User's dog Max passed away.", user_id="u1", llm=llm)
    assert gone.action == "INVALIDATE" and gone.target.id == add.memory.id
    assert store.get(add.memory.id, "u1").superseded_by == gone.memory.id
    current = sorted(m.content for m in store.list("u1", ["episodic"]))
    assert current == ["User moved to Berlin.", "User's dog Max passed away."]
    every = store.list("u1", ["episodic"], include_superseded=True)
    assert len(every) == 4  # nothing deleted


def test_lisbon_then_berlin_as_of_and_history(store, llm):
    now = time.time()
    lisbon = store.remember("User lives in Lisbon.", user_id="raphael", observed_at=now - 2 * YEAR, llm=llm)
    berlin = store.remember("User moved to Berlin last month.", user_id="raphael", observed_at=now - 30 * 86400,
                            llm=llm)
    assert berlin.action == "UPDATE"
    hits = store.search("Where do I live?", user_id="raphael", k=3)
    assert [h.memory.content for h in hits] == ["User moved to Berlin last month."]
    past = store.search("Where do I live?", user_id="raphael", k=3, as_of=now - YEAR)
    assert [h.memory.content for h in past] == ["User lives in Lisbon."]
    before = store.search("Where do I live?", user_id="raphael", k=3, as_of=now - 3 * YEAR)
    assert before == []
    chain = store.history(lisbon.memory.id, user_id="raphael")
    assert [m.content for m in chain] == ["User lives in Lisbon.", "User moved to Berlin last month."]
    assert [m.id for m in store.history(berlin.memory.id, user_id="raphael")] == [m.id for m in chain]
    with pytest.raises(ValidationError) as missing:
        store.history("01NOPE", user_id="raphael")
    with pytest.raises(ValidationError) as theirs:  # another user's id: the same answer as a missing one
        store.history(lisbon.memory.id, user_id="Raphael")
    assert str(theirs.value) == str(missing.value).replace("01NOPE", lisbon.memory.id)


def test_backdated_fact_older_than_the_current_one_is_kept_as_history(store, llm):
    now = time.time()
    store.remember("User lives in Berlin.", user_id="u1", observed_at=now - 86400, llm=llm)
    d = store.remember("User lives in Lisbon.", user_id="u1", observed_at=now - YEAR, llm=llm)
    assert d.action == "UPDATE" and "history" in d.reason
    assert [m.content for m in store.list("u1", ["episodic"])] == ["User lives in Berlin."]
    assert [h.memory.content for h in store.search("home", user_id="u1", as_of=now - 100 * 86400)] == \
        ["User lives in Lisbon."]


def test_a_fact_said_before_every_candidate_is_asked_about_in_the_order_it_was_said(store, llm, monkeypatch):
    """A message remembered late (after an outage): the later fact is shown to the decider as the NEW one, so
    "lives in Porto" (said first) is replaced by "moved to Berlin" (said after it), not read as news about it."""
    asked, real = [], dedup.decide
    monkeypatch.setattr(dedup, "decide", lambda new, existing, llm: asked.append((new, list(existing))) or
                        real(new, existing, llm))
    now = time.time()
    store.remember("User moved to Berlin.", user_id="a|b", llm=llm)
    late = store.remember("User lives in Porto.", user_id="a|b", observed_at=now - 3600, llm=llm)
    assert asked == [("User moved to Berlin.", ["User lives in Porto."])]
    assert late.action == "UPDATE" and "history" in late.reason, late
    assert [m.content for m in store.list("a|b", ["episodic"])] == ["User moved to Berlin."]
    assert [h.memory.content for h in store.search("home", user_id="a|b", as_of=now - 1800)] == ["User lives in Porto."]
    fresh = store.remember("User lives in Porto.", user_id="other", llm=llm)   # nothing said after it: asked as usual
    assert fresh.action == "ADD" and len(asked) == 1


def test_backdated_facts_go_into_the_chain_at_their_time_and_are_stored_once(store, llm, monkeypatch):
    monkeypatch.setattr(dedup, "decide", lambda new, existing, llm: dedup.MemoryDecision(
        action="UPDATE", target=0, reason="every fact here replaces the home before it"))
    now = time.time()
    paris = store.remember("User lives in Paris.", user_id="u1", observed_at=now - 3 * YEAR, llm=llm)
    berlin = store.remember("User lives in Berlin.", user_id="u1", llm=llm)
    london = store.remember("User lives in London.", user_id="u1", observed_at=now - YEAR, llm=llm)
    assert london.action == "UPDATE" and "history" in london.reason
    chain = [m.content for m in store.history(berlin.memory.id, user_id="u1")]
    assert chain == ["User lives in Paris.", "User lives in London.", "User lives in Berlin."]
    assert [m.id for m in store.history(paris.memory.id, user_id="u1")] == \
        [m.id for m in store.history(london.memory.id, user_id="u1")]
    at = lambda t: [h.memory.content for h in store.search("home", user_id="u1", k=5, as_of=t)]
    assert (at(now - 2 * YEAR), at(now - YEAR / 2), at(None)) == (
        ["User lives in Paris."], ["User lives in London."], ["User lives in Berlin."])
    writers = [threading.Thread(target=store.remember, args=("User lives in Rome.",),
                                kwargs=dict(user_id="u1", observed_at=now - 2 * YEAR, llm=llm)) for _ in range(3)]
    _run(writers)
    again = store.remember("User lives in Rome.", user_id="u1", observed_at=now - 2 * YEAR, llm=llm)
    assert again.action == "NOOP"
    every = store.list("u1", ["episodic"], include_superseded=True)
    assert sorted(m.content for m in every) == sorted(
        ["User lives in Paris.", "User lives in Rome.", "User lives in London.", "User lives in Berlin."])
    assert at(now - 2 * YEAR + 86400) == ["User lives in Rome."] and at(now - 2.5 * YEAR) == ["User lives in Paris."]
    earlier = store.remember("User lives in London.", user_id="u1", observed_at=now - 1.5 * YEAR, llm=llm)
    assert earlier.action == "NOOP" and at(now - 1.5 * YEAR + 86400) == ["User lives in London."]
    assert len(store.list("u1", ["episodic"], include_superseded=True)) == 4


def test_the_current_fact_observed_earlier_holds_from_then_and_a_future_time_is_refused(store, llm, monkeypatch):
    monkeypatch.setattr(dedup, "decide", lambda new, existing, llm: dedup.MemoryDecision(
        action="UPDATE", target=0, reason="every fact here replaces the home before it"))
    now = time.time()
    store.remember("User lives in Paris.", user_id="u1", observed_at=now - 3 * YEAR, llm=llm)
    berlin = store.remember("User lives in Berlin.", user_id="u1", llm=llm).memory
    again = store.remember("user lives in berlin", user_id="u1", observed_at=now - 2 * YEAR, llm=llm)
    assert again.action == "NOOP" and again.memory.id == berlin.id
    at = lambda t: [h.memory.content for h in store.search("home", user_id="u1", k=5, as_of=t)]
    assert at(now - 1.5 * YEAR) == ["User lives in Berlin."] and at(now - 2.5 * YEAR) == ["User lives in Paris."]
    assert len(store.list("u1", ["episodic"], include_superseded=True)) == 2
    with pytest.raises(ValidationError, match="observed_at"):
        store.remember("User lives in Rome.", user_id="u1", observed_at=now + YEAR, llm=llm)


def test_a_revision_after_a_clock_ahead_is_current_and_says_no_text_twice(store, llm):
    ahead = store.add("User lives in Berlin.", user_id="u1")
    store.redis.json().set(store.key(ahead.id, "u1"), "$.valid_from", time.time() + 600)  # another server's clock
    munich = store.revise(ahead.id, "User lives in Munich.", user_id="u1")
    assert munich.action == "UPDATE" and [m.content for m in store.list("u1", ["episodic"])] == ["User lives in Munich."]
    tea = store.add("User likes tea.", user_id="u1")
    coffee = store.remember("User likes coffee.", user_id="u1", llm=None).memory
    out = store.revise(coffee.id, "user likes tea", user_id="u1")
    assert out.memory.id == tea.id and store.get(coffee.id, "u1").superseded_by == tea.id
    assert sorted(m.content for m in store.list("u1", ["episodic"])) == ["User likes tea.", "User lives in Munich."]
    assert dedup.find_exact(store, "User likes coffee.", user_id="u1") is None


def test_shared_facts_need_the_shared_api_and_system_is_a_user(store, llm):
    d = store.remember("Paris is the capital of France.", shared=True, llm=llm)
    assert d.memory.user_id is None and d.memory.shared and d.memory.memory_type == "semantic"
    sys = store.remember("Paris is the capital of France.", user_id="system", memory_type="semantic", llm=llm)
    assert sys.action == "ADD" and sys.memory.user_id == "system"  # its own ledger, not the shared one
    assert store.remember("paris is the capital of france", shared=True, llm=llm).action == "NOOP"
    assert [m.user_id for m in store.list("bob", ["semantic"])] == [None]
    for bad in (dict(memory_type="semantic"), dict(memory_type="episodic", shared=True),
                dict(user_id="u", shared=True)):
        with pytest.raises(ValidationError):
            store.remember("User lives in Lisbon.", llm=llm, **bad)


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


def test_a_retry_asks_the_model_again_only_when_the_candidates_changed(store, llm):
    """Another write for the same user and type lands while the model decides: remember() retries. If that
    write was unrelated, the candidates are the same and the answer is reused; if it was a close fact, ask again."""
    store.remember("User lives in Lisbon.", user_id="u1", llm=llm)
    store.remember("User lives in Lisbon.", user_id="system", llm=llm)  # another user: never a candidate

    def run(fact: str, interleaved: str) -> tuple[str, int]:
        asked = []

        class Decider:
            label = "decider that lets another write in"

            def perform(self, task, inp, tools=None):
                asked.append(len(inp.existing))
                if len(asked) == 1:  # while the first answer is being written, another turn stores a fact
                    store.remember(interleaved, user_id="u1", llm=llm)
                return llm.perform(task, inp, tools=tools)

        decision = store.remember(fact, user_id="u1", llm=Decider())
        return decision.action, len(asked)

    assert run("User moved to Porto.", "User's favourite colour is green.") == ("UPDATE", 1)  # the same candidates
    action, asked = run("User moved to Braga.", "User moved to Faro.")      # a close fact: a new candidate
    assert asked == 2 and action == "UPDATE"


def test_eight_writers_updating_one_memory_leave_one_current_version(store, llm, monkeypatch):
    # the decider pinned: which city each writer sees as current depends on the threads' order, and the learned
    # model is near 0.5 on some pairs ("moved to Vienna" / "moved to Athens"); this test is about the writes
    monkeypatch.setattr(dedup, "decide", lambda new, existing, llm: dedup.MemoryDecision(
        action="UPDATE", target=0, reason="each move replaces the home before it"))
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
    chain = store.history(first.memory.id, user_id="u1")
    assert len(chain) == 9 and chain[0].id == first.memory.id and chain[-1].id == current[0].id
    assert sorted(m.content for m in chain[1:]) == sorted(f"User moved to {c}." for c in cities)
    assert all(m.invalid_at is not None for m in chain[:-1])


def test_a_fact_said_again_after_a_newer_one_replaced_it_replaces_that_one(store, llm, monkeypatch):
    tennis = store.remember("User plays tennis every week.", user_id="u1", llm=llm).memory
    store.remember("User plays tennis every week.", user_id="u2", llm=llm)
    store.remember("User no longer plays tennis.", user_id="u1", llm=llm)
    back = store.remember("User plays tennis every week.", user_id="u1", llm=llm)
    assert (back.action, back.tier, back.target.content) == ("UPDATE", "exact", "User no longer plays tennis.")
    assert [m.content for m in store.list("u1", ["episodic"])] == ["User plays tennis every week."]
    assert [m.content for m in store.history(tennis.id, user_id="u1")] == [
        "User plays tennis every week.", "User no longer plays tennis.", "User plays tennis every week."]
    assert len(store.list("u2", ["episodic"])) == 1  # the other user's tennis is untouched
    # through a longer chain, to the version current now; one said again at a past time goes to the model
    monkeypatch.setattr(dedup, "decide", lambda new, existing, llm: dedup.MemoryDecision(
        action="UPDATE", target=0, reason="a move replaces the home before it"))
    paris = store.remember("User lives in Paris.", user_id="u3", llm=llm).memory
    for city in ("Berlin", "Rome"):
        store.remember(f"User moved to {city}.", user_id="u3", llm=llm)
    asked = store.remember("User lives in Paris.", user_id="u3", observed_at=paris.valid_from + 0.001, llm=llm)
    assert asked.tier == "decided"
    home = store.remember("User lives in Paris.", user_id="u3", llm=llm)
    assert (home.action, home.tier, home.target.content) == ("UPDATE", "exact", "User moved to Rome.")
    assert [m.content for m in store.list("u3", ["episodic"])] == ["User lives in Paris."]
    # a replacement far from what it replaced (a wrong earlier decision) is not undone by the rule: the model decides
    store.remember("User cycles to work.", user_id="u4", llm=llm)
    store.remember("User uses Linux on their laptop.", user_id="u4", llm=llm)
    assert store.remember("User cycles to work.", user_id="u4", llm=llm).tier == "decided"


# ------------------------------------------------------------------ consolidation
def test_consolidate_merges_duplicates_with_provenance_within_user_and_type(store, llm):
    a = store.add("User went to Paris in 2009 for their honeymoon.", user_id="u1", source_thread="t1",
                  source_messages=["m1"])
    b = store.add("User honeymooned in Paris in 2009.", user_id="u1", source_thread="t2", source_messages=["m7"])
    store.add("User went to Kyoto in 2019.", user_id="u1")
    store.add("User went to Kyoto in 2015.", user_id="u1")
    other_user = store.add("User honeymooned in Paris in 2009.", user_id="u2")
    other_type = store.add("User honeymooned in Paris in 2009.", user_id="u1", memory_type="semantic")
    merges = dedup_eval.consolidate(store, "u1", llm=llm)
    assert len(merges) == 1 and merges[0].kept.id == a.id and [m.id for m in merges[0].merged] == [b.id]
    kept, merged = store.get_many([a.id, b.id], "u1")
    assert kept.source_messages == ["m1", "m7"] and kept.metadata["source_threads"] == ["t1", "t2"]
    assert kept.metadata["merged_from"] == [b.id]
    assert merged.superseded_by == a.id and merged.invalid_at is not None  # closed, not deleted
    assert store.get(other_user.id, "u2").is_current and store.get(other_type.id, "u1").is_current
    ledger = store.redis.hgetall(dedup.ledger_key(store, "u1", "episodic"))
    assert b.id not in ledger.values()  # the closed duplicate left the ledger with its closing
    assert len(store.list("u1", ["episodic"])) == 3  # both Kyoto trips stay
    assert dedup_eval.consolidate(store, "u1", llm=llm) == []


def test_consolidate_does_not_chain_neighbours_into_one_mega_memory(store, emb):
    texts = ["User likes tea.", "User likes green tea.", "User likes green tea ice cream."]
    v = [emb.embed(t) for t in texts]
    d = lambda x, y: 1 - sum(p * q for p, q in zip(x, y))  # noqa: E731  (normalized vectors)
    threshold = max(d(v[0], v[1]), d(v[1], v[2])) + 1e-4
    assert d(v[0], v[2]) > threshold  # a chain: 0~1, 1~2, but 0 far from 2
    for t in texts:
        store.add(t, user_id="u1")
    merges = dedup_eval.consolidate(store, "u1", distance_threshold=threshold, use_decider=False, dry_run=True)
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


def test_fitted_models_are_cached_on_disk_by_what_they_learned_from(tmp_path, monkeypatch):
    from memorykit.offline.fit_cache import cached, fingerprint

    monkeypatch.setenv("MEMORYKIT_HOME", str(tmp_path))
    data = tmp_path / "train.jsonl"
    data.write_text('{"a": 1}\n')
    fits = []

    def fit():
        from memorykit.embeddings import training

        assert training()  # a fit embeds its training texts in batches
        fits.append(1)
        return {"weights": [len(fits)]}

    first = cached("toy", fingerprint("v1", [data]), fit)
    again = cached("toy", fingerprint("v1", [data]), fit)
    assert first == again == {"weights": [1]} and len(fits) == 1  # the second process loads, it does not refit
    data.write_text('{"a": 2}\n')                                   # new training data: a new key, refitted
    assert cached("toy", fingerprint("v1", [data]), fit) == {"weights": [2]}
    assert [p.name.split("-")[0] for p in (tmp_path / ".memorykit" / "offline").iterdir()] == ["toy"]  # stale pickle gone
    (tmp_path / ".memorykit" / "offline" / f"toy-{fingerprint('v1', [data])}.pkl").write_bytes(b"not a pickle")
    assert cached("toy", fingerprint("v1", [data]), fit) == {"weights": [3]}  # unreadable cache: refitted

    def exact_fit():
        from memorykit.embeddings import training

        return {"batched": training()}

    assert cached("exact", fingerprint("v1", [data]), exact_fit, batched=False) == {"batched": False}


def test_the_dedup_model_pickles_without_its_encoder_and_decides_the_same():
    import pickle

    from memorykit.offline import decide_model

    model = decide_model.model()
    loaded = pickle.loads(pickle.dumps(model))
    assert loaded.encode is not model.encode and not loaded.encode.memo
    olds = ["User lives in Rome.", "User likes tea.", "User works at Acme."]
    news = ["User lives in Paris.", "User likes tea a lot.", "User's sister works at Globex."]
    assert loaded.predict_proba(olds, news) == model.predict_proba(olds, news)
