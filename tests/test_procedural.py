"""Procedural memory: workflow scoring, the 0.7 gate, pattern upserts, suggestions, feedback examples."""
import json
from pathlib import Path

import pytest

import memorykit as mk
from memorykit.procedural import classify_query, feedback_signal, followup_kind, response_format

OK = json.dumps({"summary": "fine"})
ERR = json.dumps({"error": "get_health_metrics: unknown metric(s) ['x']"})
WINDOWS = Path(__file__).resolve().parent.parent / "data" / "feedback" / "windows.jsonl"


# ---------------------------------------------------------------- evaluation and the gate
def test_clean_fast_run_scores_full_marks():
    ev = mk.evaluate_workflow(["a", "b"], [OK, OK], "an answer", 1200)
    assert ev.success and ev.success_score == pytest.approx(1.0)


@pytest.mark.parametrize("tools, results, response, ms", [
    (["a"], [ERR], "an answer", 100),          # a tool error
    (["a", "b"], [OK, ERR], "an answer", 100),  # half the tools failed
    (["a"], [OK], "", 100),                    # no response
    (["a"], [OK], "an answer", 60_000),        # far too slow
    ([], [], "an answer", 100),                # no tools at all
])
def test_each_failed_rule_drops_below_the_gate(tools, results, response, ms):
    ev = mk.evaluate_workflow(tools, results, response, ms)
    assert not ev.success and ev.success_score < 0.7 and ev.reasons


def test_slightly_slow_run_keeps_a_partial_score():
    ev = mk.evaluate_workflow(["a"], [OK], "x", 33_000)
    assert not ev.success and 0.9 < ev.success_score < 1.0


def test_store_gate_keeps_only_scores_from_0_7(r, emb, ns):
    procs = mk.ProcedureStore(r, emb, namespace=ns)
    assert procs.store("how did I sleep", ["get_sleep_analysis"], 0.69, 100) is None
    assert procs.count() == 0
    kept = procs.store("how did I sleep", ["get_sleep_analysis"], 0.7, 100)
    assert kept is not None and procs.count() == 1
    with pytest.raises(mk.ValidationError):
        procs.store("q", [], 0.9, 1)
    with pytest.raises(mk.ValidationError):
        procs.store("q", ["a"], 1.5, 1)


# ---------------------------------------------------------------- upsert and suggestions
def test_same_type_and_tool_set_updates_instead_of_duplicating(r, emb, ns):
    procs = mk.ProcedureStore(r, emb, namespace=ns)
    a = procs.store("Compare my activity this month vs last", ["get_workout_data", "get_health_metrics"], 1.0, 100)
    b = procs.store("Compare my steps this week against last week", ["get_health_metrics", "get_workout_data"],
                    0.8, 300)
    assert a.id == b.id and procs.count() == 1
    got = procs.get(a.id)
    assert got.uses == 2 and got.success_score == pytest.approx(0.9) and got.execution_time_ms == pytest.approx(200)
    assert got.examples == ["Compare my activity this month vs last", "Compare my steps this week against last week"]
    assert len(list(r.scan_iter(match=f"{ns}:procedure:*"))) == 1
    procs.store("How did I sleep last week?", ["get_sleep_analysis"], 0.95, 50)
    assert procs.count() == 2


def test_suggestion_threshold(r, emb, ns):
    procs = mk.ProcedureStore(r, emb, namespace=ns)
    procs.store("How did I sleep last week?", ["get_sleep_analysis"], 0.95, 50)
    procs.store("How many workouts did I do last month?", ["get_workout_data"], 0.95, 50)
    hits = procs.suggest("What was my sleep like over the past week?", k=3)
    assert [h.procedure.tools_used for h in hits] == [["get_sleep_analysis"]]
    assert hits[0].similarity > 0.6
    assert procs.suggest("What is the capital of France?", k=3) == []
    loose = procs.suggest("What is the capital of France?", k=3, distance_threshold=None)
    assert len(loose) == 2


def test_every_stored_phrasing_finds_the_pattern(r, emb, ns):
    procs = mk.ProcedureStore(r, emb, namespace=ns)
    procs.store("How many workouts did I do last month?", ["get_workout_data"], 1.0, 10, query_type="lookup")
    procs.store("How often did I hit the gym?", ["get_workout_data"], 1.0, 10, query_type="lookup")
    hit = procs.suggest("how often have I been to the gym", k=1)[0]
    assert hit.distance < 0.25 and hit.procedure.uses == 2


def test_per_user_procedures_stay_with_their_user(r, emb, ns):
    procs = mk.ProcedureStore(r, emb, namespace=ns)
    procs.store("How did I sleep last week?", ["get_sleep_analysis"], 0.95, 50, user_id="u1")
    assert procs.suggest("How did I sleep last week?") == []
    assert procs.suggest("How did I sleep last week?", user_id="u2") == []
    assert len(procs.suggest("How did I sleep last week?", user_id="u1")) == 1
    mk.forget_user(r, ns, "u1")
    assert procs.count() == 0


def test_query_types_are_general():
    assert classify_query("Is my pulse lower than last month?") == "comparison"
    assert classify_query("Am I on track for my goal?") == "goal"
    assert classify_query("What's my BMI?") == "lookup"


# ---------------------------------------------------------------- feedback examples
def test_toggle_semantics(r, emb, ns):
    fb = mk.FeedbackStore(r, emb, namespace=ns)
    q, a = "How did I sleep?", "(offline) 7.2 h a night."
    assert fb.mark("u1", q, a, "positive") == "added"
    assert fb.get("u1", q, a).label == "positive"
    assert fb.mark("u1", q, a, "negative") == "switched"
    assert fb.get("u1", q, a).label == "negative" and fb.count("u1") == 1
    assert fb.mark("u1", q, a, "negative") == "removed"
    assert fb.get("u1", q, a) is None and fb.count("u1") == 0
    with pytest.raises(mk.ValidationError):
        fb.mark("u1", q, a, "meh")
    with pytest.raises(mk.ValidationError):
        fb.mark("u1", " ", a, "positive")


def test_feedback_examples_are_isolated_per_user(r, emb, ns):
    fb = mk.FeedbackStore(r, emb, namespace=ns)
    fb.mark("u1", "How did I sleep last week?", "(offline) 7.2 h", "positive")
    fb.mark("u1*", "How did I sleep last week?", "(offline) 6 h", "negative")
    g1 = fb.examples("How was my sleep last week?", "u1")
    g2 = fb.examples("How was my sleep last week?", "u2")
    assert [e.response for e in g1.positives] == ["(offline) 7.2 h"] and not g1.negatives
    assert not g2 and g2.block == ""
    mk.forget_user(r, ns, "u1")
    assert fb.count("u1") == 0 and fb.count("u1*") == 1


def test_guidance_block_lists_positives_and_negatives(r, emb, ns):
    fb = mk.FeedbackStore(r, emb, namespace=ns)
    fb.mark("u1", "Show my sleep last week", '```json\n{"hours": 7.2}\n```', "positive")
    fb.mark("u1", "How did I sleep last month?", "(offline) You slept fine.", "negative")
    fb.mark("u1", "What's the capital of Peru?", "Lima", "positive")
    g = fb.examples("How did I sleep this week?", "u1", k=3)
    assert [e.query for e in g.positives] == ["Show my sleep last week"]
    assert [e.query for e in g.negatives] == ["How did I sleep last month?"]
    lines = g.block.splitlines()
    assert lines[1].startswith("GOOD: ") and lines[2].startswith("BAD: ")
    assert json.loads(lines[1][6:])["query"] == "Show my sleep last week"


def test_mmr_rerank_prefers_variety(r, emb, ns):
    fb = mk.FeedbackStore(r, emb, namespace=ns, distance_threshold=None)
    for i, text in enumerate(["How did I sleep last week?", "How did I sleep last week??",
                              "How many hours did I sleep per night last week?"]):
        fb.mark("u1", text, f"answer {i}", "positive")
    hits = fb.search("How did I sleep last week?", "u1", k=2)
    assert {h.example.response for h in hits} != {"answer 0", "answer 1"}


def test_pluggable_reranker_decides_the_order(r, emb, ns):
    fb = mk.FeedbackStore(r, emb, namespace=ns, reranker=lambda q, texts: [len(t) for t in texts])
    fb.mark("u1", "sleep last week?", "short", "positive")
    fb.mark("u1", "How long did I sleep during the last week?", "long", "positive")
    assert fb.search("How did I sleep last week?", "u1", k=1)[0].example.response == "long"


def test_cross_encoder_needs_a_local_model():
    from memorykit.procedural import CrossEncoderReranker

    with pytest.raises(mk.ModelNotFoundError):
        CrossEncoderReranker("/nonexistent/cross-encoder")


# ---------------------------------------------------------------- analyzing conversations
def windows():
    return [json.loads(line) for line in WINDOWS.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("window", windows(), ids=lambda w: w["id"])
def test_analyzer_on_labelled_windows(window, llm):
    got = mk.analyze_feedback([tuple(x) for x in window["exchanges"]], llm=llm)
    assert {(e.query, e.label) for e in got} == {(e["query"], e["label"]) for e in window["expected"]}
    for e, want in zip(got, window["expected"]):
        if "response_contains" in want:
            assert want["response_contains"] in e.response


def test_format_follow_up_links_to_the_original_query_and_final_response(llm):
    got = mk.analyze_feedback([("Show my workouts this week", "(offline) 3 sessions."),
                               ("as a bullet list please", "- 3 sessions\n- 120 minutes"),
                               ("love it", "")], llm=llm)
    assert [(e.query, e.response, e.label) for e in got] == [
        ("Show my workouts this week", "- 3 sessions\n- 120 minutes", "positive")]


def test_only_the_last_four_exchanges_count(llm):
    old = [("How did I sleep?", "7 h"), ("thanks!", "you're welcome")]
    filler = [(f"What is my step count on day {i}?", f"{i} steps") for i in range(4)]
    assert mk.analyze_feedback(old + filler, llm=llm) == []


@pytest.mark.parametrize("text, label", [
    ("Thanks, but that's wrong.", "negative"),
    ("Oh fantastic, yet again a wrong number.", "negative"),
    ("Thanks! What's my BMI?", None),
    ("Not bad at all, really useful", "positive"),
    ("Got it, I'll try that.", "positive"),
])
def test_signals(text, label):
    assert feedback_signal(text)[0] == label


def test_follow_up_kinds():
    assert followup_kind("Can you give me that as JSON?") == "format"
    assert followup_kind("Summarize my training last month") is None
    assert followup_kind("No, I meant my resting heart rate") == "clarification"
    assert followup_kind("How did you calculate that?") == "meta"


def test_response_formats():
    assert response_format('(offline) Here:\n```json\n{"a": 1}\n```') == "json"
    assert response_format("- one\n- two") == "bullets"
    assert response_format("(offline) You slept 7 h.") == "prose"


def test_learn_saves_found_examples(r, emb, ns, llm):
    fb = mk.FeedbackStore(r, emb, namespace=ns)
    found = fb.learn("u1", [("How did I sleep?", "7 h"), ("perfect, thanks", "")], llm=llm)
    assert [e.label for e in found] == ["positive"] and fb.count("u1", "positive") == 1


def test_mmr_trades_relevance_for_variety():
    import numpy as np

    from memorykit.procedural import mmr

    vectors = np.array([[1.0, 0.0], [0.9, 0.436], [0.0, 1.0]], dtype=np.float32)
    assert mmr([1.0, 0.95, 0.6], vectors, k=2, lambda_=1.0) == [0, 1]
    assert mmr([1.0, 0.95, 0.6], vectors, k=2, lambda_=0.5) == [0, 2]


def test_lookalike_user_ids_never_share_feedback(r, emb, ns):
    fb = mk.FeedbackStore(r, emb, namespace=ns)
    ids = ["bob", "Bob", "bob ", "bob,eve", "eve"]
    for i, u in enumerate(ids):
        fb.mark(u, f"question {i} about sleep", f"answer {i}", "positive")
    for i, u in enumerate(ids):
        assert [e.query for e in fb.list(u)] == [f"question {i} about sleep"]
