"""A JSON store damaged on disk is quarantined with a clear error, and the backend keeps working."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests._timing import patience
from tests.reliability._harness import exchange, make_memory, marker, recording_logs, spec_for, store_cases, views
from tests.reliability._report import record

#: (entry point, overrides) of every backend configuration that keeps a JSON file.
JSON_STORES = [
    ("ovos-memory-plugin-longterm", {"summarize_every": 1000}),
    ("ovos-memory-plugin-entity", {"max_facts": 0}),
    ("ovos-memory-plugin-recency", {"db_path": "recency.json", "max_history": 0}),
    ("ovos-memory-plugin-short-term", {"db_path": "short_term.json", "max_history": 0}),
]

DAMAGES = {
    "truncated mid-way": lambda data: data[: len(data) // 2],
    "garbage bytes": lambda data: bytes(range(256)) * 4,
    "empty file": lambda data: b"",
    "not an object": lambda data: b"[1, 2, 3]",
    "invalid UTF-8": lambda data: data[:10] + b"\xff\xfe\xfa" + data[10:],
}


def _config(folder: Path, overrides: dict) -> dict:
    config = dict(overrides)
    if "db_path" in config:
        config["db_path"] = str(folder / config["db_path"])
    return config


def _markers(memory, sid: str) -> set[str]:
    if hasattr(memory, "flush"):
        memory.flush(patience(30))
    return {m for counts in views(memory.export(sid)).values() for m in counts}


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize(("entry_point", "overrides"), JSON_STORES, ids=[ep for ep, _ in JSON_STORES])
def test_a_damaged_json_store_is_quarantined_and_the_backend_keeps_working(entry_point, overrides, damage, tmp_path,
                                                                           monkeypatch):
    folder = tmp_path / "store"
    folder.mkdir()
    config = _config(folder, overrides)
    with make_memory(entry_point, folder, config) as memory:
        memory.update_history(exchange("old", 1), "s")
        assert marker("old", 1) in _markers(memory, "s")
    [store] = [p for p in folder.glob("*.json")]
    original = store.read_bytes()
    store.write_bytes(DAMAGES[damage](original))
    damaged = store.read_bytes()

    with recording_logs(monkeypatch) as logs, make_memory(entry_point, folder, config) as memory:
        memory.build_conversation_context("hello?", "s")
        memory.update_history(exchange("new", 1), "s")
        found = _markers(memory, "s")
    quarantined = sorted(folder.glob(f"{store.name}.corrupt*"))
    assert len(quarantined) == 1, f"expected one quarantined copy, found {quarantined}"
    assert quarantined[0].read_bytes() == damaged, "the quarantined copy is not the damaged file"
    corrupt_errors = [e for e in logs.errors if "corrupt" in e and str(quarantined[0]) in e]
    assert len(corrupt_errors) == 1, f"expected one clear ERROR naming the quarantine file, got {logs.errors}"
    assert marker("new", 1) in found, "the backend stopped working after the quarantine"
    with make_memory(entry_point, folder, config) as memory:  # and the new file is sound
        assert marker("new", 1) in _markers(memory, "s")
    record("corruption", f"{entry_point} ({store.name})",
           **{"damages": 1, "quarantined": 1, "errors logged": len(corrupt_errors), "keeps working": True})


#: Every store configuration that keeps a SQLite file (the JSON ones are above; Redis has neither).
SQLITE_STORES = [(name, ep, variant) for name, ep, variant in store_cases()
                 if variant.get("backend") == "sqlite"
                 or (not variant and ep not in ("ovos-memory-plugin-longterm", "ovos-memory-plugin-entity",
                                                "ovos-memory-plugin-redis"))]

SQLITE_DAMAGES = {
    "garbage header": lambda data: bytes(range(100)) + data[100:],
    "schema page overwritten": lambda data: data[:100] + b"\xde\xad\xbe\xef" * 999 + data[4096:],
    "truncated mid-way": lambda data: data[: len(data) // 2],
}


@pytest.mark.parametrize("damage", list(SQLITE_DAMAGES))
@pytest.mark.parametrize(("name", "entry_point", "variant"), SQLITE_STORES, ids=[c[0] for c in SQLITE_STORES])
def test_a_damaged_sqlite_store_never_breaks_a_turn(name, entry_point, variant, damage, tmp_path, monkeypatch):
    folder = tmp_path / "store"
    config = {**spec_for(entry_point).keep_all, **variant}
    with make_memory(entry_point, folder, config) as memory:
        for n in range(30):  # a few pages
            memory.update_history(exchange("old", n), "s")
        memory.flush(patience(30))
    [store] = [p for p in folder.glob("*.db")]
    for journal in folder.glob("*.db-*"):
        journal.unlink()
    store.write_bytes(SQLITE_DAMAGES[damage](store.read_bytes()))

    with recording_logs(monkeypatch) as logs, make_memory(entry_point, folder, config) as memory:
        answered = 0
        for n in range(3):
            context = memory.build_conversation_context("hello?", "s")
            answered += context[-1].content == "hello?"
            memory.update_history(exchange("new", n), "s")
        found = _markers(memory, "s")
    quarantined = sorted(p for p in folder.glob(f"{store.name}.corrupt*") if not p.name.endswith(("-wal", "-shm")))
    assert answered == 3
    assert len(quarantined) <= 1
    if quarantined:  # a damaged schema: moved aside, one ERROR, a fresh store that works
        assert len([e for e in logs.errors if "corrupt" in e and str(quarantined[0]) in e]) == 1, logs.errors
        assert {marker("new", n) for n in range(3)} <= found, "the fresh store does not work"
    else:  # damage further in: the store opens, failing operations are logged, not repeated per turn
        assert len(logs.errors) <= 3, f"errors repeated per turn: {logs.errors}"
    record("corruption", f"{name} ({store.name}, {damage})", **{
        "damages": 1, "quarantined": len(quarantined), "errors logged": len(logs.errors),
        "keeps working": {marker("new", n) for n in range(3)} <= found})
