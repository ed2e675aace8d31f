"""A composite's members whose store did not answer at start, started once it does.

A persona on a board that boots faster than its database server would otherwise run without
those members until it is restarted. Instead each waits here: a background thread tries to
start it again (after a couple of seconds, then less and less often, up to a minute apart), and
the updates the others stored meanwhile are kept for it (the newest ``limit`` per session, in
the order they came) and given to it before it joins them, so it misses nothing said while it
waited. What changes stored memory other than a turn (a forget, an import) is refused while a
member waits: its store would miss it.

Only a store that does not answer (:class:`~ovos_memory_plugins.errors.StoreUnavailable` among
the causes) makes a member wait; any other failure to start (a bad config, a missing extra, a
database or user the server does not know) is for good, and said once.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from collections.abc import Callable
from typing import Any

from .._core.clock import said_now
from .._core.log import LOG, LogOnce
from ..errors import StoreUnavailable

__all__ = ["LateStarts", "Waiting", "store_unreachable"]

#: Seconds before the first new attempt, and the longest pause between two.
FIRST_PAUSE_S, MAX_PAUSE_S = 2.0, 60.0
#: Seconds ``close()`` waits for an attempt or a replay in flight (a connect can take its timeout).
CLOSE_WAIT_S = 5.0

Update = tuple[int, str, list[Any], float]  # (order of arrival, session id, the update's messages, when)


def store_unreachable(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, says a store does not answer."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StoreUnavailable):
            return True
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return False


@dataclasses.dataclass
class Waiting:
    """A member that has not started: its place among the members, and what builds it."""

    position: int
    name: str
    module: str
    weight: float
    config: dict[str, Any]
    kept: dict[str, collections.deque[Update]] = dataclasses.field(default_factory=dict)
    replaying: int = 0  # updates taken for the replay in flight and not stored yet

    def count(self) -> int:
        return sum(len(q) for q in self.kept.values()) + self.replaying


class LateStarts:
    """The waiting members of one composite.

    ``start(waiting)`` builds a member's memory (raising as its constructor does; None: it cannot
    be a member after all, and says why itself); ``replay(memory, session_id, messages, ts)``
    gives it one update it missed, stored with the time the others stored it; ``join(waiting,
    memory)`` adds it to the composite's members. Both ``join`` and :meth:`record` run under
    ``lock``, which the composite holds while it writes to its members and records the update
    here: an update lands either in what is kept or with the members, never between.
    ``gave_up(waiting, exc)`` says a member failed for good; ``settled()`` is called (outside the
    lock) once no member waits any more, after one joined.
    """

    def __init__(self, owner: str, lock: threading.RLock, start: Callable[[Waiting], Any],
                 replay: Callable[[Any, str, list[Any], float], None], join: Callable[[Waiting, Any], None],
                 gave_up: Callable[[Waiting, BaseException], None], settled: Callable[[], object], limit: int):
        self._owner, self._lock = owner, lock
        self._start, self._replay, self._join, self._gave_up = start, replay, join, gave_up
        self._settled = settled
        self._limit = limit  # updates kept per session and member
        self._order = itertools.count()
        self._waiting: list[Waiting] = []
        self._wake = threading.Event()
        self._passes = 0  # attempts made at every waiting member, since the start
        self._passed = threading.Condition(lock)
        self._closed = False
        self._attempting = False  # a pass over the waiting members is under way
        self._thread: threading.Thread | None = None
        self._log = LogOnce()

    # -- what the composite asks -----------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """Whether a member still waits (once False, it stays False: none is added after start)."""
        return bool(self._waiting)

    def names(self) -> list[str]:
        with self._lock:
            return [w.name for w in self._waiting]

    def add(self, waiting: Waiting) -> None:
        with self._lock:
            self._waiting.append(waiting)

    def start(self) -> None:
        """Start trying the waiting members again (once the composite is built: a member that
        joins needs the others in place)."""
        with self._lock:
            if self._waiting and self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=f"{self._owner}-late-start", daemon=True)
                self._thread.start()

    def record(self, session_id: str, batch: list[Any]) -> None:
        """An update the started members stored, kept for each waiting member (under the lock)."""
        update = (next(self._order), session_id, list(batch), said_now())  # a replay's own time, nested
        for w in self._waiting:
            kept = w.kept.setdefault(session_id, collections.deque(maxlen=self._limit))
            if len(kept) == self._limit:
                self._log.warning(f"bound:{w.name}", "%s: member %r has waited too long for its store; keeping only "
                                  "the newest %d updates per session for it", self._owner, w.name, self._limit)
            kept.append(update)

    def kept(self) -> int:
        """Updates not yet given to a member that waits (kept, or in a replay not done)."""
        with self._lock:
            return sum(w.count() for w in self._waiting)

    def try_now(self, timeout: float | None) -> bool:
        """Try the waiting members again at once, and wait (up to ``timeout`` seconds, None: as
        long as it takes) until that attempt, and the replay and joining of a member it started,
        are done. True when no member waits any more."""
        with self._lock:
            if self._thread is None or not self._waiting:
                return not self._waiting
            # A pass under way may have tried before the store came back: the one after it counts.
            wanted = self._passes + (2 if self._attempting else 1)
            self._wake.set()
            self._passed.wait_for(lambda: self._passes >= wanted or not self._waiting or self._closed, timeout)
            return not self._waiting

    def close(self) -> None:
        """One last attempt (a store back since the last one still gets what was kept for it),
        then stop; what a replay in flight has not stored, and what is kept, is lost (said)."""
        if self._thread is not threading.current_thread():
            self.try_now(CLOSE_WAIT_S)
        with self._lock:
            self._closed = True
            thread = self._thread
            self._passed.notify_all()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)
        with self._lock:
            waiting, self._waiting = self._waiting, []
        lost = sum(w.count() for w in waiting)
        if lost:
            whose = "its store" if len(waiting) == 1 else "their stores"
            LOG.error(f"{self._owner}: closing before {', '.join(w.name for w in waiting)} could start ({whose} "
                      f"never answered): the {lost} update(s) said meanwhile were never stored there")

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        pause = FIRST_PAUSE_S
        while True:
            self._wake.wait(pause)
            self._wake.clear()
            with self._lock:
                if self._closed or not self._waiting:
                    self._passed.notify_all()
                    return
                waiting, self._attempting = list(self._waiting), True
            joined = [self._attempt(w) for w in waiting]
            if any(joined) and not self._waiting:
                try:
                    self._settled()
                except Exception as exc:  # noqa: BLE001 - the composite's own work, said once
                    self._log.error("settled", "%s: after its members started: %s: %s", self._owner,
                                    type(exc).__name__, exc)
            with self._lock:
                self._passes, self._attempting = self._passes + 1, False
                self._passed.notify_all()
            pause = min(pause * 2, MAX_PAUSE_S)

    def _attempt(self, w: Waiting) -> bool:
        """Try to start ``w``; True when it joined the members."""
        try:
            memory = self._start(w)
        except Exception as exc:  # noqa: BLE001 - the member's failure, not the thread's
            if not store_unreachable(exc):  # still down: said when it first failed, and by degraded()
                self._give_up(w, exc)
            return False
        if memory is None:  # it cannot be a member after all (said by start)
            self._give_up(w, None)
            return False
        return self._hand_over(w, memory)

    def _give_up(self, w: Waiting, exc: BaseException | None) -> None:
        with self._lock:
            self._waiting = [x for x in self._waiting if x is not w]
            lost = w.count()
        if exc is not None:
            self._gave_up(w, exc)
        if lost:
            LOG.error(f"{self._owner}: member {w.name!r} will not start; the {lost} update(s) kept for it are dropped")

    def _hand_over(self, w: Waiting, memory: Any) -> bool:
        """Give ``memory`` what was kept for it, oldest first, then make it a member: the last
        updates kept, and the joining, under the lock, so an update lands either here or there.
        False (``memory`` closed) when it was closed meanwhile, or the store went away again."""
        refused = False
        while not refused:
            with self._lock:
                if self._closed:
                    break
                updates = sorted(u for kept in w.kept.values() for u in kept)
                w.kept, w.replaying = {}, len(updates)
                if not updates:
                    self._join(w, memory)  # the members first: a turn that no longer sees it waiting
                    self._waiting = [x for x in self._waiting if x is not w]  # writes to them
                    return True
            for i, (_, session_id, batch, ts) in enumerate(updates):
                if self._closed:
                    break  # close() says what is left
                try:
                    self._replay(memory, session_id, batch, ts)
                except Exception as exc:  # noqa: BLE001 - one update refused must not keep it out
                    self._log.error(f"replay:{w.name}", "%s: member %r could not store an update of %r kept while it "
                                    "waited (%s: %s)", self._owner, w.name, session_id, type(exc).__name__, exc)
                refused = _holds_refused(memory)
                if refused:  # the store went away again: wait for it, the rest kept here
                    _discard_held(memory)
                    self._keep_again(w, updates[i:])
                    break
                with self._lock:
                    w.replaying -= 1
        close = getattr(memory, "close", None)
        if callable(close):
            close()
        return False

    def _keep_again(self, w: Waiting, updates: list[Update]) -> None:
        """``updates`` (taken for a replay the store refused) kept again, with what came since,
        in the order they came, the newest ``limit`` per session."""
        with self._lock:
            sessions: dict[str, list[Update]] = {}
            for update in [*updates, *(u for kept in w.kept.values() for u in kept)]:
                sessions.setdefault(update[1], []).append(update)
            w.kept = {sid: collections.deque(sorted(kept), maxlen=self._limit) for sid, kept in sessions.items()}
            w.replaying = 0
        self._log.warning(f"again:{w.name}", "%s: the store of %r went away while it was given what it missed; "
                          "the rest is kept until it answers again", self._owner, w.name)


def _holds_refused(memory: Any) -> bool:
    """Whether ``memory`` (one of this package's) holds an update its store refused: a replay
    that goes on would pile them up there, where the bound counts messages, not updates."""
    held = getattr(memory, "_held", None)
    return held is not None and bool(held.count())


def _discard_held(memory: Any) -> None:
    """Drop what ``memory`` holds (kept here again): its close would otherwise try to store it."""
    held = memory._held
    for session_id in held.sessions():
        held.drop(session_id)
