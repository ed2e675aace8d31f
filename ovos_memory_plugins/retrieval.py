"""``BaseRetrievalMemory``: the context pipeline plus a document store, for every retriever.

A retrieval backend implements two hooks (and optionally a few more)::

    class MyMemory(BaseRetrievalMemory):
        def _store_document(self, doc_id, text, session_id, metadata): ...  # or _store_documents(docs)
        def _query_backend(self, query, top_k, session_id=None) -> list[MemoryHit]: ...
        def _delete_documents(self, docs): ...             # forget() and max_age expiry
        def _store_documents(self, docs): ...              # the batch primitive (default loops)
        def _close_backend(self): ...

It inherits the rest:

* from :class:`~ovos_memory_plugins.context.RecallingMemory`: ``build_conversation_context``
  (the one pipeline every memory shares: system prompt, window, recall, utterance, the budgets
  and the five inject modes), the query, the rendering, ``assemble_context``;
* here: the windows as ``session2history``, ``search()`` (scope, ``min_score``; a failure costs
  one turn's recall), dedup of recall against the window, and its own database
  (``storage/retrieval.py``): the verbatim window (persisted, unlike the reference's), the
  document log with never-repeating ids, and the queue that indexes documents off the turn when
  ``background_index`` is set (a turn never waits for it: until a document is indexed,
  ``_pending_hits`` recalls it by its words).

``CompositeMemory`` is registered as a ``BaseRetrievalMemory`` (``isinstance`` holds, as in the
reference) without being one: it keeps no documents; its window and recall are its members'.
"""
from __future__ import annotations

import abc
import dataclasses
import inspect
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from ._core.compat import AgentMessage
from ._core.log import LogOnce
from ._core.paths import default_name, default_path
from ._core.worker import BackgroundWorker
from ._memory.exports import export_documents, export_messages, session_export
from ._memory.session_view import SessionHistoryMixin
from .common import MemoryHit
from .config import option
from .context import RecallConfig, RecallingMemory
from .errors import ConfigError, MemoryPluginError, opening_error
from .fusion import hit_key
from .messages import (
    check_session_id,
    check_utterance,
    clean_text,
    coerce_messages,
    to_dict,
)
from .storage import WindowPolicy, store_claim, store_location
from .storage.documents import Document, DocumentLog, past_exchanges
from .storage.retrieval import RetrievalStore
from .storage.sqlite import Database, open_database
from .storage.windows import SqliteWindowStore

__all__ = ["BaseRetrievalMemory", "Document", "drop_window_duplicates", "MemoryHit", "RetrievalConfig"]


@dataclasses.dataclass(frozen=True)
class RetrievalConfig(RecallConfig):
    max_history: int = option(10, "verbatim messages kept per session (persisted); 0 keeps all", minimum=0)
    db_path: str | None = option(None, "SQLite file for the window and documents; null: the XDG default",
                                 kind=str)
    db_url: str | None = option(None, "PostgreSQL URL (postgresql://user@host/database) for the window, documents "
                                "and index instead of db_path, shared by every process and host; needs the "
                                "[postgres] extra", kind=str)
    max_age: float | None = option(None, "seconds after which messages and documents expire; null: never",
                                   kind=float, minimum=0)


class BaseRetrievalMemory(SessionHistoryMixin, RecallingMemory, abc.ABC):
    """Base of retrieval backends: the context pipeline plus a document store; see the module docstring."""

    Config: ClassVar[type] = RetrievalConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-retrieval"
    export_parts: ClassVar[frozenset[str]] = frozenset({"window", "documents"})
    #: The SQLite file under the XDG data dir when ``db_path`` is not set. A class that does not
    #: declare its own gets one named after it: two backends never share a default file.
    default_db_name: ClassVar[str | None] = None
    #: True: documents are indexed by a background worker (slow indexes: embeddings).
    background_index: ClassVar[bool] = False
    #: Documents indexed per batch.
    index_batch: ClassVar[int] = 32
    #: Characters of text per batch beyond its first document (None: no bound): a batch is one
    #: transaction, or one lease of model work, and a short one yields to turns sooner.
    index_chars: ClassVar[int | None] = None
    #: Seconds the background indexer lets new documents gather, so one batch carries a burst.
    index_delay: ClassVar[float] = 0.0
    #: How a failing background index step is logged (once): "warning" when recall does not
    #: depend on it and the write that fails with it (a full disk) is the one ERROR.
    index_failure_level: ClassVar[str] = "error"
    #: True: the index lives in this memory's own database, so ``forget`` deletes from it in the
    #: same transaction (a crash mid-forget cannot leave index rows of a forgotten session).
    index_in_database: ClassVar[bool] = False
    #: False: the index is kept in RAM, so every stored document is indexed again on first use.
    index_survives_restart: ClassVar[bool] = True
    #: What ``search`` scores mean, for the composite's score fusion (``fusion: "score"``):
    #: "keyword" (0 when no query word matches; more is better, no upper bound: BM25),
    #: "semantic" (a similarity: only differences between items mean something), or None
    #: (unknown: fused as semantic).
    score_kind: ClassVar[str | None] = None
    live_settings: ClassVar[frozenset[str]] = RecallingMemory.live_settings | {"max_history", "max_age"}
    # The reference's retrieval base sends the system prompt as configured (its other backends strip it).
    strips_system_prompt: ClassVar[bool] = False

    def __init__(self, config: Mapping[str, Any] | None = None):
        self._log = LogOnce()
        self._edit_lock = threading.RLock()  # session2history edits: read, change, write as one
        _check_indexes(type(self))
        super().__init__(config)
        self._query_takes_session = "session_id" in inspect.signature(self._query_backend).parameters
        db = self._open_db()
        store_class = RetrievalStore
        if db.engine == "postgres":
            from .storage.postgres.retrieval import PgRetrievalStore as store_class  # type: ignore[assignment]
        self._store = store_class(self, db, self._table_prefix(db), self._log)
        #: The part of a store this memory writes (a composite refuses two members writing one).
        self.store_claim = store_claim(db.path, db.engine, self._docs.table)

    def _settings_changed(self) -> None:
        super()._settings_changed()
        s = self.settings
        self.policy = WindowPolicy(max_messages=s.max_history, max_age=s.max_age)

    # The pieces of the store that subclasses reach for: their index shares the database and queue.
    @property
    def _db(self) -> Database:
        return self._store.db

    @property
    def _docs(self) -> DocumentLog:
        return self._store.docs

    @property
    def _window(self) -> SqliteWindowStore:
        return self._store.window

    @property
    def _worker(self) -> BackgroundWorker | None:
        return self._store.worker

    @_worker.setter
    def _worker(self, worker: BackgroundWorker | None) -> None:
        self._store.worker = worker

    @property
    def db_path(self) -> str | None:
        """The database file this memory keeps its window and documents in (None: it has none)."""
        return self._store.db.path

    # -- hooks for subclasses --------------------------------------------------------------
    def _table_prefix(self, db: Database) -> str:
        """The prefix of this memory's tables in ``db`` (its window and document log)."""
        return "retrieval"

    # Indexing has one primitive, ``_store_documents`` (every indexing path calls it with a batch).
    # A backend implements it, or the reference's one-document hook ``_store_document``, which the
    # default batch calls for each document; implementing neither is a TypeError at construction.
    def _store_document(self, doc_id: str, text: str, session_id: str, metadata: dict[str, Any]) -> None:
        """Index one document (``doc_id`` is unique for ever): the reference's hook."""
        self._store_documents([Document(doc_id, text, session_id, metadata, 0.0, 0)])

    def _store_documents(self, docs: Sequence[Document]) -> None:
        """Index a batch of documents (the one primitive); the default calls ``_store_document``."""
        for doc in docs:
            self._store_document(doc.doc_id, doc.text, doc.session_id, doc.metadata)

    @abc.abstractmethod
    def _query_backend(self, query: str, top_k: int, session_id: str | None = None) -> list[MemoryHit]:
        """The best ``top_k`` hits for ``query`` (of ``session_id`` only, when given), best first."""

    def _delete_documents(self, docs: Sequence[Document]) -> None:
        """Remove documents from the index; the default cannot, so the index keeps them."""
        if docs:
            self._log.warning("delete", "%s: this backend cannot delete from its index", self.plugin_name)

    def _index_step(self, busy_wait: float | None = None) -> bool:
        """Index one batch of pending documents; True while more are pending (the worker's step)."""
        return self._store.index_step(busy_wait)

    def _pending_hits(self, words: Sequence[str], top_k: int, session_id: str | None) -> list[MemoryHit]:
        """Documents not indexed yet that hold at least half of ``words`` (a query's content words),
        best first; a backend merges them into its hits so a turn never waits for the indexer."""
        pending = self._store.pending
        return pending.hits(words, top_k, session_id) if pending is not None else []

    def _index_in_database(self) -> bool:
        """Whether the index's writes join this memory's transactions (``index_in_database``)."""
        return self.index_in_database

    def _prepare_documents(self, docs: Sequence[Document]) -> list[Any]:
        """The slow part of indexing ``docs``, done outside any transaction (a PostgreSQL store's
        shared queue); one result per document. The default has none."""
        return [None] * len(docs)

    def _store_prepared(self, docs: Sequence[Document], prepared: Sequence[Any]) -> None:
        """Index ``docs`` with what :meth:`_prepare_documents` made for them."""
        self._store_documents(docs)

    def _close_backend(self) -> None:
        pass

    def _compact_backend(self) -> None:
        """After a forget: leave no byte of deleted entries in an index kept outside the store's file."""

    # -- the OPM contract ----------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        try:
            history = self._store.window.load(session_id, self.policy)
        except MemoryPluginError as exc:
            self._log.error("history", "%s: cannot read the window: %s", self.plugin_name, exc)
            return self._with_held(session_id, [], self.policy)
        self._log.clear("history", f"{self.plugin_name}: reading the window works again")
        return self._with_held(session_id, history, self.policy)

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        """Append to the window and store each exchange as a document, in one transaction."""
        messages = self._incoming(new_messages, session_id)
        if messages and self._write_update(session_id, messages):
            self._store.expire(self.settings.max_age)

    def _store_batch(self, session_id: str, batch: list[Any]) -> None:
        self._store.append(session_id, batch, self.policy)

    # -- retrieval -----------------------------------------------------------------------
    def search(self, query: str, session_id: str | None = None, top_k: int | None = None) -> list[MemoryHit]:
        """The best ``top_k`` stored items for ``query`` (session-scoped unless ``scope`` is global)."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if session_id is not None:
            check_session_id(session_id)
        k = self.settings.max_num_results if top_k is None else int(top_k)
        query = clean_text(query)
        if k <= 0 or not query.strip():
            return []
        self._store.ensure_started()
        only = self._search_scope(session_id)
        try:
            hits = self._scoped_query(query, k, only)
            self._log.clear("search", f"{self.plugin_name}: search works again")
        except Exception as exc:  # noqa: BLE001 - any backend failure costs one turn's recall, no more
            # An ERROR as in the reference, but once per outage, not per turn. Indexers whose queue
            # is durable log their own failure as a WARNING, so one cause (a broken embedder fails
            # both) is one ERROR.
            self._log.error("search", "%s: search failed (%s); proceeding without context", self.plugin_name, exc)
            return []
        return self._filter_hits(hits)[:k]

    def score_candidates(self, query: str, hits: Sequence[MemoryHit],
                         session_id: str | None = None) -> list[float | None]:
        """This memory's score of each of ``hits`` for ``query``, as ``search`` would give it,
        whichever retriever found them; None where it cannot score one (not one of its exchanges,
        no index entry yet). The composite's score fusion asks each retriever about the others'
        hits. The base scores none; a backend that can overrides :meth:`_score_documents`.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        hits = list(hits)
        query = clean_text(query)
        if not hits or not query.strip():
            return [None] * len(hits)
        only = self._search_scope(session_id)
        try:
            rows = self._docs.resolve([(h.source, h.content) for h in hits], only)
            known = list(dict.fromkeys(r for r in rows if r is not None))
            scores = self._score_documents(query, known, only) if known else {}
        except Exception as exc:  # noqa: BLE001 - as a failed search: this turn fuses without it
            self._log.error("score", "%s: scoring candidates failed (%s)", self.plugin_name, exc)
            return [None] * len(hits)
        self._log.clear("score", f"{self.plugin_name}: scoring candidates works again")
        return [scores.get(r[0]) if r is not None else None for r in rows]

    def _score_documents(self, query: str, docs: Sequence[tuple[int, str]],
                         session_id: str | None) -> dict[int, float]:
        """Scores for ``query`` of this memory's documents ``(row id, doc_id)``, by row id; a
        document left out is one it cannot score. The base scores none."""
        return {}

    def _search_scope(self, session_id: str | None) -> str | None:
        """The memory key a search is limited to (None: all), as ``scope`` says: in person scope
        ``session_id`` is already the person's key (or a guest's own id)."""
        return session_id if self.settings.scope != "global" and session_id is not None else None

    def recall(self, query: str, session_id: str, window: Sequence[AgentMessage] = ()) -> list[MemoryHit]:
        """``search`` for a turn: each text once (an exchange stored several times, the same
        question asked every day, would fill the turn with copies), minus items already present
        verbatim in ``window``."""
        k = self.settings.max_num_results
        window = window if self.settings.dedup_history else ()
        # Room for the hits the window repeats; a reference-style hook (no session_id) is asked
        # what the reference asked it (k, or 4k in session scope), which leaves room already.
        asked = k + (len(window) // 2 if self._query_takes_session else 0)
        while True:
            hits = self.search(query, session_id, asked)
            kept = drop_window_duplicates(distinct_hits(hits), window)
            # Asked again, for twice as many, when copies or the window's own exchanges left the
            # turn short and more may be stored; at most twice (up to 4k). Not a reference-style
            # hook: it is asked what the reference asked it.
            if len(kept) >= k or len(hits) < asked or asked >= 4 * k or not self._query_takes_session:
                return kept[:k]
            asked *= 2

    def store(self, text: str, session_id: str, metadata: dict[str, Any] | None = None) -> str | None:
        """Store a free-text document (not an exchange); returns its id, or None if empty."""
        sid = check_session_id(session_id)
        text = clean_text(check_utterance(text))
        if not text:
            return None
        return self._store.add(sid, text, dict(metadata or {})).doc_id

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return self._listed(self._store.sessions())

    def forget(self, session_id: str) -> dict[str, int]:
        self._held.drop(check_session_id(session_id))  # first: what the store refused is never stored now
        counts = self._store.forget(session_id)
        self._forget_in_backend(session_id)
        self._compact_backend()
        return counts

    def _forget_in_backend(self, session_id: str) -> None:
        """Delete what an index kept of ``session_id`` beyond the documents just forgotten (a
        vector store of its own can outlive a damaged document store). The base keeps nothing else."""

    def export(self, session_id: str) -> dict[str, Any]:
        data = super().export(session_id)
        data["window"] = [to_dict(m) for m in self.get_history(session_id)]
        data["documents"] = self._store.export_documents(session_id)
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        """Load what :meth:`export` produced: checked whole first, and what is already stored (the
        same messages, the same documents) is not stored again."""
        data, sid = session_export(data, session_id, self)
        self._store.import_session(sid, export_messages(data), export_documents(data), self.policy)

    def import_exchanges(self, session_id: str, exchanges: Sequence[Mapping[str, Any]]) -> int:
        """Store past exchanges with the time each happened: a chat log restored, history from
        another assistant. ``exchanges`` is ``[{"question": ..., "answer": ..., "ts": ...}, ...]``
        in the order they happened, ``ts`` in POSIX seconds (absent: now). They are stored as
        ``update_history`` stores exchanges (recall, neighbour context, the window's last
        messages), but dated: ``max_age`` and questions naming a date then see when they
        happened. Returns how many were stored (those already older than ``max_age`` are not).
        A malformed item is a ``TypeError``/``ValueError`` and nothing is stored.
        """
        sid = check_session_id(session_id)
        return self._store.import_exchanges(sid, past_exchanges(exchanges), self.policy)

    # -- session2history -------------------------------------------------------------------
    def _stored_window(self, session_id: str) -> list[AgentMessage]:
        """The session's window; a store failure raises (an edit must not overwrite what it could not read)."""
        return self._store.window.load(check_session_id(session_id), self.policy)

    def _replace_window(self, session_id: str, messages: Iterable[Any]) -> list[AgentMessage]:
        """Make ``messages`` the session's whole window, in one transaction; returns what was stored.

        As in the reference, editing the window stores no documents: only ``update_history``
        turns exchanges into recall.
        """
        check_session_id(session_id)
        return self._store.window.replace(session_id, coerce_messages(messages), self.policy)

    # -- lifecycle -----------------------------------------------------------------------
    def degraded(self) -> dict[str, str]:
        """The failures logged and not recovered from yet: storing, indexing (an embedder that
        fails every call), searching, reading the window."""
        problems = self._log.failing(self.plugin_name)
        worker = self._store.worker
        if worker is not None and worker.problem:
            problems.setdefault(f"{self.plugin_name}:index", f"{self.plugin_name}: {worker.problem}")
        return problems

    def flush(self, timeout: float | None = None) -> bool:
        return super().flush(timeout) & self._store.flush(timeout)  # both: held updates first, then the indexing

    def close(self) -> None:
        if self._closed:
            return
        self._close_held()
        self._store.close_worker()
        try:
            self._close_backend()
        finally:
            self._store.release()
            super().close()

    # -- internals -----------------------------------------------------------------------
    def _open_db(self) -> Database:
        con = self.config.get("_con")
        if con is not None:  # an injected sqlite3 connection (tests, shared files)
            return Database(self.settings.db_path or ":memory:", connection=con)
        try:
            location, kind = store_location(self.settings.db_path, self.settings.db_url, None)
        except ConfigError as exc:
            raise ConfigError(f"{self.plugin_name}: {exc}") from exc
        if kind == "postgres":
            from .storage.postgres import open_pg_database

            return open_pg_database(str(location))  # type: ignore[return-value]
        path = location or self._default_db_location()
        try:
            return open_database(path)
        except ConfigError as exc:
            raise ConfigError(f"{self.plugin_name}: {exc}") from exc
        except MemoryPluginError as exc:  # a read-only or full disk: named as every backend names it
            raise opening_error(f"{self.plugin_name}: cannot open db_path {path!r}: {exc}", exc) from exc

    def _default_db_location(self) -> str:
        """The file used when neither ``db_path`` nor ``db_url`` is set."""
        return default_path(default_name(type(self), "default_db_name", ".db"))

    def _scoped_query(self, query: str, k: int, session_id: str | None) -> list[MemoryHit]:
        if self._query_takes_session:
            return self._query_backend(query, k, session_id=session_id)
        # A third-party backend that cannot filter: over-fetch, and keep what this session stored,
        # or what no session stored (the backend's own data). A hit that does not carry its session
        # (as the reference's hooks allow) is looked up in the document log.
        hits = self._query_backend(query, 4 * k if session_id is not None else k)
        if session_id is None:
            return hits
        untagged = [h for h in hits if "session_id" not in h.metadata]
        owners = dict(zip(map(id, untagged), self._docs.sessions_holding([(h.source, h.content) for h in untagged])))
        return [h for h in hits if h.metadata.get("session_id", session_id) == session_id
                and (id(h) not in owners or not owners[id(h)] or session_id in owners[id(h)])]

    def _filter_hits(self, hits: list[MemoryHit]) -> list[MemoryHit]:
        cutoff = self.policy.cutoff()
        min_score = self.settings.min_score
        return [h for h in hits
                if (min_score is None or h.score >= min_score)
                and (cutoff is None or float(h.metadata.get("ts", cutoff)) >= cutoff)]

    # -- one item at a time (what a person sees and removes: ``ovos-memory serve``) ---------------
    def document(self, session_id: str, doc_id: str) -> dict[str, Any] | None:
        """The session's stored document ``doc_id`` as :meth:`export` lists it, or None."""
        sid = check_session_id(session_id)
        doc = self._store.docs.by_doc_id(sid, str(doc_id))
        return None if doc is None else {"doc_id": doc.doc_id, "ts": doc.ts, "content": doc.text,
                                         "metadata": doc.metadata}

    def forget_document(self, session_id: str, doc_id: str) -> dict[str, Any]:
        """Forget the stored exchange ``doc_id`` for good: see :meth:`forget_exchange`, given its text.
        Returns what was deleted (nothing when the session has no such document)."""
        doc = self.document(session_id, doc_id)
        return self.forget_exchange(session_id, doc["content"]) if doc is not None else {}

    def forget_exchange(self, session_id: str, content: str) -> dict[str, Any]:
        """Delete every document of the session whose text is ``content`` (an exchange stored twice
        goes twice), its index entries (a neighbour's context included) and its messages in the
        window, then compact the files as :meth:`forget` does: no byte of it stays. What was
        derived from it elsewhere (facts, a summary) is forgotten item by item."""
        sid = check_session_id(session_id)
        if not isinstance(content, str):
            raise TypeError(f"content must be a str, not {type(content).__name__}")
        self._require_held_written(sid)
        counts = self._store.forget_exchange(sid, content)
        if counts["documents"]:
            self._compact_backend()
        return counts

    def index_backlog(self) -> int:
        """How many documents wait for the index (after an import, or every one while they are
        embedded again after an embedder change); 0 when the index is up to date."""
        self._store.ensure_started()
        return self._store.docs.count_pending()


def distinct_hits(hits: Sequence[MemoryHit]) -> list[MemoryHit]:
    """``hits`` with each text once: its best-ranked copy."""
    seen: set[str] = set()
    out = []
    for hit in hits:
        key = hit_key(hit)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    return out


def drop_window_duplicates(hits: Sequence[MemoryHit], window: Sequence[AgentMessage]) -> list[MemoryHit]:
    """Hits whose exchange is not already verbatim in ``window`` (it would be sent twice).

    A text is in the window when a message holds it whole, or holds each of its lines: an answer
    given in several calls is one merged message in the window, stored as several exchanges.
    """
    if not window:
        return list(hits)
    present = {m.content.strip() for m in window}
    lines = {line.strip() for m in window for line in m.content.splitlines()}

    def shown(text: str) -> bool:
        text = text.strip()
        return text in present or all(line.strip() in lines for line in text.splitlines())

    out = []
    for hit in hits:
        answer = hit.metadata.get("answer")
        question = (hit.metadata.get("question") or "").strip()
        if answer is not None:
            dup = shown(answer) and (not question or shown(question))
        else:
            dup = shown(hit.content) or (bool(question) and shown(question))
        if not dup:
            out.append(hit)
    return out


def _check_indexes(cls: type[BaseRetrievalMemory]) -> None:
    """A retrieval backend indexes documents one way or the other (see ``_store_documents``)."""
    base = BaseRetrievalMemory
    if cls._store_document is base._store_document and cls._store_documents is base._store_documents:
        raise TypeError(f"{cls.__name__} must implement _store_document(doc_id, text, session_id, metadata) "
                        "or _store_documents(docs) to index what it stores")
