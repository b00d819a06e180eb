"""Against the real llama.cpp server with SmolLM2-135M: every task answers valid output or a
handled TaskFailed, tools produce tool calls, the memory agent survives a conversation, and
a stalled generation costs one deadline.

The 135M model's *judgement* is not tested here (it is measured in the closing notes):
only that our side of the seam holds with a real server.
"""
from __future__ import annotations

import json
import time

import jsonschema
import pytest

import memorykit as mk
from memorykit.errors import LLMError
from memorykit.course import local_model as local_llm
from memorykit.llm.task import Task, TaskFailed, run_task, track_usage
from memorykit.messages import Message

from .llm_samples import IMPORT_ERRORS, library_tasks, sample_input

EXPECTED_TASKS = {"extract_memories", "decide_memory", "summarize", "analyze_feedback",
                  "update_working_memory", "reply"}
SEARCH = {"type": "function", "function": {
    "name": "search_memory", "description": "Search the user's long-term memory for facts about them.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "what to look for"}},
                   "required": ["query"]}}}


def test_every_domain_module_imports():
    library_tasks()
    assert not IMPORT_ERRORS


def test_the_library_declares_its_tasks():
    assert EXPECTED_TASKS <= set(library_tasks()), f"missing: {EXPECTED_TASKS - set(library_tasks())}"


def test_every_task_returns_valid_output_or_a_handled_failure(local, library_task: Task):
    inp = sample_input(library_task)
    with track_usage() as calls:
        try:
            out = run_task(local, library_task, inp)
        except TaskFailed as exc:  # handled: the caller logs it and skips the step
            assert exc.task == library_task.name and exc.reason
            assert calls, "a failed task still records its model calls"
            print(f"{library_task.name}: TaskFailed ({exc.reason})")
            return
    assert calls and all(c.task == library_task.name for c in calls)
    assert all(c.completion_tokens <= library_task.max_tokens + 5 for c in calls)
    if library_task.output is None:
        assert isinstance(out, Message) and (out.content.strip() or out.tool_calls)
    else:
        assert isinstance(out, library_task.output)
        jsonschema.validate(json.loads(out.model_dump_json()), library_task.schema())


def test_structured_answers_are_valid_json_every_time(local):
    """The schema in the request constrains decoding: the tiny model always answers the shape."""
    from pydantic import BaseModel

    class Place(BaseModel):
        city: str
        year: int

    task = Task("where_when", prompt="Extract the city and the year the user mentions.",
                input=type("In", (BaseModel,), {"__annotations__": {"text": str}}), output=Place,
                max_tokens=60, render=lambda i: i.text)
    for text in ("I went to Paris in 2009.", "In 2015 we moved to Lisbon.", "Tokyo, 2021, was amazing."):
        out = run_task(local, task, task.input(text=text))
        assert isinstance(out.city, str) and isinstance(out.year, int)


def test_a_named_tool_choice_yields_a_valid_call(local):
    reply = local.chat([Message(role="user", content="Where did I travel in 2009?")], tools=[SEARCH],
                       tool_choice={"type": "function", "function": {"name": "search_memory"}}, max_tokens=60)
    (call,) = reply.tool_calls
    assert call["function"]["name"] == "search_memory"
    assert isinstance(json.loads(call["function"]["arguments"])["query"], str)


def test_a_tool_request_yields_a_tool_call(local):
    reply = local.chat([Message(role="system", content="You answer questions about the user. Use search_memory "
                                                       "to look up what you know about them."),
                        Message(role="user", content="Where did I travel in 2009?")],
                       tools=[SEARCH], max_tokens=60)
    assert reply.tool_calls, f"no tool call; the model said {reply.content!r}"
    assert reply.tool_calls[0]["function"]["name"] == "search_memory"
    json.loads(reply.tool_calls[0]["function"]["arguments"])


def test_tool_results_reach_the_model_and_it_answers(local):
    from memorykit.agent.loop import run_tool_loop
    from memorykit.llm.tools import Tool
    from pydantic import BaseModel

    class Ask(BaseModel):
        question: str
        steps: list[Message] = []

    def build(inp: Ask) -> list[Message]:
        return [Message(role="system", content="Answer the user's question. Use search_memory first."),
                Message(role="user", content=inp.question), *inp.steps]

    asked = []
    tool = Tool("search_memory", "Search the user's long-term memory.", SEARCH["function"]["parameters"],
                lambda query: asked.append(query) or {"memories": ["User went to Paris in 2009."]})
    task = Task("reply", prompt="", input=Ask, output=None, max_tokens=80, build=build)
    try:
        result = run_tool_loop(local, task, Ask(question="Where did I travel in 2009?"), [tool], max_steps=2)
    except TaskFailed as exc:
        assert asked, f"the loop failed before any tool ran: {exc}"
        pytest.xfail(f"the 135M model kept calling tools: {exc.reason}")
    assert asked and result.reply.content.strip()


def test_a_replayed_workflow_reaches_the_model(local, r, emb, ns):
    """A replay is the model's first step: it answers from the replayed result, or its own calls replace it."""
    procs = mk.ProcedureStore(r, emb, namespace=ns)
    calls = [{"name": "get_sleep_analysis", "arguments": {"period": "this_week"}}]
    procs.store("How did I sleep this week?", ["get_sleep_analysis"], 1.0, 10, query_type="lookup", calls=calls,
                user_id="wellness_user")
    agent = mk.ToolAgent(r, llm=local, tools=mk.wellness_tools("wellness_user"), procedures=procs, learn=False,
                         max_steps=3)
    seen: list[list[Message]] = []
    chat = local.chat

    def recording(messages, **kwargs):
        seen.append(list(messages))
        return chat(messages, **kwargs)

    local.chat = recording
    run = agent.run("How was my sleep this week?", user_id="wellness_user")
    assert run.replayed == 1 and seen, run
    first = seen[0]
    assert any("get_sleep_analysis" in (m.content or "") or m.role == "tool" for m in first[2:]), first
    if run.failure:
        pytest.xfail(f"the 135M model kept calling tools: {run.failure}")
    if run.steps == 1:
        assert run.calls == calls and run.reply.strip()
    else:
        assert all(t["name"] in {"get_sleep_analysis", "get_health_metrics", "get_workout_data", "get_my_goals",
                                 "get_tool_suggestions"} for t in run.tool_results) and run.reply.strip()


def test_a_stalled_generation_costs_one_deadline(local_server):
    slow = local_llm.local_chat(timeout=1.0)
    started = time.monotonic()
    with pytest.raises(LLMError, match="MEMORYKIT_LLM_TIMEOUT"):
        slow.chat([Message(role="user", content="Write a very long story about a dragon, in many chapters.")],
                  max_tokens=3000)
    assert time.monotonic() - started < 2.5
    # The abandoned generation stops, so the next request is answered within its own deadline: run to the end,
    # this one takes about a minute here (3,000 tokens). How soon the server frees its one slot varies: 0.2 s to
    # 22 s measured on 2026-11-27 on a busy machine (llama-cpp-python notices a hang-up late at times; a new
    # request interrupts a stream anyway), so a fixed bound below the deadline would test the machine's load.
    local_llm.local_chat(timeout=30.0).chat([Message(role="user", content="Say hi.")], max_tokens=8)


def test_a_stalled_task_is_a_task_failure_within_the_deadline(local_server, monkeypatch):
    monkeypatch.setenv("MEMORYKIT_LLM_TIMEOUT", "1")
    slow = local_llm.local_chat()
    task = next(t for t in library_tasks().values() if t.output is not None)
    monkeypatch.setenv(f"MEMORYKIT_LLM_MAX_TOKENS_{task.name.upper()}", "3000")
    started = time.monotonic()
    try:
        run_task(slow, task, sample_input(task))
    except TaskFailed as exc:
        assert "deadline" in exc.reason or "MEMORYKIT_LLM_TIMEOUT" in exc.reason or "invalid" in exc.reason
    assert time.monotonic() - started < 2 * 1 + 1.5  # at most two calls (answer + repair), each bounded


def test_memory_agent_four_turns_two_threads(local_server, r, emb, ns):
    agent = mk.MemoryAgent(r, llm=local_llm.local_chat(), embedder=emb, namespace=ns,
                           memory="full", retrieval="inject")
    user = "lena"
    said = [("t1", "Hi, I'm Lena and I live in Berlin."), ("t1", "I'm allergic to peanuts."),
            ("t2", "Where do I live?"), ("t2", "What am I allergic to?")]
    timings, turns = [], []
    try:
        for thread, text in said:
            if turns and thread != said[len(turns) - 1][0]:
                agent.flush()  # a new thread does not wait for another thread's writes: let t1's memories land
            started = time.monotonic()
            turn = agent.chat(text, user_id=user, thread_id=thread)
            timings.append(time.monotonic() - started)
            turns.append(turn)
            assert turn.reply.strip() if isinstance(turn.reply, str) else turn.reply.content.strip()
        agent.flush()
        for thread in ("t1", "t2"):
            stored = agent.history(user, thread).messages()
            users = [m.content for m in stored if m.role == "user"]
            assert users == [t for th, t in said if th == thread]
            assert sum(m.role == "assistant" for m in stored) == 2
        print(f"seconds per turn (local model): {[round(t, 1) for t in timings]}; model calls, tokens in / out "
              f"per turn: {[(t.model_calls, t.tokens_in, t.tokens_out) for t in turns]}")
    finally:
        agent.close()
