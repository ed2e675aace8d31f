"""Window stores on durable storage: SQLite rows, or a field of a record store (JSON)."""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._core.clock import said_now
from .._core.compat import AgentMessage, MessageRole
from .._core.log import LogOnce
from ..errors import StorageError
from ..messages import copy_message, fold_into, from_dict, is_role, to_dict
from .policy import WindowPolicy
from .sqlite import Database, StoreDamaged, release_database

__all__ = ["answer_first", "append_entries", "prune_entries", "RecordWindowStore", "safe_table_name",
           "SqliteWindowStore"]

Entry = tuple[float, AgentMessage]
#: Unreadable window messages, said once per store and process.
_skipped_log = LogOnce()
#: Picks messages to delete from a window: given them in order, the positions of those to drop.
Chooser = Callable[[Sequence[AgentMessage]], set[int]]


def safe_table_name(name: str) -> str:
    """``name`` reduced to ``[A-Za-z0-9_]``, prefixed ``t_`` when empty or starting with a digit."""
    clean = re.sub(r"[^A-Za-z0-9_]", "", name or "")
    return clean if clean and not clean[0].isdigit() else f"t_{clean}"


def prune_entries(entries: list[Entry], policy: WindowPolicy, now: float) -> list[Entry]:
    """Drop entries older than ``max_age``, then all but the newest ``max_messages``."""
    cutoff = policy.cutoff(now)
    if cutoff is not None:
        entries = [e for e in entries if e[0] >= cutoff]
    if policy.max_messages and len(entries) > policy.max_messages:
        entries = entries[-policy.max_messages:]
    return entries


def append_entries(entries: list[Entry], messages: list[AgentMessage], policy: WindowPolicy, now: float) -> list[Entry]:
    """The window after normalising and appending ``messages`` (a new list; ``entries`` unchanged)."""
    entries = list(entries)
    if policy.normalise:
        pop_tail, to_add = fold_into(entries[-1][1] if entries else None, messages)
        if pop_tail:
            entries.pop()
    else:
        to_add = list(messages)
    entries.extend((now, msg) for msg in to_add)
    # A held update is appended with the time it was said; what has expired since goes now.
    return prune_entries(entries, policy, max(now, time.time()))


class RecordWindowStore:
    """A window kept as ``record["buffer"] = [{"ts", "role", "content", ...}]`` in a record store.

    This is the reference package's JSON format for recency, so its files load unchanged.
    """

    def __init__(self, records: Any, field: str = "buffer", owns_store: bool = False):
        self._records = records
        self._field = field
        self._owns = owns_store

    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> None:
        now = said_now()

        def change(record: dict[str, Any]) -> dict[str, Any]:
            entries = append_entries(self._entries(record), messages, policy, now)
            record[self._field] = [to_dict(msg, ts) for ts, msg in entries]
            return record

        self._records.update(session_id, change)

    def replace(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> list[AgentMessage]:
        """Make ``messages`` the whole window, in one write (a window left empty: no session).

        Returns the window as stored (normalised and trimmed)."""
        entries = append_entries([], messages, policy, time.time())
        if not entries:
            self._records.delete(session_id)
            return []

        def change(record: dict[str, Any]) -> dict[str, Any]:
            record[self._field] = [to_dict(msg, ts) for ts, msg in entries]
            return record

        self._records.update(session_id, change)
        return [copy_message(msg) for _, msg in entries]

    def load(self, session_id: str, policy: WindowPolicy) -> list[AgentMessage]:
        entries = prune_entries(self._entries(self._records.load(session_id)), policy, time.time())
        return [msg for _, msg in entries]

    def sessions(self) -> list[str]:
        return self._records.sessions()

    def forget(self, session_id: str) -> int:
        count = len(self._records.load(session_id).get(self._field, []))
        self._records.delete(session_id)
        return count

    def drop(self, session_id: str, choose: Chooser) -> int:
        """Delete the messages ``choose`` picks, keeping the others' times; then compact the store
        (a forgotten message leaves no byte behind). Returns how many were deleted."""
        dropped = 0

        def change(record: dict[str, Any]) -> dict[str, Any]:
            nonlocal dropped
            entries = self._entries(record)
            doomed = choose([msg for _, msg in entries])
            dropped = len(doomed)
            record[self._field] = [to_dict(msg, ts) for i, (ts, msg) in enumerate(entries) if i not in doomed]
            return record

        if self._records.load(session_id).get(self._field):
            self._records.update(session_id, change)
            if dropped:
                self._records.compact()
        return dropped

    def close(self) -> None:
        if self._owns:
            self._records.close()

    def _entries(self, record: Any) -> list[Entry]:
        """The stored messages; a record of another shape (a hand-edited file) is a StorageError,
        so the turn degrades as for any unreadable store instead of raising. A message that
        cannot be read (a role no memory writes, content that is not text) is left out, and said
        once: one bad line must not keep the session from ever storing again."""
        messages = record.get(self._field, []) if isinstance(record, dict) else None
        if not isinstance(messages, list):
            raise StorageError(f"a window record is malformed (expected {{{self._field!r}: [{{role, content, "
                               f"ts}}, ...]}})")
        out: list[Entry] = []
        for item in messages:
            try:
                if not isinstance(item, dict) or not isinstance(item.get("content"), str):
                    raise ValueError(f"not a message: {str(item)[:60]!r}")
                out.append((float(item.get("ts", 0.0)), from_dict(item)))
            except (TypeError, ValueError) as exc:
                _report_skipped(str(getattr(self._records, "path", "the store")), exc)
        return out


_WINDOW_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS {t} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids never reused after deletes
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,                      -- unix time the message was stored
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        extra TEXT                             -- JSON of tool fields, NULL for plain messages
    );
    CREATE INDEX IF NOT EXISTS {t}_by_session ON {t} (session_id, id);
    """,
)


class SqliteWindowStore:
    """Each message one row: appends and trims cost O(new messages), whatever the window size."""

    #: The schema scripts (the PostgreSQL store has its own).
    migrations: tuple[str, ...] = _WINDOW_MIGRATIONS

    def __init__(self, db: Database, table: str = "window", owns_db: bool = False):
        self.db = db
        self.table = safe_table_name(table)
        self._owns = owns_db
        db.migrate(f"window:{self.table}", [m.format(t=self.table) for m in self.migrations])

    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy,
               con: Any = None, ts: float | None = None) -> str | None:
        """Normalise, append and trim in one transaction (or inside the caller's ``con``).

        ``ts``: when the messages were said (POSIX seconds; None: now), for an import of past ones.
        Returns the question the new messages' first answer pairs with (see :meth:`_question_before`).
        """
        if con is None:
            return self.db.transaction(lambda con: self._append(con, session_id, messages, policy, ts))
        return self._append(con, session_id, messages, policy, ts)

    def replace(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> list[AgentMessage]:
        """Make ``messages`` the whole window, in one transaction (a crash keeps the old one).

        Returns the window as stored (normalised and trimmed), read in the same transaction."""
        def write(con: Any) -> list[AgentMessage]:
            self.forget(session_id, con)
            self._append(con, session_id, messages, policy)
            return self.load(session_id, policy)

        stored = self.db.transaction(write)
        self.db.checkpoint()  # as forget(): the WAL must not keep what the new window dropped
        return stored

    def _append(self, con: Any, session_id: str, messages: list[AgentMessage],
                policy: WindowPolicy, ts: float | None = None) -> str | None:
        t, now = self.table, time.time()
        to_add = list(messages)
        row = con.execute(
            f"SELECT id, role, content, extra FROM {t} WHERE session_id = ? ORDER BY id DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        tail = readable_messages([row[1:]], self.db.path)[0] if row else None
        question = self._question_before(con, session_id, tail, messages)
        if policy.normalise:
            pop_tail, to_add = fold_into(tail, messages)
            if pop_tail:
                con.execute(f"DELETE FROM {t} WHERE id = ?", (row[0],))
        # Stamped when it was said (a replay of updates kept while the store was down says so), so
        # max_age expires it then; the trim's cutoff is now.
        said = said_now() if ts is None else ts
        self._write_unread(
            con, f"INSERT INTO {t} (session_id, ts, role, content, extra) VALUES (?, ?, ?, ?, ?)",
            [(session_id, said, *_message_row(m)) for m in to_add],
        )
        self._trim(con, session_id, policy, now)
        return question

    def _question_before(self, con: Any, session_id: str, tail: AgentMessage | None,
                         messages: Sequence[AgentMessage]) -> str | None:
        """The question still waiting for its answer as the new messages come: the window's last
        message if it is a question, or the latest question when nothing answered it since (only
        tool calls and results, or an answer with no text, followed it): the new messages' first
        answer pairs with it, or a new question stores it alone. A question some text already
        answered pairs with nothing more here: an answer on its own may open another day's talk
        (the retrieval store pairs the next part of an answer, said at once, with that answer's
        question)."""
        if tail is None or is_role(tail, "user"):
            return tail.content if tail is not None else None
        if _is_answer(tail):
            return None
        t = self.table
        asked = con.execute(f"SELECT id, content FROM {t} WHERE session_id = ? AND role = 'user' "
                            "ORDER BY id DESC LIMIT 1", (session_id,)).fetchone()
        if asked is None:
            return None
        since = con.execute(f"SELECT role, content, extra FROM {t} WHERE session_id = ? AND id > ? ORDER BY id",
                            (session_id, asked[0])).fetchall()
        return None if any(m is not None and _is_answer(m) for m in readable_messages(since, self.db.path)) \
            else asked[1]

    @staticmethod
    def _write_unread(con: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """A write whose answer is not read (PostgreSQL's store sends it with the next statement)."""
        con.executemany(sql, rows)

    def _trim(self, con: Any, session_id: str, policy: WindowPolicy, now: float) -> None:
        t = self.table
        cutoff = policy.cutoff(now)
        if cutoff is not None:
            self._write_unread(con, f"DELETE FROM {t} WHERE session_id = ? AND ts < ?", [(session_id, cutoff)])
        if policy.max_messages:
            # One statement: when the window is not full the subquery is NULL and nothing goes.
            self._write_unread(
                con, f"DELETE FROM {t} WHERE session_id = ? AND id < "
                f"(SELECT id FROM {t} WHERE session_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                [(session_id, session_id, policy.max_messages - 1)],
            )

    def load(self, session_id: str, policy: WindowPolicy) -> list[AgentMessage]:
        t = self.table
        cutoff = policy.cutoff()
        limit = policy.max_messages or -1
        return self.db.query(
            f"SELECT role, content, extra FROM {t} WHERE session_id = ? AND ts >= ? ORDER BY id DESC LIMIT ?",
            (session_id, cutoff if cutoff is not None else float("-inf"), limit),
            lambda rows: [m for m in readable_messages(rows[::-1], self.db.path) if m is not None])

    def sessions(self) -> list[str]:
        return [r[0] for r in self.db.execute(f"SELECT DISTINCT session_id FROM {self.table} ORDER BY session_id")]

    def forget(self, session_id: str, con: Any = None) -> int:
        """Delete the session's messages (in the caller's ``con``, which then checkpoints, or alone)."""
        if con is None:
            with self.db.atomic() as con:
                count = self.forget(session_id, con)
            self.db.compact()  # forget() must reach the bytes on disk: free space, split pages, the WAL
            return count
        return int(con.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,)).rowcount)

    def drop(self, session_id: str, choose: Chooser, con: Any = None) -> int:
        """Delete the messages ``choose`` picks (from every stored row, trimmed or not yet), in
        the caller's ``con`` (which then compacts) or alone, compacted. Returns how many.

        Compacted even when none is found: a message the window trimmed earlier may still sit in
        the WAL or a free page."""
        if con is None:
            with self.db.atomic() as con:
                count = self.drop(session_id, choose, con)
            self.db.compact()
            return count
        rows = con.execute(f"SELECT id, role, content, extra FROM {self.table} WHERE session_id = ? ORDER BY id",
                           (session_id,)).fetchall()
        # An unreadable message stands as one that matches nothing: positions must hold.
        doomed = choose([m or AgentMessage(MessageRole.SYSTEM, "")
                         for m in readable_messages([r[1:] for r in rows], self.db.path)])
        con.executemany(f"DELETE FROM {self.table} WHERE id = ?", [(rows[i][0],) for i in sorted(doomed)])
        return len(doomed)

    def close(self) -> None:
        if self._owns:
            self._owns = False
            release_database(self.db)


def _is_answer(msg: AgentMessage) -> bool:
    """An ASSISTANT text that answers (a tool call's words, "Let me check.", only lead to one)."""
    return is_role(msg, "assistant") and bool(msg.content.strip()) and not getattr(msg, "tool_calls", None)


def answer_first(messages: Sequence[AgentMessage]) -> bool:
    """Whether an ASSISTANT text comes before any USER message in ``messages``."""
    for msg in messages:
        if is_role(msg, "user"):
            return False
        if is_role(msg, "assistant") and msg.content.strip():
            return True
    return False


def _message_row(msg: AgentMessage) -> tuple[str, str, str | None]:
    data = to_dict(msg)
    role, content = data.pop("role"), data.pop("content")
    return role, content, json.dumps(data, ensure_ascii=False) if data else None


def message_of_row(row: Any) -> AgentMessage:
    """A stored window row (role, content, tool fields as JSON) as a message; PostgreSQL's window reads the same."""
    try:
        data = json.loads(row[2]) if row[2] else {}
    except ValueError as exc:  # this package writes JSON only: the bytes changed on disk
        raise StoreDamaged(f"a stored message's tool fields are not JSON ({exc})") from exc
    if not isinstance(data, dict):  # JSON, but not what this package writes there: this message only
        raise ValueError(f"a stored message's tool fields are a {type(data).__name__}, not an object")
    content = row[1]
    if not isinstance(content, str):  # a damaged type tag (a BLOB where text was written): text again
        content = bytes(content).decode("utf-8", "replace") if isinstance(content, (bytes, bytearray, memoryview)) \
            else str(content)
    data.update(role=row[0], content=content)
    return from_dict(data)


def readable_messages(rows: Sequence[Any], where: str) -> list[AgentMessage | None]:
    """:func:`message_of_row` of each row, None for one that cannot be read (a role no memory
    writes, from another program or a damaged page): reported once, it costs its own message,
    not the session's window or the file (StoreDamaged would set the whole store aside)."""
    out: list[AgentMessage | None] = []
    for row in rows:
        try:
            out.append(message_of_row(row))
        except ValueError as exc:  # (StoreDamaged, tool fields that do not parse, is not one: it goes up)
            _report_skipped(where, exc)
            out.append(None)
    return out


def _report_skipped(where: str, exc: Exception) -> None:
    _skipped_log.error(where, "%s: a stored window message is unreadable (%s); it is left out, and dropped "
                       "when its session next changes", where, exc)
