"""A background thread that keeps slow work (embedding, LLM calls) off the turn.

The owner supplies ``step()``: do one batch of pending work and return True while more is
pending. ``notify()`` wakes the thread after new work is queued, ``flush()`` waits until every
batch queued before the call is done, ``close()`` drains and stops. A ``step`` that raises is
logged once and retried after ``retry_delay``; the thread never dies of it.

With ``batch_delay``, work arriving in a burst is gathered for that long before ``step`` runs,
so one transaction carries many items; ``flush()`` and ``close()`` cut the wait short.

The thread marks itself as background work (:func:`in_background`: an embedder gives such
calls fewer threads and lets a turn's calls go first) and, where the OS allows it per thread
(Linux), runs at a lower scheduling priority (:data:`BACKGROUND_NICE`), so on a small machine a
turn's threads get the cores first.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from .log import LogOnce

__all__ = ["BACKGROUND_NICE", "BackgroundWorker", "in_background", "run_as_background", "wakeups_deferred"]

#: Niceness added to a worker thread. Measured on 2 busy cores with local-rag indexing long
#: replies: a turn's median fell from 49-97 ms to 37-58 ms with +10 (docs/benchmarks.md).
BACKGROUND_NICE = 10

_local = threading.local()


def in_background() -> bool:
    """True on a thread doing background work (a :class:`BackgroundWorker`'s, or one that called
    :func:`run_as_background`): its model calls yield to a turn's."""
    return bool(getattr(_local, "background", False))


def run_as_background() -> None:
    """Mark the calling thread as background work and lower its scheduling priority.

    The priority is set for this thread only where a thread id names one thread (Linux);
    elsewhere the mark alone applies. It is never raised again: an unprivileged process may
    only lower its priority.
    """
    if getattr(_local, "background", False):
        return
    _local.background = True
    if not sys.platform.startswith("linux"):  # elsewhere a thread id may name another process
        return
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + BACKGROUND_NICE))
    except OSError:  # not permitted (a sandbox): the mark alone applies
        pass


@contextlib.contextmanager
def wakeups_deferred() -> Iterator[None]:
    """Within the block, a worker's :meth:`BackgroundWorker.notify` on this thread records the
    work but wakes the worker only when the (outermost) block ends, whatever it raised.

    A composite's ``update_history`` writes through to several members: woken at once, the
    first member's indexer (tokenizing, embedding) competes with the members still writing for
    the interpreter lock (measured at 10,000 stored exchanges: a composite's update cost its
    members' plus 2.3 ms); woken after the last write, it starts as a member's alone does, when
    the update has returned. ``flush()`` is never deferred.
    """
    if getattr(_local, "deferred", None) is not None:
        yield
        return
    held: list[BackgroundWorker] = []
    _local.deferred = held
    try:
        yield
    finally:
        _local.deferred = None
        for worker in dict.fromkeys(held):
            worker.notify()


class BackgroundWorker:
    def __init__(self, name: str, step: Callable[[], bool], retry_delay: float = 5.0, poll: float | None = None,
                 batch_delay: float = 0.0, failure_level: str = "error"):
        """
        Args:
            name: thread name, also used in log lines.
            step: does one batch; returns True while more work is pending.
            retry_delay: seconds to wait after ``step`` raised.
            poll: if set, also wake every ``poll`` seconds (work queued by other processes).
            batch_delay: seconds to let new work gather before a step (0: start at once).
            failure_level: how a failing step is logged (once): "error", or "warning" when
                nothing is lost meanwhile and the owner reports the cause itself.
        """
        self.name = name
        self._step = step
        self._retry_delay = retry_delay
        self._poll = poll
        self._batch_delay = batch_delay
        self._report_failure = getattr(LogOnce, failure_level)
        self._hurry = False  # flush() or close() waits: skip the batching delay
        self._gathering = False
        self._cond = threading.Condition()
        self._requested = 0  # notify() calls so far
        self._settled = 0    # the request count at the last moment step() found nothing left
        self._failed = -1    # the request count seen by the last step() that raised
        #: Why the last step raised, until one succeeds (None: it did not).
        self.problem: str | None = None
        self._stop = False
        self._log = LogOnce()
        self._thread: threading.Thread | None = None

    def notify(self) -> None:
        """New work was queued: start the thread if needed and wake it (inside
        :func:`wakeups_deferred`, when that block ends)."""
        held = getattr(_local, "deferred", None)
        if held is not None:
            held.append(self)
            return
        self._wake()

    def _wake(self) -> None:
        with self._cond:
            self._requested += 1
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            if not self._gathering:  # waking a gathering thread per item would cost each caller a switch
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the work queued before this call is done; False on timeout or failure."""
        if self._thread is None:
            return True
        if self._stop:
            return self._settled >= self._requested
        self._wake()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
            target = self._requested
            while self._settled < target and self._failed < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return self._settled >= target

    def close(self, timeout: float | None = 30.0) -> bool:
        """Drain what is queued, then stop the thread: both within ``timeout`` (a step still running
        then is left to finish on its own; the thread is a daemon)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        drained = self.flush(timeout)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return drained

    def _run(self) -> None:
        run_as_background()
        gather = True  # woken by new work (not continuing a backlog): let the burst gather
        while True:
            with self._cond:
                if gather:
                    self._gather()
                if self._stop:
                    return
                seen = self._requested
            try:
                more = self._step()
            except Exception as exc:  # noqa: BLE001 - the worker must outlive any failure
                self.problem = f"background work failed ({exc}); retrying"
                self._report_failure(self._log, "step", "%s: background work failed (%s); will retry", self.name, exc)
                self._wait_after_failure(seen)
                continue
            self.problem = None
            self._log.clear("step", f"{self.name}: background work recovered")
            gather = not more
            if more:
                continue
            with self._cond:
                self._settled = max(self._settled, seen)
                self._cond.notify_all()
                if self._requested == seen and not self._stop:
                    self._cond.wait(self._poll)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`close` has asked the thread to stop."""
        return self._stop

    @property
    def failing(self) -> bool:
        """Whether the last step raised: waiting for the work now would wait for a retry."""
        return self.problem is not None

    def _gather(self) -> None:
        """Wait up to ``batch_delay`` (condition held) unless someone is waiting for the work."""
        deadline = time.monotonic() + self._batch_delay
        self._gathering = True
        while not (self._stop or self._hurry):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cond.wait(remaining)
        self._gathering = self._hurry = False

    def _wait_after_failure(self, seen: int) -> None:
        with self._cond:
            self._failed = max(self._failed, seen)
            self._cond.notify_all()
            if not self._stop:
                self._cond.wait(self._retry_delay)
