"""How ``MemoryAgent`` finishes what crashed or failed jobs left in a user's backlog (see backlog.py).

Recovery runs on the user's background line, where it cannot race the user's live writes, in small chunks: a
chunk of a few messages, then the user's waiting turns' jobs, then the next chunk, so the user's next reply
waits for at most one chunk (about one turn's memory steps), never for every thread an outage left behind.
"""
from __future__ import annotations

import logging

import redis

from ..keys import check_id
from .backlog import MAX_TRIES, stored
from .turn import Turn

log = logging.getLogger(__name__)

CHUNK = 4  # backlog entries (messages) one recovery job takes: about one turn
# The writer keys of a user's recovery jobs (no thread id is empty or blank). A continuation goes to the other
# key, so it queues behind the user's turns waiting by then instead of running straight after its chunk.
KEYS = ("", " ")


class Recovering:
    """``MemoryAgent.recover`` and the recovery a turn starts (a mixin: it uses the agent's writer and steps)."""

    def recover(self, user_id: str | None = None) -> list[Turn]:
        """Remember what was stored but never remembered once its lease has passed: a process that died with its
        background writes queued, or a step that failed (a model outage). Each user's next turn does this in the
        background; call it from a sweeper or at start-up for users who do not come back (no ``user_id``: every
        user with a backlog in the namespace, found by a SCAN). Users are done one after another, chunk by chunk
        (their turns may run in between), usually in this thread (a sweep rarely holds a background worker); a
        user Redis fails for is logged and skipped. Working memory is left alone (see backlog.py). Returns one Turn
        per thread and chunk."""
        if self.backlog is None:
            return []
        turns: list[Turn] = []
        for uid in [check_id(user_id, "user_id")] if user_id is not None else self.backlog.users():
            try:
                while self.backlog.due(uid):  # each chunk moves the lease of what it took on: this ends
                    future = self._writes.submit((uid, KEYS[0]), lambda uid=uid: self._recover(uid))
                    self._writes.wait((uid, KEYS[0]))
                    turns.extend(future.result())
            except redis.RedisError as exc:
                log.warning("could not recover the memory of user %r: %s", uid, exc)
        return turns

    def _recover_later(self, uid: str) -> None:
        """Queue the user's recovery behind their queued writes, unless it is queued or running already."""
        if not any(self._writes.pending((uid, k)) for k in KEYS):
            self._writes.submit((uid, KEYS[0]), lambda: self._recover(uid, follow=1))

    def _recover(self, uid: str, follow: int = 0) -> list[Turn]:
        """Claim a chunk of the user's entries past their lease and run their memory steps (on the user's line);
        with ``follow``, queue the next chunk while more is due."""
        token = self._forget_token(uid)
        taken, dropped = self.backlog.claim(uid, limit=CHUNK)
        for tid, ids in dropped.items():
            log.warning("gave up remembering %d message(s) of user %r thread %r: their memory steps failed %d times",
                        len(ids), uid, tid, 1 + MAX_TRIES)
        turns = []
        for tid, ids in taken.items():
            with self._unsaved_lock:  # a job queued here runs them itself
                ids = [i for i in ids if (uid, tid, i) not in self._inflight]
            found = stored(self.history(uid, tid), ids)
            if len(found) < len(ids):  # deleted, expired or cleared since: nothing to remember
                self.backlog.done(uid, tid, sorted(set(ids) - {m.id for m in found}))
            if found:
                told = [m for m in found if m.role == "user"]
                turn = Turn(user_id=uid, thread_id=tid, user_message=(told or found)[-1], saved=found)
                self._background(turn, token, recovering=True)
                turns.append(turn)
                log.info("remembered %d message(s) of user %r thread %r left by an earlier job", len(found), uid, tid)
        if follow and (taken or dropped) and self.backlog.due(uid):
            self._writes.submit((uid, KEYS[follow % 2]), lambda: self._recover(uid, follow + 1))
        return turns
