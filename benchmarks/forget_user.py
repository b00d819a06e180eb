"""forget_user does not grow with the keyspace: it reads indexes, fixed names and a key registry, never SCANs.

    python benchmarks/forget_user.py [--filler 50000]

Forgets one user (memories, a chat thread, working memory, feedback) twice: in a keyspace with only
this namespace, then after ``--filler`` unrelated keys are added. Prints the time per call and the
SCAN commands it issued (``INFO commandstats``), and the large / small time ratio (about 1 when the
cost does not depend on the keyspace). Before issue 25 each call ran about 28 SCAN walks of the whole
keyspace: 1,540 SCAN calls and 821 ms at 54k keys on the course machine, against 0 and 6 ms after.
"""
import argparse
import time
import uuid

import memorykit as mk


def scans(r) -> int:
    return int(r.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def fill_user(r, emb, ns: str, user: str) -> None:
    store = mk.MemoryStore(r, emb, namespace=ns)
    store.add_many([{"content": f"Fact {i} about {user}", "user_id": user} for i in range(20)])
    mk.ChatHistory(r, user_id=user, thread_id="t1", namespace=ns).append(mk.Message(role="user", content="hi"))
    mk.WorkingMemory(r, namespace=ns, scope="conversation").update("- notes", user_id=user, thread_id="t1")
    mk.FeedbackStore(r, emb, namespace=ns).mark(user, "how are you?", "fine", "positive")


def forget_once(r, emb, ns: str, user: str) -> tuple[float, int, int]:
    fill_user(r, emb, ns, user)
    before, start = scans(r), time.perf_counter()
    deleted = mk.MemoryStore(r, emb, namespace=ns).forget_user(user)
    return time.perf_counter() - start, scans(r) - before, deleted


def main(filler: int) -> None:
    r = mk.connect()
    emb = mk.get_embedder(r)
    ns, other = "bforget" + uuid.uuid4().hex[:6], "bfiller" + uuid.uuid4().hex[:6]
    try:
        forget_once(r, emb, ns, "warm-up")
        small = [forget_once(r, emb, ns, f"user-{i}") for i in range(3)]
        pipe = r.pipeline(transaction=False)
        for i in range(filler):
            pipe.set(f"{other}:k:{i}", "x")
        pipe.execute()
        forget_once(r, emb, ns, "warm-up")  # after the keyspace grew (Redis rehashes its dict incrementally)
        large = [forget_once(r, emb, ns, f"user-{i}") for i in range(3, 6)]
        t_small, t_large = (min(t for t, _, _ in runs) for runs in (small, large))
        print(f"{'keyspace':<22}{'ms per call':>12}{'SCAN calls':>12}{'keys deleted':>14}")
        for label, runs, t in (("namespace only", small, t_small), (f"+{filler:,} other keys", large, t_large)):
            print(f"{label:<22}{t * 1000:>12.1f}{max(s for _, s, _ in runs):>12}{runs[0][2]:>14}")
        print(f"large / small keyspace time: {t_large / t_small:.2f}x (about 1: the keyspace does not matter)")
    finally:
        from memorykit.memory.index import delete_keys
        for name in r.execute_command("FT._LIST"):
            if str(name).startswith(f"{ns}_"):
                r.execute_command("FT.DROPINDEX", name, "DD")
        delete_keys(r, r.scan_iter(match=f"{other}:*", count=5000))
        delete_keys(r, r.scan_iter(match=f"{ns}:*", count=5000))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filler", type=int, default=50_000)
    main(parser.parse_args().filler)
