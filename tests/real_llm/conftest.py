"""The real-model suite: a local llama.cpp server with SmolLM2-135M (``make setup-llm``).

Every test here is marked ``real_llm`` (see the root conftest). Without llama-cpp-python or
the model the whole folder is skipped with the reason; ``.ci/run`` installs both and sets
``MEMORYKIT_REQUIRE_LOCAL_LLM=1``, which turns that skip into a failure, so CI always runs it.
"""
from __future__ import annotations

import os

import pytest

from .llm_samples import library_tasks
from memorykit.course import local_model as local_llm


@pytest.fixture(scope="session")
def local_server():
    why = local_llm.available()
    if why:
        if os.environ.get("MEMORYKIT_REQUIRE_LOCAL_LLM"):
            pytest.fail(f"MEMORYKIT_REQUIRE_LOCAL_LLM is set but the local model cannot run: {why}")
        pytest.skip(f"no local model: {why}")
    return local_llm.start()


@pytest.fixture
def local(local_server):
    """A client for the shared local server (one deadline for every call: MEMORYKIT_LLM_TIMEOUT)."""
    return local_llm.local_chat()


def pytest_generate_tests(metafunc):
    if "library_task" in metafunc.fixturenames:
        tasks = library_tasks()
        metafunc.parametrize("library_task", list(tasks.values()), ids=list(tasks))
