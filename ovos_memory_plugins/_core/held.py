"""Updates a store refused, kept in RAM and written first by the next write of their session.

A store can be unwritable for a while: PostgreSQL or Redis restarting, a full disk, a file
locked past its timeout. The turn is still answered, and what the user said in it must not go
with it. So the refused items wait here, per session and in order, each with the time it was
given, and the next write of that session stores them first; ``flush()``, an export and a forget
of one exchange write them too. What is held is lost only if the process ends before the store
comes back, which ``close()`` says.

Each update is stored with the time it was said (:func:`~._core.clock.said_at`), not the time the
store came back: an outage of an hour must not make an hour of conversation look said at once
(``max_age``, the dates recalled exchanges carry). So the held updates go one store call each,
oldest first, then the new items; a call refused stops there and holds the rest again, in order.
An update's items share one stamp (its time and its number), so they stay in one call: split,
another writer's exchange could land between a question and its answer. The number keeps two
updates said at the same instant (one ``said_at``, a coarse clock) apart.
A store whose items carry their own time, or that keeps only the time of the last update, takes
them all in one call instead (``one_call``), inside ``said_at`` the newest time: one rewrite of
its record, not one per held update.

A forget of the session drops what is held, after any write of it in flight (which the forget
then deletes from the store), and a write refused since does not put its batch back: a
forgotten session is never written again. Writes of one session take turns here, so a batch
held again never lands behind a later one.

Bounded: past ``limit`` items a session keeps its newest, and past ``total_limit`` in all (a
household's satellites through one long outage) the oldest updates of any session go; each time
it says so.

A store written inside a transaction it does not commit (a composite's members share one) can
see a write succeed and the transaction fail after it: :meth:`HeldWrites.recording` notes what
each write of the block stored, and :meth:`HeldWrites.hold_again` holds it if the commit fails.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, NamedTuple, TypeVar

from .clock import said_at, said_now

__all__ = ["HeldWrites", "Said", "Unstorable", "current_update", "stamp"]


class Unstorable(ValueError):
    """What a store can never take for this session (PostgreSQL's index refuses its id): the
    batch is not held again, nor what was held with it, as no retry could store it."""


class Said(NamedTuple):
    """When an update was said, and its number: what its items share, and no other update does."""

    at: float  # POSIX seconds
    update: int


T = TypeVar("T")
Stamped = tuple[Said, T]  # (its update's stamp, the item)
_updates = itertools.count()  # next() is atomic in CPython: numbers never repeat within a process
_PROCESS = secrets.token_hex(6)  # with an update's number, an id no other process's update has
#: The update a store call in progress carries: its id, and whether it was tried before.
_CALL: contextvars.ContextVar[tuple[Said, bool] | None] = contextvars.ContextVar("ovos_memory_update", default=None)


def current_update() -> tuple[str, bool] | None:
    """``(id, retried)`` of the update the store call in progress writes (None outside one): a
    store whose reply can be lost after the write was done (Redis over a network) tags what it
    writes with the id, and on a retry first looks whether it is already there."""
    call = _CALL.get()
    return None if call is None else (f"{_PROCESS}{call[0].update:x}", call[1])


_STRIPES = 32  # locks shared by sessions (by hash): one per session would grow without bound


class HeldWrites(Generic[T]):
    """Per session, the items a store refused, oldest first."""

    def __init__(self, limit: int, on_overflow: Callable[[], None] | None = None, one_call: bool = False,
                 on_dropped: Callable[[BaseException], None] | None = None, total_limit: int | None = None):
        self._one_call = one_call  # all that is held and the new items in one store call
        self._on_dropped = on_dropped  # told the error of a held update the store could not take
        self._items: dict[str, list[Stamped[T]]] = {}
        self._forgets: dict[str, int] = {}  # per session, how many times it was dropped
        self._lock = threading.Lock()
        self._writing = [threading.RLock() for _ in range(_STRIPES)]
        self._limit = limit
        self._total_limit = total_limit if total_limit is not None else limit
        self._total = 0  # items held in all sessions
        self._on_overflow = on_overflow  # called each time items are dropped
        self.dropped = 0  # items dropped past the limit, since the start
        self._recording = threading.local()  # .runs: what this thread's writes stored (recording())

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._items  # a dict lookup, no lock: the turn's fast path

    def _generation(self, session_id: str) -> int:
        """Changes when the session is dropped: passed to :meth:`hold` with what was taken."""
        with self._lock:
            return self._forgets.get(session_id, 0)

    def dropped_since(self, session_id: str) -> Callable[[], bool]:
        """A check: was ``session_id`` dropped (forgotten) after this call? Background work on
        the session (a summary's model requests) asks it before each step and stops."""
        start = self._generation(session_id)
        return lambda: self._forgets.get(session_id, 0) != start

    def _take(self, session_id: str) -> list[Stamped[T]]:
        """Remove and return what is held for ``session_id`` (``[]``: nothing)."""
        if session_id not in self._items:
            return []
        with self._lock:
            taken = self._items.pop(session_id, [])
            self._total -= len(taken)
            return taken

    def _hold(self, session_id: str, items: Sequence[Stamped[T]], generation: int | None = None) -> None:
        """Keep ``items`` (older than anything held meanwhile) in front of it, bounded; not if the
        session was dropped since ``generation`` (read before the items were taken)."""
        if not items:
            return
        with self._lock:
            if generation is not None and self._forgets.get(session_id, 0) != generation:
                return  # forgotten meanwhile: these must never be written
            kept = list(items) + self._items.get(session_id, [])
            dropped = _whole_updates(kept, max(0, len(kept) - self._limit))
            self._total += len(kept) - dropped - len(self._items.get(session_id, []))
            self._items[session_id] = kept[dropped:]
            dropped += self._drop_oldest_past_total()
            self.dropped += dropped
        if dropped and self._on_overflow is not None:
            self._on_overflow()

    def _drop_oldest_past_total(self) -> int:
        """Past ``total_limit`` items in all, the oldest update of any session goes, one by one
        (never a session's last: each keeps its newest update); how many items went. Under the lock."""
        dropped = 0
        while self._total > self._total_limit:
            oldest = min((sid for sid, items in self._items.items() if _first_update(items) < len(items)),
                         key=lambda sid: self._items[sid][0][0], default=None)
            if oldest is None:
                break
            items = self._items[oldest]
            first = _first_update(items)
            self._items[oldest] = items[first:]
            self._total -= first
            dropped += first
        return dropped

    def peek(self, session_id: str) -> list[T]:
        """A copy of what is held for ``session_id``, oldest first."""
        with self._lock:
            return [item for _, item in self._items.get(session_id, [])]

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
            gone = len(self._items.pop(session_id, []))
            self._total -= gone
            return gone

    def sessions(self) -> list[str]:
        with self._lock:
            return [sid for sid, items in self._items.items() if items]

    def count(self) -> int:
        with self._lock:
            return self._total

    def write(self, session_id: str, items: Sequence[T], store: Callable[[list[T]], object],
              refused: tuple[type[BaseException], ...]) -> int:
        """``store`` what is held for the session, then ``items``, and return how many held items
        were stored. Each held update is its own call, inside ``said_at`` its time (``items``
        go together, at the time of this call; with ``one_call``, everything goes in one call).
        If the store refuses a call (one of ``refused``: it is down or full), or the write is
        interrupted, that call's items and the rest are held again, in front of anything held
        meanwhile, and the error propagates. Any other error is a bug in the items of that call,
        not an outage: the first held update that raises one is dropped (``on_dropped`` is told)
        and the write goes on, so it cannot block its session; a second waits, with the rest,
        for the next write; new items that raise one are dropped. Those two propagate, and so
        does :class:`Unstorable` (the session itself cannot be stored), which keeps nothing."""
        with self.turn(session_id):  # the session's writes take turns
            generation = self._generation(session_id)
            held = self._take(session_id)
            now = stamp()  # one stamp for the whole update: its items must stay in one call
            new = [(now, [(now, item) for item in items])] if items else []
            if not held:  # a turn's usual case: one call, said now
                self._store_runs(session_id, new, 0, store, refused, generation)
                return 0
            runs = _runs(held) + new  # never one run across the two: a bad held update keeps to itself
            if self._one_call and self._stored_in_one_call(session_id, runs, store, refused, generation):
                return len(held)
            return len(held) - self._store_runs(session_id, runs, len(held), store, refused, generation)

    def _stored_in_one_call(self, session_id: str, runs: list[tuple[Said, list[Stamped[T]]]],
                            store: Callable[[list[T]], object], refused: tuple[type[BaseException], ...],
                            generation: int) -> bool:
        """Every run in one call at the newest time; False after a bug in it (the caller then
        stores them one call each, which finds the culprit and drops only it)."""
        merged = [pair for _, run in runs for pair in run]
        try:
            with said_at(runs[-1][0].at):
                store([item for _, item in merged])
        except Unstorable:
            raise
        except BaseException as exc:
            if _is_bug(exc, refused):
                return False  # in one of them: one call each finds which
            self._hold(session_id, merged, generation)  # refused or interrupted: nothing is lost
            raise
        self._record(session_id, merged, generation)
        return True

    def _store_runs(self, session_id: str, runs: list[tuple[Said, list[Stamped[T]]]], held: int,
                    store: Callable[[list[T]], object], refused: tuple[type[BaseException], ...],
                    generation: int) -> int:
        """One call per run, oldest first; the first ``held`` items were held, and only when
        some were is a call made inside ``said_at`` its time (a turn's own call is said now).
        Returns how many held items were dropped; see :meth:`write` for what an error keeps."""
        done, dropped = 0, 0  # items of the runs before this one; those of the held update dropped
        for i, (said, run) in enumerate(runs):
            try:
                token = _CALL.set((said, done < held))  # a held update was tried before
                try:
                    if held:
                        with said_at(said.at):
                            store([item for _, item in run])
                    else:  # a turn's own call, nothing held: said now
                        store([item for _, item in run])
                finally:
                    _CALL.reset(token)
            except Unstorable:
                raise  # the session's id is the cause: nothing of it can ever be stored
            except BaseException as exc:
                bug = _is_bug(exc, refused)
                if bug and done < held and not dropped:  # the first bad held update: it alone goes
                    dropped, done = len(run), done + len(run)
                    self._say_dropped(exc)
                    continue
                # Refused or interrupted: nothing is lost. A second bad held update waits with the
                # rest; new items that raise a bug go (held updates never share their call).
                if not bug or done < held:
                    self._hold(session_id, [pair for _, later in runs[i:] for pair in later], generation)
                raise
            done += len(run)
            self._record(session_id, run, generation)
        return dropped

    def _say_dropped(self, exc: BaseException) -> None:
        if self._on_dropped is not None:
            try:
                self._on_dropped(exc)
            except Exception:  # noqa: BLE001, S110 - telling must not cost the updates after it
                pass

    def _record(self, session_id: str, run: list[Stamped[T]], generation: int) -> None:
        recorded = getattr(self._recording, "runs", None)
        if recorded is not None:
            recorded.append((session_id, run, generation))

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[tuple[str, list[Stamped[T]], int]]]:
        """Within the block, what this thread's writes stored: ``(session_id, items, generation)``
        each, for :meth:`hold_again` should the transaction they joined not commit."""
        runs: list[tuple[str, list[Stamped[T]], int]] = []
        self._recording.runs = runs
        try:
            yield runs
        finally:
            self._recording.runs = None

    def hold_again(self, runs: Sequence[tuple[str, list[Stamped[T]], int]]) -> None:
        """Hold what :meth:`recording` noted, in its order and with its times, in front of
        anything held since (not for a session dropped meanwhile): the transaction it was stored
        in rolled back."""
        for session_id, run, generation in reversed(runs):
            self._hold(session_id, run, generation)


def _is_bug(exc: BaseException, refused: tuple[type[BaseException], ...]) -> bool:
    """An error that is neither the store refusing (an outage) nor an interruption: the items'."""
    return isinstance(exc, Exception) and not isinstance(exc, refused)


def stamp() -> Said:
    """The stamp of an update given now."""
    return Said(said_now(), next(_updates))


def _whole_updates(kept: list[Stamped[T]], dropped: int) -> int:
    """``dropped`` moved up to where an update starts (its items share a stamp): an answer kept
    without its question would read as an answer to something else. Not past the last update."""
    whole = dropped
    while 0 < whole < len(kept) and kept[whole][0] == kept[whole - 1][0]:
        whole += 1
    return whole if whole < len(kept) else dropped


def _first_update(stamped: list[Stamped[T]]) -> int:
    """How many items the first update of ``stamped`` has."""
    return next((i for i, (said, _) in enumerate(stamped) if said != stamped[0][0]), len(stamped))


def _runs(stamped: list[Stamped[T]]) -> list[tuple[Said, list[Stamped[T]]]]:
    """``stamped`` cut where the update changes: one store call per update, at its own time."""
    return [(ts, list(group)) for ts, group in itertools.groupby(stamped, key=lambda pair: pair[0])]
