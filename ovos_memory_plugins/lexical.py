"""``LexicalMemory``: keyword recall with SQLite FTS5 and BM25, no model, fully offline.

Drop-in with the reference (``db_path``, ``table``, score = -bm25, every base key), plus:

* the verbatim window and the documents live in the same file, in one transaction per update;
  the FTS5 entries follow in small background batches, and recall never waits for them (an
  exchange not indexed yet is matched by its words meanwhile);
* stop words of the configured languages are left out of the query, so "what is my name"
  searches for "name", not for every exchange containing "is";
* user text never reaches ``MATCH`` raw: each term is quoted, so ``NEAR``, ``OR``, ``*``,
  quotes and hyphens in an utterance are plain words;
* words are stemmed and diacritics folded (``dogs`` finds ``dog``, ``café`` finds ``cafe``);
* ids never repeat across restarts;
* the FTS5 index is derived from the document log: found damaged (while the window and the log
  read fine), it is built again from the log, and the file is kept (see ``_rebuild_index``).
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from ._core.log import LOG
from ._index.neighbours import adjacent, context_text, neighbour_weight_option, survivors
from ._index.pending import merge_pending
from ._index.postings import DELETION_LOG_KEEP, PostingsMirror, fts_safe, table_tokenizer
from ._index.stopwords import LANGUAGES, MAX_QUERY_TERMS, StopWords, query_words
from .common import MemoryHit
from .config import option
from .errors import ConfigError
from .retrieval import BaseRetrievalMemory, RetrievalConfig
from .storage import after_commit
from .storage.documents import Document
from .storage.integrity import IndexDamaged, index_statements
from .storage.sqlite import Database, StoreReplaced
from .storage.windows import safe_table_name

__all__ = ["LexicalConfig", "LexicalMemory", "match_expression", "MAX_QUERY_TERMS", "query_words"]


_FTS_MIGRATIONS = (
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS {t} USING fts5(
        content,
        session_id UNINDEXED,
        tokenize = '{tokenizer}'
    );
    """,
    """
    -- Ids of documents deleted from the index (forget, expiry), so RAM copies of its postings in
    -- every process drop them too (see _bm25.py). Pruned to the last DELETION_LOG_KEEP.
    CREATE TABLE IF NOT EXISTS {t}_deleted (seq INTEGER PRIMARY KEY AUTOINCREMENT, doc INTEGER NOT NULL);
    """,
    """
    -- A third column for the neighbouring exchanges' text (retrieval.neighbour_weight; empty when
    -- off). FTS5 cannot add a column, so the index is rebuilt once, keeping its tokenizer.
    CREATE VIRTUAL TABLE {t}_v3 USING fts5(content, session_id UNINDEXED, ctx, tokenize = '{tokenizer}');
    INSERT INTO {t}_v3 (rowid, content, session_id) SELECT rowid, content, session_id FROM {t};
    DROP TABLE {t};
    ALTER TABLE {t}_v3 RENAME TO {t};
    """,
)
T = TypeVar("T")

#: Seconds after a rebuild within which the index found damaged again is not rebuilt again: the
#: damage is elsewhere in the file, and rebuilding in a loop would only rewrite it.
REBUILD_AGAIN_S = 60.0
#: The index as the last migration leaves it (built again in this shape when found damaged).
_FTS_TABLE = "CREATE VIRTUAL TABLE {schema}{t} USING fts5(content, session_id UNINDEXED, ctx, tokenize = '{tokenizer}')"


@dataclasses.dataclass(frozen=True)
class LexicalConfig(RetrievalConfig):
    table: str = option("lexical_memory", "FTS5 table name (reduced to [A-Za-z0-9_])")
    # Porter stemming lifted LoCoMo recall@5 from 0.645 to 0.700 at the same recalled size; on other
    # languages it only trims English-like suffixes, the same way at index and query time.
    tokenizer: str = option("porter unicode61 remove_diacritics 2",
                            "FTS5 tokenizer, applied when the table is created",
                            choices=("porter unicode61 remove_diacritics 2", "unicode61 remove_diacritics 2",
                                     "trigram"))
    stopword_languages: list[str] | None = option(
        list(LANGUAGES), "languages whose stop words may be left out of a query (the query's own language's); "
        "[] keeps every word",
        key="retrieval.stopword_languages", kind=list)
    extra_stopwords: list[str] = option([], "more words to leave out of queries", key="retrieval.extra_stopwords")
    neighbour_weight: float = neighbour_weight_option(
        "weight of the neighbouring exchanges' words (the one before and after, same session) in ranking; "
        "0 = off. The hybrid preset uses 0.5")
    # Ours: FTS5 scores every matching row (~1 µs each): 3 ms a turn at 100k exchanges; the same
    # ranking from postings in RAM takes ~0.1 ms. About 10 MB per 100k exchanges.
    ram_index: bool = option(True, "rank from a copy of the keyword postings in RAM (same results as FTS5, "
                                   "faster on large stores; false saves memory on small devices)")

    def __post_init__(self) -> None:
        super().__post_init__()
        # The name resolved as the tables are named: ``memory.table`` is the table that exists.
        table = safe_table_name(self.table)
        if table.lower().startswith("sqlite_") and not _on_postgres(self):
            table = f"t_{table}"  # SQLite reserves these names for itself
        object.__setattr__(self, "table", table)
        unknown = sorted(set(self.stopword_languages or ()) - set(LANGUAGES))
        if unknown:
            raise ConfigError(
                f"'retrieval.stopword_languages' has {unknown}; supported languages are {', '.join(LANGUAGES)}")


#: The longest name this package makes of ``table`` on PostgreSQL is ``<table>_window_by_session``;
#: PostgreSQL keeps 63 bytes of a name and cuts the rest, so two names may become one.
PG_TABLE_MAX = 63 - len("_window_by_session")


def _on_postgres(settings: Any) -> bool:
    from .storage.postgres import is_postgres_url

    return is_postgres_url(settings.db_url or settings.db_path)


def _postgres_table_problems(settings: Any) -> list[str]:
    """``table`` too long for the names made of it on PostgreSQL (checked before anything is opened)."""
    table = settings.table
    if not _on_postgres(settings) or len(table) <= PG_TABLE_MAX:
        return []
    return [f"'table' is {len(table)} characters long; on PostgreSQL it may have at most {PG_TABLE_MAX} (names "
            f"there hold 63 bytes, and the package adds up to {63 - PG_TABLE_MAX} to it)"]


def match_expression(text: str, ignore: frozenset[str] = frozenset()) -> str:
    """An FTS5 query matching any content word of ``text``, safe for any input.

    >>> match_expression('What\\'s NEAR "AND" café-au-lait_x 42?')
    '"what" OR "s" OR "near" OR "and" OR "cafe" OR "au" OR "lait" OR "x" OR "42"'
    >>> match_expression("what is my name", frozenset({"what", "is", "my"}))
    '"name"'
    """
    return _or_of(query_words(text, ignore))


def _or_of(words: list[str]) -> str:
    # Each word is a quoted string: inside quotes FTS5 operators and syntax are plain text.
    return " OR ".join(f'"{w}"' for w in words)


class LexicalMemory(BaseRetrievalMemory):
    """Keyword recall over every stored exchange.

    Example::

        memory = LexicalMemory({"db_path": "~/.local/share/ovos/lexical_memory.db",
                                "retrieval": {"max_num_results": 3}})
    """

    Config: ClassVar[type] = LexicalConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-lexical"
    default_db_name: ClassVar[str] = "lexical_memory.db"
    index_in_database: ClassVar[bool] = True
    # Writing FTS5 costs more than the rest of an update together (its own pages, and a segment
    # per commit). Off the turn, a burst of exchanges shares one commit; meanwhile the RAM
    # postings cover documents not indexed yet, or, when FTS5 ranks, their words are matched
    # (a turn never indexes). A batch is bounded in characters too: its transaction holds the
    # file's write lock and this process's connection, which turns wait for.
    background_index: ClassVar[bool] = True
    index_batch: ClassVar[int] = 500
    index_chars: ClassVar[int | None] = 20_000
    index_delay: ClassVar[float] = 0.05
    # Every exchange is safe in the document log and recalled from the RAM postings meanwhile, so
    # a failing batch is a WARNING; the cause (a full disk) fails update_history too, the ERROR.
    index_failure_level: ClassVar[str] = "warning"
    score_kind: ClassVar[str | None] = "keyword"
    #: The keyword index was found damaged and waits to be built again (by the indexer's thread).
    _rebuild_due: bool = False
    _damage: str = ""
    #: When (``time.monotonic()``) the index was last rebuilt here.
    _rebuilt_at: float = float("-inf")

    @classmethod
    def check_settings(cls, settings: Any) -> list[str]:
        return [*super().check_settings(settings), *_postgres_table_problems(settings)]

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__(config)
        s = self.settings
        self._stop = StopWords(tuple(s.stopword_languages or ()), tuple(s.extra_stopwords))
        # On PostgreSQL: postings ranked in SQL (_index/keyword_postgres.py) instead of FTS5.
        self._pg = self._open_pg_index() if self._db.engine == "postgres" else None
        self._fts = self._create_fts() if self._pg is None else None
        self._mirror = self._open_mirror() if s.ram_index and self._fts is not None else None
        if self._rebuild_due and self._worker is not None:  # found damaged while opening it
            self._worker.notify()

    def _table_prefix(self, db: Database) -> str:
        return self.settings.table

    def _create_fts(self) -> str | None:
        table = self.settings.table
        self._adopt_reference_table(table)
        # An existing index keeps the tokenizer it was built with (its terms are made by it).
        tokenizer = table_tokenizer(self._db, table) or self.settings.tokenizer
        self._tokenizer = tokenizer  # how long runs are given to FTS5 (fts_safe)
        try:
            self._db.migrate(f"fts:{table}", [m.format(t=table, tokenizer=tokenizer) for m in _FTS_MIGRATIONS])
        except Exception as exc:  # noqa: BLE001 - an SQLite built without FTS5
            if "fts5" not in str(exc).lower():
                raise
            self._log.error("fts5", "%s: this SQLite has no FTS5 (%s); keyword recall is off",
                            self.plugin_name, exc)
            return None
        return table

    def _open_pg_index(self) -> Any:
        from ._index.keyword_postgres import PgKeywordIndex

        try:
            return PgKeywordIndex(self._db, self.settings.table, self._docs.table,  # type: ignore[arg-type]
                                  self.settings.tokenizer)
        except BaseException as exc:
            self._store.release()  # construction fails: the connection must not outlive it
            if isinstance(exc, ValueError):
                raise ConfigError(f"{self.plugin_name}: {exc}") from exc
            raise

    def _adopt_reference_table(self, table: str) -> None:
        """Bring the exchanges of a database the reference package wrote into the document log.

        Its FTS5 table ``(doc_id, session_id, content)`` is all it kept; here the document log is
        the truth and the index is derived from it. So, once, in one transaction: every row
        becomes a document (new ids: the reference's repeat after a restart), the old table is
        dropped, and the index is built again from the log, with this package's tokenizer.
        """
        try:
            with self._db.read() as con, index_statements(f"keyword index {table} in {self._db.path}", True):
                columns = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        except IndexDamaged as exc:  # FTS5 cannot open it: ours (rebuilt once the memory is ready)
            if not self._db.read_only:
                self._rebuild_due, self._damage = True, str(exc)
            return
        if "doc_id" not in columns:
            return
        with self._db.atomic() as con:
            rows = con.execute(f"SELECT session_id, content FROM {table} ORDER BY rowid").fetchall()
            for session_id, content in rows:
                question, _, answer = str(content).partition("\nA: ")
                meta = {"question": question.removeprefix("Q: "), "answer": answer} if answer else {}
                self._docs.add(con, str(session_id), str(content), meta, indexed=False)
            con.execute(f"DROP TABLE {table}")
        LOG.info(f"{self.plugin_name}: adopted {len(rows)} exchange(s) from the reference package's table {table!r}")

    def _open_mirror(self) -> PostingsMirror | None:
        assert self._fts is not None
        tokenizer = table_tokenizer(self._db, self._fts)
        if tokenizer is None:
            return None
        return PostingsMirror(self._db, self._fts, self._docs.table, f"{self._fts}_deleted", tokenizer,
                              self.settings.neighbour_weight, on_damage=self._index_damaged)

    # -- hooks -----------------------------------------------------------------------------
    def _store_documents(self, docs: Sequence[Document]) -> None:
        # Called inside the transaction that marks them indexed (the base's _index_step).
        if self._fts is None and self._pg is None:
            return
        con = self._db.connection_in_transaction()
        if self.settings.neighbour_weight:
            batch = {d.rowid for d in docs}
            for doc in docs:  # in order: each document is the next neighbour of the one before
                before, after = adjacent(con, self._docs.table, doc.session_id, doc.rowid)
                self._insert(con, [(doc.rowid, doc.text, doc.session_id, context_text(before, after))])
                if before is not None and before[0] not in batch:  # one of this batch already has us
                    self._refresh_context(con, before[0], doc.session_id)
            return
        self._insert(con, [(d.rowid, d.text, d.session_id, None) for d in docs])

    def _insert(self, con: Any, rows: list[tuple[int, str, str, str | None]]) -> None:
        if self._pg is not None:
            self._pg.insert(con, rows)
            return
        sql = f"INTO {self._fts} (rowid, content, session_id, ctx) VALUES (?, ?, ?, ?)"
        spec = self._tokenizer
        rows = [(rowid, fts_safe(text, spec), sid, fts_safe(ctx, spec) if ctx else ctx)
                for rowid, text, sid, ctx in rows]
        with self._index_statements():
            try:
                con.executemany(f"INSERT {sql}", rows)
            except sqlite3.IntegrityError:
                # A document indexed before (an import re-run): replace it. Rare, so the common insert
                # skips REPLACE's lookup and delete of an old row.
                con.executemany(f"INSERT OR REPLACE {sql}", rows)

    def _refresh_context(self, con: Any, rowid: int, session_id: str) -> None:
        """Rebuild a document's neighbour column from the log (emptied when the option is off)."""
        text = context_text(*adjacent(con, self._docs.table, session_id, rowid)) \
            if self.settings.neighbour_weight else None
        if self._pg is not None:
            self._pg.refresh(con, rowid, session_id, text)
            return
        with self._index_statements():
            con.execute(f"UPDATE {self._fts} SET ctx = ? WHERE rowid = ?",
                        (fts_safe(text, self._tokenizer) if text else text, rowid))

    def _query_backend(self, query: str, top_k: int, session_id: str | None = None) -> list[MemoryHit]:
        words = self._stop.query_words(query)
        if self._pg is not None:
            return [MemoryHit(content, doc_id, score, json.loads(meta)) for doc_id, content, meta, score
                    in self._pg.hits(words, top_k, session_id, self.settings.neighbour_weight)]
        if not words or self._fts is None:
            return []
        ranked = self._mirror.search(words, top_k, session_id) if self._mirror is not None else None
        if ranked is not None:
            return self._hits(ranked)  # the RAM postings hold the pending documents too
        # A damaged index answers nothing: the pending documents' words answer meanwhile.
        indexed: list[MemoryHit] = self._from_index(lambda: self._fts_hits(words, top_k, session_id), [])
        return merge_pending(indexed, self._pending_hits(words, top_k, session_id), top_k)

    def _fts_hits(self, words: list[str], top_k: int, session_id: str | None) -> list[MemoryHit]:
        """FTS5's ranking of the indexed documents (IndexDamaged: the index is damaged)."""
        t = self._fts
        if session_id is not None and self._docs.holds_only(session_id):
            # Filtering on the UNINDEXED session column reads every matching row's content: 40%
            # of a 10k-exchange query. A store holding one session (one persona, one user) skips it.
            session_id = None
        where = "AND session_id = ?" if session_id is not None else ""
        params: list[Any] = [self._match(words), *([session_id] if session_id is not None else []), top_k]
        # The index alone first (its damage is its own, not the file's), then the documents.
        ranked = self._read_index(f"SELECT rowid, -{self._rank()} AS score FROM {t} WHERE {t} MATCH ? {where} "
                                  "ORDER BY score DESC LIMIT ?", params)
        return self._hits([(rowid, float(score)) for rowid, score in ranked])

    def _score_documents(self, query: str, docs: Sequence[tuple[int, str]],
                         session_id: str | None) -> dict[int, float]:
        """BM25 of given documents, as :meth:`_query_backend` ranks them (0.0: no word matches).

        From the RAM postings a lookup (the search just made computed them); from FTS5 one
        ``MATCH ... AND rowid IN (...)`` (its ``bm25()`` statistics are the whole table's, so a
        restricted query scores as the full one); on PostgreSQL the ranking's own SQL restricted
        to them, with the scope's statistics. A turn never indexes: a document not indexed yet
        scores 0.0 there.
        """
        rowids = [rowid for rowid, _ in docs]
        words = self._stop.query_words(query)
        if self._pg is not None:
            return self._pg.scores(words, rowids, session_id, self.settings.neighbour_weight)
        if not words or self._fts is None:
            return dict.fromkeys(rowids, 0.0)
        scored = self._mirror.scores(words, rowids, session_id) if self._mirror is not None else None
        if scored is not None:
            return scored
        t = self._fts
        marks = ",".join("?" * len(rowids))
        rows: list[Any] | None = self._from_index(lambda: self._read_index(
            f"SELECT rowid, -{self._rank()} FROM {t} WHERE {t} MATCH ? AND rowid IN ({marks})",
            [self._match(words), *rowids]), None)
        if rows is None:
            return {}  # the index is damaged: it cannot score them now
        found = dict(rows)
        return {r: float(found.get(r, 0.0)) for r in rowids}

    def _match(self, words: list[str]) -> str:
        # Off, the query names the content column: context left by an earlier setting never matches.
        return _or_of(words) if self.settings.neighbour_weight else f"content : ({_or_of(words)})"

    def _rank(self) -> str:
        return f"bm25({self._fts}, 1.0, 0.0, {float(self.settings.neighbour_weight)!r})"

    def _hits(self, ranked: list[tuple[int, float]]) -> list[MemoryHit]:
        if not ranked:
            return []
        rows = self._db.execute(
            f"SELECT id, doc_id, content, metadata FROM {self._docs.table} "
            f"WHERE id IN ({','.join('?' * len(ranked))})", [rowid for rowid, _ in ranked])
        found = {r[0]: r for r in rows}  # a document forgotten since the ranking is left out
        return [MemoryHit(found[rowid][2], found[rowid][1], score, json.loads(found[rowid][3]))
                for rowid, score in ranked if rowid in found]

    def _delete_documents(self, docs: Sequence[Document]) -> None:
        if self._pg is not None and docs:
            self._delete_pg_documents(docs)
            return
        if self._fts is None or not docs:
            return
        rebuilt = None
        with self._db.atomic() as con:
            try:
                with self._db.atomic():  # a savepoint: a damaged index is dropped whole instead
                    self._delete_from_index(con, docs)
            except IndexDamaged as exc:
                # Dropped, the index keeps no entry of the deleted exchanges (forget means forget);
                # the others are queued for the new one.
                rebuilt = (exc, self._reset_index(con))
            con.executemany(f"INSERT INTO {self._fts}_deleted (doc) VALUES (?)", [(d.rowid,) for d in docs])
            con.execute(f"DELETE FROM {self._fts}_deleted WHERE seq <= "
                        f"(SELECT MAX(seq) FROM {self._fts}_deleted) - ?", (DELETION_LOG_KEEP,))
        if rebuilt is not None:
            self._rebuilt(*rebuilt)

    def _delete_from_index(self, con: Any, docs: Sequence[Document]) -> None:
        with self._index_statements():
            con.executemany(f"DELETE FROM {self._fts} WHERE rowid = ?", [(d.rowid,) for d in docs])
        for rowid, session_id in survivors(con, self._docs.table, docs):
            # A deleted exchange must not live on as a neighbour's context (forget means forget).
            with self._index_statements():
                row = con.execute(f"SELECT ctx FROM {self._fts} WHERE rowid = ?", (rowid,)).fetchone()
            if row is not None and row[0]:
                self._refresh_context(con, rowid, session_id)
        with self._index_statements():
            # FTS5 records a delete as a marker in a new segment; the terms stay in the old one
            # until a merge. 'optimize' rewrites the index without them (forget means forget).
            con.execute(f"INSERT INTO {self._fts}({self._fts}) VALUES ('optimize')")

    # -- a damaged keyword index -----------------------------------------------------------------
    def _index_statements(self) -> Any:
        """Around statements on the FTS5 table alone: its damage is IndexDamaged, not the file's."""
        return index_statements(f"keyword index {self._fts} in {self._db.path}", sql_only=True)

    def _read_index(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of a read of the FTS5 table alone (IndexDamaged: the index is damaged)."""
        with self._db.read() as con, self._index_statements():
            return con.execute(sql, params).fetchall()

    def _from_index(self, read: Callable[[], T], otherwise: T) -> T:
        """``read()``, a read of the keyword index; ``otherwise`` while the index is damaged (found
        so now, or waiting to be rebuilt)."""
        if self._rebuild_due:
            return otherwise
        began = time.monotonic()
        try:
            return read()
        except IndexDamaged as exc:
            self._index_damaged(exc, began)
            return otherwise

    def _index_damaged(self, exc: BaseException, since: float | None = None) -> None:
        """The keyword index was found damaged (by a read that began at ``since``, a
        ``time.monotonic()``, when not just now): the indexer builds it again from the document log
        (:meth:`_rebuild_index`); meanwhile turns do not read it."""
        if self._db.read_only:  # a command that only looks writes nothing: it searches without the index
            self._log.warning("index-damaged", "%s: %s; searching without it (a memory that writes rebuilds it)",
                              self.plugin_name, exc)
            return
        if self._rebuild_due or self._fts is None:
            return
        if since is not None and since <= self._rebuilt_at:
            return  # that read saw the index as it was before it was rebuilt
        self._rebuild_due, self._damage = True, str(exc)
        worker = self._worker
        if worker is not None and not worker.stopping:
            worker.notify()

    def _index_step(self, busy_wait: float | None = None) -> bool:
        if self._rebuild_due:
            self._rebuild_index(busy_wait)
            return True  # every document is queued for the new index
        try:
            return super()._index_step(busy_wait)
        except IndexDamaged as exc:  # writing the entries met the damage: rebuild, then index
            if time.monotonic() - self._rebuilt_at < REBUILD_AGAIN_S:
                raise  # damaged again at once: not the index's own (the worker retries later, and says so)
            self._index_damaged(exc)
            return True

    def _rebuild_index(self, busy_wait: float | None = None) -> None:
        """Build the damaged keyword index again: in one transaction it is dropped, created empty
        and every document of the log queued for it; the indexer then writes the entries as for
        any new document, in its small batches (crash-safe: the queue is the log's own marks).
        The window and the documents stay as they are."""
        try:
            with self._db.atomic(busy_wait) as con:
                queued = self._reset_index(con)
        except StoreReplaced:
            # Reading the log met damage too: the file was set aside for a new one (its own index)
            self._rebuild_due = False
            raise
        self._rebuilt(self._damage, queued)

    def _reset_index(self, con: Any) -> int:
        """Drop the FTS5 table and create it empty (its tokenizer kept), inside ``con``'s transaction,
        and queue every indexed document of the log again; the number queued."""
        t = self._fts
        assert t is not None
        try:
            con.execute(f"DROP TABLE {t}")
        except sqlite3.Error:
            # FTS5 cannot open what it would drop (its structure or configuration row is damaged):
            # those rows become a new empty index's, then it drops as any other.
            blank = f"{t}_blank"
            con.execute(_FTS_TABLE.format(schema="temp.", t=blank, tokenizer=self._tokenizer))
            for shadow in ("data", "config"):
                con.execute(f"DELETE FROM main.{t}_{shadow}")
                con.execute(f"INSERT INTO main.{t}_{shadow} SELECT * FROM temp.{blank}_{shadow}")
            con.execute(f"DROP TABLE temp.{blank}")
            con.execute(f"DROP TABLE {t}")
        con.execute(_FTS_TABLE.format(schema="", t=t, tokenizer=self._tokenizer))
        return int(con.execute(f"UPDATE {self._docs.table} SET indexed = 0 WHERE indexed = 1").rowcount)

    def _rebuilt(self, damage: object, queued: int) -> None:
        """Say so (one WARNING), and have the indexer fill the new index."""
        self._rebuild_due, self._rebuilt_at = False, time.monotonic()
        LOG.warning(f"{self.plugin_name}: {damage}; it was rebuilt from the stored exchanges ({queued} queued "
                    "for indexing in the background); the window and the stored exchanges were kept")
        worker = self._worker
        if worker is not None and queued:
            after_commit(self._db, worker.notify)

    def _delete_pg_documents(self, docs: Sequence[Document]) -> None:
        assert self._pg is not None
        with self._db.atomic() as con:
            self._pg.delete(con, [d.rowid for d in docs])  # gone already when the log deleted them (cascade)
            for rowid, session_id in survivors(con, self._docs.table, docs):
                # A deleted exchange must not live on as a neighbour's context (forget means forget).
                if self.settings.neighbour_weight or self._pg.has_context(con, rowid):
                    self._refresh_context(con, rowid, session_id)

    def flush(self, timeout: float | None = None) -> bool:
        """Finish background work: indexing, and loading the RAM copy of the postings."""
        done = super().flush(timeout)
        return (self._mirror.wait(timeout) if self._mirror is not None else True) and done

    def _close_backend(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
