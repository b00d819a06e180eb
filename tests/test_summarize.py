"""Summarization policies, the offline summarizer, and the race-free rewrite under concurrent writers."""
import threading
import time

import pytest

import memorykit as mk
from memorykit.summarize import merge_bullets, offline_summarize, summary_prompt
from tests.test_short_term import RecordingRecall, call, fix_ok


def U(text):
    return mk.Message(role="user", content=text)


def A(text):
    return mk.Message(role="assistant", content=text)


class SlowLLM:
    """The offline model, but it takes a while: writers get to append while it works."""

    label = "offline (slow)"

    def __init__(self, delay=0.3):
        self.delay, self.inner, self.calls = delay, mk.OfflineChat(), 0

    def chat(self, messages, tools=None, response_format=None):
        self.calls += 1
        time.sleep(self.delay)
        return self.inner.chat(messages, tools, response_format)


def filled(r, ns, n_turns, system=True, recall=None):
    h = mk.ChatHistory(r, "u", "t", namespace=ns, recall=recall)
    if system:
        h.append(mk.Message(role="system", content="You are a coach."))
    for i in range(n_turns):
        h.append([U(f"Turn {i}: I walked {1000 + i} steps."), A(f"Noted turn {i}.")])
    return h


def test_by_count_leaves_system_summary_and_last_four(r, ns, llm):
    h = filled(r, ns, 6)
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=10, keep_last=4))
    p = h.prompt_messages()
    assert [m.role for m in p] == ["system", "system", "user", "assistant", "user", "assistant"]
    assert p[0].content == "You are a coach." and p[1].content.startswith("Summary of the earlier conversation:")
    assert p[2].content.startswith("Turn 4:")
    assert h.summary_info()["covers"] == 8 and len(h) == 5
    assert "1000 steps" in h.summary() and "1003 steps" in h.summary()


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
    assert len(h) == 2 and h.summary_info()["covers"] == 6
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
    assert h.summary_info()["covers"] == 8 and len(h) == 2


def test_kept_tail_never_splits_a_tool_call(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", namespace=ns)
    h.append([U("q1"), A("a1"), U("q2"), A("a2"), U("What is my heart rate?"),
              mk.Message(role="assistant", content="", tool_calls=[call("c1")]),
              mk.Message(role="tool", content="72 bpm", tool_call_id="c1"), A("It is 72 bpm.")])
    assert mk.summarize_if_needed(h, llm, policy=mk.ByCount(max_messages=6, keep_last=3))
    kept = h.messages()
    assert kept[0].content == "What is my heart rate?" and len(kept) == 4
    assert fix_ok(h.prompt_messages())


def test_summary_and_thread_share_the_ttl(r, ns, llm):
    h = mk.ChatHistory(r, "u", "t", ttl=120, namespace=ns)
    h.append([U(f"I like item {i}.") if i % 2 == 0 else A("ok") for i in range(12)])
    assert mk.summarize_if_needed(h, llm)
    assert 100 < r.ttl(h.summary_key) <= 120
    h.append(U("more"))
    assert 100 < r.ttl(h.summary_key) <= 120


def test_empty_summary_from_the_model_is_an_error_and_changes_nothing(r, ns):
    class Mute:
        def chat(self, messages, tools=None, response_format=None):
            return A("   ")

    h = filled(r, ns, 8)
    before = [m.id for m in h.messages()]
    with pytest.raises(mk.LLMError):
        mk.summarize_if_needed(h, Mute())
    assert [m.id for m in h.messages()] == before and h.summary() is None


def test_drop_prefix_refuses_a_stale_snapshot(r, ns):
    h = filled(r, ns, 4)
    snap = h.snapshot()
    r.set(h.summary_key, '{"text": "someone else", "covers": 2}')
    assert not h.drop_prefix(snap, 3, {"text": "mine", "covers": 2})
    assert len(h) == 9 and h.summary() == "someone else"
    snap = h.snapshot()
    r.lset(h.key, 1, U("edited").to_json())
    assert not h.drop_prefix(snap, 3, {"text": "mine", "covers": 2})
    assert len(h) == 9


def test_eight_writers_during_summarization_lose_nothing(r, ns):
    rec = RecordingRecall()
    h = filled(r, ns, 10, recall=rec)
    stop = threading.Event()
    written = []

    def writer(w):
        mine = mk.ChatHistory(r, "u", "t", namespace=ns, recall=rec)
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

    info, remaining = h.summary_info(), h.messages()
    assert remaining[0].role == "system"
    total_conversation = 20 + len(written)
    assert info["covers"] + (len(remaining) - 1) == total_conversation
    added = {i for _, _, i in rec.added}
    removed = [i for _, _, i in rec.removed]
    kept = {m.id for m in remaining}
    assert len(removed) == len(set(removed)) == info["covers"]
    assert set(removed) | kept == added and not set(removed) & kept
    assert {m.id for m in written} <= added


def test_two_summarizers_racing_count_each_message_once(r, ns):
    h = filled(r, ns, 15)
    results = []
    workers = [threading.Thread(target=lambda: results.append(
        mk.summarize_if_needed(mk.ChatHistory(r, "u", "t", namespace=ns), SlowLLM(0.1),
                               policy=mk.ByCount(max_messages=10, keep_last=4)))) for _ in range(2)]
    [t.start() for t in workers]
    [t.join() for t in workers]
    assert results.count(True) >= 1
    assert h.summary_info()["covers"] + len(h) - 1 == 30


# ---------------------------------------------------------------- the offline summarizer
def test_summary_prompt_names_the_task_and_carries_the_previous_summary():
    p = summary_prompt([U("I live in Oslo."), A("Nice.")], previous="- User has a dog.")
    assert p[0].role == "system" and p[0].content.startswith("[task: summarize]")
    assert "- User has a dog." in p[1].content and "user: I live in Oslo." in p[1].content


def test_offline_summary_keeps_names_dates_preferences_and_drops_small_talk(llm):
    convo = [U("Hey there!"), A("Hello!"),
             U("My daughter Léa starts school on September 4."), A("Exciting."),
             U("Thanks, that's kind."), A("You're welcome."),
             U("I can't stand cilantro, and I prefer tea over coffee."), A("Got it."),
             U("Sounds good."), A("Great."),
             U("How's the weather?"), A("(offline) I don't know that yet."),
             U("We moved to Montreal in 2021 for my job at Ubisoft."), A("Interesting.")]
    out = mk.summarize_messages(convo, llm)
    for fact in ("Léa", "September 4", "cilantro", "tea", "Montreal", "2021", "Ubisoft"):
        assert fact in out, fact
    low = out.lower()
    for chatter in ("hey there", "sounds good", "that's kind", "weather", "offline"):
        assert chatter not in low
    assert all(line.startswith("- ") for line in out.splitlines())


def test_offline_summary_of_nothing_useful_is_labelled():
    out = offline_summarize(summary_prompt([U("ok"), A("ok")]))
    assert out.startswith("- (") and "(" not in offline_summarize(summary_prompt([U("I love jazz.")], previous=out))


def test_merge_keeps_newer_wording_and_caps_length():
    merged = merge_bullets(["User lives in Berlin."], ["User lives in Berlin since 2019."])
    assert merged == ["User lives in Berlin since 2019."]
    many = [f"User's item {i} is red." for i in range(50)] + ["User's name is Raphael and User was born in 1980."]
    capped = merge_bullets([], many, limit=10)
    assert len(capped) == 10 and capped[-1].startswith("User's name is Raphael")


def test_policies_validate_their_arguments():
    with pytest.raises(mk.ValidationError):
        mk.ByCount(max_messages=4, keep_last=4)
    with pytest.raises(mk.ValidationError):
        mk.ByTokens(max_tokens=0)
