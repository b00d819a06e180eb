"""Extraction: robust parsing of model replies and the offline rule-based extractor."""
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memorykit as mk
from memorykit.errors import LLMError
from memorykit.memory.extraction import EXTRACT, TYPES, ExtractInput, parse_memories
from memorykit.offline.extract import rule_extract

C = mk.CandidateMemory


@pytest.mark.parametrize("reply, expected", [
    ('[{"type": "episodic", "content": "User likes tea"}]', [C("episodic", "User likes tea")]),
    ('```json\n[{"type": "SEMANTIC", "content": "Japan uses the yen"}]\n```', [C("semantic", "Japan uses the yen")]),
    ('{"type": "Episodic", "content": "User is vegan"}', [C("episodic", "User is vegan")]),
    ('{"memories": [{"type": "episodic", "content": "User runs"}]}', [C("episodic", "User runs")]),
    ('Here you go:\n[{"type": "episodic", "content": "User runs"}]\nHope this helps! [1]', [C("episodic", "User runs")]),
    ('[{"type": " episodic", "content": "  User   runs "}, "User swims"]', [C("episodic", "User runs")]),
    ('[{"type": "episodic", "content": "User runs"}, {"type": "episodic", "content": "user runs"}]',
     [C("episodic", "User runs")]),
    ('[]', []), ('{"memories": []}', []), ('', []), (None, []),
])
def test_parse_what_models_return(reply, expected):
    assert parse_memories(reply) == expected


@pytest.mark.parametrize("garbage", ["I could not find anything.", "[{'type': 'episodic'", "42", "null",
                                     '[{"type": "procedural-ish", "content": "x"}]', '[{"type": "episodic"}]',
                                     '[1, 2, 3]', '{"foo": "bar"}', '{}'])
def test_garbage_gives_no_memories_and_a_warning(garbage, caplog):
    with caplog.at_level(logging.WARNING, logger="memorykit.memory.extraction"):
        assert parse_memories(garbage) == []
    assert caplog.records, "garbage must be logged, not silently dropped"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(
        st.sampled_from(["type", "content", "TYPE", "Content", "memories", "text", "x"]), kids, max_size=4)),
    max_leaves=12).map(json.dumps)))
def test_parse_never_raises(text):
    out = parse_memories(text)
    assert all(isinstance(c, C) and c.type in TYPES and c.content.strip() for c in out)


class Boom:
    label = "boom"

    def chat(self, messages, tools=None, response_format=None, **kwargs):
        raise LLMError("server down")


class Says:
    label = "says"

    def __init__(self, text):
        self.text = text

    def chat(self, messages, tools=None, response_format=None, **kwargs):
        return mk.Message(role="assistant", content=self.text)


def test_extract_never_raises_into_a_chat_turn(caplog):
    with caplog.at_level(logging.WARNING):
        assert mk.extract_memories("I love tea", llm=Boom()) == []
        assert mk.extract_memories("I love tea", llm=Says("no idea, sorry")) == []
    assert any("failed" in r.getMessage() for r in caplog.records)
    assert mk.extract_memories("I love tea", llm=Says('[{"type":"episodic","content":"User loves tea"}]')) == \
        [C("episodic", "User loves tea")]
    assert mk.extract_memories([], llm=Boom()) == []


class Recording(Says):
    def __init__(self, text):
        super().__init__(text)
        self.requests = []

    def chat(self, messages, tools=None, response_format=None, **kwargs):
        self.requests.append(dict(messages=messages, response_format=response_format, **kwargs))
        return super().chat(messages)


def test_placeholders_are_dropped_and_a_placeholder_only_answer_is_repaired_once():
    llm = Recording('{"memories": [{"type": "episodic", "content": "..."}, '
                    '{"type": "episodic", "content": "User likes tea"}]}')
    assert mk.extract_memories("I like tea", llm=llm) == [C("episodic", "User likes tea")]
    only = Recording('{"memories": [{"type": "episodic", "content": "<fact>"}]}')
    assert mk.extract_memories("I like tea", llm=only) == []
    assert len(only.requests) == 2 and "real content" in only.requests[1]["messages"][-1].content


def test_requests_are_bounded_and_ask_for_the_schema():
    llm = Recording('{"memories": []}')
    assert mk.extract_memories("I like tea", llm=llm) == []
    (req,) = llm.requests
    assert req["max_tokens"] == EXTRACT.max_tokens == 400
    assert req["response_format"]["type"] == "json_schema"
    schema = req["response_format"]["json_schema"]["schema"]
    assert schema["type"] == "object" and "memories" in schema["properties"]


def test_prompt_names_the_task_and_both_types():
    msgs = EXTRACT.messages(ExtractInput(messages=[mk.Message(role="user", content="I went to Paris")]))
    assert EXTRACT.name == "extract_memories" and msgs[0].role == "system"
    assert "[task:" not in msgs[0].content and "(offline)" not in msgs[0].content
    assert "EPISODIC" in msgs[0].content and "SEMANTIC" in msgs[0].content
    assert "user: I went to Paris" in msgs[1].content


def test_raphael_through_the_offline_llm(llm):
    found = mk.extract_memories("Hi, my name's Raphael. I went to Paris back in 2009 with my wife for our "
                                "honeymoon and we had a lovely time. For our 10-year anniversary we're "
                                "planning to go back.", llm=llm)
    contents = [c.content for c in found]
    assert "User's name is Raphael." in contents
    assert "User went to Paris back in 2009 with their wife for their honeymoon." in contents
    assert any("anniversary" in c and "planning" in c for c in contents)
    assert {c.type for c in found} == {"episodic"}


def test_only_user_messages_are_mined(llm):
    msgs = [mk.Message(role="user", content="What's the capital of Peru?"),
            mk.Message(role="assistant", content="Lima is the capital of Peru. I love Lima."),
            mk.Message(role="user", content="I prefer aisle seats.\nAlso, my goal is to learn Spanish.")]
    assert mk.extract_memories(msgs, llm=llm) == [C("episodic", "User prefers aisle seats."),
                                                  C("episodic", "User's goal is to learn Spanish.")]


EPISODIC = [  # first-person statements -> third person
    ("I prefer window seats.", "User prefers window seats."),
    ("I'm allergic to shellfish", "User is allergic to shellfish."),
    ("My goal is to never skip leg day", "User's goal is to never skip leg day."),
    ("I went to Kyoto in 2017.", "User went to Kyoto in 2017."),
    ("I hate long layovers!", "User hates long layovers."),
    ("We're moving to Lisbon in June.", "User is moving to Lisbon in June."),
    ("I teach chemistry at a high school.", "User teaches chemistry at a high school."),
    ("I don't drink alcohol.", "User doesn't drink alcohol."),
    ("My sister and I run a bakery.", "User and their sister run a bakery."),
    ("I have three kids.", "User has three kids."),
    ("I usually watch football on Sundays", "User usually watches football on Sundays."),
    ("Call me Priya.", "User's name is Priya."),
    ("I've been vegetarian for ten years.", "User has been vegetarian for ten years."),
    ("Just so you know, I'm diabetic.", "User is diabetic."),
    ("I'll be in Madrid next week.", "User will be in Madrid next week."),
    ("I study medicine.", "User studies medicine."),
    ("I recently bought a used Volvo.", "User recently bought a used Volvo."),
    ("Last year we drove across the US in an RV.", "Last year User drove across the US in an RV."),
    ("Me and my brother went skiing in Utah.", "User and their brother went skiing in Utah."),
    ("I was born in 1985.", "User was born in 1985."),
]


@pytest.mark.parametrize("text, memory", EPISODIC)
def test_first_person_statements_become_episodic(text, memory):
    assert C("episodic", memory) in rule_extract(text)


@pytest.mark.parametrize("text", ["Singapore requires a passport for entry.", "Tokyo has excellent public transit.",
                                  "The Louvre is closed on Tuesdays.", "Most hostels in Iceland include breakfast.",
                                  "Kyoto has over a thousand temples."])
def test_generic_present_tense_facts_become_semantic(text):
    assert rule_extract(text) == [C("semantic", text)]


@pytest.mark.parametrize("text", ["Where did I go in 2009?", "what's my name", "Hi!", "Thanks, that sounds great!",
                                  "ok", "Can you book a table for two?", "Tell me a joke.", "I see.", "I think so.",
                                  "It was amazing.", "I'd love that!", "Good morning, how are you?", "lol",
                                  "I was wondering if you could find flights to Rome.", "Please help me plan a trip.",
                                  "That's a good point.", "Do I need a visa for India", "Sounds good to me.",
                                  "I need you to check the weather.", "", "   ",
                                  "I'll think about it.", "The weather has been awful lately.",
                                  "Let me check with my wife first.", "Yes please."])
def test_questions_requests_and_small_talk_give_nothing(text):
    assert rule_extract(text) == []


def test_extraction_is_deterministic(llm):
    text = "I love hiking but I hate crowds. Peru uses the sol."
    assert mk.extract_memories(text, llm=llm) == mk.extract_memories(text, llm=llm)
    assert [c.type for c in mk.extract_memories(text, llm=llm)] == ["episodic", "episodic", "semantic"]


SECRET = "My card is 4111 1111 1111 1111 and I am being treated for depression"


def test_what_a_user_said_stays_out_of_reasons_and_logs_above_debug(caplog):
    """A model's output restates the user: failures are logged and reported by kind, length and position;
    the repair prompt still shows the model its own answer and what was wrong with it."""
    from scripted import ScriptedModel
    from memorykit.llm import track_usage

    echo = f"The user said: {SECRET}."
    items = json.dumps({"memories": [{"type": "medical", "content": "User is being treated for depression"},
                                     {"type": "episodic", "content": "User lives in Berlin"}]})
    model = ScriptedModel(echo, echo + ' {"memories": [{"type": "episodic", "content": "4111 1111"', items)
    with caplog.at_level(logging.INFO, logger="memorykit"), track_usage() as calls:
        assert mk.extract_memories(SECRET, llm=model) == []
        assert mk.extract_memories(SECRET, llm=model) == [C("episodic", "User lives in Berlin")]
        assert parse_memories(echo) == [] and parse_memories(items.replace("episodic", "diary")) == []
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "4111" not in logged and "depression" not in logged and "Berlin" not in logged, logged
    assert f"no JSON found in the model output ({len(echo)} characters)" in logged and "type: literal_error" in logged
    failed = [u.error for u in calls if not u.ok]
    assert len(failed) == 1 and "invalid JSON (" in failed[0] and "4111" not in failed[0]
    assert echo in model.requests[1]["messages"][-2].content           # the repair shows the model its answer
    assert "That answer was invalid: no JSON found" in model.requests[1]["messages"][-1].content
