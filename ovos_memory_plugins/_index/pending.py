"""Recall of documents the background index has not reached yet, by their words, without waiting.

A turn never waits for the indexer: embedding a long reply takes seconds. Yet the exchange
stored just before a turn must be recallable on it, also when it has left the verbatim window
(a burst of exchanges, ``max_history`` small or 0, a composite whose window is another
member's). So the newest pending documents are matched by their words: a document is recalled
when it holds at least half of the query's content words (stop words dropped, diacritics
folded, as keyword search does), ranked by that share, newest first on ties.

The documents' word sets are computed by the indexer thread before its slow work
(:meth:`PendingRecall.prepare`), so a turn only intersects sets; a turn computes the missing
ones itself (a burst stored a moment ago), newest first, from their first ``INLINE_CHARS``
characters and up to ``INLINE_BUDGET`` characters in all. Once indexed, a document is found by
the index as usual.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

from ..common import MemoryHit
from ..storage.documents import DocumentLog
from .stopwords import term_set

__all__ = ["PendingRecall", "merge_pending"]

#: The newest pending documents considered (per session when the search is scoped).
SCAN = 64
#: Share of the query's content words a pending document must hold.
MIN_COVERAGE = 0.5
#: Word sets a turn may compute itself: from the head of each document (a 4,800-word reply has
#: about 27,000 characters: ~10 ms; its head ~1 ms), newest first, for at most INLINE_BUDGET
#: characters in all: a burst of short exchanges is covered whole, of long replies the newest 4.
#: The indexer completes them later.
INLINE_CHARS = 4000
INLINE_BUDGET = 4 * INLINE_CHARS


class PendingRecall:
    """Word sets of the newest pending documents of one document log, and the turn's match."""

    def __init__(self, docs: DocumentLog):
        self._docs = docs
        self._terms: dict[int, frozenset[str]] = {}
        self._partial: set[int] = set()  # sets made from a document's head only
        self._lock = threading.Lock()  # held only to record sets made (readers take none)
        self._asked = False  # a backend whose index covers pending documents itself never asks

    def prepare(self) -> None:
        """Compute the word sets of the newest pending documents (the indexer calls this), once
        turns have asked for them."""
        if not self._asked:
            return
        wanted = [rowid for rowid, _ in self._docs.pending_ids(SCAN)
                  if rowid not in self._terms or rowid in self._partial]
        self._fill(wanted, None)

    def hits(self, words: Sequence[str], top_k: int, session_id: str | None) -> list[MemoryHit]:
        """Pending documents holding at least half of ``words`` (a query's content words), best first."""
        if not words or top_k <= 0:
            return []
        self._asked = True
        pending = self._docs.pending_ids(SCAN, session_id)
        if not pending:
            return []
        self._fill([r for r, _ in pending if r not in self._terms], INLINE_CHARS, INLINE_BUDGET)
        query = set(words)
        scored = []
        for rowid, _ in pending:  # newest first: a tie goes to the latest
            terms = self._terms.get(rowid)
            if terms is not None:
                coverage = len(query & terms) / len(query)
                if coverage >= MIN_COVERAGE:
                    scored.append((coverage, rowid))
        best = sorted(scored, key=lambda item: -item[0])[:top_k]
        found = {d.rowid: d for d in self._docs.read_rowids([rowid for _, rowid in best])}
        return [MemoryHit(found[r].text, found[r].doc_id, coverage, {**found[r].metadata, "pending": True})
                for coverage, r in best if r in found]

    def _fill(self, rowids: list[int], head: int | None, budget: int | None = None) -> None:
        """Word sets of ``rowids`` (of their first ``head`` characters), in order, until
        ``budget`` characters are spent (the first document always)."""
        if not rowids:
            return
        texts = self._docs.texts(rowids, head)
        chosen: dict[int, str] = {}
        spent = 0
        for rowid in rowids:
            text = texts.get(rowid)
            if text is None:
                continue
            if budget is not None and chosen and spent + len(text) > budget:
                break
            chosen[rowid] = text
            spent += len(text)
        # Computed before taking the lock: a turn never waits for the indexer's sets.
        made = {rowid: (term_set(text), head is not None and len(text) >= head) for rowid, text in chosen.items()}
        with self._lock:
            for rowid, (terms, partial) in made.items():
                if partial and rowid in self._terms and rowid not in self._partial:
                    continue  # the indexer made the whole set meanwhile
                self._terms[rowid] = terms
                if partial:
                    self._partial.add(rowid)
                else:
                    self._partial.discard(rowid)
            if len(self._terms) > 4 * SCAN:  # indexed documents are never asked again: drop the oldest
                for rowid in sorted(self._terms)[:len(self._terms) - 2 * SCAN]:
                    self._terms.pop(rowid, None)
                    self._partial.discard(rowid)


def merge_pending(indexed: list[MemoryHit], pending: list[MemoryHit], top_k: int) -> list[MemoryHit]:
    """The index's hits and the pending documents' taken in turn (the best of each first), no
    document twice."""
    out: list[MemoryHit] = []
    seen: set[str] = set()
    for i in range(max(len(indexed), len(pending))):
        for hits in (indexed, pending):
            if i < len(hits) and hits[i].source not in seen:
                seen.add(hits[i].source)
                out.append(hits[i])
    return out[:top_k]
