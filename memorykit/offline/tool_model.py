"""The offline planner's tool model: which tools a question needs, learned from labelled questions.

Each question is a sentence embedding (all-MiniLM-L6-v2). One logistic regression per tool
(one-vs-rest, so a question can need several tools) is blended with a neighbour vote: the tool
set of the nearest labelled question. A tool is chosen when its blended score passes a threshold.

The labelled questions are the course's (``data/routes/tools.jsonl``) and ones written apart from
the method in five styles (``data/independent_train/tools.jsonl``). A dev split (the routes'
``calibration`` rows and one independent row in five, by id) chooses the threshold; then the
model is refit on every row. The evaluation sets (``*_heldout.jsonl``, ``data/independent/``)
are never read here. A stored procedure is one more labelled question: when it is closer than the
nearest training question, its tools are the neighbour vote.
"""
from __future__ import annotations

import functools
import json
import threading
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..config import data_path
from ..course.routing import get_router, readable

C = 32.0             # inverse regularization of each tool's logistic regression (chosen on the dev split)
LR_WEIGHT = 0.8      # the regression's share of a tool's score; the nearest question's vote has the rest
GATE = 0.5           # the gate's probability that a question needs a tool (its classes are balanced)
THRESHOLDS = tuple(round(0.25 + 0.05 * i, 2) for i in range(9))   # candidate thresholds 0.25 .. 0.65


@dataclass(frozen=True)
class Labelled:
    """One labelled question: its text, the tools it needs, and whether it is in the dev split."""

    text: str
    tools: tuple[str, ...]
    dev: bool


def _rows(*parts: str) -> list[dict]:
    path = data_path(*parts)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def labelled_questions() -> list[Labelled]:
    """The course's examples and the independent training questions, each marked train or dev."""
    course = [Labelled(r["text"], tuple(sorted(r["tools"])), r.get("split", "train") != "train")
              for r in _rows("routes", "tools.jsonl")]
    written = [Labelled(r["query"], tuple(sorted(r["tools"])), zlib.crc32(r["id"].encode()) % 5 == 0)
               for r in _rows("independent_train", "tools.jsonl")]
    return course + written


class _Fitted:
    """The regressions fitted on one set of rows: tools' and the gate's, and the rows for the vote."""

    def __init__(self, vectors: np.ndarray, texts: Sequence[str], labels: np.ndarray):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.vectors, self.labels = vectors, labels
        self.chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=2).fit(texts)
        self.words = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2,
                                     token_pattern=r"(?u)\b\w+\b").fit(texts)
        x, g = self.features(vectors, texts), self.gate_features(vectors, texts)
        self.tool_models = [LogisticRegression(C=C, max_iter=5000).fit(x, labels[:, j]) if labels[:, j].any() else None
                            for j in range(labels.shape[1])]
        self.gate = LogisticRegression(C=C, max_iter=5000, class_weight="balanced").fit(g, labels.any(axis=1))

    def features(self, vectors: np.ndarray, texts: Sequence[str]):
        from scipy.sparse import csr_matrix, hstack

        return hstack([csr_matrix(vectors), self.chars.transform(texts)]).tocsr()

    def gate_features(self, vectors: np.ndarray, texts: Sequence[str]):
        from scipy.sparse import hstack

        return hstack([self.features(vectors, texts), self.words.transform(texts)]).tocsr()

    def scores(self, vectors: np.ndarray, texts: Sequence[str],
               patterns: Sequence[tuple[Sequence[str], float] | None], tools: Sequence[str]) -> np.ndarray:
        """Each tool's blended score per question, zero where the gate says the question needs none."""
        x = self.features(vectors, texts)
        prob = np.stack([m.predict_proba(x)[:, 1] if m is not None else np.zeros(len(texts))
                         for m in self.tool_models], axis=1)
        sims = vectors @ self.vectors.T
        nearest = sims.argmax(axis=1)
        vote = self.labels[nearest].copy()
        for i, pattern in enumerate(patterns):
            if pattern is not None and pattern[1] > sims[i, nearest[i]]:
                vote[i] = [t in pattern[0] for t in tools]
        needs = self.gate.predict_proba(self.gate_features(vectors, texts))[:, 1] >= GATE
        return (LR_WEIGHT * prob + (1.0 - LR_WEIGHT) * vote) * needs[:, None]


class ToolModel:
    """Per-tool logistic regressions, a nearest-question vote and a gate (does it need any tool?).

    Features: the sentence embedding and character n-grams (robust to typos and abbreviations);
    the gate also reads words ("my", "in general"): it tells questions on the user's own records
    from general ones, which need no tool.
    """

    def __init__(self, embedder, rows: Sequence[Labelled]):
        self.embedder, self.rows = embedder, list(rows)
        self.tools = sorted({t for r in self.rows for t in r.tools})
        texts = [r.text.lower() for r in self.rows]
        vectors = self._embed([r.text for r in self.rows])
        labels = np.asarray([[t in r.tools for t in self.tools] for r in self.rows], dtype=np.float32)
        dev = np.asarray([r.dev for r in self.rows])
        on_train = _Fitted(vectors[~dev], [t for t, d in zip(texts, dev) if not d], labels[~dev])
        dev_texts = [t for t, d in zip(texts, dev) if d]
        dev_scores = on_train.scores(vectors[dev], dev_texts, [None] * len(dev_texts), self.tools)
        truth = [{t for t, y in zip(self.tools, row) if y} for row in labels[dev]]
        by_threshold = {t: float(np.mean([set(self._choose(s, t)) == want for s, want in zip(dev_scores, truth)]))
                        for t in THRESHOLDS}
        best = max(by_threshold.values())
        plateau = [t for t, a in by_threshold.items() if a == best]
        self.threshold, self.dev_accuracy, self.n_dev = plateau[len(plateau) // 2], best, int(dev.sum())
        self.fitted = _Fitted(vectors, texts, labels)     # then refit on every row

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.embedder.embed_many([readable(t) or t for t in texts], progress=False),
                          dtype=np.float32)

    def _choose(self, scores: np.ndarray, threshold: float) -> tuple[str, ...]:
        return tuple(t for t, s in sorted(zip(self.tools, scores), key=lambda p: (-p[1], p[0])) if s >= threshold)

    def predict(self, query: str, pattern: tuple[Sequence[str], float] | None = None) -> list[str]:
        """The tools the question needs, most likely first; ``pattern``: a stored (tools, similarity)."""
        scores = self.fitted.scores(self._embed([query]), [query.lower()], [pattern], self.tools)[0]
        return list(self._choose(scores, self.threshold))


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=2)
def _model(embedder_key: int) -> ToolModel:
    return ToolModel(get_router("tools", multi_label=True).embedder, labelled_questions())


def tool_model() -> ToolModel:
    """The process's tool model, trained on first use (seconds once the embeddings are cached in Redis)."""
    with _LOCK:
        return _model(id(get_router("tools", multi_label=True).embedder))
