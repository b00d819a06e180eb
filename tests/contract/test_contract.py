"""Every task and a whole MemoryAgent conversation against every server profile (issue #26's "done when"):
at most one rejected request per client and parameter, every accepted request bounded, every structured
task strict where the server supports it, every turn answered, usage exact where the server reports it."""
from __future__ import annotations

import json

import pytest

import memorykit as mk
from memorykit.course.local_model import LlamaCppChat
from memorykit.llm import TaskFailed, run_task, track_usage, usage_meter
from memorykit.llm.openai_chat import OpenAIChat

from .cases import ANSWERS, TOOLS, all_tasks, prompts, sample_input, violations, working_input
from .fake_server import PROFILES, FakeServer


@pytest.fixture(params=list(PROFILES))
def served(request, monkeypatch):
    """A fake server with one profile and the client ``get_llm()`` builds for it (as a user configures it)."""
    profile = PROFILES[request.param]
    fake = FakeServer(profile, ANSWERS, prompts())
    for var, value in {"OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "sk-contract", "MEMORYKIT_LLM": "openai",
                       "MEMORYKIT_LLM_MODEL": profile.model, "MEMORYKIT_LLM_FAMILY": profile.family}.items():
        monkeypatch.setenv(var, value)
    yield fake, mk.get_llm()
    fake.close()


def run_all(llm) -> list[str]:
    """Each task once with a valid input; the names of the tasks that failed."""
    failed = []
    for name, task in all_tasks().items():
        fmt = name.partition("[")[2].rstrip("]")
        inp = working_input(task, fmt) if fmt else None
        try:
            run_task(llm, task, inp or sample_input(task),
                     tools=TOOLS if task.output is None else None)
        except TaskFailed as exc:
            failed.append(f"{name}: {exc}")
    return failed


def test_every_task_on_every_profile(served):
    fake, llm = served
    with track_usage() as calls, usage_meter(llm) as meter:
        assert run_all(llm) == []
        assert run_all(llm) == []  # the second round: what the client learned, it keeps
    assert violations(fake) == []
    assert len(fake.rejected()) <= 1  # only llama.cpp's refused json_schema teaches anything here
    assert all(e.status == 200 for e in fake.log[len(fake.log) // 2 + 1:])
    assert not any(c.estimated for c in calls) and len(meter.calls) == len(calls)
    assert (sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls)) == fake.reported_usage()
    if fake.profile.reasoning:
        assert sum(c.reasoning_tokens for c in calls) == 96 * len(calls) > 0
    priced = fake.profile.family == "openai"
    assert (meter.cost > 0) if priced else meter.cost == 0
    assert str(meter).startswith(f"{len(calls)} model calls, ")


def test_a_memory_agent_conversation_on_every_profile(served, r, emb, ns):
    fake, llm = served
    agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, memory="full", retrieval="tools")
    said = ["Hi, I'm Lena. I moved from Paris to Berlin last month.",
            "Please remember with manage_memory: I'm allergic to peanuts.",
            "Call me Lena from now on (update_working_memory).",
            "Where do I live now?"]
    turns = []
    for user in ("lena", "a|b {x} *"):  # a second, adversarial user id beside the first
        for text in said:
            turns.append(agent.chat(text, user_id=user, thread_id="t1"))
        agent.flush()
    agent.close()
    for turn in turns:
        assert turn.error is None and turn.reply.strip() and not turn.failed_steps, turn
        assert not any("error" in json.loads(out) for out in turn.tool_results), turn.tool_results
    used = {c["function"]["name"] for t in turns for c in t.tool_calls}
    assert {"search_memory", "manage_memory", "update_working_memory"} <= used
    assert violations(fake) == []
    usage = [u for t in turns for u in t.usage]
    assert not any(u.estimated for u in usage)
    assert (sum(u.prompt_tokens for u in usage), sum(u.completion_tokens for u in usage)) == fake.reported_usage()
    assert all((t.cost > 0) if fake.profile.family == "openai" else t.cost == 0 for t in turns)
    assert mk.MemoryStore(r, embedder=emb, namespace=ns).search("peanuts", user_id="a|b {x} *", k=5)


def test_a_cut_off_answer_gets_one_larger_budget_then_fails(served):
    fake, llm = served
    task = all_tasks()["extract_memories"]
    inp = sample_input(task)
    run_task(llm, task, inp)  # whatever the client has to learn, it learns here
    fake.log.clear()
    fake.inject = ["length"]
    with track_usage() as calls:
        assert run_task(llm, task, inp).memories
    first, second = (e.body for e in fake.log)
    param = next(k for k in fake.profile.token_params if k in first)
    extra = mk.config.settings().llm_reasoning_tokens if llm.reasoning or llm.thinks else 0
    assert second[param] - extra == min(2 * (first[param] - extra), mk.config.settings().llm_max_tokens_cap)
    assert calls[0].requests == 2 and calls[0].tokens == sum(e.usage["total_tokens"] for e in fake.log)
    fake.inject = ["length", "length"]
    with pytest.raises(TaskFailed, match="cut off"):
        run_task(llm, task, inp)
    assert violations(fake) == []
    fake.inject = ["length"]  # a plain chat call returns what it got: the budget was the caller's choice
    assert llm.chat([{"role": "user", "content": "hello"}], max_tokens=8).usage["truncated"] == 1


def test_a_refusal_is_a_task_failure_with_its_text(served):
    fake, llm = served
    fake.inject = [None, "refusal"] if fake.profile.name == "llama.cpp" else ["refusal"]
    with pytest.raises(TaskFailed, match="refused") as info:
        run_task(llm, all_tasks()["summarize"], sample_input(
            all_tasks()["summarize"]))
    assert info.value.raw == "I can't help with that." and "help" not in info.value.reason  # the reason is logged


def test_a_transient_500_naming_json_schema_is_retried_and_teaches_nothing(served):
    fake, llm = served
    before = llm.shape
    fake.inject = ["transient500"]
    task = all_tasks()["summarize"]
    assert run_task(llm, task, sample_input(task)).facts
    assert fake.log[0].status == 500 and fake.log[1].status in (200, 500)
    if fake.profile.name != "llama.cpp":  # llama.cpp's own validation 500 is the one lesson it teaches
        assert llm.shape == before and fake.log[1].body["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize("name", ["vllm", "ollama", "llama.cpp"])
def test_streamed_usage_is_exact_where_the_server_reports_it(name):
    fake = FakeServer(PROFILES[name], ANSWERS, prompts())
    try:
        llm = LlamaCppChat("local", api_key="x", base_url=fake.url, family="compatible")
        reply = llm.chat([{"role": "user", "content": "hello"}])
        reply2 = llm.chat([{"role": "user", "content": "hello"}])
    finally:
        fake.close()
    assert all(e.body["stream_options"] == {"include_usage": True} for e in fake.log)
    reported = fake.log[-1].usage
    if PROFILES[name].stream_usage == "never":
        assert reply.usage["estimated"] == 1 and reported is None
    else:
        assert reply2.usage == {"prompt_tokens": reported["prompt_tokens"], "estimated": 0, "calls": 1,
                                "completion_tokens": reported["completion_tokens"], "reasoning_tokens": 0,
                                "cached_tokens": 0, "truncated": 0}


def test_a_reasoning_model_on_openai_gets_its_documented_shape(monkeypatch):
    for var in ("MEMORYKIT_LLM_FAMILY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    llm = OpenAIChat("gpt-5-mini", api_key="sk-test")
    assert llm.family == "openai" and llm.reasoning
    assert (llm.shape.tokens, llm.shape.temperature, llm.shape.reasoning_effort) == ("max_completion_tokens",
                                                                                     False, "low")
    assert not OpenAIChat("gpt-5-chat-latest", api_key="sk-test").reasoning
    assert OpenAIChat("gpt-4o-mini", api_key="sk-test").shape.temperature


def test_large_notebook_evaluations_use_a_real_model_only_when_asked(monkeypatch):
    from memorykit.course.model_calls import evaluation_llm

    real, offline = OpenAIChat("gpt-5-mini", api_key="sk-test"), mk.get_llm("offline")
    monkeypatch.delenv("MEMORYKIT_FULL_EVAL", raising=False)
    assert evaluation_llm(real).label == "offline"          # hundreds of paid calls only on request
    assert evaluation_llm(offline) is offline
    monkeypatch.setenv("MEMORYKIT_FULL_EVAL", "1")
    assert evaluation_llm(real) is real


def test_threads_that_meet_the_same_refusal_teach_the_client_once():
    """A client misconfigured for gpt-5-mini (sent as a compatible server: max_tokens, temperature) learns both
    rules from the refusals, once each under its lock, while eight threads call it; then nothing is refused."""
    import threading

    fake = FakeServer(PROFILES["openai-reasoning"], ANSWERS, prompts())
    try:
        llm = OpenAIChat("gpt-5-mini", api_key="x", base_url=fake.url, family="compatible")
        task = all_tasks()["summarize"]
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(run_task(llm, task, sample_input(task))))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 8 and llm._learned == {"max_tokens", "temperature"}
        assert (llm.shape.tokens, llm.shape.temperature) == ("max_completion_tokens", False)
        seen = len(fake.log)
        run_task(llm, task, sample_input(task))
        assert [e.status for e in fake.log[seen:]] == [200]
        assert {e.param for e in fake.rejected()} == {"max_tokens", "temperature"}
    finally:
        fake.close()


def test_the_usage_log_has_one_line_per_request_with_the_servers_counts(served, tmp_path, monkeypatch):
    fake, llm = served
    log = tmp_path / "usage.jsonl"
    monkeypatch.setenv("MEMORYKIT_USAGE_LOG", str(log))
    llm.chat([mk.Message(role="user", content="hello")])  # a plain chat, outside any task
    run_all(llm)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    accepted = [e for e in fake.log if e.status == 200]
    assert len(rows) == len(accepted) > len(all_tasks())
    assert rows[0]["task"] == "chat" and {r["task"] for r in rows[1:]} <= {*(n.partition("[")[0] for n in all_tasks())}
    assert all(r["model"] == fake.profile.model for r in rows)
    if fake.profile.stream_usage != "never":
        assert sum(r["prompt_tokens"] for r in rows) == sum(e.usage["prompt_tokens"] for e in accepted if e.usage)


def test_a_stream_broken_off_without_a_finish_reason_is_asked_again_unstreamed():
    fake = FakeServer(PROFILES["llama.cpp"], ANSWERS, prompts())
    fake.inject.append("broken_stream")
    try:
        llm = LlamaCppChat("local", api_key="x", base_url=fake.url, family="compatible")
        reply = llm.chat([{"role": "user", "content": "hello"}])
    finally:
        fake.close()
    assert [bool(e.body.get("stream")) for e in fake.log] == [True, False]
    assert reply.content.strip() and reply.usage["estimated"] == 0


def test_a_model_that_thinks_inside_max_tokens_gets_room_once_its_thought_shows(monkeypatch):
    """gpt-oss on Ollama spends its thought out of max_tokens: a small task's budget ends in the thought, with no
    answer. The client sees the thought in that reply, asks again with MEMORYKIT_LLM_REASONING_TOKENS more, and
    sends every later request with that room from the start."""
    fake = FakeServer(PROFILES["ollama-thinking"], ANSWERS, prompts())
    try:
        llm = OpenAIChat(PROFILES["ollama-thinking"].model, base_url=fake.url, family="compatible")
        assert not llm.thinks
        task = all_tasks()["decide_memory"]
        assert run_task(llm, task, sample_input(task))
        assert llm.thinks and [e.body["max_tokens"] <= 400 for e in fake.log] == [True, False]
        fake.log.clear()
        assert run_task(llm, all_tasks()["extract_memories"], sample_input(all_tasks()["extract_memories"]))
        assert len(fake.log) == 1 and fake.log[0].body["max_tokens"] > 2048  # room from the start
        assert violations(fake) == []
    finally:
        fake.close()
