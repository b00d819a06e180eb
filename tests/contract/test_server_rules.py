"""The server rules one request can meet, and what each one teaches a client shared by many users: a schema a
server refuses in strict mode, a filtered answer, a rate limit with Retry-After, a prompt too long for the model,
a reasoning model under a name of its own, and input read from the prompt cache."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Literal, Union

import pytest
from pydantic import BaseModel, Field
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


def test_a_tagged_union_and_schemas_past_the_limits_are_sent_non_strict_without_a_refusal():
    assert strict_schema(Household) is None  # its objects share a first key ("kind"): strict mode refuses that
    deep: dict = {"type": "string"}
    for _ in range(11):
        deep = {"type": "object", "properties": {"x": deep}, "required": ["x"]}
    for schema in (deep, {"type": "object", "properties": {"a": {"enum": list(range(1001))}}},
                   {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"minLength": 1}]}}},
                   {"type": "object", "properties": {"a": {"type": "string", "not": {"enum": ["x"]}}}},
                   {"anyOf": [{"type": "object", "properties": {}}, {"type": "null"}]}):
        assert strict_problems(schema), schema       # the server refuses each ...
        assert strict_schema(schema) is None, schema  # ... so none is sent strict
    union = {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}
    strict = strict_schema(union)
    assert strict is not None and strict_problems(strict) == [] and "anyOf" in json.dumps(strict)
    fake, llm = served()
    try:
        tool = {"type": "function", "function": {"name": "update_pets", "parameters": Household.model_json_schema()}}
        llm.chat([{"role": "user", "content": "I got a dog (update_pets)."}], tools=[tool, *TOOLS])
        assert [e.status for e in fake.log] == [200]
        assert strict_of(fake.log[0].body) == {"update_pets": False, "search_memory": True}
    finally:
        fake.close()


def test_a_filtered_answer_fails_the_task_without_a_repair():
    fake, llm = served()
    try:
        fake.inject = ["content_filter"]
        task = all_tasks()["extract_memories"]
        with pytest.raises(TaskFailed, match="content filter"):
            run_task(llm, task, sample_input(task))
        assert len(fake.log) == 1  # a partial answer is not sent back to be repaired
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
