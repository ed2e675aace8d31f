"""Keyword postings in RAM and FTS5's ``bm25()`` over them, with or without neighbour context.

The keyword table has two text columns: the exchange (``content``) and, with
``retrieval.neighbour_weight`` on, the text of the exchanges before and after it in its session
(``ctx``, see neighbours.py). ``bm25(t, 1.0, 0.0, w)`` then counts an occurrence in ``ctx`` as
``w``, adds the neighbours' lengths to the document's length and counts the document among
those holding the word. Here only each document's own words are kept: its neighbours are two
links (``prev``/``next`` positions), so the ``ctx`` column is the sum of the linked documents'
postings. A neighbour arriving or deleted changes two links, never a posting, and the numbers
stay FTS5's exactly, because ``ctx`` is the neighbours' texts joined by a newline and a
word-based tokenizer makes of that the neighbours' terms, in order.
"""
from __future__ import annotations

import array
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["B", "K1", "Postings"]

#: FTS5's bm25() constants (fts5_aux.c).
K1, B = 1.2, 0.75


class Postings:
    """Postings and per-document statistics; appended to in id order, never reordered.

    ``weight``: the neighbour context's column weight (0: the documents' own words only).
    """

    def __init__(self, weight: float = 0.0) -> None:
        self.weight = float(weight)
        self.rowids = array.array("q")
        self.lengths = array.array("i")        # tokens of the document's own text
        self.sessions = array.array("i")
        self.alive = bytearray()
        self.prev = array.array("i")           # the session's previous live document, -1: none
        self.next = array.array("i")
        self.newest: dict[int, int] = {}       # session code -> position of its newest live document
        self.postings: dict[str, tuple[array.array[int], array.array[int]]] = {}
        self.session_codes: dict[str, int] = {}
        self.n_alive = 0
        self.total_tokens = 0                  # as FTS5 counts: with neighbours, their words too
        self.max_id = 0
        self.deleted_seq = 0
        self.generation = 0  # the Database's: a file replaced since (damaged, set aside) means reload
        self._version = 0                      # changes with every add and delete
        self._last: tuple[Any, Any] | None = None  # (key, (docs, scores) or None) of the last query

    # -- building ----------------------------------------------------------------------------
    def append_document(self, rowid: int, session_id: str) -> int:
        """Register a document (in id order) without its terms; returns its position."""
        pos = len(self.rowids)
        self.rowids.append(rowid)
        code = self.session_codes.setdefault(session_id, len(self.session_codes))
        self.sessions.append(code)
        before = self.newest.get(code, -1)
        self.prev.append(before)
        self.next.append(-1)
        if before >= 0:
            self.next[before] = pos
        self.newest[code] = pos
        return pos

    def add(self, rowid: int, session_id: str, counts: dict[str, int]) -> None:
        """A new document, newest of its session: the one before it gains it as context."""
        pos = self.append_document(rowid, session_id)
        length = self.add_postings(pos, counts)
        self.lengths.append(length)
        self.alive.append(1)
        self.n_alive += 1
        self.total_tokens += length
        before = self.prev[pos]
        if self.weight and before >= 0:
            self.total_tokens += self.lengths[before] + length
        self._version += 1

    def add_postings(self, pos: int, counts: dict[str, int]) -> int:
        """Record the terms of the document at ``pos``; returns its length in tokens."""
        for term, tf in counts.items():
            entry = self.postings.get(term)
            if entry is None:
                entry = self.postings[term] = (array.array("i"), array.array("i"))
            entry[0].append(pos)
            entry[1].append(tf)
        return sum(counts.values())

    def finish_load(self, lengths: Sequence[int]) -> None:
        """After a load registered every document and its postings: lengths and totals."""
        self.lengths.extend(lengths)
        self.alive.extend(b"\x01" * len(lengths))
        self.n_alive = len(lengths)
        self.total_tokens = sum(self.size(pos) for pos in range(len(lengths)))
        self._version += 1

    def size(self, pos: int) -> int:
        """The document's length as FTS5 has it: its own tokens, plus its neighbours' with context."""
        own = self.lengths[pos]
        if not self.weight:
            return own
        return own + sum(self.lengths[n] for n in (self.prev[pos], self.next[pos]) if n >= 0)

    def delete(self, rowids: Iterable[int]) -> None:
        import numpy as np

        ids = np.frombuffer(self.rowids, dtype=np.int64)
        for rowid in rowids:
            pos = int(np.searchsorted(ids, rowid))
            if pos < len(ids) and ids[pos] == rowid and self.alive[pos]:
                self.alive[pos] = 0
                self.n_alive -= 1
                self.total_tokens -= self.size(pos)
                self._unlink(pos)
        del ids  # release the buffer: an array exporting one cannot grow
        self._version += 1

    def _unlink(self, pos: int) -> None:
        """The neighbours of a deleted document become each other's (as the log's adjacency does)."""
        before, after = self.prev[pos], self.next[pos]
        if self.weight:
            own = self.lengths[pos]
            for neighbour, other in ((before, after), (after, before)):
                if neighbour >= 0:
                    self.total_tokens += (self.lengths[other] if other >= 0 else 0) - own
        if before >= 0:
            self.next[before] = after
        if after >= 0:
            self.prev[after] = before
        code = self.sessions[pos]
        if self.newest.get(code) == pos:
            if before >= 0:
                self.newest[code] = before
            else:
                del self.newest[code]

    # -- ranking -----------------------------------------------------------------------------
    def top(self, terms: Sequence[str], top_k: int, session_id: str | None) -> list[tuple[int, float]]:
        """FTS5's ``bm25()`` for ``"t1" OR "t2" ...`` over these postings, best first (score = -bm25)."""
        import numpy as np

        found = self._scored(terms, session_id)
        if found is None:
            return []
        docs, scores = found
        if len(docs) > top_k:
            best = np.argpartition(-scores, top_k - 1)[:top_k]
            docs, scores = docs[best], scores[best]
        rowids = np.frombuffer(self.rowids, dtype=np.int64)[docs]
        order = np.lexsort((rowids, -scores))
        return list(zip(rowids[order].tolist(), scores[order].tolist()))

    def scores_of(self, terms: Sequence[str], rowids: Sequence[int], session_id: str | None) -> dict[int, float]:
        """The score of each of ``rowids`` for the query (0.0: matches no term); the last query's
        scores are kept, so scoring the candidates of the search just made costs a lookup."""
        import numpy as np

        found = self._scored(terms, session_id)
        if found is None or not rowids:
            return {r: 0.0 for r in rowids}
        docs, scores = found
        ids = np.frombuffer(self.rowids, dtype=np.int64)[docs]  # ascending: docs are in position order
        want = np.asarray(list(rowids), dtype=np.int64)
        at = np.minimum(np.searchsorted(ids, want), len(ids) - 1)
        hit = ids[at] == want
        return {int(r): float(scores[i]) if h else 0.0 for r, i, h in zip(want.tolist(), at.tolist(), hit.tolist())}

    def _scored(self, terms: Sequence[str], session_id: str | None) -> tuple[Any, Any] | None:
        """``(positions, scores)`` of every matching live document (of the session), in position order."""
        code = None
        if session_id is not None:
            code = self.session_codes.get(session_id)
            if code is None:
                return None
        key = (tuple(terms), code, self._version)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        found = self._score(terms, code) if self.n_alive else None
        self._last = (key, found)
        return found

    def _score(self, terms: Sequence[str], code: int | None) -> tuple[Any, Any] | None:
        import numpy as np

        entries = [e for e in map(self.postings.get, terms) if e is not None]
        if not entries:
            return None
        # All phrases at once, in query order: each document's sum then adds up in FTS5's order.
        pos = np.concatenate([np.frombuffer(e[0], dtype=np.int32) for e in entries])
        tf = np.concatenate([np.frombuffer(e[1], dtype=np.int32) for e in entries]).astype(np.float64)
        sizes = np.array([len(e[0]) for e in entries])
        if self.n_alive < len(self.alive):  # deleted documents stay in the postings, masked
            keep = np.frombuffer(self.alive, dtype=np.uint8)[pos]
            sizes = np.add.reduceat(keep.astype(np.int64), np.cumsum(sizes) - sizes)
            keep = keep.astype(bool)
            pos, tf = pos[keep], tf[keep]
            if not len(pos):
                return None
        term = np.repeat(np.arange(len(sizes)), sizes)
        if self.weight:
            term, pos, tf, sizes = self._with_context(term, pos, tf, len(sizes))
        idf = np.log((self.n_alive - sizes + 0.5) / (sizes + 0.5))
        idf[idf <= 0] = 1e-6
        lengths = self._sizes(pos)
        avgdl = self.total_tokens / self.n_alive
        weight = idf[term] * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * lengths / avgdl)))
        if code is not None:
            mine = np.frombuffer(self.sessions, dtype=np.int32)[pos] == code
            if not mine.all():
                pos, weight = pos[mine], weight[mine]
                if not len(pos):
                    return None
        # Sum per document: a stable sort groups each document's terms, still in query order.
        order = np.argsort(pos, kind="stable")
        pos = pos[order]
        starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))
        return pos[starts], np.add.reduceat(weight[order], starts)

    def _with_context(self, term: Any, pos: Any, tf: Any, n_terms: int) -> tuple[Any, Any, Any, Any]:
        """Per (term, document) with the term in its own text or a neighbour's: the weighted
        frequency FTS5 adds up (1 per own occurrence, then ``weight`` per neighbour occurrence)
        and per term the number of such documents; ordered by term, then position."""
        import numpy as np

        prev = np.frombuffer(self.prev, dtype=np.int32)[pos]
        nxt = np.frombuffer(self.next, dtype=np.int32)[pos]
        none = np.zeros(len(pos))
        doc = np.concatenate((pos, prev, nxt))
        keep = doc >= 0
        terms = np.concatenate((term, term, term))[keep]
        own = np.concatenate((tf, none, none))[keep]
        ctx = np.concatenate((none, tf, tf))[keep]
        key = terms.astype(np.int64) * len(self.rowids) + doc[keep]
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        freq = np.add.reduceat(own[order], starts)
        in_ctx = np.add.reduceat(ctx[order], starts)
        for n in range(int(in_ctx.max())):  # one addition per occurrence, as FTS5 sums them
            freq = np.where(in_ctx > n, freq + self.weight, freq)
        key = key[starts]
        term = key // len(self.rowids)
        return term, (key % len(self.rowids)).astype(np.int32), freq, np.bincount(term, minlength=n_terms)

    def _sizes(self, pos: Any) -> Any:
        """FTS5's length of the documents at ``pos`` (see :meth:`size`), vectorised."""
        import numpy as np

        lengths = np.frombuffer(self.lengths, dtype=np.int32)
        out = lengths[pos].astype(np.float64)
        if self.weight:
            for links in (self.prev, self.next):
                n = np.frombuffer(links, dtype=np.int32)[pos]
                out += np.where(n >= 0, lengths[np.maximum(n, 0)], 0)
        return out
