"""Fixtures: the real Redis, the real model, a unique namespace per test (cleaned after)."""
import uuid

import pytest

import memorykit as mk


@pytest.fixture(scope="session")
def r():
    return mk.connect()


@pytest.fixture(scope="session")
def emb(r):
    return mk.get_embedder(r)


@pytest.fixture
def llm():
    return mk.get_llm("offline")


def drop_namespace(client, namespace: str) -> None:
    for index in client.execute_command("FT._LIST"):
        name = index.decode() if isinstance(index, bytes) else index
        if name.startswith(f"{namespace}_"):
            client.execute_command("FT.DROPINDEX", name)
    keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def ns(r):
    """A namespace no other test uses; every key and index under it is removed afterwards."""
    namespace = "t" + uuid.uuid4().hex[:10]
    yield namespace
    drop_namespace(r, namespace)
