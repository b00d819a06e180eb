"""The server rules one request can meet, and what each one teaches a client shared by many users: a schema a
server refuses in strict mode, a filtered answer, a rate limit with Retry-After, a prompt too long for the model,
a reasoning model under a name of its own, and input read from the prompt cache."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Literal, Union

import pytest
from pydantic import BaseModel, Field, create_model
from typing_extensions import Annotated

from memorykit.errors import LLMError
from memorykit.llm import TaskFailed, run_task, track_usage
from memorykit.llm.openai_chat import OpenAIChat
from memorykit.llm.schema import strict_schema
from memorykit.llm.task import cost_of

from .cases import ANSWERS, TOOLS, all_tasks, prompts, sample_input
from .fake_server import PROFILES, FakeServer, strict_problems

PETS = {"type": "function", "function": {"name": "record_pet", "description": "Record the user's pet", "parameters": {
    "type": "object", "properties": {"name": {"type": "string"}, "kind": {"type": "string"}}, "required": ["name"]}}}


class Cat(BaseModel):
    kind: Literal["cat"]
    indoor: bool


class Dog(BaseModel):
    kind: Literal["dog"]
    breed: str


class Household(BaseModel):
    pet: Annotated[Union[Cat, Dog], Field(discriminator="kind")] | None = None


class NewRule(FakeServer):
    """OpenAI with one rule this client cannot know in advance: it refuses ``record_pet`` in strict mode."""

    def refusal(self, body):
        for tool in body.get("tools") or []:
            fn = tool["function"]
            if fn["name"] == "record_pet" and fn.get("strict"):
                return 400, f"Invalid schema for function '{fn['name']}': a rule of this model.", "tools"
        return super().refusal(body)


def served(fake_class=FakeServer, profile="openai-chat", **options):
    fake = fake_class(PROFILES[profile] if isinstance(profile, str) else profile, ANSWERS, prompts())
    llm = OpenAIChat(fake.profile.model, api_key="sk-x", base_url=fake.url, family=fake.profile.family, **options)
    return fake, llm


def strict_of(body: dict) -> dict[str, bool]:
    out = {t["function"]["name"]: bool(t["function"].get("strict")) for t in body.get("tools") or []}
    if body.get("response_format", {}).get("type") == "json_schema":
        out["response_format"] = body["response_format"]["json_schema"]["strict"]
    return out


def test_a_schema_refused_in_strict_mode_goes_non_strict_alone():
    """One user's tool meets a rule: that tool is sent non-strict from then on, every other schema stays strict
    (for every other user of the shared client), and the refusal costs one request."""
    fake, llm = served(NewRule)
    try:
        ask = [{"role": "user", "content": "I got a beagle called Rex (record_pet)."}]
        llm.chat(ask, tools=[PETS, *TOOLS])
        llm.chat(ask, tools=[PETS, *TOOLS])
        task = all_tasks()["extract_memories"]
        run_task(llm, task, sample_input(task))
        assert [e.status for e in fake.log] == [400, 200, 200, 200]
        assert [strict_of(e.body) for e in fake.log[1:]] == [
            {"record_pet": False, "search_memory": True}, {"record_pet": False, "search_memory": True},
            {"response_format": True}]
        assert llm.shape.strict and not llm._learned
    finally:
        fake.close()


class Level(BaseModel):
    name: str
    below: "Level | None" = None


def nested_models(levels: int) -> type[BaseModel]:
    """A pydantic model ``levels`` objects deep, each level its own model (nested through ``$ref``)."""
    inner: type[BaseModel] = BaseModel
    for i in range(levels):
        fields = {"x": (str, ...)} if i == 0 else {"x": (inner, ...)}
        inner = create_model(f"L{i}", **fields)
    return inner


def test_schemas_strict_mode_refuses_are_sent_non_strict_without_a_refusal():
    deep: dict = {"type": "string"}
    for _ in range(11):
        deep = {"type": "object", "properties": {"x": deep}, "required": ["x"]}
    same_start = {"type": "object", "properties": {"a": {"anyOf": [
        {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
        {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}]}}}
    for schema in (deep, nested_models(12).model_json_schema(), same_start,
                   {"type": "object", "properties": {"a": {"enum": list(range(1001))}}},
                   {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"minLength": 1}]}}},
                   {"type": "object", "properties": {"a": {"type": "string", "not": {"enum": ["x"]}}}},
                   {"anyOf": [{"type": "object", "properties": {}}, {"type": "null"}]}):
        assert strict_problems(strict_schema(schema) or schema), schema  # the server refuses each ...
        assert strict_schema(schema) is None, schema                     # ... so none is sent strict
    for fine in (Household, nested_models(10), Level):  # a tag first with one value per variant; 10 levels; recursion
        strict = strict_schema(fine)
        assert strict is not None and strict_problems(strict) == [], fine
    union = {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}
    strict = strict_schema(union)
    assert strict is not None and strict_problems(strict) == [] and "anyOf" in json.dumps(strict)
    fake, llm = served()
    try:
        tool = {"type": "function", "function": {"name": "update_pets", "parameters": same_start}}
        llm.chat([{"role": "user", "content": "I got a dog (update_pets)."}], tools=[tool, *TOOLS])
        assert [e.status for e in fake.log] == [200]
        assert strict_of(fake.log[0].body) == {"update_pets": False, "search_memory": True}
    finally:
        fake.close()


def test_users_meeting_the_same_refused_schema_at_once_are_all_answered():
    import threading

    fake, llm = served(NewRule)
    try:
        replies: list = []
        ask = [{"role": "user", "content": "I got a cat (record_pet)."}]
        threads = [threading.Thread(target=lambda: replies.append(llm.chat(ask, tools=[PETS, *TOOLS])))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(replies) == 6 and sum(e.status == 400 for e in fake.log) <= 6
        assert all(strict_of(e.body)["record_pet"] is False for e in fake.log if e.status == 200)
    finally:
        fake.close()


class NoStrict(FakeServer):
    """An older deployment that knows no ``strict`` at all: every schema sent strict is refused."""

    def refusal(self, body):
        spec = (body.get("response_format") or {}).get("json_schema") or {}
        for i, tool in enumerate(body.get("tools") or []):
            if tool["function"].get("strict"):
                return 400, f"Invalid schema for function '{tool['function']['name']}': strict is not supported.", None
        if spec.get("strict"):
            return 400, f"Invalid schema for response_format '{spec.get('name')}': strict is not supported.", None
        return super().refusal(body)


def test_a_server_refusing_every_strict_schema_costs_a_bounded_number_of_refusals():
    from memorykit.llm.openai_chat import MAX_LOOSE

    fake, llm = served(NoStrict)
    try:
        for user in range(MAX_LOOSE + 20):  # a tool whose description names its user: one schema per user
            tool = {"type": "function", "function": {**PETS["function"], "description": f"Record pet of user {user}"}}
            llm.chat([{"role": "user", "content": "a cat (record_pet)"}], tools=[tool])
        assert sum(e.status == 400 for e in fake.log) == MAX_LOOSE + 1 and not llm.shape.strict
        assert len(llm._loose) == 0 and fake.log[-1].status == 200
    finally:
        fake.close()


class PropertyNamedLikeAParameter(FakeServer):
    def refusal(self, body):
        for tool in body.get("tools") or []:
            if tool["function"]["name"] == "log_reading" and tool["function"].get("strict"):
                return 400, ("Invalid schema for function 'log_reading': In context=('properties', 'temperature'), "
                             "a rule of this model."), "tools"
        return super().refusal(body)


def test_a_refused_schema_with_a_property_named_like_a_parameter_changes_only_that_schema():
    reading = {"type": "function", "function": {"name": "log_reading", "parameters": {
        "type": "object", "properties": {"temperature": {"type": "number"}}, "required": ["temperature"]}}}
    fake, llm = served(PropertyNamedLikeAParameter)
    try:
        llm.chat([{"role": "user", "content": "21.5 degrees (log_reading)"}], tools=[reading])
        assert llm.shape == served_shape(llm) and not llm._learned
        assert [e.status for e in fake.log] == [400, 200] and fake.log[-1].body["temperature"] == 0.0
    finally:
        fake.close()


def test_a_filtered_answer_fails_the_task_without_a_repair():
    fake, llm = served()
    try:
        fake.inject = ["content_filter"]
        task = all_tasks()["extract_memories"]
        with track_usage() as calls, pytest.raises(TaskFailed, match="content filter"):
            run_task(llm, task, sample_input(task))
        assert len(fake.log) == 1  # a partial answer is not sent back to be repaired
        billed = fake.log[0].usage  # ... but it is billed, and counted
        assert [(c.ok, c.prompt_tokens, c.completion_tokens) for c in calls] == [
            (False, billed["prompt_tokens"], billed["completion_tokens"])] and calls[0].cost > 0
        fake.inject = ["content_filter"]
        with pytest.raises(LLMError, match="content_filter"):
            llm.chat([{"role": "user", "content": "hello"}])
    finally:
        fake.close()


def test_retry_after_is_honoured_or_reported_at_once():
    fake, llm = served(timeout=3.0)
    try:
        ask = [{"role": "user", "content": "hello"}]
        fake.inject = ["429 retry-after: 20"]  # longer than the deadline: no request fired at its very end
        with pytest.raises(LLMError, match="HTTP 429 .asked to retry after 20 s, past the deadline"):
            llm.chat(ask)
        assert len(fake.log) == 1
        for header in ("retry-after-ms: 50", "retry-after: Wed, 21 Oct 2015 07:28:00 GMT"):  # ms; a date passed
            fake.inject, seen = [f"429 {header}"], len(fake.log)
            assert llm.chat(ask).content
            assert [e.status for e in fake.log[seen:]] == [429, 200], header
    finally:
        fake.close()


class ContextOverflow(FakeServer):
    """vLLM's answer to a prompt too long for the model: it names both token parameters."""

    def refusal(self, body):
        if len(json.dumps(body["messages"])) > 2000:
            return 400, ("'max_tokens' or 'max_completion_tokens' is too large: 400. This model's maximum context "
                         "length is 512 tokens and your request has 600 input tokens (400 > 512 - 600)."), None
        return super().refusal(body)


def test_a_prompt_too_long_for_the_model_teaches_the_client_nothing():
    fake, llm = served(ContextOverflow, "vllm")
    try:
        with pytest.raises(LLMError, match="maximum context length"):
            llm.chat([{"role": "user", "content": "word " * 600}])
        llm.chat([{"role": "user", "content": "hello"}])  # another user's short prompt
        assert [e.status for e in fake.log] == [400, 200] and not llm._learned
        assert "max_tokens" in fake.log[-1].body and llm.shape == served_shape(llm)
    finally:
        fake.close()


def served_shape(llm: OpenAIChat):
    return OpenAIChat(llm.model, api_key="sk-x", base_url=llm.base_url, family=llm.family).shape


def test_a_reasoning_model_under_a_name_of_its_own_gets_room_to_think():
    """gpt-5 as a deployment named by its owner (Azure, a proxy): not known by name, its thought fills a small
    task's budget. The reasoning tokens the first reply reports give every later request room."""
    profile = replace(PROFILES["openai-reasoning"], name="proxy", model="company-gpt5", family="compatible",
                      token_params=("max_tokens", "max_completion_tokens"), refused_params=(), strict=False,
                      json_object_schema=True, reasoning_tokens=700)
    fake, llm = served(profile=profile)
    try:
        task = all_tasks()["decide_memory"]
        with track_usage() as calls:
            run_task(llm, task, sample_input(task))
            run_task(llm, task, sample_input(task))
        assert llm.thinks and all(c.ok for c in calls)
        accepted = [e for e in fake.log if e.status == 200]
        assert accepted[0].body["messages"] and accepted[0].usage["completion_tokens_details"]["reasoning_tokens"]
        assert [e.usage["completion_tokens"] > 700 for e in accepted[-1:]] == [True]  # the second task: one request
    finally:
        fake.close()


def test_input_read_from_the_prompt_cache_is_counted_and_priced_lower():
    fake, llm = served()
    try:
        long = [{"role": "system", "content": "You are a careful assistant. " * 200}, {"role": "user", "content": "hi"}]
        first, second = llm.chat(long), llm.chat(long)
        assert first.usage["cached_tokens"] == 0 < second.usage["cached_tokens"] <= second.usage["prompt_tokens"]
        assert second.usage["cached_tokens"] % 128 == 0
        u = second.usage
        full = cost_of(llm, u["prompt_tokens"], u["completion_tokens"])
        assert cost_of(llm, u["prompt_tokens"], u["completion_tokens"], u["cached_tokens"]) < full
    finally:
        fake.close()


def test_a_strict_schema_keeps_the_order_its_author_gave_the_fields():
    """A model writes an answer's fields in the schema's order (a reason before a verdict, say): strict mode
    must not sort them."""
    fake, llm = served()
    try:
        for name in ("decide_memory", "analyze_feedback"):
            task = all_tasks()[name]
            run_task(llm, task, sample_input(task))
            sent = fake.log[-1].body["response_format"]["json_schema"]
            assert sent["strict"] and list(sent["schema"]["properties"]) == list(task.output.model_fields), name
    finally:
        fake.close()


def test_a_cut_off_answer_then_a_filtered_one_counts_both_requests():
    fake, llm = served()
    try:
        fake.inject = ["length", "content_filter"]
        task = all_tasks()["extract_memories"]
        with track_usage() as calls, pytest.raises(TaskFailed, match="content filter"):
            run_task(llm, task, sample_input(task))
        assert len(fake.log) == 2 and [c.requests for c in calls] == [2]
        assert calls[0].prompt_tokens == sum(e.usage["prompt_tokens"] for e in fake.log)
        assert calls[0].completion_tokens == sum(e.usage["completion_tokens"] for e in fake.log)
    finally:
        fake.close()
