"""Does a user's turn change something already stored ("scratch the 10k, doing a half marathon instead")?

A turn-level classifier learned from the training dialogs written apart from the method
(:func:`.working_data.dialogs`): a turn is a change when its writer says it replaces an earlier goal
or preference. Word n-grams plus the turn's sentence embedding, logistic regression. The revision
step (:func:`.working_read.replaces`) uses it: in a changing turn, the stored item of the same kind
that the pairwise revision model ranks first is replaced even when that model alone is unsure.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import pickle
from dataclasses import dataclass
from pathlib import Path

from ..config import data_path, settings
from .text import normalize

log = logging.getLogger(__name__)

VERSION = "1"
CHANGE_C = 4.0            # grouped 5-fold CV on the training dialogs only: AUC 0.983 (C 0.5-8: 0.978-0.984)
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
    from .working_data import dialogs

    texts, labels, groups = [], [], []
    for d in dialogs(part):
        for turn in d["turns"]:
            texts.append(normalize(turn["text"]))
            labels.append(int(any(r["kind"] in LIST_KINDS for r in turn.get("replaces") or [])))
            groups.append(d["id"])
    return texts, labels, groups


def fit_change(part: str = "all", c: float = CHANGE_C) -> ChangeModel:
    """Fit the turn-level change classifier on ``part`` of the training dialogs (deterministic)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    texts, labels, _ = turn_rows(part)
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[\w']+|[?!:]").fit(texts)
    model = ChangeModel(vec, None)
    model.clf = LogisticRegression(C=c, max_iter=3000, class_weight="balanced").fit(model.matrix(texts), labels)
    return model


def _fingerprint() -> str:
    import sklearn

    from .working_data import DIALOG_FILES
    h = hashlib.sha256(f"{VERSION} {CHANGE_C} {sklearn.__version__}".encode())
    for name in DIALOG_FILES:
        path = data_path("independent_train", name)
        h.update(path.read_bytes() if path.exists() else b"")
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def change_model() -> ChangeModel:
    """The fitted change classifier: loaded from the cache when data and code are unchanged, else trained."""
    path = settings().data_dir / "offline" / f"change-{_fingerprint()}.pkl"
    if path.exists():
        try:
            return pickle.loads(path.read_bytes())
        except Exception as exc:  # a cache from another environment: retrain
            log.info("retraining the working-memory change model (%s)", exc)
    fitted = fit_change()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob("change-*.pkl"):
            stale.unlink()
        path.write_bytes(pickle.dumps(fitted))
    except OSError as exc:
        log.info("could not cache the working-memory change model: %s", exc)
    return fitted
