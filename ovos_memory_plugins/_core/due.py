"""The keys with background work due, in the order they became due (an ordered, locked set).

Background workers (summaries, fact extraction, compaction) take one key at a time; a key
marked again while queued keeps its place, and one that failed goes back to the end.
"""
from __future__ import annotations

import threading

__all__ = ["DueQueue"]


class DueQueue:
    """
    >>> due = DueQueue()
    >>> due.add("a"); due.add("b"); due.add("a")
    >>> due.pop(), len(due)
    ('a', 1)
    """

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

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)

    def __bool__(self) -> bool:
        return len(self) > 0
