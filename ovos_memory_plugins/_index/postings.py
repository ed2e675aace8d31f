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

With neighbour context on (``retrieval.neighbour_weight``) the mirror keeps each exchange's own
words and links it to its neighbours in the log (postings.py): the document log is the truth of
who neighbours whom, so an exchange stored or deleted moves the links the way lexical rewrites
the neighbours' ``ctx`` column. At load it checks that the ``ctx`` column FTS5 holds is what the
links say (an index built while the option was off is not); if not, FTS5 ranks.

The first load reads every posting through ``fts5vocab`` (about 3 s per 100,000 exchanges), on a
background thread with its own connection; until it finishes, FTS5 answers.
"""
from __future__ import annotations

import array
import contextlib
import pathlib
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._core.log import LogOnce
from .._core.worker import run_as_background
from ..storage.integrity import IndexDamaged, index_statements
from ..storage.sqlite import Database
from .bm25 import Postings

__all__ = ["fts_safe", "PostingsMirror", "Tokenizer", "table_tokenizer"]

#: The newest documents whose words are cached at load: the next turns mostly reuse them.
WARM_DOCUMENTS = 5_000
#: Deleted ids kept in the log for mirrors of other processes; one further behind reloads.
DELETION_LOG_KEEP = 100_000
#: Documents tokenized at a time when catching up (a word list per document costs memory).
SLICE = 2_000

_TOKENIZE = re.compile(r"tokenize\s*=\s*'([^']*)'", re.IGNORECASE)


#: The longest run of non-space characters FTS5 is given as is. FTS5 cuts a token at 32,768
#: bytes, in the middle of a character if need be; the cut term then cannot be read back as text
#: (fts5vocab's ``term``), which broke every later read of the vocabulary. 4,000 characters are
#: at most 16,000 bytes.
MAX_RUN = 4000
_LONG_RUN = re.compile(rf"\S{{{MAX_RUN}}}(?=\S)")


def fts_safe(text: str, spec: str = "") -> str:
    """``text`` with a space after every ``MAX_RUN`` characters of a longer run without spaces
    (what FTS5 indexes, and what the mirror tokenizes, so both read the same terms), for the
    tokenizer ``spec``: the trigram tokenizer's terms are three characters, never too long, and
    a space would break the trigrams across it."""
    if len(text) <= MAX_RUN or "trigram" in spec.split():
        return text
    return _LONG_RUN.sub(lambda m: m.group(0) + " ", text)


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
        self._spec = spec
        self._words: dict[str, tuple[str, ...]] = {}
        names = [w for w in spec.split() if not w.isdigit() and w != "remove_diacritics"]
        self._by_word = names in (["unicode61"], ["porter", "unicode61"])

    @property
    def word_based(self) -> bool:
        """True when a text's terms are its words' terms (unicode61, porter): no term spans two words."""
        return self._by_word

    def counts(self, texts: Sequence[str]) -> list[dict[str, int]]:
        """Per text, how many times each term occurs (its length is the sum)."""
        texts = [fts_safe(t, self._spec) for t in texts]
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
                self._words.update(zip(new, self._fts5_terms([fts_safe(w, self._spec) for w in new])))
            return [self._words[w] for w in words]

    def warm(self, texts: Sequence[str]) -> None:
        """Cache the words of ``texts`` (recent ones: the words the next turns will use)."""
        self.terms([w for t in texts if self._by_word and not _NOT_LATIN.search(t) for w in _WORD.findall(t)])

    def _fts5_terms(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        out: list[list[tuple[int, str]]] = [[] for _ in texts]
        with self._lock:
            try:
                self._con.executemany("INSERT INTO tok (rowid, c) VALUES (?, ?)", enumerate(texts))
                for doc, term, offset in self._con.execute("SELECT doc, CAST(term AS BLOB), offset FROM tokv"):
                    out[doc].append((offset, vocab_text(term)))
            finally:  # the table is emptied whatever happened: one bad text never stays for the next
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


def vocab_text(term: bytes) -> str:
    """A term read from fts5vocab as bytes: a term an older store cut mid-character reads with a
    replacement character instead of failing the whole read."""
    return term.decode("utf-8", "replace")


_WORD = re.compile(r"[^\W_]+")
_NOT_LATIN = re.compile(r"[^\x00-\u024f]")


class PostingsMirror:
    """The RAM copy of one FTS5 table's postings, kept in step with the document log."""

    #: Further behind than this (another process wrote a lot), reload in the background instead
    #: of tokenizing every new document during one search.
    reload_gap = 5_000
    #: At most this much new text is tokenized during a search; more (a burst of long replies:
    #: 16 of 4,800 words took 240 ms) is caught up on a background thread while FTS5 answers.
    turn_sync_chars = 20_000

    def __init__(self, db: Database, fts_table: str, docs_table: str, deleted_table: str, tokenizer: str,
                 neighbour_weight: float = 0.0, on_damage: Callable[[IndexDamaged, float], None] | None = None):
        """``on_damage``: told when loading finds the FTS5 index damaged, with the ``time.monotonic()``
        the load began at (its owner rebuilds the index unless it did since; a later search loads again)."""
        self._db = db
        self._on_damage = on_damage
        self._fts, self._docs, self._deleted = fts_table, docs_table, deleted_table
        self.tokenizer = Tokenizer(tokenizer)
        self.neighbour_weight = float(neighbour_weight)
        self._snapshot: Postings | None = None
        self._lock = threading.RLock()
        self._loader: threading.Thread | None = None
        self._catcher: threading.Thread | None = None
        self._closed = False
        self._unusable = False  # the index's context column is not what this mirror would make of it
        self._log = LogOnce()
        if self.neighbour_weight and not self.tokenizer.word_based:
            # A tokenizer that reads across the newline joining the neighbours (trigram) makes
            # terms of the join itself: the context column is not the neighbours' terms.
            self._unusable = True
        self._start_loading()

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    def search(self, words: Sequence[str], top_k: int, session_id: str | None) -> list[tuple[int, float]] | None:
        """``(rowid, score)`` best first, or ``None``: not loaded or not in sync, ask FTS5."""
        with self._for_turn(words) as ready:
            return ready[0].top(ready[1], top_k, session_id) if ready is not None else None

    def scores(self, words: Sequence[str], rowids: Sequence[int],
               session_id: str | None) -> dict[int, float] | None:
        """The score of each of ``rowids`` (0.0: no word matches), or ``None``: ask FTS5."""
        with self._for_turn(words) as ready:
            return ready[0].scores_of(ready[1], rowids, session_id) if ready is not None else None

    @contextlib.contextmanager
    def _for_turn(self, words: Sequence[str]) -> Iterator[tuple[Postings, list[str]] | None]:
        """The postings and terms held for a turn's use, or None: FTS5 answers. Never waits for a
        catch-up that holds the lock (it may be tokenizing a burst of long replies)."""
        if not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            yield self._ready(words, on_turn=True)
        finally:
            self._lock.release()

    def _ready(self, words: Sequence[str], on_turn: bool = False) -> tuple[Postings, list[str]] | None:
        """The postings, in step, and the query's terms; None when FTS5 must answer (always after
        close(): the tokenizer is released, and the store answers reads from its file)."""
        if self._closed:
            return None
        snap = self._snapshot
        if snap is None or self._unusable:
            self._start_loading()
            return None
        made = self.tokenizer.terms(words)
        # A word FTS5 makes several terms of is a phrase (positions matter), none matches
        # nothing: FTS5 answers those.
        if any(len(m) != 1 for m in made):
            return None
        if not self._sync(snap, self.turn_sync_chars if on_turn else None):
            return None
        return snap, [m[0] for m in made]

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
            loader, catcher = self._loader, self._catcher
        for thread in (loader, catcher):
            if thread is not None:
                thread.join(30)
        self.tokenizer.close()

    # -- keeping in step ---------------------------------------------------------------------
    def _sync(self, snap: Postings, max_chars: int | None = None) -> bool:
        """Apply what was written since the last sync; False (and reloading or catching up in the
        background) when that cannot be done now: more than ``max_chars`` of new text."""
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
        if max_chars is not None and sum(len(r[2] or "") for r in added) > max_chars:
            self._start_catch_up()
            return False
        self._add_documents(snap, added)
        return True

    def _start_catch_up(self) -> None:
        if self._closed or (self._catcher is not None and self._catcher.is_alive()):
            return
        self._catcher = threading.Thread(target=self._catch_up, daemon=True, name=f"ovos-memory-{self._fts}-catch-up")
        self._catcher.start()

    def _catch_up(self) -> None:
        run_as_background()
        try:
            with self._lock:
                if self._snapshot is not None and not self._closed:
                    self._sync(self._snapshot)
        except Exception as exc:  # noqa: BLE001 - FTS5 keeps answering; the next search retries
            self._log.warning("catch-up", "keyword index %s: RAM postings not caught up (%s)", self._fts, exc)

    def _add_documents(self, snap: Postings, rows: Sequence[Any]) -> None:
        """Tokenize ``(id, session_id, content)`` rows (in id order) into ``snap``."""
        for start in range(0, len(rows), SLICE):  # in slices: a word list per document costs memory
            chunk = rows[start:start + SLICE]
            for row, counts in zip(chunk, self.tokenizer.counts([r[2] for r in chunk])):
                snap.add(row[0], row[1], counts)
            snap.max_id = chunk[-1][0]  # should a later slice fail, the next sync resumes after this one

    def _apply_deletions(self, snap: Postings, rows: Sequence[Any]) -> bool:
        """Drop the documents of deletion-log rows ``(seq, doc)``, in seq order."""
        if rows[0][0] != snap.deleted_seq + 1:
            self._reload()  # entries this mirror never saw were pruned: start again
            return False
        snap.delete(r[1] for r in rows)
        snap.deleted_seq = rows[-1][0]
        return True

    def _has_context(self) -> bool:
        """True (and the mirror retires) when rows carry neighbour context this mirror is not to add.

        Checked at load. A process running with a different ``retrieval.neighbour_weight`` on the
        same file while this one runs is not detected until the next load: meanwhile this copy
        ranks as its own setting says (document lengths then differ slightly from FTS5's).
        """
        if not self.neighbour_weight:
            with self._db.read() as con, self._index_statements():
                found = con.execute(f"SELECT 1 FROM {self._fts} WHERE ctx IS NOT NULL AND ctx != '' LIMIT 1").fetchone()
            if found:
                self._retire("holds neighbour context (retrieval.neighbour_weight)")
        return self._unusable

    def _retire(self, why: str) -> None:
        self._unusable, self._snapshot = True, None
        self._log.warning("context", "keyword index %s %s; FTS5 ranks, the RAM copy is off", self._fts, why)

    # -- loading -----------------------------------------------------------------------------
    def _reload(self) -> None:
        self._snapshot = None
        self._start_loading()

    def _start_loading(self) -> None:
        if self._closed or self._unusable or (self._loader is not None and self._loader.is_alive()):
            return
        if self._db.read_only:  # a command that only looks: FTS5 answers its few searches (the
            return              # RAM copy's word list is a temporary table, which it may not make)
        if self._db.is_memory:  # no second connection to a database in RAM
            self._load(None)
            return
        self._loader = threading.Thread(target=self._load, args=(self._db.path,), daemon=True,
                                        name=f"ovos-memory-{self._fts}-postings")
        self._loader.start()

    def _load(self, path: str | None) -> None:
        began = time.monotonic()
        try:
            snap = self._read_snapshot(path)
            self._log.clear("load", f"keyword index {self._fts}: RAM postings loaded")
            if snap is None or self._has_context():
                return
        except _ContextDiffers as exc:
            self._retire(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - FTS5 keeps answering; a later search retries
            if isinstance(exc, IndexDamaged) and self._on_damage is not None:
                self._on_damage(exc, began)  # its owner rebuilds it and says so; a later search loads again
                return
            self._log.warning("load", "keyword index %s: RAM postings not loaded (%s); FTS5 answers", self._fts, exc)
            return
        with self._lock:
            if not self._closed:
                self._snapshot = snap

    def _read_snapshot(self, path: str | None) -> Postings | None:
        generation = self._db.generation
        snap = self._read_file(path)
        if snap is not None:
            snap.generation = generation
        return snap

    def _read_file(self, path: str | None) -> Postings | None:
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

    def _read_from(self, con: Any) -> Postings | None:
        snap = Postings(self.neighbour_weight)
        snap.max_id, snap.deleted_seq = con.execute(
            f"SELECT (SELECT COALESCE(MAX(id), 0) FROM {self._docs}), "
            f"(SELECT COALESCE(MAX(seq), 0) FROM {self._deleted})").fetchone()
        docs = con.execute(f"SELECT id, session_id, indexed FROM {self._docs} ORDER BY id").fetchall()
        pos_of: dict[int, int] = {}
        pending_pos: dict[int, int] = {}  # documents not in FTS5 yet
        for rowid, session_id, indexed in docs:
            (pos_of if indexed else pending_pos)[rowid] = snap.append_document(rowid, session_id)
        lengths = [0] * len(docs)
        vocab = f"{self._fts}_mirror_vocab"
        term, entry = None, None
        with self._index_statements():
            con.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab(main, {self._fts}, instance)")
            # The exchanges' own words only: neighbour context is linked, not copied (postings.py).
            for raw, doc, tf in con.execute(f"SELECT CAST(term AS BLOB), doc, count(*) FROM temp.{vocab} "
                                            "WHERE col = 'content' GROUP BY term, doc"):
                at = pos_of.get(doc)
                if at is None:
                    continue
                t = vocab_text(raw)
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
        snap.finish_load(lengths)
        if snap.weight:
            with self._index_statements():
                self._check_context(con, snap, pos_of)
        recent = con.execute(f"SELECT content FROM {self._docs} ORDER BY id DESC LIMIT ?", (WARM_DOCUMENTS,))
        self.tokenizer.warm([r[0] for r in recent])
        return snap

    def _index_statements(self) -> Any:
        """Around reads of the FTS5 table alone: its damage is IndexDamaged (the owner rebuilds it)."""
        return index_statements(f"keyword index {self._fts} in {self._db.path}")

    def _check_context(self, con: Any, snap: Postings, indexed: dict[int, int]) -> None:
        """Raise :class:`_ContextDiffers` unless FTS5's context column holds, for every indexed
        exchange whose neighbours are indexed too, as many tokens as its linked neighbours.

        Exchanges indexed while the option was off have an empty column, so the check finds
        them; an exchange whose neighbour waits for the indexer is skipped (indexing the
        neighbour rewrites its column).
        """
        for rowid, sizes in con.execute(f"SELECT id, sz FROM {self._fts}_docsize"):
            at = indexed.get(rowid)
            if at is None:
                continue
            links = [n for n in (snap.prev[at], snap.next[at]) if n >= 0]
            if any(int(snap.rowids[n]) not in indexed for n in links):
                continue
            if _varints(sizes)[-1] != sum(snap.lengths[n] for n in links):
                raise _ContextDiffers(f"holds exchanges indexed without their neighbours' words (row {rowid}); "
                                      "it was built with retrieval.neighbour_weight off")


class _ContextDiffers(Exception):
    """The keyword index's context column differs from what the neighbour links make of it."""


def _varints(blob: bytes) -> list[int]:
    """The column sizes FTS5 keeps per row in ``<table>_docsize``: SQLite varints, one per column
    (7 bits a byte, high bit set on all but the last; sizes never reach the 9-byte form)."""
    out, value, i = [], 0, 0
    while i < len(blob):
        byte = blob[i]
        i += 1
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            out.append(value)
            value = 0
    return out
