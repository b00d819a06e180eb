"""The ``update_working_memory`` task: what the model reads (the format, the current content, the
user's new messages) and what it answers. :meth:`WorkingMemory.observe` runs it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from ..llm.task import Task, Text


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
        if self.changed and (self.content is None or isinstance(self.content, str) and not self.content.strip()):
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
# One output shape per format, so the JSON schema sent to a server pins what "content" is.
UPDATE_BY_FORMAT = {"schema": replace(UPDATE_WORKING_MEMORY, output=FieldsUpdate),
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
    """The task input for one working memory and its current content."""
    return WorkingInput(format=wm.format, description=wm.describe_format(), template=wm.template,
                        json_schema=wm.partial_schema() if wm.format == "schema" else None,
                        current=current, messages=texts, limit=wm.limit_text())
