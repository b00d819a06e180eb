"""The offline stand-in for dedup decisions and working-memory upkeep on phrasing nobody here wrote (issue #29):
abstention toward "new", a place mentioned in passing never becomes a timezone, goals are never a bare
year, and the evaluation helpers score the independent sets without training on them."""
import pytest

import memorykit as mk
from memorykit.course import dedup_eval, working_eval
from memorykit.errors import ValidationError


# ------------------------------------------------------------------ dedup: abstention and training data
def test_a_close_call_is_stored_as_new_and_a_clear_one_is_not():
    from memorykit.offline.decide_model import NEW_MARGIN, decision

    close = {"duplicate": 0.40 + NEW_MARGIN / 2, "update": 0.2 - NEW_MARGIN / 2, "invalidate": 0.0, "new": 0.40}
    clear = {"duplicate": 0.40 + 2 * NEW_MARGIN, "update": 0.2 - 2 * NEW_MARGIN, "invalidate": 0.0, "new": 0.40}
    assert decision(close) == "new"
    assert decision(clear) == "duplicate"
    assert decision({"duplicate": 0.1, "update": 0.7, "invalidate": 0.0, "new": 0.2}) == "update"
    assert decision(close, margin=0.0) == "duplicate"   # the margin is what turns the close call


def test_the_decider_learns_from_every_training_set_and_never_from_an_evaluation_set():
    from memorykit.offline.decide_model import training_pairs

    pairs = {(p["existing"], p["new"]) for p in training_pairs()}
    course = {(p["existing"], p["new"]) for p in dedup_eval.load_pairs("train")}
    apart = {(p["existing"], p["new"]) for p in dedup_eval.load_pairs("independent_train")}
    apart2 = {(p["existing"], p["new"]) for p in dedup_eval.load_pairs("independent_train_2")}
    apart3 = {(p["existing"], p["new"]) for p in dedup_eval.load_pairs("independent_train_3")}
    assert course <= pairs and apart <= pairs and apart2 <= pairs and apart3 <= pairs
    assert len(apart) > 400 and len(apart2) >= 240 and len(apart3) >= 200
    for split in ("heldout", "independent"):
        assert not pairs & {(p["existing"], p["new"]) for p in dedup_eval.load_pairs(split)}, split


def test_an_unknown_split_is_a_clear_error():
    with pytest.raises(ValidationError, match="unknown split"):
        dedup_eval.load_pairs("heldout.jsonl")


def test_split_summary_counts_only_totals():
    import pandas as pd

    frame = pd.DataFrame({"label": ["new", "new", "duplicate", "update"],
                          "decided": ["new", "duplicate", "duplicate", "new"]})
    row = dedup_eval.split_summary({"tiny": frame}).loc["tiny"]
    assert row["pairs"] == 4 and row["accuracy"] == 0.5
    assert row["new facts right"] == "1/2" and row["new called duplicate"] == 1 and row["new called update"] == 0


# ------------------------------------------------------------------ working memory: what counts
def test_a_null_expected_value_is_not_a_fact_and_passing_mentions_are_counted_apart():
    dialog = {"expected": {"name": None, "timezone": None, "goals": ["run 10k"], "preferences": [],
                           "not_name": "Marta", "not_timezone": "Europe/Paris", "not_goals": ["swim"]}}
    want, superseded, absent = working_eval.expected_facts(dialog)
    assert want == ["run 10k"]
    assert superseded == ["swim"]                      # no current name/timezone replaced Marta or Paris
    assert sorted(absent) == ["Europe/Paris", "Marta", "swim"]
    changed = {"expected": {"name": "Sam", "timezone": "Asia/Tokyo", "goals": [], "preferences": [],
                            "not_name": "Samuel", "not_timezone": "Europe/Paris"}}
    want, superseded, absent = working_eval.expected_facts(changed)
    assert want == ["Sam", "Asia/Tokyo"] and sorted(superseded) == sorted(absent) == ["Europe/Paris", "Samuel"]


def test_the_independent_dialogs_load_with_their_null_values():
    dialogs = working_eval.load_dialogs(working_eval.INDEPENDENT)
    assert len(dialogs) >= 40 and all("turns" in d and "expected" in d for d in dialogs)
    facts = sum(len(working_eval.expected_facts(d)[0]) for d in dialogs)
    assert facts > 200


def test_the_working_models_never_learn_from_an_evaluation_dialog():
    from memorykit.offline import working_data as wm
    from memorykit.offline.text import normalize

    trained = {normalize(row["text"]) for row in wm.profile_rows()}
    assert len(wm.independent_rows()) > 600
    fit, dev = wm.independent_rows("fit"), wm.independent_rows("dev")
    assert fit and dev and len(fit) + len(dev) == len(wm.independent_rows())
    for name in ("profile_heldout.jsonl", working_eval.INDEPENDENT):  # dialogs.jsonl is a demo set, trained on
        turns = {normalize(t) for d in working_eval.load_dialogs(name) for t in d["turns"]}
        assert not trained & turns, name


def test_no_training_dialog_of_any_set_repeats_an_evaluation_turn():
    """Every dialog set the dev harness scores (trained on or not) is kept apart from the evaluation and
    held-out dialogs; set 4's general "preference" facts are read as preferences kept in the user's words."""
    from memorykit.offline import working_data as wd
    from memorykit.offline.text import normalize

    every = wd.dialogs("all", wd.DEV_DIALOG_FILES + wd.FRESH_DIALOG_FILES)
    assert len(every) > len(wd.dialogs("all", wd.DEV_DIALOG_FILES)) > len(wd.dialogs("all", wd.DEV_DIALOG_FILES[:3])) >= 340
    assert not set(wd.FRESH_DIALOG_FILES) & set(wd.DIALOG_FILES + wd.CHANGE_DIALOG_FILES)   # fresh dev: never trained on
    texts = {normalize(t["text"]) for d in every for t in d["turns"]}
    for name in ("profile_heldout.jsonl", working_eval.INDEPENDENT):
        turns = {normalize(t) for d in working_eval.load_dialogs(name) for t in d["turns"]}
        assert len(texts & turns) == 0, name
    kinds = {x["kind"] for d in every for t in d["turns"] for x in (t.get("facts") or []) + (t.get("replaces") or [])}
    assert "preference" not in kinds and {"goal", "style", "like", "dislike"} <= kinds
    dev4 = [d for d in wd.dialogs("dev", wd.DEV_DIALOG_FILES) if d["id"].startswith("wm4_")]
    assert 20 <= len(dev4) <= 40


def test_the_training_dialogs_split_by_dialog_and_give_replacement_pairs():
    """A dialog is wholly in the dev split or wholly trained on; each replacement pair names items stored before."""
    from memorykit.offline import working_data as wd

    fit, dev = wd.dialogs("fit"), wd.dialogs("dev")
    assert fit and dev and not {d["id"] for d in fit} & {d["id"] for d in dev}
    assert 0.15 < len(dev) / (len(fit) + len(dev)) < 0.35
    assert {t["text"] for d in dev for t in d["turns"]} - {m["text"] for m in wd.dialog_messages("fit")}
    pairs = wd.dialog_revisions("fit")
    assert any(p["replaces"] for p in pairs) and any(len(p["replaces"]) < len(p["old"]) for p in pairs)
    assert all(set(p["replaces"]) <= set(p["old"]) for p in pairs)
    assert wd.as_eval_dialog(dev[0])["turns"] == [t["text"] for t in dev[0]["turns"]]


def test_a_question_clause_keeps_its_question_mark():
    from memorykit.offline.working_read import clause_pieces

    assert clause_pieces("I want to learn Spanish. What is a good podcast? Keep it short!") == [
        "I want to learn Spanish", "What is a good podcast?", "Keep it short"]


# ------------------------------------------------------------------ working memory: places and goals
def test_a_goal_span_is_never_a_bare_year_or_number():
    from memorykit.offline.working_read import names_something

    for bare in ("Year", "2025", "this year", "June 3rd", "this month"):
        assert not names_something(bare), bare
    for real in ("learn Spanish", "run a marathon by May", "save 5000 euros"):
        assert names_something(real), real


@pytest.mark.parametrize("passing", [
    "My wife and I honeymooned in Paris back in 2015, best trip ever.",
    "My sister just moved to Melbourne for her new job.",
    "Next month we're flying to Tokyo for a conference.",
])
def test_a_place_mentioned_in_passing_is_not_where_the_user_lives(passing):
    from memorykit.offline.working_read import read

    assert read(passing).timezone is None, passing


def test_where_the_user_lives_sets_the_timezone_for_that_user_only(r, ns, llm):
    """Two users at once, one with an adversarial id: a home sets the timezone, a honeymoon does not."""
    wm = mk.WorkingMemory(r, ns, template=mk.PROFILE_TEMPLATE, scope="user")
    home, trip = "system|{x} ünï", "ana"
    wm.observe("I live in Lisbon and work from home.", llm, user_id=home)
    wm.observe("We honeymooned in Paris years ago. This year I want to learn to sail.", llm, user_id=trip)
    assert "Europe/Lisbon" in wm.get(home)
    got = wm.get(trip) or ""
    assert "Europe/Paris" not in got and "Lisbon" not in got
    assert "- Year" not in got
    wm.delete_all(trip)
    assert "Europe/Lisbon" in wm.get(home)
