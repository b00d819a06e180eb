"""Does a user's turn change something already stored ("scratch the 10k, doing a half marathon instead")?

A turn-level classifier learned from the training dialogs written apart from the method
(:func:`.working_data.dialogs`): a turn is a change when its writer says it replaces an earlier goal
or preference. Word n-grams plus the turn's sentence embedding, logistic regression. The revision
step (:func:`.working_read.replaces`) uses it: in a changing turn, the stored item of the same kind
that the pairwise revision model ranks first is replaced even when that model alone is unsure.

A changing turn often names the old value too ("not organic chemistry anymore, materials science";
"N2 is too hard for this year, I make N3 first"). A clause-level old-value model, learned from the same
dialogs (a clause naming a value its turn replaces, and no new one), flags such a clause: it is not stored,
and the stored item it names is the one removed (:func:`named_item`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import data_path
from .fit_cache import cached, fingerprint
from .text import normalize

VERSION = "2"
CHANGE_C = 4.0            # grouped 5-fold CV on the training dialogs (sets 1-3, 2244 turns): AUC 0.981
                          # (C 0.5-8: 0.975-0.981; set 3 alone 0.972); sets 1-2 only it was 0.983
LIST_KINDS = {"goal", "drop", "like", "dislike", "style"}   # replaced kinds a list holds (not name / home)
OLD_VALUE = 0             # dev switch (1: on): a fact the old-value model reads as naming a replaced value ...
OLD_THRESHOLD = 0.5       # ... this surely is not stored, and removes the stored item it names ...
OLD_FLOOR = 0.3           # ... the one the revision model ranks first, if it gives it at least this
OLD_SPAN = 0              # dev switch: the store features of a read fact come from its span, not its clause
STORE_WEIGHT = 3.0        # weight of the two store features (best cosine, best word share) next to the text's


@dataclass
class ChangeModel:
    vec: object
    clf: object
    old_vec: object = None   # the clause-level old-value classifier (text and what is stored)
    old_clf: object = None

    def prob(self, text: str) -> float:
        """The probability that this turn changes a stored goal or preference."""
        return float(self.clf.predict_proba(self.matrix([normalize(text)]))[0, 1])

    def old_value(self, clauses: list[str], stored: list[str], spans: list[str] | None = None) -> list[float]:
        """For each clause, the probability that it names a value its turn gives up (``stored``: the
        values stored so far, their objects: "organic chemistry", not "Likes organic chemistry")."""
        if not clauses:
            return []
        matrix = self.old_matrix(clauses, [stored] * len(clauses), spans)
        return [float(p) for p in self.old_clf.predict_proba(matrix)[:, 1]]

    def matrix(self, texts: list[str], vec=None):
        from scipy.sparse import csr_matrix, hstack

        from .working_models import embed_many
        return hstack([(vec or self.vec).transform(texts), csr_matrix(embed_many(texts))]).tocsr()

    def old_matrix(self, texts: list[str], stored: list[list[str]], spans: list[str] | None = None):
        from scipy.sparse import csr_matrix, hstack

        store = store_features(spans or texts, stored) * STORE_WEIGHT
        return hstack([self.matrix(texts, self.old_vec), csr_matrix(store)]).tocsr()


def store_features(texts: list[str], stored: list[list[str]]) -> np.ndarray:
    """Per text: its best cosine to a stored value and the largest share of a stored value's words it holds."""
    from .working_models import content, embed_many

    out = np.zeros((len(texts), 2))
    values = sorted({v for vs in stored for v in vs})
    if not values:
        return out
    a, b = embed_many(texts), embed_many(values)
    sims = (a @ b.T) / (np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)) + 1e-9)
    at = {v: k for k, v in enumerate(values)}
    for n, (text, vs) in enumerate(zip(texts, stored)):
        if vs:
            words = content(text)
            out[n] = (max(sims[n, at[v]] for v in vs), max(len(words & content(v)) / max(1, len(content(v))) for v in vs))
    return out


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


def segments(text: str, spans: list[str]) -> list[str]:
    """The clause pieces of a turn, and what follows a span and a comma inside one (the reader's second fact)."""
    from .working_read import clause_pieces, rest_after

    out = []
    for piece in clause_pieces(text):
        out.append(piece)
        out += [rest for s in spans if s.lower() in piece.lower() for rest in [rest_after(piece, s)] if rest]
    return out


def old_value_rows(part: str = "all") -> tuple[list[str], list[list[str]], list[int]]:
    """(segment, values stored before its turn, 1 if it names a value the turn replaces and no new one) of
    every turn of the training dialogs, replayed with their labels."""
    from .working_data import CHANGE_DIALOG_FILES, dialogs
    from .working_models import content

    texts, stored_at, labels = [], [], []
    for d in dialogs(part, CHANGE_DIALOG_FILES):
        stored: list[str] = []
        for turn in d["turns"]:
            gone = [r["old"] for r in turn.get("replaces") or [] if r["kind"] in LIST_KINDS]
            old = set().union(*(content(o) for o in gone))
            new = [f["span"] for f in turn.get("facts") or [] if f["kind"] != "drop"]
            for seg in segments(normalize(turn["text"]), [f["span"] for f in turn.get("facts") or []]):
                texts.append(seg)
                stored_at.append(list(stored))
                labels.append(int(bool(content(seg) & old) and not any(s.lower() in seg.lower() for s in new)))
            stored = [v for v in stored if v not in gone] + [f["span"] for f in turn.get("facts") or []]
    return texts, stored_at, labels


def fit_rows(texts: list[str], labels: list[int], c: float = CHANGE_C) -> tuple[object, object]:
    """(vectorizer, classifier): word n-grams plus sentence embeddings, balanced logistic regression."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[\w']+|[?!:]").fit(texts)
    clf = LogisticRegression(C=c, max_iter=3000, class_weight="balanced")
    return vec, clf.fit(ChangeModel(vec, None).matrix(texts), labels)


def fit_change(part: str = "all", c: float = CHANGE_C) -> ChangeModel:
    """Fit the turn-level change classifier on ``part`` of the training dialogs (deterministic)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    texts, labels, _ = turn_rows(part)
    model = ChangeModel(*fit_rows(texts, labels, c))
    old_texts, stored, old_labels = old_value_rows(part)
    model.old_vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[\w']+|[?!:]").fit(old_texts)
    model.old_clf = LogisticRegression(C=c, max_iter=3000, class_weight="balanced").fit(
        model.old_matrix(old_texts, stored), old_labels)
    return model


def named_item(fact, lists: dict[str, list[str]]) -> tuple[str, str] | None:
    """(list, item) of the stored value an old-value fact names: the revision model's first-ranked item of
    any list (the fact read as that list's kind), if it gives it ``OLD_FLOOR``; else None."""
    from .working_read import models, pair_rows

    ranked = []
    for section, items in lists.items():
        if items:
            kind = "goal" if section == "goal" else fact.kind if fact.kind in ("like", "dislike", "style") else "style"
            probs = models().pairs.predict_proba(pair_rows(kind, fact.span, fact.clause, items, section))[:, 1]
            ranked += [(float(p), section, item) for p, item in zip(probs, items)]
    best = max(ranked, default=None)
    return (best[1], best[2]) if best and best[0] >= OLD_FLOOR else None


def old_values(facts: list, lists: dict[str, list[str]]) -> list[bool]:
    """For each fact of one message: does it name a stored value the message gives up (not a new one)?"""
    from .working_read import parse_item

    if not OLD_VALUE or not facts:
        return [False] * len(facts)
    stored = [parse_item(i, s)[1] for s, items in lists.items() for i in items]
    spans = [f.span for f in facts] if OLD_SPAN else None
    probs = change_model().old_value([f.clause for f in facts], stored, spans)
    return [p > OLD_THRESHOLD and f.kind != "release" for f, p in zip(facts, probs)]


@functools.lru_cache(maxsize=1)
def change_model() -> ChangeModel:
    """The fitted change classifier: loaded from the cache when data and code are unchanged, else trained."""
    from .working_data import CHANGE_DIALOG_FILES

    files = [data_path("independent_train", name) for name in CHANGE_DIALOG_FILES] + [Path(__file__)]
    return cached("change", fingerprint(f"{VERSION} {CHANGE_C}", files), fit_change)
