"""A retrieval memory's store on PostgreSQL: the same window, document log and index queue, shared.

Two things change from the SQLite store, both because several processes and hosts use one
database at once:

* an index kept in the database (the keyword postings) is written in the update's own
  transaction: at commit every process sees the exchange and its index entries together, and
  there is no queue to share;
* a slow index (embeddings) is built from the shared queue of pending documents: a worker
  leases a batch (no other worker takes it), embeds it outside any transaction (neither the
  shared connection nor a lock is held while the model runs), then writes the vectors and marks
  the documents in one transaction that first locks those still leased to it. A document
  forgotten meanwhile is skipped; the leases of a worker that dies are taken again by any
  process's worker, which also looks for such work every ``poll`` seconds.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..storage.postgres_stores import PgWindowStore
from .documents import Document
from .pg_documents import PgDocumentLog
from .store import IndexOwner, RetrievalStore

__all__ = ["PgRetrievalStore"]

#: Seconds a worker holds a leased batch: far longer than embedding one takes, so only a dead
#: worker's lease expires.
LEASE_S = 120.0


class PgRetrievalStore(RetrievalStore):
    window_class = PgWindowStore
    docs_class = PgDocumentLog
    docs: PgDocumentLog
    db: Any  # a PgDatabase
    poll = 10.0

    def __init__(self, owner: IndexOwner, db: Any, prefix: str, log: Any):
        self.worker_id = str(db.worker_key)  # this process's leases (see storage/postgres.py)
        super().__init__(owner, db, prefix, log)
        self._lease_owner = self.worker_id  # flush() waits for what other workers hold
        # One session lock covers the window and the documents: a turn takes it once.
        self.window.lock_scope = self.docs.lock_scope = self.docs.table  # type: ignore[attr-defined]

    def _indexes_in_background(self, owner: IndexOwner) -> bool:
        return owner.background_index and not owner.index_in_database

    def ensure_started(self) -> None:
        started = self._started
        super().ensure_started()
        if not started and self.worker is not None and not self.db.read_only:
            self.worker.notify()  # start looking for work other processes left (polls from now on)

    def index_step(self, busy_wait: float | None = None) -> bool:
        if not self.background:
            return super().index_step(busy_wait)
        batch = self.owner.index_batch
        docs = self.docs.lease(batch, self.worker_id, LEASE_S)
        if not docs:
            return False
        prepared, failure = self._prepare_each(docs)
        try:
            if prepared:
                # Vectors and marks are derived: a server crash that loses this commit leaves the
                # documents pending, and they are embedded again.
                with self.db.atomic(durable=False) as con:
                    live = self.docs.lock_leased(con, sorted(prepared), self.worker_id)
                    ready = [d for d in docs if d.rowid in live]
                    if ready:
                        self.owner._store_prepared(ready, [prepared[d.rowid] for d in ready])
                    self.docs.mark_indexed(con, [d.rowid for d in ready], True)
        except BaseException:
            self.docs.release([d.rowid for d in docs], self.worker_id)
            raise
        self.docs.release([d.rowid for d in docs if d.rowid not in prepared], self.worker_id)
        if failure is not None:
            if prepared:
                self._log.error("unindexable", "%s: %d of %d document(s) could not be indexed (%s); they stay "
                                "queued and are retried", self._name, len(docs) - len(prepared), len(docs), failure)
            raise failure
        return len(docs) == batch

    def _prepare_each(self, docs: Sequence[Document]) -> tuple[dict[int, Any], Exception | None]:
        """``{rowid: prepared}`` for the documents the owner could prepare (the batch, else one by
        one, so one the embedder rejects holds up no other), and the first failure."""
        try:
            return dict(zip([d.rowid for d in docs], self.owner._prepare_documents(docs))), None
        except Exception as exc:  # noqa: BLE001 - retried one by one below
            if len(docs) == 1:
                return {}, exc
        out: dict[int, Any] = {}
        failure: Exception | None = None
        for doc in docs:
            try:
                out[doc.rowid] = self.owner._prepare_documents([doc])[0]
            except Exception as exc:  # noqa: BLE001 - stays queued; the caller reports the first
                failure = failure or exc
        return out, failure
