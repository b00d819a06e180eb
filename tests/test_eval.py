"""The evaluation harness: metrics, bootstrap intervals, the shipped set and LoCoMo / LongMemEval files."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from memorykit.course import eval as ev
from memorykit.memory.long_term import MemoryStore


def test_recall_any_and_all():
    assert ev.recall_at_k(["a", "b", "c"], ["c"], 3) == 1.0
    assert ev.recall_at_k(["a", "b", "c"], ["c"], 2) == 0.0
    assert ev.recall_at_k(["a", "b"], ["a", "z"], 2) == 1.0
    assert ev.recall_at_k(["a", "b"], ["a", "z"], 2, need="all") == 0.0
    assert ev.recall_at_k(["z", "a"], ["a", "z"], 2, need="all") == 1.0
    assert ev.recall_at_k(["a"], [], 5) == 0.0


def test_mrr_and_ndcg():
    assert ev.reciprocal_rank(["x", "y", "a"], ["a", "y"]) == pytest.approx(1 / 2)
    assert ev.reciprocal_rank(["x"], ["a"]) == 0.0
    assert ev.ndcg_at_k(["a", "b"], ["a", "b"], 5) == pytest.approx(1.0)
    assert ev.ndcg_at_k(["x", "a"], ["a"], 5) == pytest.approx(1 / 1.5849625, rel=1e-6)
    assert ev.ndcg_at_k(["x", "a"], ["a"], 1) == 0.0
    better, worse = ev.ndcg_at_k(["a", "x", "b"], ["a", "b"], 3), ev.ndcg_at_k(["x", "a", "b"], ["a", "b"], 3)
    assert 0 < worse < better < 1


def test_bootstrap_interval_is_deterministic_and_covers_the_mean():
    values = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1] * 5
    m, lo, hi = ev.bootstrap_ci(values)
    assert m == pytest.approx(0.7) and lo < m < hi and hi - lo < 0.3
    assert ev.bootstrap_ci(values) == (m, lo, hi)
    assert ev.bootstrap_ci([1.0] * 20) == (1.0, 1.0, 1.0)
    d, dlo, dhi = ev.paired_difference([1] * 30, [0] * 15 + [1] * 15)
    assert d == pytest.approx(0.5) and dlo > 0


def test_shipped_set_shape():
    data = ev.load_longmem()
    assert len(data.dialogs) == 10 and len(data.questions) >= 150
    assert Counter(q.kind for q in data.questions).keys() == set(ev.KINDS)
    assert {q.split for q in data.questions} == {"dev", "test"}
    assert len({s for d in data.dialogs for s in d.speakers}) >= 20
    turns = {(d.dialog_id, t.turn_id): t for d in data.dialogs for t in d.turns}
    for q in data.questions:
        assert q.evidence and all((q.dialog_id, e) in turns for e in q.evidence), q.qid
        assert q.asked_at > max(turns[(q.dialog_id, e)].time for e in q.evidence)
    dev, test = data.split("dev"), data.split("test")
    assert not {d.dialog_id for d in dev.dialogs} & {d.dialog_id for d in test.dialogs}
    assert len(dev.questions) + len(test.questions) == len(data.questions)


def test_reads_locomo_and_longmemeval_files(tmp_path):
    locomo = [{"sample_id": "conv-1", "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group."},
                      {"speaker": "Melanie", "dia_id": "D1:2", "text": "Look!", "blip_caption": "a sunset painting"}],
        "session_2_date_time": "7:55 pm on 9 June, 2023",
        "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "I ran a charity race."}]},
        "qa": [{"question": "When did Melanie run a race?", "answer": "June 2023", "evidence": ["D2:1"], "category": 2},
               {"question": "What did Caroline eat?", "adversarial_answer": "pie", "evidence": ["D1:1"], "category": 5}]}]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(locomo))
    data = ev.load_longmem(path)
    assert [t.turn_id for t in data.dialogs[0].turns] == ["D1:1", "D1:2", "D2:1"]
    assert "sunset painting" in data.dialogs[0].turns[1].text
    assert data.dialogs[0].turns[2].time > data.dialogs[0].turns[0].time
    assert [(q.kind, q.evidence) for q in data.questions] == [("temporal", ["D2:1"])]
    assert len(ev.load_longmem(path, include_adversarial=True).questions) == 2

    lme = [{"question_id": "q1", "question_type": "knowledge-update", "question": "Where do I live?",
            "answer": "Porto", "question_date": "2023/05/30 (Tue) 23:40",
            "haystack_session_ids": ["s1"], "haystack_dates": ["2023/05/20 (Sat) 02:21"],
            "haystack_sessions": [[{"role": "user", "content": "I moved to Porto", "has_answer": True},
                                   {"role": "assistant", "content": "Nice!"}]]}]
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(lme))
    data = ev.load_longmem(path)
    assert data.questions[0].evidence == ["s1:0"] and len(data.dialogs[0].turns) == 2


def test_ingest_and_evaluate_one_dialog(r, emb, ns):
    data = ev.load_longmem().split("dev")
    one = ev.LongMemSet(data.dialogs[:1], [q for q in data.questions if q.dialog_id == data.dialogs[0].dialog_id])
    store = MemoryStore(r, emb, namespace=ns)
    turn_of = ev.ingest(store, one)
    assert len(turn_of) == len(one.dialogs[0].turns)
    m = store.get(next(iter(turn_of)), one.dialogs[0].dialog_id)
    assert m.metadata["speaker"] in one.dialogs[0].speakers and m.created_at == m.valid_from < 2e9
    run = ev.evaluate(store, one, turn_of, k=5, mode="hybrid")
    assert len(run.ranked) == len(one.questions) and all(len(x) == 10 for x in run.ranked)
    summary = run.summary(by_kind=True)
    assert set(summary) == {"all"} | {q.kind for q in one.questions}
    assert 0 < summary["all"][0] <= 1
    table = ev.table([run])
    assert list(table.columns)[0] == "all" and table.index.tolist() == ["hybrid"]
