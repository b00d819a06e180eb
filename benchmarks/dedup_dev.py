"""The offline dedup decider on a dev split of the independent TRAINING pairs (cross-validated), and on the
course's held-out split. Never reads ``data/independent/`` (the evaluation set): develop here.

Each fold fits the model on the course's training pairs, the other folds of
each independent training file (``dedup.jsonl``, ``dedup_2.jsonl``, ``dedup_3.jsonl``), then scores the fold through
the cascade of ``remember()`` (hash, far -> ADD, near-identical -> NOOP, else the model), as notebook 05 does.

    .venv/bin/python benchmarks/dedup_dev.py [--variants bal hgb bal+same] [--margin 0 0.05] [--repeats 2]

It also prints how the fully trained model calls the one-valued moves of tests/test_dedup.py's eight writers
("User moved to Rome." after "User moved to Paris.": every one must be an update).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from memorykit.config import data_path
from memorykit.course.dedup_eval import THREE, as_fact
from memorykit.memory import dedup
from memorykit.memory.index import content_hash
from memorykit.offline import decide_model as dm

LABELS3 = ("duplicate", "update", "new")


def read(folder: str, name: str) -> list[dict]:
    path = data_path(folder, name)
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cascade(pairs: list[dict], X: np.ndarray) -> list[str | None]:
    """What the cheap tiers decide for each pair (None: the model decides); distance is feature 0."""
    out = []
    for p, d in zip(pairs, X[:, 0]):
        old, new = as_fact(p["existing"]), as_fact(p["new"])
        if content_hash(old) == content_hash(new):
            out.append("duplicate")
        elif d > dedup.CANDIDATE_DISTANCE:
            out.append("new")
        elif dedup.near_identical(new, old, float(d)):
            out.append("duplicate")
        else:
            out.append(None)
    return out


def score(truth: list[str], said: list[str]) -> tuple[float, dict]:
    confusion = {t: {p: 0 for p in LABELS3} for t in LABELS3}
    for t, s in zip(truth, said):
        confusion[THREE[t]][THREE[s]] += 1
    return sum(confusion[k][k] for k in LABELS3) / len(truth), confusion


def show(name: str, acc: float, confusion: dict) -> None:
    recall = {k: confusion[k][k] / max(1, sum(confusion[k].values())) for k in LABELS3}
    print(f"{name}: accuracy {acc:.3f}  recall " + ", ".join(f"{k} {v:.2f}" for k, v in recall.items()))
    for t, row in confusion.items():
        print(f"    {t:9} -> " + ", ".join(f"{k} {v}" for k, v in row.items()))


APART = {"dedup.jsonl": "apart", "dedup_2.jsonl": "apart2", "dedup_3.jsonl": "apart3"}
_CITIES = ["Rome", "Paris", "Madrid", "Oslo", "Vienna", "Prague", "Dublin", "Athens"]
PROBES = [(old, f"User moved to {c}.") for old in ["User lives in Lisbon."] + [f"User moved to {c}." for c in _CITIES]
          for c in _CITIES if c not in old]  # the scenario of tests/test_dedup.py: every step must be an update
OLD = dict(class_weight=None, stacks=("direction", "relation"))  # the model before issue #29's session
VARIANTS = {  # PairModel settings compared on the same folds; "skip": sources left out of training, "w": weight of independent rows
    "base": dict(OLD, skip=("apart2", "apart3")),
    "base+2": dict(OLD),
    "same": dict(OLD, stacks=("direction", "relation", "sameness")),
    "w2": dict(OLD, w=2.0),
    "balanced": dict(OLD, class_weight="balanced"),
    "leaf1": dict(OLD, leaf=1),
    "c2": dict(OLD, c=2.0),
    "bal": dict(),  # the defaults now: class-balanced forest, dedup_2 in training
    "bal+same": dict(stacks=("direction", "relation", "sameness")),
    "bal-words": dict(drop=("words shared", "old words kept", "new words known", "length ratio")),
    "extra": dict(learner="extra"),
    "hgb": dict(learner="hgb"),
    "blend": dict(learner="blend"),
    "extra+same": dict(learner="extra", stacks=("direction", "relation", "sameness")),
    "hgb+same": dict(learner="hgb", stacks=("direction", "relation", "sameness")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--margin", type=float, nargs="*", default=None, help="NEW_MARGIN values to compare")
    parser.add_argument("--variants", nargs="*", default=["bal"], choices=sorted(VARIANTS))
    args = parser.parse_args()
    from sklearn.model_selection import StratifiedKFold

    parts = {"course": read("dedup", "train.jsonl")}
    parts.update({APART[name]: read(folder, name) for folder, name in dm.TRAIN_SPLITS if folder == "independent_train"})
    parts["heldout"] = read("dedup", "heldout.jsonl")
    everything = [p for rows in parts.values() for p in rows]
    start = time.perf_counter()
    X, vectors = dm.featurize([p["existing"] for p in everything], [p["new"] for p in everything], dm.Encoder())
    y = np.array([p["label"] for p in everything])
    source = np.array([name for name, rows in parts.items() for _ in rows])
    course_idx, held_idx = np.where(source == "course")[0], np.where(source == "heldout")[0]
    pool = np.where(np.char.startswith(source, "apart"))[0]
    probe_x, probe_v = dm.featurize(*zip(*PROBES), dm.Encoder())
    tiers = cascade(everything, X)
    print(f"features of {len(everything)} pairs in {time.perf_counter() - start:.0f} s; "
          + ", ".join(f"{k} {len(v)}" for k, v in parts.items()) + f"; dev pool {len(pool)} "
          f"({args.folds}-fold x {args.repeats})")
    margins = args.margin if args.margin is not None else [dm.NEW_MARGIN]

    for name in args.variants:
        spec = dict(VARIANTS[name])
        skip, w = spec.pop("skip", ()), spec.pop("w", 1.0)

        def fit(idx):
            idx = idx[~np.isin(source[idx], skip)]
            weight = np.where(source[idx] == "course", 1.0, w)
            return dm.PairModel(**spec).fit_features(X[idx], {k: v[idx] for k, v in vectors.items()}, y[idx],
                                                     None if w == 1.0 else weight)

        def probs_of(model, idx):
            return model.proba_features(X[idx], {k: v[idx] for k, v in vectors.items()})

        got = []
        for repeat in range(args.repeats):
            folds = StratifiedKFold(args.folds, shuffle=True, random_state=100 + repeat)
            strata = np.char.add(y[pool], source[pool])
            for train_part, dev_part in folds.split(pool, strata):
                model = fit(np.concatenate([course_idx, pool[train_part]]))
                got += list(zip(pool[dev_part], probs_of(model, pool[dev_part])))
        full = fit(np.concatenate([course_idx, pool]))
        held_probs = list(zip(held_idx, probs_of(full, held_idx)))
        for margin in margins:
            print(f"\n== {name} {VARIANTS[name]} margin {margin}   [{time.perf_counter() - start:.0f} s]")
            said = {i: tiers[i] or dm.decision(p, margin) for i, p in got}
            for part in sorted(set(source[pool])) + ["all"]:
                keys = [i for i, _ in got if part in ("all", source[i])]
                acc, conf = score([y[i] for i in keys], [said[i] for i in keys])
                show(f"dev {part} ({len(keys)})", acc, conf)
            moved = [dm.decision(p, margin) for p in full.proba_features(probe_x, probe_v)]
            print(f"one-valued moves (tests/test_dedup.py's writers) called update: {moved.count('update')}/{len(moved)}")
            hs = [tiers[i] or dm.decision(p, margin) for i, p in held_probs]
            show("old held-out", *score([y[i] for i, _ in held_probs], hs))


if __name__ == "__main__":
    main()
