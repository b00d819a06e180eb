"""Short-term memory benchmark, ratios and scores measured in one run.

1. latency: append / read-window / prompt view, as ratios to one PING;
2. tokens: prompt tokens per turn over N turns for full history, trim and summaries;
3. retention: planted facts still visible to the model at the last turn, trim vs ByCount vs
   ByTokens, on data/conversations (long_coaching + planted.jsonl, dev and heldout splits);
4. check: the summary trace check (threshold chosen on dev, scored on heldout) and the
   offline summarizer's small-talk filter (trained on train, scored on heldout).

    .venv/bin/python benchmarks/short_term.py [--turns 500] [--only latency,tokens,retention,check]
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import time

import numpy as np

import memorykit as mk
from memorykit import Message
from memorykit.config import data_path
from memorykit.memory import summarize as S
from memorykit.memory.short_term import trim_last

NS = "bench_short_term"
SYSTEM = "You are a helpful assistant."


def clean(r) -> None:
    for k in r.scan_iter(f"{NS}:*"):
        r.delete(k)


def timed(fn, n: int) -> float:
    """Median seconds per call over ``n`` calls."""
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def latency(r) -> None:
    h = mk.ChatHistory(r, "bench", "latency", namespace=NS)
    msg = Message(role="user", content="My resting heart rate is 72 bpm. " * 4)
    append = timed(lambda: h.append(msg), 2000)
    read10 = timed(lambda: h.messages(last_n=10), 1000)
    read_all = timed(lambda: h.messages(), 50)
    r.set(h.summary_key, json.dumps({"text": "- a summary", "cursor": len(h) - 10}))
    view = timed(h.prompt_messages, 200)
    many = mk.ChatHistory(r, "bench", "vectors", namespace=NS)  # a thread whose recall vectors are listed
    many.append(msg)
    with r.pipeline(transaction=False) as pipe:  # 20,000 stand-ins: the append only moves their expiry
        for i in range(20_000):
            pipe.set(f"{many.key}:v{i}", "x")
            pipe.sadd(many.vectors_key, f"{many.key}:v{i}")
        pipe.execute()
    with_vectors = timed(lambda: many.append(msg), 500)
    ping = timed(r.ping, 1000)
    print(f"thread of {len(h)} messages; ratios to one PING round trip:")
    print(f"  append (RPUSH + EXPIRE + ZADD in one MULTI)      {append / ping:6.1f}x")
    print(f"  append, the thread listing 20,000 recall vectors {with_vectors / ping:6.1f}x")
    print(f"  read last 10 (LRANGE -10 -1 + decode)            {read10 / ping:6.1f}x")
    print(f"  prompt view: summary + 10 after the cursor (Lua) {view / ping:6.1f}x")
    print(f"  read all {len(h)} (LRANGE 0 -1 + decode)          {read_all / ping:6.1f}x")


def conversations(split: str) -> list[dict]:
    """long_coaching (the notebook's, dev) and the planted.jsonl conversations of ``split``."""
    out = []
    if split == "dev":
        rows = [json.loads(line) for line in data_path("conversations", "long_coaching.jsonl").read_text().splitlines()]
        facts = list(csv.DictReader(data_path("conversations", "long_coaching_facts.csv").open()))
        out.append({"id": "long_coaching", "messages": [[x["role"], x["content"]] for x in rows], "facts": facts})
    for line in data_path("conversations", "planted.jsonl").read_text().splitlines():
        c = json.loads(line)
        if c["split"] == split:
            out.append(c)
    return out


def visible(prompt, keyword: str) -> bool:
    return bool(re.search(rf"\b{re.escape(keyword)}\b", "\n".join(m.content for m in prompt)))


def replay(r, llm, emb, conv: dict, name: str, policy=None, window=None):
    """Play a conversation turn by turn; returns the prompt tokens per user turn and the last prompt."""
    h = mk.ChatHistory(r, "bench", f"{conv['id']}-{name}", namespace=NS)
    h.append(Message(role="system", content=SYSTEM))
    tokens, prompt = [], []
    for role, text in conv["messages"]:
        h.append(Message(role=role, content=text))
        if role != "user":
            continue
        if policy is not None:
            mk.summarize_if_needed(h, llm, policy=policy, embedder=emb)
        prompt = h.prompt_messages()
        prompt = trim_last(prompt, window) if window else prompt
        tokens.append(mk.count_tokens(prompt))
    return tokens, prompt, len(h)


STRATEGIES = {"trim (last 10)": {"window": 10},
              "ByCount(10, 4)": {"policy": mk.ByCount(max_messages=10, keep_last=4)},
              "ByTokens(600, 8)": {"policy": mk.ByTokens(max_tokens=600, keep_last=8)}}


def retention(r, llm, emb) -> None:
    print(f"\nplanted facts visible to the model at the last turn ({llm.label} summarizer)")
    print(f"{'split':8}{'conversation':20}" + "".join(f"{s:>18}" for s in STRATEGIES))
    for split in ("dev", "heldout"):
        total = {s: [0, 0] for s in STRATEGIES}
        for conv in conversations(split):
            cells = []
            for name, kw in STRATEGIES.items():
                _, prompt, _ = replay(r, llm, emb, conv, name.split()[0], **kw)
                kept = sum(visible(prompt, f["keyword"]) for f in conv["facts"])
                total[name][0] += kept
                total[name][1] += len(conv["facts"])
                cells.append(f"{kept}/{len(conv['facts'])}")
            print(f"{split:8}{conv['id']:20}" + "".join(f"{c:>18}" for c in cells))
        print(f"{split:8}{'all':20}" + "".join(f"{k}/{n} = {k / n:4.0%}".rjust(18) for k, n in total.values()))


def tokens_per_turn(r, llm, emb, n: int) -> None:
    base = conversations("dev")[0]
    pairs = list(zip(base["messages"][::2], base["messages"][1::2]))
    msgs = []
    for i in range(n):
        (_, u), (_, a) = pairs[i % len(pairs)]
        msgs += [["user", u if i < len(pairs) else f"{u} (week {i // len(pairs) + 1})"], ["assistant", a]]
    conv = {"id": "long", "messages": msgs, "facts": base["facts"]}
    runs = {"full": replay(r, llm, emb, conv, "full")}
    runs.update({name: replay(r, llm, emb, conv, name.split()[0], **kw) for name, kw in STRATEGIES.items()})
    full = runs["full"][0]
    marks = sorted({m for m in (10, 50, 100, 250, 500, n) if m <= n})
    print(f"\nprompt tokens per turn (chars/4 estimate) as a share of full history; {n} turns")
    print(f"{'strategy':20}" + "".join(f"{'t=' + str(m):>8}" for m in marks) + f"{'mean':>8}{'stored':>8}{'facts':>7}")
    for name, (toks, prompt, stored) in runs.items():
        facts = sum(visible(prompt, f["keyword"]) for f in conv["facts"])
        print(f"{name:20}" + "".join(f"{toks[m - 1] / full[m - 1]:8.0%}" for m in marks)
              + f"{statistics.mean(toks) / statistics.mean(full):8.0%}{stored:8}{facts:>5}/{len(conv['facts'])}")


def check(emb) -> None:
    rows = {s: [(x["fact"], x["traceable"], [t for _, t in c["messages"]])
                for c in map(json.loads, data_path("conversations", "planted.jsonl").read_text().splitlines())
                if c["split"] == s for x in c["checks"]] for s in ("dev", "heldout")}
    scored = {s: [(S.trace([f], src, emb)[0], y) for f, y, src in rs] for s, rs in rows.items()}

    def accuracy(pairs, threshold):
        return np.mean([(not t.missing and t.similarity >= threshold) == y for t, y in pairs])

    grid = np.round(np.arange(0.30, 0.80, 0.01), 2)
    best = max(grid, key=lambda th: (accuracy(scored["dev"], th), -abs(th - 0.5)))
    print(f"\ntrace check: anchors (numbers, names) must occur in a source, similarity to the closest source "
          f">= threshold\n  threshold chosen on dev: {best:.2f} (dev accuracy {accuracy(scored['dev'], best):.2f}, "
          f"n={len(scored['dev'])}); in use: {S.TRACE_THRESHOLD:.2f}")
    ho = scored["heldout"]
    tp = sum(not t.ok and not y for t, y in ho)
    print(f"  heldout (n={len(ho)}): accuracy {accuracy(ho, S.TRACE_THRESHOLD):.2f}; made-up facts caught "
          f"{tp}/{sum(not y for _, y in ho)}; true facts kept {sum(t.ok and y for t, y in ho)}/{sum(y for _, y in ho)}")
    for t, y in ho:
        if t.ok != y:
            print(f"    wrong: {'kept' if t.ok else 'dropped'} {t.fact!r} (similarity {t.similarity:.2f})")

    from memorykit.offline.summarize import content_chance

    talk = [json.loads(line) for line in data_path("conversations", "smalltalk.jsonl").read_text().splitlines()]
    held = [x for x in talk if x["split"] == "heldout"]
    pred = content_chance([x["text"] for x in held]) >= 0.5
    acc = np.mean([p == (x["label"] == "content") for p, x in zip(pred, held)])
    print(f"  small-talk filter (logistic regression on embeddings, {len(talk) - len(held)} train sentences): "
          f"heldout accuracy {acc:.2f} (n={len(held)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--only", default="latency,tokens,retention,check")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    r, llm = mk.connect(), mk.get_llm(default="offline")
    emb = mk.get_embedder(r)
    clean(r)
    try:
        if "latency" in parts:
            latency(r)
        if "retention" in parts:
            retention(r, llm, emb)
        if "tokens" in parts:
            tokens_per_turn(r, llm, emb, args.turns)
        if "check" in parts:
            check(emb)
    finally:
        clean(r)


if __name__ == "__main__":
    main()
