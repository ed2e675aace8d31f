"""A durable job queue: work accepted by ``update_history`` survives a crash before it is done.

Jobs are rows in a SQLite table (or a list in RAM for ``":memory:"``). A worker ``take``s a
batch, does the work, and ``done``s it; a job that was taken but never finished (the process
died) is taken again after a restart, so work is done at least once. Work must therefore be
idempotent (embedding a document twice under the same id is).
"""
from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from .sqlite import Database, release_database
from .windows import safe_table_name

__all__ = ["Job", "MemoryJobQueue", "SqliteJobQueue"]


@dataclass(frozen=True)
class Job:
    id: int
    session_id: str
    payload: dict[str, Any]
    attempts: int = 0


class MemoryJobQueue:
    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def put(self, session_id: str, payload: dict[str, Any], con: Any = None) -> int:
        with self._lock:
            job = Job(next(self._ids), session_id, dict(payload))
            self._jobs[job.id] = job
            return job.id

    def take(self, limit: int = 32) -> list[Job]:
        with self._lock:
            return [self._jobs[k] for k in sorted(self._jobs)[:limit]]

    def done(self, ids: list[int]) -> None:
        with self._lock:
            for job_id in ids:
                self._jobs.pop(job_id, None)

    def failed(self, ids: list[int]) -> None:
        with self._lock:
            for job_id in ids:
                job = self._jobs.get(job_id)
                if job:
                    self._jobs[job_id] = Job(job.id, job.session_id, job.payload, job.attempts + 1)

    def pending(self) -> int:
        with self._lock:
            return len(self._jobs)

    def forget(self, session_id: str, con: Any = None) -> int:
        with self._lock:
            doomed = [k for k, j in self._jobs.items() if j.session_id == session_id]
            for k in doomed:
                del self._jobs[k]
            return len(doomed)

    def close(self) -> None:
        pass


_QUEUE_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS {t} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        payload TEXT NOT NULL,      -- JSON
        created_at REAL NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX IF NOT EXISTS {t}_by_session ON {t} (session_id);
    """,
)


class SqliteJobQueue:
    """Jobs in a table of an existing ``Database``; ``put`` may join the caller's transaction."""

    def __init__(self, db: Database, table: str = "jobs", owns_db: bool = False):
        self.db = db
        self.table = safe_table_name(table)
        self._owns = owns_db
        db.migrate(f"queue:{self.table}", [m.format(t=self.table) for m in _QUEUE_MIGRATIONS])

    def put(self, session_id: str, payload: dict[str, Any], con: Any = None) -> int:
        if con is None:
            with self.db.atomic() as con:
                return self.put(session_id, payload, con)
        cur = con.execute(
            f"INSERT INTO {self.table} (session_id, payload, created_at) VALUES (?, ?, ?)",
            (session_id, json.dumps(payload, ensure_ascii=False), time.time()),
        )
        return int(cur.lastrowid)

    def take(self, limit: int = 32) -> list[Job]:
        rows = self.db.execute(
            f"SELECT id, session_id, payload, attempts FROM {self.table} ORDER BY id LIMIT ?", (limit,))
        return [Job(r[0], r[1], json.loads(r[2]), r[3]) for r in rows]

    def done(self, ids: list[int], con: Any = None) -> None:
        if con is None:
            with self.db.atomic() as con:
                return self.done(ids, con)
        con.executemany(f"DELETE FROM {self.table} WHERE id = ?", [(i,) for i in ids])

    def failed(self, ids: list[int]) -> None:
        with self.db.atomic() as con:
            con.executemany(f"UPDATE {self.table} SET attempts = attempts + 1 WHERE id = ?", [(i,) for i in ids])

    def pending(self) -> int:
        return int(self.db.execute(f"SELECT COUNT(*) FROM {self.table}")[0][0])

    def forget(self, session_id: str, con: Any = None) -> int:
        if con is None:
            with self.db.atomic() as con:
                return self.forget(session_id, con)
        return con.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,)).rowcount

    def close(self) -> None:
        if self._owns:
            self._owns = False
            release_database(self.db)
