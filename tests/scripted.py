"""One stand-in chat model for the tests: it answers from a script, so a test can say exactly what
"the model" wrote (garbage, a placeholder, a timeout) and check what memorykit does with it."""
from __future__ import annotations

from memorykit.messages import Message


class ScriptedModel:
    """Each ``chat`` call answers the next item of ``script`` (text, a ``Message``, or an exception to
    raise); after the script, ``then`` answers: a fixed item repeated, or a model to delegate to.
    With neither left, the call fails the test. Every request is recorded in ``requests``."""

    def __init__(self, *script, then=None, label: str = "scripted"):
        self.script, self.then, self.label = list(script), then, label
        self.calls = 0
        self.requests: list[dict] = []

    def chat(self, messages, *, tools=None, tool_choice=None, response_format=None, max_tokens=None):
        self.calls += 1
        self.requests.append({"messages": messages, "tools": tools, "response_format": response_format,
                              "max_tokens": max_tokens})
        if self.script:
            item = self.script.pop(0)
        elif hasattr(self.then, "chat"):
            return self.then.chat(messages, tools=tools)
        elif self.then is not None:
            item = self.then
        else:
            raise AssertionError(f"call {self.calls}: the model's script has no reply left")
        if isinstance(item, Exception):
            raise item
        return item if isinstance(item, Message) else Message(role="assistant", content=item)
