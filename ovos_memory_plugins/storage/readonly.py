"""Read-only opening of stores, for commands that only look (``ovos-memory sessions``, ``export``...).

Inside ``with read_only():`` every store opened in this thread changes no file: a SQLite file is
opened ``mode=ro`` (and ``immutable`` when no WAL is beside it, so not even the ``-shm`` and
``-wal`` files appear), a JSON file is read without its lock file, a missing file is an empty
store kept in RAM, nothing is created, migrated, quarantined or set aside, and any write raises
:class:`StoreReadOnly`. A file that
is not a store of the kind asked for (an export passed by mistake, another backend's
database) is a StorageError naming it, never a file to move aside.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sqlite3
from collections.abc import Iterator, Sequence

from .._core.paths import check_store_path
from ..errors import ConfigError, StorageError, StoreUnavailable

__all__ = ["check_migrated", "connect_read_only", "is_read_only", "read_only", "StoreReadOnly"]

_READ_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("ovos_memory_read_only", default=False)


class StoreReadOnly(StorageError):
    """A write to a store opened read-only."""


@contextlib.contextmanager
def read_only() -> Iterator[None]:
    """Stores opened in this block are read-only (see the module docstring)."""
    token = _READ_ONLY.set(True)
    try:
        yield
    finally:
        _READ_ONLY.reset(token)


def is_read_only() -> bool:
    return _READ_ONLY.get()


def connect_read_only(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection that cannot write; StorageError if ``path`` is not an SQLite database."""
    real = check_store_path(path)
    if not os.path.exists(real):
        raise StoreUnavailable(f"there is no store at {path} (a read-only command creates none)")
    # Without a WAL beside it the file holds everything, and "immutable" reads it without
    # creating the -shm and -wal files a read-only WAL reader otherwise leaves behind.
    mode = "ro" if os.path.exists(real + "-wal") else "ro&immutable=1"
    from pathlib import Path

    try:
        con = sqlite3.connect(f"{Path(real).as_uri()}?mode={mode}", uri=True, timeout=busy_timeout_s,
                              check_same_thread=False, isolation_level=None)
        con.execute("PRAGMA query_only = ON")
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"{path} is not an SQLite memory store ({exc}); it was left as it is") from exc
    return con


def check_migrated(con: sqlite3.Connection, path: str, component: str, migrations: Sequence[str],
                   first: bool = True) -> None:
    """StorageError unless every script of ``component`` was applied to this file (it cannot be
    migrated read-only: it is another kind of store, or one written by an older version).
    ``first``: no other component of the memory opening it was checked yet; a later one missing
    is the memory's own store, written before that table was needed (an option turned on since,
    a newer version), not another memory's."""
    try:
        row = con.execute("SELECT COALESCE(MAX(version), 0) FROM ovos_memory_migrations WHERE component = ?",
                          (component,)).fetchone()
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"{path} is not a memory store of this kind ({exc}); it was left as it is") from exc
    if not row[0] and first:  # another memory's store: opening it to write would add this one's tables to it
        others = sorted({str(r[0]).split(":")[-1] for r in con.execute("SELECT component FROM ovos_memory_migrations")})
        held = f" but {', '.join(map(repr, others))}" if others else ""
        raise ConfigError(f"{path} holds no {component.split(':')[-1]!r} table{held}: it is the store of another "
                          "memory; name this memory's own file; it was left as it is")
    if row[0] < len(migrations):
        what = "holds no" if not row[0] else "has an older version of its"
        raise StorageError(f"{path} {what} {component.split(':')[-1]!r} table yet (open it once with a command that "
                           "writes, which adds it); it was left as it is")
