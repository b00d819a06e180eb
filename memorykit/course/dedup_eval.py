"""Deduplication for the course: labelled pairs and their evaluation, the first-person normaliser the
pairs need, and batch consolidation of duplicates stored earlier (notebook 05, benchmarks/dedup.py, tests).

A pair is an *existing* memory and a *new* fact labelled duplicate, update (invalidate
counts as update) or new, in ``data/dedup/train.jsonl`` (what the offline model learns from)
and ``data/dedup/heldout.jsonl`` (never used for training or tuning).
"""
from __future__ import annotations

import json
import re
import time
import unicodedata
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..config import data_path
from ..errors import ValidationError
from ..memory import dedup, vectors
from ..memory.index import content_hash, owner_of
from ..memory.long_term import Memory

LABELS = ("duplicate", "update", "new")
LABEL_OF = {"NOOP": "duplicate", "UPDATE": "update", "INVALIDATE": "update", "ADD": "new"}
THREE = {"duplicate": "duplicate", "update": "update", "invalidate": "update", "new": "new"}
CONSOLIDATE_DISTANCE = 0.2  # every pair in a merged cluster must be at least this close
SEMANTIC_DUPLICATE_DISTANCE = 0.19  # distance alone as the duplicate test: best F1 on data/dedup/train.jsonl


_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|we're|we've|our|us)\b", re.IGNORECASE)
_PERSON_SWAPS = [(r"\bI am\b|\bI'm\b", "{s} is"), (r"\bI was\b", "{s} was"), (r"\bI've\b", "{s} has"),
                 (r"\bI'd\b", "{s} would"), (r"\bI'll\b", "{s} will"), (r"\bwe're\b", "{s} and family are"),
                 (r"\bwe've\b", "{s} and family have"), (r"\bwe\b", "{s} and family"), (r"\bI\b", "{s}"),
                 (r"^(?:my|our)\b", "{s}'s"), (r"\b(?:my|our)\b", "their"), (r"\bmine\b", "theirs"),
                 (r"\b(?:me|us)\b", "them"), (r"\bmyself\b", "themselves")]
_ADVERB = r"(?:\w+ly|just|also|never|always|still|now|only|often|finally|even|already|recently) "
_AGREEMENT = re.compile(rf"\b(User) ({_ADVERB})?([a-z]+n't|[a-z]+)\b")
_THIRD_PERSON = {"have": "has", "do": "does", "go": "goes", "am": "is", "are": "is", "were": "was",
                 "don't": "doesn't", "haven't": "hasn't"}
_KEEP = {"is", "was", "has", "had", "would", "will", "can", "could", "should", "must", "might", "may", "did",
         "and", "can't", "won't", "didn't", "wasn't", "isn't", "doesn't"}


def _agree(m: re.Match) -> str:
    subject, adverb, verb = m.groups("")
    if verb in _THIRD_PERSON:
        verb = _THIRD_PERSON[verb]
    elif not (verb in _KEEP or verb.endswith(("ed", "s", "n't"))):
        verb = verb[:-1] + "ies" if re.search(r"[^aeiou]y$", verb) else verb + (
            "es" if re.search(r"(ch|sh|x|o)$", verb) else "s")
    return f"{subject} {adverb}{verb}"


def as_fact(text: str, subject: str = "User") -> str:
    """The stored form of a fact: third person, as the extractor writes it ("I live in Lisbon" ->
    "User lives in Lisbon.")."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("a fact needs non-empty text")
    text = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).replace("’", "'")).strip()
    if _FIRST_PERSON.search(text):
        for pattern, repl in _PERSON_SWAPS:
            text = re.sub(pattern, repl.format(s=subject), text,
                          flags=0 if pattern.startswith(r"\bI") else re.IGNORECASE)
        text = _AGREEMENT.sub(_agree, text)
    text = text.rstrip(" .") + ("" if text.endswith(("!", "?")) else ".")
    return text[:1].upper() + text[1:]


SPLITS = {"train": ("dedup", "train.jsonl"), "heldout": ("dedup", "heldout.jsonl"),
          "independent": ("independent", "dedup.jsonl"), "independent_train": ("independent_train", "dedup.jsonl"),
          "independent_train_2": ("independent_train", "dedup_2.jsonl"),
          "independent_train_3": ("independent_train", "dedup_3.jsonl")}


def load_pairs(split: str = "train") -> list[dict[str, Any]]:
    """Labelled pairs of a split (``SPLITS``: the course's train / heldout, and the sets written apart from
    the method: ``independent`` to measure only, ``independent_train``, ``_2`` and ``_3``); ``label3`` folds invalidate into update."""
    if split not in SPLITS:
        raise ValidationError(f"unknown split {split!r}; choose one of {sorted(SPLITS)}")
    path = data_path(*SPLITS[split])
    if not path.exists():
        raise ValidationError(f"no labelled pairs at {path}; run from the course checkout")
    with open(path, encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f if line.strip()]
    return [{**p, "label3": THREE[p["label"]]} for p in pairs]


def predict_pairs(pairs: Sequence[dict[str, Any]], embedder, llm=None,
                  threshold: float = SEMANTIC_DUPLICATE_DISTANCE):
    """One row per pair: the distance, each tier's label, which tier decided and the model calls.

    ``decided`` is the cascade of ``remember()``: the hash, no candidate beyond
    ``CANDIDATE_DISTANCE`` (ADD), a near-identical vector (NOOP), else the decider (one call).
    """
    import pandas as pd

    olds = [as_fact(p["existing"]) for p in pairs]
    news = [as_fact(p["new"]) for p in pairs]
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


def split_summary(frames: dict[str, Any]):
    """Aggregate scores of ``predict_pairs`` frames, one row per named split: 3-way accuracy (with its
    95 % interval) and how many truly new facts were called new; only totals, never the cases."""
    import pandas as pd

    rows = []
    for split, df in frames.items():
        right, new = int((df["decided"] == df["label"]).sum()), df[df["label"] == "new"]
        low, high = accuracy_interval(right, len(df))
        rows.append({"split": split, "pairs": len(df), "accuracy": round(right / len(df), 3),
                     "95% CI": f"{low:.2f}-{high:.2f}", "new facts right": f"{int((new['decided'] == 'new').sum())}/{len(new)}",
                     "new called duplicate": int((new["decided"] == "duplicate").sum()),
                     "new called update": int((new["decided"] == "update").sum())})
    return pd.DataFrame(rows).set_index("split")


def compare_splits(embedder, llm=None, splits: Sequence[str] = ("heldout", "independent")):
    """``split_summary`` of the cascade on each split, side by side (the course's held-out pairs and the
    set written apart from the method)."""
    return split_summary({split: predict_pairs(load_pairs(split), embedder, llm) for split in splits})


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
        old = store.add(as_fact(p["existing"]), user_id=user)
        d = store.remember(as_fact(p["new"]), user_id=user, llm=llm)
        current = store.list(user, ["episodic"])
        fresh_only = len(current) == 1 and current[0].id != old.id
        rows.append({"id": p["id"], "label": THREE[p["label"]], "action": d.action, "said": LABEL_OF[d.action],
                     "tier": d.tier, "model_calls": d.model_calls,
                     "fresh_only": fresh_only if THREE[p["label"]] == "update" else None})
        store.forget_user(user)
    return pd.DataFrame(rows)


@dataclass
class Merge:
    """One consolidated cluster: ``kept`` now carries the provenance of every ``merged`` memory."""

    kept: Memory
    merged: list[Memory] = field(default_factory=list)


def consolidate(store, user_id: str | None = None, *, shared: bool = False,
                memory_types: Sequence[str] = ("episodic", "semantic"),
                distance_threshold: float = CONSOLIDATE_DISTANCE, llm=None, use_decider: bool = True,
                dry_run: bool = False) -> list[Merge]:
    """Merge clusters of duplicates already stored for one user (or, ``shared=True``, in shared knowledge),
    type by type.

    A memory joins a cluster only if it is within ``distance_threshold`` of EVERY member
    (complete linkage: no chains of near neighbours) and, with ``use_decider``, the decider calls
    it a duplicate (NOOP) of the cluster's first member. The kept memory (the earliest) gains the
    members' source threads and message ids; the others are closed (``superseded_by``), not deleted.
    """
    owner = owner_of(user_id, shared)
    merges: list[Merge] = []
    for mtype in memory_types:
        if owner is None and mtype != "semantic":
            continue  # shared knowledge is semantic only
        memories = sorted((m for m in store.list(owner, [mtype]) if m.user_id == owner and m.memory_type == mtype),
                          key=lambda m: (m.valid_from or m.created_at, m.id))
        if len(memories) < 2:
            continue
        vecs = np.array(vectors.embeddings(store.redis, [(store.vectors_key(owner), m.id) for m in memories]),
                        dtype=np.float32)  # unit vectors, as the owner's Vector Set holds them
        dist = 1.0 - vecs @ vecs.T
        taken: set[int] = set()
        for i in range(len(memories)):
            if i in taken:
                continue
            cluster = [i]
            for j in sorted((j for j in range(i + 1, len(memories)) if j not in taken), key=lambda j: dist[i, j]):
                if dist[i, j] > distance_threshold:
                    break
                if any(dist[j, c] > distance_threshold for c in cluster):
                    continue
                same = memories[j].content_hash == memories[i].content_hash
                if use_decider and not same and dedup.decide(memories[j].content, [memories[i]], llm).action != "NOOP":
                    continue
                cluster.append(j)
            if len(cluster) > 1:
                taken.update(cluster)
                merges.append(Merge(memories[i], [memories[j] for j in cluster[1:]]))
    for merge in [] if dry_run else merges:
        _merge(store, merge)
    return merges


def _merge(store, merge: Merge) -> None:
    kept, now = merge.kept, time.time()
    threads = list(dict.fromkeys(t for t in [kept.source_thread, *kept.metadata.get("source_threads", []),
                                             *(m.source_thread for m in merge.merged)] if t))
    messages = list(dict.fromkeys([*kept.source_messages, *(x for m in merge.merged for x in m.source_messages)]))
    merged_from = list(dict.fromkeys([*kept.metadata.get("merged_from", []), *(m.id for m in merge.merged)]))
    kept.source_messages, kept.updated_at = messages, now
    kept.metadata = {**kept.metadata, "merged_from": merged_from, "source_threads": threads}
    ledger = dedup.ledger_key(store, kept.user_id, kept.memory_type)
    pipe = store.redis.pipeline(transaction=True)  # one MULTI/EXEC: changed paths only, ledger entries with them
    pipe.json().merge(store.key(kept.id, kept.user_id), "$", {"source_messages": messages, "metadata": kept.metadata,
                                                "updated_at": now})
    for m in merge.merged:
        dedup._close(store, pipe, m, now, kept.id)
        if m.content_hash != kept.content_hash:  # only the entry that still names the closed memory
            store._ledger_cas(keys=[ledger], args=[m.content_hash, m.id, ""], client=pipe)
    pipe.execute()
