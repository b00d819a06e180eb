"""Background writes ordered per key, parallel across keys, on one bounded thread pool.

Each key (a ``(user, thread)`` pair in the agent) has a queue; one pool worker at a time drains it,
so a key's jobs run in submission order while other keys' jobs run beside them, the way
LangGraph's checkpointers order writes per thread and Redis Agent Memory Server runs its
background tasks per session. Waiting is per key: a turn waits only for its own thread, and when its
thread's jobs are still queued behind other keys' (every worker busy), the waiting turn runs them itself
instead of waiting for a worker that other users hold. Keys can be grouped (the agent groups a user's
threads): a group runs at most ``per_group`` keys at once (the agent: one, so a user's writes never race each
other for their profile) on at most ``per_group`` workers, so one user with many busy threads leaves the other
workers to everyone else; its other keys wait in the group's own line, which its worker runs next.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextvars
import threading
from collections import deque
from typing import Callable, Hashable

from ..errors import ValidationError


class KeyedWriter:
    """Run ``fn()`` jobs in order per key, in parallel across keys, on at most ``workers`` threads."""

    def __init__(self, workers: int = 8, name: str = "memorykit-writes", *,
                 group: Callable[[Hashable], Hashable] | None = None, per_group: int | None = None):
        if not isinstance(workers, int) or workers < 1:
            raise ValidationError(f"workers must be a positive integer, got {workers!r}")
        if per_group is not None and (not isinstance(per_group, int) or per_group < 1):
            raise ValidationError(f"per_group must be a positive integer, got {per_group!r}")
        self._group = group or (lambda key: key)
        self._per_group = per_group or workers
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._queues: dict[Hashable, deque[tuple[Callable[[], object], cf.Future]]] = {}
        self._pending: dict[Hashable, list[cf.Future]] = {}
        self._draining: set[Hashable] = set()  # keys a thread is running jobs of right now
        self._busy: dict[Hashable, int] = {}  # group -> its keys draining now (at most per_group)
        self._tasks: dict[Hashable, int] = {}  # group -> pool tasks given to it (at most per_group)
        self._parked: dict[Hashable, deque[Hashable]] = {}  # group -> its keys waiting for one of its turns

    def submit(self, key: Hashable, fn: Callable[[], object]) -> cf.Future:
        """Queue ``fn`` after the key's earlier jobs; returns its future (its exception, if any, stays there)."""
        future: cf.Future = cf.Future()
        with self._lock:
            self._pending.setdefault(key, []).append(future)
            queue = self._queues.get(key)
            if queue is not None:  # a worker is draining this key: it will reach the job
                queue.append((fn, future))
                return future
            self._queues[key] = deque([(fn, future)])
            if not self._task_for(key):
                return future
        self._pool.submit(self._work, key)
        return future

    def _task_for(self, key: Hashable) -> bool:
        """Under the lock: give ``key`` one of its group's pool tasks (True), or park it in the group's line."""
        group = self._group(key)
        if self._tasks.get(group, 0) >= self._per_group:
            self._parked.setdefault(group, deque()).append(key)
            return False
        self._tasks[group] = self._tasks.get(group, 0) + 1
        return True

    def _claim(self, key: Hashable) -> bool:
        """Under the lock: become the one thread running the key's jobs (False: another thread does, none are
        queued, or its group already runs ``per_group`` keys)."""
        group = self._group(key)
        if key in self._draining or key not in self._queues or self._busy.get(group, 0) >= self._per_group:
            return False
        self._draining.add(key)
        self._busy[group] = self._busy.get(group, 0) + 1
        return True

    def _next_parked(self, group: Hashable) -> Hashable | None:
        """Under the lock: the group's next parked key that still has jobs and no thread (None: none)."""
        line, found = self._parked.get(group, deque()), None
        while line and found is None:
            key = line.popleft()
            found = key if key in self._queues and key not in self._draining else None
        if not line:
            self._parked.pop(group, None)
        return found

    def _work(self, key: Hashable | None) -> None:
        """A pool task: drain ``key``, then the group's parked keys one after another on this worker (a parked
        key never waits behind other groups' tasks). A key another thread ran meanwhile is skipped; a key whose
        group runs its share of keys now is parked and the task let go, in one step: whoever runs the group
        sees it parked when it finishes and hands it on."""
        group = self._group(key)
        with self._lock:  # held for every decision; let go only while draining
            while key is not None:
                if key in self._draining or key not in self._queues:  # a waiting turn ran (or runs) it
                    key = self._next_parked(group)
                    continue
                if not self._claim(key):  # the group runs its share now
                    self._parked.setdefault(group, deque()).append(key)
                    break
                self._lock.release()
                try:
                    self._drain(key)
                finally:
                    self._lock.acquire()
                key = self._next_parked(group)
            self._let_go(group)

    def _let_go(self, group: Hashable) -> None:
        """Under the lock: one of the group's pool tasks ends."""
        self._tasks[group] -= 1
        if not self._tasks[group]:
            del self._tasks[group]

    def _drain(self, key: Hashable) -> None:
        """Run a claimed key's jobs one after another until its queue is empty, then let the key go."""
        group = self._group(key)
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    self._draining.discard(key)
                    self._busy[group] -= 1
                    if not self._busy[group]:
                        del self._busy[group]
                    return
                fn, future = queue.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # kept on the future; the key's next jobs still run
                    future.set_exception(exc)
            with self._lock:
                waiting = self._pending.get(key, [])
                if future in waiting:
                    waiting.remove(future)
                if not waiting:
                    self._pending.pop(key, None)

    def wait(self, key: Hashable | None = None) -> list[cf.Future]:
        """Wait for the jobs queued so far for ``key`` (all keys when None); returns their futures. Waiting for
        one key whose jobs no worker has started yet runs them in the caller's thread, unless the key's group
        already runs its share of keys (then the group's worker reaches them next)."""
        with self._lock:
            futures = list(self._pending.get(key, [])) if key is not None else \
                [f for fs in self._pending.values() for f in fs]
            claimed = key is not None and bool(futures) and self._claim(key)
        if claimed:  # in a fresh context, as on a pool worker (the caller's usage meters do not see them)
            try:
                contextvars.Context().run(self._drain, key)
            finally:
                self._hand_on(self._group(key))
        cf.wait(futures)
        return futures

    def _hand_on(self, group: Hashable) -> None:
        """After a caller ran a key: a pool task for the group's next parked key, if the group has one to spare."""
        with self._lock:
            key = self._next_parked(group) if self._tasks.get(group, 0) < self._per_group else None
            if key is None:
                return
            self._tasks[group] = self._tasks.get(group, 0) + 1
        self._pool.submit(self._work, key)

    def keys(self) -> list[Hashable]:
        """The keys with jobs queued or running."""
        with self._lock:
            return list(self._pending)

    def pending(self, key: Hashable | None = None) -> int:
        """How many jobs are queued or running (for ``key``, or for all keys)."""
        with self._lock:
            if key is not None:
                return len(self._pending.get(key, []))
            return sum(map(len, self._pending.values()))

    def shutdown(self) -> None:
        self.wait()
        self._pool.shutdown(wait=True)
