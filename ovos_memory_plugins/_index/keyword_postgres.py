"""Keyword recall on PostgreSQL: postings of stemmed terms, ranked by FTS5's BM25 computed in SQL.

The text path is the same for documents and queries, so their terms always agree:

1. Python splits the text into runs of ``[^\\W_]+`` and folds case and diacritics exactly as the
   query side does (``lexical.query_words``): no dependency on ``unaccent`` (a contrib module
   many servers lack) and no parser rules (e-mails, URLs and hyphenated words indexed whole);
2. each distinct word is stemmed once by PostgreSQL's snowball *porter* dictionary (the
   original Porter stemmer, FTS5's ``porter`` tokenizer's), created by this package without
   stop words: stop words leave only queries, so document lengths count every word, as in FTS5;
   the ``unicode61`` tokenizer setting keeps words unstemmed. Stems are cached in the process.

Ranking is FTS5's ``bm25()`` (k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)), at least
1e-6), over a *postings* table (term, session, document, count in the exchange, count in its
neighbours' text, document length) whose B-tree (term, session_id, doc) makes a query an index
scan of exactly the query terms' postings in scope. PostgreSQL's own ``ts_rank`` and
``ts_rank_cd`` have no idf and ranked 10 to 33 points of recall@5 below BM25 on LoCoMo, so
they are not used. Where this differs from the SQLite index (docs/backends/lexical.md):

* N, n and the mean length are the *session's* when recall is scoped to a session (per-session
  statistics rows, kept by triggers); FTS5's are the whole table's. The same numbers when a store
  holds one session; with many users, one user's exchanges do not weigh on another's ranking;
* snowball's porter and FTS5's porter disagree on a few words (``us``: ``u`` here, ``us`` there);
* two query words with one stem count once; ties go to the newest document.

Neighbour context (``retrieval.neighbour_weight``) is a second count per posting (the term's
occurrences in the exchanges before and after); a term's frequency is then
``count + weight x context count``, as FTS5 weighs its context column. A document whose
neighbours change (a new exchange after it, one deleted) has its postings rebuilt.
"""
from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..storage.postgres import PgDatabase
from .stopwords import normalise_term

__all__ = ["PgKeywordIndex", "STEMMERS"]

#: The lexical ``tokenizer`` settings PostgreSQL can follow, and whether each stems.
STEMMERS = {"porter unicode61 remove_diacritics 2": "porter", "unicode61 remove_diacritics 2": "none"}
#: FTS5's bm25() constants.
K1, B = 1.2, 0.75
#: Longer words are cut to this many characters (a B-tree entry must stay under ~2.7 KB).
MAX_WORD = 200
_TERM = re.compile(r"[^\W_]+", re.UNICODE)

_DICTIONARY_MIGRATIONS = (
    # Snowball's porter stemmer with no stop word list: every word is stemmed, none dropped.
    "CREATE TEXT SEARCH DICTIONARY ovos_porter_stem (TEMPLATE = snowball, Language = porter);",
)

_KEYWORD_MIGRATIONS = (
    """
    -- How this index stems (fixed at creation, as an FTS5 table keeps its tokenizer).
    CREATE TABLE {t}_config (stemmer text NOT NULL);
    -- Each indexed document's length (words in the exchange and in its neighbours' text).
    CREATE TABLE {t} (
        doc bigint PRIMARY KEY REFERENCES {docs} (id) ON DELETE CASCADE,  -- forget: no index row left
        session_id text NOT NULL,
        dl integer NOT NULL
    );
    -- BM25's N and total length per session, kept by statement triggers in the same transaction as
    -- any insert or delete (cascades included); a session with no document has no row.
    CREATE TABLE {t}_stats (session_id text PRIMARY KEY, ndocs bigint NOT NULL, total_len bigint NOT NULL);
    CREATE FUNCTION {t}_stats_add() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {t}_stats AS s (session_id, ndocs, total_len)
            SELECT session_id, count(*), sum(dl) FROM added GROUP BY session_id
        ON CONFLICT (session_id) DO UPDATE
            SET ndocs = s.ndocs + excluded.ndocs, total_len = s.total_len + excluded.total_len;
        RETURN NULL;
    END $$;
    CREATE FUNCTION {t}_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE {t}_stats AS s SET ndocs = s.ndocs - d.n, total_len = s.total_len - d.l
            FROM (SELECT session_id, count(*) AS n, sum(dl) AS l FROM removed GROUP BY session_id) AS d
            WHERE s.session_id = d.session_id;
        DELETE FROM {t}_stats WHERE ndocs <= 0 AND session_id IN (SELECT session_id FROM removed);
        RETURN NULL;
    END $$;
    CREATE TRIGGER {t}_stats_add AFTER INSERT ON {t} REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION {t}_stats_add();
    CREATE TRIGGER {t}_stats_remove AFTER DELETE ON {t} REFERENCING OLD TABLE AS removed
        FOR EACH STATEMENT EXECUTE FUNCTION {t}_stats_remove();
    -- One row per (term, document). INCLUDE makes ranking an index-only scan of the query terms.
    CREATE TABLE {t}_post (
        term text NOT NULL,
        session_id text NOT NULL,
        doc bigint NOT NULL REFERENCES {docs} (id) ON DELETE CASCADE,
        tf integer NOT NULL,            -- occurrences in the exchange
        ctf integer NOT NULL,           -- occurrences in its neighbours' text
        dl integer NOT NULL
    );
    CREATE UNIQUE INDEX {t}_post_key ON {t}_post (term, session_id, doc) INCLUDE (tf, ctf, dl);
    CREATE INDEX {t}_post_doc ON {t}_post (doc);
    """,
)


def words_of(text: str | None) -> list[str]:
    """The words of ``text`` as the index and the queries see them (lower case, no diacritics)."""
    if not text:
        return []
    return [w for w in (_fold(m.group()) for m in _TERM.finditer(text)) if w]


_folded: dict[str, str] = {}


def _fold(word: str) -> str:
    found = _folded.get(word)
    if found is None:
        if len(_folded) > 200_000:
            _folded.clear()
        found = _folded[word] = normalise_term(word)[:MAX_WORD]
    return found


class PgKeywordIndex:
    """The postings of one lexical memory (tables ``<table>_kw*``), in its PostgreSQL database."""

    def __init__(self, db: PgDatabase, table: str, docs_table: str, tokenizer: str):
        if tokenizer not in STEMMERS:
            raise ValueError(f"tokenizer {tokenizer!r} needs SQLite's FTS5; on PostgreSQL use one of "
                             f"{', '.join(map(repr, STEMMERS))}")
        self.db, self.table, self.docs = db, f"{table}_kw", docs_table
        db.migrate("keyword-dictionaries", _DICTIONARY_MIGRATIONS)
        db.migrate(f"keywords:{self.table}", [m.format(t=self.table, docs=docs_table) for m in _KEYWORD_MIGRATIONS])
        self.stemmer = self._fixed_stemmer(STEMMERS[tokenizer])
        self._stems: dict[str, str] = {}
        self._lock = threading.Lock()

    def _fixed_stemmer(self, wanted: str) -> str:
        """The stemmer the index was built with; the first writer fixes it (a read-only open reads it)."""
        if self.db.read_only:
            rows = self.db.execute(f"SELECT stemmer FROM {self.table}_config")
            return str(rows[0][0]) if rows else wanted
        with self.db.atomic() as con:
            con.execute(f"LOCK TABLE {self.table}_config IN EXCLUSIVE MODE")
            row = con.execute(f"SELECT stemmer FROM {self.table}_config").fetchone()
            if row is None:
                con.execute(f"INSERT INTO {self.table}_config (stemmer) VALUES (?)", (wanted,))
        return str(row[0]) if row is not None else wanted

    # -- terms -----------------------------------------------------------------------------
    def stems(self, words: Iterable[str]) -> list[str]:
        """The index term of each word (asked of PostgreSQL once per distinct word, then cached)."""
        words = list(words)
        if self.stemmer == "none":
            return words
        with self._lock:
            new = [w for w in dict.fromkeys(words) if w not in self._stems]
        if new:
            rows = self.db.execute("SELECT w, (ts_lexize('ovos_porter_stem', w))[1] FROM unnest(?::text[]) AS w",
                                   (new,))
            with self._lock:
                if len(self._stems) > 200_000:
                    self._stems.clear()
                self._stems.update({w: stem or w for w, stem in rows})
        with self._lock:
            return [self._stems.get(w, w) for w in words]

    def query_terms(self, words: Sequence[str]) -> list[str]:
        """The distinct index terms of query words (already folded, stop words gone)."""
        return list(dict.fromkeys(self.stems([w[:MAX_WORD] for w in words])))

    # -- writes (inside the caller's transaction) ------------------------------------------
    def insert(self, con: Any, rows: Sequence[tuple[int, str, str, str | None]]) -> None:
        """Index ``(rowid, text, session_id, neighbours' text or None)``; one already indexed is kept."""
        if not rows:
            return
        counted = [(rowid, sid, *self._counts(text, ctx)) for rowid, text, sid, ctx in rows]
        postings = [(term, sid, rowid, tf, ctf, dl) for rowid, sid, terms, dl in counted
                    for term, (tf, ctf) in terms.items()]
        columns = tuple(list(col) for col in zip(*postings)) if postings else ([], [], [], [], [], [])
        # One statement: the lengths, and the postings of the documents not indexed before.
        con.execute(
            f"WITH k AS (INSERT INTO {self.table} (doc, session_id, dl) "
            "SELECT * FROM unnest(?::bigint[], ?::text[], ?::int[]) ON CONFLICT (doc) DO NOTHING RETURNING doc) "
            f"INSERT INTO {self.table}_post (term, session_id, doc, tf, ctf, dl) "
            "SELECT * FROM unnest(?::text[], ?::text[], ?::bigint[], ?::int[], ?::int[], ?::int[]) "
            "AS u(t, s, d, f, c, l) WHERE u.d IN (SELECT doc FROM k)",
            ([c[0] for c in counted], [c[1] for c in counted], [c[3] for c in counted], *columns))

    def refresh(self, con: Any, rowid: int, session_id: str, context: str | None) -> None:
        """Index a document again with new neighbours' text (None: none)."""
        row = con.execute(f"SELECT content FROM {self.docs} WHERE id = ?", (rowid,)).fetchone()
        self.delete(con, [rowid])
        if row is not None:
            self.insert(con, [(rowid, row[0], session_id, context)])

    def has_context(self, con: Any, rowid: int) -> bool:
        return con.execute(f"SELECT 1 FROM {self.table}_post WHERE doc = ? AND ctf > 0 LIMIT 1",
                           (rowid,)).fetchone() is not None

    def delete(self, con: Any, rowids: Sequence[int]) -> None:
        """Remove documents' entries (their deletion from the log removes them by cascade too)."""
        if rowids:  # nothing reads their answer: they go with the transaction's next statement
            con.defer(f"DELETE FROM {self.table}_post WHERE doc = ANY(?)", [(list(rowids),)])
            con.defer(f"DELETE FROM {self.table} WHERE doc = ANY(?)", [(list(rowids),)])

    def _counts(self, text: str, context: str | None) -> tuple[dict[str, tuple[int, int]], int]:
        own, near = words_of(text), words_of(context)
        stems = self.stems(own + near)
        tf, ctf = Counter(stems[:len(own)]), Counter(stems[len(own):])
        return {term: (tf[term], ctf[term]) for term in tf.keys() | ctf.keys()}, len(own) + len(near)

    # -- ranking ---------------------------------------------------------------------------
    def search(self, words: Sequence[str], top_k: int, session_id: str | None, weight: float = 0.0,
               only: Sequence[int] | None = None) -> list[tuple[int, float]]:
        """``(rowid, score)`` best first: BM25 of the documents matching any of ``words`` (in
        ``session_id``'s documents when given; of the documents ``only`` when given, every one of
        them scored against the whole scope's statistics)."""
        ranked = self._ranking(words, top_k, session_id, weight, only)
        if ranked is None:
            return []
        sql, params = ranked
        return [(int(doc), float(score)) for doc, score in self.db.execute(sql, params)]

    def hits(self, words: Sequence[str], top_k: int, session_id: str | None,
             weight: float = 0.0) -> list[tuple[str, str, str, float]]:
        """``(doc_id, content, metadata JSON, score)`` best first: :meth:`search` and the documents'
        rows in one statement (one round trip a turn)."""
        ranked = self._ranking(words, top_k, session_id, weight, None)
        if ranked is None:
            return []
        sql, params = ranked
        rows = self.db.execute(f"WITH r AS ({sql}) SELECT d.doc_id, d.content, d.metadata, r.score FROM r "
                               f"JOIN {self.docs} AS d ON d.id = r.doc ORDER BY r.score DESC, r.doc DESC", params)
        return [(doc_id, content, meta, float(score)) for doc_id, content, meta, score in rows]

    def _ranking(self, words: Sequence[str], top_k: int, session_id: str | None, weight: float,
                 only: Sequence[int] | None) -> tuple[str, list[Any]] | None:
        """The SQL (and parameters) of ``(doc, score)`` best first; None when nothing can match."""
        terms = self.query_terms(words)
        if not terms or top_k <= 0:
            return None
        t, scoped = self.table, session_id is not None
        if scoped:
            stats = f"SELECT ndocs::float8 AS n, total_len::float8 / ndocs AS avgdl FROM {t}_stats WHERE session_id = ?"
        else:
            stats = (f"SELECT sum(ndocs)::float8 AS n, sum(total_len)::float8 / NULLIF(sum(ndocs), 0) AS avgdl "
                     f"FROM {t}_stats")
        scope = "AND session_id = ?" if scoped else ""
        restrict = "WHERE p.doc = ANY(?)" if only is not None else ""
        # Off, only the exchange's own words match (FTS5's "content : (...)"); on, the neighbours' too.
        # A term's document frequency is a window count over its postings, which the index scan
        # returns grouped by term: one pass, no sort and no second scan.
        sql = f"""
            WITH st AS MATERIALIZED ({stats}),
            p AS (
                SELECT doc, (tf + ?::float8 * ctf) AS f, dl::float8 AS dl,
                       count(*) OVER (PARTITION BY term)::float8 AS nt FROM {t}_post
                WHERE term = ANY(?::text[]) {scope} AND (tf > 0 OR ?::float8 > 0))
            SELECT p.doc, sum(GREATEST(ln((st.n - p.nt + 0.5) / (p.nt + 0.5)), 1e-6)
                              * p.f * {K1 + 1} / (p.f + {K1} * ({1 - B} + {B} * p.dl / st.avgdl))) AS score
            FROM p CROSS JOIN st {restrict}
            GROUP BY p.doc ORDER BY score DESC, p.doc DESC LIMIT ?"""
        params: list[Any] = [*([session_id] if scoped else []), float(weight), terms,
                             *([session_id] if scoped else []), float(weight)]
        if only is not None:
            params.append(list(only))
        params.append(top_k)
        return sql, params

    def scores(self, words: Sequence[str], rowids: Sequence[int], session_id: str | None,
               weight: float = 0.0) -> dict[int, float]:
        """BM25 of each document of ``rowids`` as :meth:`search` ranks it (0.0: no word matches)."""
        found = dict(self.search(words, len(rowids), session_id, weight, only=rowids)) if rowids else {}
        return {r: found.get(r, 0.0) for r in rowids}
