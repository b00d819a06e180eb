"""Tools an agent can call: a Python function plus the OpenAI tool schema that describes it.
A tool never raises: errors come back as ``{"error": "..."}`` for the model to read.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)


class ToolError(Exception):
    """Raised inside a tool function for a problem the model should read (bad argument, ...)."""


@dataclass
class Tool:
    """``read_only``: the tool only reads, so an agent may run it again without asking the model
    (replaying a stored workflow); a tool that writes or sends is never replayed."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] = field(repr=False)
    read_only: bool = False

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools=[...]`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": self.parameters}}

    def run(self, arguments: str | dict[str, Any] | None) -> str:
        """Call the function with JSON arguments; always returns a JSON string."""
        try:
            args = parse_arguments(arguments)
            allowed = set(self.parameters.get("properties", {}))
            unknown = set(args) - allowed
            if unknown:
                raise ToolError(f"unknown argument(s) {sorted(unknown)}; expected {sorted(allowed)}")
            missing = [p for p in self.parameters.get("required", []) if p not in args]
            if missing:
                raise ToolError(f"missing required argument(s) {missing}")
            result = self.fn(**args)
        except (ToolError, ValueError, TypeError) as exc:
            return json.dumps({"error": f"{self.name}: {exc}"})
        except Exception as exc:  # a tool failure is data for the model, not a crash of the turn
            log.warning("tool %s failed: %s", self.name, exc, exc_info=True)
            return json.dumps({"error": f"{self.name} failed: {type(exc).__name__}: {exc}"})
        return result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """A call's arguments as a dict (the model sends a JSON string); ValueError when they are not an object."""
    args = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
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
