"""Working memory: a small scratchpad the agent keeps in its prompt on every turn and edits itself.

Three formats:

* **template** — Markdown with fixed sections (``# Profile\\n- Name:\\n...``) the agent fills in;
* **schema** — a pydantic model or a JSON-schema dict: every write is validated, partial
  updates are merged into the current value;
* **text** — free-form notes.

Scope ``conversation`` (default) keeps one scratchpad per thread at
``ns:working:conversation:{user}:{thread}``; scope ``user`` keeps one per user at
``ns:working:user:{user}``, shared by all of that user's threads. Every write path (direct,
tool, :meth:`WorkingMemory.observe`) goes through one validated, size-limited, optimistic
transaction that also pushes the previous version onto a capped edit history
(``...:history``), so a bad edit can be undone and concurrent edits are never lost.
"""
from __future__ import annotations

import copy
import json
import logging
import re
import time
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, Sequence

import redis

from ..errors import LLMError, SchemaMismatchError, ValidationError
from ..keys import check_id, check_namespace, key
from ..llm import offline_skill, parse_json, task_prompt
from ..messages import Message, count_tokens
from ..offline.text import STOPWORDS, normalize, sentences, stem, words

log = logging.getLogger(__name__)

TASK = "update_working_memory"
SCOPES = ("conversation", "user")
FORMATS = ("template", "schema", "text")
NO_CHANGE = "NO_CHANGE"
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


@dataclass
class Observation:
    """What :meth:`WorkingMemory.observe` did: ``changed`` and the content now stored, or the error."""

    changed: bool
    content: Any = None
    error: str | None = None
    raw: str = field(default="", repr=False)


# ---------------------------------------------------------------------------- schema helpers
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


# ---------------------------------------------------------------------------- the store
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

    # ------------------------------------------------------------------ keys
    def key(self, user_id: str, thread_id: str | None = None) -> str:
        check_id(user_id, "user_id")
        if self.scope == "user":
            return key(self.namespace, "working", "user", user_id)
        if thread_id is None:
            raise ValidationError("conversation-scoped working memory needs a thread_id")
        check_id(thread_id, "thread_id")
        return key(self.namespace, "working", "conversation", user_id, thread_id)

    def history_key(self, user_id: str, thread_id: str | None = None) -> str:
        return self.key(user_id, thread_id) + ":history"

    # ------------------------------------------------------------------ codec + validation
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

    # ------------------------------------------------------------------ reads
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

    # ------------------------------------------------------------------ writes
    def _commit(self, user_id: str, thread_id: str | None, change, source: str) -> Any:
        """Read -> change -> validate -> size check -> write + history, retried if someone else wrote."""
        k, hk = self.key(user_id, thread_id), self.history_key(user_id, thread_id)
        with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(k)
                    old_raw = pipe.get(k)
                    new = change(self._decode(old_raw))
                    if new is not None:
                        new = self.validate(new)
                        self.check_size(new)
                    pipe.multi()
                    if old_raw is not None and self.history_size:
                        pipe.lpush(hk, json.dumps({"content": old_raw, "saved_at": time.time(),
                                                   "replaced_by": source}))
                        pipe.ltrim(hk, 0, self.history_size - 1)
                    if new is None:
                        pipe.delete(k)
                    else:
                        pipe.set(k, self._encode(new), ex=self.ttl)
                    if self.ttl and self.history_size:
                        pipe.expire(hk, self.ttl)
                    pipe.execute()
                    return new
                except redis.WatchError:
                    continue

    def update(self, content: Any, user_id: str, thread_id: str | None = None, *,
               merge: bool = True, source: str = "update") -> Any:
        """Write new content (schema mode: merged into the current value unless ``merge=False``).

        Raises ValidationError (nothing written) on invalid content or when over the size limit.
        """
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
        with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(k, hk)
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
                    pipe.execute()
                    return self._decode(restored)
                except redis.WatchError:
                    continue

    def delete_all(self, user_id: str, thread_id: str | None = None) -> int:
        """Remove the content and its history (no undo)."""
        return self.redis.delete(self.key(user_id, thread_id), self.history_key(user_id, thread_id))

    # ------------------------------------------------------------------ prompt block
    def describe_format(self) -> str:
        if self.format == "template":
            return f"Keep this Markdown template (fill it in, keep every section):\n{self.template.strip()}"
        if self.format == "schema":
            return ("It is a JSON object that must match this JSON schema (send only the fields that change):\n"
                    + json.dumps(self._partial(), ensure_ascii=False))
        return "It is free-form text: short notes, one per line."

    def _partial(self) -> dict[str, Any]:
        return _partial_schema(self._json_schema, self._json_schema)

    def limit_text(self) -> str:
        if self.max_tokens:
            return f"{self.max_tokens} tokens"
        return f"{self.max_chars} characters" if self.max_chars else "no limit"

    def prompt_block(self, user_id: str, thread_id: str | None = None, *, editable: bool = True) -> str:
        """The instruction + format + current content, appended to the system prompt on every turn.

        ``editable=False`` when the model has no working-memory tools (the app calls ``observe``).
        """
        current = self.get(user_id, thread_id)
        shown = "(empty)" if current is None else (
            json.dumps(current, ensure_ascii=False) if self.format == "schema" else current.strip())
        where = "this conversation" if self.scope == "conversation" else "this user, across conversations"
        how = (f"Update it with the update_working_memory tool when you learn something that matters later "
               f"(limit: {self.limit_text()})." if editable else "It is kept up to date for you.")
        return (f"## Working memory ({self.scope} scope)\n"
                f"A scratchpad for {where}, always shown here. {how}\n"
                f"{self.describe_format()}\n"
                f"Current working memory:\n{shown}")

    def system_prompt(self, base: str, user_id: str, thread_id: str | None = None) -> str:
        """``base`` followed by the working-memory block."""
        return f"{base.rstrip()}\n\n{self.prompt_block(user_id, thread_id)}"

    # ------------------------------------------------------------------ tools
    def tools(self, user_id: str, thread_id: str | None = None) -> list:
        """get / update / clear tools bound to one user (and thread), with OpenAI schemas."""
        from ..llm.tools import Tool

        self.key(user_id, thread_id)  # validates ids and scope now, not at the first call
        if self.format == "schema":
            content_param = {**self._partial(), "description": "only the fields to change; merged into the current value"}
        else:
            content_param = {"type": "string", "description": (
                "the complete new working memory" + (" (keep every template section)" if self.format == "template" else ""))}

        def get_working_memory():
            return {"format": self.format, "scope": self.scope, "limit": self.limit_text(),
                    "content": self.current(user_id, thread_id)}

        def update_working_memory(content):
            new = self.update(content, user_id, thread_id, source="tool")
            return {"ok": True, "size": self.size(new), "limit": self.limit_text(), "content": new}

        def clear_working_memory():
            return {"ok": True, "cleared": self.clear(user_id, thread_id, source="tool")}

        return [
            Tool("get_working_memory", "Read the current working memory (the scratchpad for this "
                 f"{self.scope}).", {"type": "object", "properties": {}}, get_working_memory),
            Tool("update_working_memory", "Replace the working memory"
                 + (" fields given (partial update, validated against the schema)." if self.format == "schema"
                    else " with new content.") + f" Limit: {self.limit_text()}; condense when over it.",
                 {"type": "object", "properties": {"content": content_param}, "required": ["content"]},
                 update_working_memory),
            Tool("clear_working_memory", "Empty the working memory (it can be restored by undo).",
                 {"type": "object", "properties": {}}, clear_working_memory),
        ]

    # ------------------------------------------------------------------ observe
    def observe_prompt(self, current: Any) -> str:
        shown = json.dumps(current, ensure_ascii=False) if self.format == "schema" else (current or "").strip()
        if self.format == "schema":
            shape = f"<schema>\n{json.dumps(self._partial(), ensure_ascii=False)}\n</schema>"
            reply = ("Reply with a JSON object holding only the fields that change (lists in full), "
                     f"or {NO_CHANGE} if nothing changes.")
        elif self.format == "template":
            shape = f"<template>\n{self.template.strip()}\n</template>"
            reply = f"Reply with the complete updated Markdown (every section kept), or {NO_CHANGE}."
        else:
            shape = "<text/>"
            reply = f"Reply with the complete updated notes, one per line, or {NO_CHANGE}."
        return task_prompt(TASK, f"""
You maintain a user's working memory: their name, timezone, goals and preferences.
Read the user's message and apply what it says: add new facts, replace corrected ones
("actually, call me Sam"), remove goals the user dropped, replace a preference the user reversed.
Keep it short (limit {self.limit_text()}). Do not invent anything.
Format: {self.format}
{shape}
<current>
{shown}
</current>
{reply}""")

    def observe(self, message: Message | str, llm, user_id: str, thread_id: str | None = None,
                retries: int = 1) -> Observation:
        """Let the model update the working memory from one user message (call it every turn).

        Invalid model output is retried once with the error shown to the model, then dropped
        (logged, returned in ``Observation.error``): the stored memory is never corrupted.
        """
        if isinstance(message, str):
            message = Message(role="user", content=message)
        if message.role != "user" or not message.content.strip():
            return Observation(False, self.get(user_id, thread_id))
        current = self.current(user_id, thread_id)
        prompt = [Message(role="system", content=self.observe_prompt(current)),
                  Message(role="user", content=message.content)]
        error, raw = None, ""
        for _ in range(retries + 1):
            try:
                raw = llm.chat(prompt).content or ""
            except LLMError as exc:
                log.warning("working memory observe: model call failed: %s", exc)
                return Observation(False, self.get(user_id, thread_id), str(exc))
            body = raw.strip()
            if not body or body.strip("`\" .").upper() == NO_CHANGE:
                if error:
                    log.warning("working memory observe: model output rejected: %s", error)
                return Observation(False, self.get(user_id, thread_id), error, raw)
            try:
                if self.format == "schema":
                    update = parse_json(body)
                    if not isinstance(update, dict):
                        raise ValidationError("the reply must be a JSON object")
                else:
                    update = re.sub(r"^```\w*\n|\n?```$", "", body).strip()
                before = self.get(user_id, thread_id)
                new = self.update(update, user_id, thread_id, source="observe")
                return Observation(new != before, new, raw=raw)
            except (ValidationError, ValueError) as exc:
                error = str(exc)
                prompt = prompt + [Message(role="assistant", content=raw),
                                   Message(role="user", content=f"That update was rejected: {error}. Try again.")]
        log.warning("working memory observe: model output rejected: %s", error)
        return Observation(False, self.get(user_id, thread_id), error, raw)


# ============================================================================ offline profile upkeep
# Deterministic rules that read one user message and find profile facts. General over
# phrasings (cue words + word classes), not tied to any dialog.
_NAME_STOP = {
    "not", "so", "very", "just", "going", "planning", "looking", "trying", "training", "a", "an", "the",
    "from", "in", "at", "on", "allergic", "vegan", "vegetarian", "married", "happy", "sorry", "fine",
    "good", "great", "here", "back", "new", "interested", "afraid", "sure", "also", "still", "really",
    "learning", "working", "done", "ok", "okay", "tired", "busy", "excited", "thinking", "doing",
    "english", "german", "french", "spanish", "italian", "american", "british", "canadian", "dutch",
    "swiss", "indian", "chinese", "japanese", "korean", "brazilian", "mexican", "australian", "irish",
    "polish", "swedish", "norwegian", "danish", "portuguese", "russian", "ukrainian", "turkish",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "no", "yes", "well",
    "available", "free", "off", "out", "up", "into", "about", "now", "currently", "based", "living",
    "moving", "based", "using", "pst", "est", "cet", "utc", "gmt", "i", "it", "that", "this", "there",
    "always", "never", "usually", "often", "actually", "kind", "bit", "little", "lot", "mostly",
}
_NAME_WORD = r"[A-Za-zÀ-ÖØ-öø-ÿ][\w'’-]*"
_NAME_CUES = [
    (re.compile(rf"\b(?:my\s+name\s+is|my\s+name's|name's|i\s+am\s+called|i'm\s+called|i\s+go\s+by|"
                rf"(?<!don't )(?<!do not )(?<!never )(?<!not )call\s+me|people\s+call\s+me|it's\s+spelled)\s+"
                rf"({_NAME_WORD}(?:\s+[A-Z][\w'’-]*)?)", re.IGNORECASE), False),
    (re.compile(rf"\b(?:[Ii]\s+am|[Ii]'?m|[Tt]his\s+is)\s+((?:(?:Dr|Mr|Mrs|Ms|Prof)\.?\s+)?{_NAME_WORD}(?:\s+[A-Z][\w'’-]*)?)"), True),
    (re.compile(rf"\b[Aa]ctually,?\s+(?:[Ii]t's|[Ii]t\s+is|[Ii]'m|[Ii]\s+am)\s+({_NAME_WORD})\b(?!\s+(?:time|zone|timezone))"), True),
    (re.compile(rf"\b[Ii]t's\s+({_NAME_WORD}),?\s+not\s+{_NAME_WORD}"), True),
]


_TITLES = {"dr", "mr", "mrs", "ms", "miss", "prof", "professor", "sir", "dame"}


def _clean_name(raw: str, must_be_capitalized: bool) -> str | None:
    parts = []
    tokens = raw.split()
    while len(tokens) > 1 and tokens[0].strip(".").lower() in _TITLES:
        tokens = tokens[1:]
    for w in tokens:
        w = w.strip(".,!?;:'’\"")
        if not w or w.lower() in _NAME_STOP or w.lower() in STOPWORDS:
            break
        if must_be_capitalized and not w[0].isupper():
            break
        if parts and not w[0].isupper():
            break
        parts.append(w)
    if not parts or _timezone_words(" ".join(parts)):
        return None
    return " ".join(p[:1].upper() + p[1:] for p in parts)


def find_name(text: str) -> str | None:
    """The name the user wants to be called, the last cue winning ("I'm Samuel, call me Sam" -> Sam)."""
    text = normalize(text)
    found: list[tuple[int, str]] = []
    for pattern, strict in _NAME_CUES:
        for m in pattern.finditer(text):
            before = text[max(0, m.start() - 12):m.start()].lower()
            if re.search(r"(don't|do not|never|not)\s*$", before):
                continue
            name = _clean_name(m.group(1), strict)
            after = text[m.start(1) + len(name or ""):].lower()
            if name and (re.match(r"[\s,]*(?:standard\s+|daylight\s+)?(?:time|timezone|zone)\b", after)
                         or name.lower() in _ZONE_WORDS):
                continue
            if name:
                found.append((m.start(), name))
    return max(found)[1] if found else None


# ---- timezones
_ZONES = sorted(z for z in zoneinfo.available_timezones()
                if z.split("/")[0] in {"Europe", "America", "Asia", "Africa", "Australia", "Pacific",
                                       "Atlantic", "Indian"} and "/" in z)
_IANA = {z.lower(): z for z in zoneinfo.available_timezones()}
_CITY = {}
for _z in _ZONES:
    _CITY.setdefault(_z.split("/")[-1].replace("_", " ").lower(), _z)
_CITY.update({
    "san francisco": "America/Los_Angeles", "seattle": "America/Los_Angeles", "portland": "America/Los_Angeles",
    "san diego": "America/Los_Angeles", "las vegas": "America/Los_Angeles", "sf": "America/Los_Angeles",
    "boston": "America/New_York", "nyc": "America/New_York", "washington": "America/New_York",
    "miami": "America/New_York", "atlanta": "America/New_York", "philadelphia": "America/New_York",
    "austin": "America/Chicago", "dallas": "America/Chicago", "houston": "America/Chicago",
    "salt lake city": "America/Denver", "munich": "Europe/Berlin", "hamburg": "Europe/Berlin",
    "frankfurt": "Europe/Berlin", "cologne": "Europe/Berlin", "barcelona": "Europe/Madrid",
    "milan": "Europe/Rome", "manchester": "Europe/London", "edinburgh": "Europe/London",
    "geneva": "Europe/Zurich", "lyon": "Europe/Paris", "marseille": "Europe/Paris", "krakow": "Europe/Warsaw",
    "mumbai": "Asia/Kolkata", "delhi": "Asia/Kolkata", "new delhi": "Asia/Kolkata", "bangalore": "Asia/Kolkata",
    "bengaluru": "Asia/Kolkata", "beijing": "Asia/Shanghai", "osaka": "Asia/Tokyo", "kyoto": "Asia/Tokyo",
    "kiev": "Europe/Kyiv", "rotterdam": "Europe/Amsterdam", "montreal": "America/Toronto",
    "ottawa": "America/Toronto", "melbourne": "Australia/Melbourne", "perth": "Australia/Perth",
    "brisbane": "Australia/Brisbane", "cape town": "Africa/Johannesburg", "rio": "America/Sao_Paulo",
    "rio de janeiro": "America/Sao_Paulo", "tel aviv": "Asia/Jerusalem", "ho chi minh city": "Asia/Ho_Chi_Minh",
})
_ABBR = {
    "pst": "America/Los_Angeles", "pdt": "America/Los_Angeles", "pt": "America/Los_Angeles",
    "mst": "America/Denver", "mdt": "America/Denver", "cst": "America/Chicago", "cdt": "America/Chicago",
    "est": "America/New_York", "edt": "America/New_York", "et": "America/New_York",
    "akst": "America/Anchorage", "hst": "Pacific/Honolulu", "ast": "America/Halifax",
    "cet": "Europe/Berlin", "cest": "Europe/Berlin", "eet": "Europe/Athens", "eest": "Europe/Athens",
    "wet": "Europe/Lisbon", "west": "Europe/Lisbon", "bst": "Europe/London", "gmt": "Europe/London",
    "ist": "Asia/Kolkata", "jst": "Asia/Tokyo", "kst": "Asia/Seoul", "sgt": "Asia/Singapore",
    "hkt": "Asia/Hong_Kong", "aest": "Australia/Sydney", "aedt": "Australia/Sydney",
    "awst": "Australia/Perth", "nzst": "Pacific/Auckland", "nzdt": "Pacific/Auckland", "msk": "Europe/Moscow",
}
_ZONE_WORDS = {
    "pacific": "America/Los_Angeles", "mountain": "America/Denver", "central": "America/Chicago",
    "eastern": "America/New_York", "central european": "Europe/Berlin", "eastern european": "Europe/Athens",
    "western european": "Europe/Lisbon", "british": "Europe/London", "india": "Asia/Kolkata",
    "indian": "Asia/Kolkata", "japan": "Asia/Tokyo", "japanese": "Asia/Tokyo", "korea": "Asia/Seoul",
    "china": "Asia/Shanghai", "singapore": "Asia/Singapore", "alaska": "America/Anchorage",
    "hawaii": "Pacific/Honolulu", "atlantic": "America/Halifax", "greenwich": "Europe/London",
}
_OFFSET = re.compile(r"\b(UTC|GMT)\s*([+\-−–])\s*(\d{1,2})(?::?(\d{2}))?\b", re.IGNORECASE)
_IANA_RE = re.compile(r"\b([A-Za-z]+(?:/[A-Za-z_\-]+){1,2})\b")
_ABBR_RE = re.compile(r"\b(" + "|".join(sorted((a.upper() for a in _ABBR if len(a) > 2), key=len, reverse=True)) + r")\b")
_ZONE_RE = re.compile(r"\b(" + "|".join(sorted(_ZONE_WORDS, key=len, reverse=True))
                      + r")\s+(?:standard\s+|daylight\s+)?time\b", re.IGNORECASE)
_CITY_NAMES = "|".join(re.escape(c) for c in sorted(_CITY, key=len, reverse=True))
_CITY_TIME_RE = re.compile(rf"\b({_CITY_NAMES})\s+time\b", re.IGNORECASE)
_CITY_PLACE_RE = re.compile(
    rf"\b(?:(?:(?:i|we)(?:'m|'ve|'re|\s+am|\s+are|\s+have)?|currently|now)\s+"
    rf"(?:(?:just|recently|now|finally|currently|actually|back|mostly|usually)\s+)*)?"
    rf"(?:(?:live|living|lives|moved|moving|relocated|relocating|based|located|staying|settled)"
    rf"(?:\s+(?:now|currently|back|here|over))?\s+(?:in|to|near|at)|(?:work|working)\s+(?:remotely\s+)?(?:in|from)"
    rf"|(?:i'm|i\s+am|we're|we\s+are)(?:\s+(?:now|currently|back|actually|here))?\s+in"
    rf"|time\s*zone\s+is)\s+({_CITY_NAMES})\b", re.IGNORECASE)


def _timezone_words(text: str) -> bool:
    return text.lower() in _CITY or text.lower() in _ABBR


def find_timezone(text: str) -> str | None:
    """A timezone the user states: IANA name, UTC±N, an abbreviation, a zone or city word ("Berlin time")."""
    text = normalize(text).replace("−", "-").replace("–", "-")
    found: list[tuple[int, str]] = []
    for m in _OFFSET.finditer(text):
        sign = "-" if m.group(2) in "-−–" else "+"
        minutes = f":{m.group(4)}" if m.group(4) and m.group(4) != "00" else ""
        found.append((m.start(), f"{m.group(1).upper()}{sign}{int(m.group(3))}{minutes}"))
    for m in _IANA_RE.finditer(text):
        zone = _IANA.get(m.group(1).lower())
        if zone and "/" in zone:
            found.append((m.start(), zone))
    covered = [(s, s + 12) for s, _ in found]
    for m in _ABBR_RE.finditer(text):
        if any(a <= m.start() < b for a, b in covered):
            continue
        abbr = m.group(1)
        if abbr in ("UTC",) or (abbr == "GMT" and _OFFSET.search(text)):
            continue
        found.append((m.start(), f"{_ABBR[abbr.lower()]} ({abbr})"))
    if re.search(r"\bUTC\b", text) and not _OFFSET.search(text):
        found.append((re.search(r"\bUTC\b", text).start(), "UTC"))
    for m in _ZONE_RE.finditer(text):
        found.append((m.start(), _ZONE_WORDS[m.group(1).lower()]))
    for m in _CITY_TIME_RE.finditer(text):
        found.append((m.start(), _CITY[m.group(1).lower()]))
    for m in _CITY_PLACE_RE.finditer(text):
        if m.group(1)[0].isupper() or m.group(1).lower() in ("nyc", "sf"):
            found.append((m.start(1), _CITY[m.group(1).lower()]))
    return max(found)[1] if found else None


# ---- goals
_CLAUSE_END = re.compile(r"\s*(?:[.;!?,]|\s(?:but|because|so that|since|though|although|which)\b)")
_CLAUSE_SPLIT = re.compile(r"\s*[,;]?\s+(?:and|but|or|so|while|although|though|because)\s+(?=(?:i|i'm|i've|i'd|my|please|also|we|now|never|always|don't|do\s+not)\b)"
                           r"|\s*[,;:]\s+(?=(?:i|i'm|i've|i'd|my|please|also|we)\b)|\s+-+\s+", re.IGNORECASE)


_CLAUSE_END_LIST = re.compile(r"\s*(?:[.;!?]|\s(?:but|because|so that|since|though|although|which)\b)")


def clauses(text: str) -> list[str]:
    """Sentences split further where a new clause starts with its own subject ("..., and I love X")."""
    return [c.strip() for s in sentences(text) for c in _CLAUSE_SPLIT.split(s) if c and c.strip()]
_ADV = r"(?:(?:also|really|still|just|now|actually|definitely|finally|seriously|eventually|currently)\s+)*"
_GOAL_ADD = re.compile(
    r"\b(?:my\s+(?:[\w']+\s+){0,3}?(?:goal|aim|objective|target|plan|resolution|ambition|dream)\s+(?:is|was|will be)\s+(?:to\s+)?"
    r"|i\s+" + _ADV + r"(?:want|wanna|hope|plan|intend|aim|mean|need)\s+to\s+"
    r"|i'd\s+(?:really\s+)?(?:like|love)\s+to\s+|i\s+would\s+(?:like|love)\s+to\s+"
    r"|i'm\s+" + _ADV + r"(?:aiming|planning|hoping|trying|working\s+hard|determined)\s+(?:to\s+|for\s+)"
    r"|i\s+am\s+(?:aiming|planning|hoping|trying|determined)\s+(?:to\s+|for\s+)"
    r"|i'm\s+" + _ADV + r"(?:training|preparing|studying|saving(?:\s+up)?)\s+for\s+|i\s+am\s+(?:training|preparing|studying|saving)\s+for\s+"
    r"|i'm\s+working\s+(?:towards?|on)\s+|i\s+am\s+working\s+(?:towards?|on)\s+"
    r"|i'm\s+learning\s+(?=\w)|i\s+am\s+learning\s+(?=\w)"
    r"|my\s+(?:goals?|aims?)\s+(?:are|is)\s*:?\s*)", re.IGNORECASE)
_GOAL_KIND = {"training": "Train for ", "preparing": "Prepare for ", "studying": "Study for ",
              "saving": "Save for ", "learning": "Learn ", "aiming for": "", "working": ""}
_NOT_GOAL_VERBS = {"know", "ask", "see", "check", "talk", "say", "tell", "add", "change", "update", "mention",
                   "confirm", "clarify", "make sure", "be", "go", "get", "have", "try", "find", "understand",
                   "remind", "thank", "correct", "note", "let", "share", "start", "do", "hear"}
_GOAL_DROP = re.compile(
    r"\b(?:i've\s+|i\s+have\s+|i\s+|we've\s+|we\s+)?(?:dropped|drop|gave\s+up(?:\s+on)?|given\s+up(?:\s+on)?|give\s+up(?:\s+on)?|"
    r"stop|stopping|dropping|giving\s+up(?:\s+on)?|abandoning|scrapping|quitting|ditching|shelving|cancell?ing|"
    r"abandoned|abandon|scrapped|scrap|quit|stopped|cancel(?:l?ed)?|ditched|ditch|shelved|removed?|forget(?:\s+about)?|"
    r"no\s+longer\s+(?:want\s+to|training\s+for|planning\s+to|aiming\s+(?:to|for)|working\s+(?:on|towards?)|doing|going\s+to|"
    r"trying\s+to|learning|interested\s+in|preparing\s+for)|"
    r"(?:am\s+not|i'm\s+not|not)\s+(?:training\s+for|doing|planning\s+to|learning|preparing\s+for)|"
    r"don't\s+want\s+to|do\s+not\s+want\s+to)\s+(.+)", re.IGNORECASE)
_GOAL_OFF = re.compile(r"\b(?:the|my|that)\s+(.+?)\s+(?:goal|plan|idea|project)\s+is\s+(?:off|dead|cancell?ed|over|done|gone|history)\b",
                       re.IGNORECASE)
_GENERIC = {"goal", "goals", "plan", "plans", "idea", "thing", "anymore", "longer", "whole", "train", "training",
            "learn", "learning", "want", "aim", "target", "project", "time", "now", "actually", "any", "more",
            "completely", "altogether", "entirely", "for", "good", "that", "the"}


def _clause(text: str, commas: bool = True) -> str:
    m = (_CLAUSE_END if commas else _CLAUSE_END_LIST).search(text)
    return (text[:m.start()] if m else text).strip(" ,:-\"'")


def _topic_words(text: str) -> set[str]:
    return {stem(w) for w in words(text) if w not in STOPWORDS and w not in _GENERIC and len(w) > 1}


def _sentence_case(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip(" .,;:")
    return text[:1].upper() + text[1:]


def _goal_phrase(cue: str, rest: str) -> list[str]:
    is_list = bool(re.match(r"my\s+(?:goals?|aims?)\s+are", re.sub(r"\s+", " ", cue.lower())))
    body = _clause(rest, commas=not is_list)
    if not body:
        return []
    cue_l = re.sub(r"\s+", " ", cue.lower())
    prefix = ""
    for word, pre in _GOAL_KIND.items():
        if word in cue_l and cue_l.rstrip().endswith(("for", "on", "towards", "toward", "learning")):
            prefix = pre
            break
    if is_list:
        parts = [p for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", body) if p.strip()]
    else:
        parts = [body]
    out = []
    for part in parts:
        part = re.sub(r"^(?:to|be able to)\s+", "", part.strip(), flags=re.IGNORECASE)
        first = part.split()[0].lower() if part.split() else ""
        if not part or first in _NOT_GOAL_VERBS or " ".join(part.lower().split()[:2]) in _NOT_GOAL_VERBS:
            continue
        if len(words(part)) > 14:
            part = " ".join(part.split()[:14])
        out.append(_sentence_case(prefix + part))
    return out


def find_goals(text: str) -> tuple[list[str], list[str]]:
    """(goals added, topics of goals dropped) in one message."""
    added, dropped = [], []
    for sent in clauses(text):
        if sent.rstrip().endswith("?"):
            continue
        drop_spans = []
        for m in _GOAL_DROP.finditer(sent):
            topic = _clause(m.group(1))
            if _topic_words(topic):
                dropped.append(topic)
                drop_spans.append((m.start(), m.end()))
        for m in _GOAL_OFF.finditer(sent):
            dropped.append(m.group(1))
        for m in re.finditer(r"\binstead\s+of\s+(.+)", sent, re.IGNORECASE):
            dropped.append(_clause(m.group(1)))
        for m in _GOAL_ADD.finditer(sent):
            if any(a <= m.start() < b for a, b in drop_spans):
                continue
            before = sent[max(0, m.start() - 14):m.start()].lower()
            if re.search(r"\b(no longer|not|don't|never)\s*$", before):
                continue
            added.extend(_goal_phrase(m.group(0), sent[m.end():]))
    return added, dropped


# ---- preferences
_POS, _NEG = 1, -1
_PREF = re.compile(
    r"\b(?P<cue>i\s+(?:(?:really|much|generally|usually|strongly|also|still|actually|now|definitely|absolutely|just)\s+)*(?:prefer|like|love|enjoy|adore)"
    r"|i\s+(?:(?:really|also|still|actually|now|just|absolutely|totally)\s+)*(?:hate|dislike|detest|can't\s+stand|cannot\s+stand|don't\s+like|do\s+not\s+like|"
    r"don't\s+enjoy|do\s+not\s+enjoy|can't\s+stand|no\s+longer\s+like|don't\s+want|do\s+not\s+want)"
    r"|i'd\s+(?:much\s+)?rather|i\s+would\s+(?:much\s+)?rather|i'm\s+(?:a\s+(?:big\s+|huge\s+)?fan\s+of|not\s+a\s+fan\s+of|into)"
    r"|i\s+am\s+(?:a\s+(?:big\s+|huge\s+)?fan\s+of|not\s+a\s+fan\s+of)"
    r"|(?:please\s+)?(?:always|never)|please\s+(?:don't|do\s+not|avoid)|^(?:don't|do\s+not|avoid)(?=\s+\w)|please(?=\s+(?:use|keep|give|send|write|reply|answer|be|make|include|show))"
    r")\s+(?P<obj>.+)", re.IGNORECASE)
_NEG_CUES = ("hate", "dislike", "detest", "can't stand", "cannot stand", "don't like", "do not like",
             "don't enjoy", "do not enjoy", "no longer like", "don't want", "do not want", "not a fan",
             "never", "don't", "do not", "avoid")
_REVISION = re.compile(r"\b(actually|instead|anymore|any more|now|changed my mind|rather|no longer|these days|switch)\b",
                       re.IGNORECASE)


@dataclass(frozen=True)
class Preference:
    polarity: int
    kind: str          # like | prefer | always | never
    obj: str

    @property
    def text(self) -> str:
        obj = self.obj
        if self.kind == "always":
            return _sentence_case(f"Always {obj}")
        if self.kind == "never":
            return _sentence_case(f"Never {obj}")
        if self.kind == "prefer":
            return _sentence_case(f"Prefers {obj}")
        if self.kind == "favorite":
            return _sentence_case(f"Favorite {obj}")
        if self.kind == "trait":
            return _sentence_case(obj)
        return _sentence_case(("Likes " if self.polarity > 0 else "Dislikes ") + obj)


def _pref_kind(cue: str) -> tuple[int, str]:
    cue = re.sub(r"\s+", " ", cue.lower())
    polarity = _NEG if any(n in cue for n in _NEG_CUES) else _POS
    if "always" in cue or (cue.startswith("please") and polarity > 0):
        return _POS, "always"
    if polarity < 0 and cue.startswith(("please", "never", "don't", "do not", "avoid")):
        return _NEG, "never"
    if "prefer" in cue or "rather" in cue:
        return _POS, "prefer"
    return polarity, "like"


def find_preferences(text: str) -> list[Preference]:
    out = []
    for sent in clauses(text):
        if sent.rstrip().endswith("?"):
            continue
        for m in _PREF.finditer(sent):
            start = m.start()
            if re.search(r"\b(would you|do you|if you|you)\s*$", sent[max(0, start - 12):start], re.IGNORECASE):
                continue
            if re.match(r"i\s+(?:would|'d)\s+(?:like|love)\s+to\b", sent[start:], re.IGNORECASE):
                continue
            if re.match(r"i\s+(?:don't|do not)\s+want\s+to\b", sent[start:], re.IGNORECASE):
                continue  # a dropped goal, not a preference
            if re.match(r"i\s+(?:really\s+)?(?:like|love|want)\s+to\s+(?!\w+\s+\w+ing)", sent[start:], re.IGNORECASE) \
                    and re.match(r"i\s+(?:really\s+)?want", sent[start:], re.IGNORECASE):
                continue
            polarity, kind = _pref_kind(m.group("cue"))
            obj = _clause(m.group("obj"))
            obj = re.sub(r"(?:,?\s+(?:anymore|any more|these days|now|again|please|either|too))+$", "", obj, flags=re.IGNORECASE)
            if not _topic_words(obj) or len(words(obj)) > 16:
                continue
            if kind in ("always", "never"):
                obj = re.sub(r"^(?:to\s+)", "", obj)
            out.append(Preference(polarity, kind, obj.rstrip(" .")))
        for m in _FAVORITE.finditer(sent):
            thing, value = (m.group("thing"), m.group("value")) if m.group("thing") else (m.group("thing2"), m.group("value2"))
            value = re.sub(r"(?:,?\s+(?:anymore|any more|these days|now|again|too))+$", "", _clause(value), flags=re.IGNORECASE)
            if thing and value and _topic_words(value):
                out.append(Preference(_POS, "favorite", f"{_clause(thing)}: {value}"))
            elif value and _topic_words(value):
                out.append(Preference(_POS, "like", value))
        for m in _TRAIT.finditer(sent):
            out.append(Preference(_POS, "trait", _clause(m.group(1))))
    return out


_FAVORITE = re.compile(
    r"\bmy\s+(?:absolute\s+)?(?:favou?rite|preferred)\s+(?P<thing>[\w\s'-]{2,30}?)\s+(?:is|are)\s+(?P<value>.+)"
    r"|^(?P<value2>[\w\s'-]{2,40}?)\s+(?:is|are)\s+my\s+(?:absolute\s+)?(?:favou?rite|preferred)(?:\s+(?P<thing2>[\w\s'-]{2,30}))?",
    re.IGNORECASE)
_TRAIT = re.compile(r"\b(?:i'm|i\s+am)\s+(?:a\s+|an\s+|strictly\s+|mostly\s+)?(vegetarian|vegan|pescatarian|"
                    r"lactose[\s-]intolerant|gluten[\s-]free|teetotal|allergic\s+to\s+[\w\s-]+|diabetic|celiac|coeliac)\b",
                    re.IGNORECASE)


def _pref_of(text: str) -> Preference | None:
    """Parse a stored preference line back ("Dislikes cilantro")."""
    fav = re.match(r"^favou?rite\s+(.+?):\s*(.+)$", text.strip(), re.IGNORECASE)
    if fav:
        return Preference(_POS, "favorite", f"{fav.group(1)}: {fav.group(2)}")
    m = re.match(r"^(likes|dislikes|prefers|always|never)\s+(.+)$", text.strip(), re.IGNORECASE)
    if not m:
        return None
    head = m.group(1).lower()
    polarity = _NEG if head in ("dislikes", "never") else _POS
    kind = {"likes": "like", "dislikes": "like", "prefers": "prefer"}.get(head, head)
    return Preference(polarity, kind, m.group(2))


def _head(text: str) -> str | None:
    tw = [stem(w) for w in words(text) if w not in STOPWORDS and w not in _GENERIC and len(w) > 1]
    return tw[-1] if tw else None


def _same_subject(new: Preference, old_text: str, revision: bool) -> bool:
    old = _pref_of(old_text)
    if new.kind == "favorite" or (old and old.kind == "favorite"):
        return bool(old) and old.kind == new.kind and \
            _topic_words(old.obj.split(":")[0]) == _topic_words(new.obj.split(":")[0])
    old_obj = old.obj if old else old_text
    a, b = _topic_words(new.obj), _topic_words(old_obj)
    if not a or not b:
        return False
    if a <= b or b <= a:
        return True
    if (new.kind == "prefer" or revision or (old and old.polarity != new.polarity)) and _head(new.obj) == _head(old_obj):
        return True
    return False


def apply_preferences(current: list[str], found: list[Preference], revision: bool) -> list[str]:
    items = list(current)
    for pref in found:
        items = [i for i in items if not _same_subject(pref, i, revision)]
        items.append(pref.text)
    return items


def apply_goals(current: list[str], added: list[str], dropped: list[str]) -> list[str]:
    items = list(current)
    for topic in dropped:
        tw = _topic_words(topic)
        items = [g for g in items if not (tw & _topic_words(g))]
    for goal in added:
        gw = _topic_words(goal)
        items = [g for g in items if not (_topic_words(g) and (_topic_words(g) <= gw))]
        items.append(goal)
    return items


@dataclass
class ProfileFacts:
    """What one user message says about name, timezone, goals and preferences."""

    name: str | None = None
    timezone: str | None = None
    goals_added: list[str] = field(default_factory=list)
    goals_dropped: list[str] = field(default_factory=list)
    preferences: list[Preference] = field(default_factory=list)
    revision: bool = False

    @property
    def empty(self) -> bool:
        return not (self.name or self.timezone or self.goals_added or self.goals_dropped or self.preferences)


def profile_facts(text: str) -> ProfileFacts:
    """Rule-based reading of one user message (the offline skill's core)."""
    added, dropped = find_goals(text)
    prefs = find_preferences(text)
    goal_texts = {g.lower() for g in added}
    prefs = [p for p in prefs if not any(p.obj.lower() in g for g in goal_texts)]
    return ProfileFacts(find_name(text), find_timezone(text), added, dropped, prefs,
                        bool(_REVISION.search(text)))


# ---- applying facts to each format
_FIELD_NAME = re.compile(r"(preferred|nick)?_?\s*name|^name$|first.?name|full.?name", re.IGNORECASE)
_FIELD_TZ = re.compile(r"time.?zone|^tz$", re.IGNORECASE)
_FIELD_GOAL = re.compile(r"goal|aim|objective", re.IGNORECASE)
_FIELD_PREF = re.compile(r"prefer|likes|taste|settings", re.IGNORECASE)
_FIELD_LIKES = re.compile(r"^likes$|^loves$", re.IGNORECASE)
_FIELD_DISLIKES = re.compile(r"dislike|hates|avoid", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^\s*[-*]\s*(?:\.\.\.|…|\(none\)|none|n/a|tbd)?\s*$", re.IGNORECASE)
_KV = re.compile(r"^(\s*[-*]\s*)([^:]{1,40}):(.*)$")


def _apply_to_template(markdown: str, facts: ProfileFacts) -> str:
    lines = markdown.rstrip("\n").splitlines()
    scalars = {"name": facts.name, "timezone": facts.timezone}
    patterns = {"name": _FIELD_NAME, "timezone": _FIELD_TZ}
    for what, value in scalars.items():
        if not value:
            continue
        for i, line in enumerate(lines):
            m = _KV.match(line)
            if m and patterns[what].search(m.group(2).strip()):
                lines[i] = f"{m.group(1)}{m.group(2)}: {value}"
                break

    def section(pattern) -> tuple[int, int] | None:
        for i, line in enumerate(lines):
            if line.lstrip().startswith("#") and pattern.search(line):
                end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("#")), len(lines))
                return i, end
        return None

    def rewrite(pattern, fn) -> None:
        span = section(pattern)
        if span is not None:
            i, end = span
            body = lines[i + 1:end]
            items = [re.sub(r"^\s*[-*]\s*", "", b).strip() for b in body
                     if b.strip() and not _PLACEHOLDER.match(b) and not _KV.match(b)]
            keep = [b for b in body if _KV.match(b)]
            new = fn(items)
            if new != items:
                lines[i + 1:end] = keep + ([f"- {x}" for x in new] or ["-"])
            return
        for j, line in enumerate(lines):
            m = _KV.match(line)
            if m and pattern.search(m.group(2)):
                items = [x.strip() for x in m.group(3).split(";") if x.strip()]
                new = fn(items)
                if new != items:
                    lines[j] = f"{m.group(1)}{m.group(2)}: " + "; ".join(new)
                return

    if facts.goals_added or facts.goals_dropped:
        rewrite(_FIELD_GOAL, lambda items: apply_goals(items, facts.goals_added, facts.goals_dropped))
    if facts.preferences:
        rewrite(_FIELD_PREF, lambda items: apply_preferences(items, facts.preferences, facts.revision))
    return "\n".join(lines) + "\n"


def _schema_fields(node: dict[str, Any], root: dict[str, Any], path: tuple = ()) -> list[tuple[tuple, dict]]:
    node = _resolve(node, root)
    out = []
    for name, sub in (node.get("properties") or {}).items():
        sub = _resolve(sub, root)
        if sub.get("type") == "object" and sub.get("properties"):
            out.extend(_schema_fields(sub, root, path + (name,)))
        else:
            out.append((path + (name,), sub))
    return out


def _get_path(data: dict, path: tuple) -> Any:
    for p in path:
        if not isinstance(data, dict):
            return None
        data = data.get(p)
    return data


def _set_path(data: dict, path: tuple, value: Any) -> None:
    for p in path[:-1]:
        data = data.setdefault(p, {})
    data[path[-1]] = value


def _apply_to_schema(schema: dict, current: dict, facts: ProfileFacts) -> dict:
    fields = _schema_fields(schema, schema)
    update: dict[str, Any] = {}

    def find(pattern, types=("string",)):
        for path, sub in fields:
            if pattern.search(path[-1]) and (sub.get("type") in types or "type" not in sub):
                return path, sub
        return None

    def put_list(path, sub, fn):
        old = _get_path(current, path)
        if sub.get("type") == "array":
            items = [str(x) for x in old] if isinstance(old, list) else []
            new = fn(items)
            if new != items:
                _set_path(update, path, new)
        else:
            items = [x.strip() for x in str(old or "").split(";") if x.strip()]
            new = fn(items)
            if new != items:
                _set_path(update, path, "; ".join(new))

    for value, pattern in ((facts.name, _FIELD_NAME), (facts.timezone, _FIELD_TZ)):
        hit = find(pattern) if value else None
        if hit and _get_path(current, hit[0]) != value:
            _set_path(update, hit[0], value)
    goal = find(_FIELD_GOAL, ("array", "string"))
    if goal and (facts.goals_added or facts.goals_dropped):
        put_list(*goal, lambda items: apply_goals(items, facts.goals_added, facts.goals_dropped))
    if facts.preferences:
        likes, dislikes = find(_FIELD_LIKES, ("array",)), find(_FIELD_DISLIKES, ("array",))
        if likes and dislikes:
            for pref in facts.preferences:
                target, other = (likes, dislikes) if pref.polarity > 0 else (dislikes, likes)
                put_list(*other, lambda items, p=pref: [i for i in items if not _same_subject(p, i, True)])
                put_list(*target, lambda items, p=pref: [i for i in items if not _same_subject(p, i, True)] + [p.obj])
                current = _merge(current, update)
        else:
            pref = find(_FIELD_PREF, ("array", "string"))
            if pref:
                put_list(*pref, lambda items: apply_preferences(items, facts.preferences, facts.revision))
    return update


def _apply_to_text(text: str, facts: ProfileFacts) -> str:
    lines = [line for line in text.splitlines() if line.strip()]

    def set_line(label, value):
        for i, line in enumerate(lines):
            if line.lower().startswith(label.lower() + ":"):
                lines[i] = f"{label}: {value}"
                return
        lines.append(f"{label}: {value}")

    if facts.name:
        set_line("Name", facts.name)
    if facts.timezone:
        set_line("Timezone", facts.timezone)
    goals = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("goal:")]
    prefs = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("preference:")]
    new_goals = apply_goals(goals, facts.goals_added, facts.goals_dropped)
    new_prefs = apply_preferences(prefs, facts.preferences, facts.revision)
    lines = [line for line in lines if not line.lower().startswith(("goal:", "preference:"))]
    lines += [f"Goal: {g}" for g in new_goals] + [f"Preference: {p}" for p in new_prefs]
    return "\n".join(lines) + "\n"


def _tag(body: str, name: str) -> str | None:
    m = re.search(rf"<{name}>\n?(.*?)\n?</{name}>", body, re.DOTALL)
    return m.group(1) if m else None


@offline_skill(TASK)
def offline_update_working_memory(messages: Sequence[Message], tools=None, response_format=None) -> str:
    """Deterministic profile upkeep: name, timezone, goals and preferences from the user's message."""
    system = next(m.content for m in messages if m.role == "system")
    user = [m for m in messages if m.role == "user"]
    if not user:
        return NO_CHANGE
    if len(user) > 1 and "rejected" in user[-1].content:
        return NO_CHANGE  # a retry after a rejected update: rules give the same answer, so stop
    facts = profile_facts(user[-1].content)
    if facts.empty:
        return NO_CHANGE
    fmt = re.search(r"^Format:\s*(\w+)", system, re.MULTILINE)
    fmt = fmt.group(1) if fmt else "text"
    current = _tag(system, "current") or ""
    if fmt == "schema":
        schema = json.loads(_tag(system, "schema") or "{}")
        update = _apply_to_schema(schema, json.loads(current) if current.strip() else {}, facts)
        return json.dumps(update, ensure_ascii=False) if update else NO_CHANGE
    if fmt == "template":
        base = current if current.strip() else (_tag(system, "template") or "")
        new = _apply_to_template(base, facts)
        return new if new.strip() != current.strip() else NO_CHANGE
    new = _apply_to_text(current, facts)
    return new if new.strip() != current.strip() else NO_CHANGE
