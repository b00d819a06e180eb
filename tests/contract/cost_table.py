"""Price a notebook-08-like conversation (memory="full", retrieval="inject", five turns over two threads)
with the price table in ``memorykit.config``. The token counts are the fake server's (about four characters
per token, 96 reasoning tokens per call for a reasoning model), not a real model's: the table shows how the
price table and the usage meter add up, and the order of magnitude.

    python tests/contract/cost_table.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memorykit as mk  # noqa: E402

from contract.cases import ANSWERS, prompts  # noqa: E402
from contract.fake_server import PROFILES, FakeServer  # noqa: E402

THREADS = {"honeymoon": ["Hi, my name's Raphael.", "My wife and I went to Paris in 2009 for our honeymoon.",
                         "Next year is our 10-year anniversary and we want to plan a special trip."],
           "anniversary": ["Where did I go back in 2009?", "What should we plan for the anniversary?"]}


def conversation(profile: str, model: str, r, emb) -> tuple[str, list]:
    fake = FakeServer(PROFILES[profile], ANSWERS, prompts())
    os.environ.update(OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="sk-fake", MEMORYKIT_LLM="openai",
                      MEMORYKIT_LLM_MODEL=model, MEMORYKIT_LLM_FAMILY="openai")
    llm, ns = mk.get_llm(), f"cost{abs(hash(model)) % 10**6}"
    agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns)
    turns = []
    with mk.usage_meter(llm) as meter:
        for thread, texts in THREADS.items():
            for text in texts:
                turns.append(agent.chat(text, user_id="raphael", thread_id=thread))
            agent.flush()
    agent.close()
    mk.MemoryStore(r, embedder=emb, namespace=ns).forget_user("raphael")
    for key in r.scan_iter(match=f"{ns}:*"):
        r.delete(key)
    fake.close()
    return str(meter), turns


if __name__ == "__main__":
    r = mk.connect()
    emb = mk.get_embedder(r)
    print("| model | calls | tokens in | tokens out (reasoning) | cost of the conversation | per turn |")
    print("|---|---|---|---|---|---|")
    for profile, model in [("openai-reasoning", "gpt-5-mini"), ("openai-reasoning", "gpt-5-nano"),
                           ("openai-chat", "gpt-4o-mini"), ("openai-chat", "gpt-4.1-mini")]:
        summary, turns = conversation(profile, model, r, emb)
        usage = [u for t in turns for u in t.usage]
        cost = sum(t.cost for t in turns)
        print(f"| {model} | {len(usage)} | {sum(u.prompt_tokens for u in usage):,} | "
              f"{sum(u.completion_tokens for u in usage):,} ({sum(u.reasoning_tokens for u in usage):,}) | "
              f"${cost:.5f} | ${cost / len(turns):.5f} |")
        print(f"<!-- usage_meter: {summary} -->")
