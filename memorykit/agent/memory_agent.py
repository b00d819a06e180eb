"""The memory agent: one chat turn that uses every memory layer, with per-step timings.

A turn: save the user's message -> load the thread (summary + recent messages) ->
retrieve (long-term memories, working memory, procedure suggestion, feedback examples,
recalled old messages) -> call the model (with a tool loop when memory is exposed as
tools) -> save the reply. Then, in a background thread that the next turn and ``flush()``
wait for: index the messages for recall, extract memories and ``remember`` them, update
working memory, store the procedure when tools were used well, summarize if the policy says so.

Modes: ``memory="full"`` (everything), ``"short_term"`` (the thread only) or ``False``
(stateless: the model sees only the newest message; the transcript is still saved so a
reader can look at it). ``retrieval="inject"`` puts memories in the prompt;
``"tools"`` lets the model call ``search_memory`` / ``manage_memory`` itself.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import re
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import redis

from ..config import settings
from ..errors import LLMError, MemoryKitError, ValidationError
from ..memory.extraction import extract_memories
from ..keys import check_id
from ..memory.long_term import MemoryHit, MemoryStore, format_memories
from ..messages import Message, count_tokens
from ..memory.procedural import FeedbackStore, ProcedureStore, evaluate_workflow
from ..memory.recall import MessageIndex, recall_block
from ..memory.short_term import ChatHistory
from ..memory.summarize import ByCount, summarize_if_needed
from ..llm.tools import Tool, call_tool, schemas
from .tools import memory_tools
from ..memory.working import PROFILE_TEMPLATE, WorkingMemory

log = logging.getLogger(__name__)

DEFAULT_SYSTEM = ("You are a helpful assistant with memory. Use what you know about the user "
                  "when it helps; say so when you don't know something.")
MAX_TOOL_STEPS = 4
MODES = ("full", "short_term", False)
RETRIEVALS = ("inject", "tools")
FOREGROUND_STEPS = ("load", "retrieve", "model", "store")
BACKGROUND_STEPS = ("index", "extract", "remember", "working", "procedure", "summarize")

BeforeModel = Callable[[list[Message]], "list[Message] | None"]
AfterModel = Callable[[Message], "Message | Retry | None"]


@dataclass
class Retry:
    """Returned by an ``after_model`` hook: ask the model once more, with this note."""

    reason: str


@dataclass
class Turn:
    """What one ``chat()`` call did: the reply, what memory it used and stored, and how long each step took.

    ``timings_ms`` holds the foreground steps (load, retrieve, model, store) as soon as
    ``chat()`` returns, and the background ones (index, extract, remember, working,
    procedure, summarize) once ``agent.flush()`` has returned.
    """

    user_id: str
    thread_id: str
    user_message: Message
    reply: str = ""
    reply_message: Message | None = None
    memories_used: list[MemoryHit] = field(default_factory=list)
    memories_stored: list[Any] = field(default_factory=list)
    recalled: list[Any] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    prompt: list[Message] = field(default_factory=list)
    prompt_tokens: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    reply_ms: float = 0.0  # what the user waited: chat() call to return (inline writes included)
    suggestion: Any = None
    retries: list[str] = field(default_factory=list)
    error: str | None = None
    background_error: str | None = None
    saved: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def background_ms(self) -> float:
        return sum(v for k, v in self.timings_ms.items() if k in BACKGROUND_STEPS)

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error else f"reply={self.reply!r}"
        return (f"Turn({self.user_id!r}/{self.thread_id!r}, {state}, used={len(self.memories_used)}, "
                f"stored={len(self.memories_stored)}, tool_calls={len(self.tool_calls)})")


class MemoryAgent:
    """An agent whose memory lives in Redis: short-term, long-term, working, procedural.

    ``before_model`` hooks get the prompt (a list of messages) and may return a new one
    (e.g. redact it); ``after_model`` hooks get the reply and may return a replacement
    Message (e.g. redaction) or ``Retry(reason)`` to ask the model once more.
    """

    def __init__(self, r: redis.Redis, llm=None, embedder=None, namespace: str = "memorykit", *,
                 memory: str | bool = "full", retrieval: str = "inject",
                 system_prompt: str = DEFAULT_SYSTEM, k: int = 5,
                 distance_threshold: float | None = None, summary_policy=None,
                 thread_ttl: int | None = None, working_template: str | None = PROFILE_TEMPLATE,
                 background: bool = True, recall_k: int = 3,
                 before_model: Sequence[BeforeModel] = (),
                 after_model: Sequence[AfterModel] = ()):
        if memory not in MODES:
            raise ValidationError(f"memory must be 'full', 'short_term' or False, got {memory!r}")
        if retrieval not in RETRIEVALS:
            raise ValidationError(f"retrieval must be 'inject' or 'tools', got {retrieval!r}")
        from ..llm import get_llm

        self.r = r
        self.llm = llm or get_llm()
        self.namespace = namespace
        self.memory = memory
        self.retrieval = retrieval
        self.system_prompt = system_prompt
        self.k = k
        self.recall_k = recall_k
        self.distance_threshold = (distance_threshold if distance_threshold is not None
                                   else settings().distance_threshold)
        self.summary_policy = summary_policy or ByCount(max_messages=20, keep_last=6)
        self.thread_ttl = thread_ttl
        self.before_model = list(before_model)
        self.after_model = list(after_model)
        self.embedder = embedder
        self.store = self.working = self.procedures = self.feedback = self.recall = None
        if memory == "full":
            if embedder is None:
                from ..embeddings import get_embedder

                self.embedder = get_embedder(r)
            self.store = MemoryStore(r, self.embedder, namespace=namespace)
            self.recall = MessageIndex(r, self.embedder, namespace=namespace)
            self.procedures = ProcedureStore(r, self.embedder, namespace=namespace)
            self.feedback = FeedbackStore(r, self.embedder, namespace=namespace)
            if working_template is not None:
                self.working = WorkingMemory(r, namespace=namespace, template=working_template, scope="user")
        self.background = background  # False: chat() waits for the writes (same writer thread)
        self._executor = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="memorykit-writes")
        self._pending: list[cf.Future] = []
        self._unsaved: dict[tuple[str, str], list[Message]] = {}

    def __repr__(self) -> str:
        return (f"MemoryAgent(memory={self.memory!r}, retrieval={self.retrieval!r}, "
                f"llm={self.label!r}, namespace={self.namespace!r})")

    @property
    def label(self) -> str:
        """The backend label shown to people: "offline" or the model name."""
        return str(getattr(self.llm, "label", type(self.llm).__name__))

    # ------------------------------------------------------------------ helpers
    def history(self, user_id: str, thread_id: str) -> ChatHistory:
        """The thread as a ChatHistory (clearing it also drops its recall vectors)."""
        return ChatHistory(self.r, user_id, thread_id, ttl=self.thread_ttl, namespace=self.namespace,
                           recall=self.recall)

    def unsaved(self, user_id: str, thread_id: str) -> list[Message]:
        """Messages kept in memory because Redis was down; saved with the next turn."""
        return list(self._unsaved.get((user_id, thread_id), []))

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the background memory writes of earlier turns."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result(timeout=timeout)

    def close(self) -> None:
        self.flush()
        self._executor.shutdown(wait=True)

    @contextmanager
    def _timed(self, turn: Turn, step: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            turn.timings_ms[step] = turn.timings_ms.get(step, 0.0) + (time.perf_counter() - start) * 1000

    # ------------------------------------------------------------------ the turn
    def chat(self, text: str, user_id: str, thread_id: str = "default") -> Turn:
        """One turn. Bad input raises ValidationError before anything is written; a failing
        model or Redis is reported in ``turn.error`` and the user's message is kept."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("the message is empty: type something to send")
        check_id(user_id, "user_id")
        check_id(thread_id, "thread_id")
        started = time.perf_counter()
        self.flush()
        history = ChatHistory(self.r, user_id, thread_id, ttl=self.thread_ttl, namespace=self.namespace)
        turn = Turn(user_id=user_id, thread_id=thread_id, user_message=Message(role="user", content=text))
        try:
            self._foreground(turn, history)
            if turn.saved and self.memory:
                self._pending.append(self._executor.submit(self._after_turn, turn))
                if not self.background:
                    self.flush()  # inline: the user waits for the writes too
        finally:
            turn.reply_ms = (time.perf_counter() - started) * 1000
        return turn

    def _foreground(self, turn: Turn, history: ChatHistory) -> None:
        with self._timed(turn, "load"):
            if not self._save(history, [turn.user_message], turn):
                return
            try:
                thread = history.prompt_messages() if self.memory else [turn.user_message]
            except redis.RedisError as exc:
                turn.error = f"Redis failed while loading the thread ({exc}); your message is saved"
                return
        try:
            with self._timed(turn, "retrieve"):
                system = self._system_block(turn, history)
            turn.prompt = [Message(role="system", content=system)] + thread
            for hook in self.before_model:
                changed = hook(list(turn.prompt))
                if changed is not None:
                    turn.prompt = list(changed)
            turn.prompt_tokens = count_tokens(turn.prompt)
            with self._timed(turn, "model"):
                reply, extra = self._call_model(turn)
        except Exception as exc:  # the model, Redis or a hook failed: report it, keep the user's message
            turn.error = f"{type(exc).__name__}: {exc}"
            log.warning("turn failed for user %r thread %r: %s", turn.user_id, turn.thread_id, exc,
                        exc_info=not isinstance(exc, (LLMError, redis.RedisError)))
            return
        turn.reply_message, turn.reply = reply, reply.content
        with self._timed(turn, "store"):
            turn.saved = self._save(history, [*extra, reply], turn)

    def _save(self, history: ChatHistory, messages: list[Message], turn: Turn) -> bool:
        """Append (one transaction); if Redis is down, keep the messages to save on the next turn."""
        slot = (history.user_id, history.thread_id)
        try:
            history.append([*self._unsaved.get(slot, []), *messages])
            self._unsaved.pop(slot, None)
            return True
        except redis.RedisError as exc:
            self._unsaved.setdefault(slot, []).extend(messages)
            turn.error = (f"Redis is unavailable ({type(exc).__name__}: {exc}); the message is kept "
                          "and will be saved with your next message")
            log.warning("could not save to %s: %s", history.key, exc)
            return False

    def _system_block(self, turn: Turn, history: ChatHistory) -> str:
        parts = [self.system_prompt]
        if self.memory != "full":
            return parts[0]
        query, uid = turn.user_message.content, turn.user_id
        if self.retrieval == "inject":
            turn.memories_used = self.store.search(query, user_id=uid, k=self.k,
                                                   distance_threshold=self.distance_threshold)
            parts.append(format_memories(turn.memories_used))
        if self.working is not None:
            parts.append(self.working.prompt_block(uid, history.thread_id,
                                                   editable=self.retrieval == "tools"))
        window_ids = [m.id for m in history.messages(last_n=20)]
        turn.recalled = [hit for hit in self.recall.search(
            query, user_id=uid, k=self.recall_k, distance_threshold=self.distance_threshold,
            exclude_ids=window_ids) if hit.thread_id != history.thread_id]
        block = recall_block(turn.recalled)
        if block is not None:
            parts.append(block.content)
        guidance = self.feedback.examples(query, user_id=uid, k=2)
        if guidance:
            parts.append(guidance.block)
        if self.retrieval == "tools":
            hits = self.procedures.suggest(query, k=1, user_id=uid)
            turn.suggestion = hits[0] if hits else None
            if turn.suggestion is not None:
                p = turn.suggestion.procedure
                parts.append(f"A similar earlier question was answered well with these tools, in order: "
                             f"{', '.join(p.tools_used)} (similarity {turn.suggestion.similarity:.2f}).")
        return "\n\n".join(p for p in parts if p)

    def _tools(self, turn: Turn) -> list[Tool]:
        if self.memory != "full" or self.retrieval != "tools":
            return []
        tools = memory_tools(self.store, turn.user_id, distance_threshold=self.distance_threshold,
                             k=self.k, llm=self.llm)
        if self.working is not None:
            tools += self.working.tools(turn.user_id, turn.thread_id)
        return tools

    @staticmethod
    def _check_reply(reply: Any) -> Message:
        """A model that answers garbage (not a message, empty, the wrong role) fails the turn cleanly."""
        if isinstance(reply, str):
            reply = Message(role="assistant", content=reply)
        if not isinstance(reply, Message):
            raise LLMError(f"the model returned {type(reply).__name__}, not a message")
        if reply.role != "assistant":
            raise LLMError(f"the model returned a {reply.role!r} message, not an assistant reply")
        if not reply.tool_calls and not reply.content.strip():
            raise LLMError("the model returned an empty reply")
        return reply

    def _call_model(self, turn: Turn) -> tuple[Message, list[Message]]:
        """The model call, its tool loop and the after-model hooks; returns (reply, tool messages)."""
        tools = self._tools(turn)
        prompt, extra = list(turn.prompt), []
        for _step in range(MAX_TOOL_STEPS + 2):
            reply = self._check_reply(self.llm.chat(prompt, tools=schemas(tools) or None))
            if reply.tool_calls:
                if not tools:
                    raise LLMError("the model asked for a tool, but this agent offers none")
                extra.append(reply)
                prompt.append(reply)
                for call in reply.tool_calls:
                    turn.tool_calls.append(call)
                    result = Message(role="tool", content=call_tool(tools, call), tool_call_id=call.get("id"),
                                     name=call.get("function", {}).get("name"))
                    turn.tool_results.append(result.content)
                    extra.append(result)
                    prompt.append(result)
                if len(turn.tool_calls) > MAX_TOOL_STEPS:
                    raise LLMError(f"the model kept calling tools ({len(turn.tool_calls)} calls) without answering")
                continue
            retry = None
            for hook in self.after_model:
                verdict = hook(reply)
                if isinstance(verdict, Retry):
                    retry = verdict
                    break
                if isinstance(verdict, Message):
                    reply = self._check_reply(verdict)
            if retry is not None and not turn.retries:
                turn.retries.append(retry.reason)
                prompt.append(Message(role="system",
                                      content=f"Your last answer was rejected: {retry.reason}. Answer again."))
                continue
            if retry is not None:
                turn.retries.append(retry.reason)
                log.warning("reply still rejected after one retry (%s); keeping it", retry.reason)
            self._collect_tool_hits(turn)
            return reply, extra
        raise LLMError(f"the model did not answer within {MAX_TOOL_STEPS} tool steps")

    def _collect_tool_hits(self, turn: Turn) -> None:
        """In tools mode, the memories the model found through search_memory count as used."""
        found: dict[str, float] = {}
        for call, result in zip(turn.tool_calls, turn.tool_results):
            if call.get("function", {}).get("name") != "search_memory":
                continue
            try:
                for item in json.loads(result).get("results", []):
                    found.setdefault(item["id"], float(item.get("distance", 0.0)))
            except (ValueError, AttributeError, KeyError, TypeError):
                continue
        if found and self.store is not None:
            memories = self.store.get_many(list(found))
            turn.memories_used = [MemoryHit(m, found[m.id]) for m in memories if m is not None]

    # ------------------------------------------------------------------ after the reply
    def _after_turn(self, turn: Turn) -> None:
        history = self.history(turn.user_id, turn.thread_id)
        try:
            if self.memory == "full":
                with self._timed(turn, "index"):
                    self.recall.add(turn.user_id, turn.thread_id, [turn.user_message, turn.reply_message])
                with self._timed(turn, "extract"):
                    candidates = extract_memories([turn.user_message], llm=self.llm)
                with self._timed(turn, "remember"):
                    for candidate in candidates:  # user-told facts stay the user's, even general ones
                        decision = self.store.remember(
                            candidate.content, user_id=turn.user_id, memory_type=candidate.type, llm=self.llm,
                            source_thread=turn.thread_id, source_messages=[turn.user_message.id])
                        turn.memories_stored.append(decision)
                if self.working is not None:
                    with self._timed(turn, "working"):
                        self.working.observe(turn.user_message, self.llm, user_id=turn.user_id,
                                             thread_id=turn.thread_id)
                if turn.tool_calls:
                    with self._timed(turn, "procedure"):
                        names = [c.get("function", {}).get("name", "") for c in turn.tool_calls]
                        evaluation = evaluate_workflow(names, turn.tool_results, turn.reply,
                                                       turn.timings_ms.get("model", 0.0))
                        if evaluation.success_score >= self.procedures.min_score:
                            self.procedures.store(turn.user_message.content, names, evaluation.success_score,
                                                  turn.timings_ms.get("model", 0.0))
            with self._timed(turn, "summarize"):
                summarize_if_needed(history, self.llm, policy=self.summary_policy)
        except Exception as exc:  # logged and reported; the reply has already been saved
            turn.background_error = f"{type(exc).__name__}: {exc}"
            log.exception("background memory writes failed for user %r", turn.user_id)

    # ------------------------------------------------------------------ feedback
    def give_feedback(self, turn: Turn, label: str) -> str | None:
        """👍 / 👎 on a reply: "added", "switched" or "removed" (the same label again removes it)."""
        if self.feedback is None:
            raise MemoryKitError("feedback is stored only with memory='full'")
        if not turn.reply:
            raise ValidationError("this turn has no reply to give feedback on")
        return self.feedback.mark(turn.user_id, turn.user_message.content, turn.reply, label)


# ---------------------------------------------------------------- the scripted comparison
SCRIPT_PATH = Path(__file__).resolve().parent.parent / "data" / "agent" / "scripted_questions.jsonl"
NOT_KNOWN = re.compile(r"\b(don't know|do not know|not sure|no idea|can't tell|cannot tell)\b", re.IGNORECASE)


def load_script(path: str | Path = SCRIPT_PATH) -> list[dict[str, Any]]:
    """Scripted users: what each tells the agent (``setup``), then ``questions`` asked in the same
    thread (``follow-up``) or in a new one (``cross-session``), each with expected answer keywords."""
    scenarios = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    for s in scenarios:
        if not s.get("user_id") or not s.get("setup") or not s.get("questions"):
            raise ValidationError(f"a scenario needs user_id, setup and questions: {s}")
    return scenarios


def answered(reply: str, expect: Sequence[str]) -> bool:
    """Correct = every expected keyword appears and the reply does not say it doesn't know."""
    text = reply.lower()
    return not NOT_KNOWN.search(reply) and all(word.lower() in text for word in expect)


def run_script(agent: MemoryAgent, scenarios: Sequence[dict[str, Any]], user_suffix: str = "") -> list[dict[str, Any]]:
    """Play each scenario with ``agent``; one row per question: kind, question, reply, correct."""
    rows = []
    for s in scenarios:
        user = f"{s['user_id']}{user_suffix}"
        for text in s["setup"]:
            agent.chat(text, user_id=user, thread_id="first")
        for i, q in enumerate(s["questions"]):
            thread = "first" if q["kind"] == "follow-up" else f"later-{i}"
            turn = agent.chat(q["ask"], user_id=user, thread_id=thread)
            rows.append({"user": s["user_id"], "kind": q["kind"], "question": q["ask"],
                         "reply": turn.reply or f"(error: {turn.error})",
                         "correct": answered(turn.reply, q["expect"]) if turn.ok else False})
        agent.flush()
    return rows


def compare_modes(r: redis.Redis, llm=None, embedder=None, namespace: str = "memorykit",
                  scenarios: Sequence[dict[str, Any]] | None = None,
                  modes: Sequence[str | bool] = (False, "short_term", "full")):
    """The same scripted users against a stateless, a short-term-only and a full-memory agent.

    Returns a pandas DataFrame with one row per (mode, question); each mode uses its own user
    ids (``raphael@full``), so the modes cannot see each other's memories.
    """
    import pandas as pd

    scenarios = scenarios if scenarios is not None else load_script()
    rows = []
    for mode in modes:
        name = mode or "stateless"
        agent = MemoryAgent(r, llm=llm, embedder=embedder, namespace=namespace, memory=mode)
        try:
            for row in run_script(agent, scenarios, user_suffix=f"@{name}"):
                rows.append({"mode": name, **row})
        finally:
            agent.close()
    return pd.DataFrame(rows)
