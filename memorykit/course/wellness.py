"""Notebook 06's toy domain: synthetic wellness records and the tools an agent uses over them.

``wellness_tools(user_id, store=None, procedures=None)`` returns :class:`~memorykit.llm.tools.Tool`
objects bound to one user (a tool never takes a user id from the model, so a user can
only read their own records). Each result is a small JSON object with a ``summary``
sentence; bad arguments come back as ``{"error": ...}`` (see :class:`Tool.run`).

The data lives in ``data/wellness/`` (health.csv, sleep.csv, workouts.csv, written by
``data/wellness/generate.py``). "Today" is the last day in the data, so "this month"
and "last month" mean the same thing on every machine.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..config import data_path
from ..keys import check_id
from ..llm.tools import Tool, ToolError

DATA_DIR = data_path("wellness")

PERIODS = ("today", "yesterday", "this_week", "last_week", "this_month", "last_month",
           "last_7_days", "last_30_days", "last_90_days", "all")
METRICS = {"resting_heart_rate": ("resting_heart_rate", "bpm"), "steps": ("steps", "steps/day"),
           "weight": ("weight_kg", "kg"), "bmi": ("bmi", "")}
WORKOUT_TYPES = ("running", "cycling", "walking", "strength", "yoga", "swimming", "hiit")
MUSCLE_GROUPS = ("legs", "upper_body", "core", "full_body")
GOAL_WORDS = re.compile(r"\b(goals?|targets?|aims?|wants?|plans?|hopes?|objectives?|trying|wish(es)?|intends?)\b",
                        re.IGNORECASE)


@dataclass(frozen=True)
class WellnessData:
    health: pd.DataFrame
    sleep: pd.DataFrame
    workouts: pd.DataFrame

    @property
    def today(self) -> date:
        """The last day with data: the fixed "now" of the toy domain."""
        return max(df["date"].max() for df in (self.health, self.sleep, self.workouts))

    @property
    def users(self) -> list[str]:
        return sorted(set(self.health["user_id"]))


@functools.lru_cache(maxsize=4)
def load_wellness(data_dir: str | Path = DATA_DIR) -> WellnessData:
    """Read the three CSV files once per process (dates parsed to ``datetime.date``)."""
    data_dir = Path(data_dir)
    frames = {}
    for name in ("health", "sleep", "workouts"):
        df = pd.read_csv(data_dir / f"{name}.csv")
        df["date"] = pd.to_datetime(df["date"]).dt.date
        frames[name] = df
    return WellnessData(**frames)


# ---------------------------------------------------------------- dates
def _parse_date(value: str, what: str) -> date:
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise ToolError(f"{what} must be a date like 2025-03-01, got {value!r}") from None


def resolve_period(period: str | None, today: date, start_date: str | None = None,
                   end_date: str | None = None) -> tuple[date, date, str]:
    """``(start, end, label)`` for a named period or an explicit date range (inclusive)."""
    if start_date or end_date:
        start = _parse_date(start_date, "start_date") if start_date else date.min
        end = _parse_date(end_date, "end_date") if end_date else today
        if start > end:
            raise ToolError(f"start_date {start} is after end_date {end}: swap them or pick a period")
        return start, end, f"{start_date or 'start'} to {end.isoformat()}"
    period = period or "last_30_days"
    if period not in PERIODS:
        raise ToolError(f"unknown period {period!r}; choose one of {list(PERIODS)} or give start_date/end_date")
    monday = today - timedelta(days=today.weekday())
    first = today.replace(day=1)
    prev_last = first - timedelta(days=1)
    ranges = {
        "today": (today, today), "yesterday": (today - timedelta(days=1),) * 2,
        "this_week": (monday, today), "last_week": (monday - timedelta(days=7), monday - timedelta(days=1)),
        "this_month": (first, today), "last_month": (prev_last.replace(day=1), prev_last),
        "last_7_days": (today - timedelta(days=6), today), "last_30_days": (today - timedelta(days=29), today),
        "last_90_days": (today - timedelta(days=89), today), "all": (date.min, today),
    }
    start, end = ranges[period]
    return start, end, period.replace("_", " ")


def _window(df: pd.DataFrame, user_id: str, start: date, end: date, what: str, data: WellnessData) -> pd.DataFrame:
    mine = df[df["user_id"] == user_id]
    if mine.empty:
        raise ToolError(f"no {what} records for this user")
    rows = mine[(mine["date"] >= start) & (mine["date"] <= end)]
    if rows.empty and what != "workout":
        first, last = mine["date"].min(), mine["date"].max()
        raise ToolError(f"no {what} records between {start} and {end}; the data covers {first} to {last}")
    return rows


def _change(now: float, before: float) -> str:
    if not before:
        return "n/a"
    pct = 100.0 * (now - before) / abs(before)
    return f"{pct:+.0f}%"


def _fmt(value: float, unit: str) -> str:
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    return f"{text} {unit}".strip()


# ---------------------------------------------------------------- the tools' functions
def health_metrics(data: WellnessData, user_id: str, metrics: Sequence[str] | None = None,
                   period: str | None = None, start_date: str | None = None, end_date: str | None = None,
                   compare_period: str | None = None) -> dict[str, Any]:
    if isinstance(metrics, str):
        metrics = [metrics]
    metrics = list(metrics or METRICS)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ToolError(f"unknown metric(s) {unknown}; choose from {sorted(METRICS)}")

    def stats(start, end):
        rows = _window(data.health, user_id, start, end, "health", data)
        out = {}
        for m in metrics:
            col, unit = METRICS[m]
            series = rows.sort_values("date")[col]
            out[m] = {"average": round(float(series.mean()), 1), "min": float(series.min()),
                      "max": float(series.max()), "latest": float(series.iloc[-1]), "unit": unit,
                      "days": int(series.size)}
        return out

    start, end, label = resolve_period(period, data.today, start_date, end_date)
    result: dict[str, Any] = {"period": {"label": label, "start": str(max(start, data.health["date"].min())),
                                         "end": str(end)}, "metrics": stats(start, end)}
    parts = [f"{m.replace('_', ' ')} averaged {_fmt(v['average'], v['unit'])}" for m, v in result["metrics"].items()]
    summary = f"Health metrics ({label}): " + ", ".join(parts)
    if compare_period:
        cs, ce, clabel = resolve_period(compare_period, data.today)
        before = stats(cs, ce)
        result["compared_with"] = {"label": clabel, "metrics": before}
        result["change"] = {m: _change(result["metrics"][m]["average"], before[m]["average"]) for m in metrics}
        summary += f"; vs {clabel}: " + ", ".join(
            f"{m.replace('_', ' ')} {_fmt(before[m]['average'], before[m]['unit'])} ({result['change'][m]})"
            for m in metrics)
    result["summary"] = summary + "."
    return result


def sleep_analysis(data: WellnessData, user_id: str, period: str | None = None, start_date: str | None = None,
                   end_date: str | None = None, compare_period: str | None = None) -> dict[str, Any]:
    def stats(start, end):
        rows = _window(data.sleep, user_id, start, end, "sleep", data)
        best, worst = rows.loc[rows["duration_hours"].idxmax()], rows.loc[rows["duration_hours"].idxmin()]
        return {"nights": int(len(rows)), "average_hours": round(float(rows["duration_hours"].mean()), 2),
                "average_quality": round(float(rows["quality_score"].mean()), 1),
                "nights_under_7h": int((rows["duration_hours"] < 7).sum()),
                "longest": {"date": str(best["date"]), "hours": float(best["duration_hours"])},
                "shortest": {"date": str(worst["date"]), "hours": float(worst["duration_hours"])},
                "typical_bedtime": str(rows["bedtime"].sort_values().iloc[len(rows) // 2])}

    start, end, label = resolve_period(period, data.today, start_date, end_date)
    now = stats(start, end)
    result: dict[str, Any] = {"period": {"label": label, "end": str(end)}, "sleep": now}
    summary = (f"Sleep ({label}): {now['average_hours']:.1f} h a night on average over {now['nights']} nights, "
               f"quality {now['average_quality']:.0f}/100, {now['nights_under_7h']} nights under 7 h")
    if compare_period:
        cs, ce, clabel = resolve_period(compare_period, data.today)
        before = stats(cs, ce)
        result["compared_with"] = {"label": clabel, "sleep": before}
        result["change"] = {"average_hours": _change(now["average_hours"], before["average_hours"]),
                            "average_quality": _change(now["average_quality"], before["average_quality"])}
        summary += (f"; vs {clabel}: {before['average_hours']:.1f} h ({result['change']['average_hours']}), "
                    f"quality {before['average_quality']:.0f}/100")
    result["summary"] = summary + "."
    return result


def workout_data(data: WellnessData, user_id: str, period: str | None = None, start_date: str | None = None,
                 end_date: str | None = None, workout_type: str | None = None, muscle_group: str | None = None,
                 compare_period: str | None = None) -> dict[str, Any]:
    if workout_type is not None and workout_type not in WORKOUT_TYPES:
        raise ToolError(f"unknown workout_type {workout_type!r}; choose from {list(WORKOUT_TYPES)}")
    if muscle_group is not None and muscle_group not in MUSCLE_GROUPS:
        raise ToolError(f"unknown muscle_group {muscle_group!r}; choose from {list(MUSCLE_GROUPS)}")

    def stats(start, end):
        rows = _window(data.workouts, user_id, start, end, "workout", data)
        if workout_type:
            rows = rows[rows["type"] == workout_type]
        if muscle_group:
            rows = rows[rows["muscle_group"] == muscle_group]
        by_type = rows.groupby("type")["duration_min"].agg(["count", "sum"]).sort_index()
        return {"sessions": int(len(rows)), "total_minutes": int(rows["duration_min"].sum()),
                "calories": int(rows["calories"].sum()),
                "by_type": {t: {"sessions": int(c), "minutes": int(s)} for t, (c, s) in by_type.iterrows()},
                "by_muscle_group": {g: int(n) for g, n in rows["muscle_group"].value_counts().sort_index().items()},
                "recent": [{"date": str(r.date), "type": r.type, "minutes": int(r.duration_min)}
                           for r in rows.sort_values("date").tail(3).itertuples()]}

    start, end, label = resolve_period(period, data.today, start_date, end_date)
    what = " ".join(x.replace("_", " ") for x in (workout_type, muscle_group) if x) or "all"
    now = stats(start, end)
    result: dict[str, Any] = {"period": {"label": label, "end": str(end)}, "filter": what, "workouts": now}
    kinds = ", ".join(f"{t} x{v['sessions']}" for t, v in now["by_type"].items()) or "none"
    summary = (f"Workouts ({label}, {what}): {now['sessions']} sessions, {now['total_minutes']} minutes, "
               f"{now['calories']} kcal ({kinds})")
    if compare_period:
        cs, ce, clabel = resolve_period(compare_period, data.today)
        before = stats(cs, ce)
        result["compared_with"] = {"label": clabel, "workouts": before}
        result["change"] = {"sessions": _change(now["sessions"], before["sessions"]),
                            "total_minutes": _change(now["total_minutes"], before["total_minutes"])}
        summary += (f"; vs {clabel}: {before['sessions']} sessions, {before['total_minutes']} minutes "
                    f"({result['change']['total_minutes']})")
    result["summary"] = summary + "."
    return result


def my_goals(store, user_id: str, topic: str | None = None, k: int = 5) -> dict[str, Any]:
    """Goals are episodic memories: vector search, then keep the lines that state a goal (a word filter)."""
    if store is None:
        raise ToolError("no memory store is connected, so goals are unavailable")
    hits = store.search(f"goals {topic or ''}".strip(), user_id, memory_types=["episodic"], k=k * 2)
    goals = [h.memory.content for h in hits if GOAL_WORDS.search(h.memory.content)][:k]
    summary = ("Goals: " + "; ".join(g.rstrip(".") for g in goals) + ".") if goals else "No goals stored yet."
    return {"goals": goals, "summary": summary}


def tool_suggestions(procedures, user_id: str, query: str, k: int = 3) -> dict[str, Any]:
    if procedures is None:
        raise ToolError("procedural memory is not connected")
    hits = procedures.suggest(query, k=k, user_id=user_id)
    found = [{"tools": h.procedure.tools_used, "similar_query": h.procedure.query,
              "similarity": round(h.similarity, 2), "success_score": round(h.procedure.success_score, 2)}
             for h in hits]
    summary = ("Suggested tools: " + " + ".join(found[0]["tools"]) + ".") if found else "No similar past workflow."
    return {"suggestions": found, "summary": summary}


# ---------------------------------------------------------------- schemas
def _period_props(compare: bool = True) -> dict[str, Any]:
    props: dict[str, Any] = {
        "period": {"type": "string", "enum": list(PERIODS),
                   "description": "time window: today, yesterday, this or last week / month, last 7 / 30 / 90 days"},
        "start_date": {"type": "string", "description": "first day, YYYY-MM-DD (instead of period)"},
        "end_date": {"type": "string", "description": "last day, YYYY-MM-DD (instead of period)"},
    }
    if compare:
        props["compare_period"] = {"type": "string", "enum": list(PERIODS),
                                   "description": "a second window to compare against (e.g. last_month)"}
    return props


def wellness_tools(user_id: str, store=None, procedures=None, data: WellnessData | None = None) -> list[Tool]:
    """The five wellness tools for one user, with OpenAI tool schemas (all read-only: replayable).

    ``store`` (a MemoryStore) backs ``get_my_goals``; ``procedures`` (a ProcedureStore)
    backs ``get_tool_suggestions``. Without them those tools answer with a clear error.
    """
    check_id(user_id, "user_id")
    data = data or load_wellness()
    return [
        Tool("get_health_metrics",
             "Daily health metrics: resting heart rate (bpm, pulse), step count (daily walking activity), "
             "body weight and BMI. Averages, min, max and latest value for a period, optionally compared "
             "with another period.",
             {"type": "object", "properties": {
                 "metrics": {"type": "array", "items": {"type": "string", "enum": list(METRICS)},
                             "description": "which metrics (default: all)"}, **_period_props()}},
             functools.partial(health_metrics, data, user_id), read_only=True),
        Tool("get_sleep_analysis",
             "Sleep analysis: nightly sleep duration in hours, sleep quality score, bedtime, rest; "
             "averages, longest and shortest nights, nights under 7 hours, optionally compared with "
             "another period.",
             {"type": "object", "properties": _period_props()},
             functools.partial(sleep_analysis, data, user_id), read_only=True),
        Tool("get_workout_data",
             "Workouts and exercise sessions (training, gym, runs, rides, swims, yoga, physical activity): "
             "number of sessions, minutes, calories, by workout type and muscle group, optionally "
             "compared with another period.",
             {"type": "object", "properties": {
                 "workout_type": {"type": "string", "enum": list(WORKOUT_TYPES), "description": "only this kind"},
                 "muscle_group": {"type": "string", "enum": list(MUSCLE_GROUPS), "description": "only this group"},
                 **_period_props()}},
             functools.partial(workout_data, data, user_id), read_only=True),
        Tool("get_my_goals",
             "The user's personal health and fitness goals and targets, from their long-term memories.",
             {"type": "object", "properties": {"topic": {"type": "string", "description": "optional focus"}}},
             functools.partial(my_goals, store, user_id), read_only=True),
        Tool("get_tool_suggestions",
             "Procedural memory: which tools worked for similar past questions (successful tool-use patterns).",
             {"type": "object", "properties": {"query": {"type": "string", "description": "the question"}},
              "required": ["query"]},
             functools.partial(tool_suggestions, procedures, user_id), read_only=True),
    ]
