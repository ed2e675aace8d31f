"""Ending a call PostgreSQL leaves unanswered, so a hung server costs a turn a bounded wait, not forever.

A server that is down or unreachable is noticed by the connection itself: refused at once, or
by libpq's TCP settings within seconds. A server that is alive but hung (its process stopped, a
frozen virtual machine, a disk that no longer answers) is not: its kernel acknowledges every
byte, so TCP sees nothing wrong, and ``statement_timeout`` is enforced by the very process that
no longer runs. psycopg then waits for an answer for ever, and so does the persona's turn.

So every call on a watched connection notes when it started and when the server last sent
anything (:class:`WatchedConnection` overrides psycopg's one waiting point), and one thread per
process (started by the first call, then looking once a second) shuts down the socket of a call
that has heard nothing for longer than the server would ever let a statement run
(``statement_timeout`` and a margin). psycopg then
reports the connection lost, which the stores already treat as an outage: the turn goes on
without the database, the update is held, and the connection is replaced later.
"""
from __future__ import annotations

import contextlib
import functools
import os
import selectors
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..._core.log import LOG

__all__ = ["HUNG_MARGIN_S", "watched_connection_class", "watch"]

#: Seconds past the connection's ``statement_timeout`` before its call counts as unanswered.
HUNG_MARGIN_S = 5.0
#: How often the watching thread looks at the calls in flight, at most.
CHECK_EVERY_S = 1.0


class _Watched:
    """What the watcher needs of one connection; the connection itself is not kept alive by it."""

    __slots__ = ("connection", "limit", "inode", "since", "on_cut")

    def __init__(self, connection: Any, limit: float, inode: int, on_cut: Callable[[str], None]):
        self.connection = weakref.ref(connection)
        self.on_cut = on_cut
        self.limit = limit  # seconds a call may wait
        self.inode = inode  # the socket's, to never shut down a descriptor reused by another one
        self.since = 0.0  # time.monotonic() the call in flight began or last heard the server; 0: none


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
            try:
                pending = self._look()
            except Exception as exc:  # noqa: BLE001 - the watch must outlive any one connection's oddity
                LOG.error(f"PostgreSQL watchdog: {type(exc).__name__}: {exc}")
                pending = []
            time.sleep(max(0.01, min([CHECK_EVERY_S, *pending])))

    def _look(self) -> list[float]:
        """Cut the calls past their deadline; the seconds left to the others' deadlines."""
        with self._lock:
            busy = list(self._busy)
        now = time.monotonic()
        pending = []
        for watched in busy:
            since = watched.since
            if since and now - since > watched.limit:
                _cut(watched, since)
            elif since:
                pending.append(since + watched.limit - now)
        return pending


_WATCHER = _Watcher()
os.register_at_fork(after_in_child=_WATCHER.forked)


def _cut(watched: _Watched, since: float) -> None:
    """Shut down the socket of a call the server has left unanswered since ``since`` (its
    thread then gets an error), unless the call ended or heard from the server meanwhile."""
    connection = watched.connection()
    if connection is None:
        return
    try:
        fd = os.dup(connection.pgconn.socket)
    except Exception:  # noqa: BLE001 - closed meanwhile (psycopg says so its own way): nothing to cut
        return
    try:
        if os.fstat(fd).st_ino != watched.inode or watched.since != since:
            return  # not our socket any more (closed, its number reused), or the call moved on
        why = f"had no answer for {watched.limit:g} s"
        watched.on_cut(why)  # first: the call woken below must find new connections paused
        LOG.warning(f"PostgreSQL: a connection {why} (the server hung, or too busy to answer); it is "
                    "closed and its call fails as in an outage")
        watched.since = 0.0
        sock, fd = socket.socket(fileno=fd), -1  # the socket object owns the duplicate now
        with sock, contextlib.suppress(OSError):
            # The socket itself, shared with psycopg's descriptor: its blocked wait wakes up.
            sock.shutdown(socket.SHUT_RDWR)
    finally:
        if fd >= 0:
            os.close(fd)


def _heard(gen: Any, watched: _Watched) -> Any:
    """psycopg's generator for one call, noting the time whenever the server sends something (a
    large result arrives in pieces). The server sends the results of a pipeline when it has run
    them all: the package's pipelines hold at most a few waits for locks, each bounded by its
    ``lock_timeout`` (30 s), well within the watch's time."""
    try:
        waiting = next(gen)
        while True:
            ready = yield waiting
            if int(ready or 0) & selectors.EVENT_READ:  # 0: the waiter's periodic look, not the server
                watched.since = time.monotonic()
            waiting = gen.send(ready)
    except StopIteration as done:
        return done.value


@functools.lru_cache(maxsize=1)
def watched_connection_class() -> Any:
    """A ``psycopg.Connection`` whose calls are watched once :func:`watch` has been called on it."""
    import psycopg

    class WatchedConnection(psycopg.Connection):  # type: ignore[misc, type-arg]
        _ovos_watched: _Watched | None = None

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:  # every statement, fetch, commit
            watched = self._ovos_watched
            if watched is None or watched.since:  # not watched, or a call inside a watched one
                return super().wait(gen, *args, **kwargs)
            _WATCHER.begin(watched)
            try:
                return super().wait(_heard(gen, watched), *args, **kwargs)
            finally:
                _WATCHER.end(watched)

    return WatchedConnection


def watch(connection: Any, statement_timeout_ms: int, on_cut: Callable[[str], None]) -> None:
    """Watch ``connection`` (made by :func:`watched_connection_class`; again: with a new
    timeout): a call that hears nothing from the server for longer than its
    ``statement_timeout_ms`` plus :data:`HUNG_MARGIN_S` ends the connection, and
    ``on_cut(why)`` is called. A timeout of 0 (none) leaves it unwatched: a statement may then
    run for any time."""
    if statement_timeout_ms <= 0:
        connection._ovos_watched = None
        return
    inode = os.fstat(connection.pgconn.socket).st_ino
    limit = statement_timeout_ms / 1000 + HUNG_MARGIN_S
    connection._ovos_watched = _Watched(connection, limit, inode, on_cut)
