"""A fake OpenAI-compatible server whose PROFILES enforce each server family's documented request rules.

Each profile refuses what its real counterpart refuses, with that server's status and message, and
records every request with its verdict: OpenAI's reasoning models (gpt-5-mini: no ``max_tokens``, no
``temperature`` but the default, strict schemas checked), OpenAI's chat models (gpt-4o-mini), Ollama,
vLLM, LM Studio (no ``json_object``), a thinking model on Ollama (gpt-oss: its thought spends max_tokens
first) and llama-cpp-python 0.3.36 (knows ``max_tokens`` only, so a request with ``max_completion_tokens``
alone runs unbounded; refuses ``json_schema`` with a 500 validation error).
Answers are canned per task, valid for the requested schema; ``inject`` scripts a cut-off answer, a
refusal or a transient 500.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

UNSUPPORTED_STRICT = ("default", "minLength", "maxLength", "patternProperties", "propertyNames", "minProperties",
                      "maxProperties", "uniqueItems", "contains", "oneOf", "allOf", "not", "if", "then", "else",
                      "dependentRequired", "dependentSchemas", "discriminator")
MAX_DEPTH, MAX_PROPERTIES, MAX_ENUM = 10, 5000, 1000   # OpenAI's documented limits for a strict schema


@dataclass(frozen=True)
class Profile:
    name: str
    model: str
    family: str                       # the MEMORYKIT_LLM_FAMILY a user would set ("openai" / "compatible")
    token_params: tuple[str, ...]     # output bounds the server knows; others are ignored (or refused)
    refused_params: tuple[str, ...] = ()
    default_temperature_only: bool = False
    formats: tuple[str, ...] = ("json_schema", "json_object")
    strict: bool = False              # validates strict schemas (OpenAI); others ignore "strict"
    json_schema_status: int = 400     # how it refuses json_schema when it does
    json_object_schema: bool = True   # takes {"type": "json_object", "schema": ...} (llama.cpp's form)
    stream_usage: str = "include_usage"   # "include_usage": only when asked; "never"
    reasoning: bool = False           # reports reasoning tokens, accepts reasoning_effort
    reasoning_tokens: int = 96        # what it spends thinking, out of max_completion_tokens (empty answer, "length",
    #                                   when the budget ends in the thought)
    prompt_cache: bool = False        # reports prompt_tokens_details.cached_tokens (OpenAI: a prefix of 1,024+
    #                                   tokens seen before, in steps of 128)
    reasoning_effort_refused: bool = False
    thinks: int = 0                   # tokens of thought a model behind a compatible server spends first, within
    #                                   max_tokens, returned as the message's "reasoning" (Ollama; vLLM names it
    #                                   "reasoning_content"); a budget that ends in the thought leaves no content


PROFILES = {p.name: p for p in [
    Profile("openai-reasoning", "gpt-5-mini", "openai", ("max_completion_tokens",), ("max_tokens",),
            default_temperature_only=True, strict=True, json_object_schema=False, reasoning=True, prompt_cache=True),
    Profile("openai-chat", "gpt-4o-mini", "openai", ("max_completion_tokens", "max_tokens"), strict=True,
            json_object_schema=False, reasoning_effort_refused=True, prompt_cache=True),
    Profile("ollama", "llama3.2", "compatible", ("max_tokens",)),
    Profile("vllm", "Qwen/Qwen2.5-1.5B-Instruct", "compatible", ("max_tokens", "max_completion_tokens")),
    Profile("lm-studio", "qwen2.5-7b-instruct", "compatible", ("max_tokens",), formats=("json_schema",)),
    Profile("llama.cpp", "local", "compatible", ("max_tokens",), formats=("json_object",), json_schema_status=500,
            stream_usage="never"),
    Profile("ollama-thinking", "gpt-oss:20b", "compatible", ("max_tokens",), thinks=400),
]}


def strict_problems(schema: Any, root: dict | None = None, path: str = "$") -> list[str]:
    """Why ``schema`` is not a valid strict schema (OpenAI's documented rules), or []."""
    if not isinstance(schema, dict):
        return [f"{path}: not an object"]
    out = [f"{path}: '{k}' is not permitted" for k in UNSUPPORTED_STRICT if k in schema]
    if root is None:
        root = schema
        if schema.get("type") != "object" or "anyOf" in schema:
            out.append("$: the root must be an object, not 'anyOf'")
        out += sizes(schema)
        if (levels := nesting(schema, schema)) > MAX_DEPTH:
            out.append(f"$: {levels} levels of nesting exceeds limit of {MAX_DEPTH}")
    variants = [resolve(v, root) for v in schema.get("anyOf", []) if isinstance(v, dict)]
    firsts = [json.dumps(next(iter(v["properties"].items())), sort_keys=True) for v in variants if v.get("properties")]
    if len(firsts) != len(set(firsts)):
        out.append(f"{path}: objects provided via 'anyOf' must not share identical first keys")
    ref = schema.get("$ref")
    if ref is not None:
        node: Any = root
        for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else [None]:
            node = node.get(part) if isinstance(node, dict) and part else None
        if node is None:
            out.append(f"{path}: reference {ref} cannot be resolved")
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            out.append(f"{path}: 'additionalProperties' is required to be supplied and to be false")
        missing = sorted(set(props) - set(schema.get("required", [])))
        if missing:
            out.append(f"{path}: 'required' must include every property; missing {missing}")
        for key, sub in props.items():
            out += strict_problems(sub, root, f"{path}.{key}")
    for key in ("anyOf",):
        for i, sub in enumerate(schema.get(key, [])):
            out += strict_problems(sub, root, f"{path}.{key}[{i}]")
    if isinstance(schema.get("items"), dict):
        out += strict_problems(schema["items"], root, f"{path}[]")
    for key, sub in (schema.get("$defs") or {}).items():
        out += strict_problems(sub, root, f"{path}.$defs.{key}")
    return out


def nesting(node: Any, root: dict, seen: tuple = ()) -> int:
    """Levels of properties and items below ``node``, references followed (a recursive one once)."""
    if not isinstance(node, dict):
        return 0
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        return nesting(resolve(node, root), root, (*seen, ref))
    inner = [*(node.get("properties") or {}).values(), *([node["items"]] if isinstance(node.get("items"), dict) else [])]
    return max([1 + nesting(v, root, seen) for v in inner] + [nesting(v, root, seen) for v in node.get("anyOf", [])]
               + [0])


def resolve(node: dict, root: dict) -> dict:
    """``node``, or what its ``#/...`` reference points to ({} when nothing)."""
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    for part in ref[2:].split("/"):
        root = root.get(part, {}) if isinstance(root, dict) else {}
    return root if isinstance(root, dict) else {}


def sizes(schema: dict) -> list[str]:
    """The whole schema's property and enum counts against OpenAI's limits."""
    props = sum(len(n.get("properties") or {}) for n in nodes(schema))
    enums = sum(len(n.get("enum") or []) for n in nodes(schema))
    return ([f"$: {props} object properties exceeds limit of {MAX_PROPERTIES}"] if props > MAX_PROPERTIES else []) + (
        [f"$: {enums} enum values exceeds limit of {MAX_ENUM}"] if enums > MAX_ENUM else [])


def nodes(schema: Any) -> list[dict]:
    """Every dict in ``schema``, itself included."""
    if isinstance(schema, dict):
        return [schema, *(n for v in schema.values() for n in nodes(v))]
    return [n for v in schema for n in nodes(v)] if isinstance(schema, list) else []


ARGUMENTS = {"query": "where does the user live", "content": "User is allergic to peanuts",
             "update_working_memory.content": "# Profile\n- Name: Lena\n- Timezone: CET\n# Goals\n- learn German\n"
                                              "# Preferences\n- no peanuts\n"}


def example(schema: dict, root: dict, name: str = "") -> Any:
    """An argument value for ``schema``, from its types (every property filled, so a call does something)."""
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return example(node, root, name)
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return example(next(s for s in schema["anyOf"] if s.get("type") != "null"), root, name)
    kind = schema.get("type")
    kind = next(k for k in kind if k != "null") if isinstance(kind, list) else kind
    if kind == "object":
        tool = name.split(".")[0]
        return {k: example(v, root, f"{tool}.{k}") for k, v in schema.get("properties", {}).items()}
    text = ARGUMENTS.get(name) or ARGUMENTS.get(name.split(".")[-1], "Berlin")
    return {"string": text, "integer": schema.get("minimum", 3), "number": 1.0, "boolean": False,
            "array": []}.get(kind)


@dataclass
class Logged:
    body: dict
    status: int
    param: str | None = None
    unbounded: bool = False
    task: str | None = None
    usage: dict | None = None


@dataclass
class FakeServer:
    profile: Profile
    answers: dict[str, Any]           # task name -> canned JSON answer
    prompts: dict[str, str]           # first words of a task's system prompt -> task name
    log: list[Logged] = field(default_factory=list)
    inject: list[str] = field(default_factory=list)   # "length", "refusal", "transient500", "broken_stream",
    #                                                   "content_filter", "429 <retry-after header>: <value>"

    def __post_init__(self):
        fake, self._lock = self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload, stream = fake.handle(body)
                if stream is not None:
                    return self.send_stream(stream)
                headers = payload.pop("_headers", {})
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def send_stream(self, chunks):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ rules
    def refusal(self, body: dict) -> tuple[int, str, str] | None:
        """(status, message, parameter) when the profile refuses ``body``, else None."""
        p = self.profile
        for name in p.refused_params:
            if name in body:
                return 400, (f"Unsupported parameter: '{name}' is not supported with this model. "
                             "Use 'max_completion_tokens' instead."), name
        if p.default_temperature_only and body.get("temperature", 1) != 1:
            return 400, (f"Unsupported value: 'temperature' does not support {body['temperature']} with this "
                         "model. Only the default (1) value is supported."), "temperature"
        if "reasoning_effort" in body and (p.reasoning_effort_refused or
                                           body["reasoning_effort"] not in ("minimal", "low", "medium", "high")):
            return 400, "Unrecognized request argument supplied: reasoning_effort", "reasoning_effort"
        if "tool_choice" in body and not body.get("tools"):
            return 400, "'tool_choice' is only allowed when 'tools' are specified.", "tool_choice"
        for tool in body.get("tools") or []:
            fn = tool.get("function", {})
            params = fn.get("parameters", {})
            problems = strict_problems(params) if fn.get("strict") and p.strict else (
                [] if params.get("type") == "object" else ["parameters must be an object schema"])
            if problems:
                return 400, f"Invalid schema for function '{fn.get('name')}': {problems[0]}", "tools"
        return self.format_refusal(body.get("response_format"), body)

    def format_refusal(self, fmt: dict | None, body: dict) -> tuple[int, str, str] | None:
        p = self.profile
        if not fmt:
            return None
        kind = fmt.get("type")
        if kind == "json_schema" and "json_schema" not in p.formats:
            return p.json_schema_status, ("1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
                                          "  Input should be 'text' or 'json_object' [type=literal_error, "
                                          "input_value='json_schema']"), "response_format"
        if kind == "json_object" and "json_object" not in p.formats:
            return 400, "'response_format.type' must be 'json_schema' or 'text'", "response_format"
        if kind == "json_object" and "schema" in fmt and not p.json_object_schema:
            return 400, "Additional properties are not allowed ('schema' was unexpected) - 'response_format'", \
                "response_format"
        if kind == "json_object" and p.strict and "json" not in json.dumps(body["messages"]).lower():
            return 400, ("'messages' must contain the word 'json' in some form, to use 'response_format' of "
                         "type 'json_object'."), "response_format"
        spec = fmt.get("json_schema") or {}
        if kind == "json_schema" and p.strict and spec.get("strict"):
            problems = strict_problems(spec.get("schema"))
            if problems:
                return 400, f"Invalid schema for response_format '{spec.get('name')}': {problems[0]}", \
                    "response_format"
        return None

    def bounded(self, body: dict) -> bool:
        return any(isinstance(body.get(k), int) and 0 < body[k] <= 16384 for k in self.profile.token_params)

    # ------------------------------------------------------------------ answers
    def task_of(self, body: dict) -> str | None:
        spec = (body.get("response_format") or {}).get("json_schema") or {}
        if spec.get("name") in self.answers:
            return spec["name"]
        system = next((m.get("content") or "" for m in body["messages"] if m["role"] == "system"), "")
        return next((name for start, name in self.prompts.items() if system.startswith(start)), None)

    def answer(self, body: dict, task: str | None) -> tuple[dict, str]:
        """The assistant message and finish reason for an accepted request."""
        if body.get("response_format") and task in self.answers:
            return {"role": "assistant", "content": json.dumps(self.answers[task])}, "stop"
        tools, messages = body.get("tools") or [], body["messages"]
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=0)
        if tools and not any(m["role"] == "tool" for m in messages[last:]):  # one tool call per user message
            said = messages[last].get("content") or ""
            fn = next((t["function"] for t in tools if t["function"]["name"] in said), tools[0]["function"])
            args = example(fn.get("parameters", {}), fn.get("parameters", {}), fn["name"])
            call = {"id": f"call_{len(self.log)}", "type": "function",
                    "function": {"name": fn["name"], "arguments": json.dumps(args)}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        return {"role": "assistant", "content": "You live in Berlin, as you told me."}, "stop"

    def handle(self, body: dict) -> tuple[int, dict, list | None]:
        with self._lock:
            injected = self.inject.pop(0) if self.inject else None
            refused = self.refusal(body)
            if refused is None and injected == "transient500":
                refused = 500, "The server had an error while compiling the json_schema grammar; retry.", None
            if refused is None and injected and injected.startswith("429"):
                refused = 429, "Rate limit reached for requests. Please try again later.", None
            task = self.task_of(body)
            entry = Logged(body, 200 if refused is None else refused[0], refused and refused[2],
                           refused is None and not self.bounded(body), task)
            self.log.append(entry)
        if refused is not None:
            error = {"error": {"message": refused[1], "type": "invalid_request_error", "param": refused[2],
                               "code": None}}
            if refused[0] == 429:  # "429 retry-after: 20" sends that header
                name, _, value = injected.removeprefix("429").partition(":")
                error["_headers"] = {name.strip(): value.strip()} if value else {}
            return refused[0], error, None
        message, finish = self.answer(body, task)
        if self.profile.thinks:
            message, finish = self.think(body, message, finish)
        spent = self.profile.reasoning_tokens if self.profile.reasoning else 0
        budget = body.get("max_completion_tokens") or body.get("max_tokens") or 16384
        if spent and budget < spent + len(json.dumps(message)) // 4:  # the budget ended in the thought
            message, finish, spent = {"role": "assistant", "content": ""}, "length", budget
        if injected == "content_filter":
            message, finish = {"role": "assistant", "content": (message.get("content") or "")[:12]}, "content_filter"
        if injected == "length":
            message, finish = {"role": "assistant", "content": (message.get("content") or "")[:5]}, "length"
        if injected == "refusal":
            message, finish = {"role": "assistant", "content": None, "refusal": "I can't help with that."}, "stop"
        entry.usage = self.usage(body, message, spent)
        if body.get("stream") and injected == "broken_stream":  # llama-cpp-python on some prompts: the role, then nothing
            entry.usage = None
            return 200, {}, [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
        if body.get("stream"):
            return 200, {}, self.chunks(body, message, finish, entry.usage)
        return 200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                     "usage": entry.usage}, None

    def think(self, body: dict, message: dict, finish: str) -> tuple[dict, str]:
        """A thinking model: its thought comes first, out of the same max_tokens; cut inside it, no answer."""
        budget, thought = body.get("max_tokens") or 16384, "Let me think about what is asked here. " * 50
        answer = len(json.dumps(message)) // 4
        if budget < self.profile.thinks + answer:
            return {"role": "assistant", "content": "", "reasoning": thought[:budget * 4]}, "length"
        return {**message, "reasoning": thought}, finish

    def usage(self, body: dict, message: dict, reasoning: int = 0) -> dict:
        if message.get("reasoning"):  # counted in completion_tokens, not reported apart (as Ollama does)
            completion = len(json.dumps(message)) // 4
            prompt = len(json.dumps(body["messages"])) // 4
            return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        completion = len(json.dumps(message)) // 4 + reasoning
        prompt = len(json.dumps(body["messages"])) // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if self.profile.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        if self.profile.prompt_cache:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached(body, prompt)}
        return usage

    def cached(self, body: dict, prompt: int) -> int:
        """Tokens of this prompt's prefix an earlier request sent (OpenAI caches 1,024+ in steps of 128)."""
        text = json.dumps(body["messages"])
        shared = max((len(os.path.commonprefix([text, json.dumps(e.body["messages"])]))
                      for e in self.log[:-1] if e.status == 200), default=0) // 4
        return min(shared, prompt) // 128 * 128 if shared >= 1024 else 0

    def chunks(self, body: dict, message: dict, finish: str, usage: dict) -> list[dict]:
        base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": message.get("content"),
                                                            "refusal": message.get("refusal")},
                                     "finish_reason": finish}]}]
        asked = (body.get("stream_options") or {}).get("include_usage")
        if asked and self.profile.stream_usage == "include_usage":
            out.append({**base, "choices": [], "usage": usage})
        else:
            self.log[-1].usage = None  # the client never learns these numbers
        return out

    # ------------------------------------------------------------------ summaries
    def rejected(self) -> list[Logged]:
        return [e for e in self.log if e.status != 200]

    def reported_usage(self) -> tuple[int, int]:
        seen = [e.usage for e in self.log if e.usage]
        return sum(u["prompt_tokens"] for u in seen), sum(u["completion_tokens"] for u in seen)
