"""One process at a time does a store's background model work (summaries, fact extraction).

Two processes on one store file (a persona and ``ovos-memory serve``, two personas of a
household) each queue the work their own turns make, and each would send the same backlog to
the model: the second fold is thrown away when it meets the first one's commit, after costing
as many model calls (measured: two processes writing one session made twice the requests of
one). An exclusive ``flock`` on ``<store>.work.lock``, held for one piece of work, makes the
other process wait, then find the work done (its record no longer due) and skip it.

The lock dies with its process (``flock`` is released when the descriptor closes, a kill -9
included), so a crashed worker never blocks the others. Without ``fcntl`` (Windows) there is
no lock, and the stores' own conflict checks keep the data right as before.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

from ..errors import MemoryPluginError
from .log import LOG
from .paths import open_lock_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["GaveUp", "WorkLock"]

#: How often a waiting worker looks again (a piece of work takes seconds: the wait is cheap).
POLL_S = 0.2


class GaveUp(Exception):
    """The lock was not taken: ``give_up()`` said to stop waiting (the worker is closing)."""


class WorkLock:
    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._failed = False
        self._lock = threading.Lock()  # one descriptor per instance, opened once

    @contextlib.contextmanager
    def held(self, give_up: Callable[[], bool]) -> Iterator[None]:
        """Hold the lock for the block, waiting while another process holds it; :class:`GaveUp`
        when ``give_up()`` turns true meanwhile."""
        fd = self._descriptor()
        if fd is None:
            yield
            return
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if give_up():
                    raise GaveUp(self.path) from None
                time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _descriptor(self) -> int | None:
        """The lock file, opened once; None without ``fcntl`` or when it cannot be made (a
        read-only folder): the work then runs unlocked, as before this lock, and says so once."""
        with self._lock:
            if self._fd is None and fcntl is not None and not self._failed:
                try:
                    self._fd = open_lock_file(self.path)
                except (OSError, MemoryPluginError) as exc:
                    self._failed = True
                    LOG.warning(f"cannot use the work lock {self.path} ({exc}); another process sharing this "
                                "store may repeat this one's model work")
            return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
