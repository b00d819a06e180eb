"""Dev harness for the offline feedback analyzer (issue #29): grouped cross-validation over the
independent TRAINING windows, plus the old held-out split and the course's own windows.

Never reads ``data/independent/`` (the evaluation sets). Scores (query, label) pairs like
``procedural_eval.feedback_scores`` and splits the misses into their causes: a turn missed or
invented (detection), the wrong polarity, or the right turn attached to the wrong exchange::

    python benchmarks/feedback_dev.py                      # 5-fold CV on every training file
    python benchmarks/feedback_dev.py --files feedback.jsonl feedback_2.jsonl --folds 5
    python benchmarks/feedback_dev.py --encoder --reuse          # with the cross-encoder, trained per fold (~30 min)

With ``--encoder`` each fold also trains a cross-encoder's LoRA adapters (``benchmarks/feedback_encoder.py``,
an experiment that is not shipped) on its training windows minus the threshold-choosing dev windows, and
scores the turn model blended with it (all three probabilities, or with ``--polarity-only`` positive vs
negative only); then the shipped setup with an encoder trained on every file, on the old held-out split
and the course's windows.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from collections import Counter

from memorykit.config import data_path
from memorykit.course.procedural_eval import PRF, heldout, read_jsonl
from memorykit.course.routing import get_router
from memorykit.offline import feedback_model as fm
from memorykit.offline.feedback import analyze

ALL_FILES = ("feedback.jsonl", "feedback_2.jsonl", "feedback_3.jsonl", "feedback_4.jsonl", "feedback_5.jsonl")


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


def encoder_cv(args, rows, embedder, sentences) -> None:
    """Grouped CV of the turn model blended with a cross-encoder trained on each fold, then the shipped setup."""
    import torch

    import feedback_encoder as ft
    from feedback_encoder import BlendedModel, PairEncoder

    torch.set_num_threads(args.threads)
    t0 = time.time()
    every = [fm.window_of(r) for r in rows]
    stored = f"/tmp/feedback_lower2_{args.tuned}.pt"       # the frozen layers' output, reused across runs
    cache = torch.load(stored) if args.reuse and os.path.exists(stored) else {}
    new = PairEncoder(args.tuned)
    cache = ft.lower_cache(new, [p for p, _ in ft.turn_examples(every, sentences)], cache)
    torch.save(cache, stored)
    print(f"frozen layers cached for {len(cache)} pairs in {time.time() - t0:.0f} s", flush=True)
    totals = {b: PRF(0, 0, 0) for b in args.blends}
    for fold in range(args.folds):
        def held(r):
            return zlib.crc32(("fold" + r["id"]).encode()) % args.folds == fold
        train = [fm.window_of(r) for r in rows if not held(r)]
        t0 = time.time()
        encoder = ft.fit(ft.turn_examples([w for w in train if not w.dev], sentences), cache, epochs=args.epochs,
                         lr=args.lr, encoder=PairEncoder(args.tuned))
        took = time.time() - t0
        model = BlendedModel(embedder, train, sentences, encoder, args.blends[0], args.polarity_only)
        test = [r for r in rows if held(r)]
        for b in args.blends:
            p = score(test, model.recalibrated(b))
            totals[b] = PRF(totals[b].tp + p.tp, totals[b].fp + p.fp, totals[b].fn + p.fn)
            print(f"fold {fold} blend {b}: {p}  threshold {model.threshold}  (encoder trained in {took:.0f} s)",
                  flush=True)
    for b in args.blends:
        print(f"dev CV blend {b} ({len(rows)} windows): {totals[b]}")
    files = args.encoder_files or [f for f in ALL_FILES if data_path("independent_train", f).exists()]
    windows = [w for w in fm.labelled_windows(files) if not w.dev]
    encoder = ft.fit(ft.turn_examples(windows, sentences), ft.lower_cache(new, [
        p for p, _ in ft.turn_examples(windows, sentences)], cache), epochs=args.epochs, lr=args.lr,
        encoder=PairEncoder(args.tuned))
    final = BlendedModel(embedder, fm.labelled_windows(args.train_files or fm.TRAINING_FILES), sentences,
                         encoder, args.blends[0], args.polarity_only)
    course = read_jsonl(data_path("feedback", "windows.jsonl"))
    for b in args.blends:
        final.recalibrated(b)
        bad = [w["id"] for w in course if score([w], final).f1 < 1.0 and (w["expected"] or score([w], final).fp)]
        print(f"shipped setup, blend {b}, threshold {final.threshold}: old held-out {score(heldout('feedback'), final)}"
              f"  course windows {score(course, final)}  wrong: {bad}", flush=True)
    if args.save:
        torch.save(encoder.adapter_state(), args.save)
        print(f"adapter saved to {args.save}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", nargs="+", default=[f for f in ALL_FILES if data_path("independent_train", f).exists()])
    ap.add_argument("--train-files", nargs="+", help="files the final model trains on (default: the shipped ones)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--encoder", action="store_true", help="cross-validate the turn model blended with the cross-encoder")
    ap.add_argument("--blends", nargs="+", type=float, default=[0.0, 0.2, 0.3])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tuned", type=int, default=1, help="top layers with adapters (0: a head on the frozen model)")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--polarity-only", action="store_true", help="blend the cross-encoder into polarity only")
    ap.add_argument("--reuse", action="store_true", help="reuse the frozen layers' output cached in /tmp")
    ap.add_argument("--encoder-files", nargs="+", help="files the final cross-encoder trains on (default: all)")
    ap.add_argument("--save", help="write the final adapter (a state dict) here")
    args = ap.parse_args()
    embedder = get_router("feedback").embedder
    sentences = fm.course_sentences()
    rows = [r for f in args.files for r in read_jsonl(data_path("independent_train", f))]
    if args.encoder:
        encoder_cv(args, rows, embedder, sentences)
        return
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
