"""Retrieval evaluation: multi-session dialogs, turn-level evidence, recall@k / MRR / nDCG with CIs.

Each dialog turn becomes one memory (``"Speaker: text"``, its speaker as a topic and session time as
indexed fields); each question lists the turn ids that answer it. A retrieval method is
scored by where those turns land in its ranking, per question kind, with a bootstrap
confidence interval. Reads the shipped set (``data/longmem``) and, unchanged, LoCoMo's and
LongMemEval's published JSON files (nothing is downloaded)::

    python -m memorykit.course.eval --data path/to/locomo10.json --modes vector,text,hybrid
"""
from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..config import data_path

LOCOMO_KINDS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KINDS = ("single-hop", "multi-hop", "temporal", "knowledge-update", "preference")


@dataclass
class Turn:
    turn_id: str
    speaker: str
    text: str
    time: float  # Unix time of the session the turn belongs to


@dataclass
class Dialog:
    dialog_id: str
    speakers: list[str]
    turns: list[Turn]
    split: str = "test"


@dataclass
class Question:
    qid: str
    dialog_id: str
    kind: str
    question: str
    answer: str
    evidence: list[str]
    asked_at: float | None = None
    split: str = "test"


@dataclass
class LongMemSet:
    """Dialogs and their questions, as one evaluation set."""

    dialogs: list[Dialog]
    questions: list[Question]
    name: str = ""

    def split(self, name: str | None) -> "LongMemSet":
        """The dialogs and questions of one split (``"dev"`` / ``"test"``; None: all)."""
        if name is None:
            return self
        qs = [q for q in self.questions if q.split == name]
        ids = {q.dialog_id for q in qs}
        return LongMemSet([d for d in self.dialogs if d.dialog_id in ids], qs, f"{self.name}:{name}")


# ---------------------------------------------------------------------------------- loading
def _ts(text: str) -> float:
    """A date as written in the data sets ('2023-05-07T18:20', '1:56 pm on 8 May, 2023', ...)."""
    from dateutil import parser

    dt = parser.parse(text.replace(" on ", " ").replace("(", " ").replace(")", " "), fuzzy=True)
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def _shipped(folder: Path) -> LongMemSet:
    dialogs = []
    for line in (folder / "dialogs.jsonl").read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        turns = [Turn(t["turn_id"], t["speaker"], t["text"], _ts(s["date"]))
                 for s in raw["sessions"] for t in s["turns"]]
        dialogs.append(Dialog(raw["dialog_id"], raw["speakers"], turns, raw.get("split", "test")))
    questions = []
    for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        questions.append(Question(raw["qid"], raw["dialog_id"], raw["kind"], raw["question"],
                                  raw["answer"], raw["evidence"], _ts(raw["asked_at"]),
                                  raw.get("split", "test")))
    return LongMemSet(dialogs, questions, folder.name)


def _turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text") or turn.get("content") or "").strip()
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo of {caption}]" if caption else text


def _locomo(samples: list[dict[str, Any]], include_adversarial: bool) -> LongMemSet:
    dialogs, questions = [], []
    for n, sample in enumerate(samples):
        conv, did = sample["conversation"], str(sample.get("sample_id", f"conv-{n}"))
        sessions = sorted((int(k.split("_")[1]), k) for k in conv
                          if k.startswith("session_") and k.count("_") == 1 and isinstance(conv[k], list))
        turns, last = [], 0.0
        for number, name in sessions:
            when = conv.get(f"{name}_date_time")
            last = _ts(when) if when else last + 86400
            turns += [Turn(str(t["dia_id"]), t["speaker"], _turn_text(t), last)
                      for t in conv[name] if _turn_text(t)]
        speakers = [conv[k] for k in ("speaker_a", "speaker_b") if conv.get(k)]
        dialogs.append(Dialog(did, speakers, turns))
        for i, qa in enumerate(sample.get("qa", [])):
            kind = LOCOMO_KINDS.get(qa.get("category"), str(qa.get("category")))
            evidence = [e.strip() for ev in qa.get("evidence") or [] for e in str(ev).split(";") if e.strip()]
            if not evidence or (kind == "adversarial" and not include_adversarial):
                continue
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            questions.append(Question(f"{did}-q{i:03d}", did, kind, qa["question"], str(answer),
                                      evidence, last + 86400))
    return LongMemSet(dialogs, questions, "locomo")


def _longmemeval(items: list[dict[str, Any]]) -> LongMemSet:
    """LongMemEval: one haystack per question; evidence = the turns marked ``has_answer``."""
    dialogs, questions = [], []
    for item in items:
        qid, turns, evidence = str(item["question_id"]), [], []
        dates = item.get("haystack_dates") or []
        for s, session in enumerate(item["haystack_sessions"]):
            when = _ts(dates[s]) if s < len(dates) else 0.0
            sid = (item.get("haystack_session_ids") or [str(s)] * (s + 1))[s]
            for t, msg in enumerate(session):
                tid = f"{sid}:{t}"
                turns.append(Turn(tid, msg["role"], msg["content"], when))
                if msg.get("has_answer"):
                    evidence.append(tid)
        if not evidence:
            continue
        dialogs.append(Dialog(qid, ["user", "assistant"], turns))
        asked = item.get("question_date")
        questions.append(Question(qid, qid, item.get("question_type", ""), item["question"],
                                  str(item.get("answer", "")), evidence, _ts(asked) if asked else None))
    return LongMemSet(dialogs, questions, "longmemeval")


def load_longmem(path: str | Path | None = None, *, include_adversarial: bool = False) -> LongMemSet:
    """The shipped set (default, ``data/longmem``), or a LoCoMo / LongMemEval JSON file."""
    path = Path(path) if path is not None else data_path("longmem")
    if path.is_dir():
        return _shipped(path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(raw, dict):
        raw = [raw]
    if raw and "conversation" in raw[0]:
        return _locomo(raw, include_adversarial)
    if raw and "haystack_sessions" in raw[0]:
        return _longmemeval(raw)
    raise ValueError(f"{path}: neither the shipped format, LoCoMo nor LongMemEval")


# ---------------------------------------------------------------------------------- ingest
def ingest(store, data: LongMemSet, *, user_prefix: str = "", template: str = "{speaker}: {text}",
           batch_size: int = 64) -> dict[str, str]:
    """One memory per turn, owned by the dialog (user id = prefix + dialog id).

    ``created_at`` and ``valid_from`` are set to the session time, as if each memory had been
    written while that session happened. Returns ``{memory id: turn id}``.
    """
    turn_of = {}
    for dialog in data.dialogs:
        user = f"{user_prefix}{dialog.dialog_id}"
        memories = [store._new(template.format(speaker=t.speaker, text=t.text), user, "episodic",
                               observed_at=t.time, source_messages=[t.turn_id], topics=[t.speaker],
                               metadata={"speaker": t.speaker, "turn_id": t.turn_id}) for t in dialog.turns]
        for memory, turn in zip(memories, dialog.turns):
            memory.created_at = memory.updated_at = turn.time
            turn_of[memory.id] = turn.turn_id
        # one write per document: rewriting a field later would leave stale entries in the text
        # index (counted by BM25 until Redis's GC runs) and make the scores depend on timing
        vectors = store.embedder.embed_many([m.content for m in memories], batch_size=batch_size)
        pipe = store.redis.pipeline(transaction=True)  # one user: one slot, one transaction
        for memory, vector in zip(memories, vectors):
            store._write(memory, vector, pipe)
        pipe.execute()
    return turn_of


# ---------------------------------------------------------------------------------- metrics
def recall_at_k(ranked: Sequence[str], evidence: Iterable[str], k: int, *, need: str = "any") -> float:
    """1.0 if any (``need="any"``) / every (``"all"``) evidence id is among the first ``k``."""
    top, gold = set(ranked[:k]), set(evidence)
    if not gold:
        return 0.0
    return float(bool(top & gold)) if need == "any" else float(gold <= top)


def reciprocal_rank(ranked: Sequence[str], evidence: Iterable[str]) -> float:
    """1 / rank of the first evidence id (0 when none was retrieved)."""
    gold = set(evidence)
    return next((1.0 / (i + 1) for i, r in enumerate(ranked) if r in gold), 0.0)


def ndcg_at_k(ranked: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """Binary-relevance nDCG@k: evidence ranked higher scores more; 1.0 = all evidence on top."""
    gold = set(evidence)
    dcg = sum(1.0 / math.log2(i + 2) for i, r in enumerate(ranked[:k]) if r in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal if ideal else 0.0


def bootstrap_ci(values: Sequence[float], *, n: int = 2000, level: float = 0.95,
                 random_state: int = 0) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval ``(mean, low, high)`` over questions."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return (float("nan"),) * 3
    rng = np.random.default_rng(random_state)
    means = v[rng.integers(0, v.size, size=(n, v.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return float(v.mean()), float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def paired_difference(a: Sequence[float], b: Sequence[float], **kw) -> tuple[float, float, float]:
    """Bootstrap interval of mean(a - b) over the same questions (a beats b if low > 0)."""
    return bootstrap_ci(np.asarray(a, float) - np.asarray(b, float), **kw)


# ---------------------------------------------------------------------------------- runs
@dataclass
class Run:
    """Per-question scores of one retrieval method."""

    name: str
    questions: list[Question]
    ranked: list[list[str]]
    k: int = 5
    seconds: float = 0.0
    scores: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self):
        qs, k = self.questions, self.k
        self.scores = {
            **{f"recall@{n}": [recall_at_k(r, q.evidence, n) for q, r in zip(qs, self.ranked)]
               for n in sorted({1, 5, 10, k})},
            f"recall_all@{k}": [recall_at_k(r, q.evidence, k, need="all") for q, r in zip(qs, self.ranked)],
            "mrr": [reciprocal_rank(r, q.evidence) for q, r in zip(qs, self.ranked)],
            f"ndcg@{k}": [ndcg_at_k(r, q.evidence, k) for q, r in zip(qs, self.ranked)],
        }

    def summary(self, metric: str | None = None, by_kind: bool = False) -> dict[str, tuple]:
        """``{"all" or kind: (mean, low, high)}`` for one metric (default recall@k)."""
        values = self.scores[metric or f"recall@{self.k}"]
        groups: dict[str, list[float]] = defaultdict(list)
        for q, v in zip(self.questions, values):
            groups["all"].append(v)
            if by_kind:
                groups[q.kind].append(v)
        return {g: bootstrap_ci(vs) for g, vs in groups.items()}


SearchFn = Callable[[Question, str], list[str]]


def evaluate(store, data: LongMemSet, turn_of: dict[str, str], *, k: int = 5, name: str = "",
             user_prefix: str = "", depth: int | None = None, **search_kwargs) -> Run:
    """Ask every question with ``store.search(..., **search_kwargs)``; rank turn ids.

    ``depth`` results are kept per question (default ``max(k, 10)``) so MRR sees past k. A
    ``recency`` without a fixed ``now`` is evaluated at each question's ``asked_at``.
    """
    from ..memory.retrieval import Recency

    depth = depth or max(k, 10)
    ranked, start = [], time.perf_counter()
    recency = search_kwargs.pop("recency", None)
    recency = Recency() if recency is True else recency
    for q in data.questions:
        if recency is not None:
            search_kwargs["recency"] = recency if recency.now is not None else replace(recency, now=q.asked_at)
        hits = store.search(q.question, user_id=f"{user_prefix}{q.dialog_id}", k=depth, touch=False,
                            **search_kwargs)
        ranked.append([turn_of.get(h.memory.id, "") for h in hits])
    name = name or search_kwargs.get("mode", "vector") + ("+recency" if recency else "")
    return Run(name, data.questions, ranked, k,
               time.perf_counter() - start)


# ---------------------------------------------------------------------------------- baselines
def plain_bm25(docs: Sequence[Sequence[str]], query: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Textbook Okapi BM25 of each tokenized document for the query words, statistics from ``docs`` alone."""
    from collections import Counter

    n, avgdl = len(docs), sum(map(len, docs)) / max(len(docs), 1) or 1.0
    df = Counter(w for d in docs for w in set(d))
    tfs = [Counter(d) for d in docs]
    idf = {w: math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) for w in set(query)}
    return [sum(idf[w] * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(d) / avgdl)) for w in idf if tf[w])
            for d, tf in zip(docs, tfs)]


def plain_rrf(*rankings: Sequence[str], k: int = 60) -> list[str]:
    """Plain reciprocal rank fusion of full rankings: ``sum 1 / (k + rank)``, best first (ties: first seen)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: -scores[d])


def baselines(data: LongMemSet, embedder, *, k: int = 5, depth: int = 10,
              template: str = "{speaker}: {text}") -> list[Run]:
    """Three rankings computed outside Redis over each dialog's turns (the same texts :func:`ingest` stores):
    brute-force cosine, plain-Python BM25 with per-dialog statistics, and their plain RRF (k = 60)."""
    from ..memory.retrieval import query_terms, words

    turns = {d.dialog_id: d.turns for d in data.dialogs}
    texts = {d: [template.format(speaker=t.speaker, text=t.text) for t in ts] for d, ts in turns.items()}
    vectors = {d: np.asarray(embedder.embed_many(ts, progress=False)) for d, ts in texts.items()}
    tokens = {d: [words(t) for t in ts] for d, ts in texts.items()}
    asked = np.asarray(embedder.embed_many([q.question for q in data.questions], progress=False))
    ranked: dict[str, list[list[str]]] = {"vector (brute force)": [], "BM25 (plain Python)": [], "plain RRF": []}
    for q, qv in zip(data.questions, asked):
        ids = [t.turn_id for t in turns[q.dialog_id]]
        cos = vectors[q.dialog_id] @ qv
        by_vector = [ids[i] for i in np.argsort(-cos, kind="stable")]
        text = plain_bm25(tokens[q.dialog_id], query_terms(q.question))
        by_text = [ids[i] for i in sorted(range(len(ids)), key=lambda i: -text[i]) if text[i] > 0]
        for name, ranking in zip(ranked, (by_vector, by_text, plain_rrf(by_vector, by_text))):
            ranked[name].append(ranking[:depth])
    return [Run(name, data.questions, r, k) for name, r in ranked.items()]


METRICS = ("recall@1", "recall@5", "recall@10", "mrr")


def compare(runs: Sequence[Run], metrics: Sequence[str] = METRICS):
    """A pandas table: one row per method, one column per metric, ``mean [low, high]`` (95% bootstrap)."""
    import pandas as pd

    return pd.DataFrame({m: table(runs, m, by_kind=False)["all"] for m in metrics})


def table(runs: Sequence[Run], metric: str | None = None, by_kind: bool = True):
    """A pandas table: one row per method, one column per question kind, ``mean [low, high]``."""
    import pandas as pd

    rows = {}
    for run in runs:
        summ = run.summary(metric, by_kind=by_kind)
        rows[run.name] = {g: f"{m:.2f} [{lo:.2f}, {hi:.2f}]" for g, (m, lo, hi) in summ.items()}
    frame = pd.DataFrame(rows).T
    order = ["all"] + [c for c in KINDS if c in frame.columns] + sorted(
        c for c in frame.columns if c != "all" and c not in KINDS)
    return frame[order]


def plot_by_kind(runs: Sequence[Run], metric: str | None = None, title: str | None = None):
    """Grouped bars: one group per question kind, one bar per method, 95% bootstrap CI whiskers."""
    import matplotlib.pyplot as plt

    kinds = [k for k in KINDS if any(q.kind == k for q in runs[0].questions)] + ["all"]
    fig, ax = plt.subplots(figsize=(7.5, 4))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        summ = run.summary(metric, by_kind=True)
        means = [summ[k][0] for k in kinds]
        err = [[summ[k][0] - summ[k][1] for k in kinds], [summ[k][2] - summ[k][0] for k in kinds]]
        ax.bar([x + (i - (len(runs) - 1) / 2) * width for x in range(len(kinds))], means, width,
               yerr=err, capsize=2, label=run.name)
    ax.set_xticks(range(len(kinds)), kinds, rotation=15)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(metric or f"recall@{runs[0].k}")
    ax.set_title(title or f"{metric or f'recall@{runs[0].k}'} by question kind (95% bootstrap CI)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    """Command line: ingest a data set into a scratch namespace, score each mode, clean up."""
    from ..embeddings import get_embedder
    from ..memory.long_term import MemoryStore
    from ..server import connect

    p = argparse.ArgumentParser(prog="python -m memorykit.course.eval", description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="data/longmem (default), a LoCoMo or LongMemEval JSON")
    p.add_argument("--split", default=None, help="dev / test (shipped set); default: all")
    p.add_argument("--modes", default="vector,text,hybrid,hybrid+recency")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--namespace", default="evalrun")
    args = p.parse_args(argv)
    data = load_longmem(args.data).split(args.split)
    r = connect()
    store = MemoryStore(r, get_embedder(r), namespace=args.namespace)
    try:
        turn_of = ingest(store, data)
        print(f"{data.name}: {len(data.dialogs)} dialogs, {len(turn_of)} turns, {len(data.questions)} questions")
        for mode in args.modes.split(","):
            base, _, extra = mode.partition("+")
            run = evaluate(store, data, turn_of, k=args.k, mode=base, recency=extra == "recency" or None)
            print(f"\n{mode}: recall@{args.k} by kind (mean [95% CI]), {run.seconds:.1f} s")
            for g, (m, lo, hi) in sorted(run.summary(by_kind=True).items()):
                n = sum(1 for q in data.questions if g in ("all", q.kind))
                print(f"  {g:18s} {m:.3f} [{lo:.3f}, {hi:.3f}]  n={n}")
    finally:
        store.drop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
