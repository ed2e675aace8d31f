"""A retrieval memory's own database: its verbatim window, its document log and the index queue.

All three live in one SQLite file, so one transaction covers a turn: the window grows and the
exchange becomes a document together, or neither does. The backend's index (FTS5 rows,
vectors) is derived from the document log: documents are written ``indexed = 0`` when the
backend indexes in the background, and a worker indexes them from that durable queue, so
nothing is lost if the process dies first, and a restart resumes the work.

A turn never waits for that work. Until a document is indexed, :attr:`RetrievalStore.pending`
recalls it by its words (``_index/pending.py``). Batches are small (``index_batch``
documents, ``index_chars`` characters), so the indexer's transactions and model calls are
short; an outside index (vectors) leases its batch, so processes sharing the file never embed
the same documents, and ``flush()`` also waits for what other processes hold.

The owner is the memory (:class:`IndexOwner`): it says how it indexes (class attributes) and
does the indexing itself (``_store_documents``, ``_delete_documents``). ``CompositeMemory``
has no such store: its window and documents are its members'.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from .._core.clock import said_now
from .._core.compat import AgentMessage
from .._core.log import LogOnce
from .._core.owners import lease_owner
from .._core.worker import BackgroundWorker
from .._index.pending import PendingRecall
from .._memory.exports import unseen_messages
from ..errors import MemoryPluginError
from . import after_commit, release_database
from .documents import (
    Document,
    DocumentLog,
    PastExchange,
    exchange_positions,
    exchange_texts,
    format_exchange,
    within_chars,
)
from .policy import WindowPolicy
from .sqlite import Database
from .windows import SqliteWindowStore, answer_first, safe_table_name

__all__ = ["IndexOwner", "RetrievalStore"]

#: Seconds an indexer holds the documents it leased: far longer than a batch takes, so only a
#: dead process's lease runs out (its documents are then indexed by another).
LEASE_S = 120.0
#: Seconds within which an answer on its own continues the answer stored before it (a persona
#: that records each thing it speaks sends an answer in parts, seconds apart) and pairs with that
#: answer's question; later it pairs with none (it may open another day's talk).
CONTINUATION_S = 60.0
#: How often flush() looks whether documents another process holds are done.
FLUSH_POLL_S = 0.1
#: Seconds between a turn's attempts to index again what an index written in the turn's own
#: transaction refused (a backend that stays down would otherwise cost every turn a failure).
INLINE_RETRY_S = 30.0
#: Batches indexed at first use, of what an earlier process left pending without a worker.
START_BATCHES = 32


class IndexOwner(Protocol):
    """What a retrieval memory tells its store about its index."""

    plugin_name: ClassVar[str]
    #: True: documents are indexed by a background worker (slow indexes: embeddings).
    background_index: ClassVar[bool]
    #: Documents indexed per batch.
    index_batch: ClassVar[int]
    #: Characters of text per batch beyond its first document (None: no bound).
    index_chars: ClassVar[int | None]
    #: Seconds the background indexer lets new documents gather, so one batch carries a burst.
    index_delay: ClassVar[float]
    #: How a failing background step is logged (once): "error" or "warning".
    index_failure_level: ClassVar[str]
    #: True: the index is in this same database and cheap to write (keywords): the indexer writes
    #: entries and marks in one transaction. False: documents are leased and prepared (embedded)
    #: outside any transaction. Whether a forget joins the index's writes is ``_index_in_database()``.
    index_in_database: ClassVar[bool]
    #: False: the index is in RAM and every stored document is indexed again on first use.
    index_survives_restart: ClassVar[bool]

    def _store_documents(self, docs: Sequence[Document]) -> None: ...
    def _delete_documents(self, docs: Sequence[Document]) -> None: ...
    def _index_step(self, busy_wait: float | None = None) -> bool: ...
    def _index_in_database(self) -> bool: ...
    #: The slow part of indexing (embedding), run outside any transaction, one result per document.
    def _prepare_documents(self, docs: Sequence[Document]) -> list[Any]: ...
    #: The write of what ``_prepare_documents`` made, inside the transaction that marks the documents.
    def _store_prepared(self, docs: Sequence[Document], prepared: Sequence[Any]) -> None: ...


class RetrievalStore:
    """The window, the document log and the index queue of one retrieval memory.

    A memory on a PostgreSQL database gets the subclass ``PgRetrievalStore``
    (``storage/postgres/retrieval.py``): the same turn, with its locks and the shared queue.
    """

    window_class: type[SqliteWindowStore] = SqliteWindowStore
    docs_class: type[DocumentLog] = DocumentLog
    #: How often an idle indexer looks for documents other processes left (None: never).
    poll: float | None = None

    def __init__(self, owner: IndexOwner, db: Database, prefix: str, log: LogOnce):
        self.owner = owner
        self.db = db
        prefix = safe_table_name(prefix)
        try:
            self.window = self.window_class(db, f"{prefix}_window")
            self.docs = self.docs_class(db, f"{prefix}_docs")
        except BaseException:
            release_database(db)  # a store that never existed keeps no connection open
            raise
        self._log = log
        self._started = False
        self._start_lock = threading.Lock()
        self._updates = 0
        #: Documents are indexed by the background worker (else in the update's transaction).
        self.background = self._indexes_in_background(owner)
        self.worker = BackgroundWorker(f"{owner.plugin_name}-indexer", owner._index_step,
                                       batch_delay=owner.index_delay, poll=self.poll,
                                       failure_level=owner.index_failure_level) if self.background else None
        #: Keyword recall of the documents the worker has not indexed yet (None: nothing waits).
        self.pending = PendingRecall(self.docs) if self.background else None
        #: Without a worker: documents wait that an inline index refused (or an earlier process
        #: left), indexed again at a write once their retry is due, or at flush().
        self._inline_pending = False
        self._retry_inline_at = 0.0
        self._lease_owner = lease_owner()  # this store's leases, among every process's (a dead one's are freed)

    def _indexes_in_background(self, owner: IndexOwner) -> bool:
        return owner.background_index

    @property
    def _name(self) -> str:
        return self.owner.plugin_name

    # -- a turn --------------------------------------------------------------------------
    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> int:
        """Append to the window and store each exchange as a document, in one transaction.

        Returns the number of documents written. A store failure raises (the caller logs it).
        """
        self.ensure_started()
        background = self.background

        def write(con: Any) -> list[Document]:
            question = self.window.append(session_id, messages, policy, con=con)
            said, cutoff = said_now(), policy.cutoff()
            if question is None and answer_first(messages):
                question = self.docs.continued_question(con, session_id, said, CONTINUATION_S)
            # A held update said before max_age is already expired: no document (the window drops it too).
            pairs = exchange_texts(question, messages) if cutoff is None or said >= cutoff else []
            docs = [self.docs.add(con, session_id, format_exchange(q, a), {"question": q, "answer": a},
                                  indexed=not background) for q, a in pairs]
            if docs and not background:
                self._index_inline(con, docs)
            return docs

        docs = self.db.transaction(write)  # a damaged file is replaced, and the exchange written anew
        if self.worker is not None and docs:
            after_commit(self.db, self.worker.notify)  # an enclosing transaction (a composite's) first
        self._retry_due()
        return len(docs)

    def add(self, session_id: str, text: str, metadata: Mapping[str, Any]) -> Document:
        """Store a free-text document (not an exchange)."""
        self.ensure_started()
        background = self.background

        def write(con: Any) -> Document:
            doc = self.docs.add(con, session_id, text, dict(metadata), indexed=not background)
            if not background:
                self._index_inline(con, [doc])
            return doc

        doc = self.db.transaction(write)
        if self.worker is not None:
            after_commit(self.db, self.worker.notify)
        self._retry_due()
        return doc

    def expire(self, max_age: float | None) -> None:
        """Every 100 updates, delete documents older than ``max_age`` (housekeeping, never raises)."""
        self._updates += 1
        if max_age is None or self._updates % 100 != 1:
            return
        in_db = self.owner._index_in_database()
        try:
            with self.db.atomic() as con:
                doomed = self.docs.delete_older_than(con, time.time() - max_age)
                if in_db:
                    self.owner._delete_documents(doomed)
            if not in_db:
                self.owner._delete_documents(doomed)
        except Exception as exc:  # noqa: BLE001 - expiry is housekeeping; never fail a turn for it
            self._log.error("expire", "%s: could not expire old documents: %s", self._name, exc)
            return
        self._log.clear("expire", f"{self._name}: old documents expire again")

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return sorted(set(self.window.sessions()) | set(self.docs.sessions()))

    def forget(self, session_id: str) -> dict[str, int]:
        """Delete the session's window, documents and index entries; never waits for the indexer.

        An indexer (of this process or another) embedding the session's documents meanwhile
        writes nothing for them: its write checks, in one transaction, that each document still
        exists and is still leased to it (:meth:`_index_leased`).
        """
        in_db = self.owner._index_in_database()
        if not in_db:
            # An outside index (vectors, whose metadata holds the text) is emptied first: a crash
            # between the steps then leaves the session whole and visible (its documents pending
            # again, so a restart re-indexes them), never gone from export() but still on disk.
            with self.db.atomic() as con:
                current = self.docs.for_session(session_id)
                self.docs.mark_indexed(con, [d.rowid for d in current], False)
            self.owner._delete_documents(current)
        with self.db.atomic() as con:
            messages = self.window.forget(session_id, con)
            docs = self.docs.delete_session(con, session_id)
            if in_db:
                self.owner._delete_documents(docs)  # a savepoint inside this transaction
        if not in_db:
            # Every one again, not only those written meanwhile: an indexer may have written a
            # document's entries again between the two steps (its write committed before ours).
            self.owner._delete_documents(docs)
        self.db.compact()  # no byte of the session may stay: free space, split pages, index segments, WAL
        return {"messages": messages, "documents": len(docs)}

    def export_documents(self, session_id: str) -> list[dict[str, Any]]:
        return [{"doc_id": d.doc_id, "ts": d.ts, "content": d.text, "metadata": d.metadata}
                for d in self.docs.for_session(session_id)]

    def import_session(self, session_id: str, window: list[AgentMessage], documents: Sequence[Mapping[str, Any]],
                       policy: WindowPolicy) -> None:
        """Add an exported window and documents; what is already stored is not added again (the
        messages already at the window's end; a document of the same text and time)."""
        def write(con: Any) -> list[Document]:
            new = unseen_messages(self.window.load(session_id, policy), window)
            if new:
                self.window.append(session_id, new, policy, con=con)
            return [self.docs.add(con, session_id, d["content"], _imported_metadata(d), indexed=False, ts=ts)
                    for d, ts in ((d, _imported_ts(d)) for d in documents)
                    if not self.docs.holds(con, session_id, d["content"], ts)]

        if self.db.transaction(write):
            self._index_pending_now()

    def import_exchanges(self, session_id: str, exchanges: Sequence[PastExchange], policy: WindowPolicy) -> int:
        """Store past exchanges, in order, each at its own time, in one transaction: documents as
        ``update_history`` stores them (so neighbour context is built alike) and the last ones in
        the window. Those older than ``max_age`` are already expired and are skipped. Returns the
        number stored."""
        self.ensure_started()
        now = time.time()
        cutoff = policy.cutoff(now)
        kept = [(e, now if e.ts is None else e.ts) for e in exchanges]
        kept = [(e, ts) for e, ts in kept if cutoff is None or ts >= cutoff]
        window_from = _window_start([len(e.messages()) for e, _ in kept], policy.max_messages)
        background = self.background

        def write(con: Any) -> list[Document]:
            docs = []
            for i, (exchange, ts) in enumerate(kept):
                if i >= window_from:
                    self.window.append(session_id, exchange.messages(), policy, con=con, ts=ts)
                docs.append(self.docs.add(con, session_id, format_exchange(exchange.question, exchange.answer),
                                          {"question": exchange.question, "answer": exchange.answer},
                                          indexed=not background, ts=ts))
            if docs and not background:
                self._index_inline(con, docs)
            return docs

        docs = self.db.transaction(write)
        if self.worker is not None and docs:
            self.worker.notify()
        return len(docs)

    # -- lifecycle -----------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every pending document is indexed: by this store's worker, or by another
        process that holds it (until it is done or its lease runs out and this worker takes it).
        False on timeout or when the worker fails."""
        self.ensure_started()
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.worker is None:
            return self._index_refused(deadline=deadline)
        while True:
            if self.docs.has_pending():
                self.worker.notify()  # also what another process left pending
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.worker.flush(left):
                return False
            if not self.docs.leased_elsewhere(self._lease_owner):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(FLUSH_POLL_S)

    def close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def release(self) -> None:
        release_database(self.db)

    def ensure_started(self) -> None:
        # Work left pending by an earlier process (a crash, a failed index) resumes on first use,
        # not in the memory's __init__, where the subclass is not ready yet.
        if self._started:
            return
        with self._start_lock:
            if self._started:
                return
            self._started = True
        if not self.owner.index_survives_restart:
            self._replay_indexed()
        if not self.db.read_only and self.docs.count_pending():  # a read-only command writes nothing
            if self.worker is not None:
                self._index_pending_now()
            else:
                self._index_refused(batches=START_BATCHES)

    # -- indexing ------------------------------------------------------------------------
    def _replay_indexed(self) -> None:
        """Give every document already marked indexed to a RAM index again (batch by batch)."""
        after = 0
        try:
            while batch := self.docs.indexed_after(after, self.owner.index_batch):
                self.owner._store_documents(batch)
                after = batch[-1].rowid
        except Exception as exc:  # noqa: BLE001 - recall of older exchanges is lost, turns go on
            self._log.error("replay", "%s: could not index the stored documents again: %s", self._name, exc)
            return
        self._log.clear("replay", f"{self._name}: the stored documents are indexed again")

    def _index_pending_now(self) -> None:
        """What is pending, indexed now: by the worker, else here, all of it (an import)."""
        if self.worker is not None:
            self.worker.notify()
        else:
            self._index_refused()

    def _retry_due(self) -> None:
        """Without a worker, a turn's share of what inline indexing left pending: one batch, once
        its retry is due (a turn never pays for the whole backlog)."""
        if self._inline_pending and self.worker is None and time.monotonic() >= self._retry_inline_at:
            self._index_refused(batches=1)

    def _index_refused(self, batches: int | None = None, deadline: float | None = None) -> bool:
        """Index what inline indexing left pending (refused, or left by another process), a batch
        at a time, at most ``batches`` batches, until ``deadline``; True when nothing is left.

        A batch that fails is stored one document at a time, so one the backend rejects holds up
        no other (and those stored are marked, never stored again); what is still refused is
        tried again after ``INLINE_RETRY_S``, logged once until everything is indexed.
        """
        if self.db.read_only:
            return True  # a command that only looks writes nothing
        try:
            if not self.docs.has_pending():
                self._inline_pending = False
                return True
            failed, failure = self._index_batches(batches, deadline)
            drained = not failed and failure is None and not self.docs.has_pending()
        except MemoryPluginError:  # the store does not answer (said where it failed): later
            self._retry_inline_at = time.monotonic() + INLINE_RETRY_S
            return not self._inline_pending
        return self._after_retry(failure, drained)

    def _index_batches(self, batches: int | None, deadline: float | None) -> tuple[set[int], Exception | None]:
        """Index pending documents batch by batch (see :meth:`_index_refused`): the row ids
        still refused, and the first failure."""
        failed: set[int] = set()
        failure: Exception | None = None
        left, rounds = True, 0
        try:
            while left and (batches is None or rounds < batches):
                rounds += 1
                docs, stored, refused = self._index_here(skip=failed)
                failure = failure or refused
                failed.update(d.rowid for d in docs if d.rowid not in set(stored))
                left = bool(docs) and bool(stored) and (deadline is None or time.monotonic() < deadline)
        except MemoryPluginError as exc:
            failure = exc
        return failed, failure

    def _after_retry(self, failure: Exception | None, drained: bool) -> bool:
        self._inline_pending = not drained
        if drained:
            self._log.clear("retry", f"{self._name}: every stored document is indexed again")
        elif failure is not None:
            self._retry_inline_at = time.monotonic() + INLINE_RETRY_S
            self._log.error("retry", "%s: stored document(s) could not be indexed (%s); they stay queued and are "
                            "retried every %.0f s", self._name, failure, INLINE_RETRY_S)
        else:
            self._retry_inline_at = 0.0  # more to do, none refused: the next write goes on
        return drained

    def _refused(self, exc: Exception) -> None:
        self._inline_pending = True
        self._retry_inline_at = time.monotonic() + INLINE_RETRY_S
        self._log.error("index", "%s: failed to store document(s): %s; will retry", self._name, exc)

    def _index_inline(self, con: Any, docs: Sequence[Document]) -> None:
        """Index new documents inside the caller's transaction; a failure leaves them pending.

        They are written already marked indexed (one UPDATE less per turn); those left pending
        by a failure or a crash are indexed by :meth:`_index_refused`.
        """
        if not docs:
            return
        try:
            with self.db.atomic():  # a savepoint: undo a half-written index, keep the documents
                self.owner._store_documents(docs)
            self._log.clear("index", f"{self._name}: indexing works again")
        except Exception as exc:  # noqa: BLE001 - the window and documents are safe; retry later
            self.docs.mark_indexed(con, [d.rowid for d in docs], False)
            self._refused(exc)

    def index_step(self, busy_wait: float | None = None) -> bool:
        """Index one batch of pending documents; True while more are pending.

        A batch that fails is retried one document at a time, so a document the backend cannot
        take (one the embedder rejects, say) holds up no other; it stays queued, and the step
        raises after committing what was indexed. ``busy_wait`` bounds the wait for another
        process's write lock (in-database indexes).
        """
        batch, chars = self.owner.index_batch, self.owner.index_chars
        if self.pending is not None:
            self.pending.prepare()  # word sets for the turns' keyword recall, before the slow part
        if self.owner.index_in_database:
            # The index is in this file and cheap to write (keywords): entries and marks commit
            # together, one commit a batch, bounded in characters (the transaction holds the
            # file's write lock).
            docs, done, failure = self._index_here(busy_wait=busy_wait)
            more = bool(docs) and self.docs.has_pending()
        else:
            docs = self.docs.lease(batch, self._lease_owner, LEASE_S, chars)
            if not docs:
                return False
            done, failure = self._index_leased(docs)
            more = True  # the next lease finds out
        self._raise_failure(docs, done, failure)
        return more

    def _index_here(self, skip: Collection[int] = (), busy_wait: float | None = None
                    ) -> tuple[list[Document], list[int], Exception | None]:
        """One batch of pending documents (but ``skip``'s) indexed in this database, entries and
        marks in one transaction, bounded in characters: the batch, the row ids stored, and the
        first failure."""
        with self.db.atomic(busy_wait) as con:
            found = self.docs.pending(self.owner.index_batch + len(skip), con)
            docs = within_chars([d for d in found if d.rowid not in skip], self.owner.index_chars)
            stored, failure = self._store_each(docs)
            self.docs.mark_indexed(con, stored, True)
        return docs, stored, failure

    def _index_leased(self, docs: Sequence[Document]) -> tuple[list[int], Exception | None]:
        """Index documents leased to this store: the slow part (embedding) outside any transaction,
        then, in one transaction, the entries of those still present and still leased here, and
        their marks. Returns the row ids prepared and the first failure.

        A document forgotten or expired meanwhile (in this process or another) is skipped: no
        vector of it is written after its deletion. Taking the write lock first makes the check
        and the write one step against any deletion (which takes the same lock), whether the
        vectors live in this file (a savepoint of this transaction) or elsewhere.
        """
        prepared, failure = self._prepare_each(docs)
        try:
            if prepared:
                with self._index_transaction() as con:
                    live = self.docs.lock_leased(con, sorted(prepared), self._lease_owner)
                    # Their ids as the log has them now (a local-rag document may have moved to a
                    # free id while it was embedded; locked, it cannot move again before this commits).
                    ready = self.docs.current_ids(con, [d for d in docs if d.rowid in live])
                    if ready:
                        self.owner._store_prepared(ready, [prepared[d.rowid] for d in ready])
                    self.docs.mark_indexed(con, [d.rowid for d in ready], True)
        except BaseException:
            self.docs.release([d.rowid for d in docs], self._lease_owner)
            raise
        self.docs.release([d.rowid for d in docs if d.rowid not in prepared], self._lease_owner)
        return list(prepared), failure

    def _index_transaction(self) -> Any:
        """The transaction that writes a leased batch's index entries and marks."""
        return self.db.atomic()

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

    def _raise_failure(self, docs: Sequence[Document], done: Sequence[int], failure: Exception | None) -> None:
        """Raise ``failure`` (the worker logs it once), after one ERROR of its own when the backend
        works and only some documents do not."""
        if failure is None:
            return
        if done:
            self._log.error("unindexable", "%s: %d of %d document(s) could not be indexed (%s); they stay "
                            "queued and are retried", self._name, len(docs) - len(done), len(docs), failure)
        raise failure

    def _store_each(self, docs: Sequence[Document]) -> tuple[list[int], Exception | None]:
        """Store ``docs`` in this database: the batch, else one by one, each attempt in a savepoint
        (a failed one leaves no partial rows). Returns the rowids stored and the first failure."""
        def attempt(batch: Sequence[Document]) -> None:
            with self.db.atomic():
                self.owner._store_documents(batch)

        if not docs:
            return [], None
        try:
            attempt(docs)
            return [d.rowid for d in docs], None
        except Exception as exc:  # noqa: BLE001 - retried below, one by one
            if len(docs) == 1:
                return [], exc
        done: list[int] = []
        failure: Exception | None = None
        for doc in docs:
            try:
                attempt([doc])
                done.append(doc.rowid)
            except Exception as exc:  # noqa: BLE001 - stays pending; the caller reports the first
                failure = failure or exc
        return done, failure

    # -- forgetting one exchange ---------------------------------------------------------
    def forget_exchange(self, session_id: str, content: str) -> dict[str, int]:
        """Delete every document of the session whose text is ``content`` and the window's messages
        of that exchange, then compact, as :meth:`forget` does for a whole session (the same
        order of steps, so a crash never leaves the text on disk while it is gone from export)."""
        in_db = self.owner._index_in_database()
        if self.worker is not None and not in_db:
            self.worker.flush(30)
        removed: set[int] = set()
        if not in_db:
            current = self.docs.with_content(session_id, content)
            if current:
                with self.db.atomic() as con:
                    self.docs.mark_indexed(con, [d.rowid for d in current], False)
                self.owner._delete_documents(current)
            removed = {d.rowid for d in current}
        with self.db.atomic() as con:
            messages = self.window.drop(session_id, lambda window: exchange_positions(window, content), con)
            docs = self.docs.delete_content(con, session_id, content)
            if in_db:
                self.owner._delete_documents(docs)
        if not in_db:
            self.owner._delete_documents([d for d in docs if d.rowid not in removed])
        self.db.compact()  # also when nothing was found: a trimmed or expired copy may sit in the WAL
        return {"messages": messages, "documents": len(docs)}


def _window_start(sizes: Sequence[int], max_messages: int) -> int:
    """The first of the exchanges (of ``sizes`` messages each) the window keeps any message of."""
    if not max_messages:
        return 0
    held = 0
    for i in range(len(sizes) - 1, -1, -1):
        held += sizes[i]
        if held >= max_messages:
            return i
    return 0


def _imported_ts(data: Mapping[str, Any]) -> float | None:
    """An exported document's time, kept (so ``max_age`` and dates still apply); None: now. A time
    ahead of the clock is taken as now."""
    ts = data.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        return None
    return min(float(ts), time.time())


def _imported_metadata(data: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(data.get("metadata") or {})
    for key in ("content", "session_id", "ts"):
        meta.pop(key, None)
    return meta
