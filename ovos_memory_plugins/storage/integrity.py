"""Recognising a damaged SQLite file, and setting it aside.

A damaged page (a bad SD card sector, a copy cut short) is found two ways: ``PRAGMA
quick_check`` when the file is opened, and SQLite's own "database disk image is malformed"
when an operation meets the page later. Either way the file is moved aside with its journal
(:func:`set_aside`), as a file with a bad header is, and the store goes on with a fresh one:
an update is then written there, never acknowledged while it went nowhere.

quick_check reads every page once: 0.15 s for a 100,000-exchange (97 MB) keyword store on a
shared 2-core machine (``benchmarks/bench_forget.py``), paid once per process at open.

A derived index kept in the file (the FTS5 keyword index) is not a reason to set the file aside:
its statements run inside :func:`index_statements`, where damage met is :class:`IndexDamaged`,
and its owner builds the index again from what it is derived from (the document log). Its own
check (FTS5's ``integrity-check``) is not run at open: 0.48 s at 100,000 exchanges on the same
machine.
"""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from .._core.log import LOG
from .._core.paths import quarantine_file
from ..errors import StorageError

__all__ = ["COMPANIONS", "damage_of", "quick_check", "set_aside", "StoreDamaged"]


class StoreDamaged(StorageError):
    """Bytes SQLite returned without complaint are not what this package wrote (a stored JSON value
    that does not parse): the file is damaged where SQLite's checks do not look."""


class IndexDamaged(StorageError):
    """A derived index kept in the file (the FTS5 keyword index) is damaged, as a statement that
    reads or writes that index alone found: its owner builds it again from the data it is derived
    from, and the file, whose other tables read fine, is not set aside."""

#: SQLite's files beside a database: they belong to it, and move with it.
COMPANIONS = ("-wal", "-shm", "-journal")

#: SQLite's result codes for a damaged file and for one that is not a database.
_DAMAGE_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
#: FTS5's words for its own tables holding what it never wrote (a damaged configuration row).
_INDEX_DAMAGE_TEXTS = ("invalid fts5 file format", "vtable constructor failed")
#: The same, by message (Python < 3.11 has no sqlite_errorcode). Exact phrases: "malformed JSON"
#: from json_extract() is a bad value, not a bad file.
_DAMAGE_TEXTS = ("database disk image is malformed", "malformed database schema", "file is not a database",
                 "file is encrypted")


def _raised_from(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and what it was raised from: a sqlite3 error may be wrapped in a StorageError,
    itself wrapped once more."""
    for _ in range(4):
        if exc is None:
            return
        yield exc
        exc = exc.__cause__ or exc.__context__


def damage_of(exc: BaseException | None) -> str | None:
    """SQLite's message if ``exc`` (or what it was raised from) says the file is damaged, else None."""
    for cause in _raised_from(exc):
        if isinstance(cause, IndexDamaged):
            return None
        if isinstance(cause, StoreDamaged):
            return str(cause)
        if isinstance(cause, sqlite3.DatabaseError):
            code = getattr(cause, "sqlite_errorcode", None)
            if (code is not None and code & 0xFF in _DAMAGE_CODES) or any(t in str(cause) for t in _DAMAGE_TEXTS):
                return str(cause)
            return None
    return None


@contextlib.contextmanager
def index_statements(what: str, sql_only: bool = False) -> Iterator[None]:
    """Around statements that read or write a derived index alone (``what``: its name): damage
    met there (also FTS5's own complaints about its tables) is raised as :class:`IndexDamaged`,
    which :func:`damage_of` does not count as the file's. ``sql_only``: the block runs SQL and
    little else, so a MemoryError there is SQLite's (FTS5 reading a damaged structure record
    may ask for gigabytes) and counts as damage too."""
    try:
        yield
    except MemoryError as exc:
        if not sql_only:
            raise
        raise IndexDamaged(f"{what} is damaged (SQLite ran out of memory reading it)") from exc
    except (sqlite3.DatabaseError, StorageError) as exc:
        if isinstance(exc, IndexDamaged):
            raise
        found = damage_of(exc) or _index_complaint(exc)
        if found is None:
            raise
        raise IndexDamaged(f"{what} is damaged ({found})") from exc


def _index_complaint(exc: BaseException | None) -> str | None:
    """FTS5's own complaint about its tables in ``exc`` (or what it was raised from), else None."""
    error = next((cause for cause in _raised_from(exc) if isinstance(cause, sqlite3.Error)), None)
    return str(error) if error is not None and any(t in str(error) for t in _INDEX_DAMAGE_TEXTS) else None


def quick_check(con: sqlite3.Connection) -> str | None:
    """What ``PRAGMA quick_check`` found wrong with the file (its first problem), or None if sound."""
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        rows = con.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        if damage_of(exc) is None:
            raise
        return str(exc)
    found = " ".join(str(r[0]) for r in rows).strip()
    return None if found == "ok" else f"quick_check: {' '.join(found.split())}"[:300]


def set_aside(path: str, reason: str) -> str:
    """Move a damaged database and its journal to ``<path>.corrupt`` (see quarantine_file); loudly."""
    target = quarantine_file(path, companions=COMPANIONS)
    LOG.error(f"memory store {path} is damaged ({reason}); moved it (with its journal) to {target} and started "
              "a new, empty store: what it held is in that file, nothing new is written there")
    return target
