"""ToolAgent: the plan_tools task in the one tool loop, its run record, the routed offline planner, learning."""
import dataclasses
import json

import pytest

import memorykit as mk
from memorykit.agent.tool_agent import REPLAY_SIMILARITY, ToolRun
from memorykit.course.wellness import PERIODS
from memorykit.offline.plan_tools import arguments_for, periods_in

USER = "wellness_user"
COMPARE = "Compare my activity this month vs last"


@pytest.fixture
def procs(r, emb, ns):
    return mk.ProcedureStore(r, emb, namespace=ns)


def test_cold_run_explores_then_answers_and_learns(r, llm, procs):
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER, procedures=procs), procedures=procs)
    run = agent.run(COMPARE, user_id=USER)
    assert run.suggestion is None
    assert sorted(run.tools_used) == ["get_health_metrics", "get_workout_data"]
    assert run.steps == 3  # one tool, check coverage, the other tool, answer
    assert run.reply.startswith("(offline)") and "vs last month" in run.reply
    assert run.evaluation.success and run.stored and procs.count(USER) == 1 and procs.count("system") == 0
    assert all(json.loads(a)["period"] == "this_month" for a in (t["arguments"] for t in run.tool_results))


def test_warm_run_follows_the_suggestion_in_fewer_steps(r, llm, procs):
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), procedures=procs)
    cold = agent.run(COMPARE, user_id=USER)
    warm = agent.run("How active was I this month compared with last month?", user_id=USER)
    assert warm.suggestion is not None and warm.suggestion.procedure.query == COMPARE
    assert sorted(warm.tools_used) == sorted(cold.tools_used)
    assert warm.steps == 2 < cold.steps
    assert procs.count(USER) == 1 and procs.list(USER)[0].uses == 2


def test_a_close_past_question_is_replayed_and_answered_in_one_round_trip(r, llm, procs):
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), procedures=procs)
    agent.run("How did I sleep this week?", user_id=USER)
    run = agent.run("How was my sleep this week?", user_id=USER)
    assert run.suggestion.similarity >= REPLAY_SIMILARITY and run.replayed == 1
    assert run.steps == 1 and run.tools_used == ["get_sleep_analysis"]
    assert json.loads(run.tool_results[0]["arguments"]) == {"period": "this_week"}
    assert "this week" in run.reply.lower() and run.evaluation.success
    assert [m.role for m in run.messages] == ["system", "user", "assistant", "tool", "assistant"]


def test_a_replay_with_other_arguments_is_set_aside(r, llm, procs):
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), procedures=procs)
    agent.run("How did I sleep this week?", user_id=USER)
    run = agent.run("How did I sleep last week?", user_id=USER)
    assert run.replayed == 1 and run.steps == 2          # the replay, checked, then the model's own call
    assert [json.loads(t["arguments"]) for t in run.tool_results] == [{"period": "last_week"}]
    assert sum(1 for m in run.messages if m.role == "tool") == 1 and "last week" in run.reply.lower()
    stored = procs.suggest("How did I sleep last week?", k=1, user_id=USER)[0]
    assert stored.calls == [{"name": "get_sleep_analysis", "arguments": {"period": "last_week"}}]


def test_tools_that_write_are_never_replayed(r, llm, procs):
    tools = [mk.Tool(t.name, t.description, t.parameters, t.fn) for t in mk.wellness_tools(USER)]  # read_only=False
    agent = mk.ToolAgent(r, llm=llm, tools=tools, procedures=procs)
    agent.run("How did I sleep this week?", user_id=USER)
    run = agent.run("How was my sleep this week?", user_id=USER)
    assert run.suggestion is not None and run.replayed == 0 and run.steps == 2


def test_a_shared_pool_pattern_missing_a_required_argument_is_not_replayed(r, emb, ns, llm):
    """The pool dropped alice's order number (unbounded: her own data); a call without it is not run again,
    while the same call with its argument (her own pattern) is."""
    seen = []
    order = mk.Tool("get_order", "Look up one of my orders by its number.",
                    {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]},
                    lambda order_id: seen.append(order_id) or f"order {order_id}: shipped", read_only=True)
    calls = [{"name": "get_order", "arguments": {"order_id": 4111}}]
    pool = mk.ProcedureStore(r, emb, namespace=ns, shared=True, distance_threshold=None)
    pool.store("Where is my order 4111?", ["get_order"], 0.9, 10, user_id="alice", calls=calls,
               parameters={"get_order": order.parameters})
    agent = mk.ToolAgent(r, llm=llm, tools=[order], procedures=pool, learn=False)
    hit = pool.suggest("Where is my order?", user_id="a|b", k=1)[0]
    assert hit.calls == [{"name": "get_order", "arguments": {}}]
    run = ToolRun(query="Where is my order?", user_id="a|b")
    run.suggestion = dataclasses.replace(hit, distance=0.0)          # as close as a question can be
    assert agent._replay(run, [order]) == [] and seen == []
    run.suggestion = dataclasses.replace(hit, distance=0.0, calls=calls)
    assert [m.role for m in agent._replay(run, [order])] == ["assistant", "tool"] and seen == [4111]


def test_a_suggestion_below_the_threshold_is_not_followed(r, emb, ns, llm):
    procs = mk.ProcedureStore(r, emb, namespace=ns, distance_threshold=0.01)
    procs.store("How did I sleep last week?", ["get_sleep_analysis", "get_my_goals"], 1.0, 10, user_id=USER)
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), procedures=procs, learn=False)
    run = agent.run("What was my sleep like over the past week?", user_id=USER)
    assert run.suggestion is None and run.tools_used == ["get_sleep_analysis"]


def test_a_wrong_suggestion_is_completed_by_the_coverage_check(r, llm, procs):
    procs.store("Does my sleep change on days I exercise?", ["get_sleep_analysis"], 1.0, 10, user_id=USER)
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), procedures=procs, learn=False)
    run = agent.run("Does my sleep change on days I work out?", user_id=USER)
    assert run.suggestion is not None
    assert run.tools_used == ["get_sleep_analysis", "get_workout_data"]


def test_tool_errors_are_surfaced_and_the_run_is_not_stored(r, llm, procs):
    def broken(**kwargs):
        raise RuntimeError("sensor database offline")

    tools = [mk.Tool("get_sleep_analysis", "Sleep duration and quality per night", {"type": "object",
                                                                                    "properties": {}}, broken)]
    run = mk.ToolAgent(r, llm=llm, tools=tools, procedures=procs).run("How did I sleep?", user_id=USER)
    assert run.tools_used == ["get_sleep_analysis"]
    assert run.errors and "sensor database offline" in run.errors[0]
    assert "reported a problem" in run.reply
    assert run.evaluation.success_score < 0.7 and not run.stored and procs.count(USER) == 0


def test_inverted_dates_in_the_question_become_a_tool_error(r, llm):
    run = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER)).run(
        "How did I sleep between 2025-03-20 and 2025-03-01?", user_id=USER)
    assert run.tools_used == ["get_sleep_analysis"] and "after end_date" in run.errors[0]


@pytest.mark.parametrize("query, tools", [
    ("Have I been getting enough shut-eye? My bedtime has been all over the place", ["get_sleep_analysis"]),
    ("What's my pulse been like?", ["get_health_metrics"]),
    ("Did I hit the gym more in March?", ["get_workout_data"]),
    ("Is my BMI going down?", ["get_health_metrics"]),
    ("How far am I from my targets?", ["get_my_goals"]),
    ("Did my yoga sessions help me rest?", ["get_sleep_analysis", "get_workout_data"]),
    ("How much did I walk compared to what I aimed for?", ["get_health_metrics", "get_my_goals"]),
])
def test_planner_generalizes_to_new_wording(r, llm, query, tools):
    run = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER)).run(query, user_id=USER)
    assert sorted(run.tools_used) == tools


def test_no_matching_tool_means_an_honest_answer(r, llm):
    run = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER)).run("What's the capital of Peru?", user_id=USER)
    assert run.tools_used == [] and "couldn't find a tool" in run.reply
    assert not run.evaluation.success


def test_the_run_goes_through_the_one_tool_loop(r, llm, monkeypatch):
    import memorykit.agent.tool_agent as tool_agent

    seen = []
    real = tool_agent.run_tool_loop

    def spy(*args, **kwargs):
        seen.append(args[1].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(tool_agent, "run_tool_loop", spy)
    run = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER)).run("How did I sleep last week?", user_id=USER)
    assert seen == ["plan_tools"] and run.tools_used == ["get_sleep_analysis"] and run.steps == 2


def test_max_steps_bounds_the_loop(r, llm):
    run = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), max_steps=1).run(COMPARE, user_id=USER)
    assert run.steps == 1 and run.reply == "" and not run.evaluation.success
    assert len(run.tools_used) == 1 and "kept calling tools" in run.failure   # the likelier of the two tools
    assert run.tools_used[0] in ("get_health_metrics", "get_workout_data")


def test_periods_and_arguments_from_the_question():
    assert periods_in(COMPARE, PERIODS) == ["this_month", "last_month"]
    assert periods_in("Am I sleeping better than last week?", PERIODS) == ["this_week", "last_week"]
    assert periods_in("steps over the last 10 days", PERIODS) == ["last_30_days"]
    tool = {t.name: t for t in mk.wellness_tools(USER)}["get_workout_data"]
    assert arguments_for("How much running did I do last week?", tool.schema) == {
        "period": "last_week", "workout_type": "running"}


def test_feedback_guidance_shapes_the_answer(r, emb, ns, llm):
    fb = mk.FeedbackStore(r, emb, namespace=ns)
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER), feedback=fb)
    as_json = agent.run("Show my sleep last week as JSON", user_id=USER)
    fb.mark(USER, "Show my sleep last week", as_json.reply, "positive")
    later = agent.run("How did I sleep this month?", user_id=USER)
    assert later.guidance.positives and "```json" in later.reply
    other_user = agent.run("How did I sleep this month?", user_id="alex")
    assert "```json" not in other_user.reply

    plain = agent.run("How many workouts did I do last month?", user_id=USER)
    fb.mark(USER, plain.query, plain.reply, "negative")
    again = agent.run("How many gym sessions did I have last month?", user_id=USER)
    assert again.guidance.negatives and again.reply != plain.reply and "\n- " in again.reply


def test_bad_input_is_rejected(r, llm):
    agent = mk.ToolAgent(r, llm=llm, tools=mk.wellness_tools(USER))
    with pytest.raises(mk.ValidationError):
        agent.run("  ", user_id=USER)
    with pytest.raises(mk.ValidationError):
        agent.run("How did I sleep?", user_id="")


# ---------------------------------------------------------------- held-out: tool sets, cold and warm
# Measured on data/routes/tools_heldout.jsonl (60 questions, never tuned on), learning from the
# notebook's questions and the router's train split: cold 0.917, warm 0.917, warm/cold steps 0.74
# with replay (0.88 without; 0.57 on the questions that need several tools). Floors: those minus a
# margin; the steps floor is the course's goal (warm at most 0.8x cold).
@pytest.fixture(scope="module")
def heldout_cold_warm(r, emb):
    from memorykit.course.procedural_eval import cold_warm, heldout, learning_questions

    return cold_warm(r, emb, mk.get_llm("offline"), learning_questions(), heldout("tools"))


def test_cold_tool_sets_on_heldout_questions(heldout_cold_warm):
    assert heldout_cold_warm.cold_accuracy >= 0.85, heldout_cold_warm.summary()


def test_warm_is_as_accurate_and_takes_fewer_steps(heldout_cold_warm):
    cw = heldout_cold_warm
    assert cw.warm_accuracy >= cw.cold_accuracy, cw.summary()
    assert cw.steps_ratio <= 0.8 and cw.multi_tool_steps_ratio() <= 0.7, cw.summary()
    assert all(row["steps_warm"] <= row["steps_cold"] for row in cw.rows), cw.summary()
