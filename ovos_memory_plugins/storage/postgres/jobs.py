"""A durable queue of background work on PostgreSQL, shared by every process and host of a store.

One row per key with work due (the LLM memories' "set of keys with work due", made durable and
shared). A worker *claims* the oldest due row with ``FOR UPDATE SKIP LOCKED`` and sets a lease,
commits, and does the work outside any transaction (an LLM call takes seconds: no lock is held
across it). ``done`` deletes the row if nothing was queued for the key meanwhile (``generation``
counts the ``add`` calls), else releases it to run again; ``retry`` releases it after a delay.

So each job runs once across all processes while its worker lives; a worker that dies (kill -9)
leaves a lease that the next claim by any process takes at once (its connection's liveness
lock is gone: ``WORKER_GONE``), or, if the worker hangs or its host vanishes without closing
the connection, once the lease expires after ``lease_s``. A job therefore runs *at least* once:
the work commits its result only if the record still holds what it read (the LLM memories'
commits check exactly that).

``add`` called inside the caller's transaction (``transaction()``) commits the job with the
record change that creates the work: no crash can leave one without the other.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ..._core.due import Job
from . import WORKER_GONE, PgDatabase

__all__ = ["PgJobQueue"]

_JOB_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS {t} (
        key text PRIMARY KEY,                     -- a record key (a session id)
        generation bigint NOT NULL DEFAULT 1,     -- add() calls so far: new work while a job runs
        run_after double precision NOT NULL,      -- unix time it may run (a retry waits)
        lease_owner text,                         -- the worker running it, until lease_until
        lease_until double precision,
        attempts integer NOT NULL DEFAULT 0
    );
    -- (run_after, key): the claim reads the oldest due rows from the index, never sorting them all.
    CREATE INDEX IF NOT EXISTS {t}_due ON {t} (run_after, key);
    """,
)


class PgJobQueue:
    """Keys with work due, in a table of the store's database; see the module docstring."""

    durable = True

    def __init__(self, db: PgDatabase, table: str, lease_s: float = 120.0, poll: float = 5.0):
        self.db = db
        self.table = table
        self.lease_s = lease_s
        #: How often an idle worker looks for work queued (or abandoned) by other processes.
        self.poll: float | None = poll
        self.owner = str(db.worker_key)
        db.migrate(f"jobs:{table}", [m.format(t=table) for m in _JOB_MIGRATIONS])

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.db.atomic():
            yield

    def add(self, key: str) -> None:
        """Queue ``key`` (in the caller's open transaction, if any)."""
        with self.db.atomic() as con:
            con.execute(f"INSERT INTO {self.table} AS j (key, run_after) VALUES (?, ?) "
                        "ON CONFLICT (key) DO UPDATE SET generation = j.generation + 1, "
                        "run_after = LEAST(j.run_after, excluded.run_after)", (key, time.time()))

    def discard(self, key: str) -> None:
        """Drop ``key``'s job (a forgotten session): no row may keep its id."""
        with self.db.atomic() as con:
            con.execute(f"DELETE FROM {self.table} WHERE key = ?", (key,))

    def claim(self) -> Job | None:
        """The oldest due job nobody holds, leased to this worker; None when there is none."""
        now = time.time()
        with self.db.atomic(durable=False) as con:  # a lease lost in a server crash: the job runs again
            row = con.execute(
                f"UPDATE {self.table} SET lease_owner = ?, lease_until = ?, attempts = attempts + 1 "
                f"WHERE key = (SELECT key FROM {self.table} WHERE run_after <= ? AND {self._free} "
                "ORDER BY run_after, key LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "RETURNING key, generation", (self.owner, now + self.lease_s, now, now)).fetchone()
        return None if row is None else Job(row[0], int(row[1]))

    def done(self, job: Job) -> None:
        """The work is committed: drop the job, or release it if work was queued meanwhile."""
        with self.db.atomic(durable=False) as con:  # lost in a server crash: the job runs again, idempotent
            gone = con.execute(f"DELETE FROM {self.table} WHERE key = ? AND lease_owner = ? AND generation = ?",
                               (job.key, self.owner, job.token)).rowcount
            if not gone:
                con.execute(f"UPDATE {self.table} SET lease_owner = NULL, lease_until = NULL, attempts = 0 "
                            "WHERE key = ? AND lease_owner = ?", (job.key, self.owner))

    def retry(self, job: Job, delay: float = 5.0) -> None:
        """The work failed: release the job to run again after ``delay`` seconds."""
        with self.db.atomic(durable=False) as con:
            con.execute(f"UPDATE {self.table} SET lease_owner = NULL, lease_until = NULL, run_after = ? "
                        "WHERE key = ? AND lease_owner = ?", (time.time() + delay, job.key, self.owner))

    def __bool__(self) -> bool:
        """Whether a job is due now that nobody holds."""
        now = time.time()
        return bool(self.db.execute(f"SELECT 1 FROM {self.table} WHERE run_after <= ? AND {self._free} LIMIT 1",
                                    (now, now)))

    #: A job nobody holds: never leased, lease expired, or its worker gone (one parameter: now).
    _free = f"(lease_until IS NULL OR lease_until < ? OR {WORKER_GONE.format(col='lease_owner')})"

    def __len__(self) -> int:
        return int(self.db.execute(f"SELECT count(*) FROM {self.table}")[0][0])
