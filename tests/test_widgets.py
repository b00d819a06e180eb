"""ChatWidget state after send, Enter, Send click, clear, start, user switch, feedback toggle, errors."""
import pytest

import memorykit as mk
import memorykit.agent.memory_agent as agent_module
from memorykit.course.widgets import PLACEHOLDER
from memorykit.errors import LLMError
from memorykit.llm import TaskFailed


@pytest.fixture
def agent(r, emb, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, embedder=emb, namespace=ns)
    yield a
    a.close()


def bubbles(widget) -> list[str]:
    out = []
    for row in widget.conversation.children:
        html = row.children[0].value if hasattr(row, "children") else row.value
        out.append(html)
    return out


def thumbs(widget, index=-1):
    replies = [row for row in widget.conversation.children if hasattr(row, "children")]
    return replies[index].children[1], replies[index].children[2]


def test_send_shows_reply_memories_and_timings(agent):
    w = mk.ChatWidget(agent, user_id="lena", thread_id="t1")
    assert w.input.placeholder == PLACEHOLDER
    assert "offline" in w.backend.value
    turn = w.send("Hi, my name's Lena. I'm allergic to peanuts.")
    assert turn.ok and "Nice to meet you, Lena" in turn.reply
    texts = bubbles(w)
    assert len(texts) == 2 and "allergic to peanuts" in texts[0] and "Nice to meet you, Lena" in texts[1]
    assert "allergic to peanuts" in w.panels["Long-term"].value and "ADD" in w.panels["Long-term"].value
    assert "Lena" in w.panels["Working memory"].value
    assert "user-visible latency" in w.panels["Timings"].value and "remember" in w.panels["Timings"].value
    assert "model calls (whole turn)" in w.panels["Timings"].value and "model call(s)" in w.status.value
    assert "assistant" in w.panels["Thread"].value
    assert not w.send_button.disabled and w.progress.layout.visibility == "hidden"


def test_enter_and_send_button_submit_once_and_clear_the_box(agent):
    w = mk.ChatWidget(agent, user_id="lena", thread_id="t1")
    w.input.value = "I live in Hamburg."  # what pressing Enter syncs (continuous_update=False)
    assert w.input.value == "" and len(w.turns) == 1
    w.send_button.click()  # empty box: nothing is sent
    assert len(w.turns) == 1
    w.input.unobserve(w._on_enter, names="value")
    w.input.value = "Where do I live?"
    w.input.observe(w._on_enter, names="value")
    w.send_button.click()
    assert len(w.turns) == 2 and "Hamburg" in w.turns[-1].reply
    assert len(agent.history("lena", "t1").messages()) == 4


def test_clear_chat_keeps_long_term_and_start_chat_opens_a_new_thread(agent):
    w = mk.ChatWidget(agent, user_id="raphael", thread_id="t1")
    w.send("My wife and I went to Paris in 2009 for our honeymoon.")
    w.clear_chat()
    assert agent.history("raphael", "t1").messages() == []
    assert "new conversation" in bubbles(w)[0] and "long-term memory kept" in w.status.value
    assert "Paris" in w.panels["Long-term"].value
    w.start_chat()
    assert w.thread_id != "t1" and w.turns == []
    turn = w.send("Where did I go back in 2009?")
    assert "Paris" in turn.reply and turn.thread_id == w.thread_id


def test_switching_user_shows_only_that_users_memories(agent):
    w = mk.ChatWidget(agent, user_id="lena", thread_id="t1")
    w.send("I'm allergic to peanuts.")
    w.user_box.value = "bob"
    assert w.turns == [] and "peanuts" not in w.panels["Long-term"].value
    assert "peanuts" not in " ".join(bubbles(w))
    turn = w.send("What am I allergic to?")
    assert "peanuts" not in turn.reply
    w.user_box.value = "lena"
    assert "peanuts" in w.panels["Long-term"].value and "peanuts" in " ".join(bubbles(w))


def test_feedback_toggle_switch_and_persistence(agent):
    w = mk.ChatWidget(agent, user_id="lena", thread_id="t1")
    w.send("Hi, I'm Lena.")
    up, down = thumbs(w)
    assert up.button_style == down.button_style == ""
    up.click()
    up, down = thumbs(w)
    assert up.button_style == "success" and down.button_style == ""
    assert agent.feedback.count("lena", "positive") == 1
    down.click()  # the other label switches
    up, down = thumbs(w)
    assert up.button_style == "" and down.button_style == "danger"
    assert agent.feedback.count("lena", "positive") == 0 and agent.feedback.count("lena", "negative") == 1
    reopened = mk.ChatWidget(agent, user_id="lena", thread_id="t1")  # the label comes back from Redis
    assert thumbs(reopened)[1].button_style == "danger"
    assert reopened.toggle_feedback(-1, "negative") is None  # the same label again removes it
    assert thumbs(reopened)[1].button_style == "" and agent.feedback.count("lena") == 0


def test_errors_are_shown_in_the_widget_not_raised(r, ns):
    class Down:
        label = "down"

        def chat(self, messages, tools=None, **kwargs):
            raise LLMError("the model server answered HTTP 503: overloaded", kind="server", status=503)

    a = mk.MemoryAgent(r, llm=Down(), namespace=ns, memory="short_term")
    w = mk.ChatWidget(a, user_id="u1", thread_id="t1")
    turn = w.send("Hello?")
    assert not turn.ok and "HTTP 503" in w.status.value and "⚠" in w.status.value
    assert "Hello?" in bubbles(w)[0]  # the user's message is kept and shown
    assert w.send("   ") is None and "empty" in w.status.value
    w.user_box.value = "not valid:\x00"
    assert "⚠" in w.status.value
    assert "no long-term memory" in w.panels["Long-term"].value


def test_stateless_agent_feedback_is_explained(r, llm, ns):
    a = mk.MemoryAgent(r, llm=llm, namespace=ns, memory=False)
    w = mk.ChatWidget(a, user_id="u1", thread_id="t1")
    w.send("Hello")
    assert all(not hasattr(row, "children") for row in w.conversation.children)  # no 👍 / 👎 without a store
    assert w.toggle_feedback(-1, "positive") is None and "only with memory" in w.status.value
    assert "stateless" in w.backend.value


def test_failed_memory_steps_are_shown(agent, monkeypatch):
    def bad_extract(*args, **kwargs):
        raise TaskFailed("extract_memories", "the model did not answer within 30 s")

    monkeypatch.setattr(agent_module, "extract_memories", bad_extract)
    w = mk.ChatWidget(agent, user_id="lena", thread_id="t1")
    turn = w.send("I'm allergic to peanuts.")
    assert turn.ok and list(turn.failed_steps) == ["extract"]
    assert "⚠" in w.status.value and "extract" in w.status.value and "30 s" in w.status.value
    assert "extract ⚠ failed" in w.panels["Timings"].value and "failed steps" in w.panels["Timings"].value
    assert len(bubbles(w)) == 2  # the message and the reply are both shown and kept


def test_memory_panel_shows_score_components(agent):
    from memorykit.agent.memory_agent import Turn
    from memorykit.memory.long_term import MemoryHit
    from memorykit.messages import Message

    widget = mk.ChatWidget(agent, user_id="ana")
    memory = agent.store.add("User lives in Porto", user_id="ana")
    turn = Turn(user_id="ana", thread_id="t", user_message=Message(role="user", content="Where do I live?"))
    turn.memories_used = [MemoryHit(memory, 0.31, text_score=2.5, recency=0.75, score=0.03, rank=1)]
    html = widget._long_term_html(turn)
    for shown in ("distance", "text score", "recency", "fused rank", "0.31", "2.50", "0.75", "User lives in Porto"):
        assert shown in html
    turn.memories_used = [MemoryHit(memory, 0.31)]  # plain vector search: the other parts are absent
    assert "–" in widget._long_term_html(turn)
