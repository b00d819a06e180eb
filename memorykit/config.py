"""Settings from environment variables, read in one place (a notebook, a test and a Docker
Compose service configure the package the same way).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def _from_env(name: str, default: str | None = None, cast: Callable[[str], Any] = str) -> Any:
    """A settings field read from the variable ``name`` when the settings are made (unset or empty: ``default``)."""
    def read() -> Any:
        value = _env(name, default)
        return None if value is None else cast(value)
    return field(default_factory=read)


def data_path(*parts: str) -> Path:
    """A file in the course's ``data/`` folder (shipped with the checkout; never moved by MEMORYKIT_HOME)."""
    return Path(__file__).resolve().parent.parent.joinpath("data", *parts)


def project_root() -> Path:
    """Where ``.memorykit/`` (the embedded server's data) lives: ``MEMORYKIT_HOME``, else the checkout."""
    if home := _env("MEMORYKIT_HOME"):
        return Path(home).expanduser().resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (start, *start.parents):
            if (parent / "pyproject.toml").exists() and (parent / "memorykit").is_dir():
                return parent
    return Path.home()


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = _from_env("REDIS_URL")
    data_dir: Path = field(default_factory=lambda: project_root() / ".memorykit")
    openai_api_key: str | None = _from_env("OPENAI_API_KEY")
    openai_base_url: str | None = _from_env("OPENAI_BASE_URL")
    llm: str | None = _from_env("MEMORYKIT_LLM")
    llm_model: str = _from_env("MEMORYKIT_LLM_MODEL", "gpt-5-mini")
    llm_timeout: float = _from_env("MEMORYKIT_LLM_TIMEOUT", "30", float)
    llm_max_tokens: int = _from_env("MEMORYKIT_LLM_MAX_TOKENS", "512", int)
    llm_json_mode: str = _from_env("MEMORYKIT_LLM_JSON_MODE", "json_schema")
    llm_family: str | None = _from_env("MEMORYKIT_LLM_FAMILY")  # openai | compatible; else from the base URL
    llm_reasoning_effort: str = _from_env("MEMORYKIT_LLM_REASONING_EFFORT", "low")
    llm_reasoning_tokens: int = _from_env("MEMORYKIT_LLM_REASONING_TOKENS", "2048", int)
    llm_max_tokens_cap: int = _from_env("MEMORYKIT_LLM_MAX_TOKENS_CAP", "4096", int)
    local_model: str | None = _from_env("MEMORYKIT_LOCAL_MODEL")
    local_ctx: int = _from_env("MEMORYKIT_LOCAL_CTX", "4096", int)
    local_chat_format: str = _from_env("MEMORYKIT_LOCAL_CHAT_FORMAT", "chatml-function-calling")
    local_threads: int | None = _from_env("MEMORYKIT_LOCAL_THREADS", cast=int)
    embedder: str = _from_env("MEMORYKIT_EMBEDDER", "local")
    openai_embedding_model: str = _from_env("MEMORYKIT_OPENAI_EMBEDDING_MODEL", "text-embedding-3-small")
    distance_threshold: float = _from_env("MEMORYKIT_DISTANCE_THRESHOLD", "0.69", float)
    redis_appendfsync: str = _from_env("MEMORYKIT_REDIS_APPENDFSYNC", "everysec")
    redis_timeout: float = _from_env("MEMORYKIT_REDIS_TIMEOUT", "10", float)  # seconds per command / connect
    usage_log: str | None = _from_env("MEMORYKIT_USAGE_LOG")  # a JSON-lines file every model call is appended to

    def max_tokens_for(self, task: str, default: int | None = None) -> int:
        """A task's output budget: ``MEMORYKIT_LLM_MAX_TOKENS_<TASK>``, else the task's own, else the global one."""
        override = _env(f"MEMORYKIT_LLM_MAX_TOKENS_{task.upper()}")
        return int(override) if override else int(default or self.llm_max_tokens)


class Price(NamedTuple):
    """USD per million tokens: input, output, and input the server read from its prompt cache (OpenAI bills
    cached tokens, which ``prompt_tokens`` includes, at a lower rate; None: at the input rate)."""

    input: float
    output: float
    cached_input: float | None = None


# Standard tier, from OpenAI's pricing page (November 2026).
# Override or extend with MEMORYKIT_LLM_PRICES: JSON ``{"model": [input, output, cached input]}`` (the last is
# optional), inline or a file path.
PRICES: dict[str, Price] = {
    "gpt-5": Price(1.25, 10.00, 0.125), "gpt-5-mini": Price(0.25, 2.00, 0.025), "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-4.1": Price(2.00, 8.00, 0.50), "gpt-4.1-mini": Price(0.40, 1.60, 0.10), "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.00, 1.25), "gpt-4o-mini": Price(0.15, 0.60, 0.075), "o3": Price(2.00, 8.00, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
}


def prices() -> dict[str, Price]:
    """The price table: :data:`PRICES` updated by ``MEMORYKIT_LLM_PRICES`` (inline JSON or a JSON file)."""
    raw = _env("MEMORYKIT_LLM_PRICES")
    if not raw:
        return dict(PRICES)
    text = Path(raw).expanduser().read_text() if not raw.lstrip().startswith("{") else raw
    return {**PRICES, **{k: Price(*(float(x) for x in v[:3])) for k, v in json.loads(text).items()}}


def price_for(model: str) -> Price | None:
    """(input, output, cached input) USD per million tokens for ``model``: its entry, else its undated name's
    ("gpt-5-mini-2025-08-07" -> "gpt-5-mini"); None when the table does not know it."""
    table = prices()
    if model in table:
        return table[model]
    base = re.sub(r"-\d{4}-\d{2}-\d{2}$", "", model)
    return table.get(base)


def settings() -> Settings:
    """Fresh settings each call, so a notebook can change os.environ and see it."""
    return Settings()
