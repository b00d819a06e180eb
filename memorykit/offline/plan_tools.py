"""Offline ``plan_tools``: which tools a question needs, from a model learned on labelled questions.

The tool model (:mod:`.tool_model`: one-vs-rest logistic regressions on the question's embedding,
blended with the nearest labelled question's tools) gives the tool set, most likely first.

Like a cautious model, the planner without a stored pattern calls one tool per round trip,
most likely first, and reads each result before the next. A pattern from a similar
successful question lets it plan the whole set in one round trip: the pattern is one more
labelled question, and its tools replace the nearest training question's vote when it is the
closer of the two. When the agent replayed the pattern's calls, it checks them against the
calls it would make itself (same tools, same arguments): it answers at once when they agree,
and otherwise makes its own calls (the agent then sets the replay aside). Arguments come from
the question and the tool's schema.
"""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

from ..agent.tool_agent import PlanInput
from ..messages import Message
from .text import content_words, normalize
from .tool_model import tool_model

_ISO = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_COMPARE = re.compile(r"\b(compar\w*|vs\.?|versus|than|against|change[sd]?|improv\w*|better|worse|since|"
                      r"dropp?\w*|differen\w*)\b")


def route_tools(query: str, pattern: tuple[Sequence[str], float] | None = None) -> list[str]:
    """Tool names the question needs, most likely first; ``pattern``: a stored (tools, similarity)."""
    return tool_model().predict(query, pattern)


# ---------------------------------------------------------------- arguments
def periods_in(query: str, allowed: Sequence[str]) -> list[str]:
    """Named periods mentioned in the question, in order ("this month vs last" -> this_month, last_month)."""
    q = normalize(query).lower()
    found: list[tuple[int, str]] = []
    for m in re.finditer(r"\b(this|current|last|past|previous|prior)\s+(week|month)\b", q):
        rel = "this" if m.group(1) in ("this", "current") else "last"
        found.append((m.start(), f"{rel}_{m.group(2)}"))
    for m in re.finditer(r"\b(?:last|past|previous)\s+(\d+|two|three)\s+(days?|weeks?|months?)\b", q):
        num = {"two": 2, "three": 3}.get(m.group(1)) or int(m.group(1))
        days = num * {"d": 1, "w": 7, "m": 30}[m.group(2)[0]]
        options = sorted((int(a.split("_")[1]), a) for a in allowed if re.fullmatch(r"last_\d+_days", a))
        pick = next((a for d, a in options if d >= days), options[-1][1] if options else None)
        if pick:
            found.append((m.start(), pick))
    for word, period in (("today", "today"), ("last night", "today"), ("yesterday", "yesterday"),
                         ("lately", "last_30_days"), ("recently", "last_30_days"), ("all time", "all")):
        for m in re.finditer(rf"\b{word}\b", q):
            found.append((m.start(), period))
    # "this month vs last": the unit carries over to the elliptic second period
    ell = re.search(r"\b(this|last)\s+(week|month)\b.*?\b(vs\.?|versus|compared (?:to|with)|against|than|and|to)\s+"
                    r"(?:the\s+)?(last|previous|prior|one before)\b(?!\s+(?:week|month|\d))", q)
    if ell:
        found.append((ell.end(), f"{'last' if ell.group(1) == 'this' else 'this'}_{ell.group(2)}"))
    out: list[str] = []
    for _, period in sorted(found):
        if period in allowed and period not in out:
            out.append(period)
    if _COMPARE.search(q) and len(out) == 1 and re.fullmatch(r"last_(week|month)", out[0]):
        current = "this_" + out[0].split("_")[1]
        if current in allowed:
            out = [current, out[0]]
    return out


def _named(value: Any, query_words: set[str]) -> bool:
    """An enum value the question names: all its words (stemmed) occur in the question."""
    words = content_words(str(value).replace("_", " "))
    return bool(words) and words <= query_words


def arguments_for(query: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments from the question and a tool's JSON schema: dates, periods, named enum values."""
    props = schema.get("function", schema).get("parameters", {}).get("properties", {})
    q_words = content_words(query)
    args: dict[str, Any] = {}
    dates = _ISO.findall(query)
    if "start_date" in props and dates:
        args["start_date"] = dates[0]
        if len(dates) >= 2 and "end_date" in props:
            args["end_date"] = dates[1]
    elif "period" in props:
        found = periods_in(query, props["period"].get("enum", []))
        if found:
            args["period"] = found[0]
            if len(found) > 1 and "compare_period" in props:
                args["compare_period"] = found[1]
    for name, spec in props.items():
        if name in ("period", "compare_period", "start_date", "end_date"):
            continue
        if spec.get("type") == "array" and spec.get("items", {}).get("enum"):
            hits = [v for v in spec["items"]["enum"] if _named(v, q_words)]
            if hits:
                args[name] = hits
        elif spec.get("enum"):
            hits = [v for v in spec["enum"] if _named(v, q_words)]
            if len(hits) == 1:
                args[name] = hits[0]
        elif name == "query" and spec.get("type") == "string":
            args[name] = query
    return args


def _calls(query: str, names: Sequence[str], offered: dict[str, dict], start: int) -> Message:
    calls = [{"id": f"call_{start + i}_{n}", "type": "function",
              "function": {"name": n, "arguments": json.dumps(arguments_for(query, offered[n]), sort_keys=True)}}
             for i, n in enumerate(names)]
    return Message(role="assistant", content="", tool_calls=calls)


# ---------------------------------------------------------------- the answer
def response_format(text: str) -> str:
    """"json" | "bullets" | "prose": the shape of an answer (to follow or avoid an example)."""
    body = text.strip()
    if re.search(r"```(json)?\s*[\[{]", body) or re.match(r"^(\(offline\)[^\n]*\n)?\s*[\[{]", body):
        return "json"
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if sum(1 for ln in lines if re.match(r"^\s*([-*•]|\d+[.)])\s+", ln)) >= 2:
        return "bullets"
    return "prose"


def answer_format(inp: PlanInput) -> str:
    """The shape the question asks for, else the one the user liked, else not the one they disliked."""
    q = inp.query.lower()
    if re.search(r"\bjson\b", q):
        return "json"
    if re.search(r"\b(bullets?|list)\b", q):
        return "bullets"
    g = inp.guidance
    liked = [response_format(e.response) for e in (g.positives if g else [])]
    avoided = {response_format(e.response) for e in (g.negatives if g else [])}
    if liked:
        return liked[0]
    return "bullets" if "prose" in avoided else "prose"


def compose_answer(results: list[tuple[str, str]], fmt: str, offered: Sequence[str] = ()) -> str:
    """The final answer from tool results: their summaries, in the requested shape."""
    if not results:
        return "I couldn't find a tool for that. The tools I have: " + (", ".join(offered) or "none") + "."
    data, lines = {}, []
    for name, content in results:
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = {"result": content}
        if isinstance(parsed, dict) and parsed.get("error"):
            lines.append(f"{name} reported a problem: {parsed['error']}")
            data[name] = {"error": parsed["error"]}
            continue
        lines.append(parsed.get("summary", content) if isinstance(parsed, dict) else str(parsed))
        data[name] = {k: v for k, v in parsed.items() if k != "summary"} if isinstance(parsed, dict) else parsed
    if fmt == "json":
        return "Here it is as JSON:\n```json\n" + json.dumps(data, indent=1, sort_keys=True) + "\n```"
    if fmt == "bullets":
        return "Here is what I found:\n" + "\n".join(f"- {ln}" for ln in lines)
    return " ".join(lines)


# ---------------------------------------------------------------- the planner
def _replay_fits(query: str, names: Sequence[str], offered: dict[str, dict], replay: Message) -> bool:
    """The replayed calls are exactly the calls this question needs: the same tools, the same arguments."""
    replayed = {c["function"]["name"]: json.loads(c["function"]["arguments"] or "{}") for c in replay.tool_calls}
    return replayed == {n: arguments_for(query, offered[n]) for n in names}


def run(inp: PlanInput, tools: list[dict] | None = None) -> Message:
    offered = {t["function"]["name"]: t for t in tools or [] if "function" in t}
    calls = [m for m in inp.steps if m.role == "assistant" and m.tool_calls]
    called = [c["function"]["name"] for m in calls for c in m.tool_calls]
    results = [(m.name or "", m.content) for m in inp.steps if m.role == "tool"]
    suggested = [n for n in dict.fromkeys(inp.suggestion.tools) if n in offered] if inp.suggestion else []
    replay_only = bool(inp.suggestion and inp.suggestion.replayed and len(calls) == 1)
    if (offered and not (suggested and called)) or replay_only:
        pattern = (suggested, inp.suggestion.similarity) if suggested else None
        routed = [n for n in route_tools(inp.query, pattern) if n in offered]
        if suggested and routed:   # plan everything at once, the pattern counted as one more example
            if replay_only and _replay_fits(inp.query, routed, offered, calls[0]):
                return Message(role="assistant", content=compose_answer(results, answer_format(inp), list(offered)))
            return _calls(inp.query, routed, offered, len(called))
        missing = [n for n in routed if n not in called]
        if missing:
            return _calls(inp.query, missing[:1], offered, len(called))
    return Message(role="assistant", content=compose_answer(results, answer_format(inp), list(offered)))
