"""Tools an agent can call: a Python function plus the OpenAI tool schema that describes it.
A tool never raises: errors come back as ``{"error": "..."}`` for the model to read.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .schema import hoist_defs

log = logging.getLogger(__name__)
_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


class ToolError(Exception):
    """Raised inside a tool function for a problem the model should read (bad argument, ...)."""


@dataclass
class Tool:
    """``read_only``: the tool only reads, so an agent may run it again without asking the model
    (replaying a stored workflow); a tool that writes or sends is never replayed. ``strict=False``: never sent
    in OpenAI's strict mode, which makes every parameter required (a partial update's fields among them)."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] = field(repr=False)
    read_only: bool = False
    strict: bool = True

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools=[...]`` entry (nested ``$defs`` moved to the root, where refs resolve)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": hoist_defs(self.parameters),
                                                 **({} if self.strict else {"strict": False})}}

    @cached_property
    def arguments(self) -> type[BaseModel]:
        """A pydantic model of the parameters: what a call's arguments are validated against."""
        return arguments_model(self.name, hoist_defs(self.parameters))

    def run(self, arguments: str | dict[str, Any] | None) -> str:
        """Call the function with JSON arguments; always returns a JSON string."""
        try:
            args = self.validate(parse_arguments(arguments))
            result = self.fn(**args)
        except (ToolError, ValueError, TypeError) as exc:
            return json.dumps({"error": f"{self.name}: {exc}"})
        except Exception as exc:  # a tool failure is data for the model, not a crash of the turn
            log.warning("tool %s failed: %s (traceback at DEBUG)", self.name, type(exc).__name__)
            log.debug("tool %s failed", self.name, exc_info=True)  # its message may hold the call's arguments
            return json.dumps({"error": f"{self.name} failed: {type(exc).__name__}: {exc}"})
        return result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)


    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` checked by :attr:`arguments`; optional ones sent as null (strict mode) are left out."""
        try:
            given = self.arguments.model_validate(args)
        except ValidationError as exc:
            raise ToolError("; ".join(_problem(e) for e in exc.errors()[:3])) from None
        required = set(self.parameters.get("required", []))
        return {k: v for k, v in given.model_dump(exclude_unset=True).items() if v is not None or k in required}


def _problem(error: dict[str, Any]) -> str:
    where = ".".join(map(str, error["loc"])) or "arguments"
    if error["type"] == "extra_forbidden":
        return f"unknown argument {where!r}"
    if error["type"] == "missing":
        return f"missing required argument {where!r}"
    if error["type"] in ("literal_error", "enum"):
        return f"unknown {error['loc'][0]} {error.get('input')!r}: {error['msg']}"
    return f"{where}: {error['msg']}"


def _annotation(prop: dict[str, Any], defs: dict[str, Any], name: str) -> Any:
    """The Python type for one JSON-schema property (enums as Literal, arrays as list, refs followed)."""
    if "$ref" in prop:
        return _annotation(defs.get(prop["$ref"].rsplit("/", 1)[-1], {}), defs, name)
    if "enum" in prop:
        return Literal[tuple(prop["enum"])]
    if "anyOf" in prop or isinstance(prop.get("type"), list):
        options = prop.get("anyOf") or [{**prop, "type": t} for t in prop["type"]]
        return Union[tuple(_annotation(o, defs, name) for o in options)]
    kind = prop.get("type")
    if kind == "array":
        return list[_annotation(prop.get("items", {}), defs, name)]
    if kind == "object":  # a nested object is the tool's own to validate (its messages say how to fix it)
        return dict[str, Any]
    return _TYPES.get(kind, Any)


def arguments_model(name: str, parameters: dict[str, Any]) -> type[BaseModel]:
    """A pydantic model built from a tool's JSON schema: types, enums, bounds, required and extra keys."""
    defs, required = parameters.get("$defs", {}), set(parameters.get("required", []))
    fields: dict[str, Any] = {}
    for key, prop in (parameters.get("properties") or {}).items():
        bounds = {k: prop[b] for k, b in (("ge", "minimum"), ("le", "maximum")) if b in prop}
        kind = _annotation(prop, defs, f"{name}_{key}")
        fields[key] = (kind, Field(..., **bounds)) if key in required else (Optional[kind], Field(None, **bounds))
    extra = "allow" if parameters.get("additionalProperties") not in (None, False) else "forbid"
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra=extra), **fields)


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """A call's arguments as a dict (model-written JSON: raw line breaks in strings tolerated); else ValueError."""
    args = json.loads(raw, strict=False) if isinstance(raw, str) and raw.strip() else (raw or {})
    if not isinstance(args, dict):
        raise ValueError("arguments must be a JSON object")
    return args


def schemas(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [t.schema for t in tools]


def by_name(tools: Sequence[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


def call_tool(tools: Sequence[Tool], tool_call: dict[str, Any]) -> str:
    """Run one OpenAI-style tool call against a list of tools."""
    fn = tool_call.get("function", {})
    tool = by_name(tools).get(fn.get("name"))
    if tool is None:
        return json.dumps({"error": f"no tool named {fn.get('name')!r}; available: {sorted(by_name(tools))}"})
    return tool.run(fn.get("arguments"))
