"""A chat cell for notebooks: talk to a MemoryAgent and watch what it remembers.

``ChatWidget(agent)`` shows a user id and thread, Start / Clear chat, the conversation with
👍 / 👎 on each reply, and a side panel (Thread, Long-term, Working memory, Tools, Timings:
per-step time, model calls, tokens, failed steps) refreshed after every turn. ``widget.send(text)``
does exactly what typing and pressing Enter or Send does, so tests and nbval drive the same code
path as a click.
"""
from __future__ import annotations

import html
import itertools
import logging
from typing import Any

import ipywidgets as w

from ..agent.memory_agent import BACKGROUND_STEPS, FOREGROUND_STEPS, Turn
from ..messages import Message

log = logging.getLogger(__name__)
_thread_counter = itertools.count(1)
PLACEHOLDER = "Type a message and press Enter"
TABS = ("Thread", "Long-term", "Working memory", "Tools", "Timings")
LABELS = ("positive", "negative")
_ERROR = "<span style='color:#b91c1c'>⚠ {}</span>"
_NOTE = "<span style='color:#555'>{}</span>"


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _short(text: str, n: int = 140) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _table(rows: list[list[Any]], header: list[str]) -> str:
    head = "".join(f"<th style='text-align:left;padding:2px 6px'>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 6px;vertical-align:top'>{_esc(c)}</td>"
                                    for c in row) + "</tr>" for row in rows)
    return f"<table style='font-size:12px;border-collapse:collapse'><tr>{head}</tr>{body}</table>"


SCORE_FIELDS = ("distance", "text_score", "recency", "rank")


def _num(value: Any) -> str:
    """A score component as the panel shows it: two decimals, an int rank, or a dash when absent."""
    if value is None:
        return "–"
    return str(value) if isinstance(value, int) else f"{value:.2f}"


def _section(title: str, body: str) -> str:
    return f"<div style='margin:4px 0 8px'><b style='font-size:12px'>{_esc(title)}</b>{body}</div>"


class ChatWidget:
    """An ipywidgets chat UI over a :class:`memorykit.agent.MemoryAgent`.

    State a test can read: ``turns`` (this session's Turns), ``replies()`` (the thread's
    user / reply pairs), ``feedback`` (reply id -> "positive" / "negative"), ``status.value``
    and each panel's HTML in ``panels``.
    """

    def __init__(self, agent, user_id: str = "raphael", thread_id: str | None = None):
        self.agent = agent
        self.turns: list[Turn] = []
        self.feedback: dict[str, str] = {}
        self.user_box = w.Text(value=user_id, description="User id", continuous_update=False,
                               layout=w.Layout(width="200px"))
        self.thread_box = w.Text(value=thread_id or self._new_thread_id(), description="Thread",
                                 continuous_update=False, layout=w.Layout(width="200px"))
        self.start_button = w.Button(description="Start chat", icon="plus", tooltip="A new thread, same user")
        self.clear_button = w.Button(description="Clear chat", icon="trash",
                                     tooltip="Delete this thread; long-term memory stays")
        self.backend = w.HTML(self._backend_html())
        self.conversation = w.VBox(layout=w.Layout(width="100%", min_height="120px", max_height="420px",
                                                   overflow_y="auto", border="1px solid #ddd", padding="6px"))
        self.input = w.Text(placeholder=PLACEHOLDER, continuous_update=False, layout=w.Layout(width="75%"))
        self.send_button = w.Button(description="Send", button_style="primary", icon="paper-plane")
        self.status = w.HTML("")
        self.progress = w.IntProgress(value=0, min=0, max=3, layout=w.Layout(width="100px", visibility="hidden"))
        self.panels = {name: w.HTML() for name in TABS}
        self.tabs = w.Tab(children=[w.Box([p], layout=w.Layout(max_height="460px", overflow_y="auto"))
                                    for p in self.panels.values()], layout=w.Layout(width="100%"))
        self.tabs.titles = TABS

        self.send_button.on_click(lambda _b: self._submit())
        self.input.observe(self._on_enter, names="value")
        self.start_button.on_click(lambda _b: self.start_chat())
        self.clear_button.on_click(lambda _b: self.clear_chat())
        self.user_box.observe(lambda _c: self._switch(), names="value")
        self.thread_box.observe(lambda _c: self._switch(), names="value")

        controls = w.HBox([self.user_box, self.thread_box, self.start_button, self.clear_button, self.backend])
        chat = w.VBox([self.conversation, w.HBox([self.input, self.send_button, self.progress]), self.status],
                      layout=w.Layout(width="56%"))
        side = w.VBox([self.tabs], layout=w.Layout(width="44%"))
        self.root = w.VBox([controls, w.HBox([chat, side])])
        self.refresh()

    # ------------------------------------------------------------------ display
    def _ipython_display_(self):
        from IPython.display import display

        display(self.root)

    def _backend_html(self) -> str:
        label = getattr(self.agent, "label", None) or str(getattr(self.agent.llm, "label", "model"))
        colour = "#b45309" if label == "offline" else "#15803d"
        mode = self.agent.memory or "stateless"
        return (f"<span style='margin-left:8px;color:{colour}'>LLM: <b>{_esc(label)}</b></span>"
                f"<span style='margin-left:8px;color:#555'>memory: {_esc(mode)}, "
                f"retrieval: {_esc(self.agent.retrieval)}</span>")

    @staticmethod
    def _new_thread_id() -> str:
        return f"chat-{next(_thread_counter)}"

    @property
    def user_id(self) -> str:
        return self.user_box.value.strip()

    @property
    def thread_id(self) -> str:
        return self.thread_box.value.strip()

    # ------------------------------------------------------------------ actions
    def _on_enter(self, change) -> None:
        if change["new"].strip():
            self._submit()

    def _submit(self) -> None:
        text = self.input.value
        if not text.strip():
            return
        self.input.unobserve(self._on_enter, names="value")
        self.input.value = ""
        self.input.observe(self._on_enter, names="value")
        self.send(text)

    def send(self, text: str) -> Turn | None:
        """Send one message as the user (what Enter / Send does); returns the Turn, or None on bad input."""
        self._set_busy(True, "thinking… (retrieving memories, calling the model)")
        try:
            turn = self.agent.chat(text, user_id=self.user_id, thread_id=self.thread_id)
        except Exception as exc:  # shown in the widget, not as a traceback
            log.warning("chat turn failed: %s", exc)
            self._set_busy(False, _ERROR.format(_esc(exc)))
            return None
        self.turns.append(turn)
        if turn.error:
            self._set_busy(False, _ERROR.format(_esc(turn.error)))
            self.refresh()
            return turn
        self._render_conversation()  # the reply shows now; memory writes finish below
        self._set_busy(True, f"replied in {turn.reply_ms:.0f} ms; saving memories…")
        try:
            self.agent.flush(turn.user_id, turn.thread_id)  # this chat's writes, not other users'
        except Exception as exc:
            log.warning("background writes failed: %s", exc)
            turn.failed_steps.setdefault("background", f"{type(exc).__name__}: {exc}")
        if turn.failed_steps:
            note = _ERROR.format(_esc("some memory steps failed (the reply and your message are saved): "
                                      + "; ".join(f"{k}: {v}" for k, v in turn.failed_steps.items())))
        else:
            note = _NOTE.format(f"replied in {turn.reply_ms:.0f} ms; memory writes took "
                                f"{turn.background_ms:.0f} ms more (in the background); "
                                f"{turn.model_calls} model call(s), {turn.tokens_in} tokens in, "
                                f"{turn.tokens_out} out")
        self._set_busy(False, note)
        self.refresh()
        return turn

    def _set_busy(self, busy: bool, message: str) -> None:
        self.progress.layout.visibility = "visible" if busy else "hidden"
        self.progress.value = min(self.progress.value + 1, self.progress.max) if busy else 0
        self.send_button.disabled = busy
        self.status.value = message

    def start_chat(self) -> None:
        """A new thread for the same user: short-term memory starts empty, long-term stays."""
        self.thread_box.value = self._new_thread_id()
        self.status.value = _NOTE.format("new thread; long-term memory carries over")

    def clear_chat(self) -> None:
        """Delete the current thread's messages and summary; long-term memory is kept."""
        try:
            self.agent.clear(self.user_id, self.thread_id)
        except Exception as exc:
            self.status.value = _ERROR.format(_esc(exc))
            return
        self.turns, self.feedback = [], {}
        self.refresh()
        self.status.value = _NOTE.format("thread cleared; long-term memory kept")

    def _switch(self) -> None:
        self.turns, self.feedback = [], {}
        self.status.value = ""
        self.refresh()

    def replies(self) -> list[tuple[Message | None, Message]]:
        """The thread's (user message, assistant reply) pairs, oldest first."""
        pairs, last_user = [], None
        for m in self._messages():
            if m.role == "user":
                last_user = m
            elif m.role == "assistant" and m.content and not m.tool_calls:
                pairs.append((last_user, m))
        return pairs

    def toggle_feedback(self, index: int, label: str) -> str | None:
        """👍 / 👎 on reply ``index`` (0 = the thread's first reply; -1 = the last): the same label
        again removes it, the other one switches. Returns the reply's label now (or None)."""
        if label not in LABELS:
            raise ValueError(f"label must be one of {LABELS}, got {label!r}")
        question, reply = self.replies()[index]
        turn = Turn(self.user_id, self.thread_id,
                    question or Message(role="user", content="(no question)"), reply=reply.content)
        try:
            if self.agent.feedback is None:
                raise ValueError("feedback is stored only with memory='full'")
            outcome = self.agent.feedback.mark(turn.user_id, turn.user_message.content, turn.reply, label)
        except Exception as exc:
            self.status.value = _ERROR.format(_esc(exc))
            return self.feedback.get(reply.id)
        if outcome == "removed":
            self.feedback.pop(reply.id, None)
        else:
            self.feedback[reply.id] = label
        self.status.value = _NOTE.format(f"feedback {outcome}: {label}" if outcome != "removed"
                                         else "feedback removed")
        self.refresh()
        return self.feedback.get(reply.id)

    # ------------------------------------------------------------------ rendering
    def _messages(self) -> list[Message]:
        if not self.user_id or not self.thread_id:
            return []
        return self.agent.history(self.user_id, self.thread_id).messages()

    def refresh(self) -> None:
        """Redraw the conversation and every panel from Redis."""
        try:
            self._render_conversation()
            self._render_panels()
        except Exception as exc:
            log.warning("could not refresh the chat widget: %s", exc)
            self.status.value = _ERROR.format(_esc(exc))

    def _render_conversation(self) -> None:
        rows = []
        feedback_state = self._stored_feedback()
        reply_index = {m.id: i for i, (_q, m) in enumerate(self.replies())}
        for m in self._messages():
            if m.role not in ("user", "assistant") or not m.content:
                continue
            who = "🧑 you" if m.role == "user" else "🤖 agent"
            colour = "#eef2ff" if m.role == "user" else "#f0fdf4"
            bubble = w.HTML(f"<div style='margin:2px 0;padding:3px 6px;background:{colour};border-radius:6px'>"
                            f"<b>{who}:</b> {_esc(m.content)}</div>", layout=w.Layout(width="82%"))
            if m.id in reply_index and getattr(self.agent, "feedback", None) is not None:
                rows.append(w.HBox([bubble, *self._feedback_buttons(reply_index[m.id], feedback_state.get(m.id))]))
            else:
                rows.append(bubble)
        if not rows:
            rows = [w.HTML(_NOTE.format(f"<i>new conversation for {_esc(self.user_id)} "
                                        f"(thread {_esc(self.thread_id)})</i>"))]
        self.conversation.children = rows

    def _stored_feedback(self) -> dict[str, str]:
        """Labels of this session, plus those stored in Redis (so a re-opened thread shows them)."""
        state = dict(self.feedback)
        store = getattr(self.agent, "feedback", None)
        if store is not None and self.user_id:
            for question, reply in self.replies():
                if reply.id not in state and question is not None:
                    example = store.get(self.user_id, question.content, reply.content)
                    if example is not None:
                        state[reply.id] = example.label
        return state

    def _feedback_buttons(self, index: int, state: str | None) -> list[w.Button]:
        buttons = []
        for label, icon, style in (("positive", "👍", "success"), ("negative", "👎", "danger")):
            b = w.Button(description=icon, layout=w.Layout(width="42px"),
                         button_style=style if state == label else "",
                         tooltip=f"mark this reply {label} (click again to undo)")
            b.on_click(lambda _b, i=index, lab=label: self.toggle_feedback(i, lab))
            buttons.append(b)
        return buttons

    def _render_panels(self) -> None:
        last = self.turns[-1] if self.turns else None
        history = self.agent.history(self.user_id, self.thread_id) if self.user_id and self.thread_id else None
        messages = history.messages() if history else []
        summary = history.summary() if history else None
        self.panels["Thread"].value = (
            _table([[m.role, _short(m.content or f"(tool call: {m.tool_calls})")] for m in messages],
                   ["role", "content"]) if messages else "<i>no messages in this thread</i>") + (
            _section("summary of older messages", f"<p style='font-size:12px'>{_esc(summary)}</p>")
            if summary else "")
        self.panels["Long-term"].value = self._long_term_html(last)
        working = getattr(self.agent, "working", None)
        if working is not None and self.user_id:
            content = working.get(user_id=self.user_id, thread_id=self.thread_id)
            text = content if isinstance(content, str) else repr(content)
            self.panels["Working memory"].value = f"<pre style='font-size:12px'>{_esc(text or '(empty)')}</pre>"
        else:
            self.panels["Working memory"].value = "<i>working memory is off in this mode</i>"
        self.panels["Tools"].value = self._tools_html(last)
        self.panels["Timings"].value = self._timings_html(last)

    def _long_term_html(self, last: Turn | None) -> str:
        store = getattr(self.agent, "store", None)
        if store is None:
            return f"<i>no long-term memory in mode {_esc(self.agent.memory or 'stateless')}</i>"
        parts = []
        if last is not None and last.memories_used:
            parts.append(_section("used in the last reply", _table(
                [[h.memory.memory_type, *(_num(getattr(h, f, None)) for f in SCORE_FIELDS), h.memory.content]
                 for h in last.memories_used],
                ["type", "distance", "text score", "recency", "fused rank", "memory"])))
        if last is not None and last.memories_stored:
            parts.append(_section("stored after the last message", _table(
                [[d.action, d.memory.content if d.memory else "", d.reason] for d in last.memories_stored],
                ["decision", "memory", "why"])))
        mems = store.list(self.user_id, ["episodic", "semantic"], include_superseded=True, limit=50) \
            if self.user_id else []
        mems.sort(key=lambda m: (not m.is_current, m.memory_type, m.content))
        parts.append(_section(f"all memories of {self.user_id}", _table(
            [[m.memory_type, "current" if m.is_current else "superseded", m.content] for m in mems],
            ["type", "status", "memory"]) if mems else "<p><i>no long-term memories yet</i></p>"))
        return "".join(parts)

    @staticmethod
    def _tools_html(last: Turn | None) -> str:
        if last is None or not last.tool_calls:
            return "<i>no tool calls in the last turn (with retrieval='tools' the model may search memory)</i>"
        return _section("tools called in the last turn", _table(
            [[c.get("function", {}).get("name"), _short(c.get("function", {}).get("arguments", ""), 80)]
             for c in last.tool_calls], ["tool", "arguments"]))

    @staticmethod
    def _timings_html(last: Turn | None) -> str:
        if last is None:
            return "<i>send a message to see where the time goes</i>"
        fg = [[step, "reply (you wait)", f"{last.timings_ms[step]:.1f}"] for step in FOREGROUND_STEPS
              if step in last.timings_ms]
        bg = [[step + (" ⚠ failed" if step in last.failed_steps else ""), "background",
               f"{last.timings_ms[step]:.1f}"] for step in BACKGROUND_STEPS if step in last.timings_ms]
        rows = fg + bg + [["user-visible latency", "", f"{last.reply_ms:.1f}"],
                          ["background writes", "", f"{last.background_ms:.1f}"],
                          ["prompt tokens", "", last.prompt_tokens],
                          ["model calls (whole turn)", "", last.model_calls],
                          ["tokens in / out (whole turn)", "", f"{last.tokens_in} / {last.tokens_out}"]]
        html = _table(rows, ["step", "when", "ms"])
        if last.failed_steps:
            html += _section("failed steps (logged and skipped; the rest of the turn ran)", _table(
                [[k, v] for k, v in last.failed_steps.items()], ["step", "why"]))
        return html
