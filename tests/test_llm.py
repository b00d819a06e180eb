"""LLM backends: OpenAIChat against a local fake OpenAI-compatible server; OfflineChat basics."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, strategies as st

import memorykit as mk
from memorykit.errors import LLMError
from memorykit.llm import offline_name, parse_json


class FakeOpenAI:
    """A tiny OpenAI-compatible /v1/chat/completions server on loopback with scripted statuses."""

    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[int] = []
        self.reply: dict = {"role": "assistant", "content": "hello from fake"}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
                status = fake.statuses.pop(0) if fake.statuses else 200
                if status != 200:
                    payload = {"error": {"message": f"scripted {status}", "type": "server_error"}}
                else:
                    payload = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                               "model": body["model"],
                               "choices": [{"index": 0, "message": fake.reply, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.close()


def test_request_shape(fake):
    llm = mk.OpenAIChat("test-model", api_key="sk-test", base_url=fake.url)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    reply = llm.chat([mk.Message(role="user", content="hi")], tools=tools,
                     response_format={"type": "json_object"})
    assert reply.role == "assistant" and reply.content == "hello from fake"
    req = fake.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "test-model"
    assert req["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert req["body"]["tools"] == tools and req["body"]["response_format"] == {"type": "json_object"}


def test_json_mode_reply_is_parsed(fake):
    fake.reply = {"role": "assistant", "content": '```json\n[{"type": "episodic", "content": "x"}]\n```'}
    llm = mk.OpenAIChat("m", api_key="k", base_url=fake.url)
    assert parse_json(llm.chat([{"role": "user", "content": "x"}]).content) == [{"type": "episodic", "content": "x"}]


def test_tool_calls_round_trip(fake):
    call = {"id": "c1", "type": "function", "function": {"name": "search_memory", "arguments": "{}"}}
    fake.reply = {"role": "assistant", "content": None, "tool_calls": [call]}
    reply = mk.OpenAIChat("m", api_key="k", base_url=fake.url).chat([{"role": "user", "content": "x"}])
    assert reply.tool_calls[0]["function"]["name"] == "search_memory" and reply.content == ""


def test_429_is_retried(fake):
    fake.statuses = [429]
    llm = mk.OpenAIChat("m", api_key="k", base_url=fake.url, max_retries=2)
    assert llm.chat([{"role": "user", "content": "x"}]).content == "hello from fake"
    assert len(fake.requests) == 2


def test_500_becomes_a_clear_error(fake):
    fake.statuses = [500, 500, 500]
    llm = mk.OpenAIChat("m", api_key="k", base_url=fake.url, max_retries=1)
    with pytest.raises(LLMError, match="HTTP 500"):
        llm.chat([{"role": "user", "content": "x"}])


def test_unreachable_server_is_an_llm_error():
    llm = mk.OpenAIChat("m", api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    with pytest.raises(LLMError):
        llm.chat([{"role": "user", "content": "x"}])


def test_get_llm_selection(monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORYKIT_LLM"):
        monkeypatch.delenv(var, raising=False)
    assert isinstance(mk.get_llm(), mk.OfflineChat)
    assert "no OPENAI_API_KEY" in mk.why_llm()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    llm = mk.get_llm()
    assert isinstance(llm, mk.OpenAIChat) and "11434" in llm.label
    monkeypatch.setenv("MEMORYKIT_LLM", "offline")
    assert isinstance(mk.get_llm(), mk.OfflineChat)
    monkeypatch.setenv("MEMORYKIT_LLM", "gpt9")
    with pytest.raises(LLMError, match="MEMORYKIT_LLM"):
        mk.get_llm()


def test_openai_without_key_fails_clearly(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        mk.OpenAIChat()


def test_offline_is_labelled_and_deterministic(llm):
    msgs = [mk.Message(role="user", content="Hi, my name's Raphael.")]
    a, b = llm.chat(msgs), llm.chat(msgs)
    assert a.name == "offline" and a.content.startswith("(offline)") and a.content == b.content


def test_offline_stateless_forgets_and_history_remembers(llm):
    ask = mk.Message(role="user", content="What is my name?")
    assert "don't know" in llm.chat([ask]).content
    intro = mk.Message(role="user", content="Hi, I'm Raphael and I love hiking.")
    reply = llm.chat([intro, mk.Message(role="assistant", content="Hello!"), ask]).content
    assert "Raphael" in reply


def test_offline_answers_from_memory_lines(llm):
    system = mk.Message(role="system", content="Known facts:\n- [EPISODIC] User is allergic to peanuts.")
    reply = llm.chat([system, mk.Message(role="user", content="What am I allergic to?")]).content
    assert "peanuts" in reply


def test_offline_unknown_task_is_an_error(llm):
    with pytest.raises(LLMError, match="no skill"):
        llm.chat([mk.Message(role="system", content="[task: no_such_task]"), mk.Message(role="user", content="x")])


@pytest.mark.parametrize("text,expected", [
    ('[{"a": 1}]', [{"a": 1}]),
    ('Sure! Here you go:\n```json\n{"a": 1}\n```\nAnything else?', {"a": 1}),
    ('```\n[1, 2]\n```', [1, 2]),
    ('The answer is {"x": [1, {"y": 2}]} as requested.', {"x": [1, {"y": 2}]}),
    ('noise [not json] then [3]', [3]),
])
def test_parse_json_tolerates_real_model_output(text, expected):
    assert parse_json(text) == expected


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


@pytest.mark.parametrize("text,name", [
    ("Hi, my name's Raphael.", "Raphael"), ("Call me Sam please", "Sam"), ("I'm Lena, from Oslo", "Lena"),
    ("I'm going to Paris", None), ("I'm allergic to nuts", None), ("my name is Zoë", "Zoë"),
])
def test_offline_name(text, name):
    assert offline_name(text) == name
