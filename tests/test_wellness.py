"""The wellness toy domain: deterministic data, tools bound to one user, clear tool errors."""
import json

import pytest

import memorykit as mk
from memorykit.course.wellness import DATA_DIR, load_wellness, resolve_period


def run(tools, name, args=None):
    tool = {t.name: t for t in tools}[name]
    return json.loads(tool.run(args or {}))


def test_generator_is_deterministic_and_matches_committed_data(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", DATA_DIR / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.write(gen.generate(), tmp_path)
    for name in ("health", "sleep", "workouts"):
        assert (tmp_path / f"{name}.csv").read_text() == (DATA_DIR / f"{name}.csv").read_text()


def test_data_covers_three_users_over_90_days():
    data = load_wellness()
    assert "wellness_user" in data.users and len(data.users) == 3
    assert data.health.groupby("user_id").size().eq(90).all()
    assert str(data.today) == "2025-03-31"


def test_tool_schemas_are_openai_shaped():
    tools = mk.wellness_tools("wellness_user")
    names = sorted(t.name for t in tools)
    assert names == ["get_health_metrics", "get_my_goals", "get_sleep_analysis", "get_tool_suggestions",
                     "get_workout_data"]
    for t in tools:
        assert t.schema["type"] == "function" and t.schema["function"]["parameters"]["type"] == "object"


def test_comparison_of_months_reports_both_and_the_change():
    out = run(mk.wellness_tools("wellness_user"), "get_workout_data",
              {"period": "this_month", "compare_period": "last_month"})
    assert out["workouts"]["sessions"] == 19 and out["compared_with"]["workouts"]["sessions"] == 14
    assert out["change"]["sessions"] == "+36%" and "vs last month" in out["summary"]


def test_tools_only_see_their_own_user():
    a = run(mk.wellness_tools("wellness_user"), "get_health_metrics", {"metrics": ["steps"]})
    b = run(mk.wellness_tools("alex"), "get_health_metrics", {"metrics": ["steps"]})
    assert a["metrics"]["steps"]["average"] != b["metrics"]["steps"]["average"]
    assert "error" in run(mk.wellness_tools("nobody"), "get_sleep_analysis")


@pytest.mark.parametrize("args, message", [
    ({"metrics": ["cholesterol"]}, "unknown metric"),
    ({"start_date": "2025-03-10", "end_date": "2025-03-01"}, "is after end_date"),
    ({"start_date": "10/03/2025"}, "must be a date"),
    ({"period": "fortnight"}, "unknown period"),
    ({"user_id": "alex"}, "unknown argument"),
    ({"start_date": "2024-01-01", "end_date": "2024-02-01"}, "the data covers"),
])
def test_bad_arguments_are_clear_tool_errors(args, message):
    out = run(mk.wellness_tools("wellness_user"), "get_health_metrics", args)
    assert message in out["error"]


def test_unknown_workout_type_is_an_error():
    out = run(mk.wellness_tools("wellness_user"), "get_workout_data", {"workout_type": "curling"})
    assert "unknown workout_type" in out["error"]


def test_periods_resolve_relative_to_the_last_day():
    from datetime import date

    today = date(2025, 3, 31)
    assert resolve_period("last_month", today)[:2] == (date(2025, 2, 1), date(2025, 2, 28))
    assert resolve_period("this_week", today)[:2] == (date(2025, 3, 31), date(2025, 3, 31))
    assert resolve_period("last_7_days", today)[:2] == (date(2025, 3, 25), date(2025, 3, 31))


def test_goals_come_from_episodic_memory_with_a_lexical_filter(r, emb, ns):
    store = mk.MemoryStore(r, emb, namespace=ns)
    store.add("User's goal is to walk 10,000 steps a day", user_id="u1")
    store.add("User has a dog named Pixel", user_id="u1")
    store.add("User aims to run a marathon", user_id="u2")
    out = run(mk.wellness_tools("u1", store=store), "get_my_goals")
    assert out["goals"] == ["User's goal is to walk 10,000 steps a day"]
    assert "no memory store" in run(mk.wellness_tools("u1"), "get_my_goals")["error"]


def test_the_library_side_never_loads_pandas():
    import subprocess
    import sys

    code = ("import sys, memorykit, memorykit.agent.tool_agent, memorykit.memory.procedural, "
            "memorykit.memory.feedback; print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
