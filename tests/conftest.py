from __future__ import annotations

import importlib.metadata
import itertools
import os
from pathlib import Path

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


@pytest.fixture(autouse=True)
def _postgres_connections_closed(request):
    """Every PostgreSQL database a test opens has an owner that closes it by the test's end: a handle
    left open keeps its connections until the interpreter exits (psycopg's ResourceWarning)."""
    import sys

    postgres = sys.modules.get("ovos_memory_plugins.storage.postgres")
    before = {id(db) for db in postgres._shared.values()} if postgres else set()
    yield
    postgres = sys.modules.get("ovos_memory_plugins.storage.postgres")
    left = [db.path for db in postgres._shared.values() if id(db) not in before] if postgres else []
    assert not left, f"{request.node.nodeid} left PostgreSQL databases open (never released): {left}"


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


REDIS_ENTRY_POINT = "ovos-memory-plugin-redis"
RELIABILITY = Path(__file__).resolve().parent / "reliability"


def pytest_collection_modifyitems(config, items):
    """Real-model tests (marker ``llm``) run only when ``OVOS_MEMORY_TEST_LLM_URL`` names a model,
    and PostgreSQL tests (marker ``postgres``) only when ``OVOS_MEMORY_POSTGRES_URL`` names a server.

    The disk-full tests (marker ``tmpfs``) run where a small tmpfs can be mounted; where the kernel
    refuses, they are deselected and the summary says why.

    They are deselected, not skipped: without a model or a server they have nothing to check,
    and a skip would read as a feature that is missing. CI (scripts/test) sets
    ``OVOS_MEMORY_REQUIRE_POSTGRES``: there a missing server is an error, never a quiet deselection.

    Markers follow what a case needs, so ``make test-fast`` can leave it out: a case run on the
    Redis backend needs a redis-server (``redis``), and the reliability suite is ``heavy``.
    """
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        # reliability cases on PostgreSQL (tests/reliability/_harness.py: POSTGRES)
        if any(isinstance(v, dict) and v.get("db_url") == "{postgres}" for v in params.values()):
            item.add_marker(pytest.mark.postgres)
        # a case, on the Redis backend, of a test run on every backend
        if any(isinstance(v, str) and v == REDIS_ENTRY_POINT for v in params.values()):
            item.add_marker(pytest.mark.redis)
        if RELIABILITY in item.path.parents:  # minutes of crashes, races and sweeps: not the fast lane
            item.add_marker(pytest.mark.heavy)
    missing = []
    if not os.environ.get("OVOS_MEMORY_TEST_LLM_URL"):
        missing.append("llm")
    if not os.environ.get("OVOS_MEMORY_POSTGRES_URL"):
        if os.environ.get("OVOS_MEMORY_REQUIRE_POSTGRES"):
            raise pytest.UsageError("OVOS_MEMORY_REQUIRE_POSTGRES is set but OVOS_MEMORY_POSTGRES_URL is not: "
                                    "start the servers (scripts/with-servers)")
        missing.append("postgres")
    if any(item.get_closest_marker("tmpfs") for item in items):
        refused = tmpfs_refused()
        if refused:
            missing.append("tmpfs")
            config.stash[_TMPFS_REFUSED] = refused
    dropped = [item for item in items if any(item.get_closest_marker(marker) for marker in missing)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]


_TMPFS_REFUSED = pytest.StashKey[str]()


def tmpfs_refused() -> str | None:
    """Why a small tmpfs cannot be mounted here (None: it can). The disk-full tests need a real
    file system that fills up; mounting one needs root (or CAP_SYS_ADMIN) and a kernel that allows it."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ovos-tmpfs-probe-") as folder:
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"mount -t tmpfs could not run: {exc}"
        if done.returncode:
            return f"mount -t tmpfs was refused: {(done.stderr or done.stdout).strip() or done.returncode}"
        subprocess.run(["umount", folder], capture_output=True, timeout=30)
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    refused = config.stash.get(_TMPFS_REFUSED, None)
    if refused:
        terminalreporter.write_line(f"deselected the disk-full tests (marker tmpfs): {refused}", yellow=True)


@pytest.fixture
def real_llm_url():
    """The real local model's base URL (see docs/backends/longterm.md to start one)."""
    return os.environ["OVOS_MEMORY_TEST_LLM_URL"].rstrip("/")
