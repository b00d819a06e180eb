"""The one place a backend is chosen: ``get_llm()`` reads ``MEMORYKIT_LLM`` and the OpenAI settings.

Without any of them it raises :class:`ConfigurationError` (a library user gets a clear error, not a
stand-in); an entry point that wants the offline stand-in then says so: ``get_llm(default="offline")``.
``offline`` is the only import of :mod:`memorykit.offline` outside that package, and it happens lazily
here, so the domain code never knows the offline backend exists.
"""
from __future__ import annotations

from ..config import settings
from ..errors import ConfigurationError, LLMError
from .task import ChatModel

KINDS = ("offline", "openai", "local")
HOW_TO_CHOOSE = ("choose a model: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (Ollama, vLLM, LM Studio, "
                 "llama.cpp), or MEMORYKIT_LLM=local (a local llama.cpp server, `make setup-llm`), or ask for the "
                 "deterministic stand-in explicitly: get_llm('offline') / MEMORYKIT_LLM=offline")


def chosen_kind(default: str | None = None) -> tuple[str | None, str]:
    """(backend kind, why) from the settings; the kind is None when nothing is configured and no default."""
    cfg = settings()
    kind = (cfg.llm or "").lower()
    if kind:
        return kind, f"MEMORYKIT_LLM={kind}"
    if cfg.openai_api_key or cfg.openai_base_url:
        return "openai", "OPENAI_BASE_URL is set" if cfg.openai_base_url else "OPENAI_API_KEY is set"
    if default:
        return default.lower(), "no OPENAI_API_KEY, OPENAI_BASE_URL or MEMORYKIT_LLM is set"
    return None, "nothing is configured"


def get_llm(kind: str | None = None, *, default: str | None = None) -> ChatModel:
    """``kind`` (offline | openai | local), else ``MEMORYKIT_LLM``, else OpenAI with a key or base URL, else
    ``default``; with none of them a :class:`ConfigurationError` that says how to choose."""
    if not kind:
        kind, _ = chosen_kind(default)
    if kind is None:
        raise ConfigurationError(f"No language model is configured: {HOW_TO_CHOOSE}.")
    kind = kind.lower()
    if kind == "offline":
        from ..offline import OfflineChat

        return OfflineChat()
    if kind == "openai":
        from .openai_chat import OpenAIChat

        return OpenAIChat()
    if kind == "local":
        from ..course.local_model import local_chat

        return local_chat()
    raise LLMError(f"MEMORYKIT_LLM must be one of {KINDS}, got {kind!r}")


def why_llm(default: str | None = None) -> str:
    """One sentence on which backend ``get_llm(default=default)`` picks and why (shown in notebook 00)."""
    kind, why = chosen_kind(default)
    if kind == "offline":
        return f"OfflineChat (small learned models and rules, deterministic), because {why}"
    if kind == "local":
        from ..course.local_model import why_local

        return why_local()
    if kind == "openai":
        from .openai_chat import family_of, is_reasoning

        cfg = settings()
        family = family_of(cfg.openai_base_url)
        kind_of = "a reasoning model, " if family == "openai" and is_reasoning(cfg.llm_model) else ""
        return f"OpenAIChat ({cfg.llm_model}; {kind_of}{family} request shapes), because {why}"
    if kind is None:
        return f"none: get_llm() raises ConfigurationError; {HOW_TO_CHOOSE}"
    return f"nothing valid: MEMORYKIT_LLM={kind!r} is not one of {KINDS}"
