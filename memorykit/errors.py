"""Errors that say what went wrong and what to do next."""
import re

_SECRETS = [(re.compile(r"(?<=://)[^/\s?#\"',]*@"), "***@"),             # user:pass@, to the host's last @
            (re.compile(r"(?i)([?&;]key=|(?<![a-z0-9])(?:\w*[_-])?(?:api[_-]?key|token|secret|password)=)[^&\s]+"),
             r"\1***"),
            (re.compile(r"(?i)(\b(?:x-)?api-key:\s*)\S+"), r"\1***"),
            (re.compile(r'(?i)("(?:\w*[_-])?(?:api[_-]?key|token|secret|password)"\s*:\s*")[^"]*'), r"\1***"),
            (re.compile(r"\b(Bearer|Basic) +\S+"), r"\1 ***"), (re.compile(r"\bsk-[\w*-]{12,}"), "sk-***")]


def redact(text: str) -> str:
    """Text for a log or an error: credentials in URLs (``user:pass@``, ``?api_key=``), bearer tokens and API
    keys (``sk-...``) masked."""
    for pattern, mask in _SECRETS:
        text = pattern.sub(mask, text)
    return text


class MemoryKitError(Exception):
    """Base class for every error memorykit raises on purpose."""


class ServerError(MemoryKitError):
    """The embedded Redis could not be started, found or reached."""


class ModuleMissingError(ServerError):
    """Redis is reachable but lacks the search or JSON module."""


class ModelNotFoundError(MemoryKitError):
    """The embedding model package is not installed."""


class LLMError(MemoryKitError):
    """The chat model failed or returned something unusable. ``kind`` says which way, for a user to see
    ("timeout", "unreachable", "refused" for an HTTP 4xx, "server" for a 5xx, "filtered", "refusal", "unusable");
    ``status`` is the HTTP status when a server answered one."""

    def __init__(self, message: str = "", *, kind: str = "unusable", status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


class ConfigurationError(LLMError):
    """No backend was chosen (no key, no base URL, no MEMORYKIT_LLM): the message says how to choose one."""


class ValidationError(MemoryKitError, ValueError):
    """Input rejected before anything was written (empty text, bad id, oversize content)."""


class SchemaMismatchError(MemoryKitError):
    """An index exists in Redis with a different schema than the code expects."""
