"""Held-out scores of procedural memory's decisions: tool sets (cold vs warm), query types, feedback.

The held-out files (``data/routes/*_heldout.jsonl``) were written before the methods and are
never used to build or calibrate them. ``data/independent/`` holds sets written apart from the
method by other people (evaluation only, see its README); both are scored side by side.
Used by notebook 06, the tests and ``benchmarks/procedural.py``::

    python -m memorykit.course.procedural_eval                    # both sets, side by side
    python -m memorykit.course.procedural_eval --sets independent --only tools
"""
from __future__ import annotations

import argparse
import json
import statistics
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..config import data_path
from .routing import query_classifier

USER = "wellness_user"


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def heldout(name: str) -> list[dict[str, Any]]:
    """``data/routes/<name>_heldout.jsonl``: tools, query_types or feedback."""
    return read_jsonl(data_path("routes", f"{name}_heldout.jsonl"))


def independent(name: str) -> list[dict[str, Any]]:
    """``data/independent/<name>.jsonl`` (tools or feedback): written apart from the method, evaluation only."""
    return read_jsonl(data_path("independent", f"{name}.jsonl"))


SETS = {"held-out": heldout, "independent": independent}


def training_size(name: str) -> dict[str, int]:
    """Rows per split of ``data/routes/<name>.jsonl`` (train = router references)."""
    counts: dict[str, int] = {}
    for row in read_jsonl(data_path("routes", f"{name}.jsonl")):
        counts[row.get("split", "train")] = counts.get(row.get("split", "train"), 0) + 1
    return counts


# ---------------------------------------------------------------- feedback
@dataclass
class PRF:
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def __repr__(self) -> str:
        return f"P {self.precision:.2f}  R {self.recall:.2f}  F1 {self.f1:.2f}  (tp {self.tp}, fp {self.fp}, fn {self.fn})"


def feedback_scores(windows: Iterable[dict[str, Any]], llm) -> tuple[PRF, list[dict[str, Any]]]:
    """(query, label) pairs found by ``analyze_feedback`` against the expected ones, per window."""
    from ..memory.feedback import analyze_feedback

    tp = fp = fn = 0
    rows = []
    for w in windows:
        got = {(e.query, e.label) for e in analyze_feedback([tuple(x) for x in w["exchanges"]], llm=llm)}
        want = {(e["query"], e["label"]) for e in w["expected"]}
        tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
        rows.append({"id": w["id"], "note": w.get("note", ""), "ok": got == want,
                     "found": sorted(got), "expected": sorted(want)})
    return PRF(tp, fp, fn), rows


# ---------------------------------------------------------------- query types
def query_type_accuracy(rows: Sequence[dict[str, Any]], redis_client=None, embedder=None) -> tuple[float, list]:
    classify = query_classifier(redis_client, embedder)
    got = [classify(r["query"]) for r in rows]
    return sum(g == r["type"] for g, r in zip(got, rows)) / len(rows), got


# ---------------------------------------------------------------- tools, cold and warm
@dataclass
class ColdWarm:
    rows: list[dict[str, Any]]
    learned: int

    def _mean(self, key: str, subset=None) -> float:
        rows = [r for r in self.rows if subset is None or subset(r)]
        return statistics.fmean(float(r[key]) for r in rows) if rows else float("nan")

    @property
    def cold_accuracy(self) -> float:
        return self._mean("ok_cold")

    @property
    def warm_accuracy(self) -> float:
        return self._mean("ok_warm")

    @property
    def steps_ratio(self) -> float:
        return self._mean("steps_warm") / self._mean("steps_cold")

    def multi_tool_steps_ratio(self) -> float:
        def multi(r):
            return len(r["tools"]) > 1
        return self._mean("steps_warm", multi) / self._mean("steps_cold", multi)

    def summary(self) -> str:
        return (f"tool-set accuracy cold {self.cold_accuracy:.3f}, warm {self.warm_accuracy:.3f}; steps cold "
                f"{self._mean('steps_cold'):.2f}, warm {self._mean('steps_warm'):.2f} (warm/cold "
                f"{self.steps_ratio:.2f}; multi-tool questions {self.multi_tool_steps_ratio():.2f}); "
                f"suggestions followed {sum(r['suggested'] for r in self.rows)}/{len(self.rows)}, "
                f"replayed {sum(r['replayed'] for r in self.rows)} (answered in one round trip "
                f"{sum(r['replayed'] and r['steps_warm'] == 1 for r in self.rows)}); "
                f"{self.learned} patterns learned")


def cold_warm(redis_client, embedder, llm, learn: Sequence[str], queries: Sequence[dict[str, Any]],
              namespace: str | None = None, tools_for=None) -> ColdWarm:
    """Learn patterns from the ``learn`` questions, then answer ``queries`` without and with them.

    The wellness tools get a memory store holding ``data/wellness/goals.jsonl``, so goal
    questions can succeed (and be learned); everything is deleted afterwards.
    """
    from ..agent.tool_agent import ToolAgent
    from ..memory.procedural import ProcedureStore
    from .wellness import wellness_tools

    ns = namespace or "eval06" + uuid.uuid4().hex[:6]
    procs = ProcedureStore(redis_client, embedder, namespace=ns, max_examples=32,
                           classify=query_classifier(redis_client, embedder))
    store = None
    if tools_for is None:
        from ..memory.long_term import MemoryStore

        store = MemoryStore(redis_client, embedder, namespace=ns)
        store.add_many([dict(content=g["content"], user_id=g["user_id"], memory_type="episodic")
                        for g in read_jsonl(data_path("wellness", "goals.jsonl"))])
    tools = (tools_for or (lambda p: wellness_tools(USER, store=store, procedures=p)))(procs)
    try:
        learner = ToolAgent(redis_client, llm=llm, tools=tools, procedures=procs)
        for q in learn:
            learner.run(q, user_id=USER)
        cold_agent = ToolAgent(redis_client, llm=llm, tools=tools)
        warm_agent = ToolAgent(redis_client, llm=llm, tools=tools, procedures=procs, learn=False)
        rows = []
        for q in queries:
            c, w = cold_agent.run(q["query"], user_id=USER), warm_agent.run(q["query"], user_id=USER)
            want = sorted(q["tools"])
            rows.append({"id": q.get("id", ""), "query": q["query"], "tools": want,
                         "cold": sorted(set(c.tools_used)), "warm": sorted(set(w.tools_used)),
                         "ok_cold": sorted(set(c.tools_used)) == want, "ok_warm": sorted(set(w.tools_used)) == want,
                         "steps_cold": c.steps, "steps_warm": w.steps, "suggested": w.suggestion is not None,
                         "replayed": w.replayed > 0,
                         "ms_cold": c.execution_time_ms, "ms_warm": w.execution_time_ms})
        return ColdWarm(rows, procs.count(USER))
    finally:
        procs.drop()
        if store is not None:
            store.drop()


def learning_questions() -> list[str]:
    """Past questions the warm agent learns from: the notebook's wellness questions and the router's train split."""
    own = [q["query"] for q in read_jsonl(data_path("wellness", "queries.jsonl"))]
    routed = [r["text"] for r in read_jsonl(data_path("routes", "tools.jsonl")) if r["split"] == "train" and r["tools"]]
    return list(dict.fromkeys(own + routed))


def main(argv: Sequence[str] | None = None) -> None:
    from ..embeddings import get_embedder
    from ..llm.factory import get_llm
    from ..server import connect

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS), help="evaluation sets to score")
    ap.add_argument("--only", nargs="+", choices=["tools", "feedback", "query_types"],
                    default=["tools", "feedback", "query_types"], help="tasks to score")
    ap.add_argument("--tools", help="score this file of questions with tools instead of the sets' files")
    ap.add_argument("--feedback", help="score this file of feedback windows instead of the sets' files")
    args = ap.parse_args(argv)
    r = connect()
    emb, llm = get_embedder(r), get_llm("offline")
    table: dict[str, dict[str, str]] = {}
    if "query_types" in args.only:
        acc, _ = query_type_accuracy(heldout("query_types"), r, emb)
        table.setdefault("query types accuracy", {})["held-out"] = f"{acc:.3f}"
    for name in args.sets:
        if "feedback" in args.only:
            prf, _ = feedback_scores(read_jsonl(args.feedback) if args.feedback else SETS[name]("feedback"), llm)
            for key, value in (("P", prf.precision), ("R", prf.recall), ("F1", prf.f1)):
                table.setdefault(f"feedback {key}", {})[name] = f"{value:.3f}"
        if "tools" in args.only:
            cw = cold_warm(r, emb, llm, learning_questions(), read_jsonl(args.tools) if args.tools else SETS[name]("tools"))
            for key, value in (("cold accuracy", cw.cold_accuracy), ("warm accuracy", cw.warm_accuracy),
                               ("warm/cold steps", cw.steps_ratio)):
                table.setdefault(f"tools {key}", {})[name] = f"{value:.3f}"
            print(f"tools ({name}): {cw.summary()}")
    print(f"{'':24}" + "".join(f"{n:>14}" for n in args.sets))
    for row, cells in table.items():
        print(f"{row:24}" + "".join(f"{cells.get(n, '-'):>14}" for n in args.sets))


if __name__ == "__main__":
    main()
