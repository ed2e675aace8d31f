"""Ending a call PostgreSQL leaves unanswered, so a hung server costs a turn a bounded wait, not forever.

A server that is down or unreachable is noticed by the connection itself: refused at once, or
by libpq's TCP settings within seconds. A server that is alive but hung (its process stopped, a
frozen virtual machine, a disk that no longer answers) is not: its kernel acknowledges every
byte, so TCP sees nothing wrong, and ``statement_timeout`` is enforced by the very process that
no longer runs. psycopg then waits for an answer for ever, and so does the persona's turn.

So every call on a watched connection notes when it started (:class:`WatchedConnection`
overrides psycopg's one waiting point), and one thread per process (started by the first call,
then looking once a second) shuts down the socket of a call that has waited longer than the
server would ever let a statement run (``statement_timeout`` and a margin). psycopg then
reports the connection lost, which the stores already treat as an outage: the turn goes on
without the database, the update is held, and the connection is replaced later.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..._core.log import LOG

__all__ = ["HUNG_MARGIN_S", "statement_timeout_ms", "watched_connection_class", "watch"]

#: Seconds past the connection's ``statement_timeout`` before its call counts as unanswered.
HUNG_MARGIN_S = 5.0
#: How often the watching thread looks at the calls in flight, at most.
CHECK_EVERY_S = 1.0


#: ``statement_timeout`` set in libpq's ``options`` (``-c statement_timeout=5s``), and its unit.
_TIMEOUT_OPTION = re.compile(r"statement_timeout\s*=\s*'?(\d+)\s*(ms|s|min|h|d)?'?", re.IGNORECASE)
_UNIT_MS = {"": 1, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def statement_timeout_ms(options: str) -> int | None:
    """The ``statement_timeout`` the last setting in ``options`` gives, in ms (None: not set).

    >>> statement_timeout_ms("-c lock_timeout=30000 -c statement_timeout=60000 -c statement_timeout=2min")
    120000
    """
    found = _TIMEOUT_OPTION.findall(options)
    if not found:
        return None
    value, unit = found[-1]
    return int(value) * _UNIT_MS[unit.lower()]


class _Watched:
    """What the watcher needs of one connection; the connection itself is not kept alive by it."""

    __slots__ = ("connection", "limit", "inode", "since", "on_cut")

    def __init__(self, connection: Any, limit: float, inode: int, on_cut: Callable[[str], None]):
        self.connection = weakref.ref(connection)
        self.on_cut = on_cut
        self.limit = limit  # seconds a call may wait
        self.inode = inode  # the socket's, to never shut down a descriptor reused by another one
        self.since = 0.0  # time.monotonic() the call in flight began; 0: none


class _Watcher:
    """The thread that ends unanswered calls. Started by the first call, it looks once a second
    (a call notes itself and leaves, never waking it: a turn pays a set's add and discard, not a
    thread switch), and sooner when a deadline is nearer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[_Watched] = set()
        self._thread: threading.Thread | None = None

    def begin(self, watched: _Watched) -> None:
        watched.since = time.monotonic()
        with self._lock:
            self._busy.add(watched)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ovos-memory-pg-watchdog", daemon=True)
                self._thread.start()

    def end(self, watched: _Watched) -> None:
        watched.since = 0.0
        with self._lock:
            self._busy.discard(watched)

    def forked(self) -> None:
        """In a child process: the parent's thread is not there, nor are its calls."""
        self._lock = threading.Lock()
        self._busy, self._thread = set(), None

    def _run(self) -> None:
        while True:
            with self._lock:
                busy = list(self._busy)
            now = time.monotonic()
            due = [w for w in busy if w.since and now - w.since > w.limit]
            for watched in due:
                _cut(watched)
            pending = [w.since + w.limit - now for w in busy if w.since and w not in due]
            time.sleep(max(0.01, min([CHECK_EVERY_S, *pending])))


_WATCHER = _Watcher()
os.register_at_fork(after_in_child=_WATCHER.forked)


def _cut(watched: _Watched) -> None:
    """Shut down the socket of a call the server leaves unanswered (its thread then gets an error)."""
    connection = watched.connection()
    if connection is None or not watched.since:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = os.dup(connection.pgconn.socket)
        try:
            if os.fstat(fd).st_ino != watched.inode:
                return  # the connection was closed and its number reused: not ours to touch
            sock = socket.socket(fileno=fd)
            fd = -1  # the socket object owns it now
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the socket itself, shared with the original descriptor
            finally:
                sock.close()
        finally:
            if fd >= 0:
                os.close(fd)
        why = f"had no answer for {watched.limit:g} s"
        LOG.warning(f"PostgreSQL: a connection {why} (the server hung, or too busy to answer); it is "
                    "closed and its call fails as in an outage")
        watched.since = 0.0
        watched.on_cut(why)


@functools.lru_cache(maxsize=1)
def watched_connection_class() -> Any:
    """A ``psycopg.Connection`` whose calls are watched once :func:`watch` has been called on it."""
    import psycopg

    class WatchedConnection(psycopg.Connection):  # type: ignore[misc, type-arg]
        _ovos_watched: _Watched | None = None

        def wait(self, *args: Any, **kwargs: Any) -> Any:  # every statement, fetch and commit waits here
            watched = self._ovos_watched
            if watched is None or watched.since:  # not watched, or a call inside a watched one
                return super().wait(*args, **kwargs)
            _WATCHER.begin(watched)
            try:
                return super().wait(*args, **kwargs)
            finally:
                _WATCHER.end(watched)

    return WatchedConnection


def watch(connection: Any, statement_timeout_ms: int, on_cut: Callable[[str], None]) -> None:
    """Watch ``connection`` (made by :func:`watched_connection_class`): a call waiting longer
    than ``statement_timeout_ms`` plus :data:`HUNG_MARGIN_S` ends its connection, and
    ``on_cut(why)`` is called. A timeout of 0 (none) leaves it unwatched: a statement may then
    run for any time."""
    if statement_timeout_ms <= 0:
        return
    inode = os.fstat(connection.pgconn.socket).st_ino
    limit = statement_timeout_ms / 1000 + HUNG_MARGIN_S
    connection._ovos_watched = _Watched(connection, limit, inode, on_cut)
