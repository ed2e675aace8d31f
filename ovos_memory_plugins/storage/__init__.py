"""Durable stores shared by every backend with state.

Two kinds of store, each with a reference implementation in RAM and durable ones:

* a **window store** keeps each session's verbatim messages. ``append`` normalises the new
  messages against the last stored one (:func:`~ovos_memory_plugins.messages.fold_into`),
  appends them and trims to the policy, all in one atomic step, so two processes appending to
  one session never lose or duplicate a message.
* a **record store** keeps one JSON-able dict per session (a summary, a list of facts).
  ``update(session_id, fn)`` is an atomic read-modify-write.

:func:`open_window_store` and :func:`open_record_store` choose the implementation from the
``backend`` name or, when that is not given, from the location itself (:func:`backend_for`):
``":memory:"`` or ``None`` keeps it in RAM; a ``postgresql://`` URL is a PostgreSQL database
(shared by every process and host that names it); an existing file is read by its first bytes
(the SQLite header: SQLite; ``{``: JSON, as the reference writes at any path, suffix or not); any
other path (a new or empty file) by its name: ``.json`` is JSON, anything else SQLite.
:func:`store_location` turns a backend's ``db_path``/``db_url``/``backend`` keys into one location.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from .._core.compat import AgentMessage
from .._core.paths import SQLITE_HEADER, check_store_path, is_memory_path, resolve_path
from ..errors import ConfigError
from .policy import WindowPolicy
from .postgres import is_postgres_url
from .postgres import redact as _redacted
from .readonly import is_read_only, read_only
from .sharing import WHOLE_FILE, StoreClaim

__all__ = [
    "after_commit",
    "backend_for",
    "BACKENDS",
    "open_database_at",
    "open_record_store",
    "open_window_store",
    "read_only",
    "RecordStore",
    "release_database",
    "store_claim",
    "store_location",
    "WindowPolicy",
    "WindowStore",
]

#: The store backends a config may name.
BACKENDS = ("sqlite", "json", "memory", "postgres")


class WindowStore(Protocol):
    #: Returns the question the new messages' first answer pairs with (the SQL stores) or None.
    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> Any: ...
    def replace(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> list[AgentMessage]: ...
    def load(self, session_id: str, policy: WindowPolicy) -> list[AgentMessage]: ...
    def sessions(self) -> list[str]: ...
    def forget(self, session_id: str) -> int: ...
    #: Delete the messages a chooser picks (positions in the stored order); how many.
    def drop(self, session_id: str, choose: Callable[[Sequence[AgentMessage]], set[int]]) -> int: ...
    def close(self) -> None: ...


class RecordStore(Protocol):
    def load(self, session_id: str) -> dict[str, Any]: ...
    def load_field(self, session_id: str, field: str) -> Any: ...
    def save(self, session_id: str, record: dict[str, Any]) -> None: ...
    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]: ...
    def sessions(self) -> list[str]: ...
    def delete(self, session_id: str) -> bool: ...
    def compact(self) -> bool: ...
    def close(self) -> None: ...


_NEEDS_URL = "'backend': 'postgres' needs 'db_url' (postgresql://user@host/database)"


def backend_for(path: str | None, backend: str | None = None) -> str:
    """The store backend for ``path``: explicit ``backend`` first, then the file's content, then its name.

    The content wins over the name because the reference writes JSON at any path (its default
    ``~/.local/share/recency_memory`` has no suffix): judged by name, such a file would be
    opened as SQLite and quarantined as corrupt.
    """
    if is_memory_path(path):
        return "memory"
    if is_postgres_url(path):
        if backend not in (None, "postgres"):
            raise ConfigError(f"'backend' is {backend!r} but the store is a PostgreSQL URL; remove one of them")
        return "postgres"
    if backend == "postgres":
        raise ConfigError(_NEEDS_URL)
    if backend:
        if backend not in BACKENDS:
            raise ConfigError(f"'backend' is {backend!r}; allowed values are {', '.join(map(repr, BACKENDS))}")
        return backend
    return _backend_by_content(str(path)) or ("json" if str(path).lower().endswith(".json") else "sqlite")


def _backend_by_content(path: str) -> str | None:
    """``"sqlite"`` or ``"json"`` when the file's first bytes say so; None if absent, empty or unclear."""
    real = check_store_path(resolve_path(path))  # never read a FIFO or a device: it may block or be endless
    from .sqlite import open_here

    if open_here(real):  # reading it would cost this process its SQLite locks on it
        return "sqlite"
    try:
        with open(real, "rb") as f:
            head = f.read(4096)
    except OSError:  # missing (a new store) or unreadable: the name decides, the store reports errors
        return None
    if head.startswith(SQLITE_HEADER):
        return "sqlite"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):  # a byte order mark too
        return "json"
    if head and is_read_only():  # a read-only command never quarantines: it says what the file is not
        raise ConfigError(f"'db_path' {real} is neither an SQLite nor a JSON memory store; it was left as it is: "
                          "name the memory's own file")
    return None  # damaged or foreign bytes: the store of the name's kind quarantines them


def store_location(db_path: str | None, db_url: str | None, backend: str | None) -> tuple[str | None, str | None]:
    """``(location, backend)`` from a backend's keys: ``db_url`` (a PostgreSQL URL) when set, and
    then ``db_path`` and ``backend`` are unused; else ``db_path`` (one holding a PostgreSQL URL is
    taken as ``db_url``).

    >>> store_location("~/m.db", "postgresql://ovos@db/memory", "json")
    ('postgresql://ovos@db/memory', 'postgres')
    """
    if db_url is not None:
        if not is_postgres_url(db_url):
            raise ConfigError("'db_url' must be a PostgreSQL URL (postgresql://user@host/database), not "
                              f"{_redacted(db_url)!r}")
        return db_url, "postgres"
    if is_postgres_url(db_path):
        return db_path, "postgres"
    if backend == "postgres":
        raise ConfigError(_NEEDS_URL)
    return db_path, backend


def store_claim(location: str | None, kind: str, part: str) -> StoreClaim | None:
    """What a memory writes of the store at ``location`` (``kind`` as :func:`backend_for` says):
    the tables ``part`` names, or the whole file for JSON; None for a store in RAM, its own."""
    if kind == "memory" or is_memory_path(location):
        return None
    # SQLite's table names, and PostgreSQL's unquoted ones, ignore case: "Lex" and "lex" are one table.
    return StoreClaim(str(location), WHOLE_FILE if kind == "json" else part.lower())


def open_database_at(location: str) -> Any:
    """The shared database of a SQLite path or a PostgreSQL URL (pair with :func:`release_database`)."""
    if is_postgres_url(location):
        from .postgres import open_pg_database
        return open_pg_database(location)
    from .sqlite import open_database
    return open_database(location)


def after_commit(db: Any, fn: Callable[[], None]) -> None:
    """Call ``fn`` once ``db``'s open transaction (in this thread) has committed; SQLite: now.

    On PostgreSQL several memories' updates may share one transaction (a composite's); a
    background worker woken before it commits would find nothing to do.
    """
    hook = getattr(db, "after_commit", None)
    if hook is None:
        fn()
    else:
        hook(fn)


def release_database(db: Any) -> None:
    """Release a database taken by :func:`open_database_at` (or either engine's own opener)."""
    if getattr(db, "engine", "sqlite") == "postgres":
        from .postgres import release_pg_database
        release_pg_database(db)
        return
    from .sqlite import release_database as release_sqlite
    release_sqlite(db)


T = TypeVar("T")


def _built_on(db: Any, build: Callable[[Any], T]) -> T:
    """``build(db)``; if that fails (a migration, say), ``db`` is released: a store that never
    existed must not keep its connection open until the process exits."""
    try:
        return build(db)
    except BaseException:
        release_database(db)
        raise


def open_window_store(path: str | None, backend: str | None = None, table: str = "window") -> WindowStore:
    """A window store at ``path`` (a file, ``":memory:"`` or a PostgreSQL URL).

    On PostgreSQL the table is named ``ovos_<table>`` (``window`` is a reserved word there).
    """
    kind = backend_for(path, backend)
    if kind == "postgres":
        from .postgres import open_pg_database
        from .postgres.stores import PgWindowStore
        return _built_on(open_pg_database(str(path)), lambda db: PgWindowStore(db, f"ovos_{table}", owns_db=True))
    if kind == "memory":
        from .memory import MemoryWindowStore
        return MemoryWindowStore()
    if kind == "json":
        from .jsonfile import MemoryJsonStore
        from .windows import RecordWindowStore
        return RecordWindowStore(MemoryJsonStore(resolve_path(str(path)), kind="a window"), owns_store=True)
    from .sqlite import open_database
    from .windows import SqliteWindowStore
    return _built_on(open_database(str(path)), lambda db: SqliteWindowStore(db, table, owns_db=True))


def open_record_store(path: str | None, backend: str | None = None, table: str = "records",
                      records: str | None = None) -> RecordStore:
    """A record store at ``path`` (a file, ``":memory:"`` or a PostgreSQL URL: table ``ovos_<table>``);
    a JSON file holding another kind of records than ``records`` (see ``jsonfile.RECORD_KINDS``)
    is refused."""
    kind = backend_for(path, backend)
    if kind == "postgres":
        from .postgres import open_pg_database
        from .postgres.stores import PgRecordStore
        return _built_on(open_pg_database(str(path)), lambda db: PgRecordStore(db, f"ovos_{table}", owns_db=True))
    if kind == "memory":
        from .memory import MemoryRecordStore
        return MemoryRecordStore()
    if kind == "json":
        from .jsonfile import MemoryJsonStore
        return MemoryJsonStore(resolve_path(str(path)), kind=records)
    from .records import SqliteRecordStore
    from .sqlite import open_database
    return _built_on(open_database(str(path)), lambda db: SqliteRecordStore(db, table, owns_db=True))
