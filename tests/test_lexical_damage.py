"""LexicalMemory: a damaged keyword index is rebuilt from the document log; the file is kept.

The FTS5 table is derived data (the window and the document log hold the truth), so damage to
it alone (``PRAGMA quick_check`` still says ok) costs the index, rebuilt, never the store.
"""
from __future__ import annotations

import sqlite3
import time

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins.lexical import LexicalMemory
from tests._timing import patience
from tests.reliability._harness import recording_logs

U, A = MessageRole.USER, MessageRole.ASSISTANT

#: The FTS5 blocks of the index's segments (id 1 holds its averages, id 10 its structure).
SEGMENTS = "UPDATE lexical_memory_data SET block = randomblob(length(block)) WHERE id > 10"
#: Every block, its structure record too: FTS5 can no longer open the table at all.
EVERY_BLOCK = "UPDATE lexical_memory_data SET block = randomblob(length(block))"


def _filled(path, config=None, sessions=("s",), n=20) -> None:
    memory = LexicalMemory({"db_path": str(path), **(config or {})})
    for sid in sessions:
        for i in range(n):
            memory.update_history([AgentMessage(U, f"{sid} question {i} about zq{sid}topic{i}"),
                                   AgentMessage(A, f"answer {i} on the {sid} side")], sid)
    assert memory.flush(patience(10))
    memory.close()


def _damage(path, sql: str = SEGMENTS) -> None:
    con = sqlite3.connect(path)
    try:
        assert con.execute(sql).rowcount > 0
        con.commit()
        assert con.execute("PRAGMA quick_check").fetchall() == [("ok",)]  # the file's own pages are sound
    finally:
        con.close()


def _index_rows(path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT rowid, content, session_id, ctx FROM lexical_memory ORDER BY rowid").fetchall()
    finally:
        con.close()


def _rebuilt(logs) -> list[str]:
    return [w for w in logs.lines["warning"] if "keyword index" in w and "rebuilt" in w]


@pytest.mark.parametrize("ram_index", [True, False], ids=["ram-postings", "fts5-ranks"])
@pytest.mark.parametrize("damage", [SEGMENTS, EVERY_BLOCK], ids=["segments", "every-block"])
def test_a_damaged_keyword_index_is_rebuilt_and_the_window_and_documents_are_kept(tmp_path, monkeypatch,
                                                                                  ram_index, damage):
    path = tmp_path / "lex.db"
    _filled(path)
    _damage(path, damage)

    config = {"db_path": str(path), "ram_index": ram_index}
    with recording_logs(monkeypatch) as logs:
        memory = LexicalMemory(config)
        try:
            window = memory.get_history("s")
            context = memory.build_conversation_context("what about zqstopic5?", "s")  # meets the damage
            memory.update_history([AgentMessage(U, "a new zqsnew exchange"), AgentMessage(A, "kept")], "s")
            assert memory.flush(patience(10))
            old, new = memory.search("zqstopic5", "s"), memory.search("zqsnew", "s")
            documents = memory.export("s")["documents"]
        finally:
            memory.close()

    assert len(window) == 10 and window[-1].content == "answer 19 on the s side"
    assert context[-1].content == "what about zqstopic5?"  # the turn was answered
    assert [h.content.split("\n")[0] for h in old] == ["Q: s question 5 about zqstopic5"]
    assert [h.content.split("\n")[0] for h in new] == ["Q: a new zqsnew exchange"]
    assert len(documents) == 21
    assert not list(tmp_path.glob("*.corrupt*")), "damage to the keyword index alone set the whole store aside"
    assert len(_rebuilt(logs)) == 1, logs.lines["warning"]
    assert not logs.errors, logs.errors
    with LexicalMemory(config) as again:  # the rebuilt index is sound: no second rebuild after a restart
        assert len(again.get_history("s")) == 10
        assert [h.content.split("\n")[0] for h in again.search("zqstopic7", "s")] == ["Q: s question 7 about zqstopic7"]
    con = sqlite3.connect(path)
    try:
        con.execute("INSERT INTO lexical_memory(lexical_memory) VALUES ('integrity-check')")
    finally:
        con.close()


def test_the_rebuilt_index_holds_what_indexing_wrote_neighbour_context_included(tmp_path, monkeypatch):
    path = tmp_path / "lex.db"
    config = {"retrieval": {"neighbour_weight": 0.5}}
    _filled(path, config, sessions=("s", "t"), n=8)
    before = _index_rows(path)
    assert any(row[3] for row in before)  # the neighbours' words are there to compare
    _damage(path)

    with recording_logs(monkeypatch) as logs, LexicalMemory({"db_path": str(path), **config}) as memory:
        memory.search("zqttopic3", "t")
        assert memory.flush(patience(10))
        hits = memory.search("zqttopic3", "t")  # its neighbours too, by their context
        assert hits[0].content.split("\n")[0] == "Q: t question 3 about zqttopic3"
    assert _index_rows(path) == before
    assert len(_rebuilt(logs)) == 1, logs.lines["warning"]


def test_forget_on_a_damaged_keyword_index_forgets_and_keeps_the_other_sessions(tmp_path, monkeypatch):
    path = tmp_path / "lex.db"
    _filled(path, sessions=("s", "t"), n=10)
    _damage(path)

    with recording_logs(monkeypatch) as logs, LexicalMemory({"db_path": str(path), "ram_index": False}) as memory:
        assert memory.forget("s")["documents"] == 10  # before any search met the damage
        assert memory.flush(patience(10))
        assert memory.search("zqstopic4", "s") == []
        assert [h.content.split("\n")[0] for h in memory.search("zqttopic4", "t")] == \
            ["Q: t question 4 about zqttopic4"]
        assert len(memory.get_history("t")) == 10
    assert not list(tmp_path.glob("*.corrupt*"))
    assert len(_rebuilt(logs)) == 1, logs.lines["warning"]
    assert b"zqstopic" not in path.read_bytes()  # forget means forget: no entry of it in the new index


def test_a_damaged_document_log_is_still_set_aside(tmp_path, monkeypatch):
    # The index is rebuilt from the log; when the log itself cannot be read the store is set aside
    # as before (here the rebuild meets it: the log's pages are damaged but quick_check is skipped).
    import ovos_memory_plugins.storage.sqlite as sqlite_store

    path = tmp_path / "lex.db"
    _filled(path, n=200)
    _damage(path)
    con = sqlite3.connect(path)
    pages = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name = 'lexical_memory_docs' "
                                       "AND pagetype = 'leaf' ORDER BY pageno")]
    con.close()
    data = bytearray(path.read_bytes())
    page = pages[len(pages) // 2]
    data[(page - 1) * 4096: page * 4096] = bytes((i * 7 + 3) % 256 for i in range(4096))
    path.write_bytes(bytes(data))
    monkeypatch.setattr(sqlite_store, "quick_check", lambda con: None)

    with recording_logs(monkeypatch) as logs, LexicalMemory({"db_path": str(path), "ram_index": False}) as memory:
        memory.search("zqstopic5", "s")
        # The rebuild meets the damage in the background; its step fails (flush says False) once
        # the file is set aside. Wait for that itself: an exchange stored before it went into
        # the damaged file and is kept only in its set-aside copy (the next test).
        deadline = time.monotonic() + patience(10)
        while not (tmp_path / "lex.db.corrupt").exists() and time.monotonic() < deadline:
            memory.flush(0.2)
        assert (tmp_path / "lex.db.corrupt").exists(), sorted(p.name for p in tmp_path.iterdir())
        memory.update_history([AgentMessage(U, "after zqsafter"), AgentMessage(A, "ok")], "s")
        assert memory.flush(patience(10))
        assert [h.content.split("\n")[0] for h in memory.search("zqsafter", "s")] == ["Q: after zqsafter"]
    assert [e for e in logs.errors if "damaged" in e]


def test_damage_met_again_right_after_a_rebuild_is_not_rebuilt_in_a_loop(tmp_path, monkeypatch):
    # Damage elsewhere in the file (met each time the index is written) would otherwise drop and
    # queue the whole index again and again, a warning each time.
    from ovos_memory_plugins.retrieval import BaseRetrievalMemory
    from ovos_memory_plugins.storage.integrity import IndexDamaged

    path = tmp_path / "lex.db"
    _filled(path)

    def damaged(self, busy_wait=None):
        raise IndexDamaged("keyword index lexical_memory: database disk image is malformed")

    with recording_logs(monkeypatch) as logs:
        memory = LexicalMemory({"db_path": str(path)})
        try:
            monkeypatch.setattr(BaseRetrievalMemory, "_index_step", damaged)
            for i in range(3):
                memory.update_history([AgentMessage(U, f"new {i}"), AgentMessage(A, "ok")], "s")
            memory.flush(1.0)  # the indexer keeps failing: it cannot finish
            assert [m.content for m in memory.get_history("s")][-2:] == ["new 2", "ok"]
        finally:
            monkeypatch.undo()
            memory.close()
    assert len(_rebuilt(logs)) == 1, _rebuilt(logs)


def test_a_command_that_only_looks_says_it_searched_without_a_damaged_index(tmp_path, monkeypatch):
    # It writes nothing, so it cannot rebuild: it must not look as if nothing was ever said.
    from ovos_memory_plugins.storage.readonly import read_only

    path = tmp_path / "lex.db"
    _filled(path)
    _damage(path)
    with recording_logs(monkeypatch) as logs, read_only():
        memory = LexicalMemory({"db_path": str(path), "ram_index": False})
        try:
            memory.search("zqstopic5", "s")
        finally:
            memory.close()
    assert any("searching without it" in w for w in logs.lines["warning"]), logs.lines
    assert not (tmp_path / "lex.db.corrupt").exists()


def test_sqlite_running_out_of_memory_on_the_index_alone_is_damage_to_the_index():
    # FTS5 reading a random structure record may ask SQLite for gigabytes: Python sees a
    # MemoryError (seen on "every block" damage above, now and then), which set the file aside.
    from ovos_memory_plugins.storage.integrity import IndexDamaged, index_statements

    with pytest.raises(IndexDamaged, match="keyword index t is damaged"), index_statements("keyword index t", True):
        raise MemoryError
    with pytest.raises(MemoryError), index_statements("keyword index t"):  # a block that is not SQL alone
        raise MemoryError
