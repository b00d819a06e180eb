"""Evaluating deduplication on labelled pairs (notebook 05, benchmarks/dedup.py, tests).

A pair is an *existing* memory and a *new* fact labelled duplicate, update (invalidate
counts as update) or new, in ``data/dedup/train.jsonl`` (what the offline model learns from)
and ``data/dedup/heldout.jsonl`` (never used for training or tuning).
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Sequence

import numpy as np

from ..config import data_path
from ..errors import ValidationError
from ..memory import dedup
from ..memory.index import content_hash

LABELS = ("duplicate", "update", "new")
LABEL_OF = {"NOOP": "duplicate", "UPDATE": "update", "INVALIDATE": "update", "ADD": "new"}
THREE = {"duplicate": "duplicate", "update": "update", "invalidate": "update", "new": "new"}


def load_pairs(split: str = "train") -> list[dict[str, Any]]:
    """Labelled pairs from ``data/dedup/<split>.jsonl``; ``label3`` folds invalidate into update."""
    path = data_path("dedup", f"{split}.jsonl")
    if not path.exists():
        raise ValidationError(f"no labelled pairs at {path}; run from the course checkout")
    with open(path, encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f if line.strip()]
    return [{**p, "label3": THREE[p["label"]]} for p in pairs]


def predict_pairs(pairs: Sequence[dict[str, Any]], embedder, llm=None,
                  threshold: float = dedup.SEMANTIC_DUPLICATE_DISTANCE):
    """One row per pair: the distance, each tier's label, which tier decided and the model calls.

    ``decided`` is the cascade of ``remember()``: the hash, no candidate beyond
    ``CANDIDATE_DISTANCE`` (ADD), a near-identical vector (NOOP), else the decider (one call).
    """
    import pandas as pd

    olds = [dedup.as_fact(p["existing"]) for p in pairs]
    news = [dedup.as_fact(p["new"]) for p in pairs]
    a = np.array(embedder.embed_many(olds, progress=False), dtype=np.float32)
    b = np.array(embedder.embed_many(news, progress=False), dtype=np.float32)
    dist = 1.0 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    rows = []
    for p, old, new, d in zip(pairs, olds, news, dist.tolist()):
        same = content_hash(old) == content_hash(new)
        calls = 0
        if same:
            decided, by = "NOOP", "exact"
        elif d > dedup.CANDIDATE_DISTANCE:
            decided, by = "ADD", "far"
        elif dedup.near_identical(new, old, d):
            decided, by = "NOOP", "near"
        else:
            decided, by, calls = dedup.decide(new, [old], llm).action, "model", 1
        rows.append({"id": p["id"], "existing": p["existing"], "new": p["new"], "label": THREE[p["label"]],
                     "distance": round(d, 3), "exact": "duplicate" if same else "new",
                     "semantic": "duplicate" if same or d <= threshold else "new",
                     "decided": LABEL_OF[decided], "by": by, "model_calls": calls})
    return pd.DataFrame(rows)


def tier_scores(df, tiers: Sequence[str] = ("exact", "semantic", "decided")):
    """Accuracy and per-class precision / recall / F1 of each tier's column against ``label``."""
    import pandas as pd

    rows = []
    for tier in tiers:
        row: dict[str, Any] = {"tier": tier, "accuracy": round(float((df[tier] == df["label"]).mean()), 3)}
        f1s = []
        for label in LABELS:
            tp = int(((df[tier] == label) & (df["label"] == label)).sum())
            predicted, actual = int((df[tier] == label).sum()), int((df["label"] == label).sum())
            p = tp / predicted if predicted else 0.0
            rc = tp / actual if actual else 0.0
            f1 = 2 * p * rc / (p + rc) if p + rc else 0.0
            f1s.append(f1)
            row[f"F1 {label}"] = round(f1, 3)
        row["macro F1"] = round(sum(f1s) / len(f1s), 3)
        rows.append(row)
    return pd.DataFrame(rows).set_index("tier")


def confusion(df, column: str = "decided"):
    """Rows: the label; columns: what ``column`` said (every label shown, zeros included)."""
    import pandas as pd

    table = pd.crosstab(pd.Categorical(df["label"], LABELS), pd.Categorical(df[column], LABELS),
                        rownames=["label"], colnames=[column], dropna=False)
    return table


def accuracy_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of an accuracy (the sets here are small: say how sure we are)."""
    if n == 0:
        return 0.0, 0.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def replay_pairs(store, pairs: Sequence[dict[str, Any]], llm=None):
    """Each pair end to end on a store: ``add(existing)`` for a fresh user, then ``remember(new)``.

    ``fresh_only`` says whether an update left exactly one current memory, the new fact.
    """
    import pandas as pd

    rows = []
    for p in pairs:
        user = f"pair-{p['id']}-{uuid.uuid4().hex[:6]}"
        old = store.add(dedup.as_fact(p["existing"]), user_id=user)
        d = store.remember(p["new"], user_id=user, llm=llm)
        current = store.list(user, ["episodic"])
        fresh_only = len(current) == 1 and current[0].id != old.id
        rows.append({"id": p["id"], "label": THREE[p["label"]], "action": d.action, "said": LABEL_OF[d.action],
                     "tier": d.tier, "model_calls": d.model_calls,
                     "fresh_only": fresh_only if THREE[p["label"]] == "update" else None})
        store.forget_user(user)
    return pd.DataFrame(rows)
