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
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from .._core.held import current_update
from .._core.paths import (
    MEMORY_PATH,
    cannot_create,
    check_store_path,
    create_private_file,
    is_memory_path,
    make_private_dirs,
    refuse_foreign_file,
    resolve_path,
    warn_set_aside_copies,
)
from ..errors import ConfigError, MemoryPluginError, MigrationError, StorageError, StoreUnavailable
from .integrity import StoreDamaged, damage_of, quick_check, set_aside
from .readonly import StoreReadOnly, check_migrated, connect_read_only, is_read_only
from .sharing import SharedHandles

__all__ = ["connect", "Database", "map_sqlite_errors", "open_database", "storage_error", "StoreDamaged",
           "StoreReplaced"]

T = TypeVar("T")

#: How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_S = 30.0
#: How long an update waits for another process's write lock before it is held (kept, and stored
#: with a later update): a turn must not stall BUSY_TIMEOUT_S behind a sqlite shell or a backup.
UPDATE_WAIT_S = 5.0
#: How long an update waits once a lock was kept past its wait, until a write gets it again.
LOCKED_RETRY_S = 0.25

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS ovos_memory_migrations (
    component TEXT NOT NULL,
    version INTEGER NOT NULL,       -- index in the component's MIGRATIONS list, from 1
    applied_at REAL NOT NULL,
    PRIMARY KEY (component, version)
)"""


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


#: SQLite's result codes (the low byte of an extended one) for a disk that is full or failing.
_SQLITE_IOERR, _SQLITE_FULL = 10, 13


def _is_disk(exc: sqlite3.Error) -> bool:
    """A full or failing disk: it passes (room is made, the disk comes back), as an outage does."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (_SQLITE_IOERR, _SQLITE_FULL)


def storage_error(exc: sqlite3.Error, what: str) -> StorageError:
    """The StorageError subclass for a sqlite3 error (StoreUnavailable when it is busy or locked,
    or its disk full or failing: the backend then waits for it, as for a server that is down)."""
    if _is_busy(exc) or _is_disk(exc) or (isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc)):
        return StoreUnavailable(f"{what}: {exc}")
    return StorageError(f"{what}: {exc}")


@contextlib.contextmanager
def map_sqlite_errors(what: str) -> Iterator[None]:
    """Translate sqlite3 errors raised inside the block into StorageError subclasses."""
    try:
        yield
    except sqlite3.Error as exc:
        raise storage_error(exc, what) from exc


def connect(path: str, synchronous: str = "NORMAL", reopen: bool = False) -> sqlite3.Connection:
    """Open ``path`` (or ``":memory:"``) ready for this package's use.

    ``isolation_level=None`` hands transaction control to :meth:`Database.atomic`; Python's
    implicit transactions would otherwise commit at surprising moments.
    WAL with ``synchronous=NORMAL`` survives any process crash (SIGKILL included); pass
    ``"FULL"`` to also survive power loss at the cost of an fsync per update.
    """
    if not is_memory_path(path):
        check_store_path(path)  # SQLite would write its journal beside a device, and into a FIFO
        if not reopen and not open_here(path):  # (a file this process has open: a store already)
            refuse_foreign_file(path)  # someone's text file is not a damaged database: it stays as it is
        try:
            make_private_dirs(os.path.dirname(path) or ".")
            create_private_file(path)  # SQLite gives its -wal, -shm and -journal the same mode
        except OSError as exc:
            raise cannot_create(path, exc) from exc
    with map_sqlite_errors(f"cannot open {path}"):
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
        con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if not is_memory_path(path):
            _refuse_foreign(con, path)  # before WAL: a database of something else keeps every byte
            _enable_wal(con)
            con.execute(f"PRAGMA synchronous = {synchronous}")
        # Deleted rows are overwritten with zeros, not left in free pages: forget() must really
        # forget, also for someone reading the file's bytes.
        con.execute("PRAGMA secure_delete = ON")
        con.execute("PRAGMA foreign_keys = ON")
    # A few flipped bytes in stored text must not make a session unreadable for ever: they read
    # as U+FFFD instead of failing every query that meets them.
    con.text_factory = _text
    return con


def _refuse_foreign(con: sqlite3.Connection, path: str) -> None:
    """A ConfigError for a database of something else (a browser's history, an app's data)
    named as a store by mistake. Ours hold the migrations table; the reference's, its longterm
    ``sessions`` table or its lexical FTS5 table, which are migrated in place; a new file, none."""
    rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                       "AND name NOT LIKE 'sqlite_%'").fetchall()
    names = {name for name, _ in rows}
    if not rows:
        # No table yet: a new file, unless its maker stamped it (neither this package nor the
        # reference sets these): another application's database, before its first table.
        stamped = [f"{pragma} {value}" for pragma in ("application_id", "user_version")
                   if (value := con.execute(f"PRAGMA {pragma}").fetchone()[0])]
        if not stamped:
            return
        con.close()
        raise ConfigError(f"{path} is a database of something else (its {stamped[0]}), not a memory store; it "
                          "was left as it is: name a file of its own in db_path")
    if "ovos_memory_migrations" in names or any(_reference_table(con, name, sql) for name, sql in rows):
        return
    con.close()
    raise ConfigError(f"{path} is a database of something else (tables: {', '.join(sorted(names)[:5])}), not a "
                      "memory store; it was left as it is: name a file of its own in db_path")


def _reference_table(con: sqlite3.Connection, name: str, sql: str | None) -> bool:
    """Whether table ``name`` has the shape of one the reference package writes: longterm's
    ``sessions (session_id, summary, recent, ...)``, lexical's FTS5 ``(doc_id, session_id, content)``."""
    fts = "fts5" in (sql or "").lower()
    if name != "sessions" and not fts:
        return False
    columns = {row[1] for row in con.execute(f'PRAGMA table_info("{name.replace(chr(34), chr(34) * 2)}")')}
    return {"session_id", "content"} <= columns if fts else {"session_id", "summary", "recent"} <= columns


def _text(raw: bytes) -> str:
    return str(raw, "utf-8", "replace")


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


def _connect_checked(path: str, synchronous: str) -> sqlite3.Connection:
    """``connect(path)`` after a quick integrity check; a damaged file is set aside for a fresh one."""
    if is_memory_path(path):
        return connect(path, synchronous)
    con = None
    try:
        con = connect(path, synchronous)
        damage = quick_check(con)
    except StorageError as exc:  # not even a database (a bad header): connect() itself fails
        damage = damage_of(exc)
        if damage is None:
            raise
    if damage is None and con is not None:
        return con
    if con is not None:
        with contextlib.suppress(sqlite3.Error):
            con.close()
    set_aside(path, damage or "unreadable")
    return connect(path, synchronous)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class StoreReplaced(StorageError):
    """The file was found damaged and replaced by a fresh, empty one: the operation may run again."""


class Database:
    """One SQLite connection, a lock that serialises its threads, and transaction helpers.

    Share one ``Database`` per file within a process (:func:`open_database`); other processes
    open their own, and SQLite's file locks coordinate them.

    A damaged file (quick_check at open, or "malformed" met later) is set aside and replaced by
    a fresh one with the same schema (the migrations applied so far run again); ``generation``
    counts such replacements, so RAM copies of the data know to reload. A write that met the
    damage raises :class:`StoreReplaced`: :meth:`transaction` runs it again on the new file.
    Before each write the path is checked to still name the file this connection has open: if
    another process set it aside (or it was deleted), this one follows to the new file.
    """

    #: Which engine (a PostgreSQL store's ``PgDatabase`` says "postgres").
    engine = "sqlite"
    #: After a compact that could not run (a full disk), the seconds before a later write tries again.
    COMPACT_RETRY_S = 60.0

    def __init__(self, path: str, synchronous: str = "NORMAL", connection: sqlite3.Connection | None = None):
        self.path = MEMORY_PATH if is_memory_path(path) else path
        self._synchronous = synchronous
        self._owns_connection = connection is None
        #: Opened by a command that only looks (storage.readonly): no write, no file changed.
        self.read_only = connection is None and not is_memory_path(path) and is_read_only()
        if self.read_only:
            self._con = connect_read_only(self.path, BUSY_TIMEOUT_S)
            self._con.text_factory = _text
        else:
            self._con = connection if connection is not None else _connect_checked(self.path, synchronous)
        self._lock = threading.RLock()
        self._depth = 0
        self._locked_elsewhere = False  # a write waited its whole wait in vain (see _begin)
        #: The connection's own wait for a lock, in seconds (an injected connection's may be shorter).
        self._connection_wait_s = int(self._con.execute("PRAGMA busy_timeout").fetchone()[0]) / 1000
        self._closed = False
        self._migrations: list[tuple[str, Sequence[str]]] = []
        self._replacing = False
        self._identity = None if self.is_memory else _identity(self.path)
        #: Replacements of the file so far (a damaged file set aside, or another process's doing).
        self.generation = 0
        #: When a compact last failed (time.monotonic()), while one is owed: a forget's bytes remain.
        self._compact_owed: float | None = None

    @property
    def is_memory(self) -> bool:
        return self.path == MEMORY_PATH

    @contextlib.contextmanager
    def atomic(self, busy_wait: float | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: everything in the block commits together or not at all.

        ``busy_wait``: seconds to wait for another process's write lock instead of
        ``BUSY_TIMEOUT_S`` (StoreUnavailable after that); optional work passes a short one.
        A damaged file met in the block is replaced, and :class:`StoreReplaced` raised.
        """
        with self._lock:
            outermost = not self._depth
            try:
                with self._atomic(busy_wait) as con:
                    yield con
            except Exception as exc:
                if outermost:
                    self._replace_if_damaged(exc)
                raise
            if outermost and self._compact_owed is not None and \
                    time.monotonic() - self._compact_owed >= self.COMPACT_RETRY_S:
                self._compact_again()  # a forget's bytes stayed (a full disk): writes go through again

    @contextlib.contextmanager
    def _atomic(self, busy_wait: float | None) -> Iterator[sqlite3.Connection]:
        self._check_open()
        if self.read_only:
            raise StoreReadOnly(f"{self.path} was opened read-only")
        if not self._depth:
            self._follow_file()
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

    def transaction(self, fn: Callable[[sqlite3.Connection], T], busy_wait: float | None = None) -> T:
        """``fn(con)`` in one write transaction; run again on the new file if this one was damaged.

        ``fn`` must keep its effects inside the transaction (it may run twice).
        """
        try:
            with self.atomic(busy_wait) as con:
                return fn(con)
        except StoreReplaced:
            with self.atomic(busy_wait) as con:
                return fn(con)

    def _begin(self, busy_wait: float | None) -> None:
        # A refused update is held and stored with a later one, so an update waits UPDATE_WAIT_S
        # for another process's lock (a sqlite shell, a backup), not the whole BUSY_TIMEOUT_S; once
        # a lock was kept past a whole wait, the next updates try briefly, until a write gets it.
        # Writes nothing holds (a forget, an import, a migration) wait fully.
        waited_fully = busy_wait is None
        if waited_fully and current_update() is not None:
            busy_wait = LOCKED_RETRY_S if self._locked_elsewhere else min(UPDATE_WAIT_S, self._connection_wait_s)
        try:
            if busy_wait is None:
                self._con.execute("BEGIN IMMEDIATE")
            else:
                self._begin_within(busy_wait)
        except sqlite3.OperationalError as exc:
            self._locked_elsewhere = self._locked_elsewhere or (waited_fully and _is_busy(exc))
            raise
        self._locked_elsewhere = False

    def _begin_within(self, busy_wait: float) -> None:
        usual = int(self._con.execute("PRAGMA busy_timeout").fetchone()[0])  # an injected connection's own
        self._con.execute(f"PRAGMA busy_timeout = {int(busy_wait * 1000)}")
        try:
            self._con.execute("BEGIN IMMEDIATE")
        finally:
            self._con.execute(f"PRAGMA busy_timeout = {usual}")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read of several statements (a deferred transaction)."""
        if self._closed:  # outside the lock: another store's lock is taken below (no lock-order knot)
            with self._after_close() as con:
                yield con
            return
        with self._lock:
            self._check_open()
            if self._depth:
                yield self._con
                return
            with map_sqlite_errors(f"read from {self.path}"):
                self._con.execute("BEGIN")
            try:
                yield self._con
            except Exception as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._con.execute("COMMIT")
                self._replace_if_damaged(exc)
                raise
            with contextlib.suppress(sqlite3.Error):
                self._con.execute("COMMIT")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one read statement and return all rows (from the new file, if this one was damaged)."""
        return self.query(sql, params, list)

    def query(self, sql: str, params: Sequence[Any], parse: Callable[[list[Any]], T]) -> T:
        """``parse(rows)`` of one read statement, under the same lock. A parse that finds stored
        bytes damaged (:class:`StoreDamaged`) counts as SQLite's own damage error: the file is set
        aside, and the read runs again on the new one."""
        if self._closed:
            twin = self._open_twin()
            if twin is not None:  # as a read of that store (inside one of its reads, too)
                return twin.query(sql, params, parse)
            with self._after_close() as con, map_sqlite_errors(f"read from {self.path}"):
                return parse(con.execute(sql, params).fetchall())
        with self._lock:
            self._check_open()
            try:
                return self._parsed(sql, params, parse)
            except StoreReplaced:
                return self._parsed(sql, params, parse)

    def _parsed(self, sql: str, params: Sequence[Any], parse: Callable[[list[Any]], T]) -> T:
        try:
            with map_sqlite_errors(f"read from {self.path}"):
                rows = self._con.execute(sql, params).fetchall()
            return parse(rows)
        except StorageError as exc:
            if not self._depth:  # inside a transaction, its owner replaces the file and runs it again
                self._replace_if_damaged(exc)
            raise

    def migrate(self, component: str, migrations: Sequence[str]) -> None:
        """Apply the not-yet-applied scripts of ``migrations`` (append-only; never edit one)."""
        with self._lock:
            if self.read_only:
                check_migrated(self._con, self.path, component, migrations, first=not self._migrations)
                self._migrations.append((component, migrations))
                return
            try:
                self._apply(component, migrations)
            except StoreReplaced:
                self._apply(component, migrations)  # the new file has the earlier ones already
            self._migrations.append((component, migrations))  # replayed on a file that replaces this one

    def _apply(self, component: str, migrations: Sequence[str]) -> None:
        with map_sqlite_errors(f"migrate {self.path}"):
            self._con.execute(_MIGRATIONS_TABLE)
        try:
            with self.atomic() as con:
                row = con.execute(
                    "SELECT COALESCE(MAX(version), 0) FROM ovos_memory_migrations WHERE component = ?",
                    (component,),
                ).fetchone()
                if row[0] > len(migrations):
                    raise MigrationError(f"{component} in {self.path} is at version {row[0]}, newer than this "
                                         f"package knows ({len(migrations)}): it was left as it is; upgrade "
                                         "ovos-memory-plugins")
                for version in range(row[0] + 1, len(migrations) + 1):
                    for statement in _statements(migrations[version - 1]):
                        con.execute(statement)
                    con.execute(
                        "INSERT INTO ovos_memory_migrations (component, version, applied_at) VALUES (?, ?, ?)",
                        (component, version, time.time()),
                    )
        except (StoreReplaced, MigrationError):
            raise
        except StorageError as exc:
            raise MigrationError(f"cannot migrate {component} in {self.path}: {exc}") from exc

    # -- a damaged or replaced file --------------------------------------------------------
    def _replace_if_damaged(self, exc: BaseException) -> None:
        """If ``exc`` says the file is damaged: set it aside, start a new one, raise StoreReplaced."""
        damage = damage_of(exc)
        if damage is None or self.is_memory or not self._owns_connection or self._replacing or self.read_only:
            return
        self._replacing = True  # the new file's migrations run through atomic(): no second round
        try:
            with contextlib.suppress(sqlite3.Error):
                self._con.close()
            if _identity(self.path) != self._identity:  # another process set it aside already: follow it
                self._reopen()
                raise StoreReplaced(f"{self.path} was damaged ({damage}) and replaced elsewhere") from exc
            try:
                set_aside(self.path, damage)
            except (OSError, MemoryPluginError) as err:  # not a regular file, or not a store (text)
                self._con = connect(self.path, self._synchronous, reopen=True)  # the damaged file, as it is
                raise StorageError(f"{self.path} is damaged ({damage}) and could not be set aside: {err}") from exc
            self._reopen()
        finally:
            self._replacing = False
        raise StoreReplaced(f"{self.path} was damaged ({damage}); it was set aside for a new, empty store") from exc

    def _follow_file(self) -> None:
        """Reopen when the path no longer names the file open here (set aside elsewhere, or deleted)."""
        if self.is_memory or not self._owns_connection or self._identity is None or self.read_only:
            return
        if _identity(self.path) == self._identity:
            return
        from .._core.log import LOG

        LOG.warning(f"memory store {self.path} was replaced or removed by someone else; reopening it")
        with contextlib.suppress(sqlite3.Error):
            self._con.close()
        self._reopen()

    def _reopen(self) -> None:
        with map_sqlite_errors(f"cannot open {self.path}"):
            self._con = connect(self.path, self._synchronous)
        self._identity = _identity(self.path)
        self.generation += 1
        for component, migrations in self._migrations:
            self._apply(component, migrations)

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
            if self._closed or self._depth or self.read_only:
                return False
            try:
                busy = self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error:
                return False
            return not busy

    def compact(self) -> bool:
        """Rewrite the file with its live rows only (``VACUUM``), then empty the WAL: what forget()
        deleted leaves no byte behind, in free pages, in the unused part of a live page (where a
        page split leaves old copies of rows, which secure_delete does not reach), or in the WAL.

        Costs a rewrite of the whole file (1.1 s for a 100,000-exchange keyword store,
        ``benchmarks/bench_forget.py``) and as much free disk as the file, so only forget() calls
        it. False (logged) if it could not run: the rows are deleted all the same, but their bytes
        may stay in the file (and the WAL); the first write
        ``COMPACT_RETRY_S`` later tries again (and again, silently, until one succeeds).
        """
        if self.is_memory:
            return True
        with self._lock:
            self._check_open()
            if self.read_only:
                return False
            warn_set_aside_copies(self.path)
            return self._vacuum()

    def _compact_again(self) -> None:
        """The compact a forget still owes (:meth:`compact`), tried only with room for a copy of
        the file, which VACUUM writes (on a disk still nearly full it would take, for as long as
        it runs, the room other writes need), and never waiting for another process's lock."""
        self._compact_owed = time.monotonic()  # the next try waits COMPACT_RETRY_S, whatever this one does
        try:
            # VACUUM writes the live pages into the WAL (which reuses its own room first): at most the file's size.
            if shutil.disk_usage(os.path.dirname(self.path) or ".").free < os.path.getsize(self.path):
                return
            wait = self._con.execute("PRAGMA busy_timeout").fetchone()[0]
            self._con.execute("PRAGMA busy_timeout = 0")
        except (OSError, sqlite3.Error):
            return
        try:
            self._vacuum()
        finally:
            with contextlib.suppress(sqlite3.Error):
                self._con.execute(f"PRAGMA busy_timeout = {int(wait)}")

    def _vacuum(self) -> bool:
        from .._core.log import LOG

        with self._lock:
            if self._depth:
                raise RuntimeError(f"{self.path}: compact() inside a transaction")
            try:
                with map_sqlite_errors(f"compact {self.path}"):
                    self._con.execute("VACUUM")
            except StorageError as exc:
                if self._compact_owed is None:  # said once; the retries stay quiet until one succeeds
                    LOG.error(f"memory store {self.path}: the deleted rows are gone, but their bytes may stay in "
                              f"the file until it can be compacted ({exc}); a later write tries again")
                self._compact_owed = time.monotonic()
                self.checkpoint()  # the WAL's older copies at least, where the file has room for them
                return False
            if self._compact_owed is not None:
                self._compact_owed = None
                LOG.info(f"memory store {self.path}: compacted now; the deleted rows left no bytes behind")
            if self.checkpoint():
                return True

            # The rewritten pages wait in the WAL while another process reads the old ones; SQLite
            # copies them over at its next checkpoint (at the latest when the last connection closes).
            LOG.warning(f"memory store {self.path}: another process is reading it, so the file keeps the deleted "
                        "bytes until SQLite's next checkpoint")
            return False

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(sqlite3.Error):
                    self._con.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path} is closed")

    @contextlib.contextmanager
    def _after_close(self) -> Iterator[sqlite3.Connection]:
        """A read after :meth:`close`: the file still holds everything (the reference's memories
        answered from RAM after close, and a caller may read what it stored). Through this
        process's open handle on the same file if there is one (it holds what this process wrote
        and needs no new connection), else a read-only connection for this read alone. Writes stay
        refused; a private in-RAM database is gone."""
        if self.is_memory:
            self._check_open()
        twin = self._open_twin()
        if twin is not None:
            with twin.read() as con:
                yield con
            return
        if not os.path.exists(self.path):
            raise StoreUnavailable(f"{self.path} is gone: this memory was closed, and its store deleted since")
        con = connect_read_only(self.path, BUSY_TIMEOUT_S)
        con.text_factory = _text
        try:
            con.execute("BEGIN")
            yield con
        finally:
            con.close()

    def _open_twin(self) -> Database | None:
        """This process's open handle on the same file, if any (see :meth:`_after_close`)."""
        return None if self.is_memory else _open_handle(self.path)


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


_shared: SharedHandles[Database] = SharedHandles()


def open_here(resolved: str) -> bool:
    """Whether this process has the SQLite file ``resolved`` open (a shared :class:`Database`).

    Then nothing else may open and close the file: closing any descriptor of a file drops every
    POSIX lock the process holds on it, SQLite's included (SQLite keeps its own descriptors open
    for that reason, but cannot know of ours). Another process would then take this one for gone:
    delete the WAL this one still writes, or write at the same time."""
    return _open_handle(resolved) is not None


def _open_handle(path: str) -> Database | None:
    """This process's open shared :class:`Database` on the file ``path``, if any."""
    return next((db for db in _shared.values() if db.path == path and not db._closed), None)


def open_database(path: str, synchronous: str = "NORMAL") -> Database:
    """A ``Database`` for ``path``, shared by every store of this process on the same file.

    ``":memory:"`` always gives a new private database. Pair each call with
    :func:`release_database`.
    """
    if is_memory_path(path):
        return Database(MEMORY_PATH)
    resolved = check_store_path(resolve_path(path))
    if is_read_only() and not os.path.exists(resolved):
        return Database(MEMORY_PATH)  # nothing there: an empty store, and no file made for it
    read_only = is_read_only()
    return _shared.take(_shared.key(resolved, read_only), lambda: Database(resolved, synchronous))


def release_database(db: Database) -> None:
    """Drop one reference taken by :func:`open_database`; the last one closes the connection."""
    if db.is_memory:
        db.close()
        return
    _shared.release(_shared.key(db.path, db.read_only), db)
