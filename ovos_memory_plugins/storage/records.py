"""One JSON record per session in a SQLite table."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import StorageError
from .sqlite import Database, StoreDamaged, release_database
from .windows import safe_table_name

__all__ = ["as_record", "CheckedRecords", "MalformedRecord", "shape_problem", "SqliteRecordStore"]


def as_record(value: Any, session_id: str, where: str) -> dict[str, Any]:
    """``value`` if it is a record (a JSON object); else a :class:`MalformedRecord` naming the session.

    A hand-edited or damaged file may hold ``"old": "a string"``: that session cannot be read,
    and every other session must still be.
    """
    if isinstance(value, dict):
        return value
    raise MalformedRecord(f"{where}: the record of session {session_id!r} is malformed (a {type(value).__name__}, "
                          "not an object); it is left as it is and skipped")


def shape_problem(record: Mapping[str, Any], lists: Mapping[str, type] = {},  # noqa: B006 - never mutated
                  values: Mapping[str, type | tuple[type, ...]] = {}) -> str | None:  # noqa: B006
    """What is wrong with ``record``'s shape: each field of ``lists`` must be a list of that type,
    each of ``values`` of that type (a missing or null field is fine); None when nothing is."""
    for field, kind in lists.items():
        value = record.get(field)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, kind) for v in value)):
            return f"{field!r} must be a list of {'text' if kind is str else 'objects'}"
    for field, kinds in values.items():
        value = record.get(field)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            return f"{field!r} must not be a {type(value).__name__}"
    return None


class MalformedRecord(StorageError, ValueError):
    """A record of the wrong shape: retrying cannot help; the record stays as it is."""


class CheckedRecords:
    """A record store whose records are checked as they are read and before they are changed.

    ``problem(record)`` says what is wrong with a record's shape (None: nothing). A record of a
    hand-edited or damaged file with a field of the wrong type (``"facts": "oops"``) is then a
    :class:`MalformedRecord` naming its session, left as it is, rather than a TypeError in the
    middle of a turn or a field read letter by letter; every other session is read as before.
    """

    def __init__(self, store: Any, problem: Callable[[Mapping[str, Any]], str | None]):
        self._store = store
        self._problem = problem

    def load(self, session_id: str) -> dict[str, Any]:
        return self._checked(self._store.load(session_id), session_id)

    def load_field(self, session_id: str, field: str) -> Any:
        value = self._store.load_field(session_id, field)
        self._checked({} if value is None else {field: value}, session_id)
        return value

    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        return self._store.update(session_id, lambda record: fn(self._checked(record, session_id)))

    def save(self, session_id: str, record: dict[str, Any]) -> None:
        self._store.save(session_id, record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _checked(self, record: dict[str, Any], session_id: str) -> dict[str, Any]:
        problem = self._problem(record)
        if problem:
            where = (getattr(self._store, "path", None) or getattr(getattr(self._store, "db", None), "path", None)
                     or type(self._store).__name__)
            raise MalformedRecord(f"{where}: the record of session {session_id!r} is malformed ({problem}); it is "
                                  "left as it is and skipped")
        return record


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
        return self.db.query(f"SELECT data FROM {self.table} WHERE session_id = ?", (session_id,),
                             lambda rows: self._parse(rows[0][0], session_id) if rows else {})

    def load_field(self, session_id: str, field: str) -> Any:
        """One field of the record (None if absent), parsed by SQLite without the rest."""
        rows = self.db.execute(
            f"SELECT json_type(data) = 'object', json_quote(json_extract(data, '$.' || json_quote(?))) "
            f"FROM {self.table} WHERE session_id = ?", (field, session_id))
        if rows and not rows[0][0]:
            return self.load(session_id).get(field)  # raises the malformed record's StorageError
        return self._loads(rows[0][1]) if rows and rows[0][1] is not None else None

    def save(self, session_id: str, record: dict[str, Any], con: Any = None) -> None:
        if con is None:
            return self.db.transaction(lambda con: self.save(session_id, record, con))
        con.execute(
            f"INSERT INTO {self.table} (session_id, data, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at",
            (session_id, self._dumps(record), time.time()),
        )

    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        def write(con: Any) -> dict[str, Any]:
            self._claim(con, session_id)
            row = con.execute(f"SELECT data FROM {self.table} WHERE session_id = ?", (session_id,)).fetchone()
            record = fn(self._parse(row[0], session_id) if row else {})
            self.save(session_id, record, con)
            return record

        return self.db.transaction(write)

    def _claim(self, con: Any, session_id: str) -> None:
        """Make this transaction the session's only writer until it ends: nothing to do here, as
        ``BEGIN IMMEDIATE`` already serialises every writer (the PostgreSQL store locks the session)."""

    def sessions(self) -> list[str]:
        return [r[0] for r in self.db.execute(f"SELECT session_id FROM {self.table} ORDER BY session_id")]

    def delete(self, session_id: str, con: Any = None) -> bool:
        if con is None:
            with self.db.atomic() as con:
                deleted = self.delete(session_id, con)
            self.db.compact()  # forget() must reach the bytes on disk: free space, split pages, the WAL
            return deleted
        return bool(con.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,)).rowcount > 0)

    def compact(self) -> bool:
        """Leave no byte of deleted or rewritten records in the file (see Database.compact)."""
        return self.db.compact()

    @staticmethod
    def _dumps(record: Any) -> str:
        """The JSON text a record is stored as."""
        return json.dumps(record, ensure_ascii=False)

    @staticmethod
    def _loads(text: str) -> Any:
        return json.loads(text)

    def _parse(self, text: str, session_id: str) -> dict[str, Any]:
        try:
            value = self._loads(text)
        except ValueError as exc:  # this package writes JSON only: the bytes changed on disk
            raise StoreDamaged(f"the record of session {session_id!r} is not JSON ({exc})") from exc
        return as_record(value, session_id, self.db.path)

    def close(self) -> None:
        if self._owns:
            self._owns = False
            release_database(self.db)
