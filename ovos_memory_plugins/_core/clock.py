"""The time an exchange is stored with: now, unless it was said earlier and is stored late.

A composite member that could not reach its store is given, once it can, the updates said while
it waited (``_memory/late_start.py``); stamped with the time of that replay, hours of a
conversation would look as if said at one instant, and recalled exchanges would carry the wrong
day. Inside :func:`said_at`, writes in this thread (a window's messages, a document, an exchange
entity keeps) are stamped with the time given.

    >>> with said_at(1700000000.0):
    ...     said_now()
    1700000000.0
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

__all__ = ["said_at", "said_now"]

_SAID_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar("said_at", default=None)


def said_now() -> float:
    """POSIX seconds to stamp a write with."""
    ts = _SAID_AT.get()
    return time.time() if ts is None else ts


@contextlib.contextmanager
def said_at(ts: float) -> Iterator[None]:
    """Writes in the block are stamped ``ts`` (when what they store was said)."""
    token = _SAID_AT.set(float(ts))
    try:
        yield
    finally:
        _SAID_AT.reset(token)
