"""Summaries as a view: policies, the summarize task on any backend, the trace check, the atomic
cursor under concurrent writers, and deliberate deletions next to a summary."""
import json
import threading
import time

import pytest

import memorykit as mk
from memorykit.memory import summarize as S
from memorykit.memory.short_term import CORRUPT, SUMMARY_HEADER
from memorykit.offline import summarize as offline_summarize
from tests.test_short_term import RecordingRecall, call, fix_ok, indexed
from scripted import ScriptedModel


def U(text):
    return mk.Message(role="user", content=text)


def A(text):
    return mk.Message(role="assistant", content=text)


class SlowLLM:
    """The offline backend, but each task takes a while: writers get to append while it works."""

    label = "offline (slow)"

    def __init__(self, delay=0.3):
        self.delay, self.inner, self.calls = delay, mk.get_llm("offline"), 0

    def perform(self, task, inp, tools=None):
        self.calls += 1
        time.sleep(self.delay)
        return self.inner.perform(task, inp, tools=tools)


def filled(r, ns, n_turns, system=True, h=None):
    h = mk.ChatHistory(r, "u", "t", namespace=ns) if h is None else h
    if system:
        h.append(mk.Message(role="system", content="You are a coach."))
    for i in range(n_turns):
        h.append([U(f"Turn {i}: I walked {1000 + i} steps."), A(f"Noted turn {i}.")])
    return h


def recent(h):
    """The messages after the summary's cursor, as the model gets them."""
    return h.view().recent


def test_by_count_leaves_system_summary_and_last_four(r, ns, llm):
    h = filled(r, ns, 6)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=10, keep_last=4))
    p = h.prompt_messages()
    assert [m.role for m in p] == ["system", "system", "user", "assistant", "user", "assistant"]
    assert p[0].content == "You are a coach." and p[1].content.startswith(SUMMARY_HEADER)
    assert p[2].content.startswith("Turn 4:")
    assert h.summary_info()["covers"] == 8 and h.summary_info()["cursor"] == 9
    assert len(h) == 13, "a summary is a view: every stored message is still there"
    assert "1000 steps" in h.summary() and "1003 steps" in h.summary()


def test_stored_count_is_unchanged_by_summarizing(r, ns, llm):
    h = filled(r, ns, 20)
    before = [m.id for m in h.messages()]
    for _ in range(3):
        mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=2))
        h.append([U("I slept seven hours."), A("Good.")])
    assert [m.id for m in h.messages()][:len(before)] == before and len(h) == len(before) + 6
    assert len(recent(h)) < len(h) - 1


def test_not_triggered_leaves_the_thread_alone(r, ns, llm):
    h = filled(r, ns, 5)
    before = [m.id for m in h.messages()]
    assert not mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=10, keep_last=4))
    assert [m.id for m in h.messages()] == before and h.summary() is None


def test_by_tokens_triggers_on_the_estimate(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([U("My sister Maria lives in Porto. " * 60), A("ok")])
    for i in range(3):
        h.append([U(f"I walked {1000 + i} steps."), A("ok")])
    policy = mk.ByTokens(max_tokens=400, keep_last=2)
    assert not mk.summarize_if_needed(h, llm, policy=mk.ByTokens(max_tokens=600, keep_last=2))
    assert mk.count_tokens(h.prompt_messages()) > 400
    assert mk.summarize_if_needed(h, llm, policy=policy)
    assert len(h) == 8 and h.summary_info()["covers"] == 6 and len(recent(h)) == 2
    assert "Maria" in h.summary() and mk.count_tokens(h.prompt_messages()) < 400
    assert not mk.summarize_if_needed(h, llm, policy=policy)


def test_rolling_summary_folds_in_the_previous_one(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([U("My name is Raphael."), A("Hi Raphael."), U("I am allergic to peanuts."), A("Noted."),
              U("ok"), A("ok")])
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=4, keep_last=2))
    first = h.summary()
    h.append([U("We fly to Tokyo on March 3."), A("Nice."), U("fine"), A("fine")])
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=4, keep_last=2))
    second = h.summary()
    assert second != first
    for fact in ("Raphael", "peanuts", "Tokyo", "March 3"):
        assert fact in second
    assert h.summary_info()["covers"] == 8 and len(recent(h)) == 2 and len(h) == 10


def test_kept_tail_never_splits_a_tool_call(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([U("q1"), A("a1"), U("q2"), A("a2"), U("What is my heart rate?"),
              mk.Message(role="assistant", content="", tool_calls=[call("c1")]),
              mk.Message(role="tool", content="72 bpm", tool_call_id="c1"), A("It is 72 bpm.")])
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=3))
    kept = recent(h)
    assert kept[0].content == "What is my heart rate?" and len(kept) == 4
    assert fix_ok(h.prompt_messages())


def test_prompt_messages_are_valid_after_summaries_and_deletions(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append(mk.Message(role="system", content="sys"))
    for i in range(6):
        h.append([U(f"rate {i}?"), mk.Message(role="assistant", content="", tool_calls=[call(f"c{i}")]),
                  mk.Message(role="tool", content=f"{70 + i} bpm", tool_call_id=f"c{i}"), A(f"{70 + i} bpm.")])
        mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=5, keep_last=3))
        p = h.prompt_messages(system="You are a coach.")
        assert fix_ok(p) and p[0].content == "You are a coach." and p[1].content == "sys"
    r.rpush(h.key, mk.Message(role="tool", content="stray", tool_call_id="nobody").to_json())
    assert fix_ok(h.prompt_messages()) and "stray" not in [m.content for m in h.prompt_messages()]
    assert len(h) == 26


def test_summary_and_thread_share_the_ttl(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", ttl=120, namespace=ns)
    h.append([U(f"I like item {i}.") if i % 2 == 0 else A("ok") for i in range(12)])
    assert mk.summarize_if_needed(h, llm)
    assert 100 < r.ttl(h.summary_key) <= 120
    h.append(U("more"))
    assert 100 < r.ttl(h.summary_key) <= 120


@pytest.mark.parametrize("garbage", ["   ", "I'd rather not.", '{"facts": "not a list"}', '["...", "<fact>"]',
                                     '{"summary": 3}'])
def test_garbage_from_the_model_is_a_failed_task_and_changes_nothing(r, ns, garbage):
    h = filled(r, ns, 8)
    before = [m.id for m in h.messages()]
    model = ScriptedModel(then=garbage)
    assert not mk.summarize_if_needed(h, model)
    assert model.calls == 2, "one repair round, then the task fails"
    assert [m.id for m in h.messages()] == before and h.summary() is None
    assert len(h.prompt_messages()) == len(before)


def test_made_up_facts_are_dropped_by_the_trace_check(r, ns, emb):
    h = filled(r, ns, 8)
    made_up = {"facts": ["User walked 1002 steps on turn 2.", "User's daughter Zoe lives in Lima.",
                         "User walked 9999 steps."]}
    assert mk.summarize_if_needed(h, ScriptedModel(then=json.dumps(made_up)), embedder=emb)
    info = h.summary_info()
    # 9999 is in no message, but the fact is close to one: that message is kept in its own words instead
    assert info["facts"] == ["User walked 1002 steps on turn 2.", 'User said: "Turn 0: I walked 1000 steps."']
    assert info["dropped"] == 1 and info["quoted"] == 1  # Zoe in Lima is close to nothing: dropped
    only_made_up = {"facts": ["User's daughter Zoe lives in Lima."]}
    h2 = filled(r, ns, 8, h=mk.ChatHistory(r, "u", "t2", namespace=ns))
    assert not mk.summarize_if_needed(h2, ScriptedModel(then=json.dumps(only_made_up)), embedder=emb)
    assert h2.summary() is None


def test_a_fact_the_check_cannot_verify_leaves_its_message_in_the_prompt(r, ns, emb):
    """The model writes "New York City" for "NYC": the check cannot find those names, so the summary keeps the
    user's own words instead, and the move stays in what the model sees (as does every stored message)."""
    h = mk.ChatHistory(r, "a|b", "t", namespace=ns)
    for text in ["Hi, I'm Priya.", "I moved to NYC last spring.", "btw I'm allergic to penicillin.",
                 "ok", "thanks", "what's up", "tell me more", "sure"]:
        h.append([U(text), A("Noted.")])
    facts = {"facts": ["User's name is Priya.", "User moved to New York City last spring.",
                       "User is allergic to penicillin."]}
    assert mk.summarize_if_needed(h, ScriptedModel(then=json.dumps(facts)), policy=mk.ByCount(10, 4), embedder=emb)
    info = h.summary_info()
    assert info["facts"] == ["User's name is Priya.", 'User said: "I moved to NYC last spring."',
                             "User is allergic to penicillin."]
    assert info["dropped"] == 0 and info["quoted"] == 1 and len(h) == 16
    assert "NYC" in "\n".join(m.content for m in h.prompt_messages())


def test_a_later_summary_keeps_an_earlier_fact_its_model_rewords_or_leaves_empty(r, ns, emb):
    """The earlier summary's messages are behind the cursor: its facts reach the model only through the summary.
    A second answer that rewords one past checking ("France" for "Paris") keeps the earlier words, and an empty
    one carries the earlier facts on; one that leaves a fact out (a newer fact, a budget) is the model's choice."""
    first = ["User lives in Berlin.", "User's sister Anna lives in Paris."]
    for second, facts in [(["User lives in Berlin.", "User's sister Anna lives in France."], first), ([], first),
                          (["User lives in Berlin."], first[:1])]:
        h = mk.ChatHistory(r, "u", f"t{len(second)}", namespace=ns)
        for text in ["I live in Berlin.", "My sister Anna lives in Paris.", "ok", "cool", "nice", "sure"]:
            h.append([U(text), A("Noted.")])
        policy = mk.ByCount(max_messages=10, keep_last=2)
        assert mk.summarize_if_needed(h, ScriptedModel(then=json.dumps({"facts": first})), policy, embedder=emb)
        for text in ["What's the weather?", "Thanks.", "I started running on Mondays.", "Hello again.", "Bye."]:
            h.append([U(text), A("Fine.")])
        assert mk.summarize_if_needed(h, ScriptedModel(then=json.dumps({"facts": second})), policy, embedder=emb)
        assert h.summary_info()["facts"] == facts and h.summary_info()["cursor"] == 20


def test_an_update_the_check_cannot_verify_quotes_the_new_message_not_the_old_fact(r, ns, emb):
    """"User now lives in Munich, Germany" is closest to the earlier "User lives in Berlin." and names a word no
    message holds: the new message it comes from is quoted, the outdated fact does not come back."""
    policy = mk.ByCount(max_messages=10, keep_last=2)
    for n, fact in enumerate(["User now lives in Munich, Germany.", "User lives in München now."]):
        h = mk.ChatHistory(r, "u", f"t{n}", namespace=ns)
        for text in ["I live in Berlin.", "ok", "cool", "nice", "sure", "fine"]:
            h.append([U(text), A("Noted.")])
        assert mk.summarize_if_needed(h, ScriptedModel(then=json.dumps({"facts": ["User lives in Berlin."]})),
                                      policy, embedder=emb)
        for text in ["I moved to Munich last week.", "Thanks.", "Hello again.", "How are you?", "Bye."]:
            h.append([U(text), A("Fine.")])
        assert mk.summarize_if_needed(h, ScriptedModel(then=json.dumps({"facts": [fact]})), policy, embedder=emb)
        assert h.summary_info()["facts"] == ['User said: "I moved to Munich last week."']


def test_trace_check_names_what_is_missing(emb):
    sources = ["I moved to Lyon in 2021 for a postdoc.", "My colleague Théo calls on Thursdays."]
    traces = S.trace(["User moved to Lyon in 2021.", "User moved to Lyon in 2012.", "User has a cat named Felix."],
                     sources, emb)
    assert traces[0].ok and traces[0].source == 0
    assert not traces[1].ok and traces[1].missing == {"2012"}
    assert not traces[2].ok


def test_advance_refuses_a_stale_view(r, ns):
    h = filled(r, ns, 4)
    view = h.view()
    r.set(h.summary_key, '{"text": "someone else", "cursor": 3}')
    assert not h.advance(view, 2, {"text": "mine"})
    assert len(h) == 9 and h.summary() == "someone else"
    r.delete(h.summary_key)
    view = h.view()
    r.lset(h.key, 1, U("edited").to_json())
    assert not h.advance(view, 2, {"text": "mine"})
    assert h.summary() is None
    view = h.view()
    assert h.advance(view, 2, {"text": "mine"}) and h.summary_info()["cursor"] == 3


def test_eight_writers_during_summarization_lose_nothing(r, ns):
    rec = RecordingRecall()
    h = filled(r, ns, 10, h=indexed(r, ns, rec))
    stop = threading.Event()
    written = []

    def writer(w):
        mine = indexed(r, ns, rec)
        i = 0
        while not stop.is_set() or i < 5:
            written.extend(mine.append([U(f"writer {w} says {i}"), A(f"ack {w} {i}")]))
            i += 1
            time.sleep(0.002)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    [t.start() for t in threads]
    llm, done = SlowLLM(0.15), 0
    for _ in range(4):
        done += mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=10, keep_last=4))
    stop.set()
    [t.join() for t in threads]
    assert done >= 3 and len(written) > 40

    total_conversation = 20 + len(written)
    stored = h.messages()
    assert len(stored) == 1 + total_conversation and {m.id for m in written} <= {m.id for m in stored}
    info, view = h.summary_info(), h.view()
    assert info["covers"] + len(view.raws) == total_conversation
    assert stored[info["cursor"] - 1].id == info["last_id"], "the cursor sits right after the last summarized message"
    assert rec.removed == [] and {m.id for m in written} <= {i for _, _, i in rec.added}


def test_cursor_is_atomic_under_concurrent_appends(r, ns, llm):
    h = filled(r, ns, 30)
    stop, errors = threading.Event(), []

    def writer(w):
        mine = mk.ChatHistory(r, "u", "t", namespace=ns)
        i = 0
        while not stop.is_set() and i < 30:  # bounded: each summary embeds every new message
            mine.append([U(f"w{w} m{i}"), A(f"ok {w} {i}")])
            i += 1
            time.sleep(0.05)

    def checker():
        while not stop.is_set():
            info, stored = h.summary_info(), h.messages()
            if info and stored[info["cursor"] - 1].id != info["last_id"]:
                errors.append(info)
            time.sleep(0.02)

    workers = [threading.Thread(target=writer, args=(w,)) for w in range(4)] + [threading.Thread(target=checker)]
    [t.start() for t in workers]
    for _ in range(5):
        mk.summarize_if_needed(h, SlowLLM(0.05), policy=mk.ByCount(max_messages=10, keep_last=4))
    stop.set()
    [t.join() for t in workers]
    assert errors == []
    view = h.view()
    assert h.summary_info()["covers"] + len(view.raws) == len(h) - 1


def test_two_summarizers_racing_count_each_message_once(r, ns):
    h = filled(r, ns, 15)
    results = []
    workers = [threading.Thread(target=lambda: results.append(
        mk.summarize_if_needed(mk.ChatHistory(r, "u", "t", namespace=ns), SlowLLM(0.1),
                               policy=mk.ByCount(max_messages=10, keep_last=4)))) for _ in range(2)]
    [t.start() for t in workers]
    [t.join() for t in workers]
    assert results.count(True) >= 1
    assert h.summary_info()["covers"] + len(h.view().raws) == 30 and len(h) == 31


# ---------------------------------------------------------------- deliberate deletions next to a summary
def test_delete_first_moves_the_cursor_and_keeps_the_summary(r, ns, llm):
    h = filled(r, ns, 8)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=4))
    before, visible = h.summary_info(), [m.id for m in recent(h)]
    gone = h.delete_first(4)
    assert len(gone) == 4 and len(h) == 13
    after = h.summary_info()
    assert after["text"] == before["text"] and after["cursor"] == before["cursor"] - 4
    assert [m.id for m in recent(h)] == visible


def test_forgetting_a_summarized_message_drops_the_summary(r, ns, llm):
    h = filled(r, ns, 8)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=4))
    assert "1001 steps" in h.summary()
    gone = h.delete_where(lambda m: "1001 steps" in m.content)
    assert [m.content for m in gone] == ["Turn 1: I walked 1001 steps."]
    assert h.summary() is None and len(h) == 16
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=4))
    assert "1001 steps" not in h.summary() and "1002 steps" in h.summary()


def test_forgetting_a_recent_message_keeps_the_summary(r, ns, llm):
    h = filled(r, ns, 8)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=4))
    cursor = h.summary_info()["cursor"]
    h.delete_where(lambda m: "1007 steps" in m.content)
    assert h.summary_info()["cursor"] == cursor and "1007 steps" not in str(h.prompt_messages())


def test_a_summary_left_behind_by_a_deleted_list_is_ignored(r, ns, llm):
    h = filled(r, ns, 8)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=4))
    r.delete(h.key)
    h.append(U("a new start"))
    assert [m.content for m in h.prompt_messages()] == ["a new start"]


def test_corrupt_entries_are_counted_but_never_summarized(r, ns, llm):
    h = filled(r, ns, 6)
    r.linsert(h.key, "AFTER", r.lindex(h.key, 2), "{broken")
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=10, keep_last=4))
    assert "broken" not in h.summary() and len(h) == 14
    assert all(m.name != CORRUPT for m in h.prompt_messages())


# ---------------------------------------------------------------- the task and the offline summarizer
def test_the_task_renders_previous_facts_and_messages_without_markers():
    inp = S.SummarizeInput(previous=["User has a dog."], messages=S.source([U("I live in Oslo."), A("Nice.")]))
    text = S.render(inp)
    assert "- User has a dog." in text and "user: I live in Oslo." in text
    assert "[task:" not in text + S.SUMMARIZE.prompt and "(offline)" not in text + S.SUMMARIZE.prompt
    assert S.SUMMARIZE.output.model_json_schema()["type"] == "object"


def test_offline_summary_keeps_names_dates_preferences_and_drops_small_talk(llm):
    convo = [U("Hey there!"), A("Hello!"),
             U("My daughter Léa starts school on September 4."), A("Exciting."),
             U("Thanks, that's kind."), A("You're welcome."),
             U("I can't stand cilantro, and I prefer tea over coffee."), A("Got it."),
             U("Sounds good."), A("Great."),
             U("How's the weather?"), A("(offline) I don't know that yet."),
             U("We moved to Montreal in 2021 for my job at Ubisoft."), A("Interesting.")]
    out = S.summarize_messages(convo, llm).text
    for fact in ("Léa", "September 4", "cilantro", "tea", "Montreal", "2021", "Ubisoft"):
        assert fact in out, fact
    low = out.lower()
    for chatter in ("hey there", "sounds good", "that's kind", "weather", "offline"):
        assert chatter not in low
    assert all(line.startswith("- ") for line in out.splitlines())


def test_offline_summary_of_nothing_useful_is_empty_and_the_next_one_fills_it(llm):
    assert S.summarize_messages([U("ok"), A("ok"), U("Thanks!"), A("Sure.")], llm).facts == []
    assert S.summarize_messages([U("I love jazz.")], llm, previous=[]).facts == ["user: I love jazz."]


def test_offline_summary_collapses_repeats_and_keeps_the_budget():
    inp = S.SummarizeInput(previous=["user: I live in Berlin."],
                           messages=S.source([U("I live in Berlin."), U("I live in Berlin since 2019.")]))
    facts = offline_summarize.run(inp).facts
    assert facts[-1] == "user: I live in Berlin since 2019." and len(facts) <= 2
    many = S.SummarizeInput(messages=S.source([U(f"My item number {i} is a red {c} box from Lisbon.")
                                               for i, c in enumerate(["wooden", "metal", "paper"] * 20)]),
                            max_facts=10)
    assert len(offline_summarize.run(many).facts) <= 10


def test_policies_validate_their_arguments():
    with pytest.raises(mk.ValidationError):
        mk.ByCount(max_messages=4, keep_last=4)
    with pytest.raises(mk.ValidationError):
        mk.ByTokens(max_tokens=0)
