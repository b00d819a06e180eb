"""The feedback analyzer's second stage: is a user turn feedback, decided again from the first stage's reading.

The turn model (:mod:`.feedback_model`) reads a turn's words; many turns it takes for feedback are new information or
a correction of the user's own words ("oops i meant 200 kcal", "fyi im on blood thinners"). The second stage is a
small logistic regression over how sure the first stage is of the turn and of each of its sentences, and over what
tells an evaluation of the previous answer from new information: closeness to the user's previous question against
the answer, numbers and topic words the turn shares with the answers against only with the user's own turns,
numbers new to the window, a question mark (:func:`stage_features`). It learns from readings of turns the first
stage was not trained on: the dev windows and, cross-fitted, every training window (each part read by a
feedback-or-none trained without it). Measured in ``benchmarks/feedback_dev.py`` (2026-11-26).
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from .text import content_words


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1.0 - 1e-4)
    return float(np.log(p / (1.0 - p)))


def stage_features(pairs: Sequence[tuple[str, str]], r, vectors) -> list[float]:
    """What the second stage reads about turn ``r.j`` (a :class:`.feedback_model.Reading`): how sure the first
    stage is of the turn and of its sentences (the surest, the least sure, the last, how many), of its polarity and
    exchange, and whether the turn evaluates the previous answer or adds to the user's own words."""
    from .feedback_model import numbers

    j, turn = r.j, pairs[r.j][0]
    bits = [s.given for s in r.parts] or [r.given]
    t, q, a = vectors([turn, pairs[j - 1][0], pairs[j - 1][1]])
    answers = " ".join(p[1] for p in pairs[:j])
    own = " ".join(p[0] for p in pairs[:j])
    nums, said, mine = numbers(turn), numbers(answers), numbers(own)
    words, aw, ow = content_words(turn), content_words(answers), content_words(own)
    n = max(len(words), 1)
    return [_logit(r.given), _logit(max(bits)), _logit(min(bits)), _logit(bits[-1]), float(np.log(len(bits))),
            abs(r.negative - 0.5), max(r.attach), r.attach_margin, float(t @ q), float(t @ a), float(t @ q - t @ a),
            float(len(nums & said) > 0), float(len((nums & mine) - said) > 0), float(len(nums - said - mine) > 0),
            len(words & aw) / n, len((words & ow) - aw) / n, float("?" in turn), float(j > 1)]


NAMES = ("given", "surest", "least sure", "last", "sentences", "polarity", "exchange", "exchange margin",
         "question", "answer", "question - answer", "numbers said", "numbers own", "numbers new", "words said",
         "words own", "question mark", "later turn")
POSITION = ("exchange", "exchange margin", "later turn")     # where the turn sits in its window


class Stage:
    """The fitted second stage: a logistic regression over the features ``keep`` (indices into :data:`NAMES`)."""

    def __init__(self, lr, keep: tuple[int, ...]):
        self.lr, self.keep = lr, keep

    def predict_proba(self, x):
        return self.lr.predict_proba(np.asarray(x)[:, list(self.keep)])


def fit_stage(model, windows, c: float, cross: tuple | None = None, drop: tuple[str, ...] = ()):
    """The second stage of ``model`` (its first stage fitted without the dev ``windows``), from readings of the dev
    windows and, with ``cross`` = (features, feedback?, dev?, every training window, parts), of the training
    windows: each part read by a feedback-or-none refit on the other parts."""
    from sklearn.linear_model import LogisticRegression

    from .feedback_model import C

    xs, ys = [], []

    def read(ws):
        for w in ws:
            for r in model.readings(w.pairs, True):
                xs.append(stage_features(w.pairs, r, model.vectors))
                ys.append(w.labels[r.j] != "none")
    read(windows)
    if cross is not None:
        x, given, dev, every, parts = cross
        turns = [i for i, w in enumerate(every) for _ in range(1, len(w.pairs))]
        part_of = [zlib.crc32(w.pairs[0][0].encode()) % parts for w in every]
        part = np.asarray([part_of[i] for i in turns] + [-1] * (x.shape[0] - len(turns)))   # -1: course sentences
        kept = model.turns
        try:
            for k in range(parts):
                train = ~dev & (part != k)
                model.turns = (LogisticRegression(C=C, max_iter=5000, class_weight="balanced").fit(
                    x[train], given[train]), kept[1])
                read([w for i, w in enumerate(every) if not w.dev and part_of[i] == k])
        finally:
            model.turns = kept
    keep = tuple(i for i, n in enumerate(NAMES) if n not in drop)
    return Stage(LogisticRegression(C=c, max_iter=5000, class_weight="balanced").fit(np.asarray(xs)[:, list(keep)], ys),
                 keep)
