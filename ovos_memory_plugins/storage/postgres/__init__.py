"""PostgreSQL plumbing shared by every PostgreSQL-backed store: connection, transactions, migrations, locks.

The twin of :mod:`~ovos_memory_plugins.storage.sqlite`, so that a store written for one runs on
the other with its schema and a few statements changed:

* one ``PgDatabase`` per process and URL (:func:`open_pg_database`), shared by every store of the
  process, with one psycopg 3 connection per thread that uses it, in autocommit mode: a
  transaction is exactly an ``atomic()`` block (nested blocks in the thread are savepoints), and
  a background worker's commit never waits behind a turn's, nor a turn behind a worker's;
* statements are written as for sqlite3 (``?`` placeholders, ``execute``/``executemany`` on the
  connection ``atomic()`` yields), and text that PostgreSQL cannot hold (NUL characters) is
  escaped reversibly on the way in and out, so every string SQLite keeps is kept here too;
* ``migrate(component, MIGRATIONS)`` applies each script once, in one transaction under an
  advisory lock (two servers starting together never race on DDL), recording it in
  ``ovos_memory_migrations``; the first schema of the URL's ``search_path`` is created if missing;
* ``lock_session(con, scope, session_id)``: a transaction-scoped advisory lock that serialises
  the writers of one session (every process, every host) while other sessions write in
  parallel. SQLite needs none: ``BEGIN IMMEDIATE`` serialises all its writers;
* a broken connection (a server restart) is replaced at the next call: a read that meets it is
  retried once, and a write after an idle spell checks the connection before it begins; a
  transaction that breaks is never retried (a commit whose answer was lost may have happened);
* a call a hung server leaves unanswered past ``statement_timeout`` ends its connection
  (:mod:`._watchdog`), so the turn waits a bounded time, not for ever;
* ``worker_key`` names this process's workers in the leases they take (shared job queues): its
  connections hold a shared session-level advisory lock on it, so when the process dies (and
  its connections with it) any other process sees at once that the leases are orphaned;
* psycopg errors become :class:`~ovos_memory_plugins.errors.StorageError` subclasses at one seam.

psycopg is an optional dependency (the ``[postgres]`` extra): importing this module works
without it, and opening a database without it raises :class:`MissingDependencyError` naming
the ``pip install`` that fixes it.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ..._core.held import Unstorable
from ...errors import ConfigError, MigrationError, MissingDependencyError, StorageError, StoreUnavailable
from ..readonly import StoreReadOnly, is_read_only
from ..sharing import SharedHandles
from ._watchdog import watch, watched_connection_class

__all__ = [
    "is_postgres_url", "lock_key", "open_pg_database", "PgConnection", "PgDatabase", "probe", "psycopg_module",
    "redact", "release_pg_database", "WORKER_GONE",
]

T = TypeVar("T")

#: The URL schemes that name a PostgreSQL database (libpq accepts both).
URL_SCHEMES = ("postgresql://", "postgres://")
#: How long a writer waits for another process's lock (a session's, a row's) before StoreUnavailable.
LOCK_TIMEOUT_MS = 30_000
#: A statement running longer than this is cancelled (a turn must never hang on the database).
STATEMENT_TIMEOUT_MS = 60_000
#: A transaction left open this long by a hung client is ended by the server, releasing its locks.
IDLE_IN_TRANSACTION_MS = 120_000
#: A write after this many idle seconds first checks the connection (one round trip): a server
#: restarted or a connection dropped while idle is replaced before the transaction, never in it.
PING_AFTER_S = 2.0
#: After a connection attempt times out, none is tried for this long; each one doubles it, up to the max.
CONNECT_PAUSE_S = 2.0
CONNECT_PAUSE_MAX_S = 60.0
#: URL -> (no attempt before this monotonic time, the pause after the next failure, why it failed).
_UNANSWERED: dict[str, tuple[float, float, str]] = {}
#: libpq's TCP settings (in the URL, the operator's own win): keepalive probes from 5 s idle, and
#: data unacknowledged for 10 s ends the connection.
_TCP_SETTINGS = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2", "keepalives_count": "3",
                 "tcp_user_timeout": "10000"}
#: The advisory lock every migration of every component takes ("ovosmem").
MIGRATION_LOCK = 0x6F766F736D656D
#: SQL true when the worker named by the lease column ``{col}`` is gone: no connection holds its
#: liveness lock (``PgDatabase.worker_key``), so its leases can be taken at once.
WORKER_GONE = ("NOT EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted "
               "AND l.objsubid = 1 AND ((l.classid::bigint << 32) | l.objid::bigint)::text = {col})")
#: Escapes text PostgreSQL cannot store (NUL) reversibly; a private-use character.
_ESC = "\ue000"

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS ovos_memory_migrations (
    component text NOT NULL,
    version integer NOT NULL,       -- index in the component's MIGRATIONS list, from 1
    applied_at double precision NOT NULL DEFAULT extract(epoch FROM now()),
    PRIMARY KEY (component, version)
)"""


def is_postgres_url(value: Any) -> bool:
    """True for ``postgresql://...`` and ``postgres://...``."""
    return isinstance(value, str) and value.startswith(URL_SCHEMES)


def psycopg_module() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise MissingDependencyError(
            f"a PostgreSQL store needs psycopg 3 ({exc}); pip install 'ovos-memory-plugins[postgres]'") from exc
    return psycopg


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs: the one after the user name, and any
    ``password=`` or ``sslpassword=`` in its query or in a ``key=value`` connection string.

    >>> redact("postgresql://ovos:s3cret@db/memory?sslpassword=x&connect_timeout=5")
    'postgresql://ovos:***@db/memory?sslpassword=***&connect_timeout=5'
    """
    if "://" not in url:  # a key=value string, or not a URL as written ("postgresql:/u:pw@host")
        return _USERINFO.sub(r"\1:***@", _SETTING_PASSWORD.sub(r"\1=***", url))
    url = _QUERY_PASSWORD.sub(r"\1=***", url)
    head, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{head}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


# "name:secret@" in a string that is not a URL as written.
_USERINFO = re.compile(r"([^:/@\s]+):[^@\s]*@")
# A password in a URL's query (``?password=x&...``), up to the next parameter.
_QUERY_PASSWORD = re.compile(r"(?i)([?&](?:ssl)?password)=[^&#\s]*")
# A password in a libpq connection string (``password='x y' host=...``), quoted (to the closing
# quote, or the end when there is none) or up to the next space: "&" is a character of it there.
_SETTING_PASSWORD = re.compile(r"(?i)\b((?:ssl)?password)\s*=\s*(?:'(?:[^'\\]|\\.)*(?:'|$)|\S*)")


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key for ``parts`` (a collision only serialises more)."""
    digest = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@functools.lru_cache(maxsize=4096)
def _pg_sql(sql: str) -> str:
    """sqlite3's ``?`` placeholders in psycopg's spelling (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _escape(text: str) -> str:
    if "\x00" in text or _ESC in text:
        return text.replace(_ESC, _ESC + "e").replace("\x00", _ESC + "0")
    return text


def _unescape(text: str) -> str:
    if _ESC in text:
        return text.replace(_ESC + "0", "\x00").replace(_ESC + "e", _ESC)
    return text


def _register_text_adapters(con: Any) -> None:
    """Send and read every string through :func:`_escape`/:func:`_unescape` on this connection."""
    from psycopg.adapt import Dumper, Loader

    class EscapingDumper(Dumper):
        oid = 0  # "unknown", as psycopg's own: the server infers text, regconfig, ...

        def dump(self, obj: str) -> bytes:
            return _escape(obj).encode("utf-8")

    class UnescapingLoader(Loader):
        def load(self, data: Any) -> str:
            return _unescape(bytes(data).decode("utf-8"))

    con.adapters.register_dumper(str, EscapingDumper)
    for name in ("text", "varchar", "bpchar", "name"):
        con.adapters.register_loader(name, UnescapingLoader)


class ValueTooLarge(Unstorable):
    """A value PostgreSQL refuses for good (an index row over its limit: a session id of a few
    thousand bytes that do not compress). Not a StorageError: a write refused so is not held for
    a retry that can never succeed."""


def _failure(exc: BaseException, what: str) -> Exception:
    """The StorageError for a psycopg error (StoreUnavailable when the server or a lock is the
    cause); :class:`ValueTooLarge` for a value the server can never store."""
    psycopg = psycopg_module()
    errors = psycopg.errors
    if isinstance(exc, errors.ProgramLimitExceeded):  # psycopg counts it among OperationalErrors
        return ValueTooLarge(f"{what}: PostgreSQL cannot store this value, a session id or text too long for "
                             f"its index ({str(exc).strip()})")
    transient = (psycopg.OperationalError, errors.LockNotAvailable, errors.QueryCanceled,
                 errors.DeadlockDetected, errors.SerializationFailure)
    cls = StoreUnavailable if isinstance(exc, transient) else StorageError
    return cls(f"{what}: {str(exc).strip()}")


@contextlib.contextmanager
def _mapped(what: str) -> Iterator[None]:
    psycopg = psycopg_module()
    try:
        yield
    except psycopg.Error as exc:
        raise _failure(exc, what) from exc


class PgConnection:
    """The connection of an open transaction, spoken to as sqlite3's (``?`` placeholders).

    Statements whose answer nobody reads wait in ``queued`` and go to the server with the next
    statement, in one pipeline: one round trip where each used to cost its own (a lexical update
    on PostgreSQL: 11 round trips before, 4 now). Each still runs as a statement of its own, in
    order, before the one it precedes, so a lock is held before the next statement takes its
    snapshot. Two kinds wait:

    * preparations (:meth:`queue`): BEGIN, SET LOCAL, a session's lock, a savepoint and its
      release. Those that precede no statement are never sent: a block that ran nothing sends
      nothing, and COMMIT releases every savepoint;
    * writes (:meth:`defer`): a window's new rows and its trim. Always sent: at the latest with
      COMMIT, or as the savepoint block they were deferred in ends, so that a failure of theirs
      is still that block's.

    Reaching for ``raw`` (the psycopg connection, for DDL) sends everything that waits first.
    """

    def __init__(self, raw: Any):
        self._raw = raw
        self.queued: list[_Queued] = []

    @property
    def raw(self) -> Any:
        self.send_queued()
        return self._raw

    def queue(self, sql: str, params: Sequence[Any] = ()) -> _Queued:
        """Send ``sql`` before the next statement (dropped if no statement and no write follows)."""
        item = _Queued(_pg_sql(sql) if params else sql, params, write=False)
        self.queued.append(item)
        return item

    def defer(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run ``sql`` once per row of parameters, with the next statement or the block's end."""
        self.queued.extend(_Queued(_pg_sql(sql), params, write=True) for params in rows)

    def writes_waiting(self) -> bool:
        return any(item.write for item in self.queued)

    def send_queued(self) -> None:
        if self.queued:
            self._run(lambda: None)

    def finish(self, command: bytes) -> None:
        """Send the waiting writes (and what precedes them) with ``command`` (COMMIT)."""
        last = max((i for i, item in enumerate(self.queued) if item.write), default=-1)
        del self.queued[last + 1:]
        self._run(lambda: self._raw.execute(command))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._run(lambda: self._raw.execute(_pg_sql(sql), params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        cur = self._raw.cursor()
        self._run(lambda: cur.executemany(_pg_sql(sql), list(rows)))
        return cur

    def _run(self, statement: Callable[[], T]) -> T:
        if not self.queued:
            return statement()
        for item in self.queued:
            item.sent = True  # even if the pipeline fails after it: the server may have run it
        queued, self.queued = self.queued, []
        with self._raw.pipeline():
            for item in queued:
                # Control commands (BEGIN, SAVEPOINT...) are never worth a prepared statement.
                self._raw.execute(item.sql, item.params, prepare=False if not item.params else None)
            return statement()


class _Queued:
    """A statement waiting in :attr:`PgConnection.queued`."""

    __slots__ = ("sql", "params", "write", "sent")

    def __init__(self, sql: str, params: Sequence[Any], write: bool):
        self.sql, self.params, self.write, self.sent = sql, params, write, False


class _Session:
    """One thread's connection to the database and the state of its open transaction."""

    def __init__(self, thread: threading.Thread):
        self.thread = thread
        self.raw: Any = None
        self.wrapper: PgConnection | None = None
        self.depth = 0
        self.locked: set[int] = set()  # session locks held by the open transaction
        self.after: list[Callable[[], None]] = []  # run once the open transaction has committed
        self.used = 0.0  # time.monotonic() of the last statement


class PgDatabase:
    """A PostgreSQL database: a connection per thread that uses it, and transaction helpers.

    Share one per URL within a process (:func:`open_pg_database`): every store of the process on
    that URL joins the same transaction when they run in one thread (a turn's window, documents,
    index and vectors commit together), while the background workers' threads have connections
    of their own, so a worker's commit never holds up a turn. Other processes and hosts open
    their own, and PostgreSQL's locks coordinate them all.
    """

    engine = "postgres"
    is_memory = False
    #: The SQLite Database's count of replaced files: a server keeps its data, never replaced.
    generation = 0

    def __init__(self, url: str, read_only: bool = False):
        psycopg_module()
        self.url = url
        self.path = redact(url)  # what messages name (the SQLite Database's path)
        #: Opened by a command that only looks (storage.readonly): every transaction is read-only,
        #: nothing is created or migrated.
        self.read_only = read_only
        self._closed = False
        self._local = threading.local()
        self._sessions: list[_Session] = []
        self._sessions_lock = threading.Lock()
        self._schema_checked = False
        self._lost_at = -1.0  # time.monotonic() when a connection was last found broken
        #: Names this process's leases; each of its connections holds a shared lock on it.
        self.worker_key = secrets.randbits(62) + 1
        self._connection(self._session())  # fail at construction if the server cannot be reached

    # -- connection ----------------------------------------------------------------------
    def _session(self) -> _Session:
        session: _Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = _Session(threading.current_thread())
            with self._sessions_lock:
                gone = [s for s in self._sessions if not s.thread.is_alive()]
                self._sessions = [s for s in self._sessions if s.thread.is_alive()] + [session]
            for old in gone:  # a finished thread's connection
                _close_quietly(old.raw)
        return session

    def _connection(self, session: _Session) -> Any:
        """The thread's live connection, reconnecting if the last one broke."""
        if self._closed:
            raise StorageError(f"{self.path} is closed")
        raw = session.raw
        if raw is None or raw.closed or raw.broken:
            _close_quietly(raw)  # a broken one still holds its socket
            raw = self._connect()
            try:
                with _mapped(f"connect to {self.path}"):
                    # Alive while connected; and the statement_timeout the server applies (the URL's
                    # options, PGOPTIONS, the role's or database's own), in ms: what the watch allows.
                    timeout = raw.execute("SELECT pg_advisory_lock_shared(%s), (SELECT setting FROM pg_settings "
                                          "WHERE name = 'statement_timeout')", (self.worker_key,)).fetchone()[1]
                watch(raw, int(timeout), self._hung)
            except BaseException:
                _close_quietly(raw)  # nobody else holds it yet
                raise
            with self._sessions_lock:
                if not self._closed:
                    session.raw, session.wrapper = raw, PgConnection(raw)
            if session.raw is not raw:  # closed while connecting: close() could not see this one
                _close_quietly(raw)
                raise StorageError(f"{self.path} is closed")
        return raw

    def _connect(self, watched: bool = True) -> Any:
        """A new connection; ``watched``: a call the server leaves unanswered past the
        connection's ``statement_timeout`` ends it (:mod:`._watchdog`)."""
        psycopg = psycopg_module()
        info = _conninfo(self.url, self.path, self.read_only)
        until, pause, why = _UNANSWERED.get(self.url, (0.0, CONNECT_PAUSE_S, ""))
        if time.monotonic() < until:
            raise StoreUnavailable(f"cannot connect to {self.path}: {why} (no new attempt for {pause:g} s)")
        try:
            raw = watched_connection_class().connect(autocommit=True, **info)
        except psycopg.Error as exc:
            why = _libpq_message(exc, self.url, self.path)
            if "timeout" in why or "timed out" in why:
                _pause_attempts(self.url, why)
            raise _connect_failure(why, self.path) from exc
        _UNANSWERED.pop(self.url, None)
        _register_text_adapters(raw)
        if watched:  # with our timeout until the server says which one applies (_connection)
            watch(raw, STATEMENT_TIMEOUT_MS, self._hung)
        return raw

    def _hung(self, why: str) -> None:
        _pause_attempts(self.url, f"a connection {why}")

    def _note_if_lost(self, session: _Session) -> None:
        """When ``session``'s connection broke, every connection not used since is checked
        before its next transaction."""
        if session.raw is not None and session.raw.broken:
            self._lost_at = time.monotonic()

    def _checked(self, session: _Session) -> Any:
        """The thread's connection, made sure to be alive when it has been idle (before a transaction)."""
        raw = self._connection(session)
        # Idle a while, or since another thread's connection was found dead (the server restarted,
        # the network dropped): this one likely went with it.
        if time.monotonic() - session.used > PING_AFTER_S or session.used <= self._lost_at:
            psycopg = psycopg_module()
            try:
                raw.execute("SELECT 1")
            except psycopg.OperationalError:
                if not raw.broken:
                    raise
                self._note_if_lost(session)
                raw = self._connection(session)  # replaced: nothing was sent on the broken one yet
        return raw

    @contextlib.contextmanager
    def dedicated(self) -> Iterator[Any]:
        """A connection of its own (raw psycopg) for long maintenance (an index build: its owner
        cancels it when it closes; it sets its own timeouts, so it is not watched)."""
        raw = self._connect(watched=False)
        try:
            yield raw
        finally:
            _close_quietly(raw)

    # -- transactions ----------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic(self, busy_wait: float | None = None, durable: bool = True) -> Iterator[PgConnection]:
        """A write transaction: everything in the block commits together or not at all.

        Nested blocks (in the same thread) are savepoints. ``busy_wait``: seconds to wait for
        another writer's locks instead of the usual ``LOCK_TIMEOUT_MS`` (StoreUnavailable after
        that). ``durable=False``: the commit does not wait for the WAL to reach the disk, for
        writes a server crash may lose because they are derived and redone (index entries and
        their marks, leases); a crash can never make them half done. What the user said is
        always durable.
        """
        if self.read_only:
            raise StoreReadOnly(f"{self.path} was opened read-only")
        session = self._session()
        if session.depth == 0:
            with _mapped(f"connect to {self.path}"):
                self._checked(session)
        con = session.wrapper
        assert con is not None
        if not session.depth:
            con.queued.clear()  # nothing of an earlier block may ride with this one
        block = self._savepoint(session, con) if session.depth else self._transaction(con, busy_wait, durable)
        session.depth += 1
        committed = False
        try:
            with _mapped(f"write to {self.path}"), block:
                yield con
            committed = True
        finally:
            session.depth -= 1
            if not session.depth:
                session.locked.clear()
                self._note_if_lost(session)
                session.used = time.monotonic()
                after, session.after = session.after, []
                for fn in after if committed else ():
                    fn()

    @staticmethod
    @contextlib.contextmanager
    def _transaction(con: PgConnection, busy_wait: float | None, durable: bool) -> Iterator[None]:
        """The outermost block: BEGIN goes with its first statement; none, no transaction at all."""
        psycopg = psycopg_module()
        begin = con.queue("BEGIN")
        if busy_wait is not None:
            con.queue(f"SET LOCAL lock_timeout = {max(1, int(busy_wait * 1000))}")
        if not durable:
            con.queue("SET LOCAL synchronous_commit = off")
        try:
            yield
            if begin.sent and con._raw.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                # A statement failed and its error was caught outside any savepoint: COMMIT would
                # quietly roll everything back.
                raise StorageError("a statement of the transaction failed; nothing of it was written")
            if begin.sent or con.writes_waiting():
                con.finish(b"COMMIT")
        except BaseException:
            con.queued.clear()
            if begin.sent and con._raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):  # a broken connection has nothing to roll back
                    con._raw.execute(b"ROLLBACK")
            raise
        finally:
            con.queued.clear()

    @staticmethod
    @contextlib.contextmanager
    def _savepoint(session: _Session, con: PgConnection) -> Iterator[None]:
        """A nested block: its savepoint (and release) go with the statements around it."""
        psycopg = psycopg_module()
        name = f"ovos_sp{session.depth}"
        mark = con.queue(f"SAVEPOINT {name}")
        locked = set(session.locked)
        try:
            yield
            if con.writes_waiting():
                con.send_queued()  # the block's deferred writes fail inside it, if they fail
        except BaseException:
            session.locked = locked  # a lock taken in the block is released with it
            if mark.sent:
                con.queued.clear()  # all queued since the savepoint was sent: undone with the block
                with contextlib.suppress(psycopg.Error):  # else the transaction stays failed: COMMIT refuses
                    con._raw.execute(f"ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}".encode())
            else:
                del con.queued[con.queued.index(mark):]  # nothing of the block reached the server
            raise
        if mark.sent:
            con.queue(f"RELEASE SAVEPOINT {name}")
        else:
            con.queued.remove(mark)

    def transaction(self, fn: Callable[[PgConnection], T], busy_wait: float | None = None) -> T:
        """``fn(con)`` in one write transaction (the SQLite Database's call, which also replaces a
        damaged file: a server has none to replace)."""
        with self.atomic(busy_wait) as con:
            return fn(con)

    def query(self, sql: str, params: Sequence[Any], parse: Callable[[list[Any]], T]) -> T:
        """``parse(rows)`` of one read statement (the SQLite Database's call)."""
        return parse(self.execute(sql, params))

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once this thread's open transaction has committed (now, if none is open;
        never, if it rolls back): a worker woken for new work must find it committed."""
        session = self._session()
        if session.depth:
            session.after.append(fn)
        else:
            fn()

    @contextlib.contextmanager
    def read(self) -> Iterator[PgConnection]:
        """Several reads from one snapshot."""
        if self._closed:
            with self._after_close() as con:
                yield con
            return
        session = self._session()
        if session.depth:
            assert session.wrapper is not None
            yield session.wrapper
            return
        with _mapped(f"connect to {self.path}"):
            raw = self._checked(session)
        assert session.wrapper is not None
        session.depth += 1
        try:
            with _mapped(f"read from {self.path}"), raw.transaction():
                raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield session.wrapper
        finally:
            session.wrapper.queued.clear()  # a read-only transaction has nothing to send after it
            session.depth -= 1
            self._note_if_lost(session)
            session.used = time.monotonic()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one statement (in the thread's open transaction, if any) and return all rows.

        Outside a transaction a statement that meets a broken connection is retried once on a
        new one: a server restarted overnight costs the next turn nothing.
        """
        psycopg = psycopg_module()
        if self._closed:
            with self._after_close() as con:
                cur = con.execute(sql, params)
                return cur.fetchall() if cur.description else []
        session = self._session()
        for attempt in (1, 2):
            raw = session.raw if session.depth else self._connection(session)
            try:
                if session.depth:  # through the transaction's connection: what waits there goes first
                    assert session.wrapper is not None
                    cur = session.wrapper.execute(sql, params)
                else:
                    cur = raw.execute(_pg_sql(sql), params)
                session.used = time.monotonic()
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError as exc:
                self._note_if_lost(session)
                if session.depth or attempt == 2 or not raw.broken:
                    raise _failure(exc, f"read from {self.path}") from exc
            except psycopg.Error as exc:
                raise _failure(exc, f"read from {self.path}") from exc
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _after_close(self) -> Iterator[PgConnection]:
        """A read after :meth:`close` (as the SQLite store answers one): a read-only snapshot on a
        connection of its own, closed after the read. Writes stay refused."""
        raw = self._connect()
        try:
            with _mapped(f"read from {self.path}"), raw.transaction():
                raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield PgConnection(raw)
        finally:
            _close_quietly(raw)

    def connection_in_transaction(self) -> PgConnection:
        """The connection, for a statement that must join the caller's open ``atomic()`` block."""
        session = self._session()
        if not session.depth:
            raise RuntimeError(f"{self.path}: this write must run inside PgDatabase.atomic()")
        assert session.wrapper is not None
        return session.wrapper

    def lock_session(self, con: PgConnection, scope: str, session_id: str) -> None:
        """Serialise the writers of ``session_id`` in ``scope`` until the transaction ends.

        Taken in a statement of its own (sent with the next one), before anything of the session is
        read: under READ COMMITTED every later statement then sees what the previous holder committed.
        """
        key = lock_key(scope, session_id)
        held = self._session().locked
        if key not in held:
            con.queue("SELECT pg_advisory_xact_lock(?)", (key,))
            held.add(key)

    # -- schema ------------------------------------------------------------------------------
    def migrate(self, component: str, migrations: Sequence[str]) -> None:
        """Apply the scripts of ``migrations`` not applied yet (append-only; never edit one).

        Read-only, only check they were: a store not created yet (or by an older package) is a
        StorageError saying so, and nothing is created."""
        if self.read_only:
            self._check_migrated(component, migrations)
            return
        try:
            with self.atomic() as con:
                # Before any DDL: two servers creating the same table at once would otherwise
                # fail on the catalog's unique index instead of one waiting for the other.
                con.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
                self._ensure_schema(con)
                con.raw.execute(_MIGRATIONS_TABLE)
                done = int(con.execute("SELECT COALESCE(MAX(version), 0) FROM ovos_memory_migrations "
                                       "WHERE component = ?", (component,)).fetchone()[0])
                if done > len(migrations):
                    raise MigrationError(f"{component} in {self.path} is at version {done}, newer than this "
                                         f"package knows ({len(migrations)}): upgrade ovos-memory-plugins")
                for version in range(done + 1, len(migrations) + 1):
                    # One simple query (no parameters): several statements and function bodies are fine.
                    con.raw.execute(migrations[version - 1].encode("utf-8"))
                    con.execute("INSERT INTO ovos_memory_migrations (component, version) VALUES (?, ?)",
                                (component, version))
        except MigrationError:
            raise
        except StorageError as exc:
            raise MigrationError(f"cannot migrate {component} in {self.path}: {exc}") from exc

    def _check_migrated(self, component: str, migrations: Sequence[str]) -> None:
        try:
            rows = self.execute("SELECT COALESCE(MAX(version), 0) FROM ovos_memory_migrations WHERE component = ?",
                                (component,))
        except StorageError as exc:
            raise StorageError(f"{self.path} holds no memory store ({exc}); nothing was created") from exc
        if rows[0][0] < len(migrations):
            what = "holds no" if not rows[0][0] else "has an older version of its"
            raise StorageError(f"{self.path} {what} {component.split(':')[0]} table (open it once with a command "
                               "that writes); nothing was created")

    def _ensure_schema(self, con: PgConnection) -> None:
        """Create the first schema of the ``search_path`` when it does not exist yet.

        A URL with ``options=-csearch_path%3Dmemory`` keeps this package's tables in their own
        schema; without this, a schema not created yet would silently send them elsewhere.
        """
        if self._schema_checked:
            return
        path = con.execute("SELECT current_setting('search_path')").fetchone()[0]
        first = next((p.strip() for p in str(path).split(",") if p.strip()), "")
        plain = first and not first.startswith(("$", '"'))
        if plain and con.execute("SELECT to_regnamespace(?) IS NULL", (first,)).fetchone()[0]:
            con.raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{first}"'.encode())
        self._schema_checked = True

    def has_extension(self, name: str) -> bool:
        return bool(self.execute("SELECT 1 FROM pg_extension WHERE extname = ?", (name,)))

    # -- SQLite's Database surface ----------------------------------------------------------
    def checkpoint(self) -> bool:
        """Nothing to do: a deleted row is invisible to every later transaction at once (its
        bytes go when autovacuum reuses the space; WAL and backups follow the operator's retention)."""
        return True

    def compact(self) -> bool:
        """Nothing this package can do (see :meth:`checkpoint`): the server rewrites its files itself,
        and erasing old bytes on its disks is the operator's retention (docs/deployment.md)."""
        return True

    def close(self) -> None:
        """Close every thread's connection (a transaction still open in one is rolled back)."""
        with self._sessions_lock:
            self._closed = True
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            _close_quietly(session.raw)


#: A server that answers but refuses this URL (no such database or user, a password, a host or a
#: setting it does not accept), or an option libpq rejects: not an outage, so a composite does not
#: wait for it (libpq's messages, in English unless the server's lc_messages says otherwise).
_REFUSED_FOR_GOOD = re.compile(
    r'FATAL:\s+(?:database|role) "[^"]*" does not exist|password authentication failed|no pg_hba\.conf entry'
    r"|authentication failed for user|is not permitted to log in|permission denied for database"
    r"|no password supplied|unrecognized configuration parameter|invalid \w+ value|invalid value for"
    r"|invalid port number|invalid integer value")


def _conninfo(url: str, path: str, read_only: bool) -> dict[str, Any]:
    """libpq's connection settings for ``url``, with ours (timeouts, keepalives) under the URL's."""
    psycopg = psycopg_module()
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except psycopg.Error as exc:  # libpq's message quotes the part it cannot read: a password, maybe
        why = _QUOTED.sub('"..."', redact(str(exc).strip().replace(url, path)))
        unknown = _UNKNOWN_SETTING.search(str(exc))
        if unknown:  # a setting's name (a typo: "sslmod"), never a password: named
            from ...config import did_you_mean

            known = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
            why = f"libpq has no setting {unknown.group(1)!r}{did_you_mean(unknown.group(1), known)}"
        raise ConfigError(f"{path} is not a valid PostgreSQL URL: {why}") from exc
    # Ours first: settings the operator puts in the URL's own ``options`` come later and win.
    ours = (f"-c lock_timeout={LOCK_TIMEOUT_MS} -c statement_timeout={STATEMENT_TIMEOUT_MS} "
            f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS} -c jit=off")
    if read_only:
        ours += " -c default_transaction_read_only=on"
    info["options"] = f"{ours} {info.get('options') or ''}".strip()
    info.setdefault("application_name", "ovos-memory")
    info.setdefault("connect_timeout", "10")
    if not str(info.get("host") or "/").startswith("/"):  # over TCP (a socket file needs none of it)
        # A host that vanishes mid-query (a partition, a powered-off server) is noticed in
        # seconds, not after the kernel's default of many minutes.
        for key, value in _TCP_SETTINGS.items():
            if key != "tcp_user_timeout" or psycopg.pq.version() >= 120000:  # libpq 12 added it
                info.setdefault(key, value)
    return info


def _connect_failure(why: str, path: str) -> StorageError:
    """What a failed connect (libpq's message, :func:`_libpq_message`) means: StoreUnavailable when
    nothing answers (try again later), a StorageError when the server refuses this URL for good
    (no retry can help)."""
    if _REFUSED_FOR_GOOD.search(why):
        return StorageError(f"cannot connect to {path}: {why}")
    return StoreUnavailable(f"cannot connect to {path}: {why}")


def _libpq_message(exc: BaseException, url: str, path: str) -> str:
    """libpq's message for a failed connect, with no part of the password: the URL redacted, the
    password itself wherever it is quoted, and a host libpq read from a password holding "@"
    ("ovos:pa@ss@db" is host 'ss@db' to libpq)."""
    why = redact(str(exc).strip().replace(url, path))
    with contextlib.suppress(Exception):
        from psycopg.conninfo import conninfo_to_dict

        password = str(conninfo_to_dict(url).get("password") or "")
        if len(password) >= 3:  # a shorter one would hide letters of every word, and says little
            why = why.replace(password, "***")
    return _QUOTED_AT.sub(r"\1***@\2\1", why)


# A quoted part of libpq's message; and one holding "@" (the rest of a password before it).
_QUOTED = re.compile(r'"[^"]*"')
_UNKNOWN_SETTING = re.compile(r'invalid URI query parameter: "([A-Za-z_]{1,64})"')
_QUOTED_AT = re.compile(r"([\"'])[^\"'\s]*@([^\"'@\s]*)\1")


def probe(url: str, timeout: float = 3.0) -> None:
    """Connect to ``url`` once and close (``check-config``). Raises ConfigError for a URL libpq
    cannot parse, StorageError for one the server refuses for good (no such database or user, a
    password refused, a setting it does not know), StoreUnavailable when nothing answers within
    ``timeout`` seconds (for each host the URL names)."""
    psycopg = psycopg_module()
    path = redact(url)
    info = {**_conninfo(url, path, read_only=True), "connect_timeout": str(max(1, round(timeout)))}
    try:
        raw = psycopg.connect(autocommit=True, **info)
    except psycopg.Error as exc:
        raise _connect_failure(_libpq_message(exc, url, path), path) from exc
    _close_quietly(raw)


def _pause_attempts(url: str, why: str) -> None:
    """The server at ``url`` did not answer in time. Waiting as long again on the next turn
    would cost that turn as much: each such failure pauses the attempts to connect longer
    (every store of this server, here)."""
    _, pause, _ = _UNANSWERED.get(url, (0.0, CONNECT_PAUSE_S, ""))
    _UNANSWERED[url] = (time.monotonic() + pause, min(pause * 2, CONNECT_PAUSE_MAX_S), why)


def _close_quietly(raw: Any) -> None:
    if raw is not None:
        with contextlib.suppress(Exception):
            raw.close()


_shared: SharedHandles[PgDatabase] = SharedHandles()


def open_pg_database(url: str) -> PgDatabase:
    """A ``PgDatabase`` for ``url``, shared by every store of this process on the same URL.

    Pair each call with :func:`release_pg_database`.
    """
    read_only = is_read_only()
    return _shared.take(_shared.key(url, read_only), lambda: PgDatabase(url, read_only))


def release_pg_database(db: PgDatabase) -> None:
    """Drop one reference taken by :func:`open_pg_database`; the last one closes the connection."""
    _shared.release(_shared.key(db.url, db.read_only), db)
