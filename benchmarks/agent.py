"""The memory agent: where a turn's time goes, and what background writes save the user.

A 50-turn scripted chat (the statements and questions of data/agent/scripted_questions.jsonl,
plus small talk; a new thread every 10 turns) with the offline LLM and the Redis embeddings
cache emptied of the run's texts (every text is embedded the first time, as when a user says
it; repeats within a turn hit the cache, as in production), run twice on fresh namespaces:

1. background writes (the default): the user waits for load + retrieve + model + store; extract,
   remember, working memory and summarize run after the reply (the user reads and types meanwhile,
   so we flush between turns outside the measured time);
2. inline writes (``background=False``): the user waits for everything.

Prints the per-step time table (median / mean / p95 ms), the user-visible latency ratio, the
embedder calls per turn (the question is embedded once and its vector shared by every search)
and the model calls and tokens per turn.
The offline model answers in about a millisecond; a hosted model takes hundreds. So the same
comparison runs again (fewer turns) with a fixed delay added to every model call
(``--llm-latency-ms``, labelled "simulated"), which is where background writes pay off.

    .venv/bin/python benchmarks/agent.py [--turns 50] [--llm-latency-ms 250] [--latency-turns 20]
    .venv/bin/python benchmarks/agent.py --embeddings-only
"""
from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd

import threading

import memorykit as mk
from memorykit.agent.memory_agent import BACKGROUND_STEPS, FOREGROUND_STEPS
from memorykit.course.agent_eval import load_script

NS = "benchagent"
SMALL_TALK = ["Thanks, that helps.", "Good morning!", "Can you keep that in mind?", "Interesting.",
              "Let's continue tomorrow."]


class Delayed:
    """The offline model plus a fixed delay per call: a stand-in for a network round-trip (labelled)."""

    def __init__(self, inner, delay_ms: float):
        self.inner, self.delay = inner, delay_ms / 1000
        self.label = f"offline + {delay_ms:.0f} ms simulated latency"

    def perform(self, task, inp, tools=None):
        time.sleep(self.delay)
        return self.inner.perform(task, inp, tools=tools)

    def chat(self, messages, **kwargs):
        time.sleep(self.delay)
        return self.inner.chat(messages, **kwargs)


class CountingEmbedder:
    """Counts the embedder calls made while the user waits (main thread) and in the background."""

    def __init__(self, emb):
        self.emb, self.foreground, self.background, self.query_foreground = emb, 0, 0, 0
        self.query: str | None = None
        real_embed, real_many = emb.embed, emb.embed_many

        def count(texts):
            if threading.current_thread() is threading.main_thread():
                self.foreground += 1
                self.query_foreground += sum(t == self.query for t in texts)
            else:
                self.background += 1

        emb.embed = lambda text, *a, **k: count([text]) or real_embed(text, *a, **k)
        emb.embed_many = lambda texts, *a, **k: count(list(texts)) or real_many(texts, *a, **k)

    def restore(self) -> None:
        del self.emb.embed, self.emb.embed_many


def clean(r, namespace: str) -> None:
    for name in r.execute_command("FT._LIST"):
        if name.startswith(namespace + "_"):
            r.execute_command("FT.DROPINDEX", name)
    doomed = list(r.scan_iter(match=namespace + ":*"))
    for i in range(0, len(doomed), 500):
        r.delete(*doomed[i:i + 500])


def script(turns: int) -> list[str]:
    lines = []
    for s in load_script():
        lines += s["setup"] + [q["ask"] for q in s["questions"]]
    lines += SMALL_TALK
    leads = ["", "By the way, ", "One more thing: ", "Also, "]  # later rounds say it differently
    out = []
    for i in range(turns):
        line, lead = lines[i % len(lines)], leads[(i // len(lines)) % len(leads)]
        out.append(lead + (line[0].lower() + line[1:] if lead else line))
    return out


def play(r, emb, llm, namespace: str, texts: list[str], background: bool) -> list[mk.Turn]:
    clean(r, namespace)
    emb.forget(texts)  # each run embeds the user's words for the first time
    agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=namespace, background=background)
    turns = []
    try:
        for i, text in enumerate(texts):
            turns.append(agent.chat(text, user_id="bench-user", thread_id=f"session-{i // 10}"))
            agent.flush()  # the user reads the reply and types: writes finish in that time
    finally:
        agent.close()
        clean(r, namespace)
        emb.forget([t.reply for t in turns if t.reply] +
                   [d.memory.content for t in turns for d in t.memories_stored if d.memory])
    failed = [t.error or "; ".join(t.failed_steps.values()) for t in turns if t.error or t.failed_steps]
    if failed:
        raise SystemExit(f"{len(failed)} turns failed, first: {failed[0]}")
    return turns


def embeddings_per_turn(r, emb, llm, texts: list[str]) -> None:
    """Embedder calls per turn, full memory, in both retrieval modes (measured, one run)."""
    for retrieval in ("inject", "tools"):
        namespace = NS + "emb" + retrieval
        clean(r, namespace)
        counter = CountingEmbedder(emb)
        agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=namespace, retrieval=retrieval)
        fg, bg, q = [], [], []
        try:
            for i, text in enumerate(texts):
                before = (counter.foreground, counter.background, counter.query_foreground)
                counter.query = text
                agent.chat(text, user_id="bench-user", thread_id=f"session-{i // 10}")
                agent.flush()
                fg.append(counter.foreground - before[0])
                bg.append(counter.background - before[1])
                q.append(counter.query_foreground - before[2])
        finally:
            agent.close()
            counter.restore()
            clean(r, namespace)
        print(f"Embedder calls per turn, retrieval={retrieval}, {len(texts)} turns: while the user waits "
              f"mean {statistics.fmean(fg):.2f} (max {max(fg)}), of them the question itself "
              f"{statistics.fmean(q):.2f}; in the background mean {statistics.fmean(bg):.2f}")
    print()


def usage_table(turns: list[mk.Turn]) -> str:
    calls = [t.model_calls for t in turns]
    tokens_in = [t.tokens_in for t in turns]
    tokens_out = [t.tokens_out for t in turns]
    return (f"model calls per turn: mean {statistics.fmean(calls):.2f}, max {max(calls)}; tokens in per turn: "
            f"mean {statistics.fmean(tokens_in):.0f}; tokens out per turn: mean {statistics.fmean(tokens_out):.0f}")


def step_table(turns: list[mk.Turn]) -> pd.DataFrame:
    rows = []
    for step in (*FOREGROUND_STEPS, *BACKGROUND_STEPS):
        values = [t.timings_ms.get(step, 0.0) for t in turns]
        rows.append({"step": step, "when": "user waits" if step in FOREGROUND_STEPS else "background",
                     "median ms": statistics.median(values), "mean ms": statistics.fmean(values),
                     "p95 ms": sorted(values)[int(0.95 * (len(values) - 1))],
                     "share %": 0.0})
    df = pd.DataFrame(rows)
    df["share %"] = 100 * df["mean ms"] / df["mean ms"].sum()
    return df.round(1)


def compare(r, emb, llm, texts: list[str], tag: str) -> tuple[list[mk.Turn], float]:
    bg = play(r, emb, llm, NS + tag + "bg", texts, background=True)
    inline = play(r, emb, llm, NS + tag + "inline", texts, background=False)
    bg_ms = [t.reply_ms for t in bg]
    in_ms = [t.reply_ms for t in inline]
    bg_med, in_med = statistics.median(bg_ms), statistics.median(in_ms)
    bg_mean, in_mean = statistics.fmean(bg_ms), statistics.fmean(in_ms)
    print(f"User-visible latency, {len(texts)} turns, {getattr(llm, 'label', llm)}:")
    print(f"  background writes: median {bg_med:.1f} ms, mean {bg_mean:.1f} ms")
    print(f"  inline writes:     median {in_med:.1f} ms, mean {in_mean:.1f} ms")
    print(f"  ratio inline / background: median {in_med / bg_med:.2f}x, mean {in_mean / bg_mean:.2f}x\n")
    return bg, in_mean / bg_mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--llm-latency-ms", type=float, default=250.0)
    parser.add_argument("--latency-turns", type=int, default=20)
    parser.add_argument("--embeddings-only", action="store_true", help="only count embedder calls per turn")
    args = parser.parse_args()
    r = mk.connect()
    emb = mk.get_embedder(r)
    llm = mk.get_llm("offline")
    texts = script(args.turns)
    play(r, emb, llm, NS + "warm", texts[:3], background=True)  # load the model once
    embeddings_per_turn(r, emb, llm, texts[:20])
    if args.embeddings_only:
        return

    bg, _ = compare(r, emb, llm, texts, "off")
    print(f"Per-step time of a turn ({args.turns} turns, offline LLM, background writes):")
    print(step_table(bg).to_string(index=False))
    stored = sum(len(t.memories_stored) for t in bg)
    print(f"memory decisions made: {stored}")
    print(usage_table(bg) + "\n")
    if args.llm_latency_ms > 0 and args.latency_turns > 0:
        compare(r, emb, Delayed(llm, args.llm_latency_ms), texts[:args.latency_turns], "lat")


if __name__ == "__main__":
    main()
