"""Durable stores: atomic transactions, migrations, restarts, corrupt files, several processes."""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import sqlite3
import stat
import time
from pathlib import Path

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins._core.paths import SQLITE_HEADER
from ovos_memory_plugins.errors import ConfigError, StorageError
from ovos_memory_plugins.storage import WindowPolicy, backend_for, open_record_store, open_window_store
from ovos_memory_plugins.storage.jsonfile import JsonRecordStore, MemoryJsonStore
from ovos_memory_plugins.storage.sqlite import Database
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
KEEP_ALL = WindowPolicy()


def test_backend_is_chosen_from_the_path_unless_named():
    assert backend_for(None) == backend_for(":memory:") == "memory"
    assert backend_for("/x/m.json") == "json" and backend_for("/x/m.db") == "sqlite"
    assert backend_for("/x/m.db", "json") == "json"


def test_an_existing_file_is_opened_by_its_content_not_its_name(tmp_path):
    sqlite_file, json_file = tmp_path / "memory.json", tmp_path / "memory.db"
    sqlite3.connect(str(sqlite_file)).execute("CREATE TABLE t (x)").connection.close()
    json_file.write_text('  \n {"s": {}}')
    assert backend_for(str(sqlite_file)) == "sqlite" and backend_for(str(json_file)) == "json"
    assert backend_for(str(json_file), "sqlite") == "sqlite"  # a named backend still wins
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "junk.db").write_bytes(b"\x00garbage")
    assert backend_for(str(tmp_path / "empty.json")) == "json"  # nothing to read: the name decides
    assert backend_for(str(tmp_path / "junk.db")) == "sqlite"
    assert backend_for(str(tmp_path / "new_file")) == "sqlite"


def test_a_json_file_of_another_memory_kind_is_refused_and_left_as_it_is(tmp_path):
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.longterm import LongTermMemory
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "memory.json"
    with EntityMemory({"db_path": str(path), "api_url": None}) as entity:
        entity.update_history([AgentMessage(MessageRole.USER, "my name is Ana"),
                               AgentMessage(MessageRole.ASSISTANT, "hi")], "kitchen")
        assert entity.flush(10)
    before = path.read_bytes()
    for other in (lambda: RecencyMemory({"db_path": str(path)}),
                  lambda: LongTermMemory({"db_path": str(path), "api_url": None})):
        with pytest.raises(ConfigError, match="holds another memory's facts .*name a file of its own"):
            other()  # its forget would have deleted the facts, its window read them as damaged
    assert path.read_bytes() == before
    with EntityMemory({"db_path": str(path), "api_url": None}) as entity:
        assert entity.facts("kitchen") == ["User's name is Ana"]


def test_a_json_file_of_another_memory_is_refused_before_a_lock_file_is_made_beside_it(tmp_path):
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"s": {"facts": ["User likes tea"], "meta": {}}}))
    with pytest.raises(ConfigError, match="holds another memory's facts"):
        RecencyMemory({"db_path": str(path)})
    assert sorted(os.listdir(tmp_path)) == ["facts.json"]


REFERENCE_RECENCY = {"s1": {"buffer": [{"ts": 1e10, "role": "user", "content": "hi"},
                                       {"ts": 1e10, "role": "assistant", "content": "hello"}]},
                     "s2": {"buffer": [{"ts": 1e10, "role": "user", "content": "bye"}]}}


@pytest.mark.parametrize("name", ["recency_memory", "recency.db"])
def test_a_reference_recency_json_file_loads_unchanged_at_any_path(tmp_path, name):
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / name
    path.write_text(json.dumps(REFERENCE_RECENCY))
    memory = RecencyMemory({"db_path": str(path)})
    assert memory.sessions() == ["s1", "s2"]
    assert [m.content for m in memory.get_history("s1")] == ["hi", "hello"]
    memory.update_history([AgentMessage(A, "again")], "s2")
    memory.close()
    assert sorted(os.listdir(tmp_path)) == [name, f"{name}.lock"]  # nothing quarantined, no SQLite beside it
    saved = json.loads(path.read_text())
    assert saved["s1"] == REFERENCE_RECENCY["s1"]
    assert [e["content"] for e in saved["s2"]["buffer"]] == ["bye", "again"]


def test_atomic_rolls_back_everything_on_error(tmp_path):
    db = Database(str(tmp_path / "a.db"))
    db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
    with pytest.raises(RuntimeError), db.atomic() as con:
        con.execute("INSERT INTO t VALUES (1)")
        raise RuntimeError("boom")
    assert db.execute("SELECT COUNT(*) FROM t")[0][0] == 0


def test_nested_atomic_blocks_are_savepoints(tmp_path):
    db = Database(str(tmp_path / "a.db"))
    db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
    with db.atomic() as con:
        con.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(ValueError), db.atomic() as inner:
            inner.execute("INSERT INTO t VALUES (2)")
            raise ValueError
    assert db.execute("SELECT x FROM t") == [(1,)]


def test_migrations_apply_once_and_in_order(tmp_path):
    path = str(tmp_path / "m.db")
    steps = ["CREATE TABLE t (x INTEGER)", "ALTER TABLE t ADD COLUMN y TEXT"]
    Database(path).migrate("c", steps[:1])
    db = Database(path)
    db.migrate("c", steps)
    db.migrate("c", steps)
    assert [r[1] for r in db.execute("PRAGMA table_info(t)")] == ["x", "y"]
    assert db.execute("SELECT version FROM ovos_memory_migrations WHERE component = 'c'") == [(1,), (2,)]


def test_sqlite_errors_become_storage_errors(tmp_path):
    db = Database(str(tmp_path / "e.db"))
    with pytest.raises(StorageError):
        db.execute("SELECT * FROM missing_table")


@pytest.mark.parametrize("name", ["w.db", "w.json"])
def test_a_window_survives_a_restart_with_tool_fields(tmp_path, name):
    from ovos_memory_plugins._core.compat import HAS_TOOLS, make_message

    path = str(tmp_path / name)
    store = open_window_store(path)
    msgs = [AgentMessage(U, "q")]
    if HAS_TOOLS:
        from ovos_plugin_manager.templates.agents import ToolCall

        msgs.append(make_message(A, "", tool_calls=[ToolCall(id="t1", name="lookup", arguments={"k": 1})]))
        msgs.append(make_message(MessageRole.TOOL, "42", tool_call_id="t1", name="lookup"))
    msgs.append(AgentMessage(A, "the answer"))
    store.append("s", msgs, KEEP_ALL)
    store.close()
    again = open_window_store(path).load("s", KEEP_ALL)
    assert [m.content for m in again] == [m.content for m in msgs]
    if HAS_TOOLS:
        assert again[1].tool_calls[0].arguments == {"k": 1} and again[2].tool_call_id == "t1"


def test_reference_json_files_load_unchanged(tmp_path):
    path = tmp_path / "recency.json"
    path.write_text(json.dumps({"s": {"buffer": [{"ts": 1e10, "role": "user", "content": "hi"},
                                                 {"ts": 1e10, "role": "assistant", "content": "hello"}]}}))
    assert [m.content for m in open_window_store(str(path)).load("s", KEEP_ALL)] == ["hi", "hello"]


def test_a_corrupt_json_file_is_quarantined_not_overwritten(tmp_path):
    path = tmp_path / "store.json"
    path.write_text('{"s": {"facts": ["half a reco')
    store = JsonRecordStore(str(path))
    assert store.load("s") == {}
    assert (tmp_path / "store.json.corrupt").read_text() == '{"s": {"facts": ["half a reco'
    store.save("s", {"facts": ["new"]})
    assert json.loads(path.read_text()) == {"s": {"facts": ["new"]}}
    path.write_text('{"s": {"facts": ["cut again')  # damaged again: a second copy, the first one kept
    assert store.load("s") == {}
    assert (tmp_path / "store.json.corrupt").read_text() == '{"s": {"facts": ["half a reco'
    later = [p for p in os.listdir(tmp_path) if p.startswith("store.json.corrupt-")]
    assert len(later) == 1 and (tmp_path / later[0]).read_text() == '{"s": {"facts": ["cut again'
    path.write_text("[1, 2]")  # a list was never a store: someone's file, left as it is
    with pytest.raises(StorageError, match="not a memory store"):
        store.load("s")
    assert path.read_text() == "[1, 2]"


@pytest.mark.parametrize("exchanges", [1, 40])
def test_a_store_crashed_before_its_first_checkpoint_then_damaged_opens(tmp_path, exchanges):
    # Until SQLite copies its log into the main file, the file is one empty page and the schema
    # is in the -wal: with its header damaged it is still a store of ours, never "someone's file"
    # (and SQLite reads page 1 from the -wal: nothing is lost).
    import shutil

    from ovos_memory_plugins.lexical import LexicalMemory

    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    crashed.mkdir()
    memory = LexicalMemory({"db_path": str(live / "lex.db")})
    for n in range(exchanges):
        memory.update_history([AgentMessage(MessageRole.USER, f"fact {n}"), AgentMessage(MessageRole.ASSISTANT, "ok")],
                              "s")
    for name in ("lex.db", "lex.db-wal"):  # the files as a crash leaves them, before any checkpoint
        shutil.copy(live / name, crashed / name)
    memory.close()
    store = crashed / "lex.db"
    assert store.stat().st_size == 4096  # the schema is all in the -wal
    store.write_bytes(bytes(range(100)) + store.read_bytes()[100:])
    with LexicalMemory({"db_path": str(store)}) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "my zebra is Zed"),
                               AgentMessage(MessageRole.ASSISTANT, "ok")], "s")
        assert memory.search("zebra", "s")
        assert len(memory.search("fact", "s", top_k=100)) == exchanges


def test_a_corrupt_sqlite_file_is_quarantined_with_its_journal_never_over_an_earlier_one(tmp_path):
    path = tmp_path / "store.db"
    for round_ in range(2):
        path.write_bytes(SQLITE_HEADER + b"\x00this is not a database" * 100)  # its pages damaged
        (tmp_path / "store.db-wal").write_bytes(b"journal %d" % round_)
        db = Database(str(path))
        db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
        db.close()
    assert (tmp_path / "store.db.corrupt").read_bytes() == SQLITE_HEADER + b"\x00this is not a database" * 100
    assert (tmp_path / "store.db.corrupt-wal").read_bytes() == b"journal 0"
    later = [p for p in os.listdir(tmp_path) if p.startswith("store.db.corrupt-") and not p.endswith(("-wal", "-shm"))]
    assert len(later) == 1 and (tmp_path / (later[0] + "-wal")).read_bytes() == b"journal 1"


@pytest.mark.parametrize(("module", "name"), [("lexical", "store.db"), ("entity", "store.json")])
@pytest.mark.parametrize("forgotten", ["s1", "s0"])  # s0: only the damaged copy holds it
def test_a_forget_names_the_damaged_copies_it_cannot_reach_and_keeps_them(tmp_path, monkeypatch, module, name,
                                                                          forgotten):
    from ovos_memory_plugins._core import paths
    from ovos_memory_plugins._core.log import LOG
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.testing import closed_port_url

    path = tmp_path / name
    damage = (SQLITE_HEADER if name.endswith(".db") else b'{"s0": {"facts": ["') + b"\x00my secret, damaged" * 100
    path.write_bytes(damage)  # set aside at construction: it holds the old store
    memory = (LexicalMemory({"db_path": str(path)}) if module == "lexical"
              else EntityMemory({"db_path": str(path), "api_url": closed_port_url()}))
    memory.update_history([AgentMessage(role=MessageRole.USER, content="my name is Ana"),
                           AgentMessage(role=MessageRole.ASSISTANT, content="hi Ana")], "s1")
    memory.flush()
    warned: list[str] = []
    monkeypatch.setattr(LOG, "error", lambda msg, *a, **k: warned.append(str(msg)))
    monkeypatch.setattr(paths, "_set_aside_warned", {})
    with paths.set_aside_reported() as reported:  # what the web page answers with
        memory.forget(forgotten)
    copy = str(tmp_path / (name + ".corrupt"))
    assert paths.set_aside_copies(str(path)) == [copy] and reported == [copy]
    assert len(warned) == 1 and copy in warned[0] and "may still hold" in warned[0]
    assert (tmp_path / (name + ".corrupt")).read_bytes() == damage  # the user's to recover
    memory.close()


def test_set_aside_copies_are_only_this_stores_regular_files(tmp_path):
    from ovos_memory_plugins._core.paths import set_aside_copies

    for n in ("a.db.corrupt", "a.db.corrupt-wal", "a.db.corrupt-20261203-101010", "a.db.corrupted",
              "ab.db.corrupt", "a.db"):
        (tmp_path / n).write_text("x")
    (tmp_path / "a.db.corrupt-dir").mkdir()
    assert [os.path.basename(p) for p in set_aside_copies(str(tmp_path / "a.db"))] == [
        "a.db.corrupt", "a.db.corrupt-20261203-101010", "a.db.corrupt-wal"]
    assert set_aside_copies(str(tmp_path / "missing" / "b.db")) == []


def test_a_store_a_newer_version_migrated_is_refused_and_left_as_it_is(tmp_path):
    from ovos_memory_plugins.errors import MigrationError

    path = tmp_path / "store.db"
    Database(str(path)).migrate("t", ["CREATE TABLE t (x INTEGER)"])
    with sqlite3.connect(path) as con:  # a later release added a second script
        con.execute("INSERT INTO ovos_memory_migrations (component, version, applied_at) VALUES ('t', 2, 0)")
    before = path.read_bytes()
    db = Database(str(path))
    with pytest.raises(MigrationError, match=r"t in .* is at version 2, newer than this package knows \(1\)"):
        db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
    db.close()
    assert path.read_bytes() == before


def test_quarantine_takes_a_new_name_while_any_earlier_copy_holds_one(tmp_path):
    from ovos_memory_plugins._core.paths import quarantine_file

    path = str(tmp_path / "f")
    targets = []
    for n in range(3):
        (tmp_path / "f").write_bytes(SQLITE_HEADER + b"\x00%d" % n)  # damage (text would be someone's file, refused)
        targets.append(quarantine_file(path))
    assert targets[0] == path + ".corrupt" and len(set(targets)) == 3
    assert [Path(t).read_bytes()[-2:] for t in targets] == [b"\x000", b"\x001", b"\x002"] and not os.path.exists(path)


def test_json_writes_leave_no_temp_files(tmp_path):
    store = JsonRecordStore(str(tmp_path / "s.json"))
    for i in range(20):
        store.update("s", lambda r, i=i: {**r, str(i): i})
    assert sorted(os.listdir(tmp_path)) == ["s.json", "s.json.lock"]
    assert len(store.load("s")) == 20


def _crashed_write(tmp_path, name="s.json", random="k3y9qz1x"):
    """The temp file a write killed before its rename leaves: a whole copy of the store."""
    leftover = tmp_path / f"{name}.{random}.tmp"
    leftover.write_text(json.dumps({"victim": {"buffer": [{"role": "user", "content": "PIN SECRETMARK"}]}}))
    return leftover


@pytest.mark.parametrize("random", ["ovos-write-k3y9qz1x", "k3y9qz1x"], ids=["named so", "as 1.3.0 named it"])
def test_a_crashed_writes_temp_file_goes_at_the_next_open(tmp_path, random):
    leftover = _crashed_write(tmp_path, random=random)
    JsonRecordStore(str(tmp_path / "s.json"))
    assert not leftover.exists()


def test_a_users_file_named_like_a_temp_file_of_1_3_0_stays(tmp_path):
    # Taken for a crashed write by its name alone, a draft beside the store was deleted.
    notes = [json.dumps({"title": "notes", "tags": ["work"]}), json.dumps({"notes": {"monday": "gym"}}),
             json.dumps([{"buffer": 1}])]
    drafts = [tmp_path / f"s.json.draft00{i}.tmp" for i in range(len(notes) + 1)]
    drafts[0].write_text("my notes")
    for draft, text in zip(drafts[1:], notes):
        draft.write_text(text)
    for make in (JsonRecordStore, MemoryJsonStore):
        store = make(str(tmp_path / "s.json"))
        store.save("s", {"buffer": []})
        store.compact()
        assert [p.read_text() for p in drafts] == ["my notes", *notes]


def test_a_forget_removes_what_a_crashed_write_of_another_process_left(tmp_path):
    store = JsonRecordStore(str(tmp_path / "s.json"))
    store.save("victim", {"buffer": []})
    leftover = _crashed_write(tmp_path)  # another process, killed while this one kept running
    assert store.delete("victim")
    assert not leftover.exists()
    leftover = _crashed_write(tmp_path)
    store.compact()
    assert not leftover.exists()


def test_only_this_stores_own_temp_files_are_removed(tmp_path):
    others = [tmp_path / "t.json.k3y9qz1x.tmp", tmp_path / "s.json.notmine.tmp", tmp_path / "s.json.k3y9qz1x.bak"]
    for path in others:
        path.write_text("{}")
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "s.json.l1nk2abc.tmp").symlink_to(target)  # not a regular file: never followed or removed
    JsonRecordStore(str(tmp_path / "s.json"))
    assert all(p.exists() for p in others) and (tmp_path / "s.json.l1nk2abc.tmp").is_symlink()
    assert target.read_text() == "keep"


@pytest.mark.parametrize(("content", "why"), [
    ({"name": "Kitchen", "handlers": ["ovos-persona-handler"], "memory_module": "ovos-memory-plugin-recency"},
     "is a persona file"),
    ({"name": "Kitchen", "solvers": ["x"], "ovos-solver-x": {"a": 1}, "ovos-solver-y": {"b": 2}}, "is a persona file"),
    # Settings named by mistake: taken as a store, they would be rewritten with the chat in them.
    ({"volume": 3, "name": "kitchen"}, "holds no memory record"),
    ({"default": None}, "holds no memory record"),
    ({"theme": "dark"}, "holds no memory record"),
    ({"editor.fontSize": 14, "files.exclude": {}}, "holds no memory record"),  # an empty object is no record
])
def test_a_json_file_that_is_not_a_store_is_refused_and_left_as_it_is(tmp_path, content, why):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(content))
    os.chmod(path, 0o644)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=f"{why} .*not a memory store"):
        JsonRecordStore(str(path))
    assert path.read_bytes() == before and os.stat(path).st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["mine.json"]


def test_record_update_is_read_modify_write(tmp_path):
    for path in (str(tmp_path / "r.db"), str(tmp_path / "r.json"), ":memory:"):
        store = open_record_store(path)
        for _ in range(5):
            store.update("s", lambda r: {"n": r.get("n", 0) + 1})
        assert store.load("s") == {"n": 5} and store.sessions() == ["s"]
        assert store.delete("s") and store.load("s") == {}


def test_a_record_field_loads_alone_as_a_copy_in_every_store(tmp_path):
    for path in (str(tmp_path / "r.db"), str(tmp_path / "r.json"), ":memory:"):
        store = open_record_store(path)
        store.save("s", {"facts": ["likes tea", {"k": 1}], "pending": [{"user": "x"}] * 50, "name": "Ana"})
        facts = store.load_field("s", "facts")
        assert facts == ["likes tea", {"k": 1}], path
        facts.append("changed")  # a copy: the store is untouched
        assert store.load_field("s", "facts") == ["likes tea", {"k": 1}], path
        assert store.load_field("s", "name") == "Ana" and store.load_field("s", "missing") is None, path
        assert store.load_field("nobody", "facts") is None, path
        store.close()


def test_a_json_read_does_not_wait_for_a_writer_holding_the_lock(tmp_path):
    import threading

    store = JsonRecordStore(str(tmp_path / "s.json"))
    store.save("s", {"facts": ["likes tea"]})
    holding, release = threading.Event(), threading.Event()

    def slow_writer():  # as a background write stuck in its fsync
        with store._locked():
            holding.set()
            release.wait(30)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    try:
        assert holding.wait(10)
        got: list = []
        reader = threading.Thread(target=lambda: got.append(store.load_field("s", "facts")))
        reader.start()
        reader.join(10)
        assert got == [["likes tea"]]  # answered while the writer still holds the lock
    finally:
        release.set()
        writer.join(10)
    other = JsonRecordStore(str(tmp_path / "s.json"))  # another process's view, then its write
    other.save("s", {"facts": ["likes coffee"]})
    assert store.load_field("s", "facts") == ["likes coffee"]  # a change on disk is read again


def _recorded_waits(monkeypatch) -> list[float]:
    """The short waits for the write lock each write asks for (a whole wait is not recorded)."""
    waits: list[float] = []
    real = Database._begin_within
    monkeypatch.setattr(Database, "_begin_within", lambda self, wait: (waits.append(wait), real(self, wait))[1])
    return waits


def _as_update(db, **block) -> None:
    """A write transaction of ``db`` as the held-writes machinery runs an update's store call."""
    from ovos_memory_plugins._core import held

    token = held._CALL.set((held.stamp(), False))
    try:
        with db.atomic(**block):
            pass
    finally:
        held._CALL.reset(token)


def test_once_a_lock_was_kept_past_the_whole_wait_updates_try_briefly_until_one_gets_it(tmp_path, monkeypatch):
    # A sqlite shell or a backup holding the file: each turn's update is held and stored later, so
    # waiting the whole busy timeout again at every turn would stall every turn for nothing. A
    # write nothing holds (a forget, an import) still waits fully.
    from ovos_memory_plugins.errors import StoreUnavailable
    from ovos_memory_plugins.storage import sqlite as sqlite_store

    con = sqlite3.connect(str(tmp_path / "b.db"), isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA busy_timeout = 50")  # the whole wait, short for the test
    db = Database(str(tmp_path / "b.db"), connection=con)
    db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
    waits = _recorded_waits(monkeypatch)
    other = sqlite3.connect(str(tmp_path / "b.db"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                _as_update(db)
        with pytest.raises(StoreUnavailable), db.atomic():  # a forget: the whole wait (unrecorded)
            pass
        with pytest.raises(StoreUnavailable):
            _as_update(db, busy_wait=0.01)  # optional work's own wait
    finally:
        other.execute("ROLLBACK")
    # The first waited the connection's whole wait (50 ms here; at most UPDATE_WAIT_S), the next briefly.
    assert waits == [0.05, sqlite_store.LOCKED_RETRY_S, sqlite_store.LOCKED_RETRY_S, 0.01]
    _as_update(db)  # the lock is free: this update gets it (trying briefly), and the whole wait is back after it
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable):
            _as_update(db)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert waits == [0.05, sqlite_store.LOCKED_RETRY_S, sqlite_store.LOCKED_RETRY_S, 0.01, sqlite_store.LOCKED_RETRY_S,
                     0.05]


def test_an_update_waits_update_wait_s_for_another_process_not_the_whole_busy_timeout(tmp_path, monkeypatch):
    # A turn's update is held when the file stays locked, so it need not wait BUSY_TIMEOUT_S (30 s)
    # behind a sqlite shell; a forget, which nothing holds, still does.
    from ovos_memory_plugins.errors import StoreUnavailable
    from ovos_memory_plugins.storage import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "UPDATE_WAIT_S", 0.1)
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_S", 0.3)  # the connection's own wait, made here
    db = Database(str(tmp_path / "u.db"))
    db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
    waits = _recorded_waits(monkeypatch)
    other = sqlite3.connect(str(tmp_path / "u.db"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable):
            _as_update(db)
        assert waits == [0.1]
        with pytest.raises(StoreUnavailable), db.atomic():  # a forget: the connection's whole wait
            pass
    finally:
        other.execute("ROLLBACK")
        other.close()
        db.close()
    assert waits == [0.1]
    assert db._connection_wait_s == 0.3

def test_a_short_busy_wait_gives_up_on_a_locked_file_and_keeps_the_connection_timeout(tmp_path):
    import time

    from ovos_memory_plugins.errors import StoreUnavailable

    con = sqlite3.connect(str(tmp_path / "b.db"), isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA busy_timeout = 1234")
    db = Database(str(tmp_path / "b.db"), connection=con)
    db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
    other = sqlite3.connect(str(tmp_path / "b.db"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable), db.atomic(busy_wait=0.05):
            pass
        assert time.monotonic() - started < 1.2  # gave up before the connection's own 1.234 s
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert con.execute("PRAGMA busy_timeout").fetchone()[0] == 1234
    with db.atomic() as c:
        c.execute("INSERT INTO t VALUES (1)")
    assert db.execute("SELECT COUNT(*) FROM t")[0][0] == 1


def _append_many(path: str, name: str, count: int) -> None:
    store = open_window_store(path)
    for i in range(count):
        store.append("shared", [AgentMessage(U, f"{name} q{i}"), AgentMessage(A, f"{name} a{i}")], KEEP_ALL)
    store.close()


@pytest.mark.heavy
@pytest.mark.parametrize("name, count", [("w.db", 1000), ("w.json", 250)])
def test_two_processes_appending_lose_no_update(tmp_path, name, count):
    path = str(tmp_path / name)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(path, who, count)) for who in ("p1", "p2")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    window = [m.content for m in open_window_store(path).load("shared", KEEP_ALL)]
    assert len(window) == 4 * count
    for who in ("p1", "p2"):
        assert [c for c in window if c.startswith(f"{who} a")] == [f"{who} a{i}" for i in range(count)]
    # pairs stay together: every question is followed by its own answer
    for q, a in zip(window[::2], window[1::2]):
        assert q.replace(" q", " a") == a


def test_window_trim_by_count_and_age(tmp_path):
    import time

    for path in (str(tmp_path / "t.db"), str(tmp_path / "t.json"), ":memory:"):
        store = open_window_store(path)
        for i in range(6):
            store.append("s", [AgentMessage(U, f"q{i}"), AgentMessage(A, f"a{i}")], WindowPolicy(max_messages=4))
        assert [m.content for m in store.load("s", WindowPolicy(max_messages=4))] == ["q4", "a4", "q5", "a5"]
        time.sleep(0.01)
        assert store.load("s", WindowPolicy(max_age=0.001, max_messages=4)) == []
        assert store.forget("s") == 4 and store.load("s", KEEP_ALL) == []



def test_wal_mode_and_busy_timeout_are_set(tmp_path):
    db = Database(str(tmp_path / "w.db"))
    assert db.execute("PRAGMA journal_mode")[0][0] == "wal"
    assert db.execute("PRAGMA busy_timeout")[0][0] >= 1000
    con = sqlite3.connect(tmp_path / "w.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


class _LockedAtFirst:
    """A connection whose first ``fails`` journal-mode switches meet another process's lock."""

    def __init__(self, fails: int):
        self.fails, self.calls = fails, 0

    def execute(self, sql: str):
        self.calls += 1
        if self.calls <= self.fails:
            raise sqlite3.OperationalError("database is locked")
        return sqlite3.connect(":memory:").execute("SELECT 'wal'")


def test_switching_to_wal_retries_a_lock_sqlite_will_not_wait_for():
    from ovos_memory_plugins.storage.sqlite import _enable_wal

    con = _LockedAtFirst(fails=3)
    _enable_wal(con)  # type: ignore[arg-type]
    assert con.calls == 4


def _open_and_migrate(path: str, start, errors: list) -> None:
    start.wait()
    try:
        db = Database(path)
        db.migrate("t", ["CREATE TABLE t (x INTEGER)"])
        db.close()
    except StorageError as exc:
        errors.append(exc)


def test_connections_opening_one_new_file_at_once_all_succeed(tmp_path):
    # Each converts the new file to WAL; SQLite answers one of two that both hold a read lock
    # "locked" at once, without waiting. Before the retry, about 1 round in 12 failed here.
    import threading

    for round_ in range(100):
        path, errors, start = str(tmp_path / f"new{round_}.db"), [], threading.Barrier(4)
        threads = [threading.Thread(target=_open_and_migrate, args=(path, start, errors)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {round_}"


@pytest.mark.parametrize("name", ["r.db", "r.json", ":memory:"])
def test_replace_makes_the_window_whole_and_an_empty_one_is_no_session(tmp_path, name):
    store = open_window_store(name if name == ":memory:" else str(tmp_path / name))
    store.append("s", [AgentMessage(U, "old q"), AgentMessage(A, "old a")], KEEP_ALL)
    store.replace("s", [AgentMessage(U, "new q"), AgentMessage(A, "new a")], KEEP_ALL)
    assert [m.content for m in store.load("s", KEEP_ALL)] == ["new q", "new a"]
    store.replace("s", [], KEEP_ALL)
    assert store.load("s", KEEP_ALL) == [] and "s" not in store.sessions()
    store.close()


def test_a_replace_that_fails_halfway_keeps_the_old_window(tmp_path, monkeypatch):
    from ovos_memory_plugins.storage.windows import SqliteWindowStore

    store = open_window_store(str(tmp_path / "r.db"))
    store.append("s", [AgentMessage(U, "old q"), AgentMessage(A, "old a")], KEEP_ALL)

    def crash(*args, **kwargs):
        raise OSError("power cut after the delete")

    monkeypatch.setattr(SqliteWindowStore, "_append", crash)
    with pytest.raises(OSError):
        store.replace("s", [AgentMessage(U, "new q")], KEEP_ALL)
    monkeypatch.undo()
    assert [m.content for m in store.load("s", KEEP_ALL)] == ["old q", "old a"]
    store.close()


# -- a file set aside while another connection (another process) has it open --------------------
def _set_aside_as_damaged(db: Database) -> None:
    from ovos_memory_plugins.storage.sqlite import StoreReplaced

    with pytest.raises(StoreReplaced), db._lock:
        db._replace_if_damaged(sqlite3.DatabaseError("database disk image is malformed"))


def _set_aside_files(folder: Path, name: str) -> int:
    return len([p for p in folder.glob(f"{name}.corrupt*") if not p.name.endswith(("-wal", "-shm"))])


def test_a_writer_follows_a_file_that_another_process_set_aside(tmp_path):
    path = str(tmp_path / "w.db")
    first, second = Database(path), Database(path)  # two connections, as two processes have
    for db in (first, second):
        db.migrate("t", ["CREATE TABLE t (x TEXT)"])
    _set_aside_as_damaged(first)
    with second.atomic() as con:  # still open on the old file: it must write to the new one
        con.execute("INSERT INTO t VALUES ('after')")
    assert first.execute("SELECT x FROM t") == [("after",)]
    assert second.generation == 1 and _set_aside_files(tmp_path, "w.db") == 1
    first.close()
    second.close()


def test_damage_met_through_an_old_connection_never_sets_aside_the_new_file(tmp_path):
    path = str(tmp_path / "w.db")
    first, second = Database(path), Database(path)
    for db in (first, second):
        db.migrate("t", ["CREATE TABLE t (x TEXT)"])
    _set_aside_as_damaged(first)
    with first.atomic() as con:
        con.execute("INSERT INTO t VALUES ('kept')")
    _set_aside_as_damaged(second)  # the same damage, seen late through the old file
    assert first.execute("SELECT x FROM t") == [("kept",)] and second.execute("SELECT x FROM t") == [("kept",)]
    assert _set_aside_files(tmp_path, "w.db") == 1, "the new file was set aside too"
    first.close()
    second.close()


def test_an_undecodable_stored_value_sets_the_file_aside_and_the_update_is_written_anew(tmp_path):
    from ovos_memory_plugins.storage.records import SqliteRecordStore

    path = str(tmp_path / "r.db")
    store = SqliteRecordStore(Database(path), owns_db=True)
    store.save("s", {"n": 1})
    raw = sqlite3.connect(path)
    raw.execute("UPDATE records SET data = '{\"n\": 1' WHERE session_id = 's'")  # bytes changed on disk
    raw.commit()
    raw.close()
    store.update("s", lambda r: {**r, "new": True})
    assert store.load("s") == {"new": True} and _set_aside_files(tmp_path, "r.db") == 1
    store.close()


@pytest.mark.parametrize("content", [{"s": {}, "t": []}, {"default": "oops", "s": {"facts": ["x"]}},
                                     {"count": 3, "name": "Ana", "s": {"buffer": []}}])
def test_a_store_whose_records_were_damaged_by_hand_still_opens(tmp_path, content):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(content))
    store = JsonRecordStore(str(path))
    assert store.sessions() == sorted(content)


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "link to a file", "link to an empty file"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_and_left_as_it_is(tmp_path, kind):
    path, lock, target = tmp_path / "s.json", tmp_path / "s.json.lock", tmp_path / "elsewhere"
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        if kind.startswith("link to"):
            target.write_text("" if "empty" in kind else "not ours")
            os.chmod(target, 0o644)
        lock.symlink_to(target)
    with pytest.raises(StorageError, match="lock file"):  # a FIFO hung here, a link's target was made
        JsonRecordStore(str(path))
    assert not path.exists()
    if kind.startswith("link to"):  # its content and its mode (an empty one's was made private)
        assert target.read_text() == ("" if "empty" in kind else "not ours") and target.stat().st_mode & 0o777 == 0o644
    else:
        assert not target.exists()


@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "symbolic link"])
def test_an_sqlite_journal_that_is_not_a_regular_file_is_refused_and_left_as_it_is(tmp_path, suffix, kind):
    from ovos_memory_plugins.errors import ConfigError
    from ovos_memory_plugins.lexical import LexicalMemory

    path = tmp_path / "lex.db"
    companion = tmp_path / f"lex.db{suffix}"
    target = tmp_path / "notes.txt"
    target.write_text("precious")
    {"fifo": lambda: os.mkfifo(companion), "directory": companion.mkdir,
     "symbolic link": lambda: companion.symlink_to(target)}[kind]()
    # a FIFO hung here, a directory or a link was deleted
    with pytest.raises(ConfigError, match=f"(?i)lex.db{suffix}' beside it is a {kind}"):
        LexicalMemory({"db_path": str(path)})
    check = {"fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR, "symbolic link": stat.S_ISLNK}[kind]
    assert check(os.lstat(companion).st_mode) and target.read_text() == "precious"


@pytest.mark.parametrize(("schema", "why"), [
    ("CREATE TABLE bookmarks (id INTEGER PRIMARY KEY, url TEXT); INSERT INTO bookmarks (url) VALUES ('https://x.org')",
     r"\(tables: bookmarks\)"),
    ("PRAGMA application_id = 12345; PRAGMA user_version = 7", r"\(its application_id 12345\)"),  # no table yet
], ids=["tables", "stamped, no table yet"])
def test_an_sqlite_database_of_something_else_is_refused_and_left_as_it_is(tmp_path, schema, why):
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "app.sqlite"
    con = sqlite3.connect(path)
    con.executescript(schema)
    con.commit()
    con.close()
    os.chmod(path, 0o644)
    before = path.read_bytes()
    for cls in (RecencyMemory, LexicalMemory):
        with pytest.raises(ConfigError, match=f"is a database of something else {why}"):
            cls({"db_path": str(path)})
    assert path.read_bytes() == before and os.stat(path).st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["app.sqlite"]


@pytest.mark.parametrize("schema", [
    "CREATE TABLE sessions (token TEXT, user TEXT); CREATE TABLE users (id INTEGER)",
    "CREATE VIRTUAL TABLE notes USING fts5(title, body)",
])
def test_an_app_database_with_a_sessions_or_fts5_table_of_its_own_is_refused(tmp_path, schema):
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.executescript(schema)
    con.close()
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="is a database of something else"):
        RecencyMemory({"db_path": str(path)})
    assert path.read_bytes() == before


def test_the_reference_packages_sqlite_files_still_open(tmp_path):
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.longterm import LongTermMemory

    lexical, longterm = tmp_path / "lexical_memory.db", tmp_path / "longterm.db"
    con = sqlite3.connect(lexical)
    con.execute("CREATE VIRTUAL TABLE lexical_memory USING fts5(doc_id UNINDEXED, session_id UNINDEXED, content)")
    con.execute("INSERT INTO lexical_memory VALUES ('s_0', 's', 'Q: my cat is Tom\nA: nice')")
    con.commit()
    con.close()
    con = sqlite3.connect(longterm)
    con.execute("CREATE TABLE sessions (session_id TEXT PRIMARY KEY, summary TEXT, recent TEXT, "
                "exchange_count INTEGER, updated_at REAL)")
    con.commit()
    con.close()
    with LexicalMemory({"db_path": str(lexical)}) as memory:
        assert [h.content for h in memory.search("cat", "s")] == ["Q: my cat is Tom\nA: nice"]
    with LongTermMemory({"db_path": str(longterm), "api_url": None}) as memory:
        assert memory.get_history("s") == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("name", ["store.json", "store.db"])
def test_a_store_file_that_cannot_be_created_is_a_config_error_naming_it(name):
    from ovos_memory_plugins.recency import RecencyMemory
    from ovos_memory_plugins.short_term import BasicShortTermMemory

    path = f"/proc/self/ovos-memory-test/{name}"  # no folder can be made there, even as root
    for cls in (RecencyMemory, BasicShortTermMemory):
        with pytest.raises(ConfigError, match=f"cannot open db_path '{re.escape(path)}': cannot create the store file"):
            cls({"db_path": path})


@pytest.mark.parametrize("blank", [b"\xff\xfe", "\r\n".encode("utf-16")])
def test_a_blank_utf16_file_is_nothing_to_keep_not_someones_text(tmp_path, blank):
    from ovos_memory_plugins._core.paths import foreign_content

    path = tmp_path / "store.db"
    path.write_bytes(blank)
    assert foreign_content(str(path)) is None and foreign_content(str(path), json_store=True) is None
    path.write_bytes("my notes\r\n".encode("utf-16"))
    assert "UTF-16 text" in (foreign_content(str(path)) or "")


def test_a_json_store_locked_by_another_process_is_unavailable_after_a_while_never_a_hang(tmp_path, monkeypatch):
    import fcntl

    from ovos_memory_plugins.errors import StoreUnavailable
    from ovos_memory_plugins.storage import jsonfile

    store = JsonRecordStore(str(tmp_path / "s.json"))
    store.save("kitchen", {"facts": ["User's name is Ana"]})
    monkeypatch.setattr(jsonfile, "LOCK_TIMEOUT_S", 0.2)
    with open(tmp_path / "s.json.lock", "a") as holder:  # another open file: flock sees another owner
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(StoreUnavailable, match="locked by another process"):
            store.save("kitchen", {"facts": []})
        assert store.sessions() == ["kitchen"]  # reading needs no lock
        assert store.load("kitchen")["facts"] == ["User's name is Ana"]
    store.save("kitchen", {"facts": []})  # released: writes go on
    assert store.load("kitchen")["facts"] == []


def test_a_json_store_replaced_by_a_foreign_file_while_open_is_a_store_failure_and_the_file_stays(tmp_path):
    path = tmp_path / "s.json"
    store = JsonRecordStore(str(path))
    store.save("kitchen", {"facts": ["User's name is Ana"]})
    path.write_bytes(b"garbage{")  # someone's file, not JSON: never set aside or rewritten
    with pytest.raises(StorageError, match="not a memory store") as caught:
        store.update("kitchen", lambda record: record)
    assert not isinstance(caught.value, ConfigError)  # the config was right when it opened
    assert path.read_bytes() == b"garbage{"


def test_a_json_store_replaced_by_a_persona_file_while_open_is_never_written_into(tmp_path):
    path = tmp_path / "s.json"
    store = JsonRecordStore(str(path))
    store.save("kitchen", {"facts": ["User's name is Ana"]})
    persona = json.dumps({"name": "Home", "memory_module": "ovos-memory-plugin-entity"})
    path.write_text(persona)
    with pytest.raises(StorageError, match="persona file"):
        store.save("kitchen", {"facts": []})
    assert path.read_text() == persona


@pytest.mark.parametrize(("name", "content"), [
    ("archive.db", b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8),  # a gzip backup
    ("program.db", b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 8),
    ("picture.db", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8),
    ("encrypted.db", bytes((i * 37 + 11) % 256 for i in range(4096))),  # an encrypted database: no header, no schema
    ("picture.json", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8),
    ("random.json", bytes((i * 37 + 11) % 256 for i in range(4096))),
])
def test_someone_elses_binary_file_is_refused_and_left_where_it_is(tmp_path, name, content):
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.lexical import LexicalMemory

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="not a memory store"):
        (LexicalMemory if name.endswith(".db") else EntityMemory)({"db_path": str(path)})
    assert path.read_bytes() == content and sorted(os.listdir(tmp_path)) == [name]


@pytest.mark.parametrize("text", [
    # OVOS's mycroft.conf: sections, and plain values beside them
    '{"lang": "en-us", "listener": {"sample_rate": 16000}, "websocket": {"host": "0.0.0.0", "port": 8181}}',
    '{"listener": {"sample_rate": 16000}, "skills": {"blacklisted_skills": []}}',  # sections only
    '// my settings\n{"lang": "en-us",\n  // the microphone\n  "listener": {"sample_rate": 16000}}',  # with comments
    # comments at the ends of lines, commas before a closing bracket, single quotes: not JSON, nor damage
    '{\n  "lang": "en-us",  // my language\n  "volume": 3\n}\n', '{\n  "editor.fontSize": 14,\n  "a": [1, 2,],\n}\n',
    '{ /* settings */ "volume": 3 }', "{'volume': 3, 'url': 'http://x/y'}",
])
def test_a_configuration_file_named_as_a_json_store_is_refused_and_left_as_it_is(tmp_path, text):
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "mycroft.conf"
    path.write_text(text)
    before = os.stat(path)
    with pytest.raises(ConfigError, match="not a memory store"):
        RecencyMemory({"db_path": str(path)})
    assert path.read_text() == text and os.stat(path).st_mode == before.st_mode
    assert sorted(os.listdir(tmp_path)) == ["mycroft.conf"]


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_a_damaged_store_is_still_set_aside_not_taken_for_a_configuration_file(tmp_path, cut):
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "recency.json"
    with RecencyMemory({"db_path": str(path)}) as memory:
        for i in range(5):
            memory.update_history([AgentMessage(MessageRole.USER, f"q {i} // not a comment, "),
                                   AgentMessage(MessageRole.ASSISTANT, "a /* nor this */")], "s")
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])  # a cut file
    with RecencyMemory({"db_path": str(path)}) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "new"), AgentMessage(MessageRole.ASSISTANT, "ok")], "s")
    assert (tmp_path / "recency.json.corrupt").exists()


@pytest.mark.parametrize("damage", [(b"\n    ]", b",\n    ]"), (b"\n}", b",}")],
                         ids=["comma in a list", "comma at the end"])
def test_a_store_a_comma_made_invalid_is_damage_not_a_configuration_file(tmp_path, damage):
    # A byte turned into a comma (or a hand edit) reads as JSON once trailing commas are allowed;
    # what it holds are a store's records, so it is set aside as damage, never refused for ever.
    from ovos_memory_plugins.recency import RecencyMemory

    path = tmp_path / "recency.json"
    with RecencyMemory({"db_path": str(path)}) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "q"), AgentMessage(MessageRole.ASSISTANT, "a")], "s")
    data = path.read_bytes()
    old, new = damage
    assert old in data
    path.write_bytes(new.join(data.rsplit(old, 1)))
    with RecencyMemory({"db_path": str(path)}) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "new"), AgentMessage(MessageRole.ASSISTANT, "ok")], "s")
    assert (tmp_path / "recency.json.corrupt").exists()


def test_a_cut_store_with_many_quotes_is_read_once_not_again_from_each(tmp_path):
    # Cut inside a long string of escaped quotes, each quote after the cut began a scan to the
    # end: 200 kB took 85 s to open. Read once, it takes milliseconds.
    from ovos_memory_plugins._core.paths import foreign_content

    path = tmp_path / "s.json"
    path.write_text('{"s": {"buffer": [{"role": "user", "content": "' + '\\"' * 100_000)
    started = time.monotonic()
    assert foreign_content(str(path), json_store=True) is None  # damage, not someone's file
    assert time.monotonic() - started < patience(10)


def test_a_store_nested_past_the_interpreters_limit_opens_and_is_set_aside_as_damage(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"s": ' + "[" * 200_000)
    store = MemoryJsonStore(str(path))  # no RecursionError out of the open
    store.save("s", {"buffer": []})
    assert store.load("s") == {"buffer": []} and (tmp_path / "s.json.corrupt").exists()
    (tmp_path / "s.json.k3y9qz1x.tmp").write_text("[1, 2]")  # a list, named as 1.3.0 named its temp files
    (tmp_path / "s.json.deep0001.tmp").write_text("[" * 200_000)
    assert store.delete("s")  # its look at them raises nothing
    assert (tmp_path / "s.json.k3y9qz1x.tmp").exists() and (tmp_path / "s.json.deep0001.tmp").exists()


def test_the_general_json_store_still_takes_records_of_any_shape(tmp_path):
    from ovos_memory_plugins.persistence import JsonStore

    JsonStore(str(tmp_path / "any.json")).save("s", {"anything": 1})
    assert JsonStore(str(tmp_path / "any.json")).load("s") == {"anything": 1}


def test_a_postgresql_host_that_does_not_answer_is_not_tried_again_on_every_turn(monkeypatch):
    psycopg = pytest.importorskip("psycopg")
    from ovos_memory_plugins.errors import StoreUnavailable
    from ovos_memory_plugins.storage import postgres
    from ovos_memory_plugins.storage.postgres import PgDatabase

    monkeypatch.setattr(postgres, "_UNANSWERED", {})  # no pause of this test outlives it

    tried = []

    def unreachable(**info):
        tried.append(info)
        raise psycopg.OperationalError("connection timeout expired")

    monkeypatch.setattr(postgres.watched_connection_class(), "connect", staticmethod(unreachable))
    for _ in range(3):
        with pytest.raises(StoreUnavailable, match="cannot connect to"):
            PgDatabase("postgresql://ovos@db.lan:5432/memory")
    assert len(tried) == 1  # one wait for the connect timeout, then a pause before the next
    info = tried[0]
    assert info["keepalives"] == "1" and info["tcp_user_timeout"] == "10000"  # a host gone mid-query is noticed


def test_a_json_store_opened_to_its_group_stays_so_and_one_left_world_readable_becomes_private(tmp_path):
    store = JsonRecordStore(str(tmp_path / "shared.json"))
    store.save("s", {"buffer": []})
    os.chmod(tmp_path / "shared.json", 0o660)  # the owner shares it with a service's group
    store.save("s", {"buffer": [{"role": "user", "content": "hi"}]})
    assert (os.stat(tmp_path / "shared.json").st_mode & 0o777) == 0o660
    os.chmod(tmp_path / "shared.json", 0o644)  # a umask's doing
    store.save("s", {"buffer": []})
    assert (os.stat(tmp_path / "shared.json").st_mode & 0o777) == 0o600


@pytest.mark.parametrize("entry", ["recency", "lexical", "two-on-one-file"])
def test_a_store_keeps_its_sqlite_locks_so_another_process_never_takes_it_for_gone(entry, tmp_path):
    # Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
    # too. A store that read its own file's first bytes after SQLite opened it (to tell SQLite
    # from JSON) lost its locks: the next process to close the file took itself for the last
    # one and deleted the WAL this one still wrote to, and the two no longer kept each other out.
    import subprocess
    import sys

    from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.recency import RecencyMemory

    path = str(tmp_path / "m.db")
    opened = [RecencyMemory({"db_path": path}) if entry != "lexical" else LexicalMemory({"db_path": path})]
    if entry == "two-on-one-file":  # a second memory of the process opening the same file
        opened.append(LexicalMemory({"db_path": path}))
    memory = opened[0]
    try:
        memory.update_history([AgentMessage(MessageRole.USER, "zqoneq"), AgentMessage(MessageRole.ASSISTANT, "ok")],
                              "s")
        read = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); t = c.execute(\"select name from "
                "sqlite_master where type = 'table' and name like '%window'\").fetchone()[0]; "
                "print(sum(1 for r in c.execute(f'select content from {t}') if 'zq' in r[0])); c.close()")
        subprocess.run([sys.executable, "-c", read, path], check=True, capture_output=True, timeout=60)
        assert os.path.exists(path + "-wal"), "another process deleted the WAL this store writes to"
        memory.update_history([AgentMessage(MessageRole.USER, "zqtwoq"), AgentMessage(MessageRole.ASSISTANT, "ok")],
                              "s")
        seen = subprocess.run([sys.executable, "-c", read, path], check=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()
        assert seen == "2", f"another process sees {seen} of the 2 messages this one wrote"
    finally:
        for m in opened:
            m.close()


def test_a_closed_database_reads_through_this_processs_open_handle_on_the_file(tmp_path):
    from ovos_memory_plugins.storage.sqlite import Database, open_database, release_database

    path = str(tmp_path / "twin.db")
    shared = open_database(path)
    shared.migrate("twin-test", ["CREATE TABLE t (x INTEGER)"])
    shared.transaction(lambda con: con.execute("INSERT INTO t VALUES (1)"))
    closed = Database(path)
    closed.close()
    try:
        assert closed.execute("SELECT x FROM t") == [(1,)]
        with shared.read():  # a read of the closed one inside a read of the open one: no second BEGIN
            assert closed.execute("SELECT count(*) FROM t") == [(1,)]
        with closed.read() as con:
            assert con.execute("SELECT x FROM t").fetchall() == [(1,)]
    finally:
        release_database(shared)
    assert closed.execute("SELECT x FROM t") == [(1,)]  # no open handle left: a read-only connection
    os.remove(path)
    with pytest.raises(StorageError, match="closed, and its store deleted"):
        closed.execute("SELECT x FROM t")
