"""The offline stand-in's tool model and feedback models (issue #29): how they are built and what they do.

The independent evaluation sets (``data/independent/``) are only scored here, in aggregate, with
floors a margin under what was measured; the models never read them.
"""
from __future__ import annotations

import json

import pytest

from memorykit.config import data_path
from memorykit.offline.feedback import analyze, signal_of
from memorykit.offline.feedback_model import TRAINING_FILES, feedback_model, labelled_windows
from memorykit.offline.tool_model import THRESHOLDS, labelled_questions, tool_model


def _eval_rows(name: str) -> list[dict]:
    return [json.loads(x) for x in data_path("independent", f"{name}.jsonl").read_text().splitlines() if x.strip()]


# ---------------------------------------------------------------- the tool model
def test_tool_model_trains_on_both_sources_and_never_on_evaluation_sets():
    rows = labelled_questions()
    texts = {r.text for r in rows}
    assert any(r.dev for r in rows) and not all(r.dev for r in rows)
    assert len(rows) >= 400                        # the course's 227 rows and the 232 independent ones
    heldout = [json.loads(x)["query"] for x in data_path("routes", "tools_heldout.jsonl").read_text().splitlines()]
    assert not texts & set(heldout) and not texts & {r["query"] for r in _eval_rows("tools")}


def test_tool_model_threshold_comes_from_the_dev_split():
    m = tool_model()
    assert m.threshold in THRESHOLDS and m.n_dev == sum(r.dev for r in labelled_questions())
    assert m.dev_accuracy >= 0.8, m.dev_accuracy


@pytest.mark.parametrize("query, tools", [
    ("how many hrs did i sleep last wk", ["get_sleep_analysis"]),
    ("Could you kindly compare my step count with my sleep this month?", ["get_health_metrics", "get_sleep_analysis"]),
    ("What is the capital of Portugal?", []),
    ("In general, how much water should an adult drink a day?", []),
])
def test_tool_model_on_new_phrasing(query, tools):
    assert sorted(tool_model().predict(query)) == tools


def test_a_closer_stored_pattern_replaces_the_nearest_question_vote():
    m = tool_model()
    q = "did my workouts help me hit the goal I set?"
    v = m._embed([q])
    base = m.fitted.scores(v, [q.lower()], [None], m.tools)[0]
    pattern = m.fitted.scores(v, [q.lower()], [(["get_sleep_analysis"], 0.999)], m.tools)[0]
    sleep = m.tools.index("get_sleep_analysis")
    assert pattern[sleep] > base[sleep]
    far = m.fitted.scores(v, [q.lower()], [(["get_sleep_analysis"], 0.1)], m.tools)[0]
    assert list(far) == list(base)                 # a pattern farther than the nearest question changes nothing


# ---------------------------------------------------------------- feedback
def test_feedback_windows_have_labels_and_targets():
    windows = labelled_windows()
    assert len(windows) >= 150 and any(w.dev for w in windows)
    earlier = [(j, k) for w in windows for j, k in enumerate(w.targets) if k >= 0 and k < j - 1]
    assert earlier, "some feedback is about an earlier answer than the latest"
    assert feedback_model().threshold > 0


def test_feedback_training_files_share_no_turn_with_the_evaluation_set():
    files = ("feedback.jsonl", "feedback_2.jsonl", "feedback_3.jsonl", "feedback_4.jsonl")
    assert len(labelled_windows(files)) == 786
    assert set(TRAINING_FILES) == set(files) | {"feedback_5.jsonl", "feedback_7.jsonl"}
    evaluation = {u for row in _eval_rows("feedback") for u, _ in row["exchanges"]}
    shared = {f: sum(u in evaluation for w in labelled_windows((f,)) for u, _ in w.pairs) for f in files}
    # Counted when feedback_4 came in: 3, 2, 1 short common turns in the older files (not read), none in it.
    assert shared["feedback_4.jsonl"] == 0 and sum(shared.values()) <= 6, shared


@pytest.mark.parametrize("text, label", [
    ("that's not right at all, I never run 20 km", "negative"),
    ("great, that's just what I needed, cheers", "positive"),
    ("ok and what about my heart rate on Monday?", None),
])
def test_turn_signals(text, label):
    assert signal_of(text, previous="How far did I run on Sunday?") == label


def test_feedback_is_attached_to_the_answer_it_quotes():
    window = [("How many steps did I take on Tuesday?", "You took 12,400 steps on Tuesday."),
              ("And how long did I sleep last night?", "You slept 6.5 hours last night."),
              ("What was my resting heart rate this morning?", "58 bpm this morning."),
              ("12,400 steps on Tuesday can't be right, I was in bed with the flu all day", "")]
    found = analyze(window)
    assert [(f.query, f.label) for f in found] == [("How many steps did I take on Tuesday?", "negative")]
    assert found[0].response == "You took 12,400 steps on Tuesday."


def test_feedback_on_the_latest_answer_by_default():
    window = [("What's my weekly workout count?", "You worked out 4 times this week."),
              ("Thanks, that's really helpful!", "")]
    assert [(f.query, f.label) for f in analyze(window)] == [("What's my weekly workout count?", "positive")]


def test_a_turn_whose_sentences_judge_two_answers_gives_one_item_each():
    """The rule splits a turn only when its feedback sentences attach to different exchanges surely enough;
    otherwise the turn gives one item, labelled and attached as a whole."""
    from memorykit.offline.feedback_model import NEVER, FeedbackModel, Reading, Rule

    parts = (Reading(2, 0.9, 0.1, (0.9, 0.1)), Reading(2, 0.8, 0.9, (0.2, 0.8)))   # praise, then a complaint
    turn = Reading(2, 0.9, 0.7, (0.3, 0.7), parts)
    assert FeedbackModel.choose(turn, Rule(0.5, parts=0.4)) == [(2, 0, "positive"), (2, 1, "negative")]
    assert FeedbackModel.choose(turn, Rule(0.5, parts=0.7)) == [(2, 1, "negative")]      # not sure enough
    assert FeedbackModel.choose(turn, Rule(0.5, parts=NEVER)) == [(2, 1, "negative")]
    assert FeedbackModel.choose(turn, Rule(0.85, parts=0.4)) == [(2, 1, "negative")]     # one part is not feedback
    assert FeedbackModel.choose(turn, Rule(0.95, parts=0.4)) == []


def test_the_second_stage_decides_feedback_with_a_share_of_the_first():
    """With a second stage, P(feedback) read against the threshold is its share (``Rule.blend``) of the stage's
    P plus the rest of the first stage's; the shipped model has the stage on and chose its rule on dev windows."""
    from memorykit.offline.feedback_model import STAGE, STAGE_BLENDS, Reading, Rule, feedback_model, FeedbackModel

    turn = Reading(1, 0.62, 0.65, (1.0,), (), 0.31)         # the first stage fairly sure, the second not
    assert FeedbackModel.choose(turn, Rule(0.5, blend=1.0)) == []
    assert FeedbackModel.choose(turn, Rule(0.5, blend=0.0)) == [(1, 0, "negative")]
    assert FeedbackModel.choose(turn, Rule(0.35, blend=0.75)) == [(1, 0, "negative")]     # 0.39
    assert FeedbackModel.choose(Reading(1, 0.62, 0.65, (1.0,)), Rule(0.5, blend=1.0)) == [(1, 0, "negative")]
    model = feedback_model()
    assert STAGE and model.stage is not None and model.rule.blend in STAGE_BLENDS
    assert all(r.second >= 0 for r in model.readings([("How far did I run?", "5 km."), ("wrong, it was 8", "")]))


def test_praise_for_one_answer_and_a_complaint_about_another_are_both_found():
    window = [("How many steps did I take on Tuesday?", "You took 12,400 steps on Tuesday."),
              ("How long did I sleep last night?", "You slept 6.5 hours last night."),
              ("The sleep number is spot on, thanks. But 12,400 steps on Tuesday is wrong, I was in bed with the flu.",
               "")]
    assert sorted((f.query, f.label) for f in analyze(window)) == [
        ("How long did I sleep last night?", "positive"), ("How many steps did I take on Tuesday?", "negative")]


def test_blank_turns_and_answers_are_read_without_error():
    window = [("", ""), ("How did I sleep?", ""), ("  ", "7 h"), ("wrong!", "")]
    assert all(f.query.strip() and f.response.strip() for f in analyze(window))


def test_a_new_question_is_not_feedback():
    window = [("How did I sleep on Friday?", "7.1 hours on Friday."),
              ("What about my step count on Saturday?", "9,800 steps on Saturday.")]
    assert analyze(window) == []


def test_feedback_model_is_cached_and_run_time_turns_get_one_at_a_time_vectors():
    """The fit (training texts embedded in batches) is pickled without its vectors; at run time a training
    turn gets exactly the vector ``embed`` gives it, never the batched one (up to ~3e-7 off)."""
    import pickle

    from memorykit.course.routing import get_router

    m = feedback_model()
    assert "vectors" not in pickle.loads(pickle.dumps(m)).__dict__
    turn = next(w.pairs[j][0] for w in labelled_windows() for j in range(1, len(w.pairs)) if w.labels[j] != "none")
    embedder = get_router("feedback").embedder
    assert m.vectors([turn])[0].tolist() == pytest.approx(embedder.embed(turn), abs=0) and feedback_model() is m


def test_the_run_time_vector_memo_is_bounded(monkeypatch):
    """Users' turns do not pile up in a long-lived process: the memo empties when full, answers stay right."""
    from memorykit.offline.feedback_model import Embeddings

    m = feedback_model()
    memo = Embeddings(m.vectors.embedder, size=3)
    monkeypatch.setattr(m, "vectors", memo)
    turns = [f"Thanks, that worked for order {i}!" for i in range(5)] + [""]
    for i in range(len(turns) - 1):
        got = memo(turns[i:i + 2])
        assert len(memo) <= 3 and got.shape == (2, memo.embedder.dims)
        assert got[0].tolist() == pytest.approx(memo.embedder.embed(turns[i]), abs=0)
    assert signal_of("Perfect, thank you!", "How did I sleep?") == "positive" and len(memo) <= 3


# ---------------------------------------------------------------- independent sets (measure only)
# Measured when the models were built: feedback F1 0.76 (P 0.72, R 0.80, 61 windows; 2026-11-26, later).
def test_feedback_on_the_independent_windows(llm):
    from memorykit.course.procedural_eval import feedback_scores, independent

    prf, _ = feedback_scores(independent("feedback"), llm)
    assert prf.f1 >= 0.70 and prf.precision >= 0.65, prf
