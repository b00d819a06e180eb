"""Working memory: a small scratchpad the agent keeps in its prompt on every turn and edits itself.

A Markdown **template**, a pydantic **schema** (partial updates merged) or free **text**, per thread or per user.
Every write is a validated, size-limited WATCH/MULTI/EXEC that keeps the old version in a capped history.
A write made from content read earlier (the model's ``observe``, its tool calls) is a compare-and-set against
that read: if another writer changed it meanwhile, the change is redone on the new content or refused.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import redis
from pydantic import ValidationError as PydanticError

from ..errors import MemoryKitError, SchemaMismatchError, ValidationError
from ..keys import check_id, check_namespace, register, user_key
from ..llm.task import TaskFailed, run_task
from ..llm.tools import Tool
from ..messages import Message, as_messages
from .working_tools import UPDATE_BY_FORMAT, Observation, task_input

log = logging.getLogger(__name__)

SCOPES = ("conversation", "user")
ANY = object()   # ``expected=ANY``: write whatever is stored now (a deliberate replacement, still atomic)
OBSERVE_ATTEMPTS = 3


class WorkingMemoryConflict(MemoryKitError):
    """The working memory changed between the read a write was based on and the write: nothing was written.
    Read it again and redo the change (``observe`` does so itself, a bounded number of times)."""

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


def _merge(current: Any, update: Any) -> Any:
    """Deep-merge dicts (lists and scalars are replaced): partial updates keep what they don't mention, and a
    null resets a field (validation gives it its default: none, an empty list, an empty object)."""
    if isinstance(current, dict) and isinstance(update, dict):
        merged = {**current, **{k: _merge(current.get(k), v) for k, v in update.items()}}
        return {k: v for k, v in merged.items() if not (k in update and update[k] is None)}
    return update


def _error_path(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc) or "(root)"


def _headings(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if line.lstrip().startswith("#")]


class WorkingMemory:
    """A bounded, validated scratchpad per conversation (or per user), with edit history and undo."""
    def __init__(self, redis_client: redis.Redis, namespace: str = "memorykit", *,
                 template: str | None = None, schema: Any = None, scope: str = "conversation",
                 max_chars: int | None = 2000, history: int = 10, ttl: int | None = None):
        if template is not None and schema is not None:
            raise ValidationError("give either a template or a schema, not both")
        if scope not in SCOPES:
            raise ValidationError(f"scope must be one of {SCOPES}, got {scope!r}")
        if template is not None and (not isinstance(template, str) or not template.strip()):
            raise ValidationError("a template must be non-empty Markdown text")
        if history < 0 or (max_chars is not None and max_chars <= 0):
            raise ValidationError("history must be >= 0 and max_chars > 0 (or None)")
        if ttl is not None and ttl <= 0:
            raise ValidationError("ttl must be a positive number of seconds (or None)")
        if schema is not None and not hasattr(schema, "model_json_schema"):
            raise ValidationError("schema must be a pydantic model class")
        self.redis, self.namespace, self.scope, self.ttl = redis_client, check_namespace(namespace), scope, ttl
        self.template, self.schema, self.history_size, self.max_chars = template, schema, history, max_chars
        self.format = "schema" if schema is not None else "template" if template is not None else "text"

    def __repr__(self) -> str:
        return (f"WorkingMemory({self.format}, scope={self.scope}, limit={self.limit_text()}, "
                f"history={self.history_size})")

    def key(self, user_id: str, thread_id: str | None = None) -> str:
        """``ns:working:user:{user}`` or ``ns:working:conversation:{user}:thread`` (user as a cluster hash tag)."""
        check_id(user_id, "user_id")
        if self.scope == "user":
            return user_key(self.namespace, "working:user", user_id)
        if thread_id is None:
            raise ValidationError("conversation-scoped working memory needs a thread_id")
        return user_key(self.namespace, "working:conversation", user_id, check_id(thread_id, "thread_id"))

    def history_key(self, user_id: str, thread_id: str | None = None) -> str:
        return self.key(user_id, thread_id) + ":history"

    def _decode(self, raw: str | None) -> Any:
        if raw is None or self.format != "schema":
            return raw
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise SchemaMismatchError(
                "the stored working memory is not JSON: another WorkingMemory with a template or free-form "
                "format uses the same scope and namespace. Give each format its own namespace or scope.") from None

    def _encode(self, content: Any) -> str:
        return json.dumps(content, ensure_ascii=False) if self.format == "schema" else content

    def _coerce(self, content: Any) -> Any:
        """Accept what a caller or a model may pass: text, a dict or a JSON string."""
        if self.format != "schema":
            if not isinstance(content, str):
                raise ValidationError(f"{self.format} working memory takes text, got {type(content).__name__}")
            if not content.strip():  # a blank answer would erase the profile: emptying it is clear()'s job
                raise ValidationError("working memory update is blank; nothing was written. Send the complete "
                                      "new content, or call clear (the clear_working_memory tool) to empty it")
            return content.replace("\r\n", "\n").strip() + "\n"
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
        """Return the content in its stored form, or raise ValidationError naming the field (or the
        size limit) and the fix."""
        problems = []
        if self.schema is not None:
            try:
                content = self.schema.model_validate(content).model_dump(mode="json")
            except PydanticError as exc:
                problems = [f"field '{_error_path(e['loc'])}': {e['msg']}" for e in exc.errors()]
        elif self.format == "template":
            missing = [h for h in _headings(self.template) if h not in _headings(content)]
            if missing:
                problems = [f"it must keep the template's sections; missing {missing}. "
                            "Rewrite it with every section of the template."]
        if problems:
            raise ValidationError(f"working memory rejected: {'; '.join(problems)}")
        if self.max_chars is not None and self.size(content) > self.max_chars:
            raise ValidationError(
                f"working memory is limited to {self.limit_text()} and this update makes it {self.size(content)}: "
                "condense it (merge duplicate points, drop stale or minor details, shorten wording) and write it again")
        return content

    def size(self, content: Any) -> int:
        """Characters the stored content takes."""
        return len(self._encode(content)) if content is not None else 0

    def get(self, user_id: str, thread_id: str | None = None) -> Any:
        """The current content (Markdown/text, or a dict in schema mode); None when nothing is stored."""
        return self._decode(self.redis.get(self.key(user_id, thread_id)))

    def read(self, user_id: str, thread_id: str | None = None) -> tuple[Any, str | None]:
        """The current content (as :meth:`current`) and its stored version, to pass as ``expected=`` to a write."""
        raw = self.redis.get(self.key(user_id, thread_id))
        got = self._decode(raw)
        return ({"template": self.template, "schema": {}, "text": ""}[self.format] if got is None else got), raw

    def current(self, user_id: str, thread_id: str | None = None) -> Any:
        """The current content, or the empty template / ``{}`` / ``""`` when nothing is stored."""
        got = self.get(user_id, thread_id)
        return {"template": self.template, "schema": {}, "text": ""}[self.format] if got is None else got

    def history(self, user_id: str, thread_id: str | None = None) -> list[Version]:
        """Past versions, newest first (at most ``history`` of them)."""
        return [Version(self._decode(v["content"]), v["saved_at"], v["replaced_by"])
                for v in map(json.loads, self.redis.lrange(self.history_key(user_id, thread_id), 0, -1))]

    def _commit(self, user_id: str, thread_id: str | None, change, source: str, expected: Any = ANY) -> Any:
        """Read -> change -> validate (size included) -> write + history, in one WATCH/MULTI/EXEC (retried).
        With ``expected`` (a version from :meth:`read`), a different stored version raises WorkingMemoryConflict."""
        k, hk = self.key(user_id, thread_id), self.history_key(user_id, thread_id)

        def attempt(pipe):
            old_raw = pipe.get(k)
            if expected is not ANY and old_raw != expected:
                raise WorkingMemoryConflict(f"working memory {k} changed since it was read; read it again "
                                            "and redo the change on the current content")
            new = change(self._decode(old_raw))
            if new is not None:
                new = self.validate(new)
            pipe.multi()
            if new is not None and old_raw is not None and self._encode(new) == old_raw:
                if self.ttl:  # nothing changes: no write and no history entry, but the TTL runs from this update
                    pipe.expire(k, self.ttl)
            else:
                register(pipe, self.namespace, user_id, k, hk)  # forget_user finds them without a SCAN
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

    def update(self, content: Any, user_id: str, thread_id: str | None = None, *, source: str = "update",
               expected: Any = ANY, replace: bool = False) -> Any:
        """Write new content (schema mode: merged into the current value, a null resetting a field; with
        ``replace=True`` the whole object, defaults for what it leaves out); ValidationError writes nothing, and
        content equal to what is stored writes nothing either. ``expected``: the version (from :meth:`read`) the
        content was made from; if it changed, nothing is written and WorkingMemoryConflict is raised."""
        content = self._coerce(content)
        if self.format == "schema" and not replace:
            return self._commit(user_id, thread_id, lambda old: _merge(old or {}, content), source, expected)
        return self._commit(user_id, thread_id, lambda old: content, source, expected)

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
            return ("It is a JSON object that must match this JSON schema (send only the fields that change; null "
                    "resets one):\n"
                    + json.dumps(self.partial_schema(), ensure_ascii=False))
        return "It is free-form text: short notes, one per line."

    def partial_schema(self) -> dict[str, Any]:
        """The model's JSON schema without its top-level ``required``: what a partial update may hold."""
        return {k: v for k, v in self.schema.model_json_schema().items() if k not in ("required", "title")}

    def limit_text(self) -> str:
        return f"{self.max_chars} characters" if self.max_chars else "no limit"

    def prompt_block(self, user_id: str, thread_id: str | None = None) -> str:
        """Instruction, format and current content, for a model that has the working-memory tools."""
        current = self.get(user_id, thread_id)
        shown = "(empty)" if current is None else self._encode(current).strip()
        where = "this conversation" if self.scope == "conversation" else "this user, across conversations"
        return (f"## Working memory ({self.scope} scope)\n"
                f"A scratchpad for {where}, always shown here. Update it with the update_working_memory tool "
                f"when you learn something that matters later (limit: {self.limit_text()}).\n"
                f"{self.describe_format()}\n"
                f"Current working memory:\n{shown}")

    def system_prompt(self, base: str, user_id: str, thread_id: str | None = None) -> str:
        """``base`` followed by the working-memory block."""
        return f"{base.rstrip()}\n\n{self.prompt_block(user_id, thread_id)}"

    def tools(self, user_id: str, thread_id: str | None = None, expected: Any = ANY) -> list[Tool]:
        """update / clear tools bound to one user (and thread); errors come back as tool results. No read
        tool: the content is in the system prompt every turn (``prompt_block``). ``expected``: the version
        the prompt showed; an update after someone else's change is refused with the current content."""
        self.key(user_id, thread_id)  # validates ids and scope now, not at the first call
        seen = {"version": expected}
        if self.format == "schema":
            content = {**self.partial_schema(),
                       "description": "only the fields to change, merged into the current value; null resets one"}
            how = " fields given (partial update, validated against the schema)."
        else:
            keep = " (keep every template section)" if self.format == "template" else ""
            content = {"type": "string", "description": "the complete new working memory" + keep}
            how = " with new content."

        def update_working_memory(content):
            try:
                new = self.update(content, user_id, thread_id, source="tool", expected=seen["version"])
            except WorkingMemoryConflict:
                now, seen["version"] = self.read(user_id, thread_id)
                return {"error": "the working memory was changed by someone else since you read it; merge your "
                                 "change into this current content and call update_working_memory again",
                        "current": now}
            if seen["version"] is not ANY:  # the next call in this run compares with what it just wrote
                seen["version"] = None if new is None else self._encode(new)
            return {"ok": True, "size": self.size(new), "limit": self.limit_text(), "content": new}

        def clear_working_memory():
            return {"ok": True, "cleared": self.clear(user_id, thread_id, source="tool")}

        update_args = {"type": "object", "properties": {"content": content}, "required": ["content"]}
        return [
            Tool("update_working_memory", f"Replace the working memory{how} Limit: {self.limit_text()}; "
                 "condense when over it.", update_args, update_working_memory,
                 strict=self.format != "schema"),  # strict mode would require every field of a partial update
            Tool("clear_working_memory", "Empty the working memory (it can be restored by undo).",
                 {"type": "object", "properties": {}}, clear_working_memory),
        ]

    def observe(self, message: Message | str | Sequence[Message | str], llm, user_id: str,
                thread_id: str | None = None) -> Observation:
        """Let the model update the working memory from the user's new message(s); call it every turn.
        A failed task, or an update still rejected after one retry with the reason, changes nothing."""
        texts = [m.content.strip() for m in as_messages(message) if m.role == "user" and m.content.strip()]
        if not texts:
            return Observation(False, self.get(user_id, thread_id))
        for _ in range(OBSERVE_ATTEMPTS):  # each attempt reads, asks the model, writes only if still unchanged
            current, version = self.read(user_id, thread_id)
            try:
                return self._observe_once(llm, task_input(self, current, texts), user_id, thread_id, version)
            except WorkingMemoryConflict:
                log.info("working memory changed while the model read it; redoing the update on the new content")
        raise WorkingMemoryConflict(
            f"working memory {self.key(user_id, thread_id)} kept changing during {OBSERVE_ATTEMPTS} attempts to "
            "update it from the new message; nothing was written (other writers' changes are kept)")

    def _observe_once(self, llm, inp, user_id: str, thread_id: str | None, version: str | None) -> Observation:
        """One read-model-write round; a model output still rejected after one retry changes nothing."""
        error, reason = None, ""
        for _ in range(2):
            try:
                out = run_task(llm, UPDATE_BY_FORMAT[self.format], inp)
            except TaskFailed as exc:
                error = str(exc)
                break
            if not out.changed:
                reason = out.reason
                break
            try:
                new = self.update(out.content, user_id, thread_id, source="observe", expected=version)
                return Observation(self._encode(new) != version, new, None, out.reason)
            except ValidationError as exc:
                error = str(exc)
                inp = inp.model_copy(update={"rejected": error})
        if error:
            log.warning("working memory left unchanged: %s", error)
        return Observation(False, self.get(user_id, thread_id), error, reason)
