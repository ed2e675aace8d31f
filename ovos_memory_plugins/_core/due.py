"""The keys with background work due, in the order they became due (an ordered, locked set).

Background workers (summaries, fact extraction, compaction) take one key at a time; a key
marked again while queued keeps its place, and one that failed goes back to the end.

``claim``/``done``/``retry`` are the job-queue surface the LLM memories use, shared with the
durable queue of a PostgreSQL store (``storage/postgres/jobs.py``): here a claimed job is simply
taken out of the set, and a failed one put back.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = ["DueQueue", "Job"]


class Job(NamedTuple):
    """A claimed piece of work: the key, and what the queue needs to settle it."""

    key: str
    token: Any = None


class DueQueue:
    """
    >>> due = DueQueue()
    >>> due.add("a"); due.add("b"); due.add("a")
    >>> due.pop(), len(due)
    ('a', 1)
    """

    #: Lost with the process (the records hold the work: a worker scans them at start).
    durable = False
    #: Nobody else queues work here: the worker need not look for it.
    poll: float | None = None

    def __init__(self) -> None:
        self._keys: dict[str, None] = {}  # dicts keep insertion order: an ordered set
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        with self._lock:
            self._keys[key] = None

    def discard(self, key: str) -> None:
        with self._lock:
            self._keys.pop(key, None)

    def pop(self) -> str | None:
        """The oldest due key, removed; None when nothing is due."""
        with self._lock:
            if not self._keys:
                return None
            key = next(iter(self._keys))
            del self._keys[key]
            return key

    # -- the job-queue surface -----------------------------------------------------------
    def claim(self) -> Job | None:
        key = self.pop()
        return None if key is None else Job(key)

    def done(self, job: Job) -> None:
        """The job's work is committed (nothing to do: claiming removed it)."""

    def retry(self, job: Job) -> None:
        self.add(job.key)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Queue work in the same transaction as the record that holds it (nothing to join here)."""
        yield

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)

    def __bool__(self) -> bool:
        return len(self) > 0
