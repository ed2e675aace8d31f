"""Updates a store refused, kept in RAM and written first by the next write of their session.

A store can be unwritable for a while: PostgreSQL or Redis restarting, a full disk, a file
locked past its timeout. The turn is still answered, and what the user said in it must not go
with it. So the refused items wait here, per session and in order, and the next write of that
session puts them first in its own batch (one transaction: all written, or all held again);
``flush()``, an export and a forget of one exchange write them too. What is held is lost only
if the process ends before the store comes back, which ``close()`` says.

A forget of the session drops what is held, after any write of it in flight (which the forget
then deletes from the store), and a write refused since does not put its batch back: a
forgotten session is never written again. Writes of one session take turns here, so a batch
held again never lands behind a later one.

Bounded: past ``limit`` items a session keeps its newest, and says so.

A store written inside a transaction it does not commit (a composite's members share one) can
see a write succeed and the transaction fail after it: :meth:`HeldWrites.recording` notes what
each write of the block stored, and :meth:`HeldWrites.hold_again` holds it if the commit fails.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

__all__ = ["HeldWrites", "Unstorable"]


class Unstorable(ValueError):
    """What a store can never take for this session (PostgreSQL's index refuses its id): the
    batch is not held again, nor what was held with it, as no retry could store it."""

T = TypeVar("T")
_STRIPES = 32  # locks shared by sessions (by hash): one per session would grow without bound


class HeldWrites(Generic[T]):
    """Per session, the items a store refused, oldest first."""

    def __init__(self, limit: int, on_overflow: Callable[[], None] | None = None):
        self._items: dict[str, list[T]] = {}
        self._forgets: dict[str, int] = {}  # per session, how many times it was dropped
        self._lock = threading.Lock()
        self._writing = [threading.RLock() for _ in range(_STRIPES)]
        self._limit = limit
        self._on_overflow = on_overflow  # called each time items are dropped
        self.dropped = 0  # items dropped past the limit, since the start
        self._recording = threading.local()  # .batches: what this thread's writes stored (recording())

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._items  # a dict lookup, no lock: the turn's fast path

    def _generation(self, session_id: str) -> int:
        """Changes when the session is dropped: passed to :meth:`hold` with what was taken."""
        with self._lock:
            return self._forgets.get(session_id, 0)

    def take(self, session_id: str) -> list[T]:
        """Remove and return what is held for ``session_id`` (``[]``: nothing)."""
        if session_id not in self._items:
            return []
        with self._lock:
            return self._items.pop(session_id, [])

    def hold(self, session_id: str, items: Sequence[T], generation: int | None = None) -> None:
        """Keep ``items`` (older than anything held meanwhile) in front of it, bounded; not if the
        session was dropped since ``generation`` (read before the items were taken)."""
        if not items:
            return
        with self._lock:
            if generation is not None and self._forgets.get(session_id, 0) != generation:
                return  # forgotten meanwhile: these must never be written
            kept = list(items) + self._items.get(session_id, [])
            dropped = max(0, len(kept) - self._limit)
            self._items[session_id] = kept[dropped:]
            self.dropped += dropped
        if dropped and self._on_overflow is not None:
            self._on_overflow()

    def peek(self, session_id: str) -> list[T]:
        """A copy of what is held for ``session_id``, oldest first."""
        with self._lock:
            return list(self._items.get(session_id, []))

    def turn(self, session_id: str) -> threading.RLock:
        """The lock the session's writes take turns with (a forget of the store takes it too,
        so it comes after a write in flight)."""
        return self._writing[hash(session_id) % _STRIPES]

    def drop(self, session_id: str) -> int:
        """Forget what is held for ``session_id``, and what a write in flight would hold again
        (it is never written); how many items went. A write in flight finishes first: what it
        stores is then there for the forget that follows to delete."""
        with self.turn(session_id), self._lock:
            self._forgets[session_id] = self._forgets.get(session_id, 0) + 1
            return len(self._items.pop(session_id, []))

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
        so an item that can never be stored does not block its session; :class:`Unstorable`
        (the session itself cannot be stored) keeps nothing. The error propagates."""
        with self.turn(session_id):  # the session's writes take turns
            generation = self._generation(session_id)
            held = self.take(session_id)
            batch = held + list(items)
            if not batch:
                return 0
            try:
                store(batch)
            except refused:
                self.hold(session_id, batch, generation)
                raise
            except Unstorable:
                raise  # the session's id is the cause: nothing of it can ever be stored
            except BaseException:
                self.hold(session_id, held, generation)
                raise
            recorded = getattr(self._recording, "batches", None)
            if recorded is not None:
                recorded.append((session_id, batch, generation))
            return len(held)

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[tuple[str, list[T], int]]]:
        """Within the block, what this thread's writes stored: ``(session_id, batch, generation)``
        each, for :meth:`hold_again` should the transaction they joined not commit."""
        batches: list[tuple[str, list[T], int]] = []
        self._recording.batches = batches
        try:
            yield batches
        finally:
            self._recording.batches = None

    def hold_again(self, batches: Sequence[tuple[str, list[T], int]]) -> None:
        """Hold what :meth:`recording` noted, in its order, in front of anything held since (not
        for a session dropped meanwhile): the transaction it was stored in rolled back."""
        for session_id, batch, generation in reversed(batches):
            self.hold(session_id, batch, generation)
