"""Working memory and message recall: what they cost, as ratios measured in this one run.

1. Prompt cost: tokens the working-memory block adds to every turn (empty and filled; template,
   schema and free text), compared with the tokens of an average user message.
2. Recall latency: one ``MessageIndex.search`` (embed the query + KNN with a user filter) as a
   ratio of one embedding of the same kind of text, over a few thousand stored messages.

    .venv/bin/python benchmarks/working.py [--messages 1000] [--queries 30]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import memorykit as mk
from memorykit.messages import model_token_counter

ROOT = Path(__file__).resolve().parent.parent
NS = "benchworking"
TOPICS = ["pricing", "the launch", "hiring", "a trip to Lisbon", "marathon training", "the database migration",
          "the investor update", "a birthday present", "learning Spanish", "the quarterly budget"]
VERBS = ["Let's talk about", "I'm worried about", "Can you summarize", "Remind me about", "Here is my idea for",
         "What do you think of", "I changed my mind on", "Write a short note on"]


def clean(r) -> None:
    for name in r.execute_command("FT._LIST"):
        if name.startswith(NS + "_"):
            r.execute_command("FT.DROPINDEX", name)
    doomed = list(r.scan_iter(match=NS + ":*"))
    for i in range(0, len(doomed), 500):
        r.delete(*doomed[i:i + 500])


def median_ms(fn, items) -> float:
    times = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def prompt_cost(r, llm) -> None:
    dialogs = [json.loads(x) for x in (ROOT / "data/working/dialogs.jsonl").read_text().splitlines() if x.strip()]
    turns = [t for d in dialogs for t in d["turns"]]
    from pydantic import BaseModel

    class Profile(BaseModel):
        name: str | None = None
        timezone: str | None = None
        goals: list[str] = []
        preferences: list[str] = []

    modes = {"template": dict(template=mk.PROFILE_TEMPLATE), "schema": dict(schema=Profile), "text": {}}
    counters = {"chars/4": None, "MiniLM tokenizer": model_token_counter()}
    print("1) working-memory prompt block, tokens added to every turn")
    for counter_name, counter in counters.items():
        mk.set_token_counter(counter)
        turn_tokens = statistics.mean(mk.count_tokens(t) for t in turns)
        print(f"   counting with {counter_name}; an average user message = {turn_tokens:.1f} tokens")
        for mode, kwargs in modes.items():
            wm = mk.WorkingMemory(r, NS, scope="user", **kwargs)
            empty = mk.count_tokens(wm.prompt_block("bench"))
            for turn in dialogs[0]["turns"]:
                wm.observe(turn, llm, user_id="bench")
            filled = mk.count_tokens(wm.prompt_block("bench"))
            content = wm.size(wm.get("bench")) if not wm.max_tokens else 0
            print(f"   {mode:8} empty {empty:4d} tok  filled {filled:4d} tok  (content {content} chars)  "
                  f"= {filled / turn_tokens:4.1f}x an average user message")
            wm.delete_all("bench")
    mk.set_token_counter(None)


def recall_latency(r, n_messages: int, n_queries: int) -> None:
    rng = random.Random(42)
    emb = mk.get_embedder(r)
    raw = mk.get_embedder(r, cache=False)
    index = mk.MessageIndex(r, emb, NS)
    users = [f"user{u}" for u in range(20)]
    per = n_messages // (len(users) * 5)
    t0 = time.perf_counter()
    for u in users:
        for t in range(5):
            msgs = [mk.Message(role="user" if i % 2 == 0 else "assistant",
                               content=f"{rng.choice(VERBS)} {rng.choice(TOPICS)} (note {u}-{t}-{i})",
                               created_at=1_700_000_000 + i) for i in range(per)]
            index.add(u, f"t{t}", msgs)
    print(f"\n2) recall over {index.count('user0') * len(users)} stored messages "
          f"({len(users)} users; indexed in {time.perf_counter() - t0:.1f} s)")
    queries = [f"what did I say about {rng.choice(TOPICS)}? ({i})" for i in range(n_queries)]
    fresh = [f"{q} [embed]" for q in queries]
    for q in queries[:3]:  # warm up the model and the connection
        raw.embed(q + " warm")
    embed_ms = median_ms(raw.embed, fresh)
    search_ms = median_ms(lambda q: index.search(q, user_id=rng.choice(users), k=5), queries)
    cached_ms = median_ms(lambda q: index.search(q, user_id=rng.choice(users), k=5), queries)
    vectors = [raw.embed(q) for q in queries[:n_queries]]
    from redisvl.query import VectorQuery
    from redisvl.query.filter import Tag

    knn_ms = median_ms(lambda v: index.index.query(VectorQuery(v, "embedding", num_results=5,
                       return_fields=["message_id"], filter_expression=Tag("user_id") == rng.choice(users))), vectors)
    print(f"   one embedding (no cache)             {embed_ms:7.2f} ms   = 1.00")
    print(f"   search, new query (embed + KNN)      {search_ms:7.2f} ms   = {search_ms / embed_ms:.2f}x one embedding")
    print(f"   search, repeated query (cached emb.) {cached_ms:7.2f} ms   = {cached_ms / embed_ms:.2f}x one embedding")
    print(f"   KNN alone (vector given)             {knn_ms:7.2f} ms   = {knn_ms / embed_ms:.2f}x one embedding")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    r = mk.connect()
    clean(r)
    try:
        prompt_cost(r, mk.OfflineChat())
        recall_latency(r, args.messages, args.queries)
    finally:
        clean(r)


if __name__ == "__main__":
    main()
