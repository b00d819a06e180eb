"""The offline dedup decider on a dev split of the independent TRAINING pairs (cross-validated), and on the
course's held-out split. Never reads ``data/independent/`` (the evaluation set): develop here.

Each fold fits the model on the course's training pairs, the other folds of
``data/independent_train/dedup.jsonl`` and every other independent training file, then scores the fold through
the cascade of ``remember()`` (hash, far -> ADD, near-identical -> NOOP, else the model), as notebook 05 does.

    .venv/bin/python benchmarks/dedup_dev.py [--variants base bal bal+same] [--margin 0 0.05]
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


OLD = dict(class_weight=None, stacks=("direction", "relation"))  # the model before issue #29's session
VARIANTS = {  # PairModel settings compared on the same folds; "use2": train on dedup_2.jsonl, "w": weight of independent rows
    "base": dict(OLD, use2=False),
    "base+2": dict(OLD),
    "same": dict(OLD, stacks=("direction", "relation", "sameness")),
    "w2": dict(OLD, w=2.0),
    "balanced": dict(OLD, class_weight="balanced"),
    "leaf1": dict(OLD, leaf=1),
    "c2": dict(OLD, c=2.0),
    "bal": dict(),  # the defaults now: class-balanced forest, dedup_2 in training
    "bal+same": dict(stacks=("direction", "relation", "sameness")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--margin", type=float, nargs="*", default=None, help="NEW_MARGIN values to compare")
    parser.add_argument("--variants", nargs="*", default=["bal"], choices=sorted(VARIANTS))
    args = parser.parse_args()
    from sklearn.model_selection import StratifiedKFold

    course = read("dedup", "train.jsonl")
    apart = read("independent_train", "dedup.jsonl")
    apart2 = read("independent_train", "dedup_2.jsonl")
    heldout = read("dedup", "heldout.jsonl")
    everything = course + apart + apart2 + heldout
    start = time.perf_counter()
    X, vectors = dm.featurize([p["existing"] for p in everything], [p["new"] for p in everything], dm.Encoder())
    y = np.array([p["label"] for p in everything])
    source = np.array(["course"] * len(course) + ["apart"] * len(apart) + ["apart2"] * len(apart2)
                      + ["heldout"] * len(heldout))
    course_idx, pool = np.where(source == "course")[0], np.where((source == "apart") | (source == "apart2"))[0]
    held_idx = np.where(source == "heldout")[0]
    tiers = cascade(everything, X)
    print(f"features of {len(everything)} pairs in {time.perf_counter() - start:.0f} s; course {len(course)}, "
          f"dev pool {len(apart)} + {len(apart2)} ({args.folds}-fold x {args.repeats})")
    margins = args.margin if args.margin is not None else [dm.NEW_MARGIN]

    for name in args.variants:
        spec = dict(VARIANTS[name])
        use2, w = spec.pop("use2", True), spec.pop("w", 1.0)

        def fit(idx):
            if not use2:
                idx = idx[source[idx] != "apart2"]
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
            for part in ("apart", "apart2"):
                keys = [i for i, _ in got if source[i] == part]
                acc, conf = score([y[i] for i in keys], [said[i] for i in keys])
                show(f"dev {part} ({len(keys)})", acc, conf)
            hs = [tiers[i] or dm.decision(p, margin) for i, p in held_probs]
            show("old held-out", *score([y[i] for i, _ in held_probs], hs))


if __name__ == "__main__":
    main()
