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

from typing import Any

from ..retrieval import IndexOwner, RetrievalStore
from .documents import PgDocumentLog
from .stores import PgWindowStore

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
        self.worker_id = str(db.worker_key)  # this process's leases (see storage/postgres/__init__.py)
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
        done, failure = self._index_leased(docs)
        self._raise_failure(docs, done, failure)
        return len(docs) == batch

    def _index_transaction(self) -> Any:
        # Vectors and marks are derived: a server crash that loses this commit leaves the
        # documents pending, and they are embedded again.
        return self.db.atomic(durable=False)
