"""What the LLM-backed memories (longterm, entity) share: a record store, a client and a worker."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .._core.due import DueQueue, Job
from .._core.log import LOG, LogOnce, Problems
from .._core.paths import default_path, is_memory_path, resolve_path
from .._core.worker import BackgroundWorker
from .._core.worklock import GaveUp, WorkLock
from ..context import ContextMemory
from ..errors import ConfigError, MemoryPluginError, StorageError, opening_error
from ..storage import after_commit, backend_for, open_record_store, store_claim, store_location
from ..storage.readonly import is_read_only
from ..storage.records import CheckedRecords
from .client import SLOW_SERVER_PATIENCE
from .endpoint import chat_client, with_endpoint

__all__ = ["LLMMemory", "open_session_store"]


def open_session_store(owner: str, backend: str, db_path: str | None, stem: str,
                       open_sqlite: Callable[[str], Any], db_url: str | None = None,
                       records: str | None = None) -> tuple[Any, str, str]:
    """The record store for ``backend``, the path (or redacted URL) it uses, and the backend in force.

    Args:
        owner: the plugin name, for messages.
        backend: one of :data:`~ovos_memory_plugins.storage.BACKENDS` (checked by the config).
        db_path: the configured file, or None for ``$XDG_DATA_HOME/ovos/<stem>.json|.db``.
        open_sqlite: builds the SQLite store for a path (each backend keeps its own schema).
        db_url: a PostgreSQL URL; when set, the records are the table ``ovos_<stem>`` there.
        records: what the records hold (``jsonfile.RECORD_KINDS``): a JSON file of another kind's is refused.
    """
    try:
        location, kind = store_location(db_path, db_url, backend)
    except ConfigError as exc:
        raise ConfigError(f"{owner}: {exc}") from exc
    if kind == "postgres":
        from ..storage.postgres import redact

        try:
            return open_record_store(location, kind, table=stem), redact(str(location)), kind
        except (MemoryPluginError, OSError) as exc:
            raise ConfigError(f"{owner}: cannot open db_url {redact(str(location))!r}: {exc}") from exc
    # The path in force, as the store resolves it (``~``, variables, relative to the data folder).
    path = resolve_path(db_path) if db_path else default_path(f"{stem}.db" if backend == "sqlite" else f"{stem}.json")
    if backend == "json" and os.path.exists(path) and backend_for(path) == "sqlite":
        backend = "sqlite"  # an SQLite store (the reference's backend "sqlite") is read as one, never set aside
    try:
        if backend == "sqlite" and not is_memory_path(path):
            return open_sqlite(path), path, backend  # each backend keeps its own (reference) schema
        return open_record_store(path, backend, records=records), path, backend
    except (MemoryPluginError, OSError) as exc:
        raise opening_error(f"{owner}: cannot open db_path {path!r}: {exc}", exc) from exc


def open_job_queue(store: Any, stem: str, request_timeout: float) -> Any:
    """Where the keys with work due wait: a table beside the records on PostgreSQL (shared by every
    process, surviving any of them), else a set in RAM (the records are scanned at start)."""
    db: Any = getattr(store, "db", None)
    if getattr(db, "engine", None) == "postgres":
        from ..storage.postgres.jobs import PgJobQueue

        # Longer than any one piece of work (a few LLM calls, each given up to SLOW_SERVER_PATIENCE
        # times the timeout by a slow server): only a dead worker's lease expires.
        return PgJobQueue(db, f"ovos_{stem}_jobs", lease_s=60.0 + 4 * request_timeout * SLOW_SERVER_PATIENCE)
    return DueQueue()


class LLMMemory(ContextMemory):
    """Base of memories keeping one record per key and doing LLM work off the turn.

    Subclasses declare ``store_stem`` (the default file name) and three
    hooks: ``_open_sqlite(path)``, ``_has_work(record)`` and ``_work_on(key)``. The work queue
    is the set of record keys with work due; the records themselves hold the work (messages not
    yet summarised, exchanges not yet read for facts), so a restart resumes it: the first
    worker step scans the store once. On PostgreSQL the queue is a table committed with the
    records (``_update``): every process's worker claims from it, each job runs once, and a dead
    worker's job is taken over by another.
    """

    store_stem: ClassVar[str]
    #: What its records hold (a key of ``storage.jsonfile.RECORD_KINDS``).
    record_kind: ClassVar[str | None] = None

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self.settings = s = with_endpoint(self.settings, config, self.plugin_name)
        store, self._db_path, backend = open_session_store(self.plugin_name, s.backend, s.db_path,
                                                           self.store_stem, self._open_sqlite, s.db_url,
                                                           self.record_kind)
        if backend != s.backend:  # the file's own kind won (an SQLite store named with backend json)
            self.settings = s = dataclasses.replace(s, backend=backend)
        self._store = CheckedRecords(store, self._record_problem)
        #: The part of a store this memory writes (a composite refuses two members writing one).
        self.store_claim = store_claim(self._db_path, backend, self.store_stem)
        self.client = chat_client(s, owner=self.plugin_name)
        self._log = LogOnce()
        self._problems = Problems()  # degradations other than the endpoint's (see degraded())
        try:
            self._due: Any = open_job_queue(self._store, self.store_stem, s.request_timeout)
        except MemoryPluginError as exc:
            self._store.close()
            raise ConfigError(f"{self.plugin_name}: cannot open the work queue in {self.db_path}: {exc}") from exc
        # Look for work left by an earlier run, once, off the turn (a durable queue holds it already).
        self._scan = not self._due.durable
        # Across processes sharing the file, one does a piece of work at a time (a durable queue
        # already runs each job once; a store in RAM has no other process).
        in_a_file = backend in ("json", "sqlite") and not is_memory_path(self._db_path)
        self._work_lock = WorkLock(self._db_path + ".work.lock") if in_a_file and not self._due.durable else None
        self._worker = BackgroundWorker(f"{self.plugin_name}-worker", self._step, poll=self._due.poll)
        try:
            # A read-only command does no work.
            if not is_read_only() and (self._due.durable or self._store.sessions()):
                self._worker.notify()
        except (MemoryPluginError, OSError) as exc:
            LOG.error(f"{self.plugin_name}: cannot read {self.db_path}: {exc}")

    @property
    def db_path(self) -> str:
        """The file in use (the default when the config names none)."""
        return self._db_path

    # -- hooks -------------------------------------------------------------------------------
    def _open_sqlite(self, path: str) -> Any:
        raise NotImplementedError

    def _has_work(self, record: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def _record_problem(self, record: Mapping[str, Any]) -> str | None:
        """What is wrong with the shape of a stored record (None: nothing): see CheckedRecords."""
        return None

    def _work_on(self, key: str) -> None:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def _load(self, key: str) -> dict[str, Any]:
        try:
            record = dict(self._store.load(key))
        except (MemoryPluginError, OSError) as exc:
            self._log.error("read", f"{self.plugin_name}: cannot read {self.db_path}: {exc}")
            return {}
        self._log.clear("read", f"{self.plugin_name}: reading {self.db_path} works again")
        return record

    def _load_field(self, key: str, field: str) -> Any:
        """One field of a record: a turn reads the facts, not the queue of exchanges beside them."""
        try:
            value = self._store.load_field(key, field)
        except (MemoryPluginError, OSError) as exc:
            self._log.error("read", f"{self.plugin_name}: cannot read {self.db_path}: {exc}")
            return None
        self._log.clear("read", f"{self.plugin_name}: reading {self.db_path} works again")
        return value

    def _mark_due(self, key: str, wake: bool = True) -> None:
        self._due.add(key)
        if wake:
            self._worker.notify()

    def _update(self, key: str, fn: Callable[[dict[str, Any]], dict[str, Any]],
                due: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """``store.update(key, fn)``, and the key queued when ``due(record)``, in one transaction
        where the queue is durable; the worker is woken after the commit."""
        with self._due.transaction():
            record = self._store.update(key, fn)
            queued = due(record)
            if queued:
                self._due.add(key)
        if queued:  # after an enclosing transaction (a composite's) commits, if there is one
            after_commit(getattr(self._store, "db", None), self._worker.notify)
        return record

    def _delete(self, key: str) -> None:
        """Delete the record and its queued work together (forget: no row may keep the key)."""
        with self._due.transaction():
            self._due.discard(key)
            self._store.delete(key)

    def _unmark(self, key: str) -> None:
        self._due.discard(key)

    def _step(self) -> bool:
        if self._scan:
            for key in self._store.sessions():
                try:
                    record = self._store.load(key)
                except StorageError as exc:  # one malformed record must not hold up every other session
                    self._log.error(f"malformed:{key}", f"{self.plugin_name}: {exc}")
                    continue
                if self._has_work(record):
                    self._mark_due(key, wake=False)
            self._scan = False  # only once it succeeded: a failed scan is retried with the step
        job: Job | None = self._due.claim()
        if job is None:
            return False
        try:
            with self._working():
                self._work_on(job.key)
        except GaveUp:  # closing while another process works: the record keeps the work for later
            self._due.retry(job)
            return False
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            # A record of the wrong shape (a hand-edited file): retrying cannot help, and it must
            # not stall the other sessions' work behind it. It stays on disk as it is.
            self._log.error(f"malformed:{job.key}", f"{self.plugin_name}: the record of {job.key!r} is malformed "
                                                    f"({type(exc).__name__}: {exc}); its work is skipped")
        except BaseException:
            self._due.retry(job)  # the worker retries after its delay
            raise
        self._due.done(job)
        return bool(self._due)

    def _working(self) -> Any:
        """The cross-process lock for one piece of work (``_core/worklock.py``), or nothing."""
        if self._work_lock is None:
            return contextlib.nullcontext()
        return self._work_lock.held(lambda: self._worker.stopping)

    # -- health --------------------------------------------------------------------------------
    def degraded(self) -> dict[str, str]:
        out = self._log.failing(self.plugin_name)  # reading or storing failing, a malformed record
        out.update(self._problems.report(self.plugin_name))
        problem = self.client.problem
        if problem:
            out[self.plugin_name] = f"{problem}; {self.offline_fallback} until it answers"
        return out

    #: What this memory does while its endpoint fails (for :meth:`degraded`).
    offline_fallback: ClassVar[str] = "working without the model"

    def _problem(self, part: str, why: str | None, session_id: str | None = None) -> None:
        """Record (or, with None, clear) a degradation of ``part`` of this memory; one that names
        ``session_id`` goes with a forget of that session."""
        if why is None:
            self._problems.clear(part)
        else:
            self._problems.set(part, why, session_id)

    # -- lifecycle -----------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        return super().flush(timeout) & self._worker.flush(timeout)  # both: held updates first, then the work

    def close(self) -> None:
        if self._closed:
            return
        self._close_held()
        self._worker.close(timeout=self.client.completion_timeout + 5)
        if self._work_lock is not None:
            self._work_lock.close()
        self._store.close()
        super().close()
