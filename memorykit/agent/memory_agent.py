"""The memory agent: one chat turn that uses every memory layer, with per-step timings and usage. The
background steps are ordered per (user, thread) and run in parallel across threads on a bounded pool; a
turn waits only for its own thread's earlier writes, ``flush()`` for one thread or all."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Sequence

import redis

from ..config import settings
from ..embeddings import get_embedder
from ..errors import LLMError, ValidationError
from ..keys import check_id, check_text
from ..llm.factory import get_llm
from ..llm.task import Task, TaskFailed, track_usage
from ..llm.tools import Tool
from ..memory.extraction import extract_memories
from ..memory.feedback import FeedbackStore
from ..memory.index import FORGET_MARK_SECONDS, forget_mark, forget_user
from ..memory.long_term import MemoryStore
from ..memory.recall import MessageIndex
from ..memory.short_term import ChatHistory
from ..memory.summarize import ByCount, summarize_if_needed
from ..memory.working import PROFILE_TEMPLATE, WorkingMemory
from ..messages import Message, count_tokens
from .background import KeyedWriter
from .backlog import Backlog
from .loop import run_tool_loop
from .recovery import KEYS as RECOVERY_KEYS, Recovering
from .reply import REPLY, SYSTEM_PROMPT, ReplyInput
from .tools import memory_tools, tool_hits
from .turn import BACKGROUND_STEPS, FOREGROUND_STEPS, Turn, reason as _reason, said as _said  # noqa: F401 (public)

log = logging.getLogger(__name__)

MODES = ("full", "short_term", False)
RETRIEVALS = ("inject", "tools")
EXPECTED = (TaskFailed, LLMError, redis.RedisError)  # failures logged without a traceback
# While Redis is down, messages wait in this process to be saved with the next turn, up to these bounds (a
# message may be 16M characters): past them a new message is refused with a clear error, never silently dropped.
MAX_UNSAVED_PER_THREAD = 100
MAX_UNSAVED_CHARS = 32_000_000


def _failed(token: tuple[float, Any]) -> Exception | None:
    """The Redis error a forget token holds instead of the mark it could not read."""
    return token[1] if isinstance(token[1], Exception) else None


class MemoryAgent(Recovering):
    """An agent whose memory lives in Redis. ``before_model`` hooks see the prompt and may return a
    changed one, which is sent exactly (redaction: what memory leaves the machine). ``lease``: seconds a turn's
    memory steps are left to this process before the user's next turn or ``recover()`` may redo them (a crash, a
    failed step); it should cover the background queue's wait and the model calls, and a ``thread_ttl`` should
    outlast about 32 leases (the retries, each lease doubled), or a thread expires before its memory is written."""

    def __init__(self, r: redis.Redis, llm=None, embedder=None, namespace: str = "memorykit", *,
                 memory: str | bool = "full", retrieval: str = "inject", system_prompt: str = SYSTEM_PROMPT,
                 summary_policy=None, thread_ttl: int | None = None, background: bool = True,
                 before_model: Sequence[Callable] = (), writers: int = 8, lease: float = 300.0):
        if memory not in MODES:
            raise ValidationError(f"memory must be 'full', 'short_term' or False, got {memory!r}")
        if retrieval not in RETRIEVALS:
            raise ValidationError(f"retrieval must be 'inject' or 'tools', got {retrieval!r}")
        self.r, self.namespace, self.memory, self.retrieval = r, namespace, memory, retrieval
        self.llm = llm or get_llm()
        self.distance_threshold = settings().distance_threshold
        self.system_prompt, self.thread_ttl = system_prompt, thread_ttl
        self.summary_policy = summary_policy or ByCount(max_messages=20, keep_last=6)
        self.background = background  # False: chat() waits for its thread's writes
        self.before_model = list(before_model)
        self.embedder = embedder
        self.store = self.working = self.feedback = self.recall = None
        if memory == "full":
            self.embedder = embedder or get_embedder(r)
            self.store = MemoryStore(r, self.embedder, namespace=namespace)
            self.recall = MessageIndex(r, self.embedder, namespace=namespace)
            self.feedback = FeedbackStore(r, self.embedder, namespace=namespace)
            self.working = WorkingMemory(r, namespace=namespace, template=PROFILE_TEMPLATE, scope="user")
        # what is stored but not yet remembered, in Redis: another process (or the next turn) finishes a crashed
        # or failed job once ``lease`` seconds have passed (see backlog.py)
        self.backlog = Backlog(r, namespace, lease) if memory == "full" else None
        self._inflight: set[tuple[str, str, str]] = set()  # (user, thread, message id) of jobs queued here
        self._writes = KeyedWriter(writers, group=lambda key: key[0],  # at most ``writers`` threads, one per busy
                                   per_group=1)  # (user, thread) and one per user: a user's writes never race
        self._unsaved: dict[tuple[str, str], list[Message]] = {}
        self._unsaved_chars = 0  # the characters of every message in _unsaved
        self._unsaved_lock = threading.Lock()
        self._forgotten: dict[str, float] = {}  # user id -> when forget_user last ran here: a turn begun before
        # writes nothing (kept as long as Redis keeps its forget mark, then pruned)

    def __repr__(self) -> str:
        return (f"MemoryAgent(memory={self.memory!r}, retrieval={self.retrieval!r}, "
                f"llm={getattr(self.llm, 'label', type(self.llm).__name__)!r}, namespace={self.namespace!r})")

    def history(self, user_id: str, thread_id: str) -> ChatHistory:
        """The thread (``thread_ttl``: seconds it lives after its last write; None keeps it); with full
        memory, deleting from it also deletes the recall vectors."""
        if self.recall is not None:  # the agent indexes in the background, not on append
            return self.recall.history(user_id, thread_id, ttl=self.thread_ttl, index_appends=False)
        return ChatHistory(self.r, user_id, thread_id, ttl=self.thread_ttl, namespace=self.namespace)

    def clear(self, user_id: str, thread_id: str) -> int:
        """"Clear chat": delete the thread, its summary and its recall vectors; long-term memory stays."""
        self.flush(user_id, thread_id)
        return self.history(user_id, thread_id).clear()

    def unsaved(self, user_id: str, thread_id: str) -> list[Message]:
        """Messages kept in this process's memory because Redis was down; saved with this thread's next turn
        here. In an app of several processes, a next message another process serves is saved before them,
        and a restart loses them: such apps should show ``turn.error`` and let the user send again."""
        with self._unsaved_lock:
            return list(self._unsaved.get((user_id, thread_id), []))

    def flush(self, user_id: str | None = None, thread_id: str | None = None) -> None:
        """Wait for the background memory writes of one thread's earlier turns (no ids: of every thread)."""
        if (user_id is None) != (thread_id is None):
            raise ValidationError("flush takes both user_id and thread_id (one thread) or neither (all threads)")
        keys = [(user_id, thread_id)] if user_id is not None else self._writes.keys()
        while keys:  # every thread: then the recoveries its writes queued (each chunk moves leases on: this ends)
            for key in keys:
                for future in self._writes.wait(key):
                    future.result()  # _background records its failures in the Turn; anything else is a bug: raise
            keys = [k for k in self._writes.keys() if k[1] in RECOVERY_KEYS] if user_id is None else []

    def pending(self, user_id: str | None = None, thread_id: str | None = None) -> int:
        """Background writes queued or running (for one thread, or for all)."""
        return self._writes.pending(None if user_id is None else (user_id, thread_id))

    def forget_user(self, user_id: str) -> int:
        """Delete everything this agent's namespace holds for one user (threads, long-term and working memory,
        recall vectors, feedback, procedures; the cached embeddings of their stored texts). The user's
        background writes queued in this process run out first and a turn begun before the call writes no
        long-term, working or recall memory after it, so nothing deleted comes back (a reply still being
        written when it is called saves its own two messages). Returns the number of keys deleted. Agents in
        other processes see the forget mark it leaves in Redis and drop the user's writes from turns begun
        before it, checked before each memory step: only a step already under way there at this moment can
        write, so a second call after their turns end leaves nothing."""
        check_id(user_id, "user_id")
        with self._unsaved_lock:
            now = time.monotonic()
            if len(self._forgotten) >= 1024:
                self._forgotten = {u: t for u, t in self._forgotten.items() if now - t < FORGET_MARK_SECONDS}
            self._forgotten[user_id] = now
            for slot in [s for s in self._unsaved if s[0] == user_id]:
                self._unsaved_chars -= sum(len(m.content) for m in self._unsaved.pop(slot))
        for key in self._writes.keys():
            if key[0] == user_id:
                self.flush(*key)
        return forget_user(self.r, self.namespace, user_id, embedder=self.embedder)

    def close(self) -> None:
        self.flush()
        self._writes.shutdown()

    @contextmanager
    def _timed(self, turn: Turn, step: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            turn.timings_ms[step] = turn.timings_ms.get(step, 0.0) + (time.perf_counter() - start) * 1000

    def chat(self, text: str, user_id: str, thread_id: str = "default") -> Turn:
        """One turn. Bad input raises ValidationError before anything is written; a failing
        model or Redis is reported in ``turn.error`` and the user's message is kept."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("the message is empty: type something to send")
        check_text(text, "the message"), check_id(user_id, "user_id"), check_id(thread_id, "thread_id")
        started, forgotten = time.perf_counter(), self._forget_token(user_id)
        self.flush(user_id, thread_id)  # this thread's earlier writes only; other users never wait here
        turn = Turn(user_id=user_id, thread_id=thread_id, user_message=Message(role="user", content=text))
        with track_usage() as calls:
            self._foreground(turn, self.history(user_id, thread_id), down=_failed(forgotten))
        turn.usage.extend(calls)
        if turn.saved and self.memory:  # remembered once stored, the reply or not (a failed model, a kept reply)
            with self._unsaved_lock:
                self._inflight.update((user_id, thread_id, m.id) for m in turn.saved)
            self._writes.submit((user_id, thread_id), lambda: self._background(turn, forgotten))
            if not self.background:
                self.flush(user_id, thread_id)
        turn.reply_ms = (time.perf_counter() - started) * 1000
        return turn

    def _foreground(self, turn: Turn, history: ChatHistory, down: Exception | None = None) -> None:
        try:
            with self._timed(turn, "load"):
                if not self._save(history, [turn.user_message], turn, down):
                    return
                thread = history.prompt_messages() if self.memory else []
            with self._timed(turn, "retrieve"):
                inp = self._reply_input(turn, [m for m in thread if m.id != turn.user_message.id])
            with self._timed(turn, "model"):
                reply, extra = self._call_model(turn, inp)
        except Exception as exc:  # Redis, the model or a hook failed: report it; the user's message is saved
            turn.error = _said(exc)
            log.warning("turn failed for user %r thread %r: %s", turn.user_id, turn.thread_id, _reason(exc),
                        exc_info=not isinstance(exc, EXPECTED))
            return
        turn.reply_message, turn.reply = reply, reply.content
        with self._timed(turn, "store"):
            self._store(history, extra, reply, turn)
        with self._step(turn, "tool_hits"):  # after the store: a failure here cannot lose the reply
            found = tool_hits(self.store, turn.user_id, turn.tool_calls, turn.tool_results)  # tools mode: what the
            turn.memories_used = found or turn.memories_used  # model found through search_memory was used

    def _store(self, history: ChatHistory, extra: list[Message], reply: Message, turn: Turn) -> None:
        """Save the tool steps and the reply; steps a store rejects are dropped (and reported), never the reply."""
        try:
            self._save(history, [*extra, reply], turn)
        except ValidationError as exc:
            turn.failed_steps["store"] = f"the tool steps were not saved: {exc}"
            log.warning("turn of user %r: %s", turn.user_id, turn.failed_steps["store"])
            try:
                self._save(history, [reply], turn)
            except ValidationError as again:  # the reply itself is unusable (empty): say so
                turn.error = f"the model's reply could not be saved: {again}"

    def _save(self, history: ChatHistory, messages: list[Message], turn: Turn, down: Exception | None = None) -> bool:
        """Append (one transaction); if Redis is down (or ``down``: it just failed), keep the messages to save on the
        next turn (within MAX_UNSAVED_PER_THREAD and MAX_UNSAVED_CHARS; past them refused, and ``turn.error`` says so)."""
        slot = (history.user_id, history.thread_id)
        with self._unsaved_lock:
            waiting = list(self._unsaved.get(slot, []))
        try:
            if down is not None:  # not tried again: each try at a server that is down waits for the client's retries
                raise down
            also = None if self.backlog is None else (lambda pipe, msgs: self.backlog.add(pipe, *slot, msgs))
            history.append([*self._not_landed(history, waiting), *messages], also=also)  # one transaction
            turn.saved.extend([*waiting, *messages])  # kept ones too, landed or not: remembered with this turn's
            with self._unsaved_lock:
                kept = self._unsaved.get(slot, [])
                self._unsaved_chars -= sum(len(m.content) for m in kept[:len(waiting)])
                del kept[:len(waiting)]
                if not kept:
                    self._unsaved.pop(slot, None)
            return True
        except redis.RedisError as exc:
            size = sum(len(m.content) for m in messages)
            with self._unsaved_lock:
                kept = self._unsaved.setdefault(slot, [])
                fits = (len(kept) + len(messages) <= MAX_UNSAVED_PER_THREAD
                        and self._unsaved_chars + size <= MAX_UNSAVED_CHARS)
                if fits:
                    kept.extend(messages)
                    self._unsaved_chars += size
                elif not kept:
                    del self._unsaved[slot]
            # the exception's text names the server's address: it goes to the log, not to the turn
            turn.error = (f"Redis is unavailable ({type(exc).__name__}); " + (
                "the message is kept and will be saved with your next message" if fits else
                "too many messages already wait to be saved, so this one was not kept: send it again later"))
            log.warning("could not save to %s (%s kept): %s", history.key, "message" if fits else "nothing", exc)
            return False

    @staticmethod
    def _not_landed(history: ChatHistory, waiting: list[Message]) -> list[Message]:
        """The kept messages that are not in the thread yet: a write that timed out may still have been
        applied (a stalled server runs what it had received once it resumes), so none is stored twice."""
        if not waiting:
            return []
        landed = {m.id for m in history.messages(last_n=len(waiting) + 50)}
        return [m for m in waiting if m.id not in landed]

    def _reply_input(self, turn: Turn, past: list[Message]) -> ReplyInput:
        """The reply task's input; with full memory, the question is embedded once for every search."""
        question, uid = turn.user_message.content, turn.user_id
        inp = ReplyInput(question=question, history=past, system=self.system_prompt)
        if self.memory != "full":
            return inp
        vector = self.embedder.embed(question)
        if self.retrieval == "inject":
            turn.memories_used = self.store.search(question, user_id=uid, k=5, vector=vector,
                                                   distance_threshold=self.distance_threshold)
            inp.memories = [h.memory.content for h in turn.memories_used]
        shown, turn.working_version = self.working.read(uid, turn.thread_id)  # its tools write against this
        inp.working_memory = None if turn.working_version is None else shown
        turn.recalled = [hit for hit in self.recall.search(
            question, user_id=uid, k=3, distance_threshold=self.distance_threshold,
            exclude_ids=[m.id for m in past], vector=vector) if hit.thread_id != turn.thread_id]
        inp.recalled = [f"{h.message.role}: {h.message.content.strip()}" for h in turn.recalled]
        guidance = self.feedback.examples(question, user_id=uid, k=2, vector=vector)
        inp.guidance = guidance.block if guidance else None
        return inp

    def _tools(self, turn: Turn) -> list[Tool]:
        if self.memory != "full" or self.retrieval != "tools":
            return []
        return [*memory_tools(self.store, turn.user_id, llm=self.llm),
                *self.working.tools(turn.user_id, turn.thread_id, expected=turn.working_version)]

    def _hooked(self, turn: Turn, inp: ReplyInput) -> tuple[Task, ReplyInput]:
        """Run the before-model hooks on the rendered prompt; with hooks, send exactly what they return."""
        turn.prompt = REPLY.messages(inp)
        for hook in self.before_model:
            changed = hook(list(turn.prompt))
            turn.prompt = turn.prompt if changed is None else list(changed)
        turn.prompt_tokens = count_tokens(turn.prompt)
        if not self.before_model:
            return REPLY, inp
        fixed = list(turn.prompt)
        body = fixed[1:] if fixed and fixed[0].role == "system" else fixed
        last = max((i for i, m in enumerate(body) if m.role == "user"), default=None)
        if last is not None:  # the typed input follows the edit too, for backends that read it
            inp = inp.model_copy(update={"question": body[last].content, "history": body[:last]})
        return replace(REPLY, build=lambda i: [*fixed, *i.steps]), inp

    def _call_model(self, turn: Turn, inp: ReplyInput) -> tuple[Message, list[Message]]:
        """The reply task through the tool loop (memory tools in tools mode): the reply and the steps to save."""
        task, inp = self._hooked(turn, inp)
        loop = run_tool_loop(self.llm, task, inp, self._tools(turn))
        turn.tool_calls, turn.tool_results = loop.tool_calls, loop.tool_results
        return loop.reply, loop.steps

    @contextmanager
    def _step(self, turn: Turn, name: str):
        """Time one background step; a failure is logged and recorded, never raised. A model task
        that failed inside the step (and was skipped there) counts too: its usage record says so."""
        exc = None
        with self._timed(turn, name), track_usage() as calls:
            try:
                yield
            except Exception as error:
                exc = error
        turn.usage.extend(calls)
        reasons = [_reason(exc)] if exc else [f"task {u.task!r} failed" + (f": {u.error}" if u.error else "")
                                              for u in calls if not u.ok]
        if reasons:
            turn.failed_steps[name] = "; ".join(filter(None, [turn.failed_steps.get(name), *reasons]))
            log.warning("background step %s failed for user %r: %s", name, turn.user_id, "; ".join(reasons),
                        exc_info=exc is not None and not isinstance(exc, EXPECTED))

    def _forget_token(self, user_id: str) -> tuple[float, str | None | Exception]:
        """What ``_forgotten_since`` compares: the time it is read and Redis's forget mark for the user (the Redis
        error instead when it could not be read: then only this process's forget times are compared)."""
        try:
            mark = forget_mark(self.r, self.namespace, user_id)
        except redis.RedisError as exc:
            mark = exc
        return time.monotonic(), mark

    def _forgotten_since(self, user_id: str, token: tuple[float, str | None | Exception]) -> bool:
        """forget_user ran for this user, here or in another process, since ``token`` was read."""
        now = self._forget_token(user_id)
        return (self._forgotten.get(user_id, -1.0) >= token[0]
                or (_failed(token) is None and _failed(now) is None and now[1] != token[1]))

    def _background(self, turn: Turn, forgotten: tuple[float, str | None | Exception], recovering=False) -> None:
        """The turn's memory steps; then its backlog entries go if they succeeded (or the user was forgotten), and
        the user's entries past their lease are recovered by a job of their own (not while recovering)."""
        uid, tid = turn.user_id, turn.thread_id
        try:
            settled = self._remember(turn, forgotten, working=not recovering)
        finally:
            with self._unsaved_lock:
                self._inflight.difference_update((uid, tid, m.id) for m in turn.saved)
        if self.backlog is None:
            return
        try:
            due = self.backlog.done(uid, tid, [m.id for m in turn.saved] if settled else [])
            if due and not recovering:
                self._recover_later(uid)
        except redis.RedisError as exc:  # the entries stay: a later turn or recover() finishes them
            log.warning("the memory backlog of user %r is out of reach: %s", uid, exc)

    def _remember(self, turn: Turn, forgotten: tuple[float, str | None | Exception], working: bool = True) -> bool:
        """The memory steps; True when nothing is left to remember (they all succeeded, or the user was forgotten).
        A recovery leaves ``working`` memory alone: it keeps the latest word, and a recovered message may be older
        than what it read since (long-term memory dates each fact instead)."""
        uid, tid = turn.user_id, turn.thread_id

        def forgotten_now() -> bool:  # forget_user ran since the turn began (checked before each step): write nothing
            return self._forgotten_since(uid, forgotten)
        if forgotten_now():
            return True
        told = [m for m in turn.saved if m.role == "user"]  # this turn's message, after any kept from before
        if self.memory == "full":
            with self._step(turn, "index"):
                self.recall.add(uid, tid, turn.saved)
            candidates: list[Any] = []
            with self._step(turn, "extract"):
                candidates = extract_memories(told, llm=self.llm) if told else []
            for candidate in candidates:  # user-told facts stay the user's, even general ones
                if forgotten_now():
                    return True
                with self._step(turn, "remember"):
                    turn.memories_stored.append(self.store.remember(
                        candidate.content, user_id=uid, memory_type=candidate.type, llm=self.llm,
                        source_thread=tid, source_messages=[m.id for m in told],
                        observed_at=max(m.created_at for m in told)))  # when said: jobs of threads run in any order
            for message in told if working else []:
                if forgotten_now():
                    return True
                with self._step(turn, "working"):
                    self.working.observe(message, self.llm, user_id=uid, thread_id=tid)
        settled = not set(turn.failed_steps) & {"index", "extract", "remember", "working"}
        if forgotten_now():
            return True
        with self._step(turn, "summarize"):  # redone by every later turn: not worth a retry
            summarize_if_needed(self.history(uid, tid), self.llm, policy=self.summary_policy,
                                embedder=self.embedder)  # the agent's own, not a second one loaded here
        return settled
