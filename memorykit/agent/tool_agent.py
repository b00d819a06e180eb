"""A tool-using agent with procedural memory: the ``plan_tools`` task run by the one tool loop.

The model gets a similar past question's pattern (a ProcedureStore) and the user's good and bad
answers (a FeedbackStore), from one embedding of the question; a very close question's read-only
calls are replayed first, for the model to check. A run scoring >= 0.7 is kept, with its calls.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from pydantic import BaseModel, Field

from ..errors import ValidationError
from ..keys import check_id
from ..llm.task import Task, TaskFailed, track_usage
from ..llm.tools import Tool, by_name, call_tool, parse_arguments
from ..memory.feedback import FeedbackStore, Guidance
from ..memory.index import forgotten_since
from ..memory.procedural import (MIN_SUCCESS_SCORE, Evaluation, ProcedureHit, ProcedureStore, evaluate_workflow,
                                 tool_error)
from ..messages import Message
from .loop import run_tool_loop
from .turn import reason, said

log = logging.getLogger(__name__)

PLAN_PROMPT = """You are an assistant with tools over the user's own records.
Call the tools you need (several at once if you already know them), read the results, and
answer briefly from the results only. A question comparing two measures needs data for both.
If a tool returns an error, say so instead of guessing."""

# Replay a past question's calls from this cosine similarity up. Chosen on the calibration split of
# data/routes/tools.jsonl: from 0.75 the nearest past question needed the same tools 26 times in 27.
REPLAY_SIMILARITY = 0.75


# ================================================================ the plan_tools task
class Suggestion(BaseModel):
    """A stored pattern: the tools that answered a similar question well."""

    tools: list[str]
    query: str = Field(description="the similar question the pattern came from")
    similarity: float
    replayed: bool = Field(False, description="its calls were run again for this question (the first steps)")


class PlanInput(BaseModel):
    """What the planner sees: the question, an optional pattern and feedback, the tool exchange so far."""

    query: str
    suggestion: Suggestion | None = None
    guidance: Guidance | None = Field(None, description="feedback examples: answers to follow and to avoid")
    steps: list[Message] = Field(default_factory=list, description="the tool exchange so far")


def plan_system(inp: PlanInput) -> str:
    text = PLAN_PROMPT
    if inp.suggestion is not None:
        s = inp.suggestion
        text += (f"\n\nA similar question ({s.query!r}, similarity {s.similarity:.2f}) was answered well with "
                 f"these tools: {', '.join(s.tools)}. ")
        text += ("Its tool calls were run again for this question; their results follow. If every one of them "
                 "fits this question (same tools, same arguments), answer from them. If not, call all the tools "
                 "this question needs with the right arguments; the replayed results are then set aside."
                 if s.replayed else "Call them together unless this question needs others.")
    if inp.guidance:
        text += "\n\n" + inp.guidance.block
    return text


def build_plan(inp: PlanInput) -> list[Message]:
    return [Message(role="system", content=plan_system(inp)), Message(role="user", content=inp.query), *inp.steps]


PLAN = Task("plan_tools", prompt=PLAN_PROMPT, input=PlanInput, output=None, max_tokens=400, build=build_plan,
            render=lambda inp: "\n\n".join(m.content for m in build_plan(inp)))


# ================================================================ the run record
@dataclass
class ToolRun:
    query: str
    user_id: str
    reply: str = ""
    tools_used: list[str] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    replayed: int = 0
    execution_time_ms: float = 0.0
    suggestion: ProcedureHit | None = None
    guidance: Guidance | None = None
    evaluation: Evaluation | None = None
    stored: bool = False
    failure: str | None = None
    messages: list[Message] = field(default_factory=list, repr=False)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The tool calls the answer stands on that worked, as ``{"name", "arguments"}`` (what a pattern stores)."""
        return [{"name": t["name"], "arguments": parse_arguments(t["arguments"])} for t in self.tool_results
                if not tool_error(t["content"])]   # a call with bad arguments came back as a tool error

    @property
    def errors(self) -> list[str]:
        return [e for e in (tool_error(r["content"]) for r in self.tool_results) if e]


@dataclass
class _Traced(Tool):
    """A tool that records each call in a shared list (kept even when the loop gives up)."""

    trace: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def run(self, arguments) -> str:
        content = super().run(arguments)
        self.trace.append({"name": self.name, "arguments": arguments, "content": content})
        return content


class ToolAgent:
    """One question in, a :class:`ToolRun` out. ``max_steps`` bounds the LLM round trips; ``learn=False``
    uses stored patterns without adding to them."""

    def __init__(self, redis_client=None, llm=None, tools: Sequence[Tool] = (),
                 procedures: ProcedureStore | None = None, feedback: FeedbackStore | None = None,
                 max_steps: int = 6, learn: bool = True):
        from ..llm.factory import get_llm

        self.redis = redis_client
        self.llm = llm or get_llm()
        self.tools = list(tools)
        self.procedures = procedures
        self.feedback = feedback
        self.max_steps = max_steps
        self.learn = learn

    def _recall(self, run: ToolRun) -> Any:
        """Procedure suggestion and feedback examples, from one embedding of the question."""
        store = self.procedures or self.feedback
        vector = store.embedder.embed(run.query) if store is not None else None
        if self.procedures is not None:
            run.suggestion = next(iter(self.procedures.suggest(run.query, k=1, user_id=run.user_id,
                                                               vector=vector)), None)
        if self.feedback is not None:
            run.guidance = self.feedback.examples(run.query, run.user_id, vector=vector)
        return vector

    def _replay(self, run: ToolRun, tools: Sequence[Tool]) -> list[Message]:
        """The nearest past question's calls, run again: when it is close enough, every tool only reads and
        every call still has its required arguments (a shared pool keeps only bounded ones)."""
        s, offered = run.suggestion, by_name(tools)
        if s is None or s.similarity < REPLAY_SIMILARITY or not s.calls:
            return []
        if not all(c["name"] in offered and offered[c["name"]].read_only
                   and set(offered[c["name"]].parameters.get("required", [])) <= set(c["arguments"])
                   for c in s.calls):
            return []
        calls = [{"id": f"replay_{i}", "type": "function",
                  "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], sort_keys=True)}}
                 for i, c in enumerate(s.calls)]
        results = [Message(role="tool", content=call_tool(tools, c), tool_call_id=c["id"], name=c["function"]["name"])
                   for c in calls]
        return [Message(role="assistant", content="", tool_calls=calls), *results]

    def run(self, query: str, user_id: str) -> ToolRun:
        check_id(user_id, "user_id")
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("the agent needs a non-empty question")
        started, store = time.perf_counter(), self.procedures
        forgotten = forgotten_since(store.redis, store.namespace, user_id) if store is not None else None
        run = ToolRun(query=query, user_id=user_id)
        vector = self._recall(run)
        trace: list[dict[str, Any]] = []
        tools = [_Traced(t.name, t.description, t.parameters, t.fn, t.read_only, trace=trace) for t in self.tools]
        replay = self._replay(run, tools)
        run.replayed = len(trace)
        s = run.suggestion
        inp = PlanInput(query=query, guidance=run.guidance or None, steps=replay,
                        suggestion=Suggestion(tools=s.procedure.tools_used, query=s.procedure.query,
                                              similarity=round(s.similarity, 4), replayed=bool(replay)) if s else None)
        run.messages = PLAN.messages(inp.model_copy(update={"steps": []}))
        with track_usage() as calls:
            try:
                result = run_tool_loop(self.llm, PLAN, inp, tools, max_steps=max(0, self.max_steps - 1),
                                       provisional=len(replay))
                run.reply = result.reply.content or ""
                run.messages += [*result.steps, result.reply]
            except TaskFailed as exc:
                run.failure = said(exc)  # an app may show it: a model error by its kind (the log has the text)
                log.info("tool agent: %s", reason(exc))
        run.steps = sum(1 for c in calls if c.task == PLAN.name)
        kept = trace[run.replayed:] or trace   # once the model calls tools itself, the replay is set aside
        run.tools_used = [t["name"] for t in kept]
        run.tool_results = kept
        run.execution_time_ms = (time.perf_counter() - started) * 1000
        run.evaluation = evaluate_workflow(run.tools_used, [r["content"] for r in kept], run.reply,
                                           run.execution_time_ms)
        if (self.learn and forgotten is not None and run.evaluation.success_score >= MIN_SUCCESS_SCORE
                and not forgotten()):  # forget_user ran meanwhile: nothing of this run is kept
            run.stored = self.procedures.store(query, run.tools_used, run.evaluation.success_score,
                                               run.execution_time_ms, user_id=user_id, vector=vector,
                                               calls=run.calls,
                                               parameters={t.name: t.parameters for t in self.tools}) is not None
        return run


__all__ = ["ToolAgent", "ToolRun", "PLAN", "PLAN_PROMPT", "PlanInput", "Suggestion", "build_plan",
           "REPLAY_SIMILARITY"]
