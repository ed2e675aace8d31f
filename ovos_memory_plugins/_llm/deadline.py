"""A whole-request deadline for urllib: ``request_timeout`` bounds the request, not each read.

urllib's ``timeout`` applies to each socket operation: a server that sends one byte every half
second never trips it, and would hold the memory's background worker (and every later session's
work queued behind it) for as long as it likes. Here each request gets a :class:`Deadline`: a
timer that shuts the request's socket down when the time is up, which ends any read blocked on
it; the caller then reports a timeout.

The socket is found by the handlers of :func:`build_opener`: the connection class urllib picks
(HTTP or HTTPS, whatever the Python version passes it) is wrapped so that ``connect()`` hands
its socket to the deadline running in the calling thread.
"""
from __future__ import annotations

import functools
import socket
import threading
import urllib.request
from typing import Any

__all__ = ["Deadline", "build_opener"]

_running = threading.local()  # the Deadline of the request this thread is making


class Deadline:
    """Use as ``with Deadline(seconds) as deadline: ...``; ``deadline.expired`` tells afterwards
    whether the time ran out (and the socket was shut down)."""

    def __init__(self, seconds: float, read_timeout: float | None = None):
        """``read_timeout``: each read's timeout once connected, when it differs from the
        connection attempt's (urllib's ``timeout``)."""
        self.expired = False
        self._read_timeout = read_timeout
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        _running.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        _running.deadline = None

    @property
    def connected(self) -> bool:
        """Whether the request reached the server (a connection was made): a timeout then means
        a server that is slow to answer, not one that cannot be reached."""
        return bool(self._socks)

    def attach(self, sock: socket.socket) -> None:
        if self._read_timeout is not None:
            sock.settimeout(self._read_timeout)
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        # The plain socket's shutdown, also under TLS: a read blocked in another thread returns.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


@functools.cache
def _watched(connection_class: type) -> Any:
    class Watched(connection_class):  # type: ignore[misc,valid-type]
        def connect(self) -> None:
            super().connect()
            deadline = getattr(_running, "deadline", None)
            if deadline is not None:
                deadline.attach(self.sock)

    Watched.__name__ = f"Watched{connection_class.__name__}"
    return Watched


class _HTTPHandler(urllib.request.HTTPHandler):
    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class), req, **kwargs)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class), req, **kwargs)


def build_opener(*handlers: Any) -> urllib.request.OpenerDirector:
    """``urllib.request.build_opener`` whose connections obey the running :class:`Deadline`."""
    return urllib.request.build_opener(_HTTPHandler, _HTTPSHandler, *handlers)
