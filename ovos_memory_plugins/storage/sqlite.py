"""SQLite plumbing shared by every SQLite-backed store: connection, transactions, migrations.

* ``connect`` opens a file in WAL mode with a busy timeout, so several processes (two
  satellites on one file) can write the same store: writers queue instead of failing.
* ``Database.atomic()`` is the only way to write: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back
  on any exception; nested blocks become savepoints. One update is one transaction, so a crash
  at any instant leaves either the whole update or none of it.
* ``Database.migrate(component, MIGRATIONS)`` applies an append-only list of SQL scripts once,
  recording each in ``ovos_memory_migrations``; it is safe when two processes start together.
* sqlite3 errors are translated to :class:`~ovos_memory_plugins.errors.StorageError` at one seam,
  :func:`map_sqlite_errors`.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .._core.paths import MEMORY_PATH, is_memory_path, quarantine_file, resolve_path
from ..errors import MigrationError, StorageError, StoreUnavailable

__all__ = ["Database", "connect", "map_sqlite_errors", "open_database", "storage_error"]

#: How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_S = 30.0

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS ovos_memory_migrations (
    component TEXT NOT NULL,
    version INTEGER NOT NULL,       -- index in the component's MIGRATIONS list, from 1
    applied_at REAL NOT NULL,
    PRIMARY KEY (component, version)
)"""


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def storage_error(exc: sqlite3.Error, what: str) -> StorageError:
    """The StorageError subclass for a sqlite3 error (StoreUnavailable when it is busy or locked)."""
    if _is_busy(exc) or (isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc)):
        return StoreUnavailable(f"{what}: {exc}")
    return StorageError(f"{what}: {exc}")


@contextlib.contextmanager
def map_sqlite_errors(what: str) -> Iterator[None]:
    """Translate sqlite3 errors raised inside the block into StorageError subclasses."""
    try:
        yield
    except sqlite3.Error as exc:
        raise storage_error(exc, what) from exc


def connect(path: str, synchronous: str = "NORMAL") -> sqlite3.Connection:
    """Open ``path`` (or ``":memory:"``) ready for this package's use.

    ``isolation_level=None`` hands transaction control to :meth:`Database.atomic`; Python's
    implicit transactions would otherwise commit at surprising moments.
    WAL with ``synchronous=NORMAL`` survives any process crash (SIGKILL included); pass
    ``"FULL"`` to also survive power loss at the cost of an fsync per update.
    """
    if not is_memory_path(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with map_sqlite_errors(f"cannot open {path}"):
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
        con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if not is_memory_path(path):
            _enable_wal(con)
            con.execute(f"PRAGMA synchronous = {synchronous}")
        # Deleted rows are overwritten with zeros, not left in free pages: forget() must really
        # forget, also for someone reading the file's bytes.
        con.execute("PRAGMA secure_delete = ON")
        con.execute("PRAGMA foreign_keys = ON")
    return con


def _enable_wal(con: sqlite3.Connection) -> None:
    """Switch ``con``'s file to WAL, retrying while another process holds it.

    Changing the journal mode needs the file to itself, and SQLite reports a conflict between
    two connections that both hold a read lock at once, without calling the busy handler
    (waiting could deadlock). Two processes opening a new file together meet exactly that,
    so the retry happens here, with the same overall patience as the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        try:
            con.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


#: What SQLite says of a file that is not (or no longer) a readable database.
_CORRUPT = ("file is not a database", "malformed", "file is encrypted")


def _connect_or_quarantine(path: str, synchronous: str) -> sqlite3.Connection:
    """``connect(path)``, after moving a corrupt file aside (as the JSON store does).

    Only the schema is read here (cheap at any size): damage elsewhere surfaces as a
    StorageError of the operation that meets it, logged once by the backend.
    """
    con = None
    try:
        con = connect(path, synchronous)
        with map_sqlite_errors(f"cannot read {path}"):
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except StorageError as exc:
        if is_memory_path(path) or not any(sign in str(exc) for sign in _CORRUPT):
            raise
        reason = str(exc)
        if con is not None:
            with contextlib.suppress(sqlite3.Error):
                con.close()
    # the journal belongs to the bad file, never to the new one
    target = quarantine_file(path, companions=("-wal", "-shm"))
    from .._core.log import LOG

    LOG.error(f"memory store {path} is corrupt ({reason}); moved it to {target} and started empty")
    return connect(path, synchronous)


class Database:
    """One SQLite connection, a lock that serialises its threads, and transaction helpers.

    Share one ``Database`` per file within a process (:func:`open_database`); other processes
    open their own, and SQLite's file locks coordinate them.
    """

    #: Which engine (a PostgreSQL store's ``PgDatabase`` says "postgres").
    engine = "sqlite"

    def __init__(self, path: str, synchronous: str = "NORMAL", connection: sqlite3.Connection | None = None):
        self.path = MEMORY_PATH if is_memory_path(path) else path
        self._con = connection if connection is not None else _connect_or_quarantine(self.path, synchronous)
        self._lock = threading.RLock()
        self._depth = 0
        self._closed = False

    @property
    def is_memory(self) -> bool:
        return self.path == MEMORY_PATH

    @contextlib.contextmanager
    def atomic(self, busy_wait: float | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: everything in the block commits together or not at all.

        ``busy_wait``: seconds to wait for another process's write lock instead of
        ``BUSY_TIMEOUT_S`` (StoreUnavailable after that); optional work passes a short one.
        """
        with self._lock:
            self._check_open()
            self._depth += 1
            savepoint = f"sp{self._depth}"
            try:
                with map_sqlite_errors(f"write to {self.path}"):
                    if self._depth == 1:
                        self._begin(busy_wait)
                    else:
                        self._con.execute(f"SAVEPOINT {savepoint}")
                try:
                    yield self._con
                except BaseException as exc:
                    with contextlib.suppress(sqlite3.Error):
                        self._con.execute("ROLLBACK" if self._depth == 1 else f"ROLLBACK TO {savepoint}")
                        if self._depth > 1:
                            self._con.execute(f"RELEASE {savepoint}")
                    if isinstance(exc, sqlite3.Error):
                        # A statement of the block failed ("database or disk is full", say): callers
                        # handle this package's errors, never raw sqlite3 ones.
                        raise storage_error(exc, f"write to {self.path}") from exc
                    raise
                with map_sqlite_errors(f"commit to {self.path}"):
                    self._con.execute("COMMIT" if self._depth == 1 else f"RELEASE {savepoint}")
            finally:
                self._depth -= 1

    def _begin(self, busy_wait: float | None) -> None:
        if busy_wait is None:
            self._con.execute("BEGIN IMMEDIATE")
            return
        usual = int(self._con.execute("PRAGMA busy_timeout").fetchone()[0])  # an injected connection's own
        self._con.execute(f"PRAGMA busy_timeout = {int(busy_wait * 1000)}")
        try:
            self._con.execute("BEGIN IMMEDIATE")
        finally:
            self._con.execute(f"PRAGMA busy_timeout = {usual}")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read of several statements (a deferred transaction)."""
        with self._lock:
            self._check_open()
            if self._depth:
                yield self._con
                return
            with map_sqlite_errors(f"read from {self.path}"):
                self._con.execute("BEGIN")
            try:
                yield self._con
            finally:
                with contextlib.suppress(sqlite3.Error):
                    self._con.execute("COMMIT")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one read statement and return all rows."""
        with self._lock:
            self._check_open()
            with map_sqlite_errors(f"read from {self.path}"):
                return self._con.execute(sql, params).fetchall()

    def migrate(self, component: str, migrations: Sequence[str]) -> None:
        """Apply the not-yet-applied scripts of ``migrations`` (append-only; never edit one)."""
        with self._lock:
            with map_sqlite_errors(f"migrate {self.path}"):
                self._con.execute(_MIGRATIONS_TABLE)
            try:
                with self.atomic() as con:
                    row = con.execute(
                        "SELECT COALESCE(MAX(version), 0) FROM ovos_memory_migrations WHERE component = ?",
                        (component,),
                    ).fetchone()
                    for version in range(row[0] + 1, len(migrations) + 1):
                        for statement in _statements(migrations[version - 1]):
                            con.execute(statement)
                        con.execute(
                            "INSERT INTO ovos_memory_migrations (component, version, applied_at) VALUES (?, ?, ?)",
                            (component, version, time.time()),
                        )
            except StorageError as exc:
                raise MigrationError(f"cannot migrate {component} in {self.path}: {exc}") from exc

    def connection_in_transaction(self) -> sqlite3.Connection:
        """The connection, for a statement that must join the caller's open ``atomic()`` block."""
        if not self._depth:
            raise RuntimeError(f"{self.path}: this write must run inside Database.atomic()")
        return self._con

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and empty it (after a forget: the WAL still holds
        the old pages). Best effort: False if another process's open read prevented it."""
        if self.is_memory:
            return True
        with self._lock:
            if self._closed or self._depth:
                return False
            try:
                busy = self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error:
                return False
            return not busy

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(sqlite3.Error):
                    self._con.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path} is closed")


def _statements(script: str) -> list[str]:
    # sqlite3.complete_statement lets a script hold several statements (triggers included)
    # without executescript(), which would commit our open transaction.
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


_shared: dict[str, tuple[Database, int]] = {}
_shared_lock = threading.Lock()


def open_database(path: str, synchronous: str = "NORMAL") -> Database:
    """A ``Database`` for ``path``, shared by every store of this process on the same file.

    ``":memory:"`` always gives a new private database. Pair each call with
    :func:`release_database`.
    """
    if is_memory_path(path):
        return Database(MEMORY_PATH)
    resolved = resolve_path(path)
    with _shared_lock:
        db, refs = _shared.get(resolved, (None, 0))
        if db is None or db._closed:
            db, refs = Database(resolved, synchronous), 0
        _shared[resolved] = (db, refs + 1)
        return db


def release_database(db: Database) -> None:
    """Drop one reference taken by :func:`open_database`; the last one closes the connection."""
    if db.is_memory:
        db.close()
        return
    with _shared_lock:
        current, refs = _shared.get(db.path, (None, 0))
        if current is not db:
            db.close()
            return
        if refs <= 1:
            del _shared[db.path]
            db.close()
        else:
            _shared[db.path] = (db, refs - 1)
