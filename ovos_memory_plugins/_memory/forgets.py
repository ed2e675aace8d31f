"""Which sessions were forgotten while background work on them was under way.

A summary folds turns with a few model requests, seconds apart on a small board. When the
session is forgotten meanwhile, the requests still to come would send the forgotten turns to the
model: the work asks :meth:`Forgets.since` before each one and stops.

    >>> forgets = Forgets()
    >>> forgotten = forgets.since("kitchen")
    >>> forgotten()
    False
    >>> forgets.forgot("kitchen")
    >>> forgotten()
    True
"""
from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Forgets"]


class Forgets:
    """How many times each session was forgotten in this process (one small count per session)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def forgot(self, session_id: str) -> None:
        with self._lock:
            self._counts[session_id] = self._counts.get(session_id, 0) + 1

    def since(self, session_id: str) -> Callable[[], bool]:
        """A check: was ``session_id`` forgotten after this call?"""
        start = self._counts.get(session_id, 0)
        return lambda: self._counts.get(session_id, 0) != start
