"""Neighbouring exchanges: the one before and the one after, in the same session.

Why: in conversation an answer often leans on the exchange before it ("I chose them because they
help LGBTQ+ folks" answers a question about an adoption agency asked one exchange earlier), so
the words that find it are next door. Backends can index each exchange with its neighbours:
keyword recall as a second FTS5 column, semantic recall by mixing the neighbours' vectors in
(``retrieval.neighbour_weight``). On LoCoMo dev that lifts recall@5 of the hybrid preset from
0.70 to 0.77 (docs/benchmarks.md).

The document log is the truth: neighbours are the adjacent rows of the session by id, so a
deleted (forgotten, expired) exchange stops being anyone's neighbour, and :func:`survivors`
names the documents whose context must then be rebuilt without it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import option
from ..storage.documents import Document, DocumentLog
from ..storage.sqlite import Database

__all__ = ["NeighbourVectors", "adjacent", "context_text", "neighbour_weight_option", "survivors"]


def neighbour_weight_option(doc: str) -> Any:
    """The ``retrieval.neighbour_weight`` key of the backends that index neighbours (0 = off)."""
    return option(0.0, doc, key="retrieval.neighbour_weight", minimum=0)


def adjacent(con: Any, docs_table: str, session_id: str, rowid: int) -> tuple[Any, Any]:
    """The ``(id, doc_id, content)`` rows before and after ``rowid`` in its session (or None)."""
    # One statement (one round trip to a database server), each side an index probe.
    rows = con.execute(
        f"SELECT * FROM (SELECT id, doc_id, content FROM {docs_table} WHERE session_id = ? AND id < ? "
        "ORDER BY id DESC LIMIT 1) AS b UNION ALL "
        f"SELECT * FROM (SELECT id, doc_id, content FROM {docs_table} WHERE session_id = ? AND id > ? "
        "ORDER BY id LIMIT 1) AS a", (session_id, rowid, session_id, rowid)).fetchall()
    before = next((r for r in rows if r[0] < rowid), None)
    after = next((r for r in rows if r[0] > rowid), None)
    return before, after


def context_text(before: Any, after: Any) -> str:
    """The neighbours' texts (rows from :func:`adjacent`), one per line."""
    return "\n".join(row[2] for row in (before, after) if row is not None)


def survivors(con: Any, docs_table: str, deleted: Sequence[Document]) -> list[tuple[int, str]]:
    """``(id, session_id)`` of remaining documents that had a deleted one as a neighbour.

    Call after the rows are gone from the log. A session with nothing left (forget) costs one query.
    """
    by_session: dict[str, list[Document]] = {}
    for doc in deleted:
        by_session.setdefault(doc.session_id, []).append(doc)
    found: dict[int, str] = {}
    for session_id, docs in by_session.items():
        if not con.execute(f"SELECT 1 FROM {docs_table} WHERE session_id = ? LIMIT 1", (session_id,)).fetchone():
            continue
        for doc in docs:
            for row in adjacent(con, docs_table, session_id, doc.rowid):
                if row is not None:
                    found[row[0]] = session_id
    return sorted(found.items())


class NeighbourVectors:
    """Stored vector = own vector + ``weight`` x the mean of the neighbours' (then unit length).

    Each document's own vector is kept (``<table>``, by document row id) so the mixed vector can
    be rebuilt when a neighbour arrives or is deleted, without embedding anything again.
    """

    def __init__(self, db: Database, table: str, docs: DocumentLog, weight: float):
        self._db, self._table, self._docs, self.weight = db, table, docs, weight
        schema = (f"CREATE TABLE IF NOT EXISTS {table} (doc INTEGER PRIMARY KEY, vector BLOB NOT NULL)"
                  if db.engine == "sqlite" else  # PostgreSQL: a forgotten document's vector goes with it
                  f"CREATE TABLE IF NOT EXISTS {table} (doc bigint PRIMARY KEY REFERENCES {docs.table} (id) "
                  "ON DELETE CASCADE, vector bytea NOT NULL)")
        db.migrate(f"neighbour-vectors:{table}", [schema])

    def store(self, docs: Sequence[Document], vectors: Sequence[Any]) -> list[tuple[Document, Any]]:
        """Keep the new documents' vectors; the mixed vectors to write (theirs and their neighbours')."""
        import numpy as np

        with self._db.atomic() as con:
            con.executemany(f"INSERT INTO {self._table} (doc, vector) VALUES (?, ?) "
                            "ON CONFLICT (doc) DO UPDATE SET vector = excluded.vector",
                            [(d.rowid, np.asarray(v, dtype="<f4").tobytes()) for d, v in zip(docs, vectors)])
            changed = {d.rowid: d.session_id for d in docs}
            for doc in docs:
                for row in adjacent(con, self._docs.table, doc.session_id, doc.rowid):
                    if row is not None:
                        changed.setdefault(row[0], doc.session_id)
            return self._mixed(con, changed)

    def after_delete(self, deleted: Sequence[Document]) -> list[tuple[Document, Any]]:
        """Forget the deleted documents' vectors; the survivors' mixed vectors, rebuilt without them."""
        gone = {d.rowid for d in deleted}
        with self._db.atomic() as con:
            con.executemany(f"DELETE FROM {self._table} WHERE doc = ?", [(r,) for r in gone])
            # forget() clears an outside index before the log: the session's other documents are
            # still there then, and are being deleted too, so never rebuilt.
            kept = {r: s for r, s in survivors(con, self._docs.table, deleted) if r not in gone}
            return self._mixed(con, kept)

    def clear(self, con: Any) -> None:
        """Drop every kept vector (the embedder changed: they are another model's)."""
        con.execute(f"DELETE FROM {self._table}")

    def _mixed(self, con: Any, rowids: dict[int, str]) -> list[tuple[Document, Any]]:
        out = []
        for doc in self._docs.by_rowids(con, sorted(rowids)):
            own = self._raw(con, doc.rowid)
            if own is None:
                continue  # not embedded yet: its turn comes when it is
            mixed = own.copy()
            for row in adjacent(con, self._docs.table, doc.session_id, doc.rowid):
                neighbour = self._raw(con, row[0]) if row is not None else None
                if neighbour is not None:  # a missing or not yet embedded neighbour counts as zero
                    mixed += self.weight * neighbour / 2
            out.append((doc, mixed / (float((mixed * mixed).sum()) ** 0.5 or 1.0)))
        return out

    def _raw(self, con: Any, rowid: int) -> Any:
        import numpy as np

        row = con.execute(f"SELECT vector FROM {self._table} WHERE doc = ?", (rowid,)).fetchone()
        return np.frombuffer(row[0], dtype="<f4").astype(np.float64) if row else None
