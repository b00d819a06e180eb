"""MemoryAgent: a turn in each mode, background writes, faults of the model and of Redis, hooks,
failed steps, usage, and the question embedded once per turn."""
import contextvars
import importlib.util
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import memorykit as mk
import memorykit.agent.memory_agent as agent_module
from memorykit.course.agent_eval import answered, compare_modes, load_script
from memorykit.errors import LLMError, ValidationError
from memorykit.llm import OpenAIChat, TaskFailed, get_llm
from memorykit.memory.short_term import ChatHistory
from scripted import ScriptedModel


@pytest.fixture
def agent(r, emb, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns)
    yield a
    a.close()


def roles(agent, user, thread):
    return [m.role for m in agent.history(user, thread).messages()]


def scripted(*script):
    """Replies (or raises) from a script, then answers as the offline model."""
    return ScriptedModel(*script, then=get_llm("offline"))


class Recording:
    """Wraps a model and keeps every prompt it was sent (a chat server: no typed tasks)."""

    def __init__(self, inner):
        self.inner, self.prompts, self.label = inner, [], "recording"

    def chat(self, messages, tools=None, **kwargs):
        self.prompts.append(list(messages))
        return self.inner.chat(messages, tools=tools)


class Junk:
    """A backend that answers every task except ``reply`` with garbage, raises, or stalls.

    ``mode``: "garbage" (a string where an object is due), "raise" (an LLMError) or "stall"
    (waits ``stall_s`` and then gives up, as a client at its deadline does). ``reply_too``
    spoils the reply task as well.
    """

    def __init__(self, mode="garbage", reply_too=False, stall_s=0.2):
        self.mode, self.reply_too, self.stall_s = mode, reply_too, stall_s
        self.offline, self.calls = get_llm("offline"), []
        self.label = f"junk-{mode}"

    def perform(self, task, inp, tools=None):
        self.calls.append(task.name)
        if task.name == "reply" and not self.reply_too:
            return self.offline.perform(task, inp, tools=tools)
        if self.mode == "stall":
            time.sleep(self.stall_s)
            raise LLMError(f"the model did not answer within {self.stall_s} s")
        if self.mode == "raise":
            raise LLMError("the model server answered HTTP 503: overloaded")
        return {"garbage": "\u0000 ... not what the schema asked for"} if task.output else None

    def chat(self, messages, **kwargs):
        raise LLMError("this backend implements tasks only")


# ---------------------------------------------------------------- one turn in each mode
def test_full_memory_remembers_across_threads_and_users_stay_apart(agent):
    first = agent.chat("My wife and I went to Paris in 2009 for our honeymoon.", user_id="raphael", thread_id="t1")
    assert first.ok and first.reply.startswith("(offline)")
    agent.flush()
    assert [d.action for d in first.memories_stored] == ["ADD"]
    assert "Paris" in first.memories_stored[0].memory.content
    assert {"load", "retrieve", "model", "store", "extract", "remember", "summarize"} <= set(first.timings_ms)

    agent.history("raphael", "t1").clear()
    later = agent.chat("Where did I go back in 2009?", user_id="raphael", thread_id="t2")
    assert "Paris" in later.reply
    assert any("Paris" in h.memory.content for h in later.memories_used)
    assert roles(agent, "raphael", "t2") == ["user", "assistant"]

    stranger = agent.chat("Where did I go back in 2009?", user_id="someone-else", thread_id="t1")
    assert "Paris" not in stranger.reply and stranger.memories_used == [] and stranger.recalled == []


def test_forget_user_leaves_nothing_that_queued_writes_could_bring_back(r, emb, llm, ns):
    """carol's memory writes are still queued (the only worker is busy) when she asks to be forgotten: they must
    not write her data back afterwards, and "system", chatting beside her, keeps everything."""
    agent, gate = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, writers=1), threading.Event()
    try:
        agent.chat("I have diabetes.", user_id="carol", thread_id="t1")
        agent.flush()  # carol has memories, a working profile, recall vectors
        agent._writes.submit(("blocker", "x"), lambda: gate.wait(60))  # holds the only worker
        agent.chat("I take insulin every morning.", user_id="carol", thread_id="t2")
        agent.chat("I am allergic to peanuts.", user_id="system", thread_id="t1")
        assert agent.pending("carol", "t2") == 1
        assert agent.forget_user("carol") > 0
        gate.set()
        agent.flush()
        assert agent.store.list("carol") == [] and agent.recall.count("carol") == 0
        assert [k for k in r.scan_iter(match=f"{ns}:*") if "carol" in k] == []
        assert any("peanuts" in m.content for m in agent.store.list("system"))
        later = agent.chat("Do I have diabetes?", user_id="carol", thread_id="t1")  # a new start, not an error
        assert later.ok and later.memories_used == [] and "diabetes" not in later.reply.lower()
    finally:
        gate.set()
        agent.close()


def test_an_agent_keeps_forget_times_only_while_redis_keeps_the_mark(r, emb, llm, ns):
    """An app that runs for months forgets many users: the agent keeps each one's forget time (what stops a turn
    begun before it) only as long as Redis keeps the forget mark, so the agent does not grow with every user."""
    from memorykit.memory.index import FORGET_MARK_SECONDS
    agent = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns)
    long_ago = time.monotonic() - FORGET_MARK_SECONDS - 1
    agent._forgotten.update({f"user{i}": long_ago for i in range(1100)})  # forgotten more than a day ago
    agent.forget_user("system")
    assert set(agent._forgotten) == {"system"}
    agent.chat("I live in Lisbon.", user_id="user7", thread_id="t1")  # forgotten long ago, remembered now
    agent.chat("I live in Porto.", user_id="system", thread_id="t1")  # forgotten just before: remembered
    agent.flush()
    assert [m.content for m in agent.store.list("user7")] == ["User lives in Lisbon."]
    assert [m.content for m in agent.store.list("system")] == ["User lives in Porto."]
    agent.close()


def test_forget_user_in_another_process_drops_the_writes_queued_here(r, emb, llm, ns):
    """Two app processes (two agents on one Redis): carol's memory writes are queued in the first when the
    second forgets her. The forget mark it leaves in Redis stops them; her next turn there is remembered again."""
    here, there = (mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, writers=1) for _ in range(2))
    gate = threading.Event()
    try:
        here._writes.submit(("blocker", "x"), lambda: gate.wait(60))  # holds the only worker of this process
        here.chat("I have diabetes.", user_id="carol", thread_id="t1")
        here.chat("I am allergic to peanuts.", user_id="system", thread_id="t1")
        assert here.pending("carol", "t1") == 1
        assert there.forget_user("carol") > 0  # her two messages were saved; the queued job wrote nothing yet
        gate.set()
        here.flush()
        assert [k for k in r.scan_iter(match=f"{ns}:*") if "carol" in k] == []
        assert any("peanuts" in m.content for m in here.store.list("system"))
        here.chat("I live in Lisbon.", user_id="carol", thread_id="t2")
        here.flush()
        assert [m.content for m in here.store.list("carol")] == ["User lives in Lisbon."]
    finally:
        gate.set()
        here.close(), there.close()


def test_a_tool_run_or_feedback_analysis_under_way_writes_nothing_after_forget_user(r, emb, ns):
    """The model is still planning carol's tools and reading her feedback when she is forgotten: neither her
    question (a procedure) nor her exchanges (feedback examples) are written back when it answers."""
    from memorykit.offline import OfflineChat

    started, gate = threading.Barrier(3), threading.Event()

    class Gated(OfflineChat):
        def perform(self, task, inp, tools=None):
            if task.name in ("plan_tools", "analyze_feedback") and not gate.is_set():
                started.wait(30)  # both runs are in their first model call, then forget_user, then the gate
                gate.wait(30)
            return super().perform(task, inp, tools=tools)

    agent, llm = mk.MemoryAgent(r, llm=get_llm("offline"), embedder=emb, namespace=ns), Gated()
    procedures = mk.ProcedureStore(r, embedder=emb, namespace=ns)
    tools = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools("wellness_user"), procedures=procedures)
    exchanges = [("What is my resting heart rate?", "62 bpm"), ("Wrong, it is 58.", "Sorry, 58 bpm")]
    done = []
    workers = [threading.Thread(target=lambda: done.append(tools.run("Compare my sleep and my heart rate this week",
                                                                   user_id="carol"))),
               threading.Thread(target=lambda: done.append(agent.feedback.learn("carol", exchanges, llm=llm)))]
    try:
        for w in workers:
            w.start()
        started.wait(30)  # both are inside their model call
        agent.forget_user("carol")
        gate.set()
        for w in workers:
            w.join(60)
        run = next(d for d in done if hasattr(d, "stored"))
        assert run.evaluation.success and not run.stored and procedures.count(user_id="carol") == 0
        assert agent.feedback.count("carol") == 0 and [] in done
        assert tools.run("Compare my sleep and my heart rate this week", user_id="carol").stored  # a new start
    finally:
        gate.set()
        agent.close()


def test_a_fact_is_dated_when_said_even_if_its_thread_is_remembered_later(r, emb, ns, monkeypatch):
    """Threads' background writes run in any order: the phone's slower extraction finishes after the laptop's
    later message was remembered. The older fact goes into the history before the newer one, not over it."""
    from memorykit.memory import dedup
    from memorykit.offline import OfflineChat

    class SlowOnLuna(OfflineChat):
        def perform(self, task, inp, tools=None):
            if task.name == "extract_memories" and "Luna" in inp.model_dump_json():
                time.sleep(1.0)
            return super().perform(task, inp, tools=tools)

    monkeypatch.setattr(dedup, "decide", lambda new, existing, llm: dedup.MemoryDecision(
        action="UPDATE", target=0, reason="the cat has one name"))
    agent = mk.MemoryAgent(r, llm=SlowOnLuna(), embedder=emb, namespace=ns)
    try:
        agent.chat("My cat is called Luna.", user_id="sam", thread_id="phone")
        agent.chat("My cat is called Milo now.", user_id="sam", thread_id="laptop")
        agent.flush()
        current = agent.store.list("sam")
        assert [m.content for m in current] == ["User's cat is called Milo now."]
        assert [m.content for m in agent.store.history(current[0].id, user_id="sam")] == [
            "User's cat is called Luna.", "User's cat is called Milo now."]
    finally:
        agent.close()


def test_short_term_mode_uses_the_thread_only(r, emb, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory="short_term")
    assert a.store is None and a.embedder is None
    a.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    same = a.chat("What am I allergic to?", user_id="lena", thread_id="t1")
    other = a.chat("What am I allergic to?", user_id="lena", thread_id="t2")
    a.close()
    assert "peanuts" in same.reply and "peanuts" not in other.reply
    assert same.memories_stored == [] and same.memories_used == []
    assert [m.role for m in same.prompt] == ["system", "user", "assistant", "user"]


def test_stateless_mode_sees_only_the_new_message_but_keeps_the_transcript(r, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory=False)
    a.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    turn = a.chat("What am I allergic to?", user_id="lena", thread_id="t1")
    assert "peanuts" not in turn.reply
    assert [m.role for m in turn.prompt] == ["system", "user"]
    assert roles(a, "lena", "t1") == ["user", "assistant", "user", "assistant"]


def test_tools_mode_searches_memory_through_a_tool(r, emb, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, retrieval="tools")
    a.store.add("User went to Paris in 2009 for their honeymoon.", user_id="raphael")
    turn = a.chat("Where did I go back in 2009?", user_id="raphael", thread_id="t1")
    a.close()
    assert [c["function"]["name"] for c in turn.tool_calls] == ["search_memory"]
    assert "Paris" in turn.reply
    assert [h.memory.content for h in turn.memories_used] == ["User went to Paris in 2009 for their honeymoon."]
    assert "Paris" not in turn.prompt[0].content  # nothing injected: the model looked it up
    assert roles(a, "raphael", "t1") == ["user", "assistant", "tool", "assistant"]


def test_bad_input_raises_before_anything_is_written(agent):
    with pytest.raises(ValidationError):
        agent.chat("   ", user_id="u1", thread_id="t1")
    with pytest.raises(ValidationError):
        agent.chat("hi", user_id="", thread_id="t1")
    with pytest.raises(ValidationError):
        mk.MemoryAgent(agent.r, llm=agent.llm, namespace=agent.namespace, memory="everything")
    cut = json.loads('"I love this \\ud83d"')  # half an emoji, as a browser may send it
    with pytest.raises(ValidationError, match="surrogate"):
        agent.chat(cut, user_id="u1", thread_id="t1")
    with pytest.raises(ValidationError, match="surrogate"):
        agent.store.add(cut, user_id="u1")
    with pytest.raises(ValidationError, match="surrogate"):
        agent.history("u1", "t1").append(mk.Message(role="user", content=cut))
    assert roles(agent, "u1", "t1") == [] and agent.unsaved("u1", "t1") == [] and agent.store.count("u1") == 0


def test_summarizes_when_the_policy_says_so(r, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory="short_term",
                       summary_policy=mk.ByCount(max_messages=6, keep_last=2))
    for text in ["I live in Lisbon.", "I have a cat named Miso.", "I play the cello.", "I like green tea."]:
        a.chat(text, user_id="u1", thread_id="t1")
    a.flush()
    history = a.history("u1", "t1")
    assert history.summary() and "Lisbon" in history.summary()
    assert len(history.prompt_messages()) < 8


# ---------------------------------------------------------------- background writes
def test_background_writes_finish_before_the_next_turn_of_the_thread_reads(agent):
    slow_remember = agent.store.remember

    def remember(*args, **kwargs):
        time.sleep(0.4)
        return slow_remember(*args, **kwargs)

    agent.store.remember = remember
    first = agent.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    assert "remember" not in first.timings_ms  # the reply came back before the slow write finished
    second = agent.chat("What am I allergic to?", user_id="lena", thread_id="t1")  # no flush() in between
    assert first.timings_ms["remember"] >= 400
    assert first.reply_ms < sum(first.timings_ms.values())  # the user did not wait for the writes
    assert any("peanuts" in h.memory.content for h in second.memories_used)
    assert "peanuts" in second.reply


def test_inline_writes_are_done_when_chat_returns(r, emb, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, background=False)
    turn = a.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    assert "remember" in turn.timings_ms and a.store.count("lena") == 1
    assert turn.reply_ms >= sum(turn.timings_ms.values())  # the user waited for every step


def test_a_failing_background_write_is_reported_not_raised(agent, monkeypatch):
    def broken(*args, **kwargs):
        raise redis.ConnectionError("redis went away")

    monkeypatch.setattr(agent.store, "remember", broken)
    turn = agent.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    agent.flush()
    assert turn.ok
    assert list(turn.failed_steps) == ["remember"] and "redis went away" in turn.failed_steps["remember"]
    assert {"index", "working", "summarize"} <= set(turn.timings_ms)  # the other steps still ran
    assert agent.recall.count("lena") == 2
    assert roles(agent, "lena", "t1") == ["user", "assistant"]


def test_each_background_step_fails_on_its_own(agent, monkeypatch):
    def bad_extract(*args, **kwargs):
        raise TaskFailed("extract_memories", "invalid output after one repair: memories: field required")

    def bad_observe(*args, **kwargs):
        raise RuntimeError("working memory bug")

    monkeypatch.setattr(agent_module, "extract_memories", bad_extract)
    monkeypatch.setattr(agent.working, "observe", bad_observe)
    turn = agent.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    agent.flush()
    assert turn.ok and turn.reply and set(turn.failed_steps) == {"extract", "working"}
    assert "field required" in turn.failed_steps["extract"] and "working memory bug" in turn.failed_steps["working"]
    assert {"index", "extract", "working", "summarize"} <= set(turn.timings_ms)
    assert agent.recall.count("lena") == 2 and agent.store.count("lena") == 0
    assert roles(agent, "lena", "t1") == ["user", "assistant"]
    assert "failed" in repr(turn)


# ---------------------------------------------------------------- faults
@pytest.mark.parametrize("fault", [
    LLMError("the model call failed: Request timed out."),
    TimeoutError("read timed out"),
    None,                                                  # garbage: not a message
    {"choices": []},                                       # garbage: a raw dict
    mk.Message(role="assistant", content="   "),           # garbage: empty reply
    mk.Message(role="user", content="I am the model"),     # garbage: wrong role
], ids=["llm-error", "timeout", "none", "dict", "empty", "wrong-role"])
def test_model_fault_keeps_the_user_message_and_indexes_only_it(r, emb, ns, fault):
    a = mk.MemoryAgent(r, llm=scripted(fault), embedder=emb, namespace=ns)
    turn = a.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    a.flush()
    assert not turn.ok and turn.reply == "" and turn.error
    assert [(m.role, m.content) for m in a.history("lena", "t1").messages()] == [
        ("user", "I'm allergic to peanuts.")]
    assert a.recall.count("lena") == 1 and a.store.count("lena") == 0  # stored, so recallable; this model extracts nothing
    again = a.chat("Are you back?", user_id="lena", thread_id="t1")  # the next turn works normally
    a.close()
    assert again.ok and roles(a, "lena", "t1") == ["user", "user", "assistant"]


class Fake500:
    """An OpenAI-compatible endpoint on loopback that always answers HTTP 500 (or, given ``status=200`` and a
    content type, that status with ``body``: a proxy's or gateway's page in front of the model server)."""

    def __init__(self, status: int = 500, body: bytes | None = None, content_type: str = "application/json"):
        self.hits = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                fake.hits += 1
                data = body or json.dumps({"error": {"message": "boom", "type": "server_error"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def one_turn_against(server, r, ns):
    """One short-term turn of an agent whose model is ``server`` (shut down afterwards): (agent, turn)."""
    try:
        llm = OpenAIChat("fake-model", api_key="sk-test", base_url=server.url, max_retries=0)
        a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory="short_term")
        return a, a.chat("Hello there", user_id="u1", thread_id="t1")
    finally:
        server.server.shutdown()


def test_http_500_from_an_openai_compatible_server(r, ns):
    server = Fake500()
    a, turn = one_turn_against(server, r, ns)
    assert server.hits == 1 and "HTTP 500" in turn.error
    assert roles(a, "u1", "t1") == ["user"]


def test_a_web_page_instead_of_a_chat_completion_is_a_clear_model_error(r, ns, caplog):
    a, turn = one_turn_against(Fake500(200, b"<html><body>502 Bad Gateway</body></html>", "text/html"), r, ns)
    assert turn.error == "the model gave no usable answer" and "Bad Gateway" in caplog.text  # the page: logged
    assert roles(a, "u1", "t1") == ["user"]


class RaisesRaw:
    """A client of an app's own that lets the openai SDK's or httpx's errors out instead of an LLMError."""

    label = "raw-sdk"

    def __init__(self, error: Exception):
        self.error = error

    def chat(self, messages, **options):
        raise self.error


def test_a_model_error_reaches_turn_error_by_its_kind_and_the_log_without_credentials(r, ns, agent, caplog):
    """An app may show turn.error to its user: no server text, key or address there. The log keeps the
    server's words, with credentials masked."""
    import httpx
    import openai

    said = json.dumps({"error": {"message": "Incorrect API key provided: sk-proj-Ab12****wxYZ.", "type": "x"}})
    _, refused = one_turn_against(Fake500(401, said.encode()), r, ns)
    llm = OpenAIChat("fake-model", api_key="sk-proj-Ab12xxxx", base_url="http://svc-user:s3cret@127.0.0.1:9/v1",
                     max_retries=0, timeout=3)
    other = mk.MemoryAgent(r, llm=llm, namespace=ns, memory="short_term")
    unreachable = other.chat("Hi", user_id="a|b", thread_id="t1")
    other.close()
    late = LLMError("the model did not answer within 3 s")
    late.__cause__ = openai.APITimeoutError(request=httpx.Request("POST", "http://svc-user:s3cret@127.0.0.1:9/v1"))
    agent.llm = scripted(late)
    timed_out = agent.chat("Hi", user_id="system", thread_id="t1")
    assert refused.error == "the model server refused the request (HTTP 401)"
    assert unreachable.error == "the model server could not be reached"
    assert timed_out.error == "the model did not answer in time"
    assert "Incorrect API key provided: sk-***" in caplog.text and "http://***@127.0.0.1:9/v1" in caplog.text
    assert "sk-proj-Ab12" not in caplog.text and "s3cret" not in caplog.text
    # another client that lets the SDK's or httpx's own errors out: told by their kind too
    request = httpx.Request("POST", "https://gw.internal/v1?api_key=GW-SECRET-42")
    flagged = openai.BadRequestError("Invalid 'messages[1].content': 'I was diagnosed last week' flagged",
                                     response=httpx.Response(400, request=request), body=None)
    errors = [(flagged, "the model server refused the request (HTTP 400)")]
    if importlib.util.find_spec("httpx2"):  # the openai SDK's transport in newer releases
        import httpx2

        errors.append((httpx2.ReadTimeout("The read operation timed out"), "the model did not answer in time"))
    for raised, expected in (*errors,
                             (httpx.ConnectError("connect failed for https://gw.internal/v1?api_key=GW-SECRET-42",
                                                 request=request), "the model server could not be reached")):
        bare = mk.MemoryAgent(r, llm=RaisesRaw(raised), namespace=ns, memory="short_term")
        assert bare.chat("Hi", user_id="lena", thread_id="t2").error == expected
        bare.close()


def test_redis_fault_while_saving_the_reply_keeps_it_for_the_next_turn(agent, monkeypatch):
    real_append = ChatHistory.append
    calls = []

    def flaky(self, message, **kw):
        calls.append(message)
        if len(calls) == 2:
            raise redis.ConnectionError("connection reset by peer")
        return real_append(self, message, **kw)

    monkeypatch.setattr(ChatHistory, "append", flaky)
    turn = agent.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    agent.flush()
    assert "Redis is unavailable" in turn.error and turn.reply  # the reply is shown, its save is pending
    assert roles(agent, "lena", "t1") == ["user"]
    assert [m.role for m in agent.unsaved("lena", "t1")] == ["assistant"]
    assert [m.content for m in agent.store.list("lena")] == ["User is allergic to peanuts."]  # her message is stored
    nxt = agent.chat("Thanks!", user_id="lena", thread_id="t1")
    agent.flush()
    assert nxt.ok and roles(agent, "lena", "t1") == ["user", "assistant", "user", "assistant"]
    assert agent.unsaved("lena", "t1") == [] and agent.recall.count("lena", "t1") == 4  # the late reply indexed too


class FailsFirstReply(Junk):
    """The offline model, except that its first reply fails (a model server's error, once)."""

    def __init__(self):
        super().__init__()
        self.failed = False

    def perform(self, task, inp, tools=None):
        if task.name == "reply" and not self.failed:
            self.failed = True
            raise LLMError("the model server answered HTTP 500: boom", kind="server", status=500)
        return self.offline.perform(task, inp, tools=tools)


def test_a_message_stored_by_a_turn_whose_model_failed_is_still_remembered(r, emb, ns):
    a = mk.MemoryAgent(r, llm=FailsFirstReply(), embedder=emb, namespace=ns)
    failed = a.chat("My locker code is 4711.", user_id="lena", thread_id="t1")
    a.flush()
    assert not failed.ok and "HTTP 500" in failed.error and roles(a, "lena", "t1") == ["user"]
    assert [h.message.content for h in a.recall.search("locker", "lena", k=1)] == ["My locker code is 4711."]
    assert any("4711" in m.content for m in a.store.list("lena"))
    a.close()


def test_messages_kept_while_redis_was_down_are_remembered_when_they_land(r, emb, ns, monkeypatch):
    a = mk.MemoryAgent(r, llm=get_llm("offline"), embedder=emb, namespace=ns)
    real_append = ChatHistory.append
    monkeypatch.setattr(ChatHistory, "append", lambda self, m, **kw: (_ for _ in ()).throw(redis.ConnectionError("down")))
    kept = a.chat("I am allergic to peanuts.", user_id="lena", thread_id="t1")
    assert "is kept" in kept.error and [m.role for m in a.unsaved("lena", "t1")] == ["user"]
    monkeypatch.setattr(ChatHistory, "append", real_append)
    later = a.chat("What should I cook tonight?", user_id="lena", thread_id="t1")
    a.flush()
    assert later.ok and roles(a, "lena", "t1") == ["user", "user", "assistant"]
    assert [m.content for m in a.store.list("lena")] == ["User is allergic to peanuts."]
    assert {h.message.content for h in a.recall.search("peanuts", "lena", k=3)} >= {"I am allergic to peanuts."}
    a.close()


def test_a_message_whose_save_timed_out_but_landed_is_remembered_with_the_next_turn(r, emb, ns, monkeypatch):
    """The write was applied, its reply lost (a timeout): the message is not stored twice, and its memory and
    recall vector are written with the next turn's."""
    a, real_append, calls = mk.MemoryAgent(r, llm=get_llm("offline"), embedder=emb, namespace=ns), ChatHistory.append, []

    def lands_then_times_out(self, m, **kw):  # the first write lands and its reply is lost
        real_append(self, m, **kw)
        calls.append(m)
        if len(calls) == 1:
            raise redis.TimeoutError("Timeout reading from socket")
    monkeypatch.setattr(ChatHistory, "append", lands_then_times_out)
    kept = a.chat("I am allergic to penicillin.", user_id="sam", thread_id="t1")
    assert "is kept" in kept.error
    later = a.chat("I also like hiking in the Alps.", user_id="sam", thread_id="t1")
    a.flush()
    assert later.ok and roles(a, "sam", "t1") == ["user", "user", "assistant"]
    assert "User is allergic to penicillin." in [m.content for m in a.store.list("sam")]
    assert "I am allergic to penicillin." in {h.message.content for h in a.recall.search("penicillin", "sam", k=3)}
    a.close()


def test_indexes_redis_lost_are_created_again_on_first_use(agent, r, ns):
    """Redis restarted without its data, or failed over to an empty replica: the indexes are gone. The running
    agent's next queries create them again (over the documents Redis still holds) instead of failing every turn."""
    agent.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    agent.flush()
    for name in mk.keys.index_names(ns):
        if name in r.execute_command("FT._LIST"):
            r.execute_command("FT.DROPINDEX", name)  # the documents stay, as after an index-only loss
    turn = agent.chat("I adopted a cat named Miso.", user_id="lena", thread_id="t1")
    agent.flush()
    assert turn.ok and turn.failed_steps == {}
    assert {"peanuts", "Miso"} <= {w.strip(".") for h in agent.recall.search("allergy or cat", "lena", k=10)
                                  for w in h.message.content.split()}
    assert [h.memory.content for h in agent.store.search("peanuts", user_id="lena", mode="text")] == \
        ["User is allergic to peanuts."]
    assert agent.feedback.count("lena") == 0


def dead_redis(**options) -> tuple[redis.Redis, int]:
    """A client for a loopback port nothing listens on, and that port."""
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return redis.Redis(port=port, decode_responses=True, **options), port


def test_redis_down_from_the_start(llm):
    dead, _ = dead_redis(socket_connect_timeout=0.5)
    a = mk.MemoryAgent(dead, llm=llm, namespace="nowhere", memory="short_term")
    turn = a.chat("Hello?", user_id="u1", thread_id="t1")
    assert "Redis is unavailable" in turn.error and turn.reply == ""
    assert [m.content for m in a.unsaved("u1", "t1")] == ["Hello?"]


def test_while_redis_is_down_waiting_messages_are_bounded_and_a_refused_one_is_said_so(llm, monkeypatch):
    monkeypatch.setattr(agent_module, "MAX_UNSAVED_PER_THREAD", 2)
    monkeypatch.setattr(agent_module, "MAX_UNSAVED_CHARS", 40)
    dead, port = dead_redis(retry=Retry(NoBackoff(), 0))  # fails at once
    a = mk.MemoryAgent(dead, llm=llm, namespace="nowhere", memory="short_term")
    turns = [a.chat(text, user_id="u1", thread_id=tid) for text, tid in
             (("one", "t1"), ("two", "t1"), ("three", "t1"), ("x" * 30, "t2"), ("y" * 20, "t3"))]
    assert [m.content for m in a.unsaved("u1", "t1")] == ["one", "two"]  # the third is over the thread's bound
    assert [m.content for m in a.unsaved("u1", "t2")] == ["x" * 30] and a.unsaved("u1", "t3") == []  # 36 + 20 > 40
    kept, refused = [t for t in turns if "is kept" in t.error], [t for t in turns if "was not kept" in t.error]
    assert [t.user_message.content for t in refused] == ["three", "y" * 20] and len(kept) == 3
    assert all(str(port) not in t.error for t in turns)  # the server's address stays in the log
    with a._unsaved_lock:
        assert a._unsaved_chars == 36


# ---------------------------------------------------------------- hooks
def test_before_model_hook_redacts_the_prompt(r, ns):
    llm = Recording(get_llm("offline"))

    def redact(prompt):
        return [mk.Message(role=m.role, content=re.sub(r"\S+@\S+", "[email]", m.content)) for m in prompt]

    a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory="short_term", before_model=[redact])
    a.chat("My email is lena@example.com, please note it.", user_id="u1", thread_id="t1")
    a.close()
    sent = " ".join(m.content for m in llm.prompts[0])
    assert "lena@example.com" not in sent and "[email]" in sent
    assert "lena@example.com" in a.history("u1", "t1").messages()[0].content  # the thread keeps the original


def test_a_failing_hook_is_reported(r, ns, llm):
    def broken(prompt):
        raise RuntimeError("hook bug")

    a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory="short_term", before_model=[broken])
    turn = a.chat("Hello", user_id="u1", thread_id="t1")
    assert "hook bug" in turn.error and roles(a, "u1", "t1") == ["user"]


# ---------------------------------------------------------------- feedback and the scripted comparison
def test_feedback_is_stored_and_guides_the_next_prompt(agent):
    turn = agent.chat("Hi, I'm Lena.", user_id="lena", thread_id="t1")
    assert agent.feedback.mark("lena", turn.user_message.content, turn.reply, "positive") == "added"
    nxt = agent.chat("Hi, I'm Lena.", user_id="lena", thread_id="t2")
    assert "GOOD:" in nxt.prompt[0].content
    assert agent.feedback.mark("lena", turn.user_message.content, turn.reply, "positive") == "removed"


def test_answered_needs_every_keyword_and_no_admission_of_ignorance():
    assert answered("(offline) From what I know: you went to Paris.", ["paris"])
    assert not answered("(offline) I don't know that yet: Paris?", ["paris"])
    assert not answered("You went to Rome.", ["paris"])


def test_only_full_memory_answers_cross_session_questions(r, emb, llm, ns):
    scenarios = load_script()
    assert {q["kind"] for s in scenarios for q in s["questions"]} == {"follow-up", "cross-session"}
    df = compare_modes(r, llm, emb, ns, scenarios=scenarios)
    assert (df[df["kind"] == "setup"]["correct"].isna()).all()
    df = df[df["kind"] != "setup"].astype({"correct": bool})
    score = df.groupby(["mode", "kind"])["correct"].sum()
    assert score["stateless"].sum() == 0
    assert score[("short_term", "cross-session")] == 0 and score[("short_term", "follow-up")] > 0
    assert score[("full", "cross-session")] > score[("short_term", "cross-session")]
    assert score[("full", "follow-up")] >= score[("short_term", "follow-up")]


# ---------------------------------------------------------------- garbage, stalls, usage, embeddings
@pytest.mark.parametrize("mode", ["garbage", "raise", "stall"])
def test_junk_task_answers_never_raise_and_lose_no_message(r, emb, ns, mode):
    llm = Junk(mode)
    a = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns,
                       summary_policy=mk.ByCount(max_messages=4, keep_last=2))
    said = ["Hi, my name's Lena.", "I'm allergic to peanuts.", "I moved to Hamburg.", "What am I allergic to?"]
    started = time.perf_counter()
    turns = [a.chat(text, user_id="lena", thread_id=f"t{i % 2}") for i, text in enumerate(said)]
    a.flush()
    elapsed = time.perf_counter() - started
    a.close()
    assert all(t.ok and t.reply.startswith("(offline)") for t in turns)
    for thread in ("t0", "t1"):
        kept = [m.content for m in a.history("lena", thread).messages() if m.role == "user"]
        assert kept == [t.user_message.content for t in turns if t.thread_id == thread]
    failed = {step for t in turns for step in t.failed_steps}
    assert "working" in failed and all(isinstance(v, str) and v for t in turns for v in t.failed_steps.values())
    assert all("index" not in t.failed_steps for t in turns) and a.recall.count("lena") == 8
    assert {"extract_memories", "update_working_memory"} <= set(llm.calls)
    spoiled = [c for c in llm.calls if c != "reply"]
    assert len(spoiled) <= 3 * len(said)  # extract, working, summarize at most once a turn: no retries
    if mode == "stall":  # so four turns cost a few deadlines, not a cascade of them
        assert elapsed < 0.2 * len(spoiled) + 15


@pytest.mark.parametrize("junk", [None, "not a message", mk.Message(role="assistant", content=" ")],
                         ids=["none", "string", "empty"])
def test_a_junk_reply_from_a_task_backend_keeps_the_user_message(r, emb, ns, junk):
    class BadReply(Junk):
        def perform(self, task, inp, tools=None):
            return junk if task.name == "reply" else super().perform(task, inp, tools)

    a = mk.MemoryAgent(r, llm=BadReply("raise"), embedder=emb, namespace=ns)
    turn = a.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    a.flush()
    a.close()
    assert not turn.ok and turn.error and turn.reply == ""
    assert roles(a, "lena", "t1") == ["user"] and a.store.count("lena") == 0


def test_usage_is_summed_over_the_turn(r, emb, llm, ns):
    reply = mk.Message(role="assistant", content="Hello!", usage={"prompt_tokens": 11, "completion_tokens": 7})
    short = mk.MemoryAgent(r, llm=scripted(reply), namespace=ns, memory="short_term")
    turn = short.chat("Hi there", user_id="u1", thread_id="t1")
    short.close()
    assert (turn.model_calls, turn.tokens_in, turn.tokens_out) == (1, 11, 7)
    assert [u.task for u in turn.usage] == ["reply"] and not turn.usage[0].estimated

    full, gate = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, writers=1), threading.Event()
    full._writes.submit(("blocker", "x"), lambda: gate.wait(60))  # the turn's writes wait: the count is its own
    turn = full.chat("I'm allergic to peanuts.", user_id="lena", thread_id="t1")
    foreground = turn.model_calls
    gate.set()
    full.flush()
    full.close()
    tasks = [u.task for u in turn.usage]
    assert foreground == 1 and tasks[0] == "reply" and {"extract_memories", "update_working_memory"} <= set(tasks)
    assert turn.model_calls == len(turn.usage) > foreground
    assert turn.tokens_in == sum(u.prompt_tokens for u in turn.usage) > 0
    assert turn.tokens_out == sum(u.completion_tokens for u in turn.usage)


@pytest.mark.parametrize("retrieval", ["inject", "tools"])
def test_the_question_is_embedded_once_per_turn(r, emb, llm, ns, monkeypatch, retrieval):
    seen = []  # (embedded while the user waits?, text)

    def note(texts):
        seen.extend((threading.current_thread() is threading.main_thread(), t) for t in texts)

    real_embed, real_many = emb.embed, emb.embed_many
    monkeypatch.setattr(emb, "embed", lambda text, *a, **k: note([text]) or real_embed(text, *a, **k))
    monkeypatch.setattr(emb, "embed_many", lambda texts, *a, **k: note(texts) or real_many(texts, *a, **k))
    a = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns, retrieval=retrieval)
    a.store.add("User went to Paris in 2009 for their honeymoon.", user_id="raphael")
    a.feedback.mark("raphael", "Where did I go in 2009?", "Paris.", "positive")
    question = "Where did I go back in 2009?"
    seen.clear()
    turn = a.chat(question, user_id="raphael", thread_id="t1")
    a.close()
    assert turn.ok and "Paris" in turn.reply
    # memories, recall and feedback share one vector; in tools mode search_memory embeds the
    # query the model wrote (here the same words) once more
    assert seen.count((True, question)) == (1 if retrieval == "inject" else 2)
    assert seen.count((False, question)) <= 1  # indexing for recall


def test_the_system_prompt_and_thread_ttl_are_the_callers(r, emb, ns):
    model = Recording(scripted("Hello Ada."))
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, memory="short_term", background=False,
                           system_prompt="You are Ada, a terse librarian.", thread_ttl=120)
    try:
        agent.chat("Hi!", "u1", "t1")
        assert model.prompts[0][0].role == "system"
        assert model.prompts[0][0].content.startswith("You are Ada, a terse librarian.")
        assert 0 < r.ttl(agent.history("u1", "t1").key) <= 120
    finally:
        agent.close()


# ---------------------------------------------------------------- many users: per-thread background writes
class BlocksMemoryTasks:
    """Replies at once; every background memory task of ``user_word`` waits until ``release`` is set."""

    def __init__(self, inner, user_word: str):
        self.inner, self.word, self.label = inner, user_word, "offline (blocking)"
        self.release, self.blocked = threading.Event(), threading.Event()

    def perform(self, task, inp, tools=None):
        if task.name != "reply" and self.word in inp.model_dump_json():
            self.blocked.set()
            assert self.release.wait(60), "the test never released the blocked task"
        return self.inner.perform(task, inp, tools=tools)

    def chat(self, messages, **kwargs):
        return self.inner.chat(messages, **kwargs)


def test_a_turn_waits_only_for_its_own_threads_writes(r, emb, llm, ns):
    """User A's background writes hang; user B (and A in another thread) still get replies, and A's next
    turn in the same thread sees A's earlier writes finished."""
    model = BlocksMemoryTasks(llm, "Zanzibar")
    a = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns)
    try:
        a.chat("I moved to Zanzibar last year.", user_id="a|b", thread_id="t1")
        assert model.blocked.wait(60)
        assert a.pending("a|b", "t1") == 1
        other = a.chat("I moved to Oslo.", user_id="system", thread_id="t1")  # returns while A's writes hang
        same_user = a.chat("Hello again", user_id="a|b", thread_id="t2")
        assert other.ok and same_user.ok and a.pending("a|b", "t1") == 1
        a.flush("system", "t1")
        assert other.timings_ms.get("extract") is not None  # B's background finished; A's still waits
        model.release.set()
        later = a.chat("Where do I live?", user_id="a|b", thread_id="t1")  # waited for t1's earlier writes
        assert a.pending("a|b", "t1") <= 1 and later.ok
        a.flush()
        assert a.pending() == 0
        assert [m.role for m in a.history("a|b", "t1").messages()] == ["user", "assistant"] * 2
        with pytest.raises(ValidationError, match="both"):
            a.flush("a|b")
    finally:
        model.release.set()
        a.close()


def test_a_turn_whose_jobs_wait_behind_other_users_runs_them_itself():
    """Every worker busy with other keys: waiting for one's own key runs its queued jobs in the caller's thread,
    in order, instead of waiting until another user's slow job lets a worker go."""
    from memorykit.agent.background import KeyedWriter

    writer, gate, ran = KeyedWriter(workers=1), threading.Event(), []
    meter = contextvars.ContextVar("meter", default="none")  # like track_usage(): the caller's, not the job's
    writer.submit("other user", lambda: gate.wait(60))
    for i in range(3):
        writer.submit("me", lambda i=i: ran.append((i, threading.current_thread().name, meter.get())))

    def turn():
        meter.set("the caller's")
        writer.wait("me")

    waiter = threading.Thread(target=turn, name="turn")
    waiter.start()
    waiter.join(30)
    try:
        assert not waiter.is_alive() and not gate.is_set()  # done while the other user's job still holds the worker
        assert ran == [(i, "turn", "none") for i in range(3)] and writer.pending("me") == 0
        assert writer.pending("other user") == 1
        after = writer.submit("me", lambda: "later")  # the key is free again: a worker runs it once one is free
    finally:
        gate.set()
    assert after.result(timeout=30) == "later"
    writer.shutdown()


def test_one_user_with_many_busy_threads_leaves_workers_for_other_users():
    """Keys grouped by user hold at most ``per_group`` workers: a user with four slow threads on four workers
    leaves three free, and their other threads run in turn, in order, once one of their workers is free."""
    from memorykit.agent.background import KeyedWriter

    writer, gate, done = KeyedWriter(workers=4, group=lambda k: k[0], per_group=1), threading.Event(), []
    for t in range(4):
        for i in range(3):
            writer.submit(("mallory", t), lambda t=t, i=i: (gate.wait(60), done.append(("mallory", t, i))))
    alice = writer.submit(("alice", 1), lambda: threading.current_thread().name)
    bob = [writer.submit(("bob", t), lambda t=t: done.append(("bob", t, 0))) for t in range(3)]
    try:
        assert alice.result(timeout=30).startswith("memorykit-writes")  # a pool worker, not the caller, ran it
        assert all(f.result(timeout=30) is None for f in bob) and [k for k, *_ in done] == ["bob"] * 3
        assert writer.pending(("mallory", 0)) + writer.pending(("mallory", 3)) == 6
    finally:
        gate.set()
    writer.shutdown()
    mallory = [(t, i) for k, t, i in done if k == "mallory"]
    assert sorted(mallory) == [(t, i) for t in range(4) for i in range(3)]
    assert all([i for u, i in mallory if u == t] == [0, 1, 2] for t in range(4))
    with pytest.raises(ValidationError):
        KeyedWriter(workers=2, per_group=0)


@pytest.mark.parametrize("per_group", [1, 2])
def test_grouped_writers_run_every_job_once_in_order_and_a_group_within_its_share(per_group):
    """12 keys of 4 users, 40 jobs each, turns waiting for their own key (running it themselves) at random:
    every job runs once, in order per key, and a user never has more than ``per_group`` keys running."""
    import random

    from memorykit.agent.background import KeyedWriter

    writer, lock, ran, live, most = KeyedWriter(workers=3, group=lambda k: k[0], per_group=per_group), \
        threading.Lock(), {}, {}, [0]

    def job(key, i):
        def run():
            with lock:
                live[key[0]] = live.get(key[0], 0) + 1
                most[0] = max(most[0], live[key[0]])
            time.sleep(random.random() * 0.002)
            with lock:
                ran.setdefault(key, []).append(i)
                live[key[0]] -= 1
        return run

    def turns(key):
        for i in range(40):
            writer.submit(key, job(key, i))
            if random.random() < 0.3:
                writer.wait(key)

    keys = [(u, t) for u in range(4) for t in range(3)]
    threads = [threading.Thread(target=turns, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    writer.shutdown()
    assert ran == {k: list(range(40)) for k in keys}
    assert most[0] <= per_group and writer.pending() == 0


def test_keyed_writer_keeps_order_per_key_and_runs_keys_side_by_side():
    from memorykit.agent.background import KeyedWriter

    writer, log, gate = KeyedWriter(workers=4), [], threading.Event()
    writer.submit("slow", lambda: gate.wait(60))
    for i in range(20):
        writer.submit("a", lambda i=i: log.append(("a", i)))
        writer.submit("b", lambda i=i: log.append(("b", i)))
    writer.wait("a"), writer.wait("b")
    assert writer.pending("slow") == 1  # still blocked, yet "a" and "b" finished beside it
    assert [i for k, i in log if k == "a"] == list(range(20)) and [i for k, i in log if k == "b"] == list(range(20))
    failing = writer.submit("a", lambda: 1 / 0)
    after = writer.submit("a", lambda: "next")
    gate.set()
    writer.shutdown()
    assert isinstance(failing.exception(), ZeroDivisionError) and after.result() == "next"
