"""The package's shape, checked: layers import downward only, no cycles, small modules,
the offline backend reachable only through the factory, a small public surface."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import memorykit

PKG = Path(memorykit.__file__).resolve().parent
LAYERS = {"core": 0, "llm": 1, "memory": 2, "agent": 3, "course": 4}


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS | {"offline": 0}) else "core"


def _nodes(tree: ast.AST, top_level_only: bool):
    """Import statements: all of them, or only those that run at import time (not in functions or
    ``if TYPE_CHECKING:`` blocks)."""
    if not top_level_only:
        yield from ast.walk(tree)
        return
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """memorykit modules a module imports (by default including lazy, function-level imports)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in _nodes(tree, top_level_only):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("memorykit"):
                found.add(target)
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules():
                        found.add(f"{target}.{alias.name}")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("memorykit")}
    return found


# The course's background servers, each reached from one entry point of the library (lazily):
# connect() falls back to the embedded Redis, get_llm("local") starts the local model.
LAUNCHERS = {"memorykit.course.redis_server": "memorykit.server",
             "memorykit.course.local_model": "memorykit.llm.factory"}


def test_layers_import_downward_only():
    bad = []
    for name, path in modules().items():
        if name == "memorykit" or layer(name) == "offline":
            continue
        for target in imports_of(name, path):
            if target == "memorykit" or layer(target) == "offline":
                if layer(target) == "offline" and name != "memorykit.llm.factory":
                    bad.append(f"{name} -> {target} (only llm.factory may import offline)")
                continue
            if target in LAUNCHERS:
                if LAUNCHERS[target] != name:
                    bad.append(f"{name} -> {target} (only {LAUNCHERS[target]} may start it)")
                continue
            if LAYERS[layer(target)] > LAYERS[layer(name)]:
                bad.append(f"{name} -> {target}")
    assert bad == []


def test_no_import_cycles():
    """No cycle among the imports that run when a module loads (lazy imports inside functions and
    type-only imports are how a lower layer names a higher one without depending on it)."""
    graph = {n: {t for t in imports_of(n, p, top_level_only=True) if t in modules() and t != n}
             for n, p in modules().items()}
    # a module importing its own parent package (whose __init__ re-exports it) is not a cycle of design
    graph = {n: {t for t in ts if not n.startswith(t + ".")} for n, ts in graph.items()}
    seen, stack, cycles = set(), [], []

    def visit(node):
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for nxt in graph.get(node, ()):
            visit(nxt)
        stack.pop()

    for node in graph:
        visit(node)
    assert cycles == []


def test_no_module_over_450_lines():
    big = {n: len(p.read_text().splitlines()) for n, p in modules().items()}
    assert {n: c for n, c in big.items() if c > 450} == {}


CORE_BUDGET = 7290  # issue 14 set 4,500 (4,489 measured); issue 25 added ~560 lines (shared knowledge, owner-checked by-id calls, atomic ledger, scan-free forget_user, keyed background writers, CAS working memory), issue 26 ~460 (request shapes per server family, strict schemas, usage and cost, pydantic tool arguments), issue 27 ~140 (per-user BM25, access sets), issue 28 ~210 (Vector Sets per owner: vectors.py, owner-keyed documents and id registries for list / count / forgetting without a query engine, exact search under filters=), then ~30 (the usage log of every model request, MEMORYKIT_USAGE_LOG; the access set read or written in the search pipeline), then ~30 (training texts embedded in batches while an offline model is fitted, cached apart from run-time vectors: a fresh checkout fits its models in a fraction of the time), then ~70 (a production review: a turn runs its own thread's queued writes when every worker is busy with other users, MemoryAgent.forget_user waits out the user's writes in flight, the shared procedure pool keeps only schema-bounded arguments, feedback keys hash question and answer apart, the embeddings cache stores a digest instead of the text, the thread list pruned in one step, a bounded queue of cache writes, a retried remember() reusing an unchanged decision, topics with a comma refused, recall vectors adopted only while their message is in the thread, a summary quoting a message its model fact cannot be verified against), then ~45 (a forget mark in Redis that agents in other processes check before each background memory step), then ~30 (messages kept while Redis is down are bounded, per thread and in characters, and a refused one is said so; turn.error names a Redis connection error by its kind, not the server's address), then ~25 (a thread's recall vectors share one expiry, moved only when the thread's would pass it, not on every append), then ~40 (an index Redis lost is created again by the query that finds it missing), then ~10 (text with a lone surrogate refused, a web page for a chat completion a clear model error, a memory search for k <= 0 empty; a stored message remembered when its turn's model failed or it landed late), then ~10 (a compatible server's model that sends its thought gets room to think), then ~90 (a third review: an agent's update by id writes a new version and keeps the old as history, a back-dated fact goes into its chain at its time and is stored once, distance_threshold in every search mode, expired threads leave the key registry, recall messages as HASHes, a shared pool keeps only arguments its schema names), then ~25 (its follow-up review: forget_user deletes what a recall set lists in any layout, a new fact never dated before the one it replaces, observed_at in the future refused, the current fact observed earlier holds from then, a revision to text already stored closes the old one instead of copying it), then ~50 (a fact's versions in their own module, chains.py; a fact said again after a newer memory replaced it replaces that memory), then ~40 (a fourth review: one user's writes run one at a time, on one background worker (a waiting turn runs its own only when none of its user's runs); a kept message whose save timed out but landed is remembered with the next turn; a tool run or feedback analysis under way when its user is forgotten writes nothing; a fact dated when it was said; found feedback stored as the exchange it is about, a made-up one dropped; recency 0 for a memory created after the time asked about), then ~200 (what is stored but not yet remembered kept in Redis beside the thread, the backlog: written in the append's transaction, cleared when the memory steps succeed, claimed past its lease by the user's next turn in any process or by MemoryAgent.recover, so a crashed process or a model outage loses no memory; Turn in its own module; an agent keeps forget times only while Redis keeps the mark), then ~80 (its review: leases on Redis's clock and doubled per try, recovery in chunks on the user's line so the next reply never waits for it, a recovered message never overwrites newer working memory, a sweep in the caller's thread), then ~65 (text search compares words folded: accents, C++ / C#, CJK by pairs of characters; a memory's terms field holds what Redis's tokenizer may miss, and backfill_terms gives older memories theirs), then ~50 (a fifth review and its follow-up: a later summary keeps an earlier fact its model rewords past checking, an update it cannot verify quotes the new message rather than the outdated fact, an empty answer carries the earlier facts on, a blank working memory update refused instead of erasing the profile, feedback keys that keep signs, symbols, % # & and decimal points, with examples under the older key still found), then ~55 (a strict model's null leaves a working memory field unchanged, update(replace=True) writes the whole object; logs and task reasons name a bad output's kind, fields and error position, never its words; turn.error names a model failure by its kind, and logged errors mask credentials), then ~160 (a sixth review, of the model client, and its follow-up: a schema refused in strict mode goes non-strict alone (all of them past 64), oneOf as anyOf and schemas strict mode refuses sent non-strict up front, content_filter, Retry-After past the deadline, a context overflow teaching nothing, reasoning tokens giving room to think, Azure OpenAI as OpenAI, cached input priced at its rate, a model error's kind and status; its second follow-up: a partial working-memory update never sent strict, so a null clears a field again; an update that changes nothing writes no version; a refusal's words kept out of reasons; errors of other clients told by kind (httpx and httpx2); more secrets masked; a null resets a working-memory field to its default), then ~2 (an update that changes nothing still refreshes the TTL), then ~20 (a fact said before every candidate, remembered late after an outage, is asked about in the order it was said)


def test_library_core_stays_within_its_budget():
    """The library without offline/ and course/ stays small enough to read in an afternoon."""
    core = sum(len(p.read_text().splitlines()) for n, p in modules().items()
               if layer(n) not in ("offline", "course"))
    assert core <= CORE_BUDGET, core


def test_offline_markers_stay_in_offline():
    pattern = re.compile(r"\(offline\)|\[task:")
    hits = [n for n, p in modules().items() if layer(n) != "offline" and pattern.search(p.read_text())]
    assert hits == []


def test_public_surface():
    assert len(memorykit.__all__) <= 40
    for name in memorykit.__all__:
        assert getattr(memorykit, name) is not None


def test_every_import_resolves_including_lazy_ones():
    """A function-level import runs only when called: check each names a module or attribute that exists."""
    import importlib

    bad = []
    for name, path in modules().items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if not target.startswith("memorykit"):
                continue
            module = importlib.import_module(target)
            bad += [f"{name}: {target}.{a.name}" for a in node.names
                    if not hasattr(module, a.name) and importlib.util.find_spec(f"{target}.{a.name}") is None]
    assert bad == []
