"""The PostgreSQL store: its engine (connection, migrations, locks, text), the shared job queues, the
keyword index against FTS5's numbers, pgvector's paths, and the ``ovos-memory`` commands on it.

The contract kit and the reliability suites run every backend on PostgreSQL too (tests/test_contract.py,
tests/reliability/); these are the engine's own guarantees. All need a server (marker ``postgres``).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import secrets
import subprocess
import sys
import textwrap
import time
import urllib.parse
import uuid

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.errors import ConfigError, MigrationError, StorageError
from ovos_memory_plugins.storage.postgres import open_pg_database, redact, release_pg_database
from tests._postgres import URL_ENV, connect, fresh_url, schema_cells, schema_of, server_url
from tests._timing import patience

pytestmark = pytest.mark.postgres
U, A = MessageRole.USER, MessageRole.ASSISTANT
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _exchange(memory, sid, question, answer):
    memory.update_history([AgentMessage(U, question), AgentMessage(A, answer)], sid)


def _python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=patience(timeout), env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO)


# -- the engine ------------------------------------------------------------------------------
def test_without_psycopg_the_package_imports_and_a_db_url_names_the_pip_install():
    done = _python("""
        import sys
        sys.modules["psycopg"] = None  # as if the [postgres] extra were not installed
        import ovos_memory_plugins, ovos_memory_plugins.storage, ovos_memory_plugins.pgvector
        from ovos_memory_plugins.recency import RecencyMemory
        try:
            RecencyMemory({"db_url": "postgresql://ovos@db.invalid/memory"})
        except Exception as exc:
            print(type(exc).__name__, exc)
    """)
    assert done.returncode == 0, done.stderr
    assert "ConfigError" in done.stdout and "pip install 'ovos-memory-plugins[postgres]'" in done.stdout


def test_a_wrong_password_is_never_shown_and_an_unreachable_server_is_a_config_error():
    assert redact("postgresql://ovos:s3cret@db:5432/memory") == "postgresql://ovos:***@db:5432/memory"
    assert redact("postgresql://ovos@/memory?host=/tmp/x") == "postgresql://ovos@/memory?host=/tmp/x"
    from ovos_memory_plugins._memory.waiting import no_waiting
    from ovos_memory_plugins.recency import RecencyMemory

    url = "postgresql://ovos:s3cret@127.0.0.1:1/memory?connect_timeout=2"
    with no_waiting(), pytest.raises(ConfigError) as caught:  # as a management command builds it
        RecencyMemory({"db_url": url})
    assert "s3cret" not in str(caught.value) and "cannot connect" in str(caught.value)
    said = _said_while_down(url)  # as a persona builds it: it starts, and waits for the server
    assert "s3cret" not in said and "cannot connect" in said


def _said_while_down(url: str) -> str:
    """What building a window on ``url`` says: the ConfigError it raises, or ``degraded()`` of
    the memory that waits for the server."""
    from ovos_memory_plugins.recency import RecencyMemory

    try:
        memory = RecencyMemory({"db_url": url})
    except ConfigError as exc:
        return str(exc)
    try:
        return json.dumps(memory.degraded())
    finally:
        memory.close()


@pytest.mark.parametrize("url", [
    "postgresql://ovos@127.0.0.1:1/memory?password=s3cret&connect_timeout=2",  # in the query
    "postgresql://ovos:s3cret@[::1/memory",  # a URL libpq cannot parse, and quotes back
    "postgresql:/ovos:s3cret@127.0.0.1:1/memory",  # not a URL at all
    "host=127.0.0.1 port=1 password='s3 cret' connect_timeout=2",  # a key=value string
    "host=127.0.0.1 port=1 password=s3&cret connect_timeout=2",  # "&" is the password's there
    "host=127.0.0.1 port=1 password='s3 cret",  # a quote never closed
])
def test_a_password_anywhere_in_db_url_is_never_shown(url, caplog):
    said = _said_while_down(url)
    assert "s3" not in said and "cret" not in said and "cret" not in caplog.text
    assert redact(url.replace("s3", "ab")).count("ab") == 0


def test_a_typo_in_a_setting_of_db_url_is_named_with_the_setting_meant():
    # libpq quotes the name it does not know, and quoted parts were hidden (they may be a password).
    said = _said_while_down("postgresql://ovos:s3cret@127.0.0.1:1/memory?sslmod=disable")
    assert "no setting 'sslmod'; did you mean 'sslmode'?" in said and "s3cret" not in said


def test_a_session_postgresql_refuses_for_good_is_dropped_from_what_was_held_not_raised_by_flush(monkeypatch):
    # Held during an outage, then refused for good once the server answered: flush() and close()
    # raised at every call, and the item stayed held for ever.
    from ovos_memory_plugins.errors import StoreUnavailable
    from ovos_memory_plugins.recency import RecencyMemory

    memory = RecencyMemory({"db_url": fresh_url()})
    real, calls = memory._store_batch, []

    def down_once(session_id, batch):
        calls.append(1)
        if len(calls) == 1:
            raise StoreUnavailable("restarting")
        return real(session_id, batch)

    monkeypatch.setattr(memory, "_store_batch", down_once)
    _exchange(memory, secrets.token_hex(1500), "hello", "hi")  # held
    assert memory.flush(patience(10)) and memory._held.sessions() == []
    _exchange(memory, "kitchen", "hello", "hi")
    memory.close()
    assert memory._closed


def test_a_session_id_postgresql_cannot_index_is_a_value_error_not_held_for_ever():
    # An index row holds about 2,700 bytes: a longer id that does not compress was refused by the
    # server at every write, taken for an outage, and held in RAM for good (flush() never True).
    from ovos_memory_plugins.recency import RecencyMemory

    random_id = secrets.token_hex(1500)  # 3,000 bytes that do not compress
    with RecencyMemory({"db_url": fresh_url()}) as memory:
        with pytest.raises(ValueError, match="too long for its index"):
            _exchange(memory, random_id, "hello", "hi")
        _exchange(memory, "y" * 10_000, "hello", "hi")  # long, but it compresses: kept
        assert memory.flush(patience(10)) and len(memory.get_history("y" * 10_000)) == 2
        assert random_id not in memory.sessions()


def test_text_postgresql_cannot_hold_round_trips_and_stays_distinct():
    from ovos_memory_plugins.recency import RecencyMemory

    url = fresh_url()
    with RecencyMemory({"db_url": url, "max_history": 0}) as memory:
        for sid in ("a\x00b", "a\ue000b", "a\ue0000b", "ab"):
            _exchange(memory, sid, f"q {sid}", "a\x00\ue000 end")
        assert sorted(memory.sessions()) == sorted(["a\x00b", "a\ue000b", "a\ue0000b", "ab"])
        assert [m.content for m in memory.get_history("a\x00b")] == ["q a\x00b", "a\x00\ue000 end"]
        assert memory.get_history("a\ue0000b")[0].content == "q a\ue0000b"


@pytest.mark.parametrize("scope", ["session", "global"])
def test_a_nul_character_in_a_message_costs_no_fact_of_any_session(scope):
    from ovos_memory_plugins.entity import EntityMemory

    with EntityMemory({"db_url": fresh_url(), "api_url": None, "scope": scope}) as memory:
        _exchange(memory, "kitchen", "my name is Ana", "hi Ana")
        _exchange(memory, "kitchen", "I live in Porto", "nice")
        assert memory.flush(patience(30))
        before = memory.facts("kitchen")
        _exchange(memory, "bed\x00room", "I like jazz\x00", "cool")  # a paste, a bad decoder
        assert memory.flush(patience(30))
        assert set(before) <= set(memory.facts("kitchen")) and any("Ana" in f for f in before)
        assert any("jazz\x00" in f for f in memory.facts("bed\x00room")), memory.export("bed\x00room")
        context = memory.build_conversation_context("who am I?", "kitchen")
        assert any("Ana" in m.content for m in context[:-1])


def test_a_record_keeps_nul_characters_and_their_escape_text_exactly():
    from ovos_memory_plugins.storage import open_record_store

    store = open_record_store(fresh_url(), table="nul")
    try:
        record = {"a\x00": ["x\x00y", "\\u0000", "\\\x00", "\ue000 0"], "n": 1}
        store.save("s\x00", record)
        assert store.load("s\x00") == record
        assert store.load_field("s\x00", "a\x00") == record["a\x00"]
        assert store.update("s\x00", lambda r: {**r, "n": 2})["a\x00"] == record["a\x00"]
    finally:
        store.close()


def _open_lexical(url, queue):
    from ovos_memory_plugins.lexical import LexicalMemory

    try:
        with LexicalMemory({"db_url": url}) as memory:
            _exchange(memory, "s", "hello", "world")
        queue.put("ok")
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(repr(exc))


def test_servers_opening_a_new_store_at_once_create_its_schema_once():
    url = fresh_url()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_open_lexical, args=(url, queue)) for _ in range(6)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=patience(120)) for _ in procs]
    for proc in procs:
        proc.join(patience(60))
    assert results == ["ok"] * 6
    with connect(url) as con:
        rows = con.execute("SELECT component, count(*) FROM ovos_memory_migrations GROUP BY component "
                           "HAVING count(*) > 1 AND count(*) <> max(version)").fetchall()
        assert rows == []  # each script recorded once
        assert con.execute("SELECT count(*) FROM lexical_memory_docs").fetchone()[0] == 6


def test_a_store_migrated_by_a_newer_package_is_refused_not_damaged():
    url = fresh_url()
    db = open_pg_database(url)
    try:
        db.migrate("demo", ["CREATE TABLE demo (x int);"])
        db.execute("INSERT INTO ovos_memory_migrations (component, version) VALUES ('demo', 2)")
        with pytest.raises(MigrationError, match="newer than this package"):
            db.migrate("demo", ["CREATE TABLE demo (x int);"])
        with pytest.raises(MigrationError, match="cannot migrate"):  # a failing script leaves nothing
            db.migrate("broken", ["CREATE TABLE half (x int); CREATE TABLE half (x int);"])
        assert db.execute("SELECT to_regclass('half') IS NULL")[0][0]
    finally:
        release_pg_database(db)


def test_a_store_or_memory_that_fails_to_start_keeps_no_connection_open(monkeypatch):
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.storage import open_record_store, postgres
    from ovos_memory_plugins.storage.postgres.documents import PgDocumentLog
    from ovos_memory_plugins.storage.postgres.stores import PgRecordStore

    broken = ("CREATE TABLE {t} (x int); CREATE TABLE {t} (x int);",)  # fails half way, every time
    monkeypatch.setattr(PgRecordStore, "migrations", broken)
    monkeypatch.setattr(PgDocumentLog, "migrations", broken)
    url = fresh_url()
    with pytest.raises(MigrationError):
        open_record_store(url, table="broken")
    with pytest.raises(MigrationError):
        LexicalMemory({"db_url": url})
    assert url not in [db.url for db in postgres._shared.values()], "a database stayed open with nobody to close it"


def test_a_connection_that_fails_its_first_statement_is_closed(monkeypatch):
    import psycopg

    from ovos_memory_plugins.errors import StorageError
    from ovos_memory_plugins.storage.postgres import PgDatabase

    made, real = [], PgDatabase._connect

    def connect(self):
        raw = real(self)
        made.append(raw)
        monkeypatch.setattr(raw, "execute", fail)  # the liveness lock, its first statement, fails
        return raw

    def fail(*args, **kwargs):
        raise psycopg.OperationalError("the server went away")

    monkeypatch.setattr(PgDatabase, "_connect", connect)
    with pytest.raises(StorageError):
        open_pg_database(fresh_url())
    assert made and all(raw.closed for raw in made), "a connection nobody holds was left open"


def _continue_answer(url, tag, count, go):
    from ovos_memory_plugins.recency import RecencyMemory

    with RecencyMemory({"db_url": url, "max_history": 0}) as memory:
        go.wait()  # every writer connected (a barrier): they overlap from the first update
        for n in range(count):
            memory.update_history([AgentMessage(A, f"{tag}-{n}")], "shared")


def test_writers_on_several_connections_continuing_one_answer_lose_no_part():
    # Each update continues the last ASSISTANT message (they are merged): a writer that read the
    # tail before another wrote would fold into a stale tail and lose a part. The session lock
    # makes them take turns.
    from ovos_memory_plugins.recency import RecencyMemory

    url = fresh_url()
    with RecencyMemory({"db_url": url, "max_history": 0}) as memory:
        memory.update_history([AgentMessage(U, "tell me a long story")], "shared")
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Barrier(4)
    procs = [ctx.Process(target=_continue_answer, args=(url, f"p{i}", 100, go)) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(patience(300))
        assert proc.exitcode == 0
    with RecencyMemory({"db_url": url, "max_history": 0}) as memory:
        history = memory.get_history("shared")
    assert [m.role for m in history] == [U, A]
    parts = history[1].content.split("\n")
    assert sorted(parts) == sorted(f"p{i}-{n}" for i in range(4) for n in range(100))


def test_a_connection_dropped_while_idle_costs_no_turn_and_no_update():
    from ovos_memory_plugins.lexical import LexicalMemory

    with LexicalMemory({"db_url": fresh_url()}) as memory:
        _exchange(memory, "s", "my cat is Tom", "noted")
        with connect() as admin:  # what a server restart or a firewall's idle timeout does
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                          "AND query NOT ILIKE '%pg_stat_activity%' AND datname = current_database() "
                          "AND application_name = 'ovos-memory'")
        time.sleep(2.5)  # idle long enough for the next write to check the connection first
        _exchange(memory, "s", "my dog is Rex", "noted")
        assert [h.source for h in memory.search("dog", "s")] == ["s_1"]
        assert len(memory.get_history("s")) == 4


def test_an_answer_after_messages_that_answered_nothing_pairs_with_its_question(monkeypatch):
    # The window's look back for the question runs as SQL on PostgreSQL too.
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.storage import retrieval

    with LexicalMemory({"db_url": fresh_url()}) as memory:
        memory.update_history([AgentMessage(U, "what is the weather in Porto")], "s")
        memory.update_history([AgentMessage(A, "\n\n")], "s")
        memory.update_history([AgentMessage(MessageRole.SYSTEM, "the weather service says sunny")], "s")
        memory.update_history([AgentMessage(A, "It is sunny.")], "s")
        memory.update_history([AgentMessage(A, "Take a hat.")], "s")  # the answer's next part, at once
        monkeypatch.setattr(retrieval, "CONTINUATION_S", -1.0)  # an answer alone later pairs with nothing
        memory.update_history([AgentMessage(A, "Good morning!")], "s")
        assert [d["content"] for d in memory.export("s")["documents"]] == [
            "Q: what is the weather in Porto\nA: It is sunny.", "Q: what is the weather in Porto\nA: Take a hat.",
            "Q: \nA: Good morning!"]


def test_exchanges_imported_into_a_keyword_memory_are_found_at_once():
    # Its index is written in the import's own transaction on PostgreSQL (no background worker).
    from ovos_memory_plugins.lexical import LexicalMemory

    with LexicalMemory({"db_url": fresh_url()}) as memory:
        assert memory.import_exchanges("s", [{"question": "my cat is Tom", "answer": "noted", "ts": 1682935200.0},
                                             {"question": "I like pizza", "answer": "ok"}]) == 2
        assert [h.source for h in memory.search("cat", "s")] == ["s_0"]
        assert memory._store.docs.count_pending() == 0


def _rows(db, table):
    return [r[0] for r in db.execute(f"SELECT x FROM {table} ORDER BY x")]


@pytest.fixture
def pg_db():
    db = open_pg_database(fresh_url())
    db.migrate("tx-test", ["CREATE TABLE tx (x int UNIQUE);"])
    yield db
    release_pg_database(db)


def test_a_failed_savepoint_block_is_undone_whether_or_not_its_statements_were_sent(pg_db):
    from ovos_memory_plugins.errors import StorageError

    with pg_db.atomic() as con:
        con.execute("INSERT INTO tx VALUES (1)")
        with pytest.raises(StorageError), pg_db.atomic() as inner:
            inner.execute("INSERT INTO tx VALUES (2)")
            inner.execute("INSERT INTO tx VALUES (1)")  # a unique violation: the block goes, (2) with it
        with pytest.raises(RuntimeError), pg_db.atomic() as inner:
            inner.defer("INSERT INTO tx VALUES (?)", [(3,)])  # waiting, never sent: the block failed
            raise RuntimeError("before any statement")
        with pytest.raises(StorageError), pg_db.atomic() as inner:
            inner.defer("INSERT INTO tx VALUES (?)", [(1,)])  # a deferred write fails inside its own block
        with pg_db.atomic() as inner:
            inner.defer("INSERT INTO tx VALUES (?)", [(4,)])
        con.defer("INSERT INTO tx VALUES (?)", [(5,), (6,)])  # nothing reads them: sent with COMMIT
    assert _rows(pg_db, "tx") == [1, 4, 5, 6]


def test_an_error_swallowed_outside_a_savepoint_fails_the_commit_loudly(pg_db):
    from ovos_memory_plugins.errors import StorageError

    with pytest.raises(StorageError, match="nothing of it was written"), pg_db.atomic() as con:
        con.execute("INSERT INTO tx VALUES (7)")
        with pytest.raises(Exception, match="duplicate key"):  # psycopg's own error, caught by a careless caller
            con.execute("INSERT INTO tx VALUES (7)")
    with pytest.raises(StorageError), pg_db.atomic() as con:  # a deferred write failing at COMMIT
        con.execute("INSERT INTO tx VALUES (8)")
        con.defer("INSERT INTO tx VALUES (?)", [(8,)])
    assert _rows(pg_db, "tx") == []
    with pg_db.atomic() as con:  # the connection is usable afterwards
        con.execute("INSERT INTO tx VALUES (9)")
    assert _rows(pg_db, "tx") == [9]


@pytest.mark.parametrize("found_by", ["write", "ping", "read"])
def test_a_connection_found_dead_has_the_other_threads_check_theirs_before_writing(found_by, tmp_path):
    """A thread that finds its connection dead (the server restarted), by a write that fails, by
    the check an idle spell makes before a write, or by a read, tells the others: their own
    connections, used moments before and dead too, are checked before their next transaction
    instead of failing it (only an idle spell of PING_AFTER_S made them check before)."""
    import concurrent.futures

    from ovos_memory_plugins.errors import StorageError
    from ovos_memory_plugins.storage import postgres
    from tests._postgres import RoundTrips

    proxy = RoundTrips(tmp_path)
    db = open_pg_database(proxy.url(fresh_url()))
    other = concurrent.futures.ThreadPoolExecutor(1)  # a background worker's thread, its own connection

    def write(x: int) -> None:
        with db.atomic() as con:
            con.execute("INSERT INTO tx VALUES (?)", (x,))

    try:
        db.migrate("tx-test", ["CREATE TABLE tx (x int UNIQUE);"])
        write(1)
        if found_by == "ping":  # this thread's connection idle long enough to be checked first
            db._session().used -= postgres.PING_AFTER_S + 1
        other.submit(write, 2).result()
        proxy.cut()
        time.sleep(0.3)  # both connections are gone now
        proxy.restore()
        if found_by == "write":
            with pytest.raises(StorageError):  # a write in flight is never retried: lost to its caller
                write(3)
        elif found_by == "ping":
            write(3)  # checked, found dead, replaced: stored
        else:
            with pytest.raises(StorageError), db.read() as con:
                con.execute("SELECT count(*) FROM tx")
        other.submit(write, 4).result()  # checked first: replaced, not failed
        write(5)
        assert _rows(db, "tx") == ([1, 2, 3, 4, 5] if found_by == "ping" else [1, 2, 4, 5])
    finally:
        other.shutdown()
        release_pg_database(db)
        proxy.close()


def test_ddl_through_the_raw_connection_is_part_of_the_transaction(pg_db):
    with pytest.raises(RuntimeError), pg_db.atomic() as con:
        pg_db.lock_session(con, "tx", "s")  # waiting: reaching for raw sends it (and BEGIN) first
        con.raw.execute(b"CREATE TABLE made_in_tx (x int)")
        raise RuntimeError("roll back")
    assert pg_db.execute("SELECT to_regclass('made_in_tx') IS NULL")[0][0]


def test_a_session_lock_is_held_before_the_statement_after_it_reads(pg_db):
    # Writer A locks the session and reads; B then locks and reads: B's read must wait for A's
    # commit and see A's row (its lock went with its statement, and was granted before it ran).
    import threading

    inside, release, seen = threading.Event(), threading.Event(), []

    def writer_a():
        with pg_db.atomic() as con:
            pg_db.lock_session(con, "tx", "s")
            con.execute("SELECT count(*) FROM tx").fetchone()
            inside.set()
            release.wait(patience(30))
            con.execute("INSERT INTO tx VALUES (10)")

    def writer_b():
        with pg_db.atomic() as con:
            pg_db.lock_session(con, "tx", "s")
            seen.append(con.execute("SELECT count(*) FROM tx").fetchone()[0])

    a = threading.Thread(target=writer_a)
    a.start()
    assert inside.wait(patience(30))
    b = threading.Thread(target=writer_b)
    b.start()
    b.join(0.5)
    assert b.is_alive() and not seen  # waiting for A's lock
    release.set()
    a.join(patience(30))
    b.join(patience(30))
    assert seen == [1]


def test_a_block_that_runs_nothing_sends_nothing_and_an_update_is_four_round_trips(tmp_path):
    from ovos_memory_plugins.lexical import LexicalMemory
    from tests._postgres import RoundTrips

    proxy = RoundTrips(tmp_path)
    try:
        db = open_pg_database(proxy.url(fresh_url()))
        try:
            db.execute("SELECT 1")  # a fresh connection is checked before its first transaction
            proxy.reset()
            with db.atomic() as con:
                db.lock_session(con, "tx", "s")
            assert proxy.count == 0
        finally:
            release_pg_database(db)
        with LexicalMemory({"db_url": proxy.url(fresh_url())}) as memory:
            for n in range(3):
                _exchange(memory, "s", f"my cat number {n} is Tom", "noted")
            proxy.reset()
            _exchange(memory, "s", "my cat number 2 is Tom", "noted")  # words stemmed before: no lookup
            # BEGIN + lock + the window's tail; its rows + trim + the document; savepoint + postings; COMMIT.
            # Each statement on its own round trip took 11.
            assert proxy.count == 4
    finally:
        proxy.close()


def test_a_hybrid_exchange_whose_commit_fails_is_kept_by_every_member_once(monkeypatch):
    # On PostgreSQL a composite's members write one transaction: if its commit fails (the
    # connection dies after the last member wrote), no member keeps a partial copy, and each
    # holds the exchange again, to store it with the next write (an export here).
    from ovos_memory_plugins.composite import CompositeMemory
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.storage.postgres import open_pg_database
    from ovos_memory_plugins.testing.llm import closed_port_url

    url = fresh_url()
    members = [{"module": "ovos-memory-plugin-recency", "config": {}},
               {"module": "ovos-memory-plugin-lexical", "config": {}},
               {"module": "ovos-memory-plugin-entity", "config": {"api_url": closed_port_url()}}]
    with CompositeMemory({"db_url": url, "members": members}) as memory:
        original = EntityMemory.update_history

        def then_lose_the_connection(self, messages, session_id):
            original(self, messages, session_id)
            db = open_pg_database(url)  # the members' own: this thread's connection
            try:
                pid = db.execute("SELECT pg_backend_pid()")[0][0]
            finally:
                release_pg_database(db)
            with connect() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

        monkeypatch.setattr(EntityMemory, "update_history", then_lose_the_connection)
        _exchange(memory, "s", "my dog is called Rex", "noted")
        monkeypatch.undo()
        assert memory.degraded(), "an exchange whose commit failed is held, and that must be told"
        with connect() as admin:  # nothing of it was committed
            schema = schema_of(url)
            assert admin.execute(f'SELECT count(*) FROM "{schema}".lexical_memory_docs').fetchone()[0] == 0
        _exchange(memory, "s", "my cat is called Tom", "noted")  # stored everywhere, after the held one
        assert memory.flush(patience(30))
        exported = memory.export("s")
        assert [m["content"] for m in exported["members"]["ovos-memory-plugin-recency"]["window"]] == [
            "my dog is called Rex", "noted", "my cat is called Tom", "noted"]
        assert len(exported["members"]["ovos-memory-plugin-lexical"]["documents"]) == 2
        facts = exported["members"]["ovos-memory-plugin-entity"]["facts"]
        assert sorted(f["text"] for f in facts) == ["User's cat is called Tom", "User's dog is called Rex"]


# -- the shared job queues -----------------------------------------------------------------------
def _claim_and_die(url, ready):
    from ovos_memory_plugins.storage.postgres.jobs import PgJobQueue

    queue = PgJobQueue(open_pg_database(url), "jobs", lease_s=3600)
    assert queue.claim() is not None
    ready.set()
    time.sleep(3600)  # killed holding the job


def test_a_job_runs_once_across_workers_and_a_dead_workers_job_is_taken_at_once():
    from ovos_memory_plugins.storage.postgres.jobs import PgJobQueue

    url = fresh_url()
    db = open_pg_database(url)
    try:
        queue = PgJobQueue(db, "jobs", lease_s=3600)
        queue.add("alpha")
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        worker = ctx.Process(target=_claim_and_die, args=(url, ready))
        worker.start()
        assert ready.wait(patience(60))
        assert queue.claim() is None  # held by a live worker: never run twice
        worker.kill()
        worker.join()
        deadline = time.monotonic() + patience(10)
        job = None
        while job is None and time.monotonic() < deadline:  # the server notices the connection is gone
            job = queue.claim()
            time.sleep(0.05)
        assert job is not None and job.key == "alpha"  # long before its hour-long lease ends
        queue.add("alpha")  # new work while it runs: it must run again
        queue.done(job)
        again = queue.claim()
        assert again is not None and again.key == "alpha"
        queue.done(again)
        assert queue.claim() is None and len(queue) == 0
    finally:
        release_pg_database(db)


def _extract_facts(url, count, tag):
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.testing.llm import closed_port_url

    with EntityMemory({"db_url": url, "api_url": closed_port_url(), "request_timeout": 1, "max_facts": 0}) as memory:
        for n in range(count):
            memory.update_history([AgentMessage(U, f"I like {tag}{n:03d}"), AgentMessage(A, "ok")], "s")
        assert memory.flush(patience(120))


def test_facts_queued_by_several_servers_are_extracted_once_each():
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.testing.llm import closed_port_url

    url = fresh_url()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_extract_facts, args=(url, 30, f"zz{i}x")) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(patience(300))
        assert proc.exitcode == 0
    with EntityMemory({"db_url": url, "api_url": closed_port_url(), "max_facts": 0}) as memory:
        assert memory.flush(patience(60))
        facts = memory.export("s")
    liked = sorted(f["text"] for f in facts["facts"])
    assert len(liked) == 90 and len(set(liked)) == 90 and facts["pending"] == 0
    assert not [c for t, c in schema_cells(url) if t.endswith("_jobs")]  # nothing left queued


def _lease_and_die(url, ready):
    from ovos_memory_plugins.storage.postgres.documents import PgDocumentLog

    db = open_pg_database(url)
    docs = PgDocumentLog(db, "local_rag_docs")
    assert docs.lease(100, str(db.worker_key), 3600)
    ready.set()
    time.sleep(3600)


def test_documents_a_dead_indexer_leased_are_embedded_by_another_server():
    from ovos_memory_plugins.local_rag import LocalRAGMemory
    from ovos_memory_plugins.testing.embeddings import FakeEmbedder

    url = fresh_url()
    config = {"db_url": url, "_embedder": FakeEmbedder()}
    with LocalRAGMemory(config) as memory:
        memory._worker.close()  # stored, never embedded here
        for n in range(5):
            _exchange(memory, "s", f"my hobby number {n} is chess", "nice")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    indexer = ctx.Process(target=_lease_and_die, args=(url, ready))
    indexer.start()
    assert ready.wait(patience(60))
    indexer.kill()
    indexer.join()
    with LocalRAGMemory(config) as memory:
        deadline = time.monotonic() + patience(20)
        while memory._docs.count_pending() and time.monotonic() < deadline:
            memory.flush(patience(10))
        assert memory._docs.count_pending() == 0
        assert len(memory.search("chess hobby", "s", top_k=10)) == 5


def test_memories_on_one_database_that_differ_by_collection_share_no_exchange():
    from ovos_memory_plugins.local_rag import LocalRAGMemory
    from ovos_memory_plugins.testing.embeddings import FakeEmbedder

    url = fresh_url()
    long_name = "a collection with a long name, " * 4
    with LocalRAGMemory({"db_url": url, "_embedder": FakeEmbedder()}) as first, \
            LocalRAGMemory({"db_url": url, "collection": long_name, "_embedder": FakeEmbedder()}) as second:
        _exchange(first, "s", "my zebra is called Zed", "a fine name")
        _exchange(second, "s", "I drink green tea", "lovely")
        assert first.flush(patience(30)) and second.flush(patience(30))
        assert [h.content for h in second.search("zebra called Zed tea", "s", top_k=10)] == \
            ["Q: I drink green tea\nA: lovely"]
        assert [m.content for m in first.get_history("s")] == ["my zebra is called Zed", "a fine name"]
    made = [n for n in _identifiers(url) if n.startswith("local_rag__")]
    assert made and all(len(n) < 63 for n in made), f"names PostgreSQL may have cut: {made}"
    with LocalRAGMemory({"db_url": url, "collection": long_name, "_embedder": FakeEmbedder()}) as second:
        assert [m.content for m in second.get_history("s")] == ["I drink green tea", "lovely"]


# -- keyword ranking ------------------------------------------------------------------------------
CORPUS = [
    ("my dog Rex likes long walks in the park", "Rex sounds like a happy dog"),
    ("I work as a nurse at the city hospital", "nursing is demanding work"),
    ("we adopted a second dog last spring", "two dogs, lovely"),
    ("my sister lives in Lisbon near the river", "Lisbon is beautiful"),
    ("I am training for a marathon in October", "good luck with the training"),
    ("the park near my house has a lake", "a lake in the park, nice"),
]
QUERIES = ["what is my dog called", "where does my sister live", "park lake walks", "marathon training october",
           "hospital nurse", "dogs"]


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_keyword_scores_on_postgresql_are_fts5_bm25_for_a_one_session_store(weight, tmp_path):
    from ovos_memory_plugins.lexical import LexicalMemory

    base = {"retrieval": {"neighbour_weight": weight}}
    with LexicalMemory({**base, "db_path": str(tmp_path / "l.db"), "ram_index": False}) as sqlite, \
            LexicalMemory({**base, "db_url": fresh_url()}) as postgres:
        for memory in (sqlite, postgres):
            for question, answer in CORPUS:
                _exchange(memory, "s", question, answer)
            memory.flush()
        for query in QUERIES:
            want = {h.source: h.score for h in sqlite.search(query, "s", top_k=6)}
            got = {h.source: h.score for h in postgres.search(query, "s", top_k=6)}
            assert got.keys() == want.keys(), query
            for source, score in want.items():
                assert got[source] == pytest.approx(score, rel=1e-9, abs=1e-12), (query, source)
        # Score fusion asks for the score of any exchange, a match or not: the same as FTS5's too.
        candidates = [h for query in QUERIES for h in sqlite.search(query, "s", top_k=3)]
        for query in QUERIES:
            want_scores = sqlite.score_candidates(query, candidates, "s")
            got_scores = postgres.score_candidates(query, candidates, "s")
            assert None not in got_scores and any(got_scores) and not all(got_scores), query
            assert got_scores == pytest.approx(want_scores, rel=1e-9, abs=1e-12), query


def test_keyword_statistics_are_the_sessions_own():
    from ovos_memory_plugins.lexical import LexicalMemory

    with LexicalMemory({"db_url": fresh_url()}) as memory:
        _exchange(memory, "alice", "my dog is Rex", "ok")
        _exchange(memory, "alice", "I like tea", "ok")
        before = memory.search("dog", "alice")[0].score
        for n in range(20):  # another user talks about dogs all day
            _exchange(memory, "bob", f"dog dog dog {n}", "ok")
        assert memory.search("dog", "alice")[0].score == pytest.approx(before)
        assert {h.metadata["session_id"] for h in memory.search("dog", None, top_k=30)} == {"alice", "bob"}


def test_a_tokenizer_postgresql_cannot_follow_is_a_config_error():
    from ovos_memory_plugins.lexical import LexicalMemory

    with pytest.raises(ConfigError, match="trigram"):
        LexicalMemory({"db_url": fresh_url(), "tokenizer": "trigram"})


def _identifiers(url):
    """Every name in the store's schema: relations, functions, triggers, constraints."""
    schema = schema_of(url)
    with connect(url) as con:
        return [r[0] for r in con.execute(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "UNION SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s "
            "UNION SELECT conname FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace "
            "WHERE n.nspname = %s", (schema, schema, schema)).fetchall()]


def test_the_longest_lexical_table_name_postgresql_can_hold_works_and_a_longer_one_is_a_config_error(tmp_path):
    from ovos_memory_plugins._cli.check import config_problems
    from ovos_memory_plugins.lexical import PG_TABLE_MAX, LexicalMemory

    url = fresh_url()
    longest = "persona_" + "x" * (PG_TABLE_MAX - 8)
    with LexicalMemory({"db_url": url, "table": longest, "retrieval": {"neighbour_weight": 0.5}}) as memory:
        _exchange(memory, "s", "my dog is called Rex", "nice")
        assert memory.flush(patience(30))
        assert memory.search("dog Rex", "s")[0].content.startswith("Q: my dog")
    made = [n for n in _identifiers(url) if n.startswith(longest[:20])]
    assert made and all(n.startswith(longest) for n in made), f"names PostgreSQL cut: {made}"
    too_long = {"db_url": url, "table": longest + "x"}
    with pytest.raises(ConfigError, match=f"'table' is {PG_TABLE_MAX + 1} characters long.*at most {PG_TABLE_MAX}"):
        LexicalMemory(too_long)
    assert any("'table'" in p for p in config_problems("ovos-memory-plugin-lexical", too_long))
    with LexicalMemory({"db_path": str(tmp_path / "lexical.db"), "table": longest + "x" * 30}) as memory:
        _exchange(memory, "s", "my dog is called Rex", "nice")  # SQLite has no such limit


# -- vectors --------------------------------------------------------------------------------------
def test_vectors_search_exactly_then_through_hnsw_without_losing_a_small_sessions_rows():
    import numpy as np

    from ovos_memory_plugins.pgvector import PgEmbeddingsDB

    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(400, 16)).astype(np.float32)
    with PgEmbeddingsDB({"url": fresh_url(), "hnsw_above": 100, "ef_search": 40}) as db:
        keys = [f"k{i}" for i in range(400)]
        sessions = ["big"] * 396 + ["small"] * 4
        db.add_embeddings_batch(keys, list(vectors), [{"session_id": s, "n": i} for i, s in enumerate(sessions)])
        query = vectors[3] + 0.01
        exact = db.query(query, top_k=5)
        assert exact[0][0] == "k3"
        assert db.build_index() is True and db._has_index(db._tables["ovos_embeddings"][0])
        approximate = db.query(query, top_k=5)
        assert [k for k, _ in approximate][:3] == [k for k, _ in exact][:3]
        small = db.query(query, top_k=5, where={"session_id": "small"})
        assert sorted(k for k, _ in small) == ["k396", "k397", "k398", "k399"]  # all of them, none lost
        assert [k for k, _ in db.query(query, top_k=5, where={"n": 397})] == ["k397"]
        cos = db.similarities(query, ["k3", "missing"])
        assert cos[0] == pytest.approx(1 - exact[0][1], abs=1e-6) and cos[1] is None
        db.delete_embeddings_batch(["k3"])
        assert db.get_embeddings("k3") is None and db.count_embeddings_in_collection() == 399


def test_whether_a_collection_has_its_hnsw_index_is_asked_once_a_minute_not_every_search(monkeypatch):
    import numpy as np

    from ovos_memory_plugins.pgvector import PgEmbeddingsDB

    vectors = np.random.default_rng(8).normal(size=(150, 16)).astype(np.float32)
    with PgEmbeddingsDB({"url": fresh_url(), "hnsw_above": 100}) as db:
        db._maybe_build_index = lambda *args: None  # no index: every search stays exact
        db.add_embeddings_batch([f"k{i}" for i in range(150)], list(vectors), [{"n": i} for i in range(150)])
        asked = []
        has_index = db._has_index
        monkeypatch.setattr(db, "_has_index", lambda table: asked.append(table) or has_index(table))
        for _ in range(3):
            assert db.query(vectors[5], top_k=1)[0][0] == "k5"
        assert len(asked) == 1


def test_closing_a_collection_during_its_background_index_build_stops_the_build_and_its_connection():
    import numpy as np

    from ovos_memory_plugins.pgvector import PgEmbeddingsDB
    from ovos_memory_plugins.storage.postgres import open_pg_database, release_pg_database

    url = fresh_url()
    vectors = np.random.default_rng(9).normal(size=(3000, 64)).astype(np.float32)
    keeper = open_pg_database(url)  # another store of the process keeps the database open
    try:
        db = PgEmbeddingsDB({"url": url, "hnsw_above": 100})
        db.add_embeddings_batch([f"k{i}" for i in range(3000)], list(vectors), [{"n": i} for i in range(3000)])
        assert db._threads  # the build started in the background
        db.close()
        assert not any(t.is_alive() for t in db._threads)
        assert not db._builders
        with connect(url) as admin:  # no connection of ours is left building
            assert admin.execute("SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'CREATE INDEX%%' "
                                 "AND state = 'active'").fetchone()[0] == 0
    finally:
        release_pg_database(keeper)


def test_a_collection_dropped_by_another_server_is_found_again():
    from ovos_memory_plugins.pgvector import PgEmbeddingsDB

    url = fresh_url()
    with PgEmbeddingsDB({"url": url}) as here, PgEmbeddingsDB({"url": url}) as there:
        here.add_embeddings("a", [1.0, 0.0], {"session_id": "s"})
        assert [k for k, _ in here.query([1.0, 0.0])] == ["a"]
        there.delete_collection("ovos_embeddings")  # a new embedder: the other server starts over
        there.add_embeddings("b", [0.0, 1.0, 0.0], {"session_id": "s"})
        assert [k for k, _ in here.query([0.0, 1.0, 0.0])] == ["b"]
        here.add_embeddings("c", [0.0, 0.0, 1.0], {"session_id": "s"})
        assert there.count_embeddings_in_collection() == 2


def test_a_role_that_may_not_create_pgvector_is_told_what_the_operator_runs():
    from ovos_memory_plugins.errors import StorageError
    from ovos_memory_plugins.pgvector import ensure_pgvector

    class NoVector:
        path = "postgresql://ovos@db/memory"

        def has_extension(self, name):
            return False

        def atomic(self):
            raise StorageError("permission denied to create extension \"vector\"")

    with pytest.raises(StorageError, match="run once: CREATE EXTENSION vector"):
        ensure_pgvector(NoVector())  # type: ignore[arg-type]


# -- the command line -----------------------------------------------------------------------------
def test_ovos_memory_commands_work_against_a_postgresql_store(tmp_path):
    from ovos_memory_plugins.lexical import LexicalMemory

    url = fresh_url()
    config = json.dumps({"db_url": url})
    with LexicalMemory({"db_url": url}) as memory:
        _exchange(memory, "kitchen", "my dog is called Biscuit", "lovely name")
        _exchange(memory, "bedroom", "I sleep badly", "sorry to hear")

    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "ovos_memory_plugins", *args, "--module",
                               "ovos-memory-plugin-lexical", "--config", config], capture_output=True, text=True,
                              timeout=patience(120), env={**os.environ, "COLUMNS": "200"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert cli("sessions").split() == ["bedroom", "kitchen"]
    assert "Biscuit" in cli("show", "kitchen")
    assert "Biscuit" in cli("search", "dog name", "--session", "kitchen")
    assert "kitchen" in cli("stats")
    exported = tmp_path / "kitchen.json"
    exported.write_text(cli("export", "kitchen"))
    assert json.loads(exported.read_text())["documents"][0]["content"].startswith("Q: my dog")
    assert "forgot" in cli("forget", "kitchen")
    assert cli("sessions").split() == ["bedroom"]
    assert not [c for _, c in schema_cells(url) if "kitchen" in c or "Biscuit" in c]
    assert "imported 1 session" in cli("import", str(exported))
    assert "Biscuit" in cli("search", "dog name", "--session", "kitchen")
    assert schema_of(url)


# -- the deployment page, followed ------------------------------------------------------------------
DEPLOYMENT = os.path.join(REPO, "docs", "deployment.md")


def _page_block(language: str, holding: str) -> str:
    with open(DEPLOYMENT, encoding="utf-8") as page:
        blocks = re.findall(rf"```{language}\n(.*?)```", page.read(), re.S)
    return next(block for block in blocks if holding in block)


def _database_cells(url: str) -> list[str]:
    with connect(url) as con:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        return [row[0] for table in tables for row in con.execute(f'SELECT t::text FROM public."{table}" AS t')]


def test_the_deployment_page_followed_gives_two_servers_one_memory(tmp_path):
    """The page's SQL (a login role owning its database, pgvector created by the superuser), its
    persona JSON (the hybrid preset on ``db_url``) and its check commands, run as written: what
    server A heard, server B recalls, and every command works as the role that owns the store."""
    from psycopg.conninfo import conninfo_to_dict

    from ovos_memory_plugins.testing import closed_port_url

    tag = uuid.uuid4().hex[:8]
    role, database = f"ovos_{tag}", f"memory_{tag}"
    socket_dir = str(conninfo_to_dict(fresh_url())["host"])
    url = f"postgresql://{role}@/{database}?host={urllib.parse.quote(socket_dir, safe='')}"
    sql = re.sub(r"\bmemory\b", database, re.sub(r"\bovos\b", role, _page_block("sql", "CREATE ROLE")))
    persona = _page_block("json", '"memory_module"').replace("postgresql://ovos@db.lan/memory", url)
    persona_file = tmp_path / "household.json"
    data = json.loads(persona)
    data["ovos-chat-openai-plugin"]["api_url"] = closed_port_url()
    persona_file.write_text(json.dumps(data))
    superuser = connect()
    try:
        con = superuser
        for statement in filter(None, (s.strip() for s in sql.split(";"))):
            if statement.startswith("\\c"):  # psql's connect: on to the new database, still superuser
                con = connect(re.sub(r"/postgres\?", f"/{database}?", os.environ[URL_ENV]))
                statement = statement.split("\n", 1)[1].strip()
            con.execute(statement)
        assert con is not superuser, "the page connects to the new database before CREATE EXTENSION"
        con.close()

        server_a = _python("""
            import sys
            from ovos_memory_plugins._cli.persona import MemorySlot, load_persona
            persona = load_persona(sys.argv[1])
            slot = MemorySlot(persona.memory_module, persona.memory_config)
            slot.remember("my dog is called Biscuit", "What a lovely name!", "kitchen")
            slot.close()
        """, str(persona_file))
        assert server_a.returncode == 0, server_a.stderr
        server_b = _python("""
            import sys
            from ovos_memory_plugins._cli.persona import MemorySlot, load_persona
            persona = load_persona(sys.argv[1])
            slot = MemorySlot(persona.memory_module, persona.memory_config)
            print("\\n".join(m.content for m in slot.context("what is my dog called?", "kitchen")))
            slot.close()
        """, str(persona_file))
        assert server_b.returncode == 0, server_b.stderr
        assert "Biscuit" in server_b.stdout

        outputs = {}
        for line in _page_block("bash", "ovos-memory stats").strip().splitlines():
            words = line.replace("SESSION", "kitchen").replace('"dog"', "dog").split()
            target = None
            if ">" in words:
                words, target = words[:words.index(">")], words[words.index(">") + 1]
            done = subprocess.run([sys.executable, "-m", "ovos_memory_plugins", *words[1:]], capture_output=True,
                                  text=True, cwd=tmp_path, timeout=patience(180),
                                  env={**os.environ, "PYTHONPATH": REPO, "COLUMNS": "200"})
            assert done.returncode == 0, f"{line}: {done.stderr}"
            if target:
                (tmp_path / target).write_text(done.stdout)
            outputs[words[1]] = done.stdout
            if words[1] == "forget":
                assert not [c for c in _database_cells(url) if "Biscuit" in c or "kitchen" in c]
        assert "kitchen" in outputs["sessions"].split()
        assert "Biscuit" in outputs["search"] and "Biscuit" in outputs["show"]
        assert "Biscuit" in (tmp_path / "backup.json").read_text()
        assert any("Biscuit" in c for c in _database_cells(url)), "the import brought the session back"
    finally:
        superuser.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        superuser.execute(f'DROP ROLE IF EXISTS "{role}"')
        superuser.close()


def _pg_memory(kind: str, url: str):
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.longterm import LongTermMemory
    from ovos_memory_plugins.recency import RecencyMemory

    if kind == "composite":  # the members share one transaction per exchange
        from ovos_memory_plugins.composite import CompositeMemory

        return CompositeMemory({"db_url": url, "members": [{"module": "ovos-memory-plugin-recency"},
                                                           {"module": "ovos-memory-plugin-lexical"}]})
    config = {"db_url": url}
    if kind in ("longterm", "entity"):
        config["api_url"] = None  # offline: the rules and the extractive summary
    return {"recency": RecencyMemory, "lexical": LexicalMemory, "longterm": LongTermMemory,
            "entity": EntityMemory}[kind](config)


def _said(memory, sid: str) -> list[str]:
    """The markers of the user's words in the session's export, in order, from the part that keeps
    them: the window, longterm's messages not summarised yet, or the facts (and those superseded)."""
    data = memory.export(sid)
    if "members" in data:  # a composite: every member holds the same, once each
        said = [_said_in(part) for part in data["members"].values()]
        assert all(s == said[0] for s in said), f"the members differ: {said}"
        return said[0]
    return _said_in(data)


def _said_in(data: dict) -> list[str]:
    parts = data.get("window") or data.get("recent") or [data.get("facts"), data.get("superseded")]
    found = re.findall(r"zq\w+q", json.dumps(parts))
    documents = re.findall(r"zq\w+q", json.dumps([d.get("content") for d in data.get("documents") or []]))
    assert not documents or documents == found, f"the documents {documents} differ from the window {found}"
    return found


@pytest.mark.parametrize("kind", ["recency", "lexical", "longterm", "entity", "composite"])
def test_updates_made_while_the_database_is_down_are_stored_once_it_is_back(kind, tmp_path):
    from tests._postgres import RoundTrips

    proxy = RoundTrips(tmp_path)
    try:
        with _pg_memory(kind, proxy.url(fresh_url())) as memory:
            _exchange(memory, "s", "My name is zqbeforeq.", "noted")
            proxy.cut()
            for n in range(3):  # every turn answered, nothing raised
                assert memory.build_conversation_context("hi", "s")[-1].content == "hi"
                _exchange(memory, "s", f"My name is zqdown{n}q.", "noted")
            assert memory.degraded(), "an outage that loses nothing must still be told"
            assert memory.flush(patience(5)) is False, "flush() said done with updates held"
            proxy.restore()
            _exchange(memory, "s", "My name is zqafterq.", "noted")
            assert memory.flush(patience(30))
            said = _said(memory, "s")
    finally:
        proxy.close()
    expected = ["zqbeforeq", "zqdown0q", "zqdown1q", "zqdown2q", "zqafterq"]
    if kind == "entity":  # one name at a time: the newest holds, the others are superseded
        assert set(said) == set(expected), said
    else:
        assert said == expected, f"the held updates were not stored once each, in order: {said}"


@pytest.mark.parametrize("kind", ["lexical", "composite"])
def test_an_update_held_while_the_database_was_down_keeps_the_time_it_was_said(kind, tmp_path):
    from ovos_memory_plugins._core.clock import said_at
    from tests._postgres import RoundTrips

    hour_ago = time.time() - 3600
    proxy = RoundTrips(tmp_path)
    try:
        with _pg_memory(kind, proxy.url(fresh_url())) as memory:
            with said_at(hour_ago - 60):
                _exchange(memory, "s", "My name is zqbeforeq.", "noted")
            proxy.cut()
            with said_at(hour_ago):  # the turn an hour ago, while the database was down
                _exchange(memory, "s", "My name is zqdownq.", "noted")
            proxy.restore()
            _exchange(memory, "s", "My name is zqafterq.", "noted")
            assert memory.flush(patience(30))
            data = memory.export("s")
    finally:
        proxy.close()
    documents = data["members"]["ovos-memory-plugin-lexical"]["documents"] if kind == "composite" \
        else data["documents"]
    times = {re.search(r"zq\w+q", d["content"]).group(): d["ts"] for d in documents}
    assert abs(times["zqdownq"] - hour_ago) < 1, "stamped when the database came back, not when it was said"
    assert times["zqafterq"] > hour_ago + 3000 and abs(times["zqbeforeq"] - (hour_ago - 60)) < 1


@pytest.mark.parametrize("kind", ["lexical", "composite", "composite+redis"])
@pytest.mark.parametrize("held_before", [False, True])
def test_an_exchange_whose_commit_is_lost_is_stored_once_the_database_is_back(kind, held_before, tmp_path):
    """The connection dies as the exchange's COMMIT is sent: every write before it went through,
    the transaction did not. The exchange (and what was held before it) must be held, not lost;
    a member on a store of its own (Redis), which committed its write, does not store it twice."""
    from tests._postgres import RoundTrips

    proxy = RoundTrips(tmp_path)
    expected = ["zqbeforeq"]
    if kind == "composite+redis":
        from ovos_memory_plugins.composite import CompositeMemory
        from tests._redis import server_url as redis_url

        def make(url):
            return CompositeMemory({"db_url": url, "members": [
                {"module": "ovos-memory-plugin-recency"},
                {"module": "ovos-memory-plugin-redis",
                 "config": {"url": redis_url(), "prefix": f"test:{uuid.uuid4().hex[:12]}", "api_url": None}}]})
    else:
        def make(url):
            return _pg_memory(kind, url)
    try:
        with make(proxy.url(fresh_url())) as memory:
            _exchange(memory, "s", "My name is zqbeforeq.", "noted")
            assert memory.flush(patience(30))
            if held_before:  # an outage first: its update is held, then written with the next one
                proxy.cut()
                _exchange(memory, "s", "My name is zqdownq.", "noted")
                proxy.restore()
                expected.append("zqdownq")
            proxy.cut_at(b"COMMIT")
            _exchange(memory, "s", "My name is zqcutq.", "noted")
            assert memory.degraded(), "an exchange whose commit failed is held, and that must be told"
            assert memory.flush(patience(5)) is False, "flush() said done with the exchange uncommitted"
            proxy.restore()
            _exchange(memory, "s", "My name is zqafterq.", "noted")
            # A background worker whose connection died with the cut may fail one step (flush says
            # False for it) before retrying on a new one.
            deadline = time.monotonic() + patience(60)
            while not memory.flush(patience(5)) and time.monotonic() < deadline:
                time.sleep(0.1)
            said = _said(memory, "s")
    finally:
        proxy.close()
    assert said == [*expected, "zqcutq", "zqafterq"], f"not stored once each, in order: {said}"


def test_a_third_party_member_is_left_alone_when_the_shared_commit_fails(tmp_path, monkeypatch):
    """A member from another package keeps its own store: the composite's failed commit does not
    concern it, and must not fail the turn."""
    from ovos_memory_plugins import composite as composite_module
    from ovos_memory_plugins._core.compat import AgentContextManager
    from ovos_memory_plugins.composite import CompositeMemory
    from tests._postgres import RoundTrips

    class Notes(AgentContextManager):  # an OPM memory plugin of another package: none of our hooks
        seen: list = []

        def get_history(self, session_id):
            return []

        def update_history(self, new_messages, session_id):
            Notes.seen.append(new_messages[0].content)

        def build_conversation_context(self, utterance, session_id):
            return [AgentMessage(U, utterance)]

    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda name: Notes if name == "notes" else real(name))
    proxy = RoundTrips(tmp_path)
    try:
        with CompositeMemory({"db_url": proxy.url(fresh_url()),
                              "members": ["ovos-memory-plugin-recency", "notes"]}) as memory:
            proxy.cut_at(b"COMMIT")
            _exchange(memory, "s", "My name is zqcutq.", "noted")  # must not raise
            proxy.restore()
            _exchange(memory, "s", "My name is zqafterq.", "noted")
            assert memory.flush(patience(30))
            said = _said_in(memory.export("s")["members"]["ovos-memory-plugin-recency"])
    finally:
        proxy.close()
    assert said == ["zqcutq", "zqafterq"] and Notes.seen == ["My name is zqcutq.", "My name is zqafterq."]


@pytest.mark.parametrize("shared", [True, False])
def test_a_composite_started_while_the_database_is_down_starts_its_members_when_it_answers(shared, tmp_path):
    """The persona started before its database: every member waits (the turns answered without
    them), then starts once the server answers and gets what was said meanwhile, in order."""
    from ovos_memory_plugins.composite import CompositeMemory
    from ovos_memory_plugins.errors import StoreUnavailable
    from tests._postgres import RoundTrips

    proxy = RoundTrips(tmp_path)
    proxy.cut()
    url = proxy.url(fresh_url())
    members = [{"module": "ovos-memory-plugin-recency"}, {"module": "ovos-memory-plugin-lexical"}]
    config = {"db_url": url, "members": members} if shared else {
        "members": [{**m, "config": {"db_url": url}} for m in members]}
    try:
        with CompositeMemory(config) as memory:
            assert memory.members == []
            assert set(memory.degraded()) >= {"ovos-memory-plugin-recency", "ovos-memory-plugin-lexical"}
            for n in range(3):
                assert memory.build_conversation_context("hi", "s")[-1].content == "hi"
                _exchange(memory, "s", f"My name is zqdown{n}q.", "noted")
            with pytest.raises(StoreUnavailable):
                memory.forget("s")
            assert memory.flush(0) is False
            proxy.restore()
            deadline = time.monotonic() + patience(60)
            while len(memory.members) < 2 or memory.members[0].memory.get_history("s") == []:
                # on its own (no flush, no turn): the members join, then get what the composite held
                assert time.monotonic() < deadline, f"the members never started: {memory.degraded()}"
                time.sleep(0.1)
            while not memory.flush(patience(5)):
                assert time.monotonic() < deadline, f"the members never started: {memory.degraded()}"
                time.sleep(0.1)
            assert [m.name for m in memory.members] == ["ovos-memory-plugin-recency", "ovos-memory-plugin-lexical"]
            _exchange(memory, "s", "My name is zqafterq.", "noted")
            assert memory.flush(patience(30))
            assert _said(memory, "s") == ["zqdown0q", "zqdown1q", "zqdown2q", "zqafterq"]
            assert any("zqdown1q" in h.content for h in memory.search("zqdown1q", "s"))
            assert not memory.degraded(), memory.degraded()
    finally:
        proxy.close()


@pytest.mark.parametrize("module", ["lexical", "recency", "local_rag"])
def test_a_backend_started_while_the_database_is_down_starts_when_it_answers(module, tmp_path, monkeypatch):
    """A persona whose memory is one backend, started before its database: its turns are answered
    from RAM (what was said since), and once the server answers the backend starts and gets
    every update, in order, with the time it was said."""
    import importlib

    from ovos_memory_plugins._memory import late_start
    from ovos_memory_plugins._memory.waiting import StartingMemory
    from ovos_memory_plugins.errors import StoreUnavailable
    from tests._postgres import RoundTrips

    monkeypatch.setattr(late_start, "FIRST_PAUSE_S", 0.1)
    monkeypatch.setattr(late_start, "MAX_PAUSE_S", 0.5)
    cls = {"lexical": "LexicalMemory", "recency": "RecencyMemory", "local_rag": "LocalRAGMemory"}[module]
    cls = getattr(importlib.import_module(f"ovos_memory_plugins.{module}"), cls)
    proxy = RoundTrips(tmp_path)
    proxy.cut()
    url = proxy.url(fresh_url())
    try:
        with cls({"db_url": url}) as memory:
            assert isinstance(memory, StartingMemory)
            assert "waiting for its store" in memory.degraded()[memory.plugin_name]
            for n in range(3):
                assert memory.build_conversation_context("hi", "s")[-1].content == "hi"
                _exchange(memory, "s", f"My name is zqdown{n}q.", "noted")
            said = time.time()
            with pytest.raises(StoreUnavailable):
                memory.forget("s")
            assert memory.flush(0) is False
            proxy.restore()
            deadline = time.monotonic() + patience(60)
            while not memory.flush(patience(5)):
                assert time.monotonic() < deadline, f"it never started: {memory.degraded()}"
                time.sleep(0.1)
            assert isinstance(memory.memory, cls)
            _exchange(memory, "s", "My name is zqafterq.", "noted")
            assert memory.flush(patience(30))
            assert _said(memory, "s")[-4:] == ["zqdown0q", "zqdown1q", "zqdown2q", "zqafterq"]
            assert not memory.degraded(), memory.degraded()
            if module != "recency":
                hits = memory.search("zqdown2q", "s")
                assert hits and "zqdown2q" in hits[0].content
                assert hits[0].metadata["ts"] <= said, "stored with the time it was caught up"
        with cls({"db_url": url}) as again:  # in the database, for the next process
            assert _said(again, "s")[-4:] == ["zqdown0q", "zqdown1q", "zqdown2q", "zqafterq"]
    finally:
        proxy.close()


@pytest.mark.parametrize("wrong", ["database", "option"])
def test_a_composite_member_whose_url_the_server_refuses_for_good_does_not_wait(wrong, tmp_path):
    """No such database, or an option libpq does not know: no retry can help, so the member is
    left out for good (said), and forget works for the others (and says it is not whole)."""
    from ovos_memory_plugins.composite import CompositeMemory

    url = server_url()
    url = url.replace("/postgres?", "/no_such_db?") if wrong == "database" else url + "&bogus_option=1"
    assert url != server_url()
    with CompositeMemory({"members": [
            {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
            {"module": "ovos-memory-plugin-lexical", "config": {"db_url": url}}]}) as memory:
        assert "failed to start" in memory.degraded()["ovos-memory-plugin-lexical"]
        _exchange(memory, "s", "hello", "hi")
        with pytest.raises(StorageError, match="forgotten by ovos-memory-plugin-recency but not by "
                                               "ovos-memory-plugin-lexical failed to start"):
            memory.forget("s")  # its store may hold the session from before: not whole, and said
        assert memory.get_history("s") == []
        assert memory.flush(0)


def test_check_config_connects_to_each_database_once_and_says_what_it_found(tmp_path, capsys):
    """A database the server refuses (a typo in its name) is an error: no retry will fix it. One
    that does not answer now is a warning: it may be starting."""
    from ovos_memory_plugins.cli import main

    def check(top: str, member: str) -> tuple[int, str]:
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"memory_module": "ovos-memory-plugin-composite", "ovos-memory-plugin-composite": {
            "db_url": top, "members": [{"module": "ovos-memory-plugin-recency"},
                                       {"module": "ovos-memory-plugin-lexical", "config": {"db_url": member}}]}}))
        code = main(["check-config", str(path)])
        return code, capsys.readouterr().err

    good = server_url()
    code, err = check(good, good)
    assert code == 0 and "warning" not in err and "error" not in err, err
    code, err = check(good, good.replace("/postgres?", "/no_such_db?"))
    assert code == 2 and 'database "no_such_db" does not exist' in err, err
    code, err = check(good, "postgresql://ovos:s3cret@127.0.0.1:1/memory")
    assert code == 0 and "cannot connect to" in err and "warning" in err and "s3cret" not in err, err
    code, err = check(good, good + "&options=-cno_such_setting%3D1")  # the server answers, and refuses it
    assert code == 2 and "no_such_setting" in err, err
    code, err = check(good.replace("/postgres?", "/no_such_db?"), good)
    assert code == 2, "a db_url the composite gives its members is checked too"
    for secret in ("postgresql://ovos:s3cr%zzet@127.0.0.1:1/memory", "postgresql://ovos:s3c@ret@127.0.0.1:1/memory"):
        code, err = check(good, secret)  # libpq quotes what it cannot read, or reads a password's end as the host
        assert "s3c" not in err and "zzet" not in err and "ret@" not in err, err


def test_a_session_forgotten_during_an_outage_is_not_written_back_when_the_database_returns(tmp_path):
    from ovos_memory_plugins.errors import MemoryPluginError
    from tests._postgres import RoundTrips

    proxy = RoundTrips(tmp_path)
    try:
        with _pg_memory("lexical", proxy.url(fresh_url())) as memory:
            proxy.cut()
            _exchange(memory, "s", "My name is zqsecretq.", "noted")
            with pytest.raises(MemoryPluginError):  # the database is down: forget says it did not finish
                memory.forget("s")
            proxy.restore()
            _exchange(memory, "other", "I like tea.", "noted")
            assert memory.flush(patience(30))  # nothing held: the forgotten exchange went with the forget
            assert not _said(memory, "s") and "zqsecretq" not in json.dumps(memory.export("other"))
    finally:
        proxy.close()


def _with_options(url: str, options: str) -> str:
    """``url`` with ``options`` added to libpq's (they come after the ones already there)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    query["options"] = [" ".join([*query.get("options", []), options])]
    # quote, not quote_plus: libpq reads "+" as a plus sign, not a space
    encoded = urllib.parse.urlencode(query, doseq=True, quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=encoded))


@pytest.mark.parametrize("kind", ["lexical", "composite"])
def test_a_hung_database_costs_a_turn_seconds_and_loses_nothing(kind, tmp_path, monkeypatch):
    """A server alive but hung (its process stopped) acknowledges every byte and answers none:
    TCP sees nothing wrong and statement_timeout is never enforced. The turn must still end."""
    import concurrent.futures

    from ovos_memory_plugins.storage.postgres import _watchdog as watchdog
    from tests._postgres import RoundTrips

    monkeypatch.setattr(watchdog, "HUNG_MARGIN_S", 0.5)  # a call unanswered 1.5 s ends its connection
    proxy = RoundTrips(tmp_path)
    # One thread takes every turn, as a persona's bus handler does: it has a connection of its
    # own, open before the server hangs (a new one would meet connect_timeout instead).
    persona = concurrent.futures.ThreadPoolExecutor(1)
    try:
        with _pg_memory(kind, _with_options(proxy.url(fresh_url()), "-c statement_timeout=1000")) as memory:
            persona.submit(_exchange, memory, "s", "My name is zqbeforeq.", "noted").result()
            assert memory.flush(patience(30))
            persona.submit(memory.build_conversation_context, "hi", "s").result()
            connection_class = watchdog.watched_connection_class()
            attempts: list = []
            real_connect = connection_class.connect
            monkeypatch.setattr(connection_class, "connect",
                                classmethod(lambda cls, *a, **k: attempts.append(1) or real_connect(*a, **k)))
            proxy.hang()

            def turn() -> str:
                answer = memory.build_conversation_context("what is my name?", "s")[-1].content
                _exchange(memory, "s", "My name is zqhungq.", "noted")
                return answer

            try:
                assert persona.submit(turn).result(timeout=patience(60)) == "what is my name?"
            except concurrent.futures.TimeoutError:
                pytest.fail("a hung database held the turn")
            assert memory.degraded(), "a hung database must be told"
            # The call cut paused new connections first: the turn never waited out connect_timeout
            # on the hung server (a read retried at once would have).
            assert attempts == []
            proxy.restore()
            persona.submit(_exchange, memory, "s", "My name is zqafterq.", "noted").result()
            assert memory.flush(patience(60))
            said = _said(memory, "s")
    finally:
        proxy.restore()  # a turn still waiting (the failure above) may end
        persona.shutdown(wait=False)
        proxy.close()
    assert said == ["zqbeforeq", "zqhungq", "zqafterq"], said


def test_the_watch_allows_what_the_servers_own_statement_timeout_allows(monkeypatch):
    from ovos_memory_plugins.storage.postgres import _watchdog as watchdog

    monkeypatch.setattr(watchdog, "HUNG_MARGIN_S", 0.5)
    # Spelt with dashes, as the server also reads it: its value is the one that counts.
    db = open_pg_database(_with_options(fresh_url(), "-c statement-timeout=3s"))
    try:
        with db.atomic() as con:
            assert con.raw._ovos_watched.limit == pytest.approx(3.5)  # 3 s, and the margin
            con.execute("SELECT pg_sleep(2.0)")  # a slow statement the server allows is no hung server
    finally:
        release_pg_database(db)
    db = open_pg_database(_with_options(fresh_url(), "-cstatement_timeout=0"))  # none: any time is allowed
    try:
        with db.atomic() as con:
            con.execute("SELECT 1")
            assert con.raw._ovos_watched is None
    finally:
        release_pg_database(db)


def test_the_watch_survives_a_connection_closed_under_it():
    from ovos_memory_plugins.storage.postgres import _watchdog as watchdog

    class Closed:
        @property
        def pgconn(self):
            raise RuntimeError("the connection is closed")  # psycopg raises its own error here

    closed = Closed()
    cut: list = []
    watched = watchdog._Watched(closed, 0.0, inode=1, on_cut=cut.append)
    watched.since = 1.0  # long past its deadline
    watchdog._cut(watched, watched.since)  # nothing to cut, nothing raised
    assert cut == []
