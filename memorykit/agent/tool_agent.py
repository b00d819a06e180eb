"""A small tool loop with procedural memory: the model picks tools, tools run, the model answers.

``ToolAgent(r, llm, tools, procedures=None, feedback=None).run(query, user_id)`` returns a
:class:`ToolRun` record (tools used, results, LLM round trips, time, reply, the pattern it
followed). With a :class:`~memorykit.procedural.ProcedureStore`, the agent first looks for
the pattern of a similar past question and puts it in the prompt; after the run it scores
the workflow and keeps the pattern when the score is >= 0.7. With a
:class:`~memorykit.procedural.FeedbackStore`, the user's closest good and bad examples go
into the prompt too.

The offline model's ``plan_tools`` skill behaves like a cautious model: without a
suggestion it explores one tool at a time and checks whether the results cover what the
question asks; with a suggestion it calls the suggested tools at once.
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..keys import check_id
from ..llm import offline_skill, task_prompt
from ..messages import Message
from ..memory.procedural import (Evaluation, FeedbackStore, Guidance, ProcedureHit, ProcedureStore, evaluate_workflow,
                         response_format, tool_error)
from ..offline.text import content_words, normalize, stem, words
from ..llm.tools import Tool, call_tool, schemas

PLAN_PROMPT = """You are a wellness assistant with tools over the user's own health records.
Call the tools you need (several at once if you already know them), read the results, and
answer briefly from the results only. A question comparing two measures needs data for both.
If a tool returns an error, say so instead of guessing."""


# ================================================================ the run record
@dataclass
class ToolRun:
    query: str
    user_id: str
    reply: str = ""
    tools_used: list[str] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    execution_time_ms: float = 0.0
    suggestion: ProcedureHit | None = None
    guidance: Guidance | None = None
    evaluation: Evaluation | None = None
    stored: bool = False
    messages: list[Message] = field(default_factory=list, repr=False)

    @property
    def errors(self) -> list[str]:
        return [e for e in (tool_error(r["content"]) for r in self.tool_results) if e]

    def row(self) -> dict[str, Any]:
        """One line for a pandas table."""
        return {"query": self.query, "tools": " + ".join(self.tools_used), "steps": self.steps,
                "time_ms": round(self.execution_time_ms, 1), "suggested": self.suggestion is not None,
                "score": self.evaluation.success_score if self.evaluation else None}


class ToolAgent:
    """One question in, a :class:`ToolRun` out. ``max_steps`` bounds the LLM round trips."""

    def __init__(self, redis_client=None, llm=None, tools: Sequence[Tool] = (),
                 procedures: ProcedureStore | None = None, feedback: FeedbackStore | None = None,
                 max_steps: int = 6, min_similarity: float = 0.6, learn: bool = True,
                 per_user_procedures: bool = False):
        from ..llm import get_llm

        self.redis = redis_client
        self.llm = llm or get_llm()
        self.tools = list(tools)
        self.procedures = procedures
        self.feedback = feedback
        self.max_steps = max_steps
        self.min_similarity = min_similarity
        self.learn = learn
        self.per_user_procedures = per_user_procedures

    def system_prompt(self, suggestion: ProcedureHit | None, guidance: Guidance | None) -> str:
        text = PLAN_PROMPT
        if suggestion is not None:
            p = suggestion.procedure
            text += (f"\n\nSuggested tools (from a similar successful question, similarity "
                     f"{suggestion.similarity:.2f}; follow it when similarity >= {self.min_similarity:.2f}): "
                     f"{', '.join(p.tools_used)}\nThat question was: {p.query}")
        if guidance:
            text += "\n\n" + guidance.block
        return task_prompt("plan_tools", text)

    def run(self, query: str, user_id: str) -> ToolRun:
        check_id(user_id, "user_id")
        if not isinstance(query, str) or not query.strip():
            from ..errors import ValidationError

            raise ValidationError("the agent needs a non-empty question")
        started = time.perf_counter()
        run = ToolRun(query=query, user_id=user_id)
        if self.procedures is not None:
            hits = self.procedures.suggest(query, k=1, distance_threshold=1.0 - self.min_similarity,
                                           user_id=user_id if self.per_user_procedures else None)
            run.suggestion = hits[0] if hits else None
        if self.feedback is not None:
            run.guidance = self.feedback.examples(query, user_id)
        messages = [Message(role="system", content=self.system_prompt(run.suggestion, run.guidance)),
                    Message(role="user", content=query)]
        tool_schemas = schemas(self.tools)
        while run.steps < self.max_steps:
            reply = self.llm.chat(messages, tools=tool_schemas)
            run.steps += 1
            messages.append(Message(role="assistant", content=reply.content or "", tool_calls=reply.tool_calls,
                                    name=reply.name))
            if not reply.tool_calls:
                run.reply = reply.content or ""
                break
            for call in reply.tool_calls:
                name = call.get("function", {}).get("name", "")
                content = call_tool(self.tools, call)
                run.tools_used.append(name)
                run.tool_results.append({"name": name, "arguments": call.get("function", {}).get("arguments"),
                                         "content": content})
                messages.append(Message(role="tool", content=content, tool_call_id=call.get("id"), name=name))
        run.execution_time_ms = (time.perf_counter() - started) * 1000
        run.messages = messages
        run.evaluation = evaluate_workflow(run.tools_used, [r["content"] for r in run.tool_results], run.reply,
                                           run.execution_time_ms)
        if self.learn and self.procedures is not None and run.evaluation.success_score >= self.procedures.min_score:
            stored = self.procedures.store(query, run.tools_used, run.evaluation.success_score, run.execution_time_ms,
                                           user_id=user_id if self.per_user_procedures else None)
            run.stored = stored is not None
        return run


# ================================================================ the offline planner
# Small, general word classes: a question word in a class matches any tool text in that class.
WORD_CLASSES: dict[str, tuple[str, ...]] = {
    "sleep": ("sleep", "slept", "sleeping", "asleep", "rest", "rested", "restful", "bedtime", "bed", "nap",
              "insomnia", "night", "nights", "nightly", "tired", "wake", "rests", "sleeps", "naps", "woke", "awake", "snooze"),
    "steps": ("step", "steps", "walk", "walked", "walking", "activity", "active", "move", "moving", "movement",
              "pedometer", "stride"),
    "workout": ("workout", "workouts", "exercise", "exercised", "exercising", "training", "train", "trained",
                "gym", "run", "ran", "running", "runs", "jog", "jogging", "cycle", "cycling", "ride", "rides",
                "bike", "biking", "swim", "swims", "swimming", "swam", "yoga", "lift", "lifting", "strength",
                "session", "sessions", "sport", "sports", "hiit", "cardio", "fitness", "activity", "active",
                "muscle", "muscles", "legs"),
    "heart": ("heart", "bpm", "pulse", "hr", "resting", "heartbeat", "cardiac", "cardiovascular"),
    "weight": ("weight", "weigh", "weighed", "bmi", "kg", "kilos", "kilograms", "pounds", "lbs", "heavier",
               "lighter", "mass", "body"),
    "goal": ("goal", "goals", "target", "targets", "aim", "aiming", "aims", "objective", "objectives",
             "resolution", "track", "plan", "plans"),
    "suggest": ("suggest", "suggestion", "suggestions", "tool", "tools", "pattern", "patterns", "workflow",
                "procedure", "procedural"),
}
META_CLASSES = {"suggest"}
_RAW_CLASS: dict[str, set[str]] = {}
for _cls, _words in WORD_CLASSES.items():
    for _w in _words:
        _RAW_CLASS.setdefault(_w, set()).add(_cls)
_STEM_CLASS: dict[str, set[str]] = {}
for _w, _classes in _RAW_CLASS.items():
    _STEM_CLASS.setdefault(stem(_w), set()).update(_classes)

_PHRASES = re.compile(r"\b(work(ed|ing|s)? ?out|shut[- ]?eye|lie[- ]?in)\b", re.I)
_ISO = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


def word_classes(word: str) -> set[str]:
    """Classes of one word: exact form first ("resting" is not "rest"), then its stem."""
    w = word.lower()
    if w in _RAW_CLASS:
        return _RAW_CLASS[w]
    return _STEM_CLASS.get(stem(w), set())


def classes_of(text: str, ambiguous: bool = True) -> set[str]:
    """Word classes a text mentions. ``ambiguous=False`` ignores words in several classes
    ("activity"): a question using them may mean either, a tool describing itself with them
    does not cover both."""
    out: set[str] = set()
    text = _PHRASES.sub(lambda m: " workout " if m.group(0).lower().startswith("work") else " sleep ", text)
    for w in words(text):
        found = word_classes(w)
        if ambiguous or len(found) == 1:
            out |= found
    return out


@dataclass
class ToolProfile:
    name: str
    terms: set[str]
    classes: set[str]
    properties: dict[str, Any]


def profile(schema: dict[str, Any]) -> ToolProfile:
    fn = schema.get("function", schema)
    props = fn.get("parameters", {}).get("properties", {})
    about = fn.get("name", "").replace("_", " ") + " " + fn.get("description", "")
    enums = []
    for spec in props.values():
        enum = spec.get("enum") or spec.get("items", {}).get("enum") or []
        enums += [str(v).replace("_", " ") for v in enum if not str(v).startswith(("last_", "this_"))]
    # what a tool covers comes from its name and description; enum values only help scoring
    return ToolProfile(fn.get("name", ""), content_words(about + " " + " ".join(enums)), covered_classes(about), props)


def covered_classes(about: str) -> set[str]:
    """Classes a tool is *about*: named at least twice in its description (a passing mention
    like "fitness goals" does not make a goals tool a workout tool)."""
    about = _PHRASES.sub(lambda m: " workout " if m.group(0).lower().startswith("work") else " sleep ", about)
    counts: dict[str, int] = {}
    for w in words(about):
        found = word_classes(w)
        if len(found) == 1:
            (c,) = found
            counts[c] = counts.get(c, 0) + 1
    return {c for c, n in counts.items() if n >= 2}


def score_tools(query: str, profiles: Sequence[ToolProfile]) -> dict[str, float]:
    """Overlap of the question with each tool's words (rarer words weigh more) plus word classes."""
    q_words, q_classes = content_words(query), classes_of(query)
    n = len(profiles)
    scores = {}
    for p in profiles:
        s = 0.0
        for w in q_words & p.terms:
            df = sum(1 for o in profiles if w in o.terms)
            s += math.log(1 + n / df)
        s += 2.0 * len(q_classes & p.classes)
        scores[p.name] = s
    return scores


def periods_in(query: str, allowed: Sequence[str]) -> list[str]:
    """Named periods mentioned in the question, in order ("this month vs last" -> this_month, last_month)."""
    q = normalize(query).lower()
    found: list[tuple[int, str]] = []
    for m in re.finditer(r"\b(this|current|last|past|previous|prior)\s+(week|month)\b", q):
        rel = "this" if m.group(1) in ("this", "current") else "last"
        found.append((m.start(), f"{rel}_{m.group(2)}"))
    for m in re.finditer(r"\b(?:last|past|previous)\s+(\d+|three|two)\s+(days?|weeks?|months?)\b", q):
        num = {"two": 2, "three": 3}.get(m.group(1)) or int(m.group(1))
        days = num * {"d": 1, "w": 7, "m": 30}[m.group(2)[0]]
        options = sorted((int(a.split("_")[1]), a) for a in allowed if re.fullmatch(r"last_\d+_days", a))
        pick = next((a for d, a in options if d >= days), options[-1][1] if options else None)
        if pick:
            found.append((m.start(), pick))
    for m in re.finditer(r"\b(\w+)\s+(weeks?|months?)\b", q):
        if m.group(1) in ("three", "3") and m.group(2).startswith("month"):
            found.append((m.start(), "last_90_days"))
    for word, period in (("today", "today"), ("last night", "today"), ("yesterday", "yesterday"),
                         ("lately", "last_30_days"), ("recently", "last_30_days"),
                         ("all time", "all"), ("overall", "all"), ("ever", "all")):
        for m in re.finditer(rf"\b{word}\b", q):
            found.append((m.start(), period))
    # "this month vs last": the unit carries over to the elliptic second period
    ell = re.search(r"\b(this|last)\s+(week|month)\b.*?\b(vs\.?|versus|compared (?:to|with)|against|than|and|to)\s+"
                    r"(?:the\s+)?(last|previous|prior|one before)\b(?!\s+(?:week|month|\d))", q)
    if ell:
        rel = "last" if ell.group(1) == "this" else "this"
        found.append((ell.end(), f"{rel}_{ell.group(2)}"))
    out = []
    for _, period in sorted(found):
        if period in allowed and period not in out:
            out.append(period)
    compare = re.search(r"\b(compar\w*|vs\.?|versus|than|against|change[sd]?|improv\w*|better|worse|"
                        r"since|dropp?\w*|differen\w*)\b", q)
    if compare and len(out) == 1 and out[0].startswith("last_") and out[0].count("_") == 1:
        current = "this_" + out[0].split("_")[1]
        if current in allowed:
            out = [current, out[0]]
    return out


def _enum_matches(query: str, values: Sequence[str]) -> list[str]:
    q_words, q_classes = content_words(query), classes_of(query)
    hits = []
    for v in values:
        v_text = str(v).replace("_", " ")
        v_words = content_words(v_text)
        if (v_words and v_words <= q_words) or (classes_of(v_text) & q_classes and classes_of(v_text) - {"workout"}):
            hits.append(v)
    return hits


def arguments_for(query: str, p: ToolProfile) -> dict[str, Any]:
    """Arguments from the question and the tool's schema: periods, enum filters, the question itself."""
    args: dict[str, Any] = {}
    props = p.properties
    dates = _ISO.findall(query)
    if "start_date" in props and len(dates) >= 1:
        args["start_date"] = dates[0]
        if len(dates) >= 2 and "end_date" in props:
            args["end_date"] = dates[1]
    elif "period" in props:
        allowed = props["period"].get("enum", [])
        found = periods_in(query, allowed)
        if found:
            args["period"] = found[0]
            if len(found) > 1 and "compare_period" in props:
                args["compare_period"] = found[1]
    for name, spec in props.items():
        if name in ("period", "compare_period", "start_date", "end_date"):
            continue
        if spec.get("type") == "array" and spec.get("items", {}).get("enum"):
            hits = _enum_matches(query, spec["items"]["enum"])
            if hits:
                args[name] = hits
        elif spec.get("enum"):
            hits = [v for v in spec["enum"] if content_words(str(v).replace("_", " ")) <= content_words(query)]
            if len(hits) == 1:
                args[name] = hits[0]
        elif name == "query" and spec.get("type") == "string":
            args[name] = query
    return args


def _call(name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
    return {"id": f"call_{n}_{name}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)}}


_SUGGESTION = re.compile(r"Suggested tools \(.*?similarity ([\d.]+); follow it when similarity >= ([\d.]+)\): (.+)")


def _guidance(system: str) -> tuple[list[dict], list[dict]]:
    good, bad = [], []
    for line in system.splitlines():
        for tag, bucket in (("GOOD: ", good), ("BAD: ", bad)):
            if line.startswith(tag):
                try:
                    bucket.append(json.loads(line[len(tag):]))
                except ValueError:
                    pass
    return good, bad


def _answer_format(query: str, good: list[dict], bad: list[dict]) -> str:
    q = query.lower()
    if re.search(r"\bjson\b", q):
        return "json"
    if re.search(r"\b(bullet|list)\b", q):
        return "bullets"
    liked = [response_format(e.get("response", "")) for e in good]
    avoided = {response_format(e.get("response", "")) for e in bad}
    if liked:
        return liked[0]
    if "prose" in avoided:
        return "bullets"
    return "prose"


def compose_answer(query: str, results: list[tuple[str, str]], fmt: str) -> str:
    """The final answer from tool results: their summaries, in the requested shape."""
    if not results:
        return ("(offline) I couldn't find a tool for that. I can look at sleep, workouts, "
                "heart rate, steps, weight and your goals.")
    data, lines = {}, []
    for name, content in results:
        err = tool_error(content)
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = {"result": content}
        if err:
            lines.append(f"{name} reported a problem: {err}")
            data[name] = {"error": err}
            continue
        lines.append(parsed.get("summary", content) if isinstance(parsed, dict) else str(parsed))
        data[name] = {k: v for k, v in parsed.items() if k != "summary"} if isinstance(parsed, dict) else parsed
    if fmt == "json":
        return "(offline) Here it is as JSON:\n```json\n" + json.dumps(data, indent=1, sort_keys=True) + "\n```"
    if fmt == "bullets":
        return "(offline) Here is what I found:\n" + "\n".join(f"- {ln}" for ln in lines)
    return "(offline) " + " ".join(lines)


@offline_skill("plan_tools")
def offline_plan_tools(messages: Sequence[Message], tools=None, response_format=None) -> Message | str:
    """A cautious planner: explore one tool at a time without a suggestion; follow a good one at once."""
    system = next((m.content for m in messages if m.role == "system"), "")
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    query = messages[last_user].content if last_user >= 0 else ""
    turn = messages[last_user + 1:]
    called = [c["function"]["name"] for m in turn if m.role == "assistant" for c in (m.tool_calls or [])]
    results = [(m.name or "", m.content) for m in turn if m.role == "tool"]
    profiles = [profile(t) for t in tools or []]
    by_name = {p.name: p for p in profiles}
    needed = classes_of(query) - (set() if classes_of(query) <= META_CLASSES else META_CLASSES)
    covered = set().union(*(by_name[n].classes for n in called if n in by_name)) if called else set()

    if not called:
        hint = _SUGGESTION.search(system)
        if hint and float(hint.group(1)) >= float(hint.group(2)):
            suggested = [n.strip() for n in hint.group(3).split(",") if n.strip() in by_name]
            if suggested:
                return Message(role="assistant", content="", tool_calls=[
                    _call(n, arguments_for(query, by_name[n]), i) for i, n in enumerate(suggested)])
    remaining = needed - covered
    candidates = [p for p in profiles if p.name not in called and (p.classes & remaining)]
    if not called and not candidates:
        candidates = [p for p in profiles if not (p.classes <= META_CLASSES and p.classes)]
    if candidates and (remaining or not called):
        scores = score_tools(query, candidates)
        best = max(candidates, key=lambda p: (len(p.classes & remaining), scores[p.name], -profiles.index(p)))
        if scores[best.name] > 0:
            return Message(role="assistant", content="", tool_calls=[
                _call(best.name, arguments_for(query, best), len(called))])
    good, bad = _guidance(system)
    return compose_answer(query, results, _answer_format(query, good, bad))


__all__ = ["ToolAgent", "ToolRun", "PLAN_PROMPT", "WORD_CLASSES", "score_tools", "periods_in", "arguments_for",
           "classes_of", "compose_answer"]
