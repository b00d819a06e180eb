"""Hybrid retrieval: query terms, RRF, recency, and MemoryStore.search(mode=...) on the real index."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from redisvl.query.filter import Num

from memorykit.errors import ValidationError
from memorykit.memory import retrieval as rt
from memorykit.memory.long_term import MemoryStore

DAY = 86400.0


def utc(*args) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def test_query_terms_drop_stopwords_possessives_and_repeats():
    assert rt.query_terms("What did Maya's dog eat, and what did the dog drink?") == ["maya", "dog", "eat", "drink"]
    assert rt.query_terms("Who?") == []


def test_rrf_rewards_agreement_and_weights():
    fused = rt.rrf({"a": ["x", "y", "z"], "b": ["y", "w"]}, {"a": 1.0, "b": 1.0}, k=60)
    assert max(fused, key=fused.get) == "y"
    assert fused["y"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["x"] > fused["w"] > 0
    heavier = rt.rrf({"a": ["x"], "b": ["w"]}, {"a": 1.0, "b": 2.0})
    assert heavier["w"] == pytest.approx(2 * heavier["x"])


def test_recency_half_lives():
    now = utc(2024, 1, 31)
    r = rt.Recency(half_life_created_days=30, half_life_last_access_days=7, novelty_weight=1, freshness_weight=0)
    assert r.score(now - 30 * DAY, None, now) == pytest.approx(0.5)
    assert r.score(now, None, now) == pytest.approx(1.0)
    f = rt.Recency(novelty_weight=0, freshness_weight=1, half_life_last_access_days=7)
    assert f.score(now - 300 * DAY, now - 7 * DAY, now) == pytest.approx(0.5)
    assert f.score(now - 14 * DAY, None, now) == pytest.approx(0.25)  # never used: counts from creation
    assert rt.Recency().score(None, None, now) == 0.0
    assert 0 <= rt.Recency().score(now - 5 * DAY, now - DAY, now) <= 1
    assert rt.Recency().score(now + DAY, None, now) == 0.0  # created after the time asked about: not new, absent
    assert rt.Recency().score(now + 2, None, now) == pytest.approx(1.0)  # another server's clock, a little ahead


@pytest.fixture
def store(r, emb, ns):
    return MemoryStore(r, emb, namespace=ns)


def add(store, text, user="ana", days_ago=0.0, speaker=None, now=None):
    now = now or time.time()
    m = store.add(text, user_id=user, observed_at=now - days_ago * DAY, topics=[speaker] if speaker else None)
    m.created_at = now - days_ago * DAY
    store._write(m)  # backdated: the document, its registry entry and its vector's attributes
    return m


def test_modes_rank_and_explain(store):
    add(store, "Ana: my car registration is KX-4471 and it expires in March")
    add(store, "Ana: I love driving along the coast on sunny weekends")
    add(store, "Ana: we adopted a beagle puppy called Pickles")
    text = store.search("KX-4471", user_id="ana", k=3, mode="text", touch=False)
    assert "KX-4471" in text[0].memory.content
    assert text[0].text_score > 0 and text[0].rank == 1
    hybrid = store.search("what's the number plate KX-4471 of my automobile?", user_id="ana",
                          k=3, mode="hybrid", touch=False)
    assert "KX-4471" in hybrid[0].memory.content
    assert [h.rank for h in hybrid] == [1, 2, 3]
    assert all(h.score is not None and 0 <= h.distance <= 2 for h in hybrid)
    assert hybrid[0].score >= hybrid[1].score >= hybrid[2].score
    plain = store.search("puppy", user_id="ana", k=1, touch=False)
    assert plain[0].text_score is None and plain[0].score is None  # the default stays the vector search


def test_hybrid_stays_inside_the_user_scope(store):
    add(store, "Ana: my locker code is 9931", user="ana")
    add(store, "Bo: my locker code is 9931", user="bo")
    for mode in ("text", "hybrid"):
        hits = store.search("locker code 9931", user_id="ana", k=5, mode=mode, touch=False)
        assert hits and {h.memory.user_id for h in hits} == {"ana"}


def test_unknown_mode_is_refused(store):
    with pytest.raises(ValidationError):
        store.search("anything", user_id="ana", mode="bm25")


def test_recency_prefers_the_newer_of_two_versions(store):
    now = time.time()
    add(store, "Ana: I live in a flat in Leeds", days_ago=300, now=now)
    add(store, "Ana: I moved, I live in Walthamstow now", days_ago=5, now=now)
    for i in range(6):
        add(store, f"Ana: note {i} about gardening and tomatoes", days_ago=100, now=now)
    hits = store.search("Where does Ana live?", user_id="ana", k=2, mode="hybrid",
                        recency=rt.Recency(now=now, weight=0.5), touch=False)
    assert "Walthamstow" in hits[0].memory.content
    assert hits[0].recency > hits[1].recency
    assert store.search("Where does Ana live?", user_id="ana", k=1, recency=True, touch=False)[0].recency is not None


def test_bm25_counts_words_over_the_given_documents():
    docs = {"boiler": {"m1": "Ana: the plumber fixed the boiler"}, "ana": {"m1": "Ana: the plumber fixed the boiler",
                                                                       "m2": "Ana: hello"}}
    scores = rt.bm25(docs, {"boiler": 1, "ana": 9}, total=10)
    assert scores["m1"] > scores["m2"] > 0
    assert rt.idf(10, 1) > rt.idf(10, 9) > 0
    assert rt.bm25({"boiler": {}}, {"boiler": 0}, total=0) == {}


def test_text_scores_use_only_this_users_memories(store):
    """BM25 statistics are the user's own: another user's memories never move this user's scores."""
    add(store, "Ana: the garden shed needs paint", user="ana")
    add(store, "Ana: the boiler broke again", user="ana")
    before = {h.memory.content: h.text_score for h in store.search("garden boiler", user_id="ana", k=5, mode="text")}
    other = "a|b {x}*"
    store.add_many([{"content": f"garden note {i}: tomatoes in the garden", "user_id": other} for i in range(30)])
    after = store.search("garden boiler", user_id="ana", k=5, mode="text")
    assert {h.memory.content: h.text_score for h in after} == before
    assert {h.memory.user_id for h in after} == {"ana"}
    assert {h.memory.user_id for h in store.search("garden", user_id=other, k=50, mode="hybrid")} == {other}


def test_a_search_writes_no_memory_document(store, r):
    """Reads record "last used" in the owner's access set; the documents (and so the index) stay untouched."""
    users = ("ana", "a|b {x}*")
    for user in users:
        for text in ("I swim on Mondays", "My sister lives in Porto", "The boiler broke in May"):
            add(store, f"{user}: {text}", user=user)
    docs = {k: r.execute_command("JSON.GET", k) for k in r.scan_iter(match=f"{store.namespace}:memory:*")}
    vector = store.embedder.embed("When does Ana swim?")
    writes = {k: v["calls"] for k, v in r.info("commandstats").items() if k.startswith("cmdstat_json.")}
    for mode in ("vector", "text", "hybrid"):
        hits = store.search("When does Ana swim?", user_id="ana", k=2, mode=mode, vector=vector, recency=mode == "hybrid")
        assert hits and all(h.memory.user_id == "ana" for h in hits)
    after = {k: v["calls"] for k, v in r.info("commandstats").items() if k.startswith("cmdstat_json.")}
    assert {k: after[k] for k in writes if "get" not in k} == {k: v for k, v in writes.items() if "get" not in k}
    assert set(after) - set(writes) <= {"cmdstat_json.get", "cmdstat_json.mget"}
    assert {k: r.execute_command("JSON.GET", k) for k in docs} == docs
    used = store.last_used(["ana"], [h.memory.id for h in hits])
    assert set(used) == {h.memory.id for h in hits} and all(u <= time.time() for u in used.values())
    assert store.last_used([users[1]], [h.memory.id for h in hits]) == {}
    assert r.exists(store.access_key("ana")) and not r.exists(store.access_key(users[1]))
    store.forget_user("ana")
    assert not r.exists(store.access_key("ana"))


def test_recency_and_forgetting_read_the_access_set(store):
    from memorykit.memory import forgetting as fg

    now = time.time()
    used = add(store, "Ana: my locker code is 9931", days_ago=200, now=now)
    idle = add(store, "Ana: I once tried paragliding", days_ago=200, now=now)
    add(store, "a|b: my locker code is 9931", user="a|b", days_ago=200, now=now)
    store.search("locker code", user_id="ana", k=1, mode="hybrid")  # recorded as used just now
    plan = fg.plan(store, fg.ForgettingPolicy(max_inactive_days=30), now=now + 60)
    assert {f.id for f in plan} == {idle.id} | {m.id for m in store.list("a|b")}
    hit = store.search("locker code", user_id="ana", k=1, mode="hybrid", recency=rt.Recency(now=now + 60), touch=False)
    assert hit[0].memory.id == used.id and hit[0].recency > 0.5 and hit[0].memory.last_accessed >= now
    fg.forget(store, fg.ForgettingPolicy(max_inactive_days=30), user_id="ana", now=now + 60)
    assert store.last_used(["ana"], [idle.id, used.id]).keys() == {used.id}


def test_hybrid_search_keeps_the_callers_filters(store):
    now = utc(2024, 1, 1)
    add(store, "I went to a pottery class", speaker="Maya", days_ago=200, now=now)
    add(store, "I went to a pottery class too", speaker="Tom", days_ago=10, now=now)
    only = store.search("pottery class", user_id="ana", k=5, mode="hybrid", touch=False, topics=["maya"],
                        filters=Num("valid_from") < now - 100 * DAY)
    assert [h.memory.topics for h in only] == [["maya"]]


def test_search_terms_fold_accents_name_symbols_and_pair_cjk():
    assert rt.words("I write C++ and C#, F# too") == ["write", "cplusplus", "csharp", "fsharp"]
    assert rt.words("Zürich, São Paulo, naïve CAFÉ, Straße") == ["zurich", "sao", "paulo", "naive", "cafe", "strasse"]
    assert rt.words("我喜欢北京烤鸭") == ["我喜", "喜欢", "欢北", "北京", "京烤", "烤鸭"]
    assert rt.words("ジャズ") == ["ジャ", "ャズ"]  # kana keep their voicing marks
    assert rt.words("#hashtag a+b issue#5") == ["hashtag", "issue"]  # a symbol inside or before a word: no name
    assert rt.index_terms("What did Maya's dog eat?") is None  # English text: no extra field
    assert rt.index_terms("I moved to Zürich to write C++") == "zurich cplusplus"


@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_text_search_finds_accents_symbols_and_cjk_in_the_users_own_memories(store, mode):
    for text in ("Ana: I write most of my code in C++ these days", "Ana: my team moved from Java to C# last year",
                 "Ana: I lived in Zürich near the lake", "Ana: breakfast is a café au lait",
                 "Ana: 我最喜欢吃北京烤鸭", "Ana: 東京に住んでいます", "Ana: we adopted a beagle puppy"):
        add(store, text)
    add(store, "Bo: I write C++ and live in Zurich", user="bo")
    expected = {"C++": "C++", "c#": "C#", "Zurich": "Zürich", "ZÜRICH": "Zürich", "cafe": "café", "北京": "北京",
                "烤鸭": "烤鸭", "東京": "東京"}
    for query, needle in expected.items():
        hits = store.search(query, user_id="ana", k=2, mode=mode, touch=False)
        assert needle in hits[0].memory.content and hits[0].text_score > 0, query
        assert {h.memory.user_id for h in hits} == {"ana"}
    assert len(store.search("C++", user_id="ana", k=5, mode="text", touch=False)) == 1  # not the C# memory


def test_terms_follow_an_update_and_plain_english_stores_none(store, r):
    m = add(store, "Ana: I live in Zürich")
    assert r.json().get(store.key(m.id, "ana"), "$.terms") == ["zurich"]
    store.update(m.id, "Ana: I live in Genève now", user_id="ana")
    assert [h.memory.id for h in store.search("Geneve", user_id="ana", mode="text", touch=False)] == [m.id]
    assert store.search("Zurich", user_id="ana", mode="text", touch=False) == []
    store.update(m.id, "Ana: I live in Leeds now", user_id="ana")
    assert r.json().get(store.key(m.id, "ana"), "$.terms") == []  # removed, not left stale
    assert store.get(m.id, user_id="ana").content == "Ana: I live in Leeds now"


def test_text_search_across_scripts_apostrophes_and_underscores(store):
    texts = {"Москва": "Ana: МОСКВА is where I grew up", "O'Brien": "Ana: my boss is Mr O'Brien",
             "hotel": "Ana: we slept at l'hôtel du lac", "retries": "Ana: set max_retries to 5",
             "Lodz": "Ana: my aunt lives in Łódź", "猫": "Ana: 我的猫很可爱", "C++": "Ana: 我用C++写代码",
             "Ｃ＃": "Ana: I code in C#10 at work",
             "qux": r"Ana: escaped foo\-bar and baz\.qux"}
    for text in texts.values():
        add(store, text)
    for query, text in texts.items():
        hits = store.search(query, user_id="ana", k=1, mode="text", touch=False)
        assert hits and hits[0].memory.content == text, query
    long_query = "北京" * 2000  # one term per pair of characters, bounded
    assert len(rt.query_terms(long_query)) <= rt.MAX_QUERY_TERMS


def test_backfill_gives_older_memories_their_terms_and_leaves_a_changed_one(store, r, ns):
    old = [add(store, "Ana: my old café in Genève"), add(store, "Ana: I moved to Zürich")]
    for m in old:  # as written before the terms field
        r.json().delete(store.key(m.id, "ana"), "$.terms")
    assert store.search("cafe", user_id="ana", mode="text", touch=False) == []
    assert rt.backfill_terms(r, ns) == 2
    assert [h.memory.id for h in store.search("Geneve cafe", user_id="ana", k=1, mode="text", touch=False)] == [old[0].id]
    assert [h.memory.id for h in store.search("Zurich", user_id="ana", k=1, mode="text", touch=False)] == [old[1].id]
    assert rt.backfill_terms(r, ns) == 0  # run again: nothing to change
    stale = r.json().get(store.key(old[1].id, "ana"), "$.content")[0]
    store.update(old[1].id, "Ana: I moved to Lyon", user_id="ana")  # changed between the read and the write
    assert r.register_script(rt._SET_TERMS)(keys=[store.key(old[1].id, "ana")], args=[stale, '"zurich"']) == 0
    assert r.json().get(store.key(old[1].id, "ana"), "$.terms") == []
