"""One open database per store location and mode, shared by every store of the process.

Stores of several backends often point at the same file or server (the composite's members, a
retriever and its vector store). Sharing one handle gives them one connection, one lock and one
transaction, and closing happens when the last of them lets go.

Sharing a file is not sharing its tables: :class:`StoreClaim` names the part of a store a memory
writes, so two memories that would write the same rows (two keyword memories on one file and
table) are told apart from two that merely share the file.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Generic, NamedTuple, Protocol, TypeVar

__all__ = ["Closable", "SharedHandles", "StoreClaim", "WHOLE_FILE"]

#: The part a memory claims of a file it writes whole (a JSON store).
WHOLE_FILE = "*"


class Closable(Protocol):
    _closed: bool

    def close(self) -> None: ...


Handle = TypeVar("Handle", bound=Closable)


class SharedHandles(Generic[Handle]):
    """Reference-counted handles by key: ``take`` opens or reuses, ``release`` closes the last."""

    def __init__(self) -> None:
        self._handles: dict[str, tuple[Handle, int]] = {}
        self._lock = threading.RLock()  # re-entered: opening one handle asks which are open

    @staticmethod
    def key(location: str, read_only: bool) -> str:
        """A read-only handle is never shared with a writable one on the same location."""
        return f"{location}\0ro" if read_only else location

    def take(self, key: str, open_new: Callable[[], Handle]) -> Handle:
        with self._lock:
            handle, refs = self._handles.get(key, (None, 0))
            if handle is None or handle._closed:
                handle, refs = open_new(), 0
            self._handles[key] = (handle, refs + 1)
            return handle

    def release(self, key: str, handle: Handle) -> None:
        with self._lock:
            current, refs = self._handles.get(key, (None, 0))
            if current is not handle:
                handle.close()  # not (or no longer) the shared one: its own to close
                return
            if refs <= 1:
                del self._handles[key]
                handle.close()
            else:
                self._handles[key] = (handle, refs - 1)

    def values(self) -> Iterator[Handle]:
        """The open handles (a snapshot), for tools that inspect every store of the process."""
        with self._lock:
            return iter([handle for handle, _refs in self._handles.values()])


class StoreClaim(NamedTuple):
    """The part of a store a memory writes: the store's location (a resolved file or a redacted
    PostgreSQL URL) and its tables (their name or prefix; :data:`WHOLE_FILE` for a file written whole).

    >>> StoreClaim("/d/m.db", "lexical_memory").overlaps(StoreClaim("/d/m.db", "local_rag"))
    False
    >>> StoreClaim("/d/m.json", WHOLE_FILE).overlaps(StoreClaim("/d/m.json", "window"))
    True
    """

    location: str
    part: str

    def overlaps(self, other: StoreClaim | None) -> bool:
        return other is not None and self.location == other.location and (
            self.part == other.part or WHOLE_FILE in (self.part, other.part))
