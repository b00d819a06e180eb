"""Message: JSON codec, OpenAI dict conversion, token estimate."""
import json

import pytest
from hypothesis import given, settings, strategies as st

import memorykit as mk
from memorykit.messages import chars_per_token, model_token_counter, set_token_counter

ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
tool_calls = st.lists(st.fixed_dictionaries({
    "id": ids, "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                                       "arguments": st.text(max_size=40)})}), min_size=1, max_size=3)
messages = st.builds(
    mk.Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.text(st.characters(codec="utf-8"), max_size=200),
    name=st.none() | ids,
    tool_calls=st.none() | tool_calls,
    tool_call_id=st.none() | ids,
    created_at=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)


@given(messages)
@settings(max_examples=200, deadline=None)
def test_json_round_trips_every_field(m):
    back = mk.Message.from_json(m.to_json())
    assert back == m


@given(messages)
@settings(max_examples=100, deadline=None)
def test_openai_round_trip_keeps_what_the_api_carries(m):
    d = m.to_openai()
    assert d["role"] == m.role and d["content"] == m.content
    back = mk.Message.from_openai(d)
    assert (back.role, back.content, back.name or None, back.tool_calls or None, back.tool_call_id or None) == \
           (m.role, m.content, m.name or None, m.tool_calls or None, m.tool_call_id or None)


def test_openai_dict_shape_for_a_tool_call():
    call = {"id": "call_1", "type": "function", "function": {"name": "heart_rate", "arguments": "{}"}}
    a = mk.Message(role="assistant", content="", tool_calls=[call])
    t = mk.Message(role="tool", content='{"bpm": 72}', tool_call_id="call_1")
    assert a.to_openai() == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert t.to_openai() == {"role": "tool", "content": '{"bpm": 72}', "tool_call_id": "call_1"}


def test_from_openai_accepts_none_content():
    m = mk.Message.from_openai({"role": "assistant", "content": None})
    assert m.content == ""


@pytest.mark.parametrize("bad", ["robot", "", "USER"])
def test_unknown_role_is_rejected(bad):
    with pytest.raises(mk.ValidationError):
        mk.Message(role=bad, content="hi")


def test_non_string_content_is_rejected():
    with pytest.raises(mk.ValidationError):
        mk.Message(role="user", content=42)


def test_from_json_rejects_non_objects():
    with pytest.raises(ValueError):
        mk.Message.from_json("[1, 2]")
    with pytest.raises(ValueError):
        mk.Message.from_json("{not json")


def test_from_json_ignores_unknown_fields():
    raw = json.dumps({"role": "user", "content": "hi", "future_field": 1})
    assert mk.Message.from_json(raw).content == "hi"


def test_token_estimate_is_chars_over_four_plus_overhead():
    assert chars_per_token("") == 0 and chars_per_token("abcd") == 1 and chars_per_token("abcde") == 2
    assert mk.count_tokens("a" * 400) == 100
    msgs = [mk.Message(role="user", content="a" * 40), mk.Message(role="assistant", content="b" * 8)]
    assert mk.count_tokens(msgs) == (4 + 10) + (4 + 2)


def test_token_counter_is_pluggable_and_restorable():
    try:
        set_token_counter(lambda text: len(text.split()))
        assert mk.count_tokens("one two three") == 3
    finally:
        set_token_counter(None)
    assert mk.count_tokens("one two three") == 4


def test_model_tokenizer_counts_offline():
    counter = model_token_counter()
    n = counter("My resting heart rate is 72 bpm.")
    assert 6 <= n <= 14
    assert counter("") == 0
