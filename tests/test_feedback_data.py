"""The feedback training data written apart from the method (issue #29), checked by aggregate counts only."""
from __future__ import annotations

from memorykit.course.procedural_eval import heldout, independent
from memorykit.offline.feedback_model import labelled_windows


def shared_with_evaluation(windows) -> int:
    """How many user turns of these training windows equal a turn of the evaluation or the old held-out windows."""
    kept_apart = {u for row in independent("feedback") + heldout("feedback") for u, _ in row["exchanges"]}
    return sum(u in kept_apart for w in windows for u, _ in w.pairs)


def test_the_fifth_feedback_set_shares_no_turn_with_the_evaluation_set_or_the_held_out_split():
    windows = labelled_windows(("feedback_5.jsonl",))
    assert len(windows) == 220 and sum(label != "none" for w in windows for label in w.labels) == 180
    assert sum(k < j - 1 for w in windows for j, k in enumerate(w.targets) if k >= 0) == 52   # about an earlier answer
    assert shared_with_evaluation(windows) == 0



def test_the_sixth_feedback_set_shares_no_turn_with_the_evaluation_set_or_the_held_out_split():
    windows = labelled_windows(("feedback_6.jsonl",))
    assert len(windows) == 200 and sum(label != "none" for w in windows for label in w.labels) == 180
    assert sum(label == "negative" for w in windows for label in w.labels) == 90
    assert sum(k < j - 1 for w in windows for j, k in enumerate(w.targets) if k >= 0) == 61   # about an earlier answer
    assert shared_with_evaluation(windows) == 0


def test_the_seventh_feedback_set_shares_no_turn_with_the_evaluation_set_or_the_held_out_split():
    windows = labelled_windows(("feedback_7.jsonl",))
    assert len(windows) == 160 and sum(label != "none" for w in windows for label in w.labels) == 102
    assert sum(not any(label != "none" for label in w.labels) for w in windows) == 61      # no feedback at all
    assert sum(k < j - 1 for w in windows for j, k in enumerate(w.targets) if k >= 0) == 34   # about an earlier answer
    assert shared_with_evaluation(windows) == 0


def test_the_eighth_feedback_set_shares_no_turn_with_the_evaluation_set_or_the_held_out_split():
    windows = labelled_windows(("feedback_8.jsonl",))
    assert len(windows) == 200 and sum(label != "none" for w in windows for label in w.labels) == 133
    assert sum(not any(label != "none" for label in w.labels) for w in windows) == 84      # no feedback at all
    assert sum(k < j - 1 for w in windows for j, k in enumerate(w.targets) if k >= 0) == 27   # about an earlier answer
    assert shared_with_evaluation(windows) == 0
