"""The reference package's stores, ``JsonStore`` and ``SqliteStore``, on this package's storage.

Same constructors, methods and file formats as the reference (``load(sid)``, ``save(sid,
rec)``, ``close()``), so code and files written for it keep working, plus ``update(sid, fn)``
(an atomic read-modify-write), ``sessions()`` and ``delete(sid)``. What changed underneath:

* ``JsonStore`` writes atomically *and* holds a file lock across read-modify-write, so two
  processes sharing the file never lose each other's updates (the reference's lock is per
  instance); a corrupt file is moved to ``<file>.corrupt`` (``<file>.corrupt-<time>`` when an
  earlier copy holds that name) instead of being overwritten.
* ``SqliteStore`` keeps the reference table ``sessions(session_id, summary, recent,
  exchange_count, updated_at)`` (an old database opens unchanged), in WAL mode, one
  transaction per save; keys beyond those columns are kept in an added ``extra`` JSON column.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ._core.paths import resolve_path
from .errors import StorageError
from .storage.jsonfile import JsonRecordStore
from .storage.sqlite import Database, StoreDamaged, open_database, release_database
from .storage.windows import safe_table_name

__all__ = ["JsonStore", "SqliteStore"]


class JsonStore(JsonRecordStore):
    """One JSON object ``{session_id: record}`` in ``db_path`` (``~`` expanded)."""

    def __init__(self, db_path: str):
        super().__init__(resolve_path(db_path))


_COLUMNS = ("summary", "recent", "exchange_count", "updated_at")

_SESSIONS_MIGRATIONS = (
    # 1: the reference schema (a no-op on a database the reference created)
    """
    CREATE TABLE IF NOT EXISTS {t} (
        session_id TEXT PRIMARY KEY,
        summary TEXT,
        recent TEXT,              -- JSON list of {{role, content}}
        exchange_count INTEGER,
        updated_at REAL
    );
    """,
    # 2: room for keys the reference did not have
    "ALTER TABLE {t} ADD COLUMN extra TEXT;  -- JSON object of the other record keys",
)


class SqliteStore:
    """The reference's ``sessions`` table, one row per session; ``close()`` is idempotent."""

    def __init__(self, db_path: str, table: str = "sessions", db: Database | None = None):
        self.db = db if db is not None else open_database(db_path)
        self._owns = db is None
        self.table = safe_table_name(table)
        self.db.migrate(f"persistence:{self.table}", [m.format(t=self.table) for m in _SESSIONS_MIGRATIONS])

    def load(self, session_id: str) -> dict[str, Any]:
        return self.db.query(
            f"SELECT summary, recent, exchange_count, updated_at, extra FROM {self.table} WHERE session_id = ?",
            (session_id,), lambda rows: _row_record(rows[0], session_id) if rows else {})

    def save(self, session_id: str, record: dict[str, Any], con: Any = None) -> None:
        if con is None:
            return self.db.transaction(lambda con: self.save(session_id, record, con))
        extra = {k: v for k, v in record.items() if k not in _COLUMNS}
        con.execute(
            f"INSERT OR REPLACE INTO {self.table} (session_id, summary, recent, exchange_count, updated_at, extra) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, record.get("summary", ""), json.dumps(record.get("recent", []), ensure_ascii=False),
             int(record.get("exchange_count", 0) or 0), float(record.get("updated_at") or time.time()),
             json.dumps(extra, ensure_ascii=False) if extra else None),
        )

    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        def write(con: Any) -> dict[str, Any]:
            row = con.execute(
                f"SELECT summary, recent, exchange_count, updated_at, extra FROM {self.table} WHERE session_id = ?",
                (session_id,)).fetchone()
            record = fn(_row_record(row, session_id) if row else {})
            self.save(session_id, record, con)
            return record

        return self.db.transaction(write)

    def sessions(self) -> list[str]:
        return [r[0] for r in self.db.execute(f"SELECT session_id FROM {self.table} ORDER BY session_id")]

    def delete(self, session_id: str) -> bool:
        with self.db.atomic() as con:
            deleted = bool(con.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,)).rowcount > 0)
        self.db.compact()  # forget() must reach the bytes on disk: free space, split pages, the WAL
        return deleted

    def compact(self) -> bool:
        """Leave no byte of deleted or rewritten records in the file (see Database.compact)."""
        return self.db.compact()

    def close(self) -> None:
        if self._owns:
            self._owns = False
            release_database(self.db)


def _row_record(row: Any, session_id: str) -> dict[str, Any]:
    """The record of a row: StoreDamaged if its JSON does not parse (only damage does that), a
    StorageError if a value has the wrong type (a hand edit): that session is skipped."""
    try:
        extra = json.loads(row[4]) if row[4] else {}
        recent = json.loads(row[1]) if row[1] else []
    except ValueError as exc:
        raise StoreDamaged(f"the record of session {session_id!r} is not JSON ({exc})") from exc
    try:
        if not isinstance(extra, dict) or not isinstance(recent, list):
            raise TypeError("'recent' must be a list and 'extra' an object")
        record: dict[str, Any] = dict(extra)
        record.update(summary=row[0] or "", recent=recent, exchange_count=int(row[2] or 0),
                      updated_at=float(row[3] or 0.0))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"the record of session {session_id!r} is malformed ({exc}); it is left as it is "
                           "and skipped") from exc
    return record
