"""Nothing stored is lost to a crash: a process killed with its background writes queued, a model outage during
them, several users and odd ids, a forgotten user, and work claimed by one process at a time."""
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import memorykit as mk
from memorykit.agent.backlog import MAX_TRIES
from memorykit.errors import LLMError
from memorykit.keys import backlog_key
from memorykit.llm import get_llm

ROOT = Path(__file__).resolve().parents[1]
ODD_USERS = ["system", "{x}", "a|b", "ünï cödé *"]


class Stalls:
    """The offline model, except that memory tasks of messages holding ``word`` wait until ``release`` is set
    (a process that hangs or dies mid-job), and with ``down`` every memory task fails (a model outage)."""

    def __init__(self, word: str = "", down: bool = False):
        self.inner, self.word, self.down, self.label = get_llm("offline"), word, down, "offline (stalls)"
        self.release, self.stalled, self.tasks, self.times = threading.Event(), threading.Event(), [], []

    def perform(self, task, inp, tools=None):
        self.tasks.append(task.name)
        self.times.append(time.monotonic())
        if task.name != "reply" and self.down:
            raise LLMError("the model server answered HTTP 503: overloaded")
        if task.name != "reply" and self.word and self.word in inp.model_dump_json():
            self.stalled.set()
            self.release.wait(60)
        return self.inner.perform(task, inp, tools=tools)

    def chat(self, messages, **kwargs):
        return self.inner.chat(messages, **kwargs)


def facts(agent, user):
    return sorted(m.content for m in agent.store.list(user))


def backlog_left(r, ns, user):
    key = backlog_key(ns, user)
    return r.zcard(key), r.hlen(key + ":tries")


CRASHING = textwrap.dedent("""
    import sys, time
    import memorykit as mk
    from memorykit.llm import get_llm

    class Stalls:  # the reply at once; every memory task hangs until the process is killed
        label = "offline (stalls)"
        def __init__(self):
            self.inner = get_llm("offline")
        def perform(self, task, inp, tools=None):
            if task.name != "reply":
                print("stalled", flush=True)
                time.sleep(600)
            return self.inner.perform(task, inp, tools=tools)
        def chat(self, messages, **kwargs):
            return self.inner.chat(messages, **kwargs)

    agent = mk.MemoryAgent(mk.connect(), llm=Stalls(), namespace=sys.argv[1], lease=1)
    for user in sys.argv[2:]:
        turn = agent.chat("I am allergic to penicillin.", user_id=user, thread_id="t1")
        print("stored" if turn.ok else turn.error, flush=True)
    time.sleep(600)
""")


def test_what_a_killed_process_stored_is_remembered_by_the_next_turn_in_another_process(r, emb, ns):
    users = ["alice", *ODD_USERS]
    proc = subprocess.Popen([sys.executable, "-c", CRASHING, ns, *users], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        lines: list[str] = []
        while (lines.count("stored") < len(users) or "stalled" not in lines) and (not lines or lines[-1]):
            lines.append(proc.stdout.readline().strip())
    finally:
        proc.send_signal(signal.SIGKILL)  # the process dies with every user's memory steps queued or under way
        proc.wait(30)
    assert lines.count("stored") == len(users) and "stalled" in lines, lines
    agent = mk.MemoryAgent(r, llm=get_llm("offline"), embedder=emb, namespace=ns, lease=1)  # a new process
    assert all(facts(agent, u) == [] for u in users)  # the messages are stored; their memory is not
    time.sleep(1.2)  # the dead process's lease passes
    turn = agent.chat("What should I cook tonight?", user_id="alice", thread_id="t2")
    agent.flush()
    assert turn.ok and facts(agent, "alice") == ["User is allergic to penicillin."]
    assert backlog_left(r, ns, "alice") == (0, 0)
    assert all(facts(agent, u) == [] for u in ODD_USERS)  # alice's turn took only alice's work
    recovered = agent.recover()  # a sweeper, for the users who do not come back
    assert sorted(t.user_id for t in recovered) == sorted(ODD_USERS) and all(t.thread_id == "t1" for t in recovered)
    assert all(facts(agent, u) == ["User is allergic to penicillin."] for u in ODD_USERS)
    assert all(backlog_left(r, ns, u) == (0, 0) for u in users) and agent.recover() == []
    agent.close()


def test_a_model_outage_during_the_memory_steps_is_tried_again_after_the_lease(r, emb, ns):
    model = Stalls(down=True)
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, lease=0.5)
    failed = agent.chat("I am allergic to penicillin.", user_id="{x}", thread_id="t1")
    agent.flush()
    assert failed.ok and "extract" in failed.failed_steps and facts(agent, "{x}") == []
    assert backlog_left(r, ns, "{x}") == (2, 0)  # the question and the reply wait for another try
    model.down = False  # the model is back
    time.sleep(0.6)
    later = agent.chat("Hello again.", user_id="{x}", thread_id="t2")
    agent.flush()
    assert later.ok and facts(agent, "{x}") == ["User is allergic to penicillin."]
    assert backlog_left(r, ns, "{x}") == (0, 0)
    agent.close()


def test_a_step_that_keeps_failing_is_tried_with_longer_waits_then_given_up_and_said_so(r, emb, ns, caplog):
    model, lease = Stalls(down=True), 0.05
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, lease=lease)
    with caplog.at_level(logging.WARNING, logger="memorykit.agent.recovery"):
        agent.chat("I am allergic to penicillin.", user_id="system", thread_id="t1")
        agent.flush()
        deadline = time.monotonic() + 60
        while r.exists(backlog_key(ns, "system")) and time.monotonic() < deadline:
            time.sleep(lease)
            assert [t.thread_id for t in agent.recover("system")] in (["t1"], [])
    tries = [t for name, t in zip(model.tasks, model.times) if name == "extract_memories"]
    assert len(tries) == 1 + MAX_TRIES  # the turn's own try and MAX_TRIES more
    waits = [b - a for a, b in zip(tries, tries[1:])]
    assert all(w >= lease * 2 ** max(0, k - 1) for k, w in enumerate(waits)), waits  # each lease doubled
    assert backlog_left(r, ns, "system") == (0, 0)
    assert "gave up remembering 2 message(s) of user 'system'" in caplog.text
    agent.close()


def test_a_recovered_message_never_overwrites_what_the_user_said_after_it(r, emb, ns):
    """Said during a model outage, "I live in Porto" is remembered after "I moved to Berlin" was: the facts keep
    their order by when they were said, and the profile (which keeps the latest word) is left alone."""
    model = Stalls(down=True)
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, lease=1, background=False)
    agent.chat("I live in Porto.", user_id="a|b", thread_id="t1")
    model.down = False
    agent.chat("I moved to Berlin.", user_id="a|b", thread_id="t1")
    assert "Berlin" in agent.working.get("a|b") and facts(agent, "a|b") == ["User moved to Berlin."]
    time.sleep(1.1)
    agent.chat("What is the weather like?", user_id="a|b", thread_id="t1")  # starts the recovery of turn one
    agent.flush()
    assert "Berlin" in agent.working.get("a|b") and "Lisbon" not in agent.working.get("a|b")
    current = [m.content for m in agent.store.list("a|b")]
    assert current == ["User moved to Berlin."], current  # Porto is in its history, not current
    assert backlog_left(r, ns, "a|b") == (0, 0)
    agent.close()


def test_the_next_reply_does_not_wait_for_what_an_outage_left_in_other_threads(r, emb, ns):
    model = Stalls(down=True, word="penicillin")
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, lease=0.3)
    for i in range(4):
        agent.chat("I am allergic to penicillin.", user_id="{x}", thread_id=f"old{i}")
    agent.flush()
    model.down = False
    time.sleep(0.4)
    first = agent.chat("Hello.", user_id="{x}", thread_id="new")  # its job starts the recovery, which hangs
    assert model.stalled.wait(30)
    second = agent.chat("How are you?", user_id="{x}", thread_id="new")  # waits for "Hello."'s job, not for it
    assert first.ok and second.ok and facts(agent, "{x}") == []  # replied while the recovery still hangs
    model.release.set()
    agent.flush()
    assert facts(agent, "{x}") == ["User is allergic to penicillin."]
    assert backlog_left(r, ns, "{x}")[0] == 0
    agent.close()


def test_work_under_lease_is_left_to_its_process_and_past_it_is_done_once(r, emb, ns):
    """A live job keeps its entries until its lease passes; a hung one's are claimed by exactly one other
    process, and when the hung job resumes, its repeat stores nothing twice."""
    live_model, hung_model = Stalls(word="penicillin"), Stalls(word="peanuts")
    live = mk.MemoryAgent(r, llm=live_model, embedder=emb, namespace=ns)  # the default lease, 300 s
    hung = mk.MemoryAgent(r, llm=hung_model, embedder=emb, namespace=ns, lease=0.3)
    live.chat("I am allergic to penicillin.", user_id="a|b", thread_id="t1")
    hung.chat("I am allergic to peanuts.", user_id="system", thread_id="t1")
    assert live_model.stalled.wait(30) and hung_model.stalled.wait(30)
    time.sleep(0.4)
    others = [mk.MemoryAgent(r, llm=get_llm("offline"), embedder=emb, namespace=ns) for _ in range(3)]
    found: list = []
    threads = [threading.Thread(target=lambda a=a: found.extend(a.recover())) for a in others]
    [t.start() for t in threads], [t.join() for t in threads]
    assert [(t.user_id, t.thread_id) for t in found] == [("system", "t1")]  # one sweeper won; a|b's job is live
    assert facts(others[0], "system") == ["User is allergic to peanuts."] and facts(others[0], "a|b") == []
    live_model.release.set(), hung_model.release.set()
    live.flush(), hung.flush()
    assert facts(live, "a|b") == ["User is allergic to penicillin."]
    assert facts(hung, "system") == ["User is allergic to peanuts."]  # done twice, stored once
    assert backlog_left(r, ns, "a|b") == backlog_left(r, ns, "system") == (0, 0)
    for a in (live, hung, *others):
        a.close()


def test_a_forgotten_user_is_not_recovered_and_their_backlog_is_deleted(r, emb, ns):
    model = Stalls(word="penicillin")
    hung = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, lease=0.3)
    hung.chat("I am allergic to penicillin.", user_id="ünï cödé *", thread_id="t1")
    hung.chat("I am allergic to penicillin.", user_id="system", thread_id="t1")  # queued behind, another user
    assert model.stalled.wait(30)
    sweeper = mk.MemoryAgent(r, llm=get_llm("offline"), embedder=emb, namespace=ns)
    sweeper.forget_user("ünï cödé *")
    assert not r.exists(backlog_key(ns, "ünï cödé *"))
    time.sleep(0.4)
    assert [t.user_id for t in sweeper.recover()] == ["system"]
    model.release.set()
    hung.flush()
    assert facts(sweeper, "ünï cödé *") == [] and sweeper.recall.count("ünï cödé *") == 0
    assert facts(sweeper, "system") == ["User is allergic to penicillin."]
    hung.close(), sweeper.close()


def test_forget_user_while_a_sweeper_recovers_the_user_leaves_nothing(r, emb, ns):
    """A sweeper works through a user's backlog chunk by chunk when the user asks to be forgotten: no chunk
    claimed after the forget writes anything back."""
    model = Stalls(down=True)
    agent = mk.MemoryAgent(r, llm=model, embedder=emb, namespace=ns, lease=0.5)
    for i in range(12):
        agent.chat(f"My favourite number {i} is {i}{i}.", user_id="a|b", thread_id=f"t{i}")
    agent.chat("I am allergic to peanuts.", user_id="system", thread_id="t1")
    agent.flush()
    model.down = False
    time.sleep(0.6)
    sweeper = threading.Thread(target=agent.recover, args=("a|b",))
    sweeper.start()
    deadline = time.monotonic() + 30
    while not agent.store.list("a|b") and time.monotonic() < deadline:  # the first chunk is written
        time.sleep(0.01)
    agent.forget_user("a|b")
    sweeper.join()
    agent.flush()
    assert agent.store.list("a|b") == [] and agent.recall.count("a|b") == 0
    assert [k for k in r.scan_iter(match=f"{ns}:*") if "a%7Cb" in k] == []
    assert [t.user_id for t in agent.recover()] == ["system"]  # the other user's backlog is untouched
    agent.close()


class Slow(Stalls):
    """Every memory task takes 200 ms (a model server), so some write is always pending while anyone chats."""

    def perform(self, task, inp, tools=None):
        if task.name != "reply":
            time.sleep(0.2)
        return super().perform(task, inp, tools=tools)


def test_flush_waits_for_the_writes_queued_before_it_while_others_keep_chatting(r, emb, ns):
    agent = mk.MemoryAgent(r, llm=Slow(), embedder=emb, namespace=ns)
    agent.chat("I live in Porto.", user_id="alice", thread_id="t1")
    done, chatted = threading.Event(), []

    def chatter():  # another user who never stops, until flush() has returned (or 100 turns)
        while not done.is_set() and len(chatted) < 100:
            chatted.append(agent.chat(f"Message {len(chatted)}.", user_id=f"bob{len(chatted) % 20}", thread_id="t"))
    worker = threading.Thread(target=chatter)
    worker.start()
    while len(chatted) < 3:
        time.sleep(0.01)
    agent.flush()
    done.set()
    assert len(chatted) < 100  # flush() returned while bob was still chatting
    assert facts(agent, "alice") == ["User lives in Porto."]
    worker.join()
    agent.close()


@pytest.mark.parametrize("memory", ["short_term", False])
def test_without_long_term_memory_nothing_is_kept_to_remember(r, ns, memory):
    agent = mk.MemoryAgent(r, llm=get_llm("offline"), namespace=ns, memory=memory)
    agent.chat("I am allergic to penicillin.", user_id="alice", thread_id="t1")
    agent.flush()
    assert not r.exists(backlog_key(ns, "alice")) and agent.recover() == []
    agent.close()
