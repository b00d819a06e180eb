"""A chat cell for notebooks: talk to a MemoryAgent and watch what it remembers.

``ChatWidget(agent)`` shows a user id and thread, Start / Clear chat, the conversation with
👍 / 👎 on each reply, and a side panel (Thread, Long-term, Working memory, Procedures,
Timings) refreshed after every turn. ``widget.send(text)`` does exactly what typing and
pressing Send does, so tests and nbval drive the same code path as a click.
"""
from __future__ import annotations

import html
import itertools
import logging
from typing import Any

import ipywidgets as w

log = logging.getLogger(__name__)
_thread_counter = itertools.count(1)
PLACEHOLDER = "Type a message and press Enter"


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _table(rows: list[list[Any]], header: list[str]) -> str:
    head = "".join(f"<th style='text-align:left;padding:2px 6px'>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 6px;vertical-align:top'>{_esc(c)}</td>"
                                    for c in row) + "</tr>" for row in rows)
    return f"<table style='font-size:12px;border-collapse:collapse'><tr>{head}</tr>{body}</table>"


class ChatWidget:
    """An ipywidgets chat UI over a :class:`memorykit.agent.MemoryAgent`."""

    def __init__(self, agent, user_id: str = "raphael", thread_id: str | None = None):
        self.agent = agent
        self.turns: list[Any] = []
        self.feedback: dict[int, str | None] = {}
        self.user_box = w.Text(value=user_id, description="User id", layout=w.Layout(width="220px"))
        self.thread_box = w.Text(value=thread_id or self._new_thread_id(), description="Thread",
                                 layout=w.Layout(width="220px"))
        self.start_button = w.Button(description="Start chat", icon="plus", tooltip="A new thread, same user")
        self.clear_button = w.Button(description="Clear chat", icon="trash",
                                     tooltip="Delete this thread; long-term memory stays")
        self.backend = w.HTML(self._backend_html())
        self.conversation = w.VBox(layout=w.Layout(width="100%", max_height="420px", overflow_y="auto",
                                                   border="1px solid #ddd", padding="6px"))
        self.input = w.Text(placeholder=PLACEHOLDER, continuous_update=False,
                            layout=w.Layout(width="75%"))
        self.send_button = w.Button(description="Send", button_style="primary", icon="paper-plane")
        self.status = w.HTML("")
        self.progress = w.IntProgress(value=0, min=0, max=3, layout=w.Layout(width="120px", visibility="hidden"))
        self.panels = {name: w.HTML() for name in ("Thread", "Long-term", "Working memory", "Procedures", "Timings")}
        self.tabs = w.Tab(children=list(self.panels.values()), layout=w.Layout(width="100%"))
        for i, name in enumerate(self.panels):
            self.tabs.set_title(i, name)

        self.send_button.on_click(lambda _b: self._submit())
        self.input.observe(self._on_enter, names="value")
        self.start_button.on_click(lambda _b: self.start_chat())
        self.clear_button.on_click(lambda _b: self.clear_chat())
        self.user_box.observe(lambda _c: self._switch(), names="value")
        self.thread_box.observe(lambda _c: self._switch(), names="value")

        controls = w.HBox([self.user_box, self.thread_box, self.start_button, self.clear_button, self.backend])
        chat = w.VBox([self.conversation, w.HBox([self.input, self.send_button, self.progress]), self.status],
                      layout=w.Layout(width="58%"))
        side = w.VBox([self.tabs], layout=w.Layout(width="42%"))
        self.root = w.VBox([controls, w.HBox([chat, side])])
        self._switch()

    # ------------------------------------------------------------------ display
    def _ipython_display_(self):
        from IPython.display import display

        display(self.root)

    def _backend_html(self) -> str:
        label = getattr(self.agent.llm, "label", type(self.agent.llm).__name__)
        colour = "#b45309" if label == "offline" else "#15803d"
        return f"<span style='margin-left:8px;color:{colour}'>LLM: <b>{_esc(label)}</b></span>"

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

    def send(self, text: str):
        """Send one message as the user; returns the agent's Turn (or None on a bad input)."""
        self._set_busy(True, "thinking… (retrieving memories, calling the model)")
        try:
            turn = self.agent.chat(text, user_id=self.user_id, thread_id=self.thread_id)
        except Exception as exc:  # shown in the widget, not as a traceback
            log.warning("chat turn failed: %s", exc)
            self._set_busy(False, f"<span style='color:#b91c1c'>⚠ {_esc(exc)}</span>")
            self.refresh()
            return None
        self.turns.append(turn)
        if turn.error:
            self._set_busy(False, f"<span style='color:#b91c1c'>⚠ {_esc(turn.error)}</span>")
        else:
            self._set_busy(True, "saving memories…")
            self.agent.flush()
            total = sum(turn.timings_ms.values())
            self._set_busy(False, f"<span style='color:#555'>turn took {total:.0f} ms</span>")
        self.refresh()
        return turn

    def _set_busy(self, busy: bool, message: str) -> None:
        self.progress.layout.visibility = "visible" if busy else "hidden"
        self.progress.value = (self.progress.value + 1) % 4 if busy else 0
        self.send_button.disabled = busy
        self.status.value = message

    def start_chat(self) -> None:
        """A new thread for the same user: short-term memory starts empty, long-term stays."""
        self.thread_box.value = self._new_thread_id()

    def clear_chat(self) -> None:
        """Delete the current thread's messages and summary; long-term memory is kept."""
        self.agent.flush()
        self.agent.history(self.user_id, self.thread_id).clear()
        self.turns, self.feedback = [], {}
        self.status.value = "<span style='color:#555'>thread cleared; long-term memory kept</span>"
        self.refresh()

    def _switch(self) -> None:
        self.turns, self.feedback = [], {}
        self.refresh()

    def toggle_feedback(self, index: int, label: str) -> str | None:
        """👍 / 👎 on reply ``index``: the same label again removes it, the other switches."""
        turn = self.turns[index]
        state = self.agent.give_feedback(turn, label)
        self.feedback[index] = state
        self.refresh()
        return state

    # ------------------------------------------------------------------ rendering
    def refresh(self) -> None:
        if not self.user_id or not self.thread_id:
            return
        try:
            messages = self.agent.history(self.user_id, self.thread_id).messages()
        except Exception as exc:
            self.status.value = f"<span style='color:#b91c1c'>⚠ {_esc(exc)}</span>"
            return
        rows = []
        turn_of_reply = {t.reply_message.id: i for i, t in enumerate(self.turns) if t.reply_message}
        for m in messages:
            if m.role not in ("user", "assistant") or not m.content:
                continue
            who = "🧑 you" if m.role == "user" else "🤖 agent"
            bubble = w.HTML(f"<div style='margin:2px 0'><b>{who}:</b> {_esc(m.content)}</div>",
                            layout=w.Layout(width="85%"))
            if m.role == "assistant" and m.id in turn_of_reply:
                rows.append(w.HBox([bubble, *self._feedback_buttons(turn_of_reply[m.id])]))
            else:
                rows.append(bubble)
        self.conversation.children = rows
        self._render_panels(messages)

    def _feedback_buttons(self, index: int) -> list[w.Button]:
        state = self.feedback.get(index)
        buttons = []
        for label, icon in (("positive", "👍"), ("negative", "👎")):
            b = w.Button(description=icon, layout=w.Layout(width="42px"),
                         button_style="success" if state == label == "positive" else
                         "danger" if state == label == "negative" else "",
                         tooltip=f"mark this reply {label}")
            b.on_click(lambda _b, i=index, lab=label: self.toggle_feedback(i, lab))
            buttons.append(b)
        return buttons

    def _render_panels(self, messages) -> None:
        self.panels["Thread"].value = _table(
            [[m.role, (m.content[:120] + "…") if len(m.content) > 120 else m.content] for m in messages],
            ["role", "content"]) + (f"<p><i>summary:</i> {_esc(self.agent.history(self.user_id, self.thread_id).summary())}</p>"
                                    if self.agent.history(self.user_id, self.thread_id).summary() else "")
        store = getattr(self.agent, "store", None)
        if store is not None:
            mems = store.list(self.user_id, ["episodic", "semantic"], include_superseded=True, limit=50)
            self.panels["Long-term"].value = _table(
                [[m.memory_type, "current" if m.is_current else "superseded", m.content] for m in mems],
                ["type", "status", "memory"]) if mems else "<i>no long-term memories yet</i>"
        working = getattr(self.agent, "working", None)
        if working is not None:
            content = working.get(user_id=self.user_id, thread_id=self.thread_id)
            text = content if isinstance(content, str) else repr(content)
            self.panels["Working memory"].value = f"<pre style='font-size:12px'>{_esc(text or '(empty)')}</pre>"
        procedures = getattr(self.agent, "procedures", None)
        last = self.turns[-1] if self.turns else None
        if procedures is not None:
            suggestion = getattr(last, "suggestion", None) if last else None
            self.panels["Procedures"].value = (f"<p>followed pattern: {_esc(suggestion)}</p>" if suggestion
                                               else "<i>no procedure suggested for the last turn</i>")
        if last is not None:
            rows = [[step, f"{ms:.1f}"] for step, ms in last.timings_ms.items()]
            rows.append(["prompt tokens", last.prompt_tokens])
            self.panels["Timings"].value = _table(rows, ["step", "ms"])
