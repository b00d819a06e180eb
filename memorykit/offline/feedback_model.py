"""The offline feedback analyzer's models: is a user turn feedback, and on which earlier answer?

Two small learned models over sentence embeddings (all-MiniLM-L6-v2):

- the turn model, two logistic regressions over the turn's embedding, its character and word
  n-grams and how closely it repeats the previous question: feedback or none, then positive or
  negative (the second with its own n-gram vocabulary, trained on more data, see below);
- the attachment model, a logistic regression that scores each earlier exchange of the window
  for a feedback turn: similarity to its question, its answer and the answer's closest sentence (absolute
  and against the best in the window), numbers quoted from the answer, topic words shared (with that exchange
  alone, with its question) and how far back it is; the best-scoring exchange is the one the turn is about.

Trained on windows written apart from the method (``TRAINING_FILES``: six files of
``data/independent_train/``; ``feedback_6.jsonl`` lowered dev CV) and on the course's labelled
sentences (``data/routes/feedback.jsonl``, turn model only). One window in five (by id) is a dev split
that chooses the :class:`Rule` (how sure the model must be before it reports feedback: abstaining
beats a wrong guess); then all are refit on every row. Positive or negative has the course's sentences
weighted ``SENTENCE_WEIGHT`` and its own n-gram vocabulary. Feedback-or-none also sees a turn of several
sentences in parts (``split``: its head and its last sentence), so "Ok thanks. Now show my workouts" (a
courtesy, then a new request) is learned apart from "That worked, thanks! Now show my workouts".
A turn that judges two answers ("the merge trick worked. the compress one made it blurry") is read
sentence by sentence too: when its feedback sentences attach to different exchanges, each surely enough
(a margin chosen on the dev windows), it gives one item per exchange (``GRID``; the measurements are in
``benchmarks/feedback_dev.py``). Abstaining on an unsure polarity or attachment lowered dev F1 there.
A second stage decides feedback-or-none again (:mod:`.feedback_stage`, ``STAGE``, on since 2026-11-26): P(feedback)
is read as 0.75 of its P and 0.25 of the first stage's (``STAGE_BLENDS``; the stage alone lost an old-split item).
The fit is cached on disk like the other offline models (``fit_cache``; training texts embedded in
batches), so a process loads it instead of refitting on 1,166 windows; run-time turns get vectors of
their own, one at a time. The evaluation sets are never read here.
"""
from __future__ import annotations

import functools
import json
import re
import threading
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..config import data_path
from ..course.routing import get_router, readable
from .fit_cache import cached, fingerprint
from .text import Encoder, content_words, sentences

VERSION = "2"
LABELS = ("none", "positive", "negative")
C = 4.0
THRESHOLDS = tuple(round(0.30 + 0.05 * i, 2) for i in range(9))     # P(feedback) needed: 0.30 .. 0.70
LOW_THRESHOLDS = tuple(round(0.10 + 0.05 * i, 2) for i in range(4)) + THRESHOLDS      # 0.10 .. 0.70
NEVER = 2.0                 # a margin no reading reaches (parts: never two items from one turn)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)?")
ROUTE_LABELS = {"positive": "positive", "negative": "negative", "correction": "negative", "polite": "positive"}


@dataclass(frozen=True)
class Window:
    """A window of (user, assistant) exchanges and, per user turn, its label and target exchange."""

    pairs: tuple[tuple[str, str], ...]
    labels: tuple[str, ...]          # per turn: none / positive / negative (turn 0: none)
    targets: tuple[int, ...]         # per turn: the exchange its feedback is about (-1: none)
    dev: bool
    items: frozenset = frozenset()   # every expected (exchange, label), two from a turn that judges two answers


@dataclass(frozen=True)
class Rule:
    """How sure the model must be before it reports an item (both chosen on the dev windows): P(feedback) at
    least ``threshold``; a turn whose feedback sentences attach to different exchanges, each with its best
    exchange's P ahead of the second's by ``parts``, gives one item per exchange (``NEVER``: one per turn)."""

    threshold: float
    parts: float = NEVER
    blend: float = 1.0

    def given(self, r: "Reading") -> float:
        """P(feedback) of reading ``r`` against the threshold: with a second stage, ``blend`` of its P and the
        rest of the first stage's."""
        return r.given if r.second < 0 else self.blend * r.second + (1.0 - self.blend) * r.given


def grid(name: str, blends: Sequence[float] = (1.0,)) -> tuple[Rule, ...]:
    """Candidate rules: ``threshold`` (0.30 .. 0.70), ``low`` (from 0.10), ``parts`` (low x parts margins), each
    with every second-stage share in ``blends``."""
    return {"threshold": tuple(Rule(t, NEVER, b) for t in THRESHOLDS for b in blends),
            "low": tuple(Rule(t, NEVER, b) for t in LOW_THRESHOLDS for b in blends),
            "parts": tuple(Rule(t, m, b) for t in LOW_THRESHOLDS for m in (NEVER, 0.0, 0.2, 0.4, 0.6, 0.8)
                           for b in blends)}[name]


@dataclass(frozen=True)
class Reading:
    """What the models say about user turn ``j``: P(feedback), P(negative | feedback), P(each earlier
    exchange) and, for a turn of several sentences, the same per sentence (``parts``)."""

    j: int
    given: float
    negative: float
    attach: tuple[float, ...]
    parts: tuple = ()
    second: float = -1.0             # the second stage's P(feedback) (feedback_stage); -1: none

    @property
    def target(self) -> int:
        return int(np.argmax(self.attach))

    @property
    def attach_margin(self) -> float:
        top = sorted(self.attach, reverse=True) + [0.0]
        return top[0] - top[1]


def _read(*parts: str) -> list[dict]:
    path = data_path(*parts)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


TRAINING_FILES = ("feedback.jsonl", "feedback_2.jsonl", "feedback_3.jsonl", "feedback_4.jsonl", "feedback_5.jsonl",
                  "feedback_7.jsonl")
POLARITY_FILES = TRAINING_FILES
GRID = "parts"               # the shipped rules: a threshold, and one item per answer a turn's sentences judge apart
SENTENCE_WEIGHT = 3.0        # the course's sentences among many more window turns in positive-or-negative
STAGE = "cross"              # the second stage (feedback_stage), shipped 2026-11-26: "dev" (fitted on readings of the dev
STAGE_PARTS, STAGE_C = 3, 1.0     # windows) or "cross" (and cross-fitted on thirds of the training windows); its C
STAGE_DROP: tuple[str, ...] = ()  # second-stage features left out (feedback_stage.NAMES)
STAGE_BLENDS = (0.75,)       # shares of the second stage's P(feedback) in the one read (the rest: the first's)
ATTACH_MORE = True           # the attachment model also reads each answer's closest sentence and topic words


def window_of(row: dict) -> Window:
    """One training row (``exchanges``, ``expected`` with ``feedback_text``) as a labelled window."""
    pairs = tuple((str(u or ""), str(a or "")) for u, a in row["exchanges"])
    labels, targets, items = ["none"] * len(pairs), [-1] * len(pairs), set()
    for e in row["expected"]:
        turns = [j for j in range(1, len(pairs)) if pairs[j][0] == e.get("feedback_text")]
        for j in turns[:1]:
            about = [k for k in range(j) if pairs[k][0] == e["query"]]
            if about:
                labels[j], targets[j] = e["label"], about[-1]
                items.add((about[-1], e["label"]))
    return Window(pairs, tuple(labels), tuple(targets), zlib.crc32(row["id"].encode()) % 5 == 0, frozenset(items))


def labelled_windows(files: Sequence[str] = TRAINING_FILES) -> list[Window]:
    """``data/independent_train/<files>`` as windows with a label and a target per user turn."""
    return [window_of(row) for name in files for row in _read("independent_train", name)]


def vocabulary(texts: Sequence[str]):
    """Character (2-5) and word (1-2) n-gram weightings fitted on ``texts``, lower-cased."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    lower = [t.lower() for t in texts]
    return (TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=2).fit(lower),
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2, token_pattern=r"(?u)\b\w+\b").fit(lower))


def polarity_rows(windows: Sequence[Window], sentences: Sequence[tuple[str, str]], weight: float) -> list[tuple]:
    """(turn, previous question, negative?, weight, dev) for every feedback turn and labelled feedback sentence."""
    rows = [(w.pairs[j][0], w.pairs[j - 1][0], w.labels[j] == "negative", 1.0, w.dev)
            for w in windows for j in range(1, len(w.pairs)) if w.labels[j] != "none"]
    return rows + [(text, "", label == "negative", weight, False) for text, label in sentences if label != "none"]


def head_and_tail(text: str) -> tuple[str, str]:
    """A turn of two or more sentences as (all but its last sentence, its last); one sentence: (text, "")."""
    parts = sentences(text)
    return (" ".join(parts[:-1]), parts[-1]) if len(parts) > 1 else (text, "")


def numbers(text: str) -> set[str]:
    return {n.replace(",", ".") for n in _NUMBER.findall(text)}


class Embeddings:
    """Sentence vectors of turns: :class:`.text.Encoder` (the memo, bounded by ``size`` and emptied when
    full, training vectors apart) on each turn's readable text; a blank turn is a zero vector."""

    def __init__(self, embedder, size: int = 20_000):
        self.embedder, self.encode = embedder, Encoder(embedder, size)

    def __len__(self) -> int:
        """How many vectors the memo holds."""
        return sum(map(len, self.encode.memo.values()))

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        plain = [readable(t) or t for t in texts]
        filled = np.asarray([bool(p.strip()) for p in plain], dtype=bool)
        out = np.zeros((len(texts), self.embedder.dims), dtype=np.float32)
        if filled.any():
            out[filled] = self.encode([p for p, f in zip(plain, filled) if f])
        return out


def repeat_features(text: str, previous: str, vectors: Embeddings) -> list[float]:
    """How closely a turn repeats the previous question: cosine similarity and same numbers."""
    if not previous.strip():
        return [0.0, 0.0]
    a, b = vectors([text, previous])
    return [float(a @ b), float(bool(numbers(text)) and numbers(text) == numbers(previous))]


def attach_features(pairs: Sequence[tuple[str, str]], j: int, vectors: Embeddings, more: bool = False) -> np.ndarray:
    """One row per earlier exchange k < j, describing how well turn j fits it; ``more``: also its closest sentence
    of each answer and the topic words it shares with that exchange alone (of the window) or with its question."""
    turn = pairs[j][0]
    t = vectors([turn])[0]
    q, a = vectors([p[0] for p in pairs[:j]]), vectors([p[1] for p in pairs[:j]])
    sq, sa = q @ t, a @ t
    nums, words = numbers(turn), content_words(turn)
    quoted = np.asarray([len(nums & numbers(p[1])) for p in pairs[:j]], dtype=np.float32)
    topics = [content_words(p[0] + " " + p[1]) for p in pairs[:j]]
    shared = np.asarray([len(words & w) for w in topics], dtype=np.float32)
    back = np.asarray([j - 1 - k for k in range(j)], dtype=np.float32)
    cols = [sq, sa, sq - sq.max(), sa - sa.max(), quoted, quoted - quoted.max(), shared, shared - shared.max(),
            back == 0, back == 1, back]
    if more:
        close = np.asarray([float((vectors(s) @ t).max()) if s else 0.0 for s in (sentences(p[1])[:12] for p in
                                                                                 pairs[:j])], dtype=np.float32)
        seen = Counter(w for ws in topics for w in ws)
        alone = np.asarray([len({w for w in words & ws if seen[w] == 1}) for ws in topics], dtype=np.float32)
        asked = np.asarray([len(words & content_words(p[0])) for p in pairs[:j]], dtype=np.float32)
        cols += [close, close - close.max(), alone, alone - alone.max(), asked / max(len(words), 1),
                 asked - asked.max()]
    return np.stack(cols, axis=1).astype(np.float32)


class FeedbackModel:
    """The turn model and the attachment model, trained on first use.

    ``polarity`` (default: ``windows``) are the windows positive-or-negative learns from, with the course's
    sentences weighted ``sentence_weight``; ``own_vocab`` gives it n-grams fitted on its own texts."""

    def __init__(self, embedder, windows: Sequence[Window], sentences: Sequence[tuple[str, str]],
                 polarity: Sequence[Window] | None = None, sentence_weight: float = 1.0, own_vocab: bool = False,
                 split: bool = False, grid: str = "threshold", stage: str = "", stage_c: float = STAGE_C,
                 stage_parts: int = STAGE_PARTS, stage_drop: tuple[str, ...] = STAGE_DROP,
                 stage_blend: tuple[float, ...] = STAGE_BLENDS, attach_more: bool = ATTACH_MORE):
        self.vectors, self.split, self.grid, self.stage = Embeddings(embedder), split, grid, None
        self.attach_more = attach_more
        self.stage_blends = tuple(stage_blend) if stage else (1.0,)
        rows = [(w.pairs[j][0], w.pairs[j - 1][0], w.labels[j], w.dev) for w in windows for j in range(1, len(w.pairs))]
        rows += [(text, "", label, False) for text, label in sentences]
        self.vocab, self.own_vocab = vocabulary([r[0] for r in rows]), own_vocab
        x = self.turn_features([r[0] for r in rows], [r[1] for r in rows])
        given = np.asarray([r[2] != "none" for r in rows])
        dev = np.asarray([r[3] for r in rows])
        signs = polarity_rows(windows if polarity is None else polarity, sentences, sentence_weight)
        self.turns = self._fit_turns(x[~dev], given[~dev], [r for r in signs if not r[4]])
        self.attach = self._fit_attach([w for w in windows if not w.dev])
        if stage:
            from .feedback_stage import fit_stage

            self.stage = fit_stage(self, [w for w in windows if w.dev], stage_c,
                                   (x, given, dev, windows, stage_parts) if stage == "cross" else None, stage_drop)
        self.rule, self.dev_f1 = self._calibrate([w for w in windows if w.dev])
        self.threshold = self.rule.threshold
        self.turns, self.attach = self._fit_turns(x, given, signs), self._fit_attach(windows)

    def __getstate__(self) -> dict:
        """Pickled without its embedder and vectors (see :func:`_model`)."""
        return {k: v for k, v in self.__dict__.items() if k != "vectors"}

    def features(self, vocabs, texts: Sequence[str], previous: Sequence[str]) -> list:
        """For each n-gram vocabulary in ``vocabs``: a turn's embedding, its n-grams under it and how closely
        it repeats the previous question (the embedding and the repeat computed once for all)."""
        from scipy.sparse import csr_matrix, hstack

        lower = [t.lower() for t in texts]
        rep = csr_matrix(np.asarray([repeat_features(t, p, self.vectors) for t, p in zip(texts, previous)],
                                    dtype=np.float32))
        emb = csr_matrix(self.vectors(list(texts)))
        return [hstack([emb, chars.transform(lower), words.transform(lower), rep]).tocsr() for chars, words in vocabs]

    def split_features(self, texts: Sequence[str]):
        """A turn of several sentences seen in parts: its head (all but the last sentence: embedding, n-grams),
        its last sentence (embedding) and the share of the turn that last sentence is; zeros for one sentence."""
        from scipy.sparse import csr_matrix, hstack

        parts = [head_and_tail(t) for t in texts]
        heads = [h if tail else "" for h, tail in parts]
        share = [[float(bool(tail)), len(tail) / max(len(t), 1)] for t, (_, tail) in zip(texts, parts)]
        lower = [h.lower() for h in heads]
        chars, words = self.vocab
        return hstack([csr_matrix(self.vectors(heads)), csr_matrix(self.vectors([tail for _, tail in parts])),
                       chars.transform(lower), words.transform(lower), csr_matrix(np.asarray(share, np.float32))])

    def detection_features(self, x, texts: Sequence[str]):
        """Feedback-or-none's features: the turn's (``x``), and its parts when ``split``."""
        from scipy.sparse import hstack

        return hstack([x, self.split_features(texts)]).tocsr() if self.split else x

    def turn_features(self, texts: Sequence[str], previous: Sequence[str]):
        return self.detection_features(self.features([self.vocab], texts, previous)[0], texts)

    def _fit_turns(self, x, given, signs: Sequence[tuple]):
        """Feedback or none (on ``x``), and positive or negative with its vocabulary (on ``signs``)."""
        from sklearn.linear_model import LogisticRegression

        vocab = vocabulary([r[0] for r in signs]) if self.own_vocab else self.vocab
        px = self.features([vocab], [r[0] for r in signs], [r[1] for r in signs])[0]
        return (LogisticRegression(C=C, max_iter=5000, class_weight="balanced").fit(x, given),
                (vocab, LogisticRegression(C=C, max_iter=5000, class_weight="balanced").fit(
                    px, [r[2] for r in signs], sample_weight=[r[3] for r in signs])))

    def _fit_attach(self, windows: Sequence[Window]):
        from sklearn.linear_model import LogisticRegression

        xs, ys = [], []
        for w in windows:
            for j, k in enumerate(w.targets):
                if k >= 0:
                    xs.append(attach_features(w.pairs, j, self.vectors, self.attach_more))
                    ys += [int(i == k) for i in range(j)]
        return LogisticRegression(C=1.0, max_iter=5000).fit(np.concatenate(xs), ys)

    def turn_probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(none), P(positive), P(negative) for each user turn after the first."""
        return self.probabilities([p[0] for p in pairs[1:]], [p[0] for p in pairs[:-1]])

    def probabilities(self, texts: Sequence[str], previous: Sequence[str]) -> np.ndarray:
        """P(none), P(positive), P(negative) of each turn in ``texts``, read after its ``previous`` question."""
        if not texts:
            return np.zeros((0, len(LABELS)))
        (detect, (vocab, sign)) = self.turns
        x, px = self.features([self.vocab, vocab], texts, previous)
        x = self.detection_features(x, texts)
        given, negative = detect.predict_proba(x)[:, 1], sign.predict_proba(px)[:, 1]
        return np.stack([1.0 - given, given * (1.0 - negative), given * negative], axis=1)

    def attach_probabilities(self, pairs: Sequence[tuple[str, str]], j: int, turn: str | None = None) -> np.ndarray:
        """P(each earlier exchange k < j) that turn j (or ``turn`` read in its place) is about it."""
        if j == 1:
            return np.ones(1)
        if turn is not None:
            pairs = [*pairs[:j], (turn, "")]
        d = self.attach.decision_function(attach_features(pairs, j, self.vectors, self.attach_more))
        e = np.exp(d - d.max())
        return e / e.sum()

    def target(self, pairs: Sequence[tuple[str, str]], j: int) -> int:
        """The earlier exchange turn j's feedback is about."""
        return int(np.argmax(self.attach_probabilities(pairs, j)))

    def readings(self, pairs: Sequence[tuple[str, str]], parts: bool = False) -> list[Reading]:
        """A :class:`Reading` of every user turn after the first (with its sentences' when ``parts``)."""
        out = []
        stage = getattr(self, "stage", None)
        for j, p in enumerate(self.turn_probabilities(pairs), start=1):
            given = float(1.0 - p[0])
            bits = sentences(pairs[j][0]) if parts or stage is not None else []
            split = ()
            if len(bits) > 1:
                q = self.probabilities(bits, [pairs[j - 1][0]] * len(bits))    # each sentence after the question
                split = tuple(Reading(j, float(1.0 - r[0]), float(r[2] / max(1.0 - r[0], 1e-9)),
                                      tuple(self.attach_probabilities(pairs, j, b)))
                              for b, r in zip(bits, q))
            r = Reading(j, given, float(p[2] / max(given, 1e-9)), tuple(self.attach_probabilities(pairs, j)), split)
            if stage is not None:       # the second stage decides feedback or none again (feedback_stage)
                from .feedback_stage import stage_features

                g = float(stage.predict_proba(np.asarray([stage_features(pairs, r, self.vectors)]))[0, 1])
                r = Reading(j, given, r.negative, r.attach, split if parts else (), g)
            out.append(r)
        return out

    @staticmethod
    def choose(r: Reading, rule: Rule) -> list[tuple[int, int, str]]:
        """(turn, exchange, label) items ``rule`` reports for reading ``r``: none, one, or one per exchange
        its sentences judge apart."""
        if rule.given(r) < rule.threshold:
            return []
        fed = [s for s in r.parts if s.given >= rule.threshold]
        groups: dict[int, list[Reading]] = {}
        for s in fed:
            groups.setdefault(s.target, []).append(s)
        if len(groups) > 1 and all(s.attach_margin >= rule.parts for s in fed):
            return [(r.j, k, "negative" if np.mean([s.negative for s in g]) > 0.5 else "positive")
                    for k, g in sorted(groups.items())]
        return [(r.j, r.target, "negative" if r.negative > 0.5 else "positive")]

    def found(self, pairs: Sequence[tuple[str, str]], rule: Rule | float | None = None) -> list[tuple[int, int, str]]:
        """(feedback turn, target exchange, label) for every item the rule (default: the calibrated one) reports."""
        rule = self.rule if rule is None else rule if isinstance(rule, Rule) else Rule(rule)
        parts = rule.parts < NEVER
        return [item for r in self.readings(pairs, parts) for item in self.choose(r, rule)]

    def _calibrate(self, windows: Sequence[Window], name: str | None = None) -> tuple[Rule, float]:
        """The rule of the grid with the best F1 of (target, label) pairs on the dev windows; among equals the
        plainest, then the middle threshold."""
        rules = grid(name or self.grid, getattr(self, "stage_blends", (1.0,)))
        parts = any(r.parts < NEVER for r in rules)
        read = [(self.readings(w.pairs, parts), w.items or {(k, label) for k, label in zip(w.targets, w.labels)
                                                            if k >= 0}) for w in windows]
        return pick(rules, read, self.choose)


def pick(rules: Sequence[Rule], read: Sequence[tuple], choose) -> tuple[Rule, float]:
    """The best rule on ``read`` ((readings, wanted items) per dev window): best F1, fewest splits, middle threshold."""
    f1s = {}
    for rule in rules:
        tp = fp = fn = 0
        for readings, want in read:
            got = {(k, label) for r in readings for _, k, label in choose(r, rule)}
            tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
        f1s[rule] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    best = max(f1s.values())
    plainest = max(r.parts for r, f in f1s.items() if f == best)        # one item per turn when equal
    plateau = [r for r, f in f1s.items() if f == best and r.parts == plainest]
    return plateau[len(plateau) // 2], best


def course_sentences() -> list[tuple[str, str]]:
    """The course's labelled sentences (``data/routes/feedback.jsonl``) as turns: feedback or none."""
    return [(r["text"], ROUTE_LABELS.get(r["label"], "none")) for r in _read("routes", "feedback.jsonl")]


_LOCK = threading.Lock()
RUN_TIME_MEMO = 4096       # turns whose vectors a process keeps at run time (a window repeats its earlier turns)


def fit(embedder) -> FeedbackModel:
    """The shipped setup, trained on every training file."""
    return FeedbackModel(embedder, labelled_windows(), course_sentences(), labelled_windows(POLARITY_FILES),
                         SENTENCE_WEIGHT, own_vocab=True, split=True, grid=GRID, stage=STAGE)


@functools.lru_cache(maxsize=2)
def _model(embedder_key: int) -> FeedbackModel:
    embedder = get_router("feedback").embedder
    files = [data_path("independent_train", name) for name in sorted(set(TRAINING_FILES + POLARITY_FILES))]
    files += [data_path("routes", "feedback.jsonl"), Path(__file__), Path(__file__).with_name("text.py"),
              Path(__file__).with_name("feedback_stage.py")]
    model = cached("feedback", fingerprint(f"feedback {VERSION} {embedder.name}", files), lambda: fit(embedder))
    model.vectors = Embeddings(embedder, RUN_TIME_MEMO)   # run-time vectors apart from the batched training ones
    return model


def feedback_model() -> FeedbackModel:
    """The process's feedback model: loaded from the cache when the data and code are unchanged, else trained."""
    with _LOCK:
        return _model(id(get_router("feedback").embedder))
