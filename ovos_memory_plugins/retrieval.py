"""``BaseRetrievalMemory``: history, recall, rendering and injection for every retriever.

A retrieval backend implements two hooks (and optionally a few more)::

    class MyMemory(BaseRetrievalMemory):
        def _store_document(self, doc_id, text, session_id, metadata): ...
        def _query_backend(self, query, top_k, session_id=None) -> list[MemoryHit]: ...
        def _delete_documents(self, docs): ...             # forget() and max_age expiry
        def _store_documents(self, docs): ...              # batch indexing (default loops)
        def _close_backend(self): ...

Everything else comes from here: the verbatim window (persisted, unlike the reference's),
the document log with never-repeating ids, ``search()``, the five inject modes, dedup of
recall against the window, ``max_context_tokens``, ``forget``/``export``, expiry, and (with
``background_index = True``) indexing off the turn from a durable queue.
"""
from __future__ import annotations

import abc
import dataclasses
import inspect
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ._compat import AgentMessage
from ._documents import Document, DocumentLog, exchange_texts, format_exchange
from ._log import LOG, LogOnce
from ._memory import MemoryPlugin
from ._paths import default_path
from ._tokens import estimate_tokens
from ._worker import BackgroundWorker
from .common import MemoryHit
from .config import option
from .errors import ConfigError, MemoryPluginError
from .inject import INJECT_MODES, Injection, assemble_context, check_inject_mode
from .messages import (
    check_session_id,
    check_utterance,
    coerce_messages,
    context_window,
    fit_window,
    from_dict,
    is_role,
    message_tokens,
    to_dict,
)
from .render import DEFAULT_HEADER, ContextStyle, render_hits
from .storage import WindowPolicy
from .storage.sqlite import Database, open_database, release_database
from .storage.windows import SqliteWindowStore, safe_table_name

__all__ = ["BaseRetrievalMemory", "Document", "MemoryHit", "RetrievalConfig"]

SCOPES = ("session", "global")
QUERY_MODES = ("utterance", "history")


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    max_history: int = option(10, "verbatim messages kept per session (persisted); 0 keeps all", minimum=0)
    max_num_results: int = option(5, "top-k recalled items", key="retrieval.max_num_results", minimum=1)
    min_score: float | None = option(None, "drop hits scoring below this (backend scale); null keeps all",
                                     key="retrieval.min_score", kind=float)
    query_mode: str = option("utterance", "utterance: search the turn; history: fold in earlier user turns "
                             "(any other value acts like utterance)", key="retrieval.query_mode")
    query_history_turns: int = option(3, "user turns folded into the query in history mode",
                                      key="retrieval.query_history_turns", minimum=0)
    header: str = option(DEFAULT_HEADER, "text before the recalled chunks", key="context.header")
    chunk_prefix: str = option("- ", "text before each chunk", key="context.chunk_prefix")
    chunk_separator: str = option("\n\n", "text between chunks", key="context.chunk_separator")
    include_sources: bool = option(False, "prefix each chunk with [doc id]", key="context.include_sources")
    tool_name: str = option("search_memory", "tool name in tool mode", key="context.tool_name")
    dedup_history: bool = option(True, "skip recalled items already in the verbatim window",
                                 key="context.dedup_history")
    inject_mode: str = option("system", "where recalled context goes", choices=INJECT_MODES)
    system_prompt_template: str = option("{system}\n\n{header}\n\nContext:\n{context}",
                                         "system_prompt mode template (str.format)")
    user_template: str = option("{header}\n\nContext:\n{context}\n\nQuestion: {utterance}",
                                "user mode template (str.format)")
    scope: str = option("session", "recall from this session only, or from all (global)", choices=SCOPES)
    system_prompt: str = option("", "persona system prompt")
    db_path: str | None = option(None, "SQLite file for the window and documents; null: the XDG default",
                                 kind=str)
    max_age: float | None = option(None, "seconds after which messages and documents expire; null: never",
                                   kind=float, minimum=0)
    max_context_tokens: int | None = option(None, "token budget for window + recall; null: unbounded",
                                            kind=int, minimum=1)

    def __post_init__(self) -> None:
        for name, template, fields in (("system_prompt_template", self.system_prompt_template,
                                        ("system", "header", "context")),
                                       ("user_template", self.user_template, ("header", "context", "utterance"))):
            try:
                template.format(**{f: "" for f in fields})
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"'{name}' may only use the fields {', '.join(fields)}: {exc!r}") from exc


class BaseRetrievalMemory(MemoryPlugin, abc.ABC):
    """Base of retrieval backends; see the module docstring for the hooks."""

    Config: ClassVar[type] = RetrievalConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-retrieval"
    #: The SQLite file under the XDG data dir when ``db_path`` is not set.
    default_db_name: ClassVar[str] = "retrieval_memory.db"
    #: True: documents are indexed by a background worker (slow indexes: embeddings).
    background_index: ClassVar[bool] = False
    #: Documents indexed per batch.
    index_batch: ClassVar[int] = 32
    #: Seconds the background indexer lets new documents gather, so one batch carries a burst.
    index_delay: ClassVar[float] = 0.0
    #: How a failing background index step is logged (once): "warning" when recall does not
    #: depend on it and the write that fails with it (a full disk) is the one ERROR.
    index_failure_level: ClassVar[str] = "error"
    #: True: the index lives in this memory's own database, so ``forget`` deletes from it in the
    #: same transaction (a crash mid-forget cannot leave index rows of a forgotten session).
    index_in_database: ClassVar[bool] = False

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        s = self.settings
        check_inject_mode(s.inject_mode, self.plugin_name)
        if s.query_mode not in QUERY_MODES:  # the reference's rule: a persona with a typo still loads
            LOG.warning(f"{self.plugin_name}: unknown retrieval.query_mode {s.query_mode!r} acts like 'utterance'")
        self.injection = Injection(s.inject_mode, s.header, s.system_prompt_template, s.user_template, s.tool_name)
        self.style = ContextStyle(s.chunk_prefix, s.chunk_separator, s.include_sources)
        self.policy = WindowPolicy(max_messages=s.max_history, max_age=s.max_age)
        self._log = LogOnce()
        self._db = self._open_db()
        prefix = safe_table_name(self._table_prefix())
        self._window = SqliteWindowStore(self._db, f"{prefix}_window")
        self._docs = DocumentLog(self._db, f"{prefix}_docs")
        self._tool_counters: dict[str, itertools.count[int]] = defaultdict(itertools.count)
        self._query_takes_session = "session_id" in inspect.signature(self._query_backend).parameters
        self._updates = 0
        self._started = False
        self._start_lock = threading.Lock()
        self._worker = BackgroundWorker(f"{self.plugin_name}-indexer", self._index_step, batch_delay=self.index_delay,
                                        failure_level=self.index_failure_level) if self.background_index else None

    # -- hooks for subclasses --------------------------------------------------------------
    def _table_prefix(self) -> str:
        return "retrieval"

    @abc.abstractmethod
    def _store_document(self, doc_id: str, text: str, session_id: str, metadata: dict[str, Any]) -> None:
        """Index one document (``doc_id`` is unique for ever); a batch calls ``_store_documents``."""

    def _store_documents(self, docs: Sequence[Document]) -> None:
        for doc in docs:
            self._store_document(doc.doc_id, doc.text, doc.session_id, doc.metadata)

    @abc.abstractmethod
    def _query_backend(self, query: str, top_k: int, session_id: str | None = None) -> list[MemoryHit]:
        """The best ``top_k`` hits for ``query`` (of ``session_id`` only, when given), best first."""

    def _delete_documents(self, docs: Sequence[Document]) -> None:
        """Remove documents from the index; the default cannot, so the index keeps them."""
        if docs:
            self._log.warning("delete", "%s: this backend cannot delete from its index", self.plugin_name)

    def _close_backend(self) -> None:
        pass

    # -- the OPM contract ----------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        try:
            return self._window.load(session_id, self.policy)
        except MemoryPluginError as exc:
            self._log.error("history", "%s: cannot read the window: %s", self.plugin_name, exc)
            return []

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        """Append to the window and store each exchange as a document, in one transaction."""
        sid = check_session_id(session_id)
        messages = coerce_messages(new_messages)
        if not messages:
            return
        self._ensure_started()
        try:
            with self._db.atomic() as con:
                tail = self._window.append(sid, messages, self.policy, con=con)
                pairs = exchange_texts(tail, messages)
                docs = [self._docs.add(con, sid, format_exchange(q, a), {"question": q, "answer": a},
                                       indexed=not self.background_index) for q, a in pairs]
                if docs and not self.background_index:
                    self._index_inline(con, docs)
            self._log.clear("update", f"{self.plugin_name}: storing works again")
        except MemoryPluginError as exc:
            self._log.error("update", "%s: could not store the exchange of %r: %s", self.plugin_name, sid, exc)
            return
        if self._worker is not None and pairs:
            self._worker.notify()
        self._maybe_expire()

    def build_conversation_context(self, utterance: str, session_id: str) -> list[AgentMessage]:
        text = check_utterance(utterance)
        sid = check_session_id(session_id)
        history = self.get_history(sid)
        window = context_window(history)
        budget = self._recall_budget(text)
        if budget is not None:
            window, budget = fit_window(window, budget)
        hits = self.recall(self.build_query(text, history), sid, window) if text else []
        context = render_hits(hits, self.style, _chunk_budget(budget, self.injection.header))
        tool_id = ""
        if context and self.injection.mode == "tool":
            tool_id = f"memrag_{sid}_{next(self._tool_counters[sid])}"
        return assemble_context(text, window, context, self.injection, self.system_prompt, tool_call_id=tool_id)

    # -- retrieval -----------------------------------------------------------------------
    def build_query(self, utterance: str, history: Sequence[AgentMessage]) -> str:
        """The search query: the utterance, or in history mode earlier user turns too."""
        if self.settings.query_mode != "history" or not self.settings.query_history_turns:
            return utterance
        users = [m.content for m in history if is_role(m, "user")][-self.settings.query_history_turns:]
        return " ".join([*users, utterance]).strip()

    def search(self, query: str, session_id: str | None = None, top_k: int | None = None) -> list[MemoryHit]:
        """The best ``top_k`` stored items for ``query`` (session-scoped unless ``scope`` is global)."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if session_id is not None:
            check_session_id(session_id)
        k = self.settings.max_num_results if top_k is None else int(top_k)
        if k <= 0 or not query.strip():
            return []
        self._ensure_started()
        only = session_id if self.settings.scope == "session" and session_id is not None else None
        try:
            hits = self._scoped_query(query, k, only)
            self._log.clear("search", f"{self.plugin_name}: search works again")
        except Exception as exc:  # noqa: BLE001 - any backend failure costs one turn's recall, no more
            # An ERROR as in the reference (SPEC B 4.2), but once per outage, not per turn. Indexers
            # whose queue is durable log their own failure as a WARNING, so one cause (a broken
            # embedder fails both) is one ERROR.
            self._log.error("search", "%s: search failed (%s); proceeding without context", self.plugin_name, exc)
            return []
        return self._filter_hits(hits)[:k]

    def recall(self, query: str, session_id: str, window: Sequence[AgentMessage] = ()) -> list[MemoryHit]:
        """``search`` for a turn, minus items already present verbatim in ``window``."""
        k = self.settings.max_num_results
        if not self.settings.dedup_history or not window:
            return self.search(query, session_id, k)
        hits = self.search(query, session_id, k + len(window) // 2)
        return drop_window_duplicates(hits, window)[:k]

    def store(self, text: str, session_id: str, metadata: dict[str, Any] | None = None) -> str | None:
        """Store a free-text document (not an exchange); returns its id, or None if empty."""
        sid = check_session_id(session_id)
        text = check_utterance(text)
        if not text:
            return None
        with self._db.atomic() as con:
            doc = self._docs.add(con, sid, text, dict(metadata or {}), indexed=not self.background_index)
            if not self.background_index:
                self._index_inline(con, [doc])
        if self._worker is not None:
            self._worker.notify()
        return doc.doc_id

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return sorted(set(self._window.sessions()) | set(self._docs.sessions()))

    def forget(self, session_id: str) -> dict[str, int]:
        sid = check_session_id(session_id)
        if self._worker is not None and not self.index_in_database:
            # An outside index: do not let the indexer re-add what we are deleting. (An index in
            # this file reads its queue inside its own transaction: nothing to wait for.)
            self._worker.flush(30)
        removed: set[int] = set()  # documents whose index entries are already gone
        if not self.index_in_database:
            # An outside index (vectors, whose metadata holds the text) is emptied first: a crash
            # between the steps then leaves the session whole and visible (its documents pending
            # again, so a restart re-indexes them), never gone from export() but still on disk.
            with self._db.atomic() as con:
                current = self._docs.for_session(sid)
                self._docs.mark_indexed(con, [d.rowid for d in current], False)
            self._delete_documents(current)
            removed = {d.rowid for d in current}
        with self._db.atomic() as con:
            messages = self._window.forget(sid, con)
            docs = self._docs.delete_session(con, sid)
            if self.index_in_database:
                self._delete_documents(docs)  # a savepoint inside this transaction
        if not self.index_in_database:
            self._delete_documents([d for d in docs if d.rowid not in removed])  # written meanwhile
        self._db.checkpoint()  # the WAL still holds the deleted rows and index pages
        return {"messages": messages, "documents": len(docs)}

    def export(self, session_id: str) -> dict[str, Any]:
        data = super().export(session_id)
        data["window"] = [to_dict(m) for m in self.get_history(session_id)]
        data["documents"] = [{"doc_id": d.doc_id, "ts": d.ts, "content": d.text, "metadata": d.metadata}
                             for d in self._docs.for_session(session_id)]
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        sid = check_session_id(session_id if session_id is not None else data.get("session_id"))
        window = [from_dict(d) for d in data.get("window", [])]
        with self._db.atomic() as con:
            if window:
                self._window.append(sid, window, self.policy, con=con)
            docs = [self._docs.add(con, sid, d["content"], _imported_metadata(d), indexed=False)
                    for d in data.get("documents", [])]
        if docs:
            self._index_pending_now()

    # -- lifecycle -----------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        if self._worker is None:
            return True
        self._ensure_started()
        if self._docs.has_pending():
            self._worker.notify()  # also what another process left pending
        return self._worker.flush(timeout)

    def close(self) -> None:
        if self._closed:
            return
        if self._worker is not None:
            self._worker.close()
        try:
            self._close_backend()
        finally:
            release_database(self._db)
            super().close()

    # -- internals -----------------------------------------------------------------------
    def _open_db(self) -> Database:
        con = self.config.get("_con")
        if con is not None:  # an injected sqlite3 connection (tests, shared files)
            return Database(self.settings.db_path or ":memory:", connection=con)
        return open_database(self.settings.db_path or default_path(self.default_db_name))

    def _ensure_started(self) -> None:
        # Work left pending by an earlier process (a crash, a failed index) resumes on first use,
        # not in __init__, where the subclass is not ready yet.
        if self._started:
            return
        with self._start_lock:
            if self._started:
                return
            self._started = True
        if self._docs.count_pending():
            self._index_pending_now()

    def _index_pending_now(self) -> None:
        if self._worker is not None:
            self._worker.notify()
            return
        try:
            with self._db.atomic() as con:
                self._index_inline(con, self._docs.pending(self.index_batch * 32, con), pending=True)
        except MemoryPluginError as exc:
            self._log.error("index", "%s: indexing failed: %s", self.plugin_name, exc)

    def _index_inline(self, con: Any, docs: Sequence[Document], pending: bool = False) -> None:
        """Index inside the caller's transaction; a failure leaves the documents pending.

        New documents are written already marked indexed (one UPDATE less per turn); ``pending``
        ones, left by a failure or a crash, are marked once their index entries are written.
        """
        if not docs:
            return
        try:
            with self._db.atomic():  # a savepoint: undo a half-written index, keep the documents
                self._store_documents(docs)
            if pending:
                self._docs.mark_indexed(con, [d.rowid for d in docs], True)
            self._log.clear("index", f"{self.plugin_name}: indexing works again")
        except Exception as exc:  # noqa: BLE001 - the window and documents are safe; retry later
            self._docs.mark_indexed(con, [d.rowid for d in docs], False)
            self._log.error("index", "%s: failed to store document(s): %s; will retry", self.plugin_name, exc)

    def _index_step(self, busy_wait: float | None = None) -> bool:
        """Index one batch of pending documents; True while more are pending.

        A batch that fails is retried one document at a time, so a document the backend cannot
        take (one the embedder rejects, say) holds up no other; it stays queued, and the step
        raises after committing what was indexed. ``busy_wait`` bounds the wait for another
        process's write lock (in-database indexes).
        """
        if self.index_in_database:
            # The index is in this file: entries and marks commit together, one commit a batch.
            with self._db.atomic(busy_wait) as con:
                docs = self._docs.pending(self.index_batch, con)
                done, failure = self._store_each(docs, savepoints=True)
                self._docs.mark_indexed(con, done, True)
        else:
            docs = self._docs.pending(self.index_batch)
            if not docs:
                return False
            done, failure = self._store_each(docs, savepoints=False)  # slow (embedding): outside any transaction
            with self._db.atomic() as con:
                self._docs.mark_indexed(con, done, True)
        if failure is not None:
            if done:  # the backend works, some documents do not: worth an ERROR of its own, once
                self._log.error("unindexable", "%s: %d of %d document(s) could not be indexed (%s); they stay "
                                "queued and are retried", self.plugin_name, len(docs) - len(done), len(docs), failure)
            raise failure
        return len(docs) == self.index_batch

    def _store_each(self, docs: Sequence[Document], savepoints: bool) -> tuple[list[int], Exception | None]:
        """Store ``docs``: the batch, else one by one. Returns the rowids stored and the first failure.

        ``savepoints``: each attempt in its own savepoint (an index in this database), so a
        failed attempt leaves no partial rows.
        """
        def attempt(batch: Sequence[Document]) -> None:
            if savepoints:
                with self._db.atomic():
                    self._store_documents(batch)
            else:
                self._store_documents(batch)

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

    def _scoped_query(self, query: str, k: int, session_id: str | None) -> list[MemoryHit]:
        if self._query_takes_session:
            return self._query_backend(query, k, session_id=session_id)
        # A third-party backend that cannot filter: over-fetch and filter here.
        hits = self._query_backend(query, 4 * k if session_id else k)
        return [h for h in hits if session_id is None or h.metadata.get("session_id") == session_id]

    def _filter_hits(self, hits: list[MemoryHit]) -> list[MemoryHit]:
        cutoff = self.policy.cutoff()
        min_score = self.settings.min_score
        return [h for h in hits
                if (min_score is None or h.score >= min_score)
                and (cutoff is None or float(h.metadata.get("ts", cutoff)) >= cutoff)]

    def _recall_budget(self, utterance: str) -> int | None:
        if self.settings.max_context_tokens is None:
            return None
        return self.settings.max_context_tokens - message_tokens(self.system_prompt) - message_tokens(utterance)

    def _maybe_expire(self) -> None:
        self._updates += 1
        if self.settings.max_age is None or self._updates % 100 != 1:
            return
        try:
            with self._db.atomic() as con:
                doomed = self._docs.delete_older_than(con, time.time() - self.settings.max_age)
                if self.index_in_database:
                    self._delete_documents(doomed)
            if not self.index_in_database:
                self._delete_documents(doomed)
        except Exception as exc:  # noqa: BLE001 - expiry is housekeeping; never fail a turn for it
            self._log.error("expire", "%s: could not expire old documents: %s", self.plugin_name, exc)


def drop_window_duplicates(hits: Sequence[MemoryHit], window: Sequence[AgentMessage]) -> list[MemoryHit]:
    """Hits whose exchange is not already verbatim in ``window`` (it would be sent twice)."""
    present = {m.content.strip() for m in window}
    out = []
    for hit in hits:
        answer = hit.metadata.get("answer")
        question = (hit.metadata.get("question") or "").strip()
        if answer is not None:
            dup = answer.strip() in present and (not question or question in present)
        else:
            dup = hit.content.strip() in present or (bool(question) and question in present)
        if not dup:
            out.append(hit)
    return out


def _chunk_budget(budget: int | None, header: str) -> int | None:
    if budget is None:
        return None
    return max(0, budget - estimate_tokens(header) - 8)


def _imported_metadata(data: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(data.get("metadata") or {})
    for key in ("content", "session_id", "ts"):
        meta.pop(key, None)
    return meta

