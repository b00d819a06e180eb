"""Shared pytest setup for the unit tests and the nbval notebook runs.

One embedded Redis for the whole session (its URL exported so notebook kernels use it
too), the offline stand-in's models fitted once before any test, the offline LLM forced so every
run is deterministic, and a persistent numba
cache so UMAP compiles once per machine, not once per kernel.
"""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent
os.environ["MEMORYKIT_LLM"] = "offline"
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".memorykit" / "numba_cache"))
os.environ.setdefault("MPLBACKEND", "Agg")
for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
    os.environ.setdefault(var, "1")


def pytest_configure(config):
    import memorykit as mk

    os.environ["REDIS_URL"] = mk.redis_url()


def pytest_sessionstart(session):
    """Fit the offline stand-in's disk-cached models before any test runs. On a fresh checkout the
    first fit embeds every training text (about 130 s on two idle cores, more under load), which must
    count against no single test's time limit; afterwards every process loads them in a second."""
    from memorykit.offline import decide_model, feedback_model, summarize, working_change, working_models

    working_models.models(), working_change.change_model(), decide_model.model(), summarize.content_model()
    feedback_model.feedback_model()


SUITES = {"browser": "browser", "faults": "faults", "load": "load", "real_llm": "real_llm"}


def pytest_collection_modifyitems(config, items):
    """Tests in tests/<suite>/ carry that suite's marker, so `make test` can leave them to CI."""
    import pytest

    for item in items:
        parts = item.path.parts
        for folder, marker in SUITES.items():
            if "tests" in parts and folder in parts:
                item.add_marker(getattr(pytest.mark, marker))
