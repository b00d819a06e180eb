"""Background writes ordered per key, parallel across keys, on one bounded thread pool.

Each key (a ``(user, thread)`` pair in the agent) has a queue; one pool worker at a time drains it,
so a key's jobs run in submission order while other keys' jobs run beside them, the way
LangGraph's checkpointers order writes per thread and Redis Agent Memory Server runs its
background tasks per session. Waiting is per key: a turn waits only for its own thread, and when its
thread's jobs are still queued behind other keys' (every worker busy), the waiting turn runs them itself
instead of waiting for a worker that other users hold. Keys can be grouped (the agent groups a user's
threads): a group holds at most ``per_group`` workers at once, so one user with many busy threads leaves
workers free for everyone else; its other keys wait their turn in the group's own line.
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
        self._running: dict[Hashable, int] = {}  # group -> pool workers given to its keys
        self._parked: dict[Hashable, deque[Hashable]] = {}  # group -> keys waiting for one of its workers
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._queues: dict[Hashable, deque[tuple[Callable[[], object], cf.Future]]] = {}
        self._pending: dict[Hashable, list[cf.Future]] = {}
        self._draining: set[Hashable] = set()  # keys a thread is running jobs of right now

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
            if not self._start(key):
                return future
        self._pool.submit(self._work, key)
        return future

    def _start(self, key: Hashable) -> bool:
        """Under the lock: give ``key`` one of its group's workers (True), or park it in the group's line."""
        group = self._group(key)
        if self._running.get(group, 0) >= self._per_group:
            self._parked.setdefault(group, deque()).append(key)
            return False
        self._running[group] = self._running.get(group, 0) + 1
        return True

    def _work(self, key: Hashable) -> None:
        """A pool worker's task: drain ``key``, then hand the group's worker to its next parked key."""
        try:
            self._drain(key)
        finally:
            group, after = self._group(key), None
            with self._lock:
                self._running[group] -= 1
                if not self._running[group]:
                    del self._running[group]
                line = self._parked.get(group, deque())
                while line and after is None:
                    nxt = line.popleft()  # a caller may have drained it meanwhile
                    after = nxt if nxt in self._queues and nxt not in self._draining else None
                if not line:
                    self._parked.pop(group, None)
                if after is not None:
                    self._running[group] = self._running.get(group, 0) + 1
            if after is not None:
                self._pool.submit(self._work, after)

    def _claim(self, key: Hashable) -> bool:
        """Become the one thread running the key's jobs (False: another thread does, or none are queued)."""
        with self._lock:
            if key in self._draining or key not in self._queues:
                return False
            self._draining.add(key)
            return True

    def _drain(self, key: Hashable) -> None:
        """Run the key's jobs one after another until its queue is empty, then let the key go. A pool worker
        and a waiting caller may both try; the first to claim the key runs its jobs, the other returns."""
        if not self._claim(key):
            return
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    self._draining.discard(key)
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
        one key whose jobs no worker has started yet runs them in the caller's thread."""
        with self._lock:
            futures = list(self._pending.get(key, [])) if key is not None else \
                [f for fs in self._pending.values() for f in fs]
        if key is not None and futures:  # in a fresh context, as on a pool worker (the caller's usage meters
            contextvars.Context().run(self._drain, key)  # do not see them); no-op when a worker runs them
        cf.wait(futures)
        return futures

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
