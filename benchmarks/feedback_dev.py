"""Dev harness for the offline feedback analyzer (issue #29): grouped cross-validation over the
independent TRAINING windows, plus the old held-out split and the course's own windows.

Never reads ``data/independent/`` (the evaluation sets). Scores (query, label) pairs like
``procedural_eval.feedback_scores`` and splits the misses into their causes: a turn missed or
invented (detection), the wrong polarity, or the right turn attached to the wrong exchange::

    python benchmarks/feedback_dev.py                      # 5-fold CV on every training file
    python benchmarks/feedback_dev.py --files feedback.jsonl feedback_2.jsonl --folds 5
"""
from __future__ import annotations

import argparse
import json
import zlib
from collections import Counter

from memorykit.config import data_path
from memorykit.course.procedural_eval import PRF, heldout, read_jsonl
from memorykit.course.routing import get_router
from memorykit.offline import feedback_model as fm
from memorykit.offline.feedback import analyze

ALL_FILES = ("feedback.jsonl", "feedback_2.jsonl", "feedback_3.jsonl", "feedback_4.jsonl")


def score(rows, model) -> PRF:
    """(query, label) pairs found by the offline analyzer with ``model`` against the expected ones."""
    tp = fp = fn = 0
    for w in rows:
        got = {(f.query, "negative" if f.label == "correction" else f.label)
               for f in analyze([tuple(x) for x in w["exchanges"]], model)}
        want = {(e["query"], e["label"]) for e in w["expected"]}
        tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
    return PRF(tp, fp, fn)


def components(windows, model, causes: Counter) -> None:
    """Turn-level causes: detection (tp/fp/fn of feedback turns), polarity and attachment of found turns."""
    for w in windows:
        found = {j: (k, label) for j, k, label in model.found(w.pairs)}
        for j in range(1, len(w.pairs)):
            truth = w.labels[j] != "none"
            if j in found and truth:
                causes["turn tp"] += 1
                k, label = found[j]
                causes["polarity ok" if label == w.labels[j] else "polarity wrong"] += 1
                causes["attach ok" if k == w.targets[j] else f"attach wrong (true {j - 1 - w.targets[j]} back)"] += 1
            elif j in found:
                causes["turn fp"] += 1
            elif truth:
                causes["turn fn"] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", nargs="+", default=[f for f in ALL_FILES if data_path("independent_train", f).exists()])
    ap.add_argument("--train-files", nargs="+", help="files the final model trains on (default: the shipped ones)")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    embedder = get_router("feedback").embedder
    sentences = fm.course_sentences()
    rows = [r for f in args.files for r in read_jsonl(data_path("independent_train", f))]
    total, causes = PRF(0, 0, 0), Counter()
    for fold in range(args.folds):
        def held(r):
            return zlib.crc32(("fold" + r["id"]).encode()) % args.folds == fold
        model = fm.FeedbackModel(embedder, [fm.window_of(r) for r in rows if not held(r)], sentences)
        test = [r for r in rows if held(r)]
        p = score(test, model)
        components([fm.window_of(r) for r in test], model, causes)
        total = PRF(total.tp + p.tp, total.fp + p.fp, total.fn + p.fn)
        print(f"fold {fold}: {p}  threshold {model.threshold}", flush=True)
    print(f"dev CV ({len(rows)} windows, {args.files}): {total}")
    print("  causes:", dict(sorted(causes.items())))
    final = fm.FeedbackModel(embedder, fm.labelled_windows(args.train_files or fm.TRAINING_FILES), sentences)
    print(f"old held-out: {score(heldout('feedback'), final)}")
    course = read_jsonl(data_path("feedback", "windows.jsonl"))
    bad = [w["id"] for w in course if score([w], final).f1 < 1.0 and (w["expected"] or score([w], final).fp)]
    print(f"course windows: {score(course, final)}  wrong: {bad}")


if __name__ == "__main__":
    main()
