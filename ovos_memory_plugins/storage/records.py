"""One JSON record per session in a SQLite table."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .sqlite import Database, release_database
from .windows import safe_table_name

__all__ = ["SqliteRecordStore"]

_RECORD_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS {t} (
        session_id TEXT PRIMARY KEY,
        data TEXT NOT NULL,        -- the record as JSON
        updated_at REAL NOT NULL
    );
    """,
)


class SqliteRecordStore:
    """``update`` runs inside ``BEGIN IMMEDIATE``, so read-modify-write is safe across processes."""

    #: The schema scripts (the PostgreSQL store has its own).
    migrations: tuple[str, ...] = _RECORD_MIGRATIONS

    def __init__(self, db: Database, table: str = "records", owns_db: bool = False):
        self.db = db
        self.table = safe_table_name(table)
        self._owns = owns_db
        db.migrate(f"records:{self.table}", [m.format(t=self.table) for m in self.migrations])

    def load(self, session_id: str) -> dict[str, Any]:
        rows = self.db.execute(f"SELECT data FROM {self.table} WHERE session_id = ?", (session_id,))
        return json.loads(rows[0][0]) if rows else {}

    def load_field(self, session_id: str, field: str) -> Any:
        """One field of the record (None if absent), parsed by SQLite without the rest."""
        rows = self.db.execute(
            f"SELECT json_quote(json_extract(data, '$.' || json_quote(?))) FROM {self.table} WHERE session_id = ?",
            (field, session_id))
        return json.loads(rows[0][0]) if rows and rows[0][0] is not None else None

    def save(self, session_id: str, record: dict[str, Any], con: Any = None) -> None:
        if con is None:
            with self.db.atomic() as con:
                return self.save(session_id, record, con)
        con.execute(
            f"INSERT INTO {self.table} (session_id, data, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at",
            (session_id, json.dumps(record, ensure_ascii=False), time.time()),
        )

    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        with self.db.atomic() as con:
            row = con.execute(f"SELECT data FROM {self.table} WHERE session_id = ?", (session_id,)).fetchone()
            record = fn(json.loads(row[0]) if row else {})
            self.save(session_id, record, con)
            return record

    def sessions(self) -> list[str]:
        return [r[0] for r in self.db.execute(f"SELECT session_id FROM {self.table} ORDER BY session_id")]

    def delete(self, session_id: str, con: Any = None) -> bool:
        if con is None:
            with self.db.atomic() as con:
                deleted = self.delete(session_id, con)
            self.db.checkpoint()  # the WAL still holds the deleted record
            return deleted
        return bool(con.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,)).rowcount > 0)

    def close(self) -> None:
        if self._owns:
            self._owns = False
            release_database(self.db)
