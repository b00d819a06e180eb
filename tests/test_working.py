"""WorkingMemory: formats, validation and size limit on every write path, scopes, history, tools, observe;
the offline update_working_memory method and its score on held-out dialogs."""
import json
from scripted import ScriptedModel
import re
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, create_model

import memorykit as mk
from memorykit.errors import SchemaMismatchError
from memorykit.course.working_eval import load_dialogs, score_profiles
from memorykit.memory.working_tools import UPDATE_WORKING_MEMORY, WorkingUpdate
from memorykit.offline.working_read import read, replaces

DIALOGS = load_dialogs("dialogs.jsonl")
# Known misses of the offline stand-in since it learned home-vs-passing places and names from the independent
# training messages (issue 29): strict, so they fail loudly the day the stand-in gets them right again.
KNOWN_MISSES = {"elizabeth": "'I'm in Edinburgh.' no longer sets Europe/London (abstains on a bare 'I'm in X')"}
ROOT = Path(__file__).resolve().parent.parent


class Profile(BaseModel):
    name: str | None = None
    timezone: str | None = None
    goals: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)


class Strict(BaseModel):
    """Timezone must be an IANA name, age an integer 0..130, no other fields."""
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, max_length=40)
    timezone: str | None = Field(None, pattern="^[A-Za-z_]+/[A-Za-z_]+$")
    age: int | None = Field(None, ge=0, le=130)
    goals: list[str] = Field(default_factory=list)


@pytest.fixture
def tmpl(r, ns):
    return mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE)


# ------------------------------------------------------------------ formats and validation
def test_template_update_get_and_missing_section_rejected(tmpl):
    assert tmpl.get("u1", "t1") is None and tmpl.current("u1", "t1") == mk.PROFILE_TEMPLATE
    filled = mk.PROFILE_TEMPLATE.replace("- Name:", "- Name: Ada")
    tmpl.update(filled, "u1", "t1")
    assert "- Name: Ada" in tmpl.get("u1", "t1")
    with pytest.raises(mk.ValidationError, match="# Goals"):
        tmpl.update("# Profile\n- Name: Ada\n# Preferences\n-\n", "u1", "t1")
    assert "- Name: Ada" in tmpl.get("u1", "t1")  # nothing lost


def test_schema_pydantic_partial_merge_and_field_named_error(r, ns):
    wm = mk.WorkingMemory(r, ns, schema=Profile)
    wm.update({"name": "Ada"}, "u1", "t1")
    wm.update('{"goals": ["Run 10k"]}', "u1", "t1")
    assert wm.get("u1", "t1") == {"name": "Ada", "timezone": None, "goals": ["Run 10k"], "preferences": []}
    with pytest.raises(mk.ValidationError, match="field 'goals'"):
        wm.update({"goals": "not a list"}, "u1", "t1")
    with pytest.raises(mk.ValidationError, match="not valid JSON"):
        wm.update('{"name": "Bo"', "u1", "t1")
    assert wm.get("u1", "t1")["name"] == "Ada"


def test_schema_validation_names_the_field(r, ns):
    wm = mk.WorkingMemory(r, ns, schema=Strict)
    wm.update({"timezone": "Europe/Berlin", "age": 41}, "u1", "t1")
    with pytest.raises(mk.ValidationError, match="field 'age'"):
        wm.update({"age": 400}, "u1", "t1")
    with pytest.raises(mk.ValidationError, match="field 'timezone'"):
        wm.update({"timezone": "somewhere"}, "u1", "t1")
    with pytest.raises(mk.ValidationError, match="hobby"):
        wm.update({"hobby": "chess"}, "u1", "t1")
    assert wm.get("u1", "t1") == {"name": None, "timezone": "Europe/Berlin", "age": 41, "goals": []}
    with pytest.raises(mk.ValidationError, match="pydantic model"):
        mk.WorkingMemory(r, ns, schema={"type": "object"})


def test_text_mode_and_bad_types(r, ns):
    wm = mk.WorkingMemory(r, ns)
    assert wm.format == "text"
    wm.update("todo: book flights", "u1", "t1")
    assert wm.get("u1", "t1") == "todo: book flights\n"
    with pytest.raises(mk.ValidationError):
        wm.update({"x": 1}, "u1", "t1")
    for blank in ("", "  \n "):  # a blank answer never erases it: emptying it is clear()'s job
        with pytest.raises(mk.ValidationError, match="clear"):
            wm.update(blank, "u1", "t1")
    assert wm.get("u1", "t1") == "todo: book flights\n"
    with pytest.raises(mk.ValidationError):
        mk.WorkingMemory(r, ns, template="# A\n-", schema=Profile)
    with pytest.raises(mk.ValidationError):
        mk.WorkingMemory(r, ns, scope="galaxy")


# ------------------------------------------------------------------ size limit on every path
def test_size_limit_direct_tool_and_observe(r, ns, llm):
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, max_chars=120)
    big = mk.PROFILE_TEMPLATE.replace("# Goals\n-", "# Goals\n- " + "x" * 200)
    with pytest.raises(mk.ValidationError, match="condense"):
        wm.update(big, "u1", "t1")
    update = wm.tools("u1", "t1")[0]
    out = json.loads(update.run({"content": big}))
    assert "condense" in out["error"] and "120 characters" in out["error"]
    assert wm.get("u1", "t1") is None
    obs = wm.observe("I want to " + "climb every mountain in the Alps " * 3, llm, user_id="u1", thread_id="t1")
    assert obs.error and "condense" in obs.error and not obs.changed
    assert wm.get("u1", "t1") is None


# ------------------------------------------------------------------ scopes
def test_conversation_scope_isolates_threads_and_users(r, ns):
    wm = mk.WorkingMemory(r, ns)
    wm.update("notes for t1", "u1", "t1")
    assert wm.get("u1", "t2") is None and wm.get("u2", "t1") is None
    assert wm.key("u1", "t1") == f"{ns}:working:conversation:{{u1}}:t1"
    with pytest.raises(mk.ValidationError, match="thread_id"):
        wm.get("u1")


def test_user_scope_shared_across_threads_not_users(r, ns):
    profile = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    notes = mk.WorkingMemory(r, ns, scope="conversation")
    profile.update(mk.PROFILE_TEMPLATE.replace("- Name:", "- Name: Ada"), "u1", "t1")
    notes.update("t1 only: compare flight prices", "u1", "t1")
    assert "Ada" in profile.get("u1", "t-new")
    assert notes.get("u1", "t-new") is None
    assert profile.get("u2", "t1") is None
    assert profile.key("u1") == f"{ns}:working:user:{{u1}}"


def test_mixing_formats_on_one_key_is_a_clear_error(r, ns):
    mk.WorkingMemory(r, ns, scope="user").update("free text", "u1")
    with pytest.raises(SchemaMismatchError, match="not JSON"):
        mk.WorkingMemory(r, ns, schema=Profile, scope="user").get("u1")


def test_ids_with_key_syntax_do_not_collide(r, ns):
    wm = mk.WorkingMemory(r, ns, scope="user")
    wm.update("star", "*", None)
    wm.update("colon", "a:b", None)
    assert wm.get("a") is None and wm.get("a:b") == "colon\n" and wm.get("*") == "star\n"
    assert wm.get("b") is None


# ------------------------------------------------------------------ history, undo, ttl, concurrency
def test_history_is_capped_and_undo_walks_back(r, ns):
    wm = mk.WorkingMemory(r, ns, history=3)
    for i in range(6):
        wm.update(f"v{i}", "u1", "t1")
    hist = wm.history("u1", "t1")
    assert [v.content for v in hist] == ["v4\n", "v3\n", "v2\n"]
    assert wm.undo("u1", "t1") == "v4\n" and wm.get("u1", "t1") == "v4\n"
    wm.clear("u1", "t1")
    assert wm.get("u1", "t1") is None
    assert wm.undo("u1", "t1") == "v4\n"
    wm.undo("u1", "t1"), wm.undo("u1", "t1")
    with pytest.raises(mk.ValidationError, match="no earlier version"):
        wm.undo("u1", "t1")


def test_ttl_applies_to_content_and_history(r, ns):
    wm = mk.WorkingMemory(r, ns, ttl=100)
    wm.update("a", "u1", "t1")
    wm.update("b", "u1", "t1")
    assert 0 < r.ttl(wm.key("u1", "t1")) <= 100
    assert 0 < r.ttl(wm.history_key("u1", "t1")) <= 100


def test_an_update_that_changes_nothing_still_refreshes_the_ttl(r, ns):
    wm = mk.WorkingMemory(r, ns, ttl=100)
    for user in ("system", "a|b"):
        wm.update("a", user, "t1")
        wm.update("b", user, "t1")
        r.expire(wm.key(user, "t1"), 5), r.expire(wm.history_key(user, "t1"), 5)
    wm.update("b", "system", "t1")  # same content: no new version, but this user is still active
    assert len(wm.history("system", "t1")) == 1
    assert r.ttl(wm.key("system", "t1")) > 5 and r.ttl(wm.history_key("system", "t1")) > 5
    assert r.ttl(wm.key("a|b", "t1")) <= 5 and r.ttl(wm.history_key("a|b", "t1")) <= 5  # the other user's untouched


def test_concurrent_partial_updates_are_not_lost(r, ns):
    counts = create_model("Counts", **{f"k{i}": (int | None, None) for i in range(16)})
    wm = mk.WorkingMemory(r, ns, schema=counts, history=0)
    workers = [threading.Thread(target=wm.update, args=({f"k{i}": i}, "u1", "t1")) for i in range(16)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert wm.get("u1", "t1") == {f"k{i}": i for i in range(16)}


# ------------------------------------------------------------------ tools and prompt block
def test_tools_schemas_and_round_trip(r, ns):
    wm = mk.WorkingMemory(r, ns, schema=Profile, scope="user")
    update, clear = wm.tools("u1")
    assert [t.name for t in (update, clear)] == ["update_working_memory", "clear_working_memory"]
    params = update.schema["function"]["parameters"]["properties"]["content"]
    assert params["type"] == "object" and set(params["properties"]) == {"name", "timezone", "goals", "preferences"}
    assert "required" not in params
    assert json.loads(update.run({"content": {"name": "Ada"}}))["ok"] is True
    err = json.loads(update.run({"content": {"goals": 3}}))["error"]
    assert "field 'goals'" in err
    assert wm.get("u1")["name"] == "Ada" and "Ada" in wm.prompt_block("u1")
    assert json.loads(clear.run({}))["cleared"] is True and wm.get("u1") is None
    assert wm.history("u1")[0].replaced_by == "tool"


class Place(BaseModel):
    city: str | None = None
    country: str | None = None


class Traveller(Profile):
    home: Place = Field(default_factory=Place)


def test_a_partial_update_is_never_sent_strict_and_a_null_resets_a_field(r, ns):
    """OpenAI's strict mode would make every field of the partial update required (the model then sends null
    for each one it keeps): the schema tool says strict false and is sent so. A null clears a field, on the
    tool, observe and update() alike; an update that changes nothing adds no version to undo."""
    from memorykit.llm.openai_chat import OpenAIChat
    from contract.cases import ANSWERS, prompts
    from contract.fake_server import PROFILES, FakeServer

    wm = mk.WorkingMemory(r, ns, schema=Traveller, scope="user")
    stored = {"name": "Lena", "timezone": "Europe/Berlin", "goals": ["learn German"], "preferences": [],
              "home": {"city": "Berlin", "country": "Germany"}}
    update_tool = wm.tools("u1")[0]
    assert update_tool.schema["function"]["strict"] is False
    for profile, sent in (("openai-chat", {"strict": False}), ("vllm", {})):
        fake = FakeServer(PROFILES[profile], ANSWERS, prompts())
        try:
            llm = OpenAIChat(fake.profile.model, api_key="sk-x", base_url=fake.url, family=fake.profile.family)
            llm.chat([{"role": "user", "content": "Call me Sam (update_working_memory)"}], tools=[update_tool.schema])
            function = fake.log[-1].body["tools"][0]["function"]
            assert {k: v for k, v in function.items() if k == "strict"} == sent, profile
            assert "required" not in function["parameters"]["properties"]["content"]  # every field optional
        finally:
            fake.close()
    for user, write in [("u1", lambda c: json.loads(update_tool.run({"content": c}))),
                        ("a|b", lambda c: wm.observe("Forget my timezone", ScriptedModel(update(c)), user_id="a|b")),
                        ("system", lambda c: wm.update(c, "system"))]:
        wm.update(stored, user)
        write({"timezone": None, "home": {"city": "Munich"}})
        assert wm.get(user) == {**stored, "timezone": None, "home": {"city": "Munich", "country": "Germany"}}, user
    wm.update({"goals": None, "home": None}, "u1")  # a null resets a field to its default, lists and objects too
    assert wm.get("u1")["goals"] == [] and wm.get("u1")["home"] == {"city": None, "country": None}
    versions = len(wm.history("u1"))
    wm.update({"name": "Lena"}, "u1")  # the same content again
    assert len(wm.history("u1")) == versions
    wm.update({"name": "Sam"}, "u1", replace=True)  # the whole object: the rest reset
    assert wm.get("u1") == {"name": "Sam", "timezone": None, "goals": [], "preferences": [],
                            "home": {"city": None, "country": None}}


def test_prompt_block_shows_format_and_content(r, ns):
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE)
    block = wm.prompt_block("u1", "t1")
    assert "(empty)" in block and "# Preferences" in block and "update_working_memory" in block
    wm.update(mk.PROFILE_TEMPLATE.replace("- Name:", "- Name: Ada"), "u1", "t1")
    prompt = wm.system_prompt("You are a helpful assistant.", "u1", "t1")
    assert prompt.startswith("You are a helpful assistant.") and "- Name: Ada" in prompt


# ------------------------------------------------------------------ observe: the update_working_memory task
@pytest.mark.parametrize("dialog", [pytest.param(d, marks=pytest.mark.xfail(reason=KNOWN_MISSES[d["id"]], strict=True))
                                    if d["id"] in KNOWN_MISSES else d for d in DIALOGS], ids=[d["id"] for d in DIALOGS])
@pytest.mark.parametrize("mode", ["template", "schema", "text"])
def test_offline_method_builds_the_profile(r, ns, llm, dialog, mode):
    kwargs = {"template": {"template": mk.PROFILE_TEMPLATE}, "schema": {"schema": Profile}, "text": {}}[mode]
    wm = mk.WorkingMemory(r, ns, scope="user", **kwargs)
    for turn in dialog["turns"]:
        obs = wm.observe(mk.Message(role="user", content=turn), llm, user_id=dialog["user_id"])
        assert obs.error is None
    got = wm.get(dialog["user_id"])
    text = json.dumps(got, ensure_ascii=False).lower() if mode == "schema" else got.lower()
    exp = dialog["expected"]
    assert exp["name"].lower() in text and exp["timezone"].lower() in text
    for want in exp["goals"] + exp["preferences"]:
        assert want in text, want
    for gone in exp["not_goals"] + exp["not_preferences"] + [exp[k].lower() for k in ("not_timezone",) if k in exp]:
        assert gone not in text, gone


def test_observe_ignores_non_user_and_factless_messages(r, ns, llm):
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE)
    assert not wm.observe(mk.Message(role="assistant", content="I'm Bot."), llm, user_id="u1", thread_id="t1").changed
    assert not wm.observe("What's the weather like?", llm, user_id="u1", thread_id="t1").changed
    assert wm.get("u1", "t1") is None


def test_observe_output_is_validated(r, ns, llm):
    wm = mk.WorkingMemory(r, ns, schema=Strict)
    wm.observe("I'm in Berlin time.", llm, user_id="u1", thread_id="t1")
    assert wm.get("u1", "t1")["timezone"] == "Europe/Berlin"
    obs = wm.observe("Actually I'm on UTC+2.", llm, user_id="u1", thread_id="t1")  # violates the pattern
    assert "field 'timezone'" in obs.error and not obs.changed
    assert wm.get("u1", "t1")["timezone"] == "Europe/Berlin"


def update(content, changed=True):
    return json.dumps({"changed": changed, "content": content, "reason": "scripted"})


def test_observe_runs_a_typed_task_and_repairs_invalid_json_once(r, ns):
    wm = mk.WorkingMemory(r, ns, schema=Profile)
    model = ScriptedModel('{"changed": true, "content": {"name": "Ada"}', update({"name": "Ada"}))
    obs = wm.observe("My name is Ada", model, user_id="u1", thread_id="t1")
    assert model.calls == 2 and obs.changed and wm.get("u1", "t1")["name"] == "Ada"
    request = model.requests[0]
    assert request["response_format"]["json_schema"]["name"] == "update_working_memory"
    assert request["max_tokens"] == UPDATE_WORKING_MEMORY.max_tokens
    assert "My name is Ada" in request["messages"][-1].content


def test_the_schema_sent_pins_content_to_the_store_format(r, ns):
    """A text store asks for text, a schema store for an object (a small model sent a dict to a template)."""
    def content_types(wm, content):
        model = ScriptedModel(update(content), update(None, changed=False))
        wm.observe("My name is Ada", model, user_id="u1", thread_id="t1")
        schema = model.requests[0]["response_format"]["json_schema"]["schema"]
        return {option.get("type") for option in schema["properties"]["content"]["anyOf"]}

    assert content_types(mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE), "# Profile\n- Name: Ada\n") \
        == {"string", "null"}
    assert content_types(mk.WorkingMemory(r, ns + "s", schema=Profile), {"name": "Ada"}) == {"object", "null"}


def test_observe_rejected_update_is_retried_with_the_reason_then_dropped(r, ns):
    wm = mk.WorkingMemory(r, ns, schema=Profile)
    bad = ScriptedModel("no json here", update({"goals": 5}), update({"goals": "run"}))
    obs = wm.observe("I want to run", bad, user_id="u1", thread_id="t1")
    assert bad.calls == 3 and obs.error and "goals" in obs.error and not obs.changed
    assert "rejected" in bad.requests[2]["messages"][-1].content
    assert wm.get("u1", "t1") is None


def test_task_failed_is_logged_and_leaves_memory_unchanged(r, ns, caplog):
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE)
    wm.update(mk.PROFILE_TEMPLATE.replace("- Name:", "- Name: Ada"), "u1", "t1")
    broken = ScriptedModel("not json", '{"changed": true, "reason": "..."}')  # placeholder reason, no content
    obs = wm.observe("Call me Bo", broken, user_id="u1", thread_id="t1")
    assert not obs.changed and "update_working_memory" in obs.error
    assert "- Name: Ada" in wm.get("u1", "t1") and len(wm.history("u1", "t1")) == 0
    assert "left unchanged" in caplog.text
    with pytest.raises(ValueError):
        WorkingUpdate(changed=True, content=None, reason="x")
    blank = ScriptedModel(update(" \n "), update("\t"))  # a blank profile from the model, twice: erases nothing
    assert not wm.observe("Call me Bo", blank, user_id="u1", thread_id="t1").changed
    tool = {t.name: t for t in wm.tools("u1", "t1")}["update_working_memory"]
    assert "blank" in tool.run(json.dumps({"content": "  "}))
    assert "- Name: Ada" in wm.get("u1", "t1") and len(wm.history("u1", "t1")) == 0


def test_domain_modules_know_nothing_of_the_offline_backend():
    for path in (ROOT / "memorykit" / "memory").glob("working*.py"):
        source = path.read_text()
        assert "(offline)" not in source and "[task:" not in source, path
        assert not re.search(r"^\s*(from|import)\s+[\w.]*offline", source, re.MULTILINE), path


# ------------------------------------------------------------------ the offline readers, on phrasings not in the dialogs
@pytest.mark.parametrize("text,name", [
    ("Hey there, I'm Ingrid.", "Ingrid"), ("my name is jonas", "Jonas"), ("You can call me Bea.", "Bea"),
    ("It's Katharina, not Kat.", "Katharina"),
    ("My name is Robert but my friends call me Bob", "Bob"), ("Don't call me Bobby, I'm Robert", "Robert"),
    ("Everyone calls me Kit, not Katherine.", "Kit"),
    ("I'm tired today", None), ("I'm Italian and I love pasta", None), ("I'm on Pacific time", None),
    # the full name a user gives is kept; a comma or a lowercase word ends it
    ("Good morning. I am Halvard Brekke and I live in Bergen.", "Halvard Brekke"),
    ("Hello, this is Amara Nwosu, writing from Accra.", "Amara Nwosu"), ("I'm Mark, I live in Leeds.", "Mark"),
    # a surname that is also a place is part of the name, not where the user lives
    ("Good evening, I am Thomas Chester.", "Thomas Chester"),
])
def test_read_name(text, name):
    assert read(text).name == name


@pytest.mark.parametrize("text,zone", [
    ("My timezone is America/Chicago", "America/Chicago"), ("I'm in UTC-5", "UTC-5"),
    ("we're on GMT+10 here", "GMT+10"), ("I'm in Paris time", "Europe/Paris"),
    ("I live in Sydney", "Australia/Sydney"), ("I relocated to Singapore", "Asia/Singapore"),
    ("Meetings in CET please", "Europe/Berlin (CET)"), ("I'm on Mountain time", "America/Denver"),
    ("We just moved to Vancouver!", "America/Vancouver"), ("I'm working from Auckland", "Pacific/Auckland"),
    ("I grew up in Madrid", None), ("I'm from Rome but live in London", "Europe/London"),
    ("I live in Phoenix, Arizona", "America/Phoenix"), ("Central time, please", "America/Chicago"),
])
def test_read_timezone(text, zone):
    assert read(text).timezone == zone


@pytest.mark.parametrize("text,zone", [
    ("Leicester.", "Europe/London"), ("Kharkiv. Back pain from desk job.", "Europe/Kyiv"),
    ("Cook for family of 4. Halifax, NS.", "America/Halifax"),
    # a greeting or a lone lowercase word that is also a place's name says nothing of where the user is
    ("Hola! I want to sleep better.", None), ("nice", None), ("Paris?", None),
])
def test_a_place_written_as_a_sentence_of_its_own_is_where_the_user_is(text, zone):
    from memorykit.offline import working_intro
    assert working_intro.read(text).timezone == zone


def test_goal_and_preference_reading():
    assert [(f.kind, f.item) for f in read("I hope to visit Japan next year.").facts] == [("goal", "Visit Japan next year")]
    assert read("I want to know what time it is").facts == []
    kinds = [(f.kind, f.span) for f in read("I love Thai food but I can't stand mushrooms.").facts]
    assert kinds == [("like", "Thai food"), ("dislike", "mushrooms")]
    assert [f.kind for f in read("I've abandoned the novel I was writing.").facts] == ["drop"]


def test_revisions_replace_the_contrary_only():
    prefs = ["Likes Italian food", "Likes tea", "Always answer in bullet points"]
    (tea,) = read("I can't stand tea anymore.").facts
    assert replaces(tea, prefs, "style") == ["Likes tea"]
    (thai,) = read("I love Thai food.").facts
    assert replaces(thai, prefs, "style") == []
    (drop,) = read("I gave up on the promotion.").facts
    assert replaces(drop, ["Get promoted to senior engineer", "Learn the piano"], "goal") == [
        "Get promoted to senior engineer"]


@pytest.mark.parametrize("said, change, gone, kept", [
    # no new goal named: the goal it is about goes, the other goal stays
    (["I want to pass the TOEIC with a score of 800 this spring.", "I'd also like to learn to cook Thai food."],
     "Scratch the TOEIC, my company doesn't need it anymore.", "TOEIC", "Thai food"),
    # a drop naming a stored preference gives that preference up, not the goal
    (["I keep a vegan diet, so please suggest recipes without dairy.", "I want to learn to bake sourdough bread."],
     "I'm not vegan anymore, my doctor wants me to eat eggs.", "vegan", "sourdough"),
], ids=["goal", "preference"])
def test_a_turn_that_gives_something_up_removes_that_item_for_that_user_only(r, ns, llm, said, change, gone, kept):
    """The item given up goes and the other stays, for the user who said it; the other user's profile is untouched."""
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    changer, keeper = "system|{x} ünï", "ana"
    for user in (changer, keeper):
        for text in said:
            wm.observe(text, llm, user_id=user)
    wm.observe(change, llm, user_id=changer)
    assert gone not in wm.get(changer) and kept in wm.get(changer)
    assert gone in wm.get(keeper) and kept in wm.get(keeper)


def test_someone_elses_plan_is_not_the_users_goal(r, ns, llm):
    """A plan whose subject is someone else ("my son says he wants ...") is not stored; one the user shares
    ("my sister and I want ...") is."""
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    parent, runner = "a|b {son}", "Zoë"
    for user in (parent, runner):
        wm.observe("I want to learn to swim this summer.", llm, user_id=user)
    wm.observe("My son says he wants to become a chef.", llm, user_id=parent)
    wm.observe("My sister and I want to run a marathon.", llm, user_id=runner)
    assert "chef" not in wm.get(parent) and "swim" in wm.get(parent)
    assert "marathon" in wm.get(runner) and "swim" in wm.get(runner) and "marathon" not in wm.get(parent)


@pytest.mark.parametrize("span, sides", [
    ("C1 instead of C2", ("C1", "C2")), ("a novel rather than a screenplay", ("a novel", "a screenplay")),
    ("reply in Portuguese, not French", ("reply in Portuguese", "French")),
    ("swim from two to three kilometres", ("swim three kilometres", "two")),
    # a verb's own negation, or nothing named on one side, is no contrast
    ("I do not drink coffee", None), ("I am not a morning person", None), ("not doing it", None),
    ("work from Monday to Friday", None),
    # a verb of swapping sets its objects against each other (SWAP_VERBS)
    ("swapped rice for quinoa", ("quinoa", "rice")), ("switch from Spanish to English", ("English", "Spanish")),
    ("replace the gym with home workouts", ("home workouts", "the gym")), ("cycle from London to Paris", None),
])
def test_a_contrast_splits_into_its_new_and_old_side(span, sides):
    from memorykit.offline.working_contrast import contrast

    got = contrast(span)
    assert (tuple(" ".join(x.split()).strip(" ,") for x in got) if got else None) == sides


def test_a_change_stated_as_a_contrast_keeps_only_the_new_value(r, ns, llm):
    """"C1 instead of C2" in a changing turn: the stored C2 goal goes and C2 is not stored again with the new one."""
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    for text in ("I want to pass the French DELF exam at C2 level.", "I'd also like to learn to cook Thai food.",
                 "Change of plan, my employer only asks for C1, so I'm aiming for C1 instead of C2."):
        wm.observe(text, llm, user_id="lea")
    profile = wm.get("lea")
    assert "C1" in profile and "C2" not in profile and "Thai food" in profile


def test_an_old_value_restated_before_the_new_one_is_removed_not_stored_again():
    """In a changing turn, an earlier fact sharing words (not in the turn's last fact) with one stored item is
    that item's old value; a fact stating a contrast is a new value and stays."""
    from memorykit.offline.working_read import Fact
    from memorykit.offline.working_turn import given_up

    said = "Got a raise, twelve weeks is too slow, I want to finish the course in eight weeks."
    old, new = (Fact("goal", span, said, 1.0, 0.9, said) for span in (
        "twelve weeks is too slow", "finish the course in eight weeks"))
    lists = {"goal": ["Finish the course in twelve weeks", "Learn Italian"], "style": []}
    assert given_up([old, new], lists) == ([new], ("goal", "Finish the course in twelve weeks"))
    contrast = Fact("goal", "finish in eight weeks instead of twelve", said, 1.0, 0.9, said)
    assert given_up([contrast, new], lists)[0] == [contrast, new]
    calm = [Fact("goal", f.span, said, 1.0, 0.2, said) for f in (old, new)]   # a turn not read as a change
    assert given_up(calm, lists) == (calm, None)


def test_a_clause_naming_a_stored_item_gives_it_up_but_a_question_does_not():
    from memorykit.offline.working_read import read
    from memorykit.offline.working_turn import given_up

    lists = {"goal": ["Take a pottery class on Saturdays", "Run a 10k in the autumn"], "style": []}
    facts = read("the pottery class is history lol. learning italian now").facts
    assert given_up(facts, lists)[1] == ("goal", "Take a pottery class on Saturdays")
    facts = read("Is the pottery class expensive? I also want to learn Italian.").facts
    assert given_up(facts, lists)[1] is None


def test_a_value_said_to_hold_no_longer_gives_up_the_item_it_names_and_is_not_stored():
    from memorykit.offline.working_read import Fact
    from memorykit.offline.working_turn import given_up, no_longer

    assert no_longer("I'm not vegan any more") and no_longer("no longer vegetarian")
    assert no_longer("don't do keto anymore")
    assert not no_longer("any more tips for vegan meals?") and not no_longer("more vegan recipes")
    said = "My doctor wants me on eggs again, so I'm not vegan any more."
    fact = Fact("dislike", "I'm not vegan any more", said, 1.0, 0.3, said)
    lists = {"goal": ["Run a half marathon"], "style": ["Keep meals vegan", "Short answers"]}
    assert given_up([fact], lists) == ([], ("style", "Keep meals vegan"))
    (left,), gone = given_up([fact], {"goal": ["Run a half marathon"], "style": ["Short answers"]})
    assert gone is None and left.kind == "release"   # names nothing stored: a turn that gives something up


def test_a_value_put_on_hold_gives_up_the_item_it_names():
    from memorykit.offline.working_read import Fact
    from memorykit.offline.working_turn import given_up, no_longer

    assert no_longer("I'm putting the Two Oceans on hold for this year") and no_longer("put Spanish on hold")
    # "on hold" that no verb puts anything in: not a pause of the user's item
    assert not no_longer("I was on hold with the bank for an hour") and not no_longer("hold on, is the plan ok")
    said = "My mother is going into care, so I'm putting the Two Oceans on hold for this year."
    fact = Fact("goal", "putting the Two Oceans on hold for this year", said, 1.0, 0.4, said)
    lists = {"goal": ["Run the Two Oceans half marathon", "Learn Spanish"], "style": ["Straight talk"]}
    assert given_up([fact], lists) == ([], ("goal", "Run the Two Oceans half marathon"))
    waited = "I was on hold with the bank for an hour, so I want to learn Spanish faster."
    other = Fact("goal", "learn Spanish faster", waited, 1.0, 0.4, waited)
    assert given_up([other], lists)[0] == [other]   # stored, not read as a pause


def test_a_dislike_naming_a_stored_item_in_a_changing_turn_gives_it_up():
    from memorykit.offline.working_read import Fact
    from memorykit.offline.working_turn import given_up

    said = "Two weeks of keto and I'm exhausted, keto is not for me. Back to ordinary meals."
    lists = {"goal": ["Run two 5k races"], "style": ["Try a keto diet", "Short answers"]}
    fact = Fact("dislike", "keto is not for me", said, 1.0, 0.9, said)
    assert given_up([fact], lists) == ([], ("style", "Try a keto diet"))
    calm = Fact("dislike", "keto is not for me", said, 1.0, 0.2, said)   # a turn not read as a change
    assert given_up([calm], lists) == ([calm], None)


def test_a_place_the_user_left_gives_way_to_the_one_they_live_in_now():
    from memorykit.offline.working_geo import left_place, now_place
    from memorykit.offline.working_models import tokens

    toks = tokens("I lived in Porto for years, but last month I moved to Oslo.")
    porto, oslo = (next(k for k, t in enumerate(toks) if t.text == w) for w in ("Porto", "Oslo"))
    assert left_place(toks, porto) and not left_place(toks, oslo)
    found = [(porto, porto + 1, "Porto"), (oslo, oslo + 1, "Oslo")]
    assert now_place(toks, found, [0.8, 0.3], 0, 0.1) == 1
    assert now_place(toks, found, [0.8, 0.05], 0, 0.1) == 0   # the other place too unsure: left as read
    toks = tokens("I'm from Porto, visiting Oslo next week.")   # "from" alone is where someone lives
    assert not left_place(toks, next(k for k, t in enumerate(toks) if t.text == "Porto"))


def test_a_name_the_user_asks_to_be_called_replaces_a_stored_one(r, ns, llm):
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    for text in ("Hello, my name is Margarethe.", "Actually, please call me Grete from now on."):
        wm.observe(text, llm, user_id="grete")
    profile = wm.get("grete")
    assert "Grete" in profile and "Margarethe" not in profile


def test_a_relatives_plan_or_home_is_not_the_users(r, ns, llm):
    """"my wife would like to ..., she ..." is her plan; "my brother lives in X, he ..." is his home."""
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    for text in ("I live in Lisbon.", "I want to learn to sail.",
                 "My wife would like to open a bakery, she has dreamed of it for years.",
                 "My brother lives in Osaka now, he says the food is amazing."):
        wm.observe(text, llm, user_id="rui")
    profile = wm.get("rui")
    assert "bakery" not in profile and "sail" in profile and "Europe/Lisbon" in profile


def test_a_release_is_left_alone_when_it_is_unclear_which_item_it_means():
    from memorykit.offline.working_phrase import released
    from memorykit.offline.working_read import read

    (fact,) = read("Scratch the TOEIC, my company doesn't need it anymore.").facts
    assert fact.kind == "release"
    assert released(fact, {"goal": ["Pass the TOEIC with 800", "Learn to cook Thai food"], "style": []}) == (
        "goal", "Pass the TOEIC with 800")
    assert released(fact, {"goal": ["Learn to cook Thai food", "Run a half marathon"], "style": []}) is None


# ------------------------------------------------------------------ the held-out score
HELDOUT_FLOOR = {"recall": 0.78, "left": 2}   # measured 0.83 (67/81) with 1 of 9 left; floor = that minus a margin


def test_heldout_profile_recall(r, ns, llm):
    """Dialogs written apart from the training data and never tuned on: recall and stale values stay put."""
    score = score_profiles(r, llm, load_dialogs("profile_heldout.jsonl"), namespace=ns, mode="template")
    assert score.facts >= 80
    assert score.recall >= HELDOUT_FLOOR["recall"], score.missed
    assert score.left <= HELDOUT_FLOOR["left"], score.stale


# ------------------------------------------------------------------ privacy
def test_forget_user_removes_working_memory(r, ns, emb):
    from memorykit.memory.index import forget_user

    user = mk.WorkingMemory(r, ns, scope="user")
    conv = mk.WorkingMemory(r, ns)
    for wm in (user, conv):
        wm.update("one", "u1", "t1")
        wm.update("two", "u1", "t1")
        wm.update("keep", "u2", "t1")
    forget_user(r, ns, "u1", emb)
    assert user.get("u1") is None and conv.get("u1", "t1") is None
    assert user.history("u1") == [] and conv.history("u1", "t1") == []
    assert user.get("u2") == "keep\n" and conv.get("u2", "t1") == "keep\n"


def test_a_tool_write_after_someone_elses_change_is_refused_with_the_current_content(r, ns):
    wm = mk.WorkingMemory(r, namespace=ns, scope="user")
    wm.update("- likes tea", "a|b")
    wm.update("- likes coffee", "system")
    shown, version = wm.read("a|b")
    update = wm.tools("a|b", expected=version)[0]
    wm.update("- likes tea\n- lives in Oslo", "a|b")  # another writer (a background observe) lands first
    refused = json.loads(update.run({"content": "- likes green tea"}))
    assert "changed by someone else" in refused["error"] and "Oslo" in refused["current"]
    assert wm.get("a|b") == "- likes tea\n- lives in Oslo\n"
    merged = json.loads(update.run({"content": "- likes green tea\n- lives in Oslo"}))
    again = json.loads(update.run({"content": "- likes green tea\n- lives in Oslo\n- runs"}))
    assert merged["ok"] and again["ok"] and wm.get("a|b").endswith("- runs\n")
    assert wm.get("system") == "- likes coffee\n"


def test_a_fact_does_not_replace_an_item_its_own_message_stored():
    """Two goals of one changing message: the second does not replace the first (it may replace an older one)."""
    from memorykit.offline.working import Lists
    from memorykit.offline.working_read import Fact

    said = "What I really want is a fitness routine again. I want to train before work at 6:30."
    first, second = (Fact("goal", span, said, 1.0, 0.9, said) for span in (
        "get back into a fitness routine", "train before work at 6:30"))
    lists = Lists({"goal": [], "style": []})
    lists.apply_all([first, second])
    assert lists.lists["goal"] == ["Get back into a fitness routine", "Train before work at 6:30"]
    later = "Change of plan, I want to swim in the lake instead."   # another message may replace either
    lists.apply_all([Fact("goal", "swim in the lake", later, 1.0, 0.9, later)])
    assert "Swim in the lake" in lists.lists["goal"] and len(lists.lists["goal"]) == 2


def test_a_statement_that_something_holds_no_longer_gives_something_up():
    from memorykit.offline.working_phrase import says_no_longer
    from memorykit.offline.working_read import read

    assert says_no_longer("My grandson showed me how, so that goal is no longer necessary.")
    assert says_no_longer("I don't need the tables any more.")
    assert not says_no_longer("Is the plan no longer valid?") and not says_no_longer("Any more tips for the plan?")
    facts = read("My grandson showed me how, so that goal is no longer necessary.").facts
    assert facts and {f.kind for f in facts} <= {"drop", "release"}   # gives something up, stores nothing


@pytest.mark.parametrize("piece, value", [
    ("Cold showers instead", "Cold showers"), ("ok, tea in the mornings instead", "ok, tea in the mornings"),
    # a request asked as a question (INSTEAD_ASK) names its value after the subject
    ("can i run at night instead", "run at night"), ("so, could we do breathing exercises instead?", "do breathing exercises"),
    # a wh-question, a first-person statement (read as a fact of its own) or "instead of" is not this reading
    ("What can I drink instead?", None), ("I'll cook at home instead", None),
    ("tea instead of coffee", None), ("instead", None),
])
def test_a_value_set_instead_of_something(piece, value):
    from memorykit.offline.working_phrase import instead_value

    assert instead_value(piece) == value


def test_x_instead_replaces_the_item_a_changing_turn_gives_up_and_nothing_in_a_calm_one():
    from memorykit.offline.working_read import Fact
    from memorykit.offline.working_turn import given_up

    said = "My doctor said no to swimming in the cold sea, too risky for my heart. Cold showers instead."
    lists = {"goal": ["Swim in the cold sea all winter"], "style": ["Short answers"]}
    swap = Fact("dislike", "Cold showers", "Cold showers instead", 0.5, 0.9, said, swap=True)
    left, gone = given_up([swap], lists)
    assert gone == ("goal", "Swim in the cold sea all winter") and [(f.kind, f.span) for f in left] == [
        ("goal", "Cold showers")]
    calm = Fact("dislike", "Cold showers", "Cold showers instead", 0.5, 0.2, said, swap=True)
    assert given_up([calm], lists) == ([], None)   # not a changing turn: nothing replaced, nothing stored


@pytest.mark.parametrize("piece, span, kind, want", [
    ("My target is IELTS 7.5 by June", "My target", "goal", "IELTS 7.5"),
    ("Small update: I want to run a half marathon", "Small update", "goal", "half marathon"),
    # a span that is the value itself stays: not before a colon / "is", or "is" after a word that is no label
    ("Yoga is my favourite thing", "Yoga", "like", "Yoga"),
    ("learn Italian this year", "learn Italian", "goal", "learn Italian"),
    ("My goal is", "My goal", "goal", "My goal"),
])
def test_a_span_that_labels_what_follows_is_read_from_after_it(piece, span, kind, want):
    from memorykit.offline.working_phrase import after_label

    assert want in after_label(piece, span, kind)


@pytest.mark.parametrize("piece, span, fires", [
    # a lead that says nothing alone before a comma: the span is read from after it (or no fact there)
    ("Small update, the gym in my building is closed for renovation", "Small update", True),
    ("Wait, I want to learn Italian", "Wait, I want to learn Italian", True),
    # a lead that is a value, a span that does not start at the lead, or no comma: left as it is
    ("Spanish, French and German are what I want to learn", "Spanish, French and German", False),
    ("I want to run, swim and cycle", "run", False),
    ("Small update on my plans", "Small update", False),
])
def test_a_lead_that_says_nothing_before_a_comma_is_no_fact(piece, span, fires):
    from memorykit.offline.working_phrase import after_lead

    got = after_lead(piece, span)
    assert (got is not False) == fires
    if fires and got:
        assert piece.split(",")[0].lower() not in got[1].lower()



@pytest.mark.parametrize("piece, span, before, want", [
    # "that" / "this" / "it" before a span of a determiner and one word: the value is what was said before
    ("Also I've entered a 60 km gravel ride in the Ardennes in September, so let's make that the goal instead",
     "the goal", "", "60 km gravel ride"),
    ("so let's make that the goal", "the goal", "I signed up for a half marathon", "half marathon"),
    # a span that is a value, no pointing word before it, or nothing before to point to: left as it is
    ("I want to read the Bible", "the Bible", "I moved house", None),
    ("that is a marathon in May", "a marathon in May", "I run", None),
    ("make it the goal", "the goal", "", None),
])
def test_a_span_pointing_back_is_read_from_what_it_points_to(piece, span, before, want):
    from memorykit.offline.working_phrase import refers_back

    got = refers_back(piece, span, before)
    assert (got is None) if want is None else (want in got)


def test_that_as_a_conjunction_points_back_to_nothing():
    from memorykit.offline.working_phrase import refers_back

    assert refers_back("I am pleased to report that I passed the examination", "the examination", "I study") is None


def test_an_x_instead_fact_is_kept_as_an_ordinary_fact_when_the_turn_gives_nothing_up():
    """INSTEAD_ANY: "... walking along the river instead" read as a goal replaces the item the turn surely gives up;
    with nothing stored to give up it is still stored (without "instead")."""
    from memorykit.offline.working_read import Fact
    from memorykit.offline.working_turn import given_up

    said = "The studio is too dear. Maybe I'll just do walking along the river in the evenings instead."
    walk = Fact("goal", "just do walking along the river", said, 0.6, 0.4, said, swap=True, keep=True)
    left, gone = given_up([walk], {"goal": ["Do Pilates twice a week"], "style": ["Short answers"]})
    assert gone == ("goal", "Do Pilates twice a week") and [f.span for f in left] == ["just do walking along the river"]
    left, gone = given_up([walk], {"goal": [], "style": []})
    assert gone is None and [f.span for f in left] == ["just do walking along the river"]


def test_a_way_to_address_the_user_is_the_name_not_a_preference():
    from memorykit.offline.working_read import read

    got = read("Good morning. I am Captain Olusegun Bakare, a commercial pilot; please refer to me as Captain Bakare.")
    assert got.name and "Bakare" in got.name
    assert not any("Bakare" in f.span for f in got.facts)


@pytest.mark.parametrize("text, name, want", [
    ("heyyy im zara but my gamer tag is zz so call me zz", "Zara", "Zz"),
    # a negated "call me", a title (the tagger keeps it with the name) or the name itself is no other name
    ("Please don't call me Liz, Elizabeth is fine.", "Elizabeth", None),
    ("I am Chen Wei, call me Mr. Chen", "Chen Wei", None), ("I'm Samuel, call me Samuel", "Samuel", None),
])
def test_the_name_asked_for_wins_over_the_one_introduced(text, name, want):
    from memorykit.offline.working_intro import asked_name

    assert asked_name(text, name) == want
