"""Settings from environment variables, read in one place (a notebook, a test and a Docker
Compose service configure the package the same way).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


PACKAGE_DATA = Path(__file__).resolve().parent.parent / "data"


def data_path(*parts: str) -> Path:
    """A file in the course's ``data/`` folder (shipped with the checkout; never moved by MEMORYKIT_HOME)."""
    return PACKAGE_DATA.joinpath(*parts)


def project_root() -> Path:
    """Where ``.memorykit/`` (the embedded server's data) lives: ``MEMORYKIT_HOME``, else the checkout."""
    explicit = _env("MEMORYKIT_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (start, *start.parents):
            if (parent / "pyproject.toml").exists() and (parent / "memorykit").is_dir():
                return parent
    return Path.home()


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = field(default_factory=lambda: _env("REDIS_URL"))
    data_dir: Path = field(default_factory=lambda: project_root() / ".memorykit")
    openai_api_key: str | None = field(default_factory=lambda: _env("OPENAI_API_KEY"))
    openai_base_url: str | None = field(default_factory=lambda: _env("OPENAI_BASE_URL"))
    llm: str | None = field(default_factory=lambda: _env("MEMORYKIT_LLM"))
    llm_model: str = field(default_factory=lambda: _env("MEMORYKIT_LLM_MODEL", "gpt-4o-mini"))
    llm_timeout: float = field(default_factory=lambda: float(_env("MEMORYKIT_LLM_TIMEOUT", "30")))
    llm_max_tokens: int = field(default_factory=lambda: int(_env("MEMORYKIT_LLM_MAX_TOKENS", "512")))
    llm_json_mode: str = field(default_factory=lambda: _env("MEMORYKIT_LLM_JSON_MODE", "json_schema"))
    local_model: str | None = field(default_factory=lambda: _env("MEMORYKIT_LOCAL_MODEL"))
    local_ctx: int = field(default_factory=lambda: int(_env("MEMORYKIT_LOCAL_CTX", "4096")))
    local_chat_format: str = field(
        default_factory=lambda: os.environ.get("MEMORYKIT_LOCAL_CHAT_FORMAT", "chatml-function-calling")
    )
    local_threads: int | None = field(
        default_factory=lambda: int(_env("MEMORYKIT_LOCAL_THREADS")) if _env("MEMORYKIT_LOCAL_THREADS") else None
    )
    embedder: str = field(default_factory=lambda: _env("MEMORYKIT_EMBEDDER", "local"))
    openai_embedding_model: str = field(
        default_factory=lambda: _env("MEMORYKIT_OPENAI_EMBEDDING_MODEL", "text-embedding-3-small")
    )
    distance_threshold: float = field(
        default_factory=lambda: float(_env("MEMORYKIT_DISTANCE_THRESHOLD", "0.69"))
    )
    redis_appendfsync: str = field(default_factory=lambda: _env("MEMORYKIT_REDIS_APPENDFSYNC", "everysec"))
    thread_ttl: int = field(default_factory=lambda: int(_env("MEMORYKIT_THREAD_TTL", "3600")))

    def max_tokens_for(self, task: str, default: int | None = None) -> int:
        """A task's output budget: ``MEMORYKIT_LLM_MAX_TOKENS_<TASK>``, else the task's own, else the global one."""
        override = _env(f"MEMORYKIT_LLM_MAX_TOKENS_{task.upper()}")
        return int(override) if override else int(default or self.llm_max_tokens)


def settings() -> Settings:
    """Fresh settings each call, so a notebook can change os.environ and see it."""
    return Settings()
