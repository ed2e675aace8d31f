"""Updates a store refused, kept in RAM and written first by the next write of their session.

A store can be unwritable for a while: PostgreSQL or Redis restarting, a full disk, a file
locked past its timeout. The turn is still answered, and what the user said in it must not go
with it. So the refused items wait here, per session and in order, and the next write of that
session puts them first in its own batch (one transaction: all written, or all held again);
a read or a ``flush()`` writes them too, so a context built after recovery holds them. What is
held is lost only if the process ends before the store comes back, which ``close()`` says.

Bounded: past ``limit`` items a session keeps its newest, and says so once.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["HeldWrites"]

T = TypeVar("T")


class HeldWrites(Generic[T]):
    """Per session, the items a store refused, oldest first."""

    def __init__(self, limit: int, on_overflow: Callable[[], None] | None = None):
        self._items: dict[str, list[T]] = {}
        self._refused_at: dict[str, float] = {}  # per session, when the store last refused its items
        self._lock = threading.Lock()
        self._limit = limit
        self._on_overflow = on_overflow  # called each time items are dropped

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._items  # a dict lookup, no lock: the turn's fast path

    def take(self, session_id: str) -> list[T]:
        """Remove and return what is held for ``session_id`` (``[]``: nothing)."""
        if session_id not in self._items:
            return []
        with self._lock:
            self._refused_at.pop(session_id, None)
            return self._items.pop(session_id, [])

    def due(self, session_id: str, after: float) -> bool:
        """Whether something is held for ``session_id`` and was last refused ``after`` seconds ago
        or more: worth trying again where a refusal costs a wait (a read before a turn)."""
        if session_id not in self._items:
            return False
        with self._lock:
            return time.monotonic() - self._refused_at.get(session_id, 0.0) >= after

    def hold(self, session_id: str, items: Sequence[T]) -> None:
        """Keep ``items`` (already older than anything held meanwhile) in front of it, bounded."""
        if not items:
            return
        with self._lock:
            kept = list(items) + self._items.get(session_id, [])
            dropped = max(0, len(kept) - self._limit)
            self._items[session_id] = kept[dropped:]
            self._refused_at[session_id] = time.monotonic()
        if dropped and self._on_overflow is not None:
            self._on_overflow()

    def peek(self, session_id: str) -> list[T]:
        """A copy of what is held for ``session_id``, oldest first."""
        with self._lock:
            return list(self._items.get(session_id, []))

    def drop(self, session_id: str) -> int:
        """Forget what is held for ``session_id`` (it is never written); how many items went."""
        return len(self.take(session_id))

    def sessions(self) -> list[str]:
        with self._lock:
            return [sid for sid, items in self._items.items() if items]

    def count(self) -> int:
        with self._lock:
            return sum(len(items) for items in self._items.values())

    def write(self, session_id: str, items: Sequence[T], store: Callable[[list[T]], object],
              refused: tuple[type[BaseException], ...]) -> int:
        """``store`` what is held for the session followed by ``items``, as one batch, and return
        how many held items went with it. If the store refuses it (one of ``refused``: it is
        down or full), the whole batch is held again, in front of anything held meanwhile; any
        other error is the new items' (a bug, not an outage): only what was held before is kept,
        so an item that can never be stored does not block its session. The error propagates."""
        held = self.take(session_id)
        batch = held + list(items)
        if not batch:
            return 0
        try:
            store(batch)
        except refused:
            self.hold(session_id, batch)
            raise
        except BaseException:
            self.hold(session_id, held)
            raise
        return len(held)
