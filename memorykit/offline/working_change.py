"""Does a user's turn change something already stored ("scratch the 10k, doing a half marathon instead")?

A turn-level classifier learned from the training dialogs written apart from the method
(:func:`.working_data.dialogs`): a turn is a change when its writer says it replaces an earlier goal
or preference. Word n-grams plus the turn's sentence embedding, logistic regression. The revision
step (:func:`.working_read.replaces`) uses it: in a changing turn, the stored item of the same kind
that the pairwise revision model ranks first is replaced even when that model alone is unsure.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..config import data_path
from .fit_cache import cached, fingerprint
from .text import normalize

VERSION = "1"
CHANGE_C = 4.0            # grouped 5-fold CV on the training dialogs (sets 1-3, 2244 turns): AUC 0.981
                          # (C 0.5-8: 0.975-0.981; set 3 alone 0.972); sets 1-2 only it was 0.983
LIST_KINDS = {"goal", "drop", "like", "dislike", "style"}   # replaced kinds a list holds (not name / home)


@dataclass
class ChangeModel:
    vec: object
    clf: object

    def prob(self, text: str) -> float:
        """The probability that this turn changes a stored goal or preference."""
        return float(self.clf.predict_proba(self.matrix([normalize(text)]))[0, 1])

    def matrix(self, texts: list[str]):
        from scipy.sparse import csr_matrix, hstack

        from .working_models import embed_many
        return hstack([self.vec.transform(texts), csr_matrix(embed_many(texts))]).tocsr()


def turn_rows(part: str = "all") -> tuple[list[str], list[int], list[str]]:
    """(turn texts, 1 if the turn replaces a stored goal or preference, dialog id) of the training dialogs."""
    from .working_data import CHANGE_DIALOG_FILES, dialogs

    texts, labels, groups = [], [], []
    for d in dialogs(part, CHANGE_DIALOG_FILES):
        for turn in d["turns"]:
            texts.append(normalize(turn["text"]))
            labels.append(int(any(r["kind"] in LIST_KINDS for r in turn.get("replaces") or [])))
            groups.append(d["id"])
    return texts, labels, groups


def fit_rows(texts: list[str], labels: list[int], c: float = CHANGE_C) -> tuple[object, object]:
    """(vectorizer, classifier): word n-grams plus sentence embeddings, balanced logistic regression."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[\w']+|[?!:]").fit(texts)
    clf = LogisticRegression(C=c, max_iter=3000, class_weight="balanced")
    return vec, clf.fit(ChangeModel(vec, None).matrix(texts), labels)


def fit_change(part: str = "all", c: float = CHANGE_C) -> ChangeModel:
    """Fit the turn-level change classifier on ``part`` of the training dialogs (deterministic)."""
    texts, labels, _ = turn_rows(part)
    return ChangeModel(*fit_rows(texts, labels, c))


@functools.lru_cache(maxsize=1)
def change_model() -> ChangeModel:
    """The fitted change classifier: loaded from the cache when data and code are unchanged, else trained."""
    from .working_data import CHANGE_DIALOG_FILES

    files = [data_path("independent_train", name) for name in CHANGE_DIALOG_FILES] + [Path(__file__)]
    return cached("change", fingerprint(f"{VERSION} {CHANGE_C}", files), fit_change)
