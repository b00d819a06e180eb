"""Memory as tools: search_memory / manage_memory bound to one user, used by the offline model."""
import json
import time

import pytest

import memorykit as mk
from memorykit.config import settings
from memorykit.llm.tools import call_tool, schemas
from memorykit.memory.long_term import format_memories


@pytest.fixture
def store(r, emb, ns):
    s = mk.MemoryStore(r, emb, namespace=ns)
    s.add("User went to Paris in 2009 for their honeymoon", user_id="raphael")
    s.add("User's partner loves Lisbon", user_id="mallory")
    s.add("Singapore requires a passport for entry", shared=True)
    s.add("User's partner went to Paris in 2009", user_id="system")  # an ordinary user
    return s


def call(tools, name, **args):
    return json.loads(call_tool(tools, {"function": {"name": name, "arguments": json.dumps(args)}}))


def test_schemas_are_openai_tools(store):
    tools = mk.memory_tools(store, "raphael")
    for entry in schemas(tools):
        assert entry["type"] == "function"
        fn = entry["function"]
        assert fn["name"] in ("search_memory", "manage_memory") and fn["description"]
        assert fn["parameters"]["type"] == "object" and fn["parameters"]["required"]


def test_search_memory_is_scoped_to_the_bound_user(store):
    found = call(mk.memory_tools(store, "raphael"), "search_memory", query="Where did I go in 2009?")
    assert [r["content"] for r in found["results"]] == ["User went to Paris in 2009 for their honeymoon"]
    other = call(mk.memory_tools(store, "mallory"), "search_memory", query="Where did I go in 2009?")
    assert all("Paris" not in r["content"] for r in other["results"])
    shared = call(mk.memory_tools(store, "mallory"), "search_memory", query="passport Singapore",
                  memory_type="semantic")
    assert [r["content"] for r in shared["results"]] == ["Singapore requires a passport for entry"]


def test_bad_arguments_come_back_as_errors(store):
    tools = mk.memory_tools(store, "raphael")
    assert "error" in call(tools, "search_memory")
    assert "error" in call(tools, "search_memory", query="x", memory_type="dreams")
    assert "error" in call(tools, "search_memory", query="x", user_id="mallory")  # not a parameter
    assert "error" in call(tools, "manage_memory", action="explode")
    assert "error" in call(tools, "manage_memory", action="add")


def test_manage_memory_add_update_delete_own_only(store):
    tools = mk.memory_tools(store, "raphael")
    added = call(tools, "manage_memory", action="add", content="User prefers aisle seats")
    assert added["status"] == "stored"
    again = call(tools, "manage_memory", action="add", content="user prefers aisle seats.")
    assert again["status"] == "already known" and again["id"] == added["id"]
    upd = call(tools, "manage_memory", action="update", memory_id=added["id"], content="User prefers window seats")
    assert upd["status"] == "updated" and upd["replaces"] == added["id"] and upd["id"] != added["id"]
    assert store.get(upd["id"], "raphael").content == "User prefers window seats"
    assert [m.content for m in store.history(upd["id"], user_id="raphael")] == [
        "User prefers aisle seats", "User prefers window seats"]  # the old text is history, not overwritten
    assert [h.memory.id for h in store.search("seats", user_id="raphael", k=5) if "seats" in h.memory.content] == [
        upd["id"]]
    assert "closed" in call(tools, "manage_memory", action="update", memory_id=added["id"], content="x")["error"]
    same = call(tools, "manage_memory", action="update", memory_id=upd["id"], content="User prefers window seats")
    assert same["status"] == "already known" and same["id"] == upd["id"]
    added = upd
    theirs = store.list("mallory", ["episodic"])[0]
    for action in ("update", "delete"):
        out = call(tools, "manage_memory", action=action, memory_id=theirs.id, content="hijacked")
        assert "error" in out
    missing = call(tools, "manage_memory", action="delete", memory_id="01NOPE")["error"]
    assert out["error"] == missing.replace("01NOPE", theirs.id)  # "not yours" reads exactly like "absent"
    shared = store.list(None, ["semantic"])[0]
    for action in ("update", "delete"):
        assert "shared knowledge" in call(tools, "manage_memory", action=action, memory_id=shared.id,
                                          content="hijacked")["error"]
    assert store.get(theirs.id, "mallory").content == "User's partner loves Lisbon"
    assert store.get(shared.id, shared=True).content == "Singapore requires a passport for entry"
    assert call(tools, "manage_memory", action="delete", memory_id=added["id"])["status"] == "deleted"
    assert store.get(added["id"], "raphael") is None


def test_offline_model_decides_to_search_then_answers(store, llm):
    tools = mk.memory_tools(store, "raphael")
    msgs = [mk.Message(role="system", content="You are a travel assistant."),
            mk.Message(role="user", content="Where did I go back in 2009?")]
    reply = llm.chat(msgs, tools=schemas(tools))
    assert reply.tool_calls and reply.tool_calls[0]["function"]["name"] == "search_memory"
    msgs += [reply] + [mk.Message(role="tool", content=call_tool(tools, c), tool_call_id=c["id"])
                       for c in reply.tool_calls]
    answer = llm.chat(msgs, tools=schemas(tools)).content
    assert answer.startswith("(offline)") and "Paris" in answer


def test_context_block_feeds_the_offline_reply(store, llm):
    hits = store.search("Where did I go back in 2009?", user_id="raphael",
                        distance_threshold=settings().distance_threshold)
    system = "You are a travel assistant.\n" + format_memories(hits)
    answer = llm.chat([mk.Message(role="system", content=system),
                       mk.Message(role="user", content="Where did I go back in 2009?")]).content
    assert "Paris" in answer
    blank = llm.chat([mk.Message(role="user", content="Where did I go back in 2009?")]).content
    assert "Paris" not in blank


def test_an_update_keeps_the_fact_it_replaces_for_as_of_and_history(store):
    tools = mk.memory_tools(store, "ana")
    london = call(tools, "manage_memory", action="add", content="User lives in London")
    time.sleep(0.01)
    between = time.time()
    time.sleep(0.01)
    berlin = call(tools, "manage_memory", action="update", memory_id=london["id"], content="User lives in Berlin")
    then = store.search("Where does the user live?", user_id="ana", k=3, as_of=between)
    now = store.search("Where does the user live?", user_id="ana", k=3)
    assert [h.memory.content for h in then if "lives" in h.memory.content] == ["User lives in London"]
    assert [h.memory.content for h in now if "lives" in h.memory.content] == ["User lives in Berlin"]
    old = store.get(london["id"], "ana")
    assert old.superseded_by == berlin["id"] and store.get(berlin["id"], "ana").supersedes == london["id"]
    assert len(store.list("ana", ["episodic"], include_superseded=True)) == len(store.list("ana", ["episodic"])) + 1


def test_two_updates_of_one_memory_at_once_leave_one_current_version(store):
    import concurrent.futures as cf
    first = store.add("User drives a Fiat", user_id="ana")
    with cf.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda car: call(mk.memory_tools(store, "ana"), "manage_memory", action="update",
                                               memory_id=first.id, content=f"User drives a {car}"),
                             ["Tesla", "Volvo", "Honda", "Mazda"]))
    done = [o for o in outs if o.get("status") == "updated"]
    assert len(done) == 1 and all("closed" in o["error"] for o in outs if o not in done)
    current = [m for m in store.list("ana", ["episodic"]) if "drives" in m.content]
    assert [m.id for m in current] == [done[0]["id"]]
    assert [m.content for m in store.history(first.id, user_id="ana")] == ["User drives a Fiat", done[0]["content"]]
