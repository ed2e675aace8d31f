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
    # Bytes a store never wrote after its opening brace (binary from the first byte is someone
    # else's file, a picture or an archive, and is refused rather than moved aside).
    "garbage bytes": lambda data: data[:1] + bytes(range(256)) * 4,
    "empty file": lambda data: b"",
    "invalid UTF-8": lambda data: data[:10] + b"\xff\xfe\xfa" + data[10:],
    "nested 100,000 deep": lambda data: b'{"s": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


def _config(folder: Path, overrides: dict) -> dict:
    config = dict(overrides)
    if "db_path" in config and not config["db_path"].startswith("{folder}"):  # make_memory places those
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


# -- damage further in than the header ---------------------------------------------------------
def _pages(path: Path) -> list[tuple[str, int]]:
    """``(table, page number)`` of every page of the file's plain tables (not the keyword or vector index)."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name, pageno FROM dbstat WHERE pagetype IN ('leaf', 'overflow') "
                           "AND name NOT LIKE 'sqlite_%' ORDER BY pageno").fetchall()
    finally:
        con.close()
    return [(name, page) for name, page in rows if not any(s in name for s in ("_data", "_idx", "_vec", "vocab"))]


def _overwrite_page(path: Path, page: int) -> None:
    size = 4096
    data = bytearray(path.read_bytes())
    data[(page - 1) * size: page * size] = bytes((i * 7 + 3) % 256 for i in range(size))
    path.write_bytes(bytes(data))


def _read_everything(memory) -> None:
    """What a turn, an export and a search read: meets a damaged page wherever the data is."""
    memory.build_conversation_context("hello?", "s")
    memory.export("s")
    if hasattr(memory, "search"):
        memory.search("zqold", "s")


@pytest.mark.parametrize("when", ["at open", "at run time"])
@pytest.mark.parametrize(("name", "entry_point", "variant"), SQLITE_STORES, ids=[c[0] for c in SQLITE_STORES])
def test_a_damaged_page_in_the_middle_is_set_aside_and_no_later_update_is_lost(name, entry_point, variant, when,
                                                                               tmp_path, monkeypatch):
    import ovos_memory_plugins.storage.sqlite as sqlite_store

    folder = tmp_path / "store"
    config = {**spec_for(entry_point).keep_all, **variant}
    with make_memory(entry_point, folder, config) as memory:
        for n in range(300):  # many pages
            memory.update_history(exchange("old", n), "s")
        memory.flush(patience(30))
    [store] = [p for p in folder.glob("*.db")]
    pages = _pages(store)
    table_of = dict((page, table) for table, page in pages)
    biggest = max(set(table_of.values()), key=lambda t: sum(1 for v in table_of.values() if v == t))
    ours = [page for page, table in table_of.items() if table == biggest]
    _overwrite_page(store, ours[len(ours) // 2])
    if when == "at run time":  # as if the page went bad after the check at open
        monkeypatch.setattr(sqlite_store, "quick_check", lambda con: None)

    with recording_logs(monkeypatch) as logs, make_memory(entry_point, folder, config) as memory:
        _read_everything(memory)
        answered = 0
        for n in range(3):
            answered += memory.build_conversation_context("hello?", "s")[-1].content == "hello?"
            memory.update_history(exchange("new", n), "s")
        found = _markers(memory, "s")
    monkeypatch.undo()
    with make_memory(entry_point, folder, config) as memory:  # and after a restart, with the check at open
        after_restart = _markers(memory, "s")
    quarantined = sorted(p for p in folder.glob(f"{store.name}.corrupt*") if not p.name.endswith(("-wal", "-shm")))
    new = {marker("new", n) for n in range(3)}
    lost = len(new - found) + len(new - after_restart)
    assert answered == 3
    assert len(quarantined) == 1, f"the damaged file was not set aside: {sorted(p.name for p in folder.iterdir())}"
    damaged_errors = [e for e in logs.errors if "damaged" in e and str(quarantined[0]) in e]
    assert len(damaged_errors) == 1, f"expected one loud ERROR naming the file set aside, got {logs.errors}"
    assert not lost, f"updates acknowledged after the damage are missing: {sorted(new - found)}, " \
                     f"after a restart {sorted(new - after_restart)}"
    record("corruption", f"{name} ({store.name}, a page in the middle, found {when})", **{
        "damages": 1, "quarantined": len(quarantined), "errors logged": len(logs.errors), "keeps working": True,
        "updates after the damage": 3, "updates lost": lost})


#: Every store that keeps text in a file: SQLite and JSON alike.
TEXT_STORES = SQLITE_STORES + [(f"{ep} ({Path(o.get('db_path', ep.split('-')[-1] + '.json')).name})", ep, o)
                               for ep, o in JSON_STORES]


@pytest.mark.parametrize(("name", "entry_point", "variant"), TEXT_STORES, ids=[c[0] for c in TEXT_STORES])
def test_three_flipped_bytes_of_text_cost_those_bytes_only(name, entry_point, variant, tmp_path, monkeypatch):
    folder = tmp_path / "store"
    folder.mkdir()
    config = {**spec_for(entry_point).keep_all, **_config(folder, variant)}
    with make_memory(entry_point, folder, config) as memory:
        for n in range(30):
            memory.update_history(exchange("old", n), "s")
        memory.flush(patience(30))
    [store] = [p for p in folder.iterdir() if p.suffix in (".db", ".json")]
    for journal in folder.glob("*.db-*"):
        journal.unlink()
    data = bytearray(store.read_bytes())
    at = data.find(marker("old", 15).encode())
    assert at >= 0, "the marker is not stored as plain text: the test cannot damage it"
    for offset in (2, 4, 6):  # 'q', 'l', 'n': each becomes a byte that is not UTF-8
        data[at + offset] ^= 0xFF
    store.write_bytes(bytes(data))

    with recording_logs(monkeypatch) as logs, make_memory(entry_point, folder, config) as memory:
        history = memory.get_history("s")
        memory.update_history(exchange("new", 1), "s")
        found = _markers(memory, "s")
    kept = {marker("old", n) for n in range(30) if n != 15} | {marker("new", 1)}
    readable = kept <= found
    assert readable, f"the session lost more than the damaged bytes: missing {sorted(kept - found)[:5]}; " \
                     f"errors {logs.errors}"
    assert not list(folder.glob("*.corrupt*")), "three flipped bytes of text cost the whole store"
    assert entry_point.endswith(("entity", "longterm")) or history, "the window could not be read"
    record("corruption", f"{name} (three flipped bytes of text)", **{
        "damages": 1, "quarantined": 0, "errors logged": len(logs.errors), "keeps working": readable,
        "updates after the damage": 1, "updates lost": int(marker("new", 1) not in found)})


RECORD_STORES = [("ovos-memory-plugin-entity", {"max_facts": 0}), ("ovos-memory-plugin-longterm", {}),
                 ("ovos-memory-plugin-entity", {"max_facts": 0, "backend": "sqlite", "db_path": "entity.db"}),
                 ("ovos-memory-plugin-longterm", {"backend": "sqlite", "db_path": "longterm.db"}),
                 ("ovos-memory-plugin-recency", {"db_path": "recency.json", "max_history": 0})]


def _plant_bad_record(folder: Path) -> None:
    """Another session's record becomes a string, as a hand edit might leave it."""
    import json
    import sqlite3

    [store] = [p for p in folder.iterdir() if p.suffix in (".db", ".json")]
    if store.suffix == ".json":
        data = json.loads(store.read_text())
        data["old"] = "a string"
        store.write_text(json.dumps(data))
        return
    con = sqlite3.connect(store)
    try:
        table = "sessions" if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone() \
            else "entity_facts"
        if table == "sessions":
            con.execute("INSERT INTO sessions (session_id, summary, recent, exchange_count, updated_at) "
                        "VALUES ('old', 'x', '\"a string\"', 'many', 0)")
        else:
            con.execute("INSERT INTO entity_facts (session_id, data, updated_at) VALUES ('old', '\"a string\"', 0)")
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize(("entry_point", "overrides"), RECORD_STORES,
                         ids=[f"{ep} ({o.get('backend', 'json')})" for ep, o in RECORD_STORES])
def test_one_malformed_record_never_blocks_the_other_sessions(entry_point, overrides, tmp_path, monkeypatch):
    folder = tmp_path / "store"
    folder.mkdir()
    config = {**spec_for(entry_point).keep_all, **_config(folder, overrides)}
    with make_memory(entry_point, folder, config) as memory:
        memory.update_history(exchange("a", 1), "s")
        memory.flush(patience(30))
    _plant_bad_record(folder)
    with recording_logs(monkeypatch) as logs, make_memory(entry_point, folder, config) as memory:
        for n in range(3):
            memory.update_history(exchange("b", n), "s")
            memory.update_history(exchange("c", n), "t")
        settled = memory.flush(patience(30))
        found = _markers(memory, "s") | _markers(memory, "t")
        listed = memory.sessions()
        memory.export("old")  # the bad one itself: reported, not raised
    expected = {marker("a", 1)} | {marker(t, n) for t in "bc" for n in range(3)}
    assert settled, "background work never settles: the bad record blocks it"
    assert expected <= found, f"updates of other sessions lost: {sorted(expected - found)}"
    assert "s" in listed and "t" in listed
    assert any("'old'" in e for e in logs.errors), f"the malformed record was not reported: {logs.errors}"
    store_name = next(p.name for p in folder.iterdir() if p.suffix in (".db", ".json"))
    record("corruption", f"{entry_point} ({store_name}, one malformed record of another session)", **{
        "damages": 1, "quarantined": 0, "errors logged": len(logs.errors), "keeps working": True,
        "updates after the damage": 6, "updates lost": len(expected - found)})
