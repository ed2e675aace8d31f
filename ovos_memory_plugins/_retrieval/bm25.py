"""A copy of the keyword index's postings in RAM that ranks exactly as FTS5's ``bm25()`` does.

Why: FTS5 scores every row matching any query term, with a lookup of that row's length each:
about 1 µs a row, so 3 ms a turn at 100,000 stored exchanges. The same BM25 over numpy arrays
of postings takes a tenth of that. FTS5 stays the durable index and the fallback: the mirror
answers only while it is provably in step with the document log, and ``search`` returns ``None``
(use FTS5) whenever it is not.

How it stays in sync, across threads and processes sharing the file:

* new documents: the document log's ids only grow (AUTOINCREMENT); each search reads the
  rows above the last one seen and tokenizes them with FTS5's own tokenizer (a
  private in-memory FTS5 table), so both sides see the same terms;
* deletions (forget, expiry) append the deleted ids to a log table in the same transaction;
  each search reads the new entries and drops those documents from the statistics;
* documents still waiting for their FTS5 entries (indexing runs in background batches) are in
  the log already, so they are ranked as FTS5 will rank them once indexed: recall does not wait
  for the indexer.

The first load reads every posting through ``fts5vocab`` (about 3 s per 100,000 exchanges), on a
background thread with its own connection; until it finishes, FTS5 answers.
"""
from __future__ import annotations

import array
import pathlib
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from .._core.log import LogOnce
from ..storage.sqlite import Database

__all__ = ["PostingsMirror", "Tokenizer", "table_tokenizer"]

#: FTS5's bm25() constants (fts5_aux.c).
K1, B = 1.2, 0.75
#: The newest documents whose words are cached at load: the next turns mostly reuse them.
WARM_DOCUMENTS = 5_000
#: Deleted ids kept in the log for mirrors of other processes; one further behind reloads.
DELETION_LOG_KEEP = 100_000
#: Documents tokenized at a time when catching up (a word list per document costs memory).
SLICE = 2_000

_TOKENIZE = re.compile(r"tokenize\s*=\s*'([^']*)'", re.IGNORECASE)


def table_tokenizer(db: Database, table: str) -> str | None:
    """The tokenizer an FTS5 table was created with (its options only apply at creation)."""
    rows = db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,))
    found = _TOKENIZE.search(rows[0][0]) if rows and rows[0][0] else None
    return found.group(1) if found else None


class Tokenizer:
    """FTS5's tokenizer run on a private in-memory table: the index's own terms, exactly.

    Asking FTS5 costs ~80 µs a call, so words are asked once and cached. For unicode61-based
    tokenizers a text in Latin script (U+0000-U+024F: no combining marks, and Python's
    ``isalnum`` agrees there with unicode61's letter and number classes) is a sequence of
    independent alphanumeric runs, so its terms are the cached terms of its words. Any other
    text goes to FTS5 whole.
    """

    #: Words whose terms are cached (a few MB); past this the cache starts again.
    cache_limit = 200_000

    def __init__(self, spec: str):
        self._con = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._con.execute(f"CREATE VIRTUAL TABLE tok USING fts5(c, content='', tokenize='{spec.replace(chr(39), '')}')")
        self._con.execute("CREATE VIRTUAL TABLE tokv USING fts5vocab(tok, instance)")
        self._lock = threading.RLock()
        self._words: dict[str, tuple[str, ...]] = {}
        names = [w for w in spec.split() if not w.isdigit() and w != "remove_diacritics"]
        self._by_word = names in (["unicode61"], ["porter", "unicode61"])

    def counts(self, texts: Sequence[str]) -> list[dict[str, int]]:
        """Per text, how many times each term occurs (its length is the sum)."""
        split = [_WORD.findall(t) if self._by_word and not _NOT_LATIN.search(t) else None for t in texts]
        self.terms([w for words in split if words for w in words])  # one FTS5 call for the new words
        whole = [t for t, words in zip(texts, split) if words is None]
        asked = iter(self._fts5_counts(whole) if whole else ())
        out = []
        for words in split:
            if words is None:
                out.append(next(asked))
                continue
            counts: dict[str, int] = {}
            for word in words:
                for term in self._words[word]:
                    counts[term] = counts.get(term, 0) + 1
            out.append(counts)
        return out

    def terms(self, words: Sequence[str]) -> list[tuple[str, ...]]:
        """The terms FTS5 makes of each word, in order (usually one)."""
        with self._lock:
            new = [w for w in dict.fromkeys(words) if w not in self._words]
            if new and len(self._words) + len(new) > self.cache_limit:
                self._words.clear()  # bounded memory; then every word of this call is new
                new = list(dict.fromkeys(words))
            if new:
                self._words.update(zip(new, self._fts5_terms(new)))
            return [self._words[w] for w in words]

    def warm(self, texts: Sequence[str]) -> None:
        """Cache the words of ``texts`` (recent ones: the words the next turns will use)."""
        self.terms([w for t in texts if self._by_word and not _NOT_LATIN.search(t) for w in _WORD.findall(t)])

    def _fts5_terms(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        out: list[list[tuple[int, str]]] = [[] for _ in texts]
        with self._lock:
            self._con.executemany("INSERT INTO tok (rowid, c) VALUES (?, ?)", enumerate(texts))
            for doc, term, offset in self._con.execute("SELECT doc, term, offset FROM tokv"):
                out[doc].append((offset, term))
            self._con.execute("INSERT INTO tok (tok) VALUES ('delete-all')")
        return [tuple(term for _, term in sorted(found)) for found in out]

    def _fts5_counts(self, texts: Sequence[str]) -> list[dict[str, int]]:
        out = []
        for terms in self._fts5_terms(texts):
            counts: dict[str, int] = {}
            for term in terms:
                counts[term] = counts.get(term, 0) + 1
            out.append(counts)
        return out

    def close(self) -> None:
        self._con.close()


_WORD = re.compile(r"[^\W_]+")
_NOT_LATIN = re.compile(r"[^\x00-\u024f]")


class _Snapshot:
    """Postings and per-document statistics; appended to in id order, never reordered."""

    def __init__(self) -> None:
        self.rowids = array.array("q")
        self.lengths = array.array("i")
        self.sessions = array.array("i")
        self.alive = bytearray()
        self.postings: dict[str, tuple[array.array[int], array.array[int]]] = {}
        self.session_codes: dict[str, int] = {}
        self.n_alive = 0
        self.total_tokens = 0
        self.max_id = 0
        self.deleted_seq = 0
        self.generation = 0  # the Database's: a file replaced since (damaged, set aside) means reload

    def add(self, rowid: int, session_id: str, counts: dict[str, int]) -> None:
        pos = len(self.rowids)
        self.rowids.append(rowid)
        length = self.add_postings(pos, counts)
        self.lengths.append(length)
        self.sessions.append(self.session_codes.setdefault(session_id, len(self.session_codes)))
        self.alive.append(1)
        self.n_alive += 1
        self.total_tokens += length

    def add_postings(self, pos: int, counts: dict[str, int]) -> int:
        """Record the terms of the document at ``pos``; returns its length in tokens."""
        for term, tf in counts.items():
            entry = self.postings.get(term)
            if entry is None:
                entry = self.postings[term] = (array.array("i"), array.array("i"))
            entry[0].append(pos)
            entry[1].append(tf)
        return sum(counts.values())

    def delete(self, rowids: Iterable[int]) -> None:
        import numpy as np

        ids = np.frombuffer(self.rowids, dtype=np.int64)
        for rowid in rowids:
            pos = int(np.searchsorted(ids, rowid))
            if pos < len(ids) and ids[pos] == rowid and self.alive[pos]:
                self.alive[pos] = 0
                self.n_alive -= 1
                self.total_tokens -= self.lengths[pos]
        del ids  # release the buffer: an array exporting one cannot grow

    def top(self, terms: Sequence[str], top_k: int, session_id: str | None) -> list[tuple[int, float]]:
        """FTS5's ``bm25()`` for ``"t1" OR "t2" ...`` over these postings, best first (score = -bm25)."""
        import numpy as np

        if self.n_alive == 0:
            return []
        code = None
        if session_id is not None:
            code = self.session_codes.get(session_id)
            if code is None:
                return []
        entries = [e for e in map(self.postings.get, terms) if e is not None]
        if not entries:
            return []
        # All phrases at once, in query order: each document's sum then adds up in FTS5's order.
        pos = np.concatenate([np.frombuffer(e[0], dtype=np.int32) for e in entries])
        tf = np.concatenate([np.frombuffer(e[1], dtype=np.int32) for e in entries]).astype(np.float64)
        sizes = np.array([len(e[0]) for e in entries])
        if self.n_alive < len(self.alive):  # deleted documents stay in the postings, masked
            keep = np.frombuffer(self.alive, dtype=np.uint8)[pos]
            df = np.add.reduceat(keep.astype(np.int64), np.cumsum(sizes) - sizes)
            keep = keep.astype(bool)
            pos, tf, sizes = pos[keep], tf[keep], df
            if not len(pos):
                return []
        idf = np.log((self.n_alive - sizes + 0.5) / (sizes + 0.5))
        idf[idf <= 0] = 1e-6
        lengths = np.frombuffer(self.lengths, dtype=np.int32)[pos]
        avgdl = self.total_tokens / self.n_alive
        weight = np.repeat(idf, sizes) * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * lengths / avgdl)))
        if code is not None:
            mine = np.frombuffer(self.sessions, dtype=np.int32)[pos] == code
            if not mine.all():
                pos, weight = pos[mine], weight[mine]
                if not len(pos):
                    return []
        # Sum per document: a stable sort groups each document's terms, still in query order.
        order = np.argsort(pos, kind="stable")
        pos = pos[order]
        starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))
        docs, scores = pos[starts], np.add.reduceat(weight[order], starts)
        if len(docs) > top_k:
            best = np.argpartition(-scores, top_k - 1)[:top_k]
            docs, scores = docs[best], scores[best]
        rowids = np.frombuffer(self.rowids, dtype=np.int64)[docs]
        order = np.lexsort((rowids, -scores))
        return list(zip(rowids[order].tolist(), scores[order].tolist()))


class PostingsMirror:
    """The RAM copy of one FTS5 table's postings, kept in step with the document log."""

    #: Further behind than this (another process wrote a lot), reload in the background instead
    #: of tokenizing every new document during one search.
    reload_gap = 5_000

    def __init__(self, db: Database, fts_table: str, docs_table: str, deleted_table: str, tokenizer: str):
        self._db = db
        self._fts, self._docs, self._deleted = fts_table, docs_table, deleted_table
        self.tokenizer = Tokenizer(tokenizer)
        self._snapshot: _Snapshot | None = None
        self._lock = threading.RLock()
        self._loader: threading.Thread | None = None
        self._closed = False
        self._unusable = False  # the index holds neighbour context: its rows are not one column
        self._log = LogOnce()
        self._start_loading()

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    def search(self, words: Sequence[str], top_k: int, session_id: str | None) -> list[tuple[int, float]] | None:
        """``(rowid, score)`` best first, or ``None``: not loaded or not in sync, ask FTS5."""
        with self._lock:
            snap = self._snapshot
            if snap is None or self._unusable:
                self._start_loading()
                return None
            made = self.tokenizer.terms(words)
            # A word FTS5 makes several terms of is a phrase (positions matter), none matches
            # nothing: FTS5 answers those.
            if any(len(m) != 1 for m in made):
                return None
            terms = [m[0] for m in made]
            if not self._sync(snap):
                return None
            return snap.top(terms, top_k, session_id)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for loading to finish; True when the mirror is loaded and in step."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._unusable:
            loader = self._loader
            if loader is not None:
                loader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            with self._lock:
                if self._snapshot is not None and self._sync(self._snapshot):
                    return True
                if self._closed or (deadline is not None and time.monotonic() >= deadline):
                    return False
                if self._loader is None or not self._loader.is_alive():
                    self._start_loading()
                    if self._snapshot is None and (self._loader is None or not self._loader.is_alive()):
                        return self._unusable  # else the load failed (logged); FTS5 answers
        return True  # retired: FTS5 ranks, nothing to wait for

    def close(self) -> None:
        with self._lock:
            self._closed = True
            loader = self._loader
        if loader is not None:
            loader.join(30)
        self.tokenizer.close()

    # -- keeping in step ---------------------------------------------------------------------
    def _sync(self, snap: _Snapshot) -> bool:
        """Apply what was written since the last sync; False (and reloading) when that cannot be done."""
        if snap.generation != self._db.generation:  # a new file: its ids start again, nothing here holds
            self._reload()
            return False
        gap = -1 if self._db.is_memory else self.reload_gap + 1
        # One statement a search: documents added, then documents deleted (their id in ``doc``).
        rows = self._db.execute(
            f"SELECT * FROM (SELECT id, session_id, content FROM {self._docs} WHERE id > ? ORDER BY id LIMIT ?) "
            f"UNION ALL SELECT * FROM (SELECT NULL, seq, doc FROM {self._deleted} WHERE seq > ? ORDER BY seq)",
            (snap.max_id, gap, snap.deleted_seq))
        added = [r for r in rows if r[0] is not None]
        if len(added) < len(rows) and not self._apply_deletions(snap, [r[1:] for r in rows if r[0] is None]):
            return False
        if gap > 0 and len(added) >= gap:  # another process wrote a lot: load afresh, in the background
            self._reload()
            return False
        self._add_documents(snap, added)
        return True

    def _add_documents(self, snap: _Snapshot, rows: Sequence[Any]) -> None:
        """Tokenize ``(id, session_id, content)`` rows (in id order) into ``snap``."""
        for start in range(0, len(rows), SLICE):  # in slices: a word list per document costs memory
            chunk = rows[start:start + SLICE]
            for row, counts in zip(chunk, self.tokenizer.counts([r[2] for r in chunk])):
                snap.add(row[0], row[1], counts)
            snap.max_id = chunk[-1][0]  # should a later slice fail, the next sync resumes after this one

    def _apply_deletions(self, snap: _Snapshot, rows: Sequence[Any]) -> bool:
        """Drop the documents of deletion-log rows ``(seq, doc)``, in seq order."""
        if rows[0][0] != snap.deleted_seq + 1:
            self._reload()  # entries this mirror never saw were pruned: start again
            return False
        snap.delete(r[1] for r in rows)
        snap.deleted_seq = rows[-1][0]
        return True

    def _has_context(self) -> bool:
        """True (and the mirror retires) when rows carry neighbour context: written with another setting.

        Checked at load. A process running with a different ``retrieval.neighbour_weight`` on the
        same file while this one runs is not detected until the next load: meanwhile this copy
        ranks on the exchanges' own words (document lengths then differ slightly from FTS5's).
        """
        if self._db.execute(f"SELECT 1 FROM {self._fts} WHERE ctx IS NOT NULL AND ctx != '' LIMIT 1"):
            self._unusable, self._snapshot = True, None
            self._log.warning("context", "keyword index %s holds neighbour context (retrieval.neighbour_weight); "
                              "FTS5 ranks, the RAM copy is off", self._fts)
        return self._unusable

    # -- loading -----------------------------------------------------------------------------
    def _reload(self) -> None:
        self._snapshot = None
        self._start_loading()

    def _start_loading(self) -> None:
        if self._closed or self._unusable or (self._loader is not None and self._loader.is_alive()):
            return
        if self._db.is_memory or self._db.read_only:  # no second connection: RAM, or a command that only looks
            self._load(None)
            return
        self._loader = threading.Thread(target=self._load, args=(self._db.path,), daemon=True,
                                        name=f"ovos-memory-{self._fts}-postings")
        self._loader.start()

    def _load(self, path: str | None) -> None:
        try:
            snap = self._read_snapshot(path)
            self._log.clear("load", f"keyword index {self._fts}: RAM postings loaded")
        except Exception as exc:  # noqa: BLE001 - FTS5 keeps answering; a later search retries
            self._log.warning("load", "keyword index %s: RAM postings not loaded (%s); FTS5 answers", self._fts, exc)
            return
        if snap is None or self._has_context():
            return
        with self._lock:
            if not self._closed:
                self._snapshot = snap

    def _read_snapshot(self, path: str | None) -> _Snapshot | None:
        generation = self._db.generation
        snap = self._read_file(path)
        if snap is not None:
            snap.generation = generation
        return snap

    def _read_file(self, path: str | None) -> _Snapshot | None:
        # A read-only connection of its own (WAL lets it read beside the writer); as_uri() escapes
        # '?', '#' and '%' in the path.
        con: Any = sqlite3.connect(f"{pathlib.Path(path).resolve().as_uri()}?mode=ro", uri=True,
                                   check_same_thread=False) if path else None
        try:
            if con is None:
                with self._db.read() as shared:
                    return self._read_from(shared)
            con.execute("BEGIN")  # one snapshot of the log, the deletions and the postings
            return self._read_from(con)
        finally:
            if con is not None:
                con.close()

    def _read_from(self, con: Any) -> _Snapshot | None:
        snap = _Snapshot()
        snap.max_id, snap.deleted_seq = con.execute(
            f"SELECT (SELECT COALESCE(MAX(id), 0) FROM {self._docs}), "
            f"(SELECT COALESCE(MAX(seq), 0) FROM {self._deleted})").fetchone()
        docs = con.execute(f"SELECT id, session_id, indexed FROM {self._docs} ORDER BY id").fetchall()
        pos_of: dict[int, int] = {}
        pending_pos: dict[int, int] = {}  # documents not in FTS5 yet
        for pos, (rowid, session_id, indexed) in enumerate(docs):
            (pos_of if indexed else pending_pos)[rowid] = pos
            snap.rowids.append(rowid)
            snap.sessions.append(snap.session_codes.setdefault(session_id, len(snap.session_codes)))
        lengths = [0] * len(docs)
        vocab = f"{self._fts}_mirror_vocab"
        con.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab(main, {self._fts}, instance)")
        term, entry = None, None
        for t, doc, tf in con.execute(f"SELECT term, doc, count(*) FROM temp.{vocab} GROUP BY term, doc"):
            at = pos_of.get(doc)
            if at is None:
                continue
            if t != term:
                term = t
                entry = snap.postings[t] = (array.array("i"), array.array("i"))
            entry[0].append(at)  # type: ignore[index]
            entry[1].append(tf)  # type: ignore[index]
            lengths[at] += tf
        if pending_pos:  # not in FTS5 yet (the indexer batches): their terms come from their text
            cursor = con.execute(f"SELECT id, content FROM {self._docs} WHERE indexed = 0 ORDER BY id")
            while rows := cursor.fetchmany(SLICE):
                for (rowid, _), counts in zip(rows, self.tokenizer.counts([r[1] for r in rows])):
                    at = pending_pos.get(rowid)
                    if at is not None:
                        lengths[at] = snap.add_postings(at, counts)
        snap.lengths.extend(lengths)
        snap.alive.extend(b"\x01" * len(docs))
        snap.n_alive = len(docs)
        snap.total_tokens = sum(lengths)
        recent = con.execute(f"SELECT content FROM {self._docs} ORDER BY id DESC LIMIT ?", (WARM_DOCUMENTS,))
        self.tokenizer.warm([r[0] for r in recent])
        return snap
