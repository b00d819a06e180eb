"""The one place a backend is chosen: ``get_llm()`` reads ``MEMORYKIT_LLM`` and the OpenAI settings.

``offline`` is the only import of :mod:`memorykit.offline` outside that package, and it
happens lazily here, so the domain code never knows the offline backend exists.
"""
from __future__ import annotations

from ..config import settings
from ..errors import LLMError
from .task import ChatModel

KINDS = ("offline", "openai", "local")


def get_llm(kind: str | None = None) -> ChatModel:
    """``MEMORYKIT_LLM`` (offline | openai | local) if set; else OpenAI with a key or base URL; else offline."""
    cfg = settings()
    kind = (kind or cfg.llm or "").lower()
    if kind == "offline" or (not kind and not (cfg.openai_api_key or cfg.openai_base_url)):
        from ..offline import OfflineChat

        return OfflineChat()
    if kind in ("", "openai"):
        from .openai_chat import OpenAIChat

        return OpenAIChat()
    if kind == "local":
        from ..course.local_model import local_chat

        return local_chat()
    raise LLMError(f"MEMORYKIT_LLM must be one of {KINDS}, got {kind!r}")


def why_llm() -> str:
    """One sentence on which backend get_llm() picks and why (shown in notebook 00)."""
    cfg = settings()
    kind = (cfg.llm or "").lower()
    if kind == "offline":
        return "OfflineChat, because MEMORYKIT_LLM=offline"
    if kind == "local":
        from ..course.local_model import why_local

        return why_local()
    if kind == "openai" or cfg.openai_api_key or cfg.openai_base_url:
        return f"OpenAIChat ({cfg.llm_model}), because an OpenAI key or base URL is set"
    return ("OfflineChat (small learned models and rules, deterministic), because no OPENAI_API_KEY "
            "or OPENAI_BASE_URL is set")
