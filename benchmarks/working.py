"""Working memory and message recall: what they cost and how well the offline upkeep reads people.

1. Prompt cost: tokens the working-memory block adds to every turn (empty and filled; template,
   schema and free text), compared with the tokens of an average user message.
2. Recall latency: one ``MessageIndex.search`` (embed the query + KNN with a user filter) as a
   ratio of one embedding of the same kind of text, over a few thousand stored messages.
3. The offline ``update_working_memory`` method: training-data sizes, cross-validated accuracy of
   its models on the training data, and fact recall / superseded values left on the dev dialogs
   and on the held-out dialogs and those written apart from the method (never tuned on), in every format.

    .venv/bin/python benchmarks/working.py [--messages 1000] [--queries 30] [--only upkeep]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import memorykit as mk
from memorykit.course.working_eval import INDEPENDENT, load_dialogs, score_profiles
from memorykit.messages import model_token_counter, set_token_counter

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
    dialogs = load_dialogs("dialogs.jsonl")
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
        set_token_counter(counter)
        turn_tokens = statistics.mean(mk.count_tokens(t) for t in turns)
        print(f"   counting with {counter_name}; an average user message = {turn_tokens:.1f} tokens")
        for mode, kwargs in modes.items():
            wm = mk.WorkingMemory(r, NS, scope="user", **kwargs)
            empty = mk.count_tokens(wm.prompt_block("bench"))
            for turn in dialogs[0]["turns"]:
                wm.observe(turn, llm, user_id="bench")
            filled = mk.count_tokens(wm.prompt_block("bench"))
            content = wm.size(wm.get("bench"))
            print(f"   {mode:8} empty {empty:4d} tok  filled {filled:4d} tok  (content {content} chars)  "
                  f"= {filled / turn_tokens:4.1f}x an average user message")
            wm.delete_all("bench")
    set_token_counter(None)


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
            index.history(u, f"t{t}", ttl=None).append(msgs)  # vectors belong to a stored thread
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


def upkeep(r, llm) -> None:
    import numpy as np
    from sklearn.model_selection import GroupKFold, StratifiedKFold

    from memorykit.offline import working_data as wd, working_models as wm

    train = wd.profile_rows()
    clauses = wd.labelled_clauses()
    pairs = sum(len(x["old"]) for x in wd.load("revisions_train.jsonl"))
    print(f"\n3) offline upkeep; training data: {len(train)} labelled messages "
          f"({sum(1 for x in train if x.get('name'))} with a name, {sum(1 for x in train if x.get('place'))} with a place), "
          f"{len(clauses)} clauses, {pairs} revision pairs")
    name_x, name_y, place_x, place_y = wm.token_data(train)
    for what, xs, ys, c, weight in (("name tagger", name_x, name_y, wm.NAME_C, wm.NAME_WEIGHT),
                                    ("place classifier", place_x, place_y, wm.PLACE_C, None)):
        idx, right, total = np.arange(len(xs)), 0, 0
        for fit_on, test_on in GroupKFold(5).split(idx, groups=idx):
            model = wm._fit_dict([x for i in fit_on for x in xs[i]], [y for i in fit_on for y in ys[i]], c, weight)
            for i in test_on:
                if xs[i]:
                    p = model.predict_proba(xs[i])[:, 1]
                    right += int(set(np.where(p > 0.5)[0]) == set(np.where(np.array(ys[i]) == 1)[0])) \
                        if what == "name tagger" else int(({int(p.argmax())} if p.max() > 0.5 else set())
                                                        == set(np.where(np.array(ys[i]) == 1)[0]))
                    total += 1
        print(f"   {what:17} 5-fold CV, messages fully right: {right / total:.2f} ({total} messages)")
    texts, labels = [x["text"] for x in clauses], np.array([x["kind"] for x in clauses])
    predicted = np.empty(len(texts), dtype=object)
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    for fit_on, test_on in StratifiedKFold(5, shuffle=True, random_state=0).split(texts, labels):
        vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[\w']+|[?!]").fit(
            [texts[i] for i in fit_on])
        model = LogisticRegression(C=wm.CLAUSE_C, max_iter=3000, class_weight="balanced").fit(
            wm.clause_matrix(vec, [texts[i] for i in fit_on]), labels[fit_on])
        predicted[test_on] = model.predict(wm.clause_matrix(vec, [texts[i] for i in test_on]))
    print(f"   clause classifier 5-fold CV accuracy: {(predicted == labels).mean():.2f}")
    for name in ("dialogs.jsonl", "dialogs_dev.jsonl", "profile_heldout.jsonl", INDEPENDENT):
        for mode in ("template", "schema", "text"):
            t0 = time.perf_counter()
            score = score_profiles(r, llm, load_dialogs(name), namespace=NS, mode=mode)
            print(f"   {name:25} {score}  ({time.perf_counter() - t0:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--only", choices=["cost", "recall", "upkeep"])
    args = parser.parse_args()
    r = mk.connect()
    llm = mk.get_llm("offline")
    clean(r)
    try:
        if args.only in (None, "cost"):
            prompt_cost(r, llm)
        if args.only in (None, "recall"):
            recall_latency(r, args.messages, args.queries)
        if args.only in (None, "upkeep"):
            upkeep(r, llm)
    finally:
        clean(r)


if __name__ == "__main__":
    main()
