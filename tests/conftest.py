from __future__ import annotations

import importlib.metadata
import itertools
import os

import pytest

from tests.factories import all_factories


def our_entry_points() -> list[importlib.metadata.EntryPoint]:
    eps = importlib.metadata.entry_points(group="opm.agents.memory")
    return sorted((ep for ep in eps if ep.dist and ep.dist.name == "ovos-memory-plugins"), key=lambda e: e.name)


@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory, monkeypatch):
    """Default paths point into a temporary folder: tests never touch the user's memory."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    yield home


@pytest.fixture
def closing():
    """``closing(memory)`` returns ``memory`` and closes it when the test ends."""
    made = []

    def track(memory):
        made.append(memory)
        return memory

    yield track
    for memory in made:
        memory.close()


@pytest.fixture
def factories():
    return all_factories()


_counter = itertools.count()


@pytest.fixture
def make_memory(tmp_path):
    """``make_memory(entry_point, **overrides)``: a fresh memory for that backend, in tmp_path."""
    built = []
    table = all_factories()

    def make(name, overrides=None):
        folder = tmp_path / f"m{next(_counter)}"
        folder.mkdir()
        memory = table[name](folder, dict(overrides or {}))
        built.append(memory)
        return memory

    yield make
    for memory in built:
        if hasattr(memory, "close"):
            memory.close()


def pytest_collection_modifyitems(config, items):
    """Real-model tests (marker ``llm``) run only when ``OVOS_MEMORY_TEST_LLM_URL`` names a model.

    They are deselected, not skipped: without a model they have nothing to check, and a
    skip would read as a feature that is missing.
    """
    if os.environ.get("OVOS_MEMORY_TEST_LLM_URL"):
        return
    # The marker, not the keyword: keywords include the names of the folders above a test, so a
    # checkout in a folder called "llm" would lose every test.
    dropped = [item for item in items if item.get_closest_marker("llm")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("llm")]


@pytest.fixture
def real_llm_url():
    """The real local model's base URL (see docs/backends/longterm.md to start one)."""
    return os.environ["OVOS_MEMORY_TEST_LLM_URL"].rstrip("/")
