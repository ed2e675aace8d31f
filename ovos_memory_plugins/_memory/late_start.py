"""A composite's members whose store did not answer at start, started once it does.

A persona on a board that boots faster than its database server would otherwise run without
those members until it is restarted. Instead each waits here: a background thread tries to
start it again (after a couple of seconds, then less and less often, up to a minute apart), and
the updates the others stored meanwhile are kept for it (per session, bounded, in order) and
given to it before it joins them, so it misses nothing said while it waited. What changes
stored memory other than a turn (a forget, an import) is refused while a member waits: its store
would miss it.

Only a store that does not answer (:class:`~ovos_memory_plugins.errors.StoreUnavailable` among
the causes) makes a member wait; any other failure to start (a bad config, a missing extra) is
for good, and said once.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from .._core.log import LOG, LogOnce
from ..errors import StoreUnavailable

__all__ = ["LateStarts", "Waiting", "store_unreachable"]

#: Seconds before the first new attempt, and the longest pause between two.
FIRST_PAUSE_S, MAX_PAUSE_S = 2.0, 60.0
#: Seconds ``close()`` waits for an attempt in flight (a connect can take its whole timeout).
CLOSE_WAIT_S = 2.0


def store_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says a store does not answer."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StoreUnavailable):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


@dataclasses.dataclass
class Waiting:
    """A member that has not started: its place among the members, and what builds it."""

    position: int
    name: str
    module: str
    weight: float
    config: dict[str, Any]
    updates: list[tuple[str, list[Any]]] = dataclasses.field(default_factory=list)


class LateStarts:
    """The waiting members of one composite.

    ``start(waiting)`` builds a member's memory (raising as its constructor does; None: it cannot
    be a member after all, and says why itself); ``join(waiting,
    memory)`` adds it to the composite's members, called under ``lock`` (the composite holds it
    while it writes to its members and records the update here, so none falls between);
    ``gave_up(waiting, exc)`` is told of a member that failed for good.
    """

    def __init__(self, owner: str, lock: threading.RLock, start: Callable[[Waiting], Any],
                 join: Callable[[Waiting, Any], None], gave_up: Callable[[Waiting, BaseException], None],
                 limit: int):
        self._owner, self._lock = owner, lock
        self._start, self._join, self._gave_up = start, join, gave_up
        self._limit = limit  # items kept per session and member
        self._waiting: list[Waiting] = []
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._log = LogOnce()

    # -- what the composite asks -----------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """Whether a member still waits (once False, it stays False: none is ever added later)."""
        return bool(self._waiting)

    def names(self) -> list[str]:
        with self._lock:
            return [w.name for w in self._waiting]

    def add(self, waiting: Waiting) -> None:
        """Wait for ``waiting``'s store; the thread that tries it again starts with the first."""
        with self._lock:
            self._waiting.append(waiting)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"{self._owner}-late-start", daemon=True)
                self._thread.start()

    def record(self, session_id: str, batch: list[Any]) -> None:
        """An update the started members stored: kept for each waiting member (call under the lock)."""
        for w in self._waiting:
            w.updates.append((session_id, list(batch)))
            self._bound(w, session_id)

    def kept(self) -> int:
        """Updates kept for members that have not started."""
        with self._lock:
            return sum(len(w.updates) for w in self._waiting)

    def try_now(self) -> None:
        """Try the waiting members again without waiting for the pause to end (``flush``)."""
        self._wake.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            lost = sum(len(w.updates) for w in self._waiting)
            names = [w.name for w in self._waiting]
            self._waiting = []
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(CLOSE_WAIT_S)
        if lost:
            LOG.error(f"{self._owner}: closing before {', '.join(names)} could start; the {lost} update(s) kept "
                      "for them are lost to them")

    # -- the thread --------------------------------------------------------------------------
    def _bound(self, w: Waiting, session_id: str) -> None:
        mine = [i for i, (sid, _) in enumerate(w.updates) if sid == session_id]
        if len(mine) > self._limit:
            del w.updates[mine[0]]
            self._log.warning(f"bound:{w.name}", "%s: member %r has waited too long for its store; keeping only the "
                              "newest %d updates per session for it", self._owner, w.name, self._limit)

    def _run(self) -> None:
        pause = FIRST_PAUSE_S
        while True:
            self._wake.wait(pause)
            self._wake.clear()
            with self._lock:
                if self._closed or not self._waiting:
                    return
                waiting = list(self._waiting)
            for w in waiting:
                self._attempt(w)
            pause = min(pause * 2, MAX_PAUSE_S)

    def _attempt(self, w: Waiting) -> None:
        try:
            memory = self._start(w)
        except Exception as exc:  # noqa: BLE001 - the member's failure, not the thread's
            if store_unreachable(exc):
                return  # still down: said when it first failed, and by degraded()
            with self._lock:
                self._forget_waiting(w)
            self._gave_up(w, exc)
            return
        if memory is None:  # it cannot be a member after all (said by start)
            with self._lock:
                self._forget_waiting(w)
            return
        self._hand_over(w, memory)

    def _hand_over(self, w: Waiting, memory: Any) -> None:
        """Give ``memory`` what was kept for it, then make it a member: the last updates kept,
        and the joining, under the composite's lock, so an update lands either here or there."""
        while True:
            with self._lock:
                updates, w.updates = w.updates, []
                if not updates:
                    if not self._closed and w in self._waiting:
                        self._forget_waiting(w)
                        self._join(w, memory)
                        return
                    break  # closed meanwhile
            for session_id, batch in updates:
                try:
                    memory.update_history(list(batch), session_id)
                except Exception as exc:  # noqa: BLE001 - one update refused must not keep it out
                    self._log.error(f"replay:{w.name}", "%s: member %r could not store an update of %r kept while it "
                                    "waited (%s: %s)", self._owner, w.name, session_id, type(exc).__name__, exc)
        close = getattr(memory, "close", None)
        if callable(close):
            close()

    def _forget_waiting(self, w: Waiting) -> None:
        self._waiting = [x for x in self._waiting if x is not w]
