"""The document log every retrieval backend keeps beside its index.

Each stored exchange is a row here first (same transaction as the verbatim window); the
backend's index (FTS5, vectors) is derived from it. That gives ids that never repeat
(``AUTOINCREMENT``), a durable queue for indexing in the background (rows with
``indexed = 0``, leased by one indexer at a time when several processes share the file),
expiry, ``forget`` and ``export`` for every backend alike.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._core.clock import said_now
from .._core.compat import AgentMessage, MessageRole
from .._core.owners import is_dead_here
from ..messages import clean_text, is_role
from .sqlite import Database

__all__ = [
    "Document", "DocumentLog", "exchange_positions", "exchange_texts", "format_exchange", "past_exchanges",
    "PastExchange", "within_chars",
]

_DOC_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS {t} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so index rows never point at a new doc
        doc_id TEXT NOT NULL UNIQUE,           -- "<session_id>_<n>", n counting from 0 per session
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL,                -- JSON
        indexed INTEGER NOT NULL DEFAULT 0     -- 0: waiting for the backend's index
    );
    CREATE INDEX IF NOT EXISTS {t}_by_session ON {t} (session_id, id);
    CREATE INDEX IF NOT EXISTS {t}_pending ON {t} (indexed, id);
    -- The next n per session. Never decremented: ids do not repeat after deletes or restarts.
    CREATE TABLE IF NOT EXISTS {t}_seq (session_id TEXT PRIMARY KEY, next INTEGER NOT NULL);
    """,
    """
    -- forget() removes a session's counter too (no trace of the id may remain), so a session id
    -- used again starts above every n ever given to a forgotten session: ids still never repeat.
    CREATE TABLE IF NOT EXISTS {t}_floor (id INTEGER PRIMARY KEY CHECK (id = 1), next INTEGER NOT NULL);
    """,
    """
    -- Only pending documents in the index: a document indexed in its own transaction (every
    -- keyword update) no longer writes an index entry that is true of nearly every row.
    DROP INDEX IF EXISTS {t}_pending;
    CREATE INDEX IF NOT EXISTS {t}_pending_only ON {t} (id) WHERE indexed = 0;
    """,
    """
    -- Which indexer holds a pending document, until when: processes sharing the file never index
    -- the same documents side by side, and a dead holder's lease simply runs out.
    CREATE TABLE IF NOT EXISTS {t}_leases (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, until REAL NOT NULL);
    """,
)


@dataclasses.dataclass(frozen=True)
class Document:
    """One stored item: ``doc_id`` is ``"<session_id>_<n>"``, unique for the life of the store."""

    doc_id: str
    text: str
    session_id: str
    metadata: dict[str, Any]
    ts: float
    rowid: int


def format_exchange(question: str | None, answer: str | None) -> str:
    """``"Q: <question>\\nA: <answer>"``, or ``"Q: <question>"`` for a question never answered."""
    if answer is None:
        return f"Q: {question or ''}".strip()
    return f"Q: {question or ''}\nA: {answer}".strip()


def exchange_positions(messages: Sequence[AgentMessage], content: str) -> set[int]:
    """Where a window holds the exchange stored as ``content`` (each time it does): a USER and the
    ASSISTANT answering it, a USER left unanswered, or an answer whose question was trimmed away.

        >>> from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
        >>> U, A = MessageRole.USER, MessageRole.ASSISTANT
        >>> window = [AgentMessage(U, "hi"), AgentMessage(A, "hello"), AgentMessage(U, "my dog is Rex"),
        ...           AgentMessage(A, "Nice!")]
        >>> sorted(exchange_positions(window, "Q: my dog is Rex\\nA: Nice!"))
        [2, 3]
    """
    doomed: set[int] = set()
    for i, msg in enumerate(messages):
        answer = messages[i + 1] if i + 1 < len(messages) and is_role(messages[i + 1], "assistant") else None
        if is_role(msg, "user"):
            if format_exchange(msg.content, answer.content if answer is not None else None) == content:
                doomed |= {i, i + 1} if answer is not None else {i}
        elif is_role(msg, "assistant") and (i == 0 or not is_role(messages[i - 1], "user")) \
                and content.endswith(f"\nA: {msg.content}".rstrip()) and msg.content.strip():
            doomed.add(i)
    return doomed


def exchange_texts(question: str | AgentMessage | None,
                   messages: Sequence[AgentMessage]) -> list[tuple[str | None, str | None]]:
    """The ``(question, answer)`` pairs to store for ``messages``, appended after ``question``,
    still unanswered (None: none before them; a message, as earlier versions took: the window's
    last one, a question if a USER's).

    Each non-empty ASSISTANT pairs with the latest USER question (a second reply to one
    question in the same update pairs with it too, as in the reference; the answer after a
    tool's result pairs with the question before the tool call). A USER followed by another USER
    is still stored, as a question alone: what the user said matters even when the answer was
    cut off (a stopped stream); not when the next one asks it again. A question still waiting
    for its answer is not stored yet.

        >>> from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
        >>> U, A = MessageRole.USER, MessageRole.ASSISTANT
        >>> exchange_texts(None, [AgentMessage(U, "q1"), AgentMessage(U, "q2"), AgentMessage(A, "a"),
        ...                       AgentMessage(A, "b"), AgentMessage(U, "q3")])
        [('q1', None), ('q2', 'a'), ('q2', 'b')]
        >>> exchange_texts("q2", [AgentMessage(A, "c"), AgentMessage(U, "q3")])
        [('q2', 'c')]
        >>> exchange_texts(AgentMessage(U, "q0"), [AgentMessage(A, "a0")])
        [('q0', 'a0')]
    """
    if question is not None and not isinstance(question, str):
        question = question.content if is_role(question, "user") else None
    answered = False
    out: list[tuple[str | None, str | None]] = []
    for msg in messages:
        if is_role(msg, "user"):
            # Asked again unanswered ("what is my pin", "what is my pin"): stored once, with the answer.
            if question is not None and question.strip() and not answered and question.strip() != msg.content.strip():
                out.append((question, None))
            question, answered = msg.content, False
        elif is_role(msg, "assistant") and msg.content.strip():
            out.append((question, msg.content))
            answered = True
    return out


@dataclasses.dataclass(frozen=True)
class PastExchange:
    """An exchange that happened at ``ts`` (POSIX seconds; None: now), as :func:`past_exchanges` reads it."""

    question: str | None
    answer: str | None
    ts: float | None

    def messages(self) -> list[AgentMessage]:
        return ([AgentMessage(MessageRole.USER, self.question)] if self.question is not None else []) + \
            ([AgentMessage(MessageRole.ASSISTANT, self.answer)] if self.answer is not None else [])

    def as_dict(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer, "ts": self.ts}


#: A time further ahead than this is a mistake (milliseconds given for seconds, say).
_FUTURE_SLACK_S = 86400.0


def past_exchanges(items: Any) -> list[PastExchange]:
    """Check ``[{"question": ..., "answer": ..., "ts": ...}, ...]``: a question, an answer or both
    (strings), and ``ts`` the POSIX time in seconds it happened (absent or null: now).

    Other keys are ignored. A problem is a ``TypeError``/``ValueError`` naming the item.
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (list, tuple)):
        raise TypeError(f"exchanges must be a list of {{'question', 'answer', 'ts'}} dicts, not {type(items).__name__}")
    latest = time.time() + _FUTURE_SLACK_S
    out = []
    for i, item in enumerate(items, 1):  # counted as people count: the first is exchange 1
        if not isinstance(item, Mapping):
            raise TypeError(f"exchange {i} must be a dict, not {type(item).__name__}")
        texts = []
        for key in ("question", "answer"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"exchange {i}: {key!r} must be a str or null, not {type(value).__name__}")
            texts.append(clean_text(value) if value is not None and value.strip() else None)
        if texts == [None, None]:
            raise ValueError(f"exchange {i} has neither a question nor an answer")
        ts = item.get("ts")
        wrong = None if ts is None else _wrong_time(ts, latest)
        if wrong:
            raise ValueError(f"exchange {i}: 'ts' must be the time it happened in seconds since 1970 (UTC); "
                             f"got {ts!r}, {wrong}")
        out.append(PastExchange(texts[0], texts[1], float(ts) if ts is not None else None))
    return out


def metadata_text(metadata: Mapping[str, Any]) -> str:
    """A document's metadata as stored: JSON only (no NaN or Infinity, which PostgreSQL and the
    vector index refuse later, where the caller cannot be told)."""
    try:
        return json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"metadata must be JSON data (text, finite numbers, true/false, null, lists, dicts): "
                        f"{exc}") from exc


class DocumentLog:
    """The ``<prefix>_docs`` table of a backend's database."""

    #: The schema scripts (the PostgreSQL log has its own).
    migrations: tuple[str, ...] = _DOC_MIGRATIONS

    def __init__(self, db: Database, table: str):
        self.db = db
        self.table = table
        db.migrate(f"docs:{table}", [m.format(t=table) for m in self.migrations])

    def add(self, con: Any, session_id: str, text: str, metadata: dict[str, Any], indexed: bool,
            ts: float | None = None) -> Document:
        """Append a document, stored at ``ts`` (POSIX seconds, as an import keeps it; None: now)."""
        now = said_now() if ts is None else float(ts)
        meta = {**metadata, "content": text, "session_id": session_id, "ts": now}
        n = con.execute(
            f"INSERT INTO {self.table}_seq (session_id, next) "
            f"VALUES (?, COALESCE((SELECT next FROM {self.table}_floor WHERE id = 1), 0) + 1) "
            "ON CONFLICT(session_id) DO UPDATE SET next = next + 1 RETURNING next",
            (session_id,),
        ).fetchone()[0] - 1
        doc_id = f"{session_id}_{n}"
        cur = con.execute(
            f"INSERT INTO {self.table} (doc_id, session_id, ts, content, metadata, indexed) VALUES (?, ?, ?, ?, ?, ?)",
            (doc_id, session_id, now, text, metadata_text(meta), int(indexed)),
        )
        return Document(doc_id, text, session_id, meta, now, int(cur.lastrowid))

    def holds(self, con: Any, session_id: str, text: str, ts: float | None) -> bool:
        """Whether the session has a document of this text (stored at ``ts``, when given)."""
        sql = f"SELECT 1 FROM {self.table} WHERE session_id = ? AND content = ?"
        params: list[Any] = [session_id, text]
        if ts is not None:
            sql, params = sql + " AND ts = ?", [*params, float(ts)]
        return con.execute(sql + " LIMIT 1", params).fetchone() is not None

    def pending(self, limit: int, con: Any = None) -> list[Document]:
        sql = f"SELECT {COLUMNS} FROM {self.table} WHERE indexed = 0 ORDER BY id LIMIT ?"
        rows = con.execute(sql, (limit,)).fetchall() if con is not None else self.db.execute(sql, (limit,))
        return [document_of_row(r) for r in rows]

    def lease(self, limit: int, owner: str, seconds: float, max_chars: int | None = None) -> list[Document]:
        """The oldest pending documents no other indexer holds, now held by ``owner`` for ``seconds``.

        At most ``limit`` documents and, beyond the first, ``max_chars`` characters of text. An
        owner's own leases are taken again (a batch whose write failed is retried).
        """
        now = time.time()
        with self.db.atomic() as con:
            self._drop_dead_leases(con, now)
            rows = con.execute(
                f"SELECT {COLUMNS} FROM {self.table} AS d WHERE indexed = 0 AND NOT EXISTS "
                f"(SELECT 1 FROM {self.table}_leases AS l WHERE l.id = d.id AND l.until > ? AND l.owner != ?) "
                "ORDER BY id LIMIT ?", (now, owner, limit)).fetchall()
            docs = within_chars([document_of_row(r) for r in rows], max_chars)
            con.executemany(f"INSERT OR REPLACE INTO {self.table}_leases (id, owner, until) VALUES (?, ?, ?)",
                            [(d.rowid, owner, now + seconds) for d in docs])
        return docs

    def lock_leased(self, con: Any, rowids: Sequence[int], owner: str) -> set[int]:
        """The documents of ``rowids`` still present, pending and leased to ``owner``. Called in a
        write transaction (``con``), which holds the file's write lock: none of them can be
        deleted, or leased to another, before it commits."""
        if not rowids:
            return set()
        marks = ",".join("?" * len(rowids))
        rows = con.execute(f"SELECT d.id FROM {self.table} AS d JOIN {self.table}_leases AS l ON l.id = d.id "
                           f"WHERE d.id IN ({marks}) AND d.indexed = 0 AND l.owner = ?", (*rowids, owner)).fetchall()
        return {int(r[0]) for r in rows}

    def release(self, rowids: Sequence[int], owner: str) -> None:
        """Give up ``owner``'s leases of ``rowids`` (documents it could not index: others may try)."""
        if rowids:
            with self.db.atomic() as con:
                con.executemany(f"DELETE FROM {self.table}_leases WHERE id = ? AND owner = ?",
                                [(r, owner) for r in rowids])

    def leased_elsewhere(self, owner: str) -> bool:
        """Whether another indexer, alive, holds a live lease on a pending document."""
        holders = {str(r[0]) for r in self.db.execute(
            f"SELECT DISTINCT l.owner FROM {self.table}_leases AS l JOIN {self.table} AS d ON d.id = l.id "
            "WHERE d.indexed = 0 AND l.until > ? AND l.owner != ?", (time.time(), owner))}
        dead = {h for h in holders if is_dead_here(h)}
        if dead:
            with self.db.atomic() as con:
                self._forget_owners(con, dead)
        return bool(holders - dead)

    def _drop_dead_leases(self, con: Any, now: float) -> None:
        """Forget the live leases of processes of this host that are gone (killed while indexing):
        their documents need not wait for the leases to run out."""
        owners = [str(r[0]) for r in con.execute(
            f"SELECT DISTINCT owner FROM {self.table}_leases WHERE until > ?", (now,)).fetchall()]
        self._forget_owners(con, {o for o in owners if is_dead_here(o)})

    def _forget_owners(self, con: Any, owners: set[str]) -> None:
        con.executemany(f"DELETE FROM {self.table}_leases WHERE owner = ?", [(o,) for o in sorted(owners)])

    def pending_ids(self, limit: int, session_id: str | None = None) -> list[tuple[int, str]]:
        """``(row id, session id)`` of the newest ``limit`` pending documents (of one session when
        given); reads no text."""
        where = f"AND {self._session_filter} = ?" if session_id is not None else ""
        params: list[Any] = [*([session_id] if session_id is not None else []), limit]
        return [(int(r[0]), r[1]) for r in self.db.execute(
            f"SELECT id, session_id FROM {self.table} WHERE indexed = 0 {where} ORDER BY id DESC LIMIT ?", params)]

    #: How pending_ids names the session column. SQLite's planner, without statistics, walks the
    #: session index through every document of the session (40 ms at 100,000 on every turn of
    #: local-rag) instead of the few pending ones; a unary ``+`` keeps it off that index.
    _session_filter = "+session_id"

    def texts(self, rowids: Sequence[int], head: int | None = None) -> dict[int, str]:
        """``{row id: text}`` of the documents that still exist (their first ``head`` characters)."""
        if not rowids:
            return {}
        column = f"substr(content, 1, {int(head)})" if head else "content"
        rows = self.db.execute(f"SELECT id, {column} FROM {self.table} WHERE id IN ({','.join('?' * len(rowids))})",
                               list(rowids))
        return {int(r[0]): r[1] for r in rows}

    def rekey(self, doc: Document, taken: Callable[[str], bool]) -> str | None:
        """Give ``doc`` the session's next id that ``taken`` says is free elsewhere (a vector
        store another memory shares holds the old one); returns it, or None when the document is
        no longer waiting for its index (forgotten, or indexed by another process meanwhile). The
        counter moves past every id tried, so none is ever given twice."""
        def move(con: Any) -> str | None:
            while True:
                row = con.execute(f"UPDATE {self.table}_seq SET next = next + 1 WHERE session_id = ? RETURNING next",
                                  (doc.session_id,)).fetchone()
                if row is None:  # the session was forgotten meanwhile
                    return None
                doc_id = f"{doc.session_id}_{row[0] - 1}"
                if taken(doc_id) or con.execute(f"SELECT 1 FROM {self.table} WHERE doc_id = ?", (doc_id,)).fetchone():
                    continue
                moved = con.execute(f"UPDATE {self.table} SET doc_id = ? WHERE id = ? AND indexed = 0 RETURNING id",
                                    (doc_id, doc.rowid)).fetchone()
                return doc_id if moved else None

        return self.db.transaction(move)

    def current_ids(self, con: Any, docs: Sequence[Document]) -> list[Document]:
        """``docs`` with the ids the log gives them now, read in ``con`` (:meth:`rekey` may have
        moved one while it was embedded); those gone are left out."""
        if not docs:
            return []
        marks = ",".join("?" * len(docs))
        ids = dict(con.execute(f"SELECT id, doc_id FROM {self.table} WHERE id IN ({marks})",
                               [d.rowid for d in docs]).fetchall())
        return [dataclasses.replace(d, doc_id=ids[d.rowid]) for d in docs if d.rowid in ids]

    def read_rowids(self, rowids: Sequence[int]) -> list[Document]:
        """The documents with these row ids that still exist, in id order (a read of its own)."""
        if not rowids:
            return []
        rows = self.db.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE id IN ({','.join('?' * len(rowids))}) "
                               "ORDER BY id", list(rowids))
        return [document_of_row(r) for r in rows]

    def indexed_after(self, rowid: int, limit: int) -> list[Document]:
        """Up to ``limit`` indexed documents with a row id above ``rowid``, in id order."""
        rows = self.db.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE indexed = 1 AND id > ? ORDER BY id LIMIT ?",
                               (rowid, limit))
        return [document_of_row(r) for r in rows]

    def mark_indexed(self, con: Any, rowids: Sequence[int], indexed: bool = True) -> None:
        con.executemany(f"UPDATE {self.table} SET indexed = ? WHERE id = ?", [(int(indexed), r) for r in rowids])
        con.executemany(f"DELETE FROM {self.table}_leases WHERE id = ?", [(r,) for r in rowids])

    def holds_only(self, session_id: str) -> bool:
        """True when every document belongs to ``session_id`` (then a session filter is a no-op).

        Each session that ever stored a document has a counter row, so one row naming this
        session proves it; expired or forgotten sessions can only make the answer a safe False.
        """
        rows = self.db.execute(f"SELECT session_id FROM {self.table}_seq LIMIT 2")
        return len(rows) == 1 and rows[0][0] == session_id

    def has_pending(self) -> bool:
        return bool(self.db.execute(f"SELECT 1 FROM {self.table} WHERE indexed = 0 LIMIT 1"))

    def count_pending(self, limit: int | None = None) -> int:
        """Documents waiting for the index; with ``limit``, counting stops there (cheap on a backlog)."""
        if limit is None:
            return int(self.db.execute(f"SELECT COUNT(*) FROM {self.table} WHERE indexed = 0")[0][0])
        return int(self.db.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {self.table} WHERE indexed = 0 LIMIT ?)", (limit,))[0][0])

    def by_rowids(self, con: Any, rowids: Sequence[int]) -> list[Document]:
        """The documents with these row ids that still exist, in id order."""
        if not rowids:
            return []
        rows = con.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE id IN ({','.join('?' * len(rowids))}) "
                           "ORDER BY id", list(rowids)).fetchall()
        return [document_of_row(r) for r in rows]

    def resolve(self, wanted: Sequence[tuple[str, str]],
                session_id: str | None = None) -> list[tuple[int, str] | None]:
        """``(row id, doc_id)`` of each ``(doc_id, text)``: the document with that id when its text
        is that text, else one with that text (of ``session_id`` when given); None when none is.

        Another memory's document id names the same exchange here only when both stored the
        same sequence, so the text decides; the id makes the common case one indexed lookup.
        """
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        by_id = {doc_id: (rowid, content) for rowid, doc_id, content in self.db.execute(
            f"SELECT id, doc_id, content FROM {self.table} WHERE doc_id IN ({marks})", [d for d, _ in wanted])}
        found: list[tuple[int, str] | None] = [
            (by_id[d][0], d) if d in by_id and by_id[d][1] == text else None for d, text in wanted]
        missing = sorted({text for (_, text), row in zip(wanted, found) if row is None})
        if missing:
            where = "AND session_id = ?" if session_id is not None else ""
            by_text = {content: (rowid, doc_id) for rowid, doc_id, content in self.db.execute(
                f"SELECT id, doc_id, content FROM {self.table} WHERE content IN ({','.join('?' * len(missing))}) "
                f"{where} ORDER BY id", [*missing, *([session_id] if session_id is not None else [])])}
            found = [row if row is not None else by_text.get(text) for (_, text), row in zip(wanted, found)]
        return found

    def sessions_holding(self, wanted: Sequence[tuple[str, str]]) -> list[set[str]]:
        """The sessions that stored each ``(doc_id, text)``: the document with that id and text,
        else every document with that text; an empty set for what is not a stored document."""
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        by_id = {doc_id: (sid, content) for doc_id, sid, content in self.db.execute(
            f"SELECT doc_id, session_id, content FROM {self.table} WHERE doc_id IN ({marks})", [d for d, _ in wanted])}
        found: list[set[str]] = [{by_id[d][0]} if d in by_id and by_id[d][1] == text else set() for d, text in wanted]
        missing = sorted({text for (_, text), sids in zip(wanted, found) if not sids})
        if missing:
            by_text: dict[str, set[str]] = {}
            for sid, content in self.db.execute(f"SELECT session_id, content FROM {self.table} WHERE content IN "
                                                f"({','.join('?' * len(missing))})", missing):
                by_text.setdefault(content, set()).add(sid)
            found = [sids or set(by_text.get(text, ())) for (_, text), sids in zip(wanted, found)]
        return found

    def continued_question(self, con: Any, session_id: str, now: float, within: float) -> str | None:
        """The question of the session's last document when it is an exchange with a question,
        stored at most ``within`` seconds before ``now`` (and not after it: a clock set back, or
        another host's, continues nothing); None otherwise."""
        row = con.execute(f"SELECT ts, metadata FROM {self.table} WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                          (session_id,)).fetchone()
        if row is None or not 0.0 <= now - float(row[0]) <= within:
            return None
        question = json.loads(row[1]).get("question")
        return question if isinstance(question, str) and question else None

    def for_session(self, session_id: str) -> list[Document]:
        rows = self.db.execute(
            f"SELECT {COLUMNS} FROM {self.table} WHERE session_id = ? ORDER BY id",
            (session_id,))
        return [document_of_row(r) for r in rows]

    def delete_session(self, con: Any, session_id: str) -> list[Document]:
        """Delete the session's documents and its id counter, raising the floor new counters start from."""
        rows = con.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE session_id = ?", (session_id,)).fetchall()
        con.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,))
        self._drop_leases(con, rows)
        seq = con.execute(f"SELECT next FROM {self.table}_seq WHERE session_id = ?", (session_id,)).fetchone()
        if seq:
            con.execute(f"INSERT INTO {self.table}_floor (id, next) VALUES (1, ?) "
                        "ON CONFLICT(id) DO UPDATE SET next = MAX(next, excluded.next)", (seq[0],))
            con.execute(f"DELETE FROM {self.table}_seq WHERE session_id = ?", (session_id,))
        return [document_of_row(r) for r in rows]

    def delete_older_than(self, con: Any, cutoff: float) -> list[Document]:
        rows = con.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE ts < ?", (cutoff,)).fetchall()
        con.execute(f"DELETE FROM {self.table} WHERE ts < ?", (cutoff,))
        self._drop_leases(con, rows)
        return [document_of_row(r) for r in rows]

    def with_content(self, session_id: str, content: str) -> list[Document]:
        """The session's documents whose text is ``content``, in id order."""
        rows = self.db.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE session_id = ? AND content = ? ORDER BY id",
                               (session_id, content))
        return [document_of_row(r) for r in rows]

    def delete_content(self, con: Any, session_id: str, content: str) -> list[Document]:
        """Delete the session's documents whose text is ``content`` (its id counter stays: ids never repeat)."""
        rows = con.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE session_id = ? AND content = ?",
                           (session_id, content)).fetchall()
        con.executemany(f"DELETE FROM {self.table} WHERE id = ?", [(r[0],) for r in rows])
        self._drop_leases(con, rows)
        return [document_of_row(r) for r in rows]

    def by_doc_id(self, session_id: str, doc_id: str) -> Document | None:
        """The session's document ``doc_id``, or None."""
        rows = self.db.execute(f"SELECT {COLUMNS} FROM {self.table} WHERE doc_id = ? AND session_id = ?",
                               (doc_id, session_id))
        return document_of_row(rows[0]) if rows else None

    def _drop_leases(self, con: Any, rows: Sequence[Any]) -> None:
        con.executemany(f"DELETE FROM {self.table}_leases WHERE id = ?", [(r[0],) for r in rows])

    def sessions(self) -> list[str]:
        return [r[0] for r in self.db.execute(f"SELECT DISTINCT session_id FROM {self.table}")]

    def count(self) -> int:
        return int(self.db.execute(f"SELECT COUNT(*) FROM {self.table}")[0][0])


#: The columns a :class:`Document` is read from, in :func:`document_of_row`'s order (PostgreSQL's log shares them).
COLUMNS = "id, doc_id, session_id, ts, content, metadata"


def within_chars(docs: list[Document], max_chars: int | None) -> list[Document]:
    """The head of ``docs`` within ``max_chars`` characters of text (always the first one)."""
    if max_chars is None:
        return docs
    used = 0
    for i, doc in enumerate(docs):
        used += len(doc.text)
        if used > max_chars and i:
            return docs[:i]
    return docs


def document_of_row(row: Any) -> Document:
    """A :class:`Document` from a row of :data:`COLUMNS`."""
    rowid, doc_id, session_id, ts, content, metadata = row
    return Document(doc_id, content, session_id, json.loads(metadata), ts, rowid)


def _wrong_time(ts: Any, latest: float) -> str | None:
    """What is wrong with ``ts`` as the time of a past exchange, or None."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return f"a {type(ts).__name__}, not a number"
    if not math.isfinite(ts):
        return "not a finite number"
    if ts < 0:
        return "before 1970"
    return "in the future" if ts > latest else None
