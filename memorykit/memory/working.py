"""Working memory: a small scratchpad the agent keeps in its prompt on every turn and edits itself.

Formats: **template** (Markdown sections), **schema** (a pydantic model or JSON schema; partial
updates are validated and merged) or **text**; one per thread or one per user. Every write is a
validated, size-limited optimistic transaction that pushes the old version onto a capped
history, so a bad edit can be undone and concurrent edits are never lost.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

import redis

from ..errors import SchemaMismatchError, ValidationError
from ..keys import check_id, check_namespace, user_key
from ..messages import Message, count_tokens
from . import working_tools
from .working_tools import Observation

SCOPES = ("conversation", "user")
DEFAULT_MAX_CHARS = 2000
DEFAULT_HISTORY = 10

PROFILE_TEMPLATE = """# Profile
- Name:
- Timezone:
# Goals
-
# Preferences
-
"""


@dataclass
class Version:
    """One past version of a working memory (newest first in :meth:`WorkingMemory.history`)."""

    content: Any
    saved_at: float
    replaced_by: str  # the write that replaced this version: update, tool, observe, clear

    def __repr__(self) -> str:
        text = self.content if isinstance(self.content, str) else json.dumps(self.content)
        return f"Version(replaced by {self.replaced_by}, {text[:60]!r})"


def _json_schema(schema: Any) -> dict[str, Any]:
    if isinstance(schema, dict):
        return schema
    if hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    raise ValidationError("schema must be a pydantic model class or a JSON-schema dict")


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` and unwrap ``anyOf: [X, null]`` (what pydantic emits for Optional fields)."""
    for _ in range(10):
        if "$ref" in node:
            path = node["$ref"].lstrip("#/").split("/")
            target: Any = root
            for part in path:
                target = target[part]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        elif "anyOf" in node and "type" not in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) != 1:
                return node
            node = {**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        else:
            return node
    return node


def _partial_schema(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The schema with ``required`` dropped at every level: what a partial update may contain."""
    node = _resolve(copy.deepcopy(node), root)
    node.pop("required", None)
    node.pop("$defs", None)
    node.pop("title", None)
    if "properties" in node:
        node["properties"] = {k: _partial_schema(v, root) for k, v in node["properties"].items()}
    return node


def _merge(current: Any, update: Any) -> Any:
    """Deep-merge dicts (lists and scalars are replaced): partial updates keep what they don't mention."""
    if isinstance(current, dict) and isinstance(update, dict):
        out = dict(current)
        for k, v in update.items():
            out[k] = _merge(current.get(k), v)
        return out
    return update


def _error_path(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc) or "(root)"


def _headings(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if line.lstrip().startswith("#")]


class WorkingMemory:
    """A bounded, validated scratchpad per conversation (or per user), with edit history and undo."""

    def __init__(self, redis_client: redis.Redis, namespace: str = "memorykit", *,
                 template: str | None = None, schema: Any = None, scope: str = "conversation",
                 max_chars: int | None = DEFAULT_MAX_CHARS, max_tokens: int | None = None,
                 history: int = DEFAULT_HISTORY, ttl: int | None = None):
        if template is not None and schema is not None:
            raise ValidationError("give either a template or a schema, not both")
        if scope not in SCOPES:
            raise ValidationError(f"scope must be one of {SCOPES}, got {scope!r}")
        if template is not None and (not isinstance(template, str) or not template.strip()):
            raise ValidationError("a template must be non-empty Markdown text")
        if history < 0 or (max_chars is not None and max_chars <= 0) or (max_tokens is not None and max_tokens <= 0):
            raise ValidationError("history must be >= 0 and size limits > 0 (or None)")
        if ttl is not None and ttl <= 0:
            raise ValidationError("ttl must be a positive number of seconds (or None)")
        self.redis = redis_client
        self.namespace = check_namespace(namespace)
        self.template = template
        self.schema = schema
        self.scope = scope
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.history_size = history
        self.ttl = ttl
        self.format = "schema" if schema is not None else "template" if template is not None else "text"
        self._model = schema if hasattr(schema, "model_validate") else None
        self._json_schema = _json_schema(schema) if schema is not None else None
        self._validator = None
        if self._json_schema is not None and self._model is None:
            import jsonschema

            jsonschema.Draft202012Validator.check_schema(self._json_schema)
            self._validator = jsonschema.Draft202012Validator(self._json_schema)

    def __repr__(self) -> str:
        limit = f"{self.max_chars} chars" if self.max_chars else f"{self.max_tokens} tokens"
        return f"WorkingMemory({self.format}, scope={self.scope}, limit={limit}, history={self.history_size})"

    def key(self, user_id: str, thread_id: str | None = None) -> str:
        """``ns:working:user:{user}`` or ``ns:working:conversation:{user}:thread`` (user as a cluster hash tag)."""
        check_id(user_id, "user_id")
        if self.scope == "user":
            return user_key(self.namespace, "working:user", user_id)
        if thread_id is None:
            raise ValidationError("conversation-scoped working memory needs a thread_id")
        check_id(thread_id, "thread_id")
        return user_key(self.namespace, "working:conversation", user_id, thread_id)

    def history_key(self, user_id: str, thread_id: str | None = None) -> str:
        return self.key(user_id, thread_id) + ":history"

    def _decode(self, raw: str | None) -> Any:
        if raw is None:
            return None
        if self.format != "schema":
            return raw
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise SchemaMismatchError(
                "the stored working memory is not JSON: another WorkingMemory with a template or free-form "
                "format uses the same scope and namespace. Give each format its own namespace or scope.") from None

    def _encode(self, content: Any) -> str:
        if self.format == "schema":
            return json.dumps(content, ensure_ascii=False, sort_keys=False)
        return content

    def empty(self) -> Any:
        """What a fresh scratchpad looks like: the template, ``{}`` or ``""``."""
        return {"template": self.template, "schema": {}, "text": ""}[self.format]

    def _coerce(self, content: Any) -> Any:
        """Accept what a caller or a model may pass: text, a dict, a JSON string, a pydantic object."""
        if self.format != "schema":
            if not isinstance(content, str):
                raise ValidationError(f"{self.format} working memory takes text, got {type(content).__name__}")
            return content.replace("\r\n", "\n").strip() + "\n" if content.strip() else ""
        if hasattr(content, "model_dump"):
            return content.model_dump(mode="json", exclude_unset=True)
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except json.JSONDecodeError as exc:
                raise ValidationError(
                    f"working memory update is not valid JSON ({exc.msg} at position {exc.pos}); "
                    "send a JSON object with the fields to change") from exc
        if not isinstance(content, dict):
            raise ValidationError(f"a schema working memory takes a JSON object, got {type(content).__name__}")
        return content

    def validate(self, content: Any) -> Any:
        """Return the content in its stored form, or raise ValidationError naming the field and the fix."""
        if self.format == "schema":
            if self._model is not None:
                from pydantic import ValidationError as PydanticError

                try:
                    return self._model.model_validate(content).model_dump(mode="json")
                except PydanticError as exc:
                    problems = "; ".join(f"field '{_error_path(e['loc'])}': {e['msg']}" for e in exc.errors())
                    raise ValidationError(f"working memory rejected: {problems}") from None
            errors = sorted(self._validator.iter_errors(content), key=lambda e: list(e.absolute_path))
            if errors:
                problems = "; ".join(f"field '{_error_path(e.absolute_path)}': {e.message}" for e in errors)
                raise ValidationError(f"working memory rejected: {problems}")
            return content
        if self.format == "template" and content:
            missing = [h for h in _headings(self.template) if h not in _headings(content)]
            if missing:
                raise ValidationError(
                    f"working memory rejected: it must keep the template's sections; missing {missing}. "
                    "Rewrite it with every section of the template.")
        return content

    def size(self, content: Any) -> int:
        """Characters (or tokens, when the limit is in tokens) the stored content takes."""
        text = self._encode(content) if content is not None else ""
        return count_tokens(text) if self.max_tokens else len(text)

    def check_size(self, content: Any) -> None:
        limit, unit = (self.max_tokens, "tokens") if self.max_tokens else (self.max_chars, "characters")
        if limit is None:
            return
        used = self.size(content)
        if used > limit:
            raise ValidationError(
                f"working memory is limited to {limit} {unit} and this update makes it {used}: condense it "
                "(merge duplicate points, drop stale or minor details, shorten wording) and write it again")

    def get(self, user_id: str, thread_id: str | None = None) -> Any:
        """The current content (Markdown/text, or a dict in schema mode); None when nothing is stored."""
        return self._decode(self.redis.get(self.key(user_id, thread_id)))

    def current(self, user_id: str, thread_id: str | None = None) -> Any:
        """The current content, or the empty template / ``{}`` / ``""`` when nothing is stored."""
        got = self.get(user_id, thread_id)
        return self.empty() if got is None else got

    def history(self, user_id: str, thread_id: str | None = None) -> list[Version]:
        """Past versions, newest first (at most ``history`` of them)."""
        raw = self.redis.lrange(self.history_key(user_id, thread_id), 0, -1)
        out = []
        for item in raw:
            data = json.loads(item)
            out.append(Version(self._decode(data["content"]) if data["content"] is not None else None,
                               data["saved_at"], data["replaced_by"]))
        return out

    def _commit(self, user_id: str, thread_id: str | None, change, source: str) -> Any:
        """Read -> change -> validate -> size check -> write + history, in one WATCH/MULTI/EXEC (retried)."""
        k, hk = self.key(user_id, thread_id), self.history_key(user_id, thread_id)

        def attempt(pipe):
            old_raw = pipe.get(k)
            new = change(self._decode(old_raw))
            if new is not None:
                new = self.validate(new)
                self.check_size(new)
            pipe.multi()
            if old_raw is not None and self.history_size:
                pipe.lpush(hk, json.dumps({"content": old_raw, "saved_at": time.time(), "replaced_by": source}))
                pipe.ltrim(hk, 0, self.history_size - 1)
            if new is None:
                pipe.delete(k)
            else:
                pipe.set(k, self._encode(new), ex=self.ttl)
            if self.ttl and self.history_size:
                pipe.expire(hk, self.ttl)
            return new

        return self.redis.transaction(attempt, k, value_from_callable=True)

    def update(self, content: Any, user_id: str, thread_id: str | None = None, *,
               merge: bool = True, source: str = "update") -> Any:
        """Write new content (schema mode: merged unless ``merge=False``); ValidationError writes nothing."""
        content = self._coerce(content)

        def change(old):
            if self.format == "schema" and merge:
                return _merge(old or {}, content)
            return content

        return self._commit(user_id, thread_id, change, source)

    def clear(self, user_id: str, thread_id: str | None = None, *, source: str = "clear") -> bool:
        """Delete the current content (kept in the history, so :meth:`undo` brings it back)."""
        existed = self.redis.exists(self.key(user_id, thread_id))
        if existed:
            self._commit(user_id, thread_id, lambda old: None, source)
        return bool(existed)

    def undo(self, user_id: str, thread_id: str | None = None) -> Any:
        """Restore the previous version; returns it. Raises ValidationError when there is none."""
        k, hk = self.key(user_id, thread_id), self.history_key(user_id, thread_id)

        def attempt(pipe):
            top = pipe.lindex(hk, 0)
            if top is None:
                raise ValidationError("no earlier version of this working memory to restore")
            restored = json.loads(top)["content"]
            pipe.multi()
            pipe.lpop(hk)
            if restored is None:
                pipe.delete(k)
            else:
                pipe.set(k, restored, ex=self.ttl)
            return self._decode(restored)

        return self.redis.transaction(attempt, k, hk, value_from_callable=True)

    def delete_all(self, user_id: str, thread_id: str | None = None) -> int:
        """Remove the content and its history (no undo)."""
        return self.redis.delete(self.key(user_id, thread_id), self.history_key(user_id, thread_id))

    def describe_format(self) -> str:
        """How the content is shaped, in words a model reads (template, partial schema, or free text)."""
        if self.format == "template":
            return f"Keep this Markdown template (fill it in, keep every section):\n{self.template.strip()}"
        if self.format == "schema":
            return ("It is a JSON object that must match this JSON schema (send only the fields that change):\n"
                    + json.dumps(self.partial_schema(), ensure_ascii=False))
        return "It is free-form text: short notes, one per line."

    def partial_schema(self) -> dict[str, Any]:
        """The JSON schema with ``required`` dropped everywhere: what a partial update may hold."""
        return _partial_schema(self._json_schema, self._json_schema)

    def limit_text(self) -> str:
        if self.max_tokens:
            return f"{self.max_tokens} tokens"
        return f"{self.max_chars} characters" if self.max_chars else "no limit"

    def prompt_block(self, user_id: str, thread_id: str | None = None, *, editable: bool = True) -> str:
        """Instruction + format + current content for the system prompt (``editable``: the model has the tools)."""
        return working_tools.prompt_block(self, user_id, thread_id, editable=editable)

    def system_prompt(self, base: str, user_id: str, thread_id: str | None = None) -> str:
        """``base`` followed by the working-memory block."""
        return f"{base.rstrip()}\n\n{self.prompt_block(user_id, thread_id)}"

    def tools(self, user_id: str, thread_id: str | None = None) -> list:
        """get / update / clear tools bound to one user (and thread), with OpenAI schemas."""
        return working_tools.memory_tools(self, user_id, thread_id)

    def observe(self, message: Message | str | Sequence[Message | str], llm, user_id: str,
                thread_id: str | None = None, retries: int = 1) -> Observation:
        """Let the model update the working memory from the user's new message(s); call it every turn."""
        return working_tools.observe(self, message, llm, user_id, thread_id, retries=retries)
