"""Draw one architecture diagram per memory layer into docs/diagrams/*.png.

    python docs/diagrams.py

Boxes are Redis structures (red), memorykit code (blue) and the model (grey); arrows are
data flow. Regenerate after changing the layout; the notebooks show these PNGs.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent / "diagrams"
COLORS = {"redis": ("#fde2e1", "#c0392b"), "code": ("#e3eefb", "#2466a8"), "model": ("#eeeeee", "#555555"),
          "user": ("#e8f6e8", "#2e7d32")}


def _edge(x1: float, y1: float, x2: float, y2: float, w: float, h: float) -> tuple[float, float]:
    """Where the line from box centre (x1, y1) towards (x2, y2) leaves the box."""
    dx, dy = x2 - x1, y2 - y1
    pad = 0.08
    t = min((w / 2 + pad) / abs(dx) if dx else float("inf"), (h / 2 + pad) / abs(dy) if dy else float("inf"))
    return x1 + dx * t, y1 + dy * t


def draw(name: str, title: str, boxes: dict[str, tuple[float, float, str, str]],
         arrows: list[tuple[str, str, str]], size=(8, 4.2)) -> Path:
    """boxes: id -> (x, y, kind, label); arrows: (from, to, label). Coordinates in a 0..10 x 0..5 grid."""
    fig, ax = plt.subplots(figsize=size)
    ax.set_xlim(0, max(10.0, max(b[0] for b in boxes.values()) + 1.3))
    ax.set_ylim(0, 5)
    ax.axis("off")
    ax.set_title(title, fontsize=12, fontweight="bold")
    w, h = 2.3, 0.85
    for x, y, kind, label in boxes.values():
        face, edge = COLORS[kind]
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05",
                                    facecolor=face, edgecolor=edge, linewidth=1.5))
        ax.text(x, y, label, ha="center", va="center", fontsize=7.8)
    for a, b, label in arrows:
        (x1, y1, *_), (x2, y2, *_) = boxes[a], boxes[b]
        start, end = _edge(x1, y1, x2, y2, w, h), _edge(x2, y2, x1, y1, w, h)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12,
                                     shrinkA=2, shrinkB=2, color="#333333", linewidth=1.1))
        if label:
            ax.text((x1 + x2) / 2, (y1 + y2) / 2 + 0.18, label, ha="center", fontsize=7.5, color="#333333",
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLORS[k][0], edgecolor=COLORS[k][1]) for k in COLORS]
    ax.legend(handles, ["Redis", "memorykit", "model", "user"], loc="lower center", ncol=4, fontsize=7.5,
              frameon=False, bbox_to_anchor=(0.5, -0.06))
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main() -> list[Path]:
    paths = [
        draw("short_term", "Short-term memory: the thread is a list, the summary is a view", {
            "user": (1.3, 4.0, "user", "user / assistant\nmessages"),
            "list": (4.6, 4.0, "redis", "LIST ns:thread:{u}:t\n(RPUSH, TTL, complete)"),
            "sum": (4.6, 1.6, "redis", "JSON …:summary\ntext + cursor"),
            "policy": (7.9, 4.0, "code", "ByCount / ByTokens\npolicy"),
            "model": (7.9, 1.6, "model", "summarize task"),
            "prompt": (1.3, 1.6, "code", "prompt_messages():\nsummary + after cursor"),
        }, [("user", "list", "append"), ("list", "policy", "too long?"), ("policy", "model", "fold old"),
            ("model", "sum", "write atomically"), ("sum", "prompt", ""), ("list", "prompt", "after cursor")]),
        draw("long_term", "Long-term memory: extract, deduplicate, index, retrieve", {
            "chat": (1.3, 4.0, "user", "conversation"),
            "extract": (4.6, 4.0, "model", "extract_memories\ntask"),
            "dedup": (7.9, 4.0, "code", "dedup cascade:\nhash → vector → decide"),
            "json": (7.9, 1.6, "redis", "JSON ns:memory:{ulid}\n+ HNSW index"),
            "search": (4.6, 1.6, "code", "search: KNN / text /\nhybrid, user-scoped"),
            "prompt": (1.3, 1.6, "model", "prompt context\nor search_memory tool"),
        }, [("chat", "extract", "messages"), ("extract", "dedup", "candidates"),
            ("dedup", "json", "add / update / no-op"), ("json", "search", "FT.SEARCH"),
            ("search", "prompt", "hits")]),
        draw("procedural", "Procedural memory: keep what worked", {
            "query": (1.3, 4.0, "user", "query"),
            "route": (4.6, 4.0, "code", "suggest (vector)\n+ router"),
            "agent": (7.9, 4.0, "model", "plan_tools task\n(tool loop)"),
            "eval": (7.9, 1.6, "code", "evaluate: score,\nsteps, time"),
            "store": (4.6, 1.6, "redis", "JSON ns:procedure:*\n(score ≥ 0.7)"),
            "fb": (1.3, 1.6, "redis", "feedback examples\n(thumbs up / down)"),
        }, [("query", "route", ""), ("route", "agent", "suggested tools"), ("agent", "eval", "run"),
            ("eval", "store", "keep if good"), ("store", "route", "KNN"), ("fb", "route", "examples")]),
        draw("working", "Working memory: a scratchpad the agent edits", {
            "msg": (1.3, 4.0, "user", "new message"),
            "task": (4.6, 4.0, "model", "update_working_memory\ntask or tools"),
            "check": (7.9, 4.0, "code", "validate: template /\nschema, size limit"),
            "key": (7.9, 1.6, "redis", "ns:working:{u}\n+ edit history"),
            "block": (4.6, 1.6, "code", "prompt block"),
            "model": (1.3, 1.6, "model", "every reply"),
        }, [("msg", "task", ""), ("task", "check", "edit"), ("check", "key", "MULTI/EXEC"),
            ("key", "block", "GET"), ("block", "model", "system prompt")]),
        draw("agent", "The memory agent: one turn", {
            "in": (1.3, 4.2, "user", "user message"),
            "save": (4.0, 4.2, "redis", "save + load thread"),
            "retrieve": (6.7, 4.2, "code", "retrieve: memories,\nworking, recall"),
            "reply": (9.4, 4.2, "model", "reply task\n(+ tool loop)"),
            "store": (9.4, 2.2, "redis", "save reply"),
            "out": (6.2, 2.2, "user", "reply shown"),
            "bg": (4.6, 0.8, "code", "background: index, extract,\nremember, working, summarize"),
        }, [("in", "save", ""), ("save", "retrieve", ""), ("retrieve", "reply", "prompt"),
            ("reply", "store", ""), ("store", "out", ""), ("store", "bg", "after the reply")], size=(9.6, 4.4)),
    ]
    return paths


if __name__ == "__main__":
    for p in main():
        print(p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p)
