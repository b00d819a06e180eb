"""Adversarial input, property-tested: ids and messages as people type them, garbage model output.

Every case ends in a clear ``MemoryKitError`` (or ``TaskFailed``) or in correct behaviour:
never another exception, never another user's data, and nothing of a forgotten user left.
"""
from __future__ import annotations

import importlib
import pkgutil
import uuid

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import memorykit as mk
from memorykit.errors import MemoryKitError, ValidationError
from memorykit.llm.task import Task, TaskFailed, run_task
from memorykit.messages import Message
from scripted import ScriptedModel

TAGGY = st.sampled_from(list("{}|*,-@.:;'\"\\/[]()$^?!#%&+=~` ")) | st.characters()
IDS = st.one_of(
    st.text(TAGGY, min_size=1, max_size=24),
    st.sampled_from(["a|b", "*", "{x}", "a b", " a", "A", "a", "ab", "a,b", "user:1", "ユーザー", "مستخدم", "🙂"]),
)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def clean_or_rejected(fn, *args, **kwargs):
    """Run fn; a MemoryKitError is an acceptable, clear refusal. Return (ok, value)."""
    try:
        return True, fn(*args, **kwargs)
    except MemoryKitError as exc:
        assert str(exc), "errors must say what went wrong"
        return False, None


@SETTINGS
@given(a=IDS, b=IDS)
def test_two_users_never_see_each_other(r, emb, a, b):
    assume(a != b)
    ns = "p" + uuid.uuid4().hex[:8]
    store = mk.MemoryStore(r, embedder=emb, namespace=ns)
    try:
        ok_a, _ = clean_or_rejected(store.add, "The secret word is pineapple", user_id=a, memory_type="episodic")
        ok_b, _ = clean_or_rejected(store.add, "The secret word is walnut", user_id=b, memory_type="episodic")
        if ok_b:
            for hit in store.search("what is the secret word?", user_id=b, k=10, distance_threshold=2.0):
                assert hit.memory.user_id == b, (a, b, hit.memory.user_id)
        ha = clean_or_rejected(mk.ChatHistory, r, a, "t", namespace=ns)
        hb = clean_or_rejected(mk.ChatHistory, r, b, "t", namespace=ns)
        if ha[0] and hb[0]:
            ha[1].append(Message(role="user", content="only for a"))
            assert hb[1].messages() == []
    finally:
        for key in r.scan_iter(match=f"{ns}:*", count=1000):
            r.delete(key)
        for index in r.execute_command("FT._LIST"):
            if str(index).startswith(f"{ns}_"):
                r.execute_command("FT.DROPINDEX", index)


@SETTINGS
@given(user=IDS)
def test_forget_user_leaves_nothing(r, emb, user):
    ns = "p" + uuid.uuid4().hex[:8]
    text = f"Forget me fact {uuid.uuid4().hex[:6]}"
    store = mk.MemoryStore(r, embedder=emb, namespace=ns)
    try:
        ok, _ = clean_or_rejected(store.add, text, user_id=user, memory_type="episodic")
        assume(ok)
        history = mk.ChatHistory(r, user, "t1", namespace=ns)
        history.append(Message(role="user", content=text))
        store.forget_user(user)
        leftovers = [k for k in r.scan_iter(match=f"{ns}:*", count=1000)
                     if r.type(k) != "none" and text in str(r.dump(k) or b"")]
        assert leftovers == []
        assert history.messages() == []
        assert emb.vectorizer.cache is None or emb.vectorizer.cache.get(text, emb.vectorizer.model) is None
    finally:
        for key in r.scan_iter(match=f"{ns}:*", count=1000):
            r.delete(key)
        for index in r.execute_command("FT._LIST"):
            if str(index).startswith(f"{ns}_"):
                r.execute_command("FT.DROPINDEX", index)


def test_overlong_and_control_ids_are_refused_clearly(r, ns):
    for bad in ("x" * 10_000, "a\x00b", "tab\there", "", "   "):
        with pytest.raises(ValidationError):
            mk.ChatHistory(r, bad, "t", namespace=ns)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(min_size=1, max_size=300),
                      st.sampled_from(["שלום עולם", "مرحبا بالعالم", "🙂" * 50, "\u202eevil\u202c",
                                       "a\x00b\x01c", "line\r\nbreak", "{x}|*"])))
def test_messages_round_trip_or_are_refused(r, ns, text):
    history = mk.ChatHistory(r, "u", "t" + uuid.uuid4().hex[:6], namespace=ns)
    ok, _ = clean_or_rejected(history.append, Message(role="user", content=text))
    if ok:
        assert history.messages()[-1].content == text


def test_a_huge_message_is_refused_or_stored_whole(r, ns):
    history = mk.ChatHistory(r, "u", "big", namespace=ns)
    text = "x" * (1 << 20)
    ok, _ = clean_or_rejected(history.append, Message(role="user", content=text))
    if ok:
        assert history.messages()[-1].content == text
    with pytest.raises(ValidationError):
        history.append(Message(role="user", content="   "))


# ---------------------------------------------------------------- garbage from a model
def all_tasks() -> list[Task]:
    found = {}
    for package in ("memorykit.memory", "memorykit.agent"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            module = importlib.import_module(f"{package}.{info.name}")
            for value in vars(module).values():
                if isinstance(value, Task):
                    found[value.name] = value
    return list(found.values())


def test_every_task_is_found():
    names = {t.name for t in all_tasks()}
    assert {"extract_memories", "decide_memory", "summarize", "reply"} <= names, names


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.name)
@settings(max_examples=20, deadline=None)
@given(text=st.one_of(st.text(max_size=200), st.sampled_from(
    ["", "...", "{}", "[]", "null", '{"memories": [{"type": "episodic", "content": "..."}]}',
     '{"action": "EXPLODE"}', "```json\n{]\n```", "<fact>", '{"facts": ["..."]}'])))
def test_garbage_output_is_a_taskfailed_never_a_crash(task, text):
    try:
        example = _example_input(task)
    except Exception:
        pytest.skip(f"no example input for {task.name}")
    try:
        result = run_task(ScriptedModel(then=text, label="garbage"), task, example)
    except TaskFailed:
        return
    # valid output is possible by chance ("[]" for a list task); it must then be of the right type
    if task.output is not None:
        assert isinstance(result, task.output)


def _example_input(task: Task):
    """A minimal valid input for a task, from its schema's required fields."""
    schema = task.input.model_json_schema()
    data = {}
    for name in schema.get("required", []):
        prop = schema["properties"][name]
        kind = prop.get("type")
        data[name] = prop["enum"][0] if prop.get("enum") else {
            "string": "hello", "array": [], "integer": 0, "number": 0.0, "boolean": False, "object": {}}.get(kind, "hello")
    return task.input.model_validate(data)
