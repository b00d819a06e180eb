"""Working memory's model-facing side: the prompt block, the get / update / clear tools, and the
``update_working_memory`` task. Uses only the store's public methods, so it does not import it.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from ..errors import ValidationError
from ..llm.task import Task, TaskFailed, Text, run_task
from ..llm.tools import Tool
from ..messages import as_messages

log = logging.getLogger(__name__)


class WorkingInput(BaseModel):
    """What the model sees: the format, the current content, the user's new message(s)."""

    format: Literal["template", "schema", "text"]
    description: str = Field(description="how the working memory is shaped")
    template: str | None = Field(None, description="the Markdown template (template format)")
    json_schema: dict[str, Any] | None = Field(None, description="the partial JSON schema (schema format)")
    current: str | dict[str, Any]
    messages: list[str] = Field(description="the user's new message(s), oldest first")
    limit: str
    rejected: str | None = Field(None, description="why the store rejected the previous answer, if it did")


class WorkingUpdate(BaseModel):
    """The model's answer: whether anything changes, the new content, and why."""

    changed: bool
    content: str | dict[str, Any] | None = Field(
        None, description="template / text: the complete new text; schema: only the fields that change")
    reason: Text

    @model_validator(mode="after")
    def _content_when_changed(self) -> "WorkingUpdate":
        if self.changed and (self.content is None or self.content == ""):
            raise ValueError("changed is true but content is empty: send the new content, or changed=false")
        return self


class TextUpdate(WorkingUpdate):
    """Template and text formats: the content is the complete new text."""

    content: str | None = Field(None, description="the complete new text, every template section kept")


class FieldsUpdate(WorkingUpdate):
    """Schema format: the content holds only the fields that change."""

    content: dict[str, Any] | None = Field(None, description="only the fields that change, lists in full")


def _render(inp: WorkingInput) -> str:
    current = json.dumps(inp.current, ensure_ascii=False) if isinstance(inp.current, dict) else (
        inp.current.strip() or "(empty)")
    lines = [f"Format: {inp.format}. {inp.description}", f"Limit: {inp.limit}",
             "Current working memory:", current, "New messages from the user:",
             *[f"- {m}" for m in inp.messages]]
    if inp.rejected:
        lines.append(f"Your previous answer was rejected: {inp.rejected}. Fix it, or answer changed=false.")
    return "\n".join(lines)


UPDATE_WORKING_MEMORY = Task(
    "update_working_memory",
    prompt="""You keep a user's working memory up to date: a short scratchpad about the user
(name, timezone, goals, preferences, or whatever its format holds). Read the user's new
messages and apply what they say: add new facts, replace corrected ones ("actually, call me
Sam"), remove goals the user dropped, replace a preference the user reversed. Do not invent
anything and stay within the limit. Answer with a JSON object: "changed" (false when the
messages hold nothing for the working memory), "content" (template or text format: the
complete new text, every template section kept; schema format: only the fields that change,
lists in full) and a short "reason".""",
    input=WorkingInput, output=WorkingUpdate, max_tokens=500, render=_render)
# One shape per format, so the JSON schema sent to a server pins what "content" is (a text store
# got a dict from a small model while the schema allowed both).
_BY_FORMAT = {"schema": replace(UPDATE_WORKING_MEMORY, output=FieldsUpdate),
              "template": replace(UPDATE_WORKING_MEMORY, output=TextUpdate),
              "text": replace(UPDATE_WORKING_MEMORY, output=TextUpdate)}


@dataclass
class Observation:
    """What :meth:`WorkingMemory.observe` did: ``changed``, the content now stored, and the error or reason."""

    changed: bool
    content: Any = None
    error: str | None = None
    reason: str = ""


def task_input(wm, current: Any, texts: list[str]) -> WorkingInput:
    """The task input for one store and its current content."""
    return WorkingInput(format=wm.format, description=wm.describe_format(), template=wm.template,
                        json_schema=wm.partial_schema() if wm.format == "schema" else None,
                        current=current, messages=texts, limit=wm.limit_text())


def observe(wm, message, llm, user_id: str, thread_id: str | None = None, retries: int = 1) -> Observation:
    """Run the task on the new user message(s) and write its update through the store's transaction;
    a failed task or an update still rejected after ``retries`` is logged and changes nothing."""
    texts = [m.content.strip() for m in as_messages(message) if m.role == "user" and m.content.strip()]
    if not texts:
        return Observation(False, wm.get(user_id, thread_id))
    inp = task_input(wm, wm.current(user_id, thread_id), texts)
    error = None
    for _ in range(retries + 1):
        try:
            out = run_task(llm, _BY_FORMAT[wm.format], inp)
        except TaskFailed as exc:
            log.warning("working memory left unchanged: %s", exc)
            return Observation(False, wm.get(user_id, thread_id), str(exc))
        if not out.changed:
            if error:
                log.warning("working memory left unchanged: update rejected: %s", error)
            return Observation(False, wm.get(user_id, thread_id), error, out.reason)
        try:
            before = wm.get(user_id, thread_id)
            new = wm.update(out.content, user_id, thread_id, source="observe")
            return Observation(new != before, new, None, out.reason)
        except ValidationError as exc:
            error = str(exc)
            inp = inp.model_copy(update={"rejected": error})
    log.warning("working memory left unchanged: update rejected: %s", error)
    return Observation(False, wm.get(user_id, thread_id), error)


def prompt_block(wm, user_id: str, thread_id: str | None = None, *, editable: bool = True) -> str:
    """Instruction + format + current content; ``editable=False`` when the model has no tools for it."""
    current = wm.get(user_id, thread_id)
    shown = "(empty)" if current is None else (
        json.dumps(current, ensure_ascii=False) if wm.format == "schema" else current.strip())
    where = "this conversation" if wm.scope == "conversation" else "this user, across conversations"
    how = (f"Update it with the update_working_memory tool when you learn something that matters later "
           f"(limit: {wm.limit_text()})." if editable else "It is kept up to date for you.")
    return (f"## Working memory ({wm.scope} scope)\n"
            f"A scratchpad for {where}, always shown here. {how}\n"
            f"{wm.describe_format()}\n"
            f"Current working memory:\n{shown}")


def memory_tools(wm, user_id: str, thread_id: str | None = None) -> list[Tool]:
    """get / update / clear tools bound to one user (and thread); errors come back as tool results."""
    wm.key(user_id, thread_id)  # validates ids and scope now, not at the first call
    if wm.format == "schema":
        content_param = {**wm.partial_schema(), "description": "only the fields to change; merged into the current value"}
    else:
        content_param = {"type": "string", "description": (
            "the complete new working memory" + (" (keep every template section)" if wm.format == "template" else ""))}

    def get_working_memory():
        return {"format": wm.format, "scope": wm.scope, "limit": wm.limit_text(),
                "content": wm.current(user_id, thread_id)}

    def update_working_memory(content):
        new = wm.update(content, user_id, thread_id, source="tool")
        return {"ok": True, "size": wm.size(new), "limit": wm.limit_text(), "content": new}

    def clear_working_memory():
        return {"ok": True, "cleared": wm.clear(user_id, thread_id, source="tool")}

    return [
        Tool("get_working_memory", f"Read the current working memory (the scratchpad for this {wm.scope}).",
             {"type": "object", "properties": {}}, get_working_memory),
        Tool("update_working_memory", "Replace the working memory"
             + (" fields given (partial update, validated against the schema)." if wm.format == "schema"
                else " with new content.") + f" Limit: {wm.limit_text()}; condense when over it.",
             {"type": "object", "properties": {"content": content_param}, "required": ["content"]},
             update_working_memory),
        Tool("clear_working_memory", "Empty the working memory (it can be restored by undo).",
             {"type": "object", "properties": {}}, clear_working_memory),
    ]
