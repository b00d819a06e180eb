"""The memory agent: one chat turn that uses every memory layer, with per-step timings.

A turn: save the user's message -> load the thread (summary + recent messages) ->
retrieve (long-term memories, working memory, feedback guidance, recalled old messages)
-> call the model (with a tool loop when memory is exposed as tools) -> save the reply.
Then, in a background thread the next turn waits for: extract memories and ``remember``
them, update working memory, store the procedure if tools were used well, summarize.

Modes: ``memory="full"`` (everything), ``"short_term"`` (the thread only) or ``False``
(stateless: the model sees only the newest message; the transcript is still saved so a
reader can look at it). ``retrieval="inject"`` puts memories in the prompt;
``"tools"`` lets the model call ``search_memory`` / ``manage_memory`` itself.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import redis

from .config import settings
from .errors import LLMError, MemoryKitError, ValidationError
from .extraction import extract_memories
from .long_term import MemoryHit, MemoryStore, format_memories
from .messages import Message, count_tokens
from .procedural import FeedbackStore, ProcedureStore, evaluate_workflow
from .recall import MessageIndex, recall_block
from .short_term import ChatHistory
from .summarize import ByCount, summarize_if_needed
from .tools import Tool, call_tool, memory_tools, schemas
from .working import PROFILE_TEMPLATE, WorkingMemory

log = logging.getLogger(__name__)

DEFAULT_SYSTEM = ("You are a helpful assistant with memory. Use what you know about the user "
                  "when it helps; say so when you don't know something.")
MAX_TOOL_STEPS = 4


@dataclass
class Retry:
    """Returned by an ``after_model`` hook: ask the model once more, with this note."""

    reason: str


@dataclass
class Turn:
    """What one ``chat()`` call did: the reply, what memory it used and stored, and how long each step took."""

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
    suggestion: Any = None
    error: str | None = None
    background_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class MemoryAgent:
    """An agent whose memory lives in Redis: short-term, long-term, working, procedural."""

    def __init__(self, r: redis.Redis, llm=None, embedder=None, namespace: str = "memorykit", *,
                 memory: str | bool = "full", retrieval: str = "inject",
                 system_prompt: str = DEFAULT_SYSTEM, k: int = 5,
                 distance_threshold: float | None = None, summary_policy=None,
                 thread_ttl: int | None = None, working_template: str | None = PROFILE_TEMPLATE,
                 background: bool = True,
                 before_model: Sequence[Callable[[list[Message]], list[Message]]] = (),
                 after_model: Sequence[Callable[[Message], "Message | Retry | None"]] = ()):
        if memory not in ("full", "short_term", False):
            raise ValidationError(f"memory must be 'full', 'short_term' or False, got {memory!r}")
        if retrieval not in ("inject", "tools"):
            raise ValidationError(f"retrieval must be 'inject' or 'tools', got {retrieval!r}")
        from .llm import get_llm

        self.r = r
        self.llm = llm or get_llm()
        self.namespace = namespace
        self.memory = memory
        self.retrieval = retrieval
        self.system_prompt = system_prompt
        self.k = k
        self.distance_threshold = (distance_threshold if distance_threshold is not None
                                   else settings().distance_threshold)
        self.summary_policy = summary_policy or ByCount(max_messages=20, keep_last=6)
        self.thread_ttl = thread_ttl
        self.before_model = list(before_model)
        self.after_model = list(after_model)
        self.store = self.working = self.procedures = self.feedback = self.recall = None
        if memory == "full":
            if embedder is None:
                from .embeddings import get_embedder

                embedder = get_embedder(r)
            self.embedder = embedder
            self.store = MemoryStore(r, embedder, namespace=namespace)
            self.recall = MessageIndex(r, embedder, namespace=namespace)
            self.procedures = ProcedureStore(r, embedder, namespace=namespace)
            self.feedback = FeedbackStore(r, embedder, namespace=namespace)
            if working_template is not None:
                self.working = WorkingMemory(r, namespace=namespace, template=working_template, scope="user")
        self._executor = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="memorykit-writes") if background else None
        self._pending: list[cf.Future] = []
        self._unsaved: dict[tuple[str, str], list[Message]] = {}

    def __repr__(self) -> str:
        return (f"MemoryAgent(memory={self.memory!r}, retrieval={self.retrieval!r}, "
                f"llm={getattr(self.llm, 'label', self.llm)!r}, namespace={self.namespace!r})")

    # ------------------------------------------------------------------ helpers
    def history(self, user_id: str, thread_id: str) -> ChatHistory:
        return ChatHistory(self.r, user_id, thread_id, ttl=self.thread_ttl, namespace=self.namespace,
                           recall=self.recall)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for background memory writes of earlier turns."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result(timeout=timeout)

    def close(self) -> None:
        self.flush()
        if self._executor:
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
        self.flush()
        history = ChatHistory(self.r, user_id, thread_id, ttl=self.thread_ttl, namespace=self.namespace)
        turn = Turn(user_id=user_id, thread_id=thread_id, user_message=Message(role="user", content=text))
        with self._timed(turn, "load"):
            if not self._save(history, turn.user_message, turn):
                return turn
            try:
                snapshot_prompt = history.prompt_messages() if self.memory else [turn.user_message]
            except redis.RedisError as exc:
                turn.error = f"Redis failed while loading the thread: {exc}"
                return turn
        try:
            with self._timed(turn, "retrieve"):
                system = self._system_block(turn, history)
            turn.prompt = [Message(role="system", content=system)] + [
                m for m in snapshot_prompt if not (m.role == "system" and m.content == system)]
            for hook in self.before_model:
                turn.prompt = hook(turn.prompt)
            turn.prompt_tokens = count_tokens(turn.prompt)
            with self._timed(turn, "model"):
                reply, extra = self._call_model(turn)
        except (LLMError, MemoryKitError, redis.RedisError) as exc:
            turn.error = f"{type(exc).__name__}: {exc}"
            log.warning("turn failed for user %r thread %r: %s", user_id, thread_id, exc)
            return turn
        with self._timed(turn, "store"):
            for message in [*extra, reply]:
                if not self._save(history, message, turn):
                    return turn
        turn.reply_message, turn.reply = reply, reply.content
        if self.memory:
            job = lambda: self._after_turn(turn, history)  # noqa: E731
            if self._executor is not None:
                self._pending.append(self._executor.submit(job))
            else:
                job()
        return turn

    def _save(self, history: ChatHistory, message: Message, turn: Turn) -> bool:
        """Append to the thread; if Redis is down, keep the message to save on the next turn."""
        slot = (history.user_id, history.thread_id)
        try:
            history.append([*self._unsaved.get(slot, []), message])
            self._unsaved.pop(slot, None)
            return True
        except redis.RedisError as exc:
            self._unsaved.setdefault(slot, []).append(message)
            turn.error = (f"Redis is unavailable ({exc}); your message is kept and will be saved "
                          "when Redis is back")
            return False

    def _system_block(self, turn: Turn, history: ChatHistory) -> str:
        parts = [self.system_prompt]
        if self.memory != "full":
            return parts[0]
        query, uid = turn.user_message.content, turn.user_id
        if self.retrieval == "inject":
            turn.memories_used = self.store.search(query, user_id=uid, k=self.k,
                                                   distance_threshold=self.distance_threshold)
            if turn.memories_used:
                parts.append(format_memories(turn.memories_used))
        if self.working is not None:
            parts.append(self.working.prompt_block(uid, history.thread_id))
        window_ids = [m.id for m in history.messages(last_n=20)]
        turn.recalled = [hit for hit in self.recall.search(
            query, user_id=uid, k=3, distance_threshold=self.distance_threshold, exclude_ids=window_ids)
            if hit.thread_id != history.thread_id]
        block = recall_block(turn.recalled)
        if block is not None:
            parts.append(block.content)
        guidance = self.feedback.examples(query, user_id=uid, k=2)
        if guidance:
            parts.append(guidance.block)
        if self.retrieval == "tools":
            hits = self.procedures.suggest(query, k=1)
            turn.suggestion = hits[0] if hits else None
        return "\n\n".join(p for p in parts if p)

    def _tools(self, turn: Turn) -> list[Tool]:
        if self.memory != "full" or self.retrieval != "tools":
            return []
        tools = memory_tools(self.store, turn.user_id)
        if self.working is not None:
            tools += self.working.tools(turn.user_id, turn.thread_id)
        return tools

    def _call_model(self, turn: Turn) -> tuple[Message, list[Message]]:
        """The model call, its tool loop and the after-model hooks; returns (reply, tool messages)."""
        tools = self._tools(turn)
        prompt, extra = list(turn.prompt), []
        retried = False
        for _step in range(MAX_TOOL_STEPS + 1):
            reply = self.llm.chat(prompt, tools=schemas(tools) or None)
            if reply.tool_calls and tools:
                extra.append(reply)
                prompt.append(reply)
                for call in reply.tool_calls:
                    turn.tool_calls.append(call)
                    result = Message(role="tool", content=call_tool(tools, call), tool_call_id=call.get("id"))
                    turn.tool_results.append(result.content)
                    extra.append(result)
                    prompt.append(result)
                continue
            for hook in self.after_model:
                verdict = hook(reply)
                if isinstance(verdict, Retry) and not retried:
                    retried = True
                    prompt.append(Message(role="system", content=f"Your last answer was rejected: {verdict.reason}. Answer again."))
                    break
                if isinstance(verdict, Message):
                    reply = verdict
            else:
                return reply, extra
        raise LLMError(f"the model kept calling tools for {MAX_TOOL_STEPS} steps without answering")

    # ------------------------------------------------------------------ after the reply
    def _after_turn(self, turn: Turn, history: ChatHistory) -> None:
        try:
            if self.recall is not None:
                with self._timed(turn, "index"):
                    self.recall.add(turn.user_id, turn.thread_id, [turn.user_message, turn.reply_message])
                history = self.history(turn.user_id, turn.thread_id)
            if self.memory == "full":
                with self._timed(turn, "extract"):
                    candidates = extract_memories([turn.user_message], llm=self.llm)
                with self._timed(turn, "remember"):
                    for candidate in candidates:
                        decision = self.store.remember(
                            candidate.content, user_id=turn.user_id if candidate.type != "semantic" else None,
                            memory_type=candidate.type, llm=self.llm, source_thread=turn.thread_id,
                            source_messages=[turn.user_message.id])
                        turn.memories_stored.append(decision)
                if self.working is not None:
                    with self._timed(turn, "working"):
                        self.working.observe(turn.user_message, self.llm, user_id=turn.user_id,
                                             thread_id=turn.thread_id)
                if turn.tool_calls:
                    with self._timed(turn, "procedure"):
                        names = [c["function"]["name"] for c in turn.tool_calls]
                        evaluation = evaluate_workflow(names, turn.tool_results, turn.reply,
                                                       sum(turn.timings_ms.values()))
                        if evaluation.success_score >= 0.7:
                            self.procedures.store(turn.user_message.content, names, evaluation.success_score,
                                                  turn.timings_ms.get("model", 0.0))
            with self._timed(turn, "summarize"):
                summarize_if_needed(history, self.llm, policy=self.summary_policy)
        except Exception as exc:  # logged and reported; the reply has already been saved
            turn.background_error = f"{type(exc).__name__}: {exc}"
            log.exception("background memory writes failed for user %r", turn.user_id)

    # ------------------------------------------------------------------ feedback
    def give_feedback(self, turn: Turn, label: str) -> str | None:
        """👍 / 👎 on a reply; toggles like the seed (same label again removes it)."""
        if self.feedback is None:
            raise MemoryKitError("feedback needs memory='full'")
        return self.feedback.mark(turn.user_id, turn.user_message.content, turn.reply, label)
