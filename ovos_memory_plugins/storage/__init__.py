"""Durable stores shared by every backend with state.

Two kinds of store, each with a reference implementation in RAM and durable ones:

* a **window store** keeps each session's verbatim messages. ``append`` normalises the new
  messages against the last stored one (:func:`~ovos_memory_plugins.messages.fold_into`),
  appends them and trims to the policy, all in one atomic step, so two processes appending to
  one session never lose or duplicate a message.
* a **record store** keeps one JSON-able dict per session (a summary, a list of facts).
  ``update(session_id, fn)`` is an atomic read-modify-write.

:func:`open_window_store` and :func:`open_record_store` choose the implementation from the
``backend`` name or, when that is not given, from the file itself (:func:`backend_for`):
``":memory:"`` or ``None`` keeps it in RAM; an existing file is read by its first bytes (the
SQLite header: SQLite; ``{``: JSON, as the reference writes at any path, suffix or not); any
other path (a new or empty file) by its name: ``.json`` is JSON, anything else SQLite.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._core.compat import AgentMessage
from .._core.paths import check_store_path, is_memory_path, resolve_path
from ..errors import ConfigError, StorageError
from .policy import WindowPolicy
from .readonly import is_read_only, read_only

__all__ = [
    "BACKENDS",
    "RecordStore",
    "WindowPolicy",
    "WindowStore",
    "backend_for",
    "open_record_store",
    "open_window_store",
    "read_only",
]

#: The store backends a config may name.
BACKENDS = ("sqlite", "json", "memory")


class WindowStore(Protocol):
    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> None: ...
    def replace(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> list[AgentMessage]: ...
    def load(self, session_id: str, policy: WindowPolicy) -> list[AgentMessage]: ...
    def sessions(self) -> list[str]: ...
    def forget(self, session_id: str) -> int: ...
    def close(self) -> None: ...


class RecordStore(Protocol):
    def load(self, session_id: str) -> dict[str, Any]: ...
    def load_field(self, session_id: str, field: str) -> Any: ...
    def save(self, session_id: str, record: dict[str, Any]) -> None: ...
    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]: ...
    def sessions(self) -> list[str]: ...
    def delete(self, session_id: str) -> bool: ...
    def compact(self) -> bool: ...
    def close(self) -> None: ...


#: The first 16 bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def backend_for(path: str | None, backend: str | None = None) -> str:
    """The store backend for ``path``: explicit ``backend`` first, then the file's content, then its name.

    The content wins over the name because the reference writes JSON at any path (its default
    ``~/.local/share/recency_memory`` has no suffix): judged by name, such a file would be
    opened as SQLite and quarantined as corrupt.
    """
    if is_memory_path(path):
        return "memory"
    if backend:
        if backend not in BACKENDS:
            raise ConfigError(f"'backend' is {backend!r}; allowed values are {', '.join(map(repr, BACKENDS))}")
        return backend
    return _backend_by_content(str(path)) or ("json" if str(path).lower().endswith(".json") else "sqlite")


def _backend_by_content(path: str) -> str | None:
    """``"sqlite"`` or ``"json"`` when the file's first bytes say so; None if absent, empty or unclear."""
    real = check_store_path(resolve_path(path))  # never read a FIFO or a device: it may block or be endless
    try:
        with open(real, "rb") as f:
            head = f.read(4096)
    except OSError:  # missing (a new store) or unreadable: the name decides, the store reports errors
        return None
    if head.startswith(_SQLITE_HEADER):
        return "sqlite"
    if head.lstrip(b" \t\r\n").startswith(b"{"):
        return "json"
    if head and is_read_only():  # a read-only command never quarantines: it says what the file is not
        raise StorageError(f"{real} is neither an SQLite nor a JSON memory store; it was left as it is")
    return None  # damaged or foreign bytes: the store of the name's kind quarantines them


def open_window_store(path: str | None, backend: str | None = None, table: str = "window") -> WindowStore:
    kind = backend_for(path, backend)
    if kind == "memory":
        from .memory import MemoryWindowStore
        return MemoryWindowStore()
    if kind == "json":
        from .jsonfile import JsonRecordStore
        from .windows import RecordWindowStore
        return RecordWindowStore(JsonRecordStore(resolve_path(str(path))), owns_store=True)
    from .sqlite import open_database
    from .windows import SqliteWindowStore
    return SqliteWindowStore(open_database(str(path)), table, owns_db=True)


def open_record_store(path: str | None, backend: str | None = None, table: str = "records") -> RecordStore:
    kind = backend_for(path, backend)
    if kind == "memory":
        from .memory import MemoryRecordStore
        return MemoryRecordStore()
    if kind == "json":
        from .jsonfile import JsonRecordStore
        return JsonRecordStore(resolve_path(str(path)))
    from .records import SqliteRecordStore
    from .sqlite import open_database
    return SqliteRecordStore(open_database(str(path)), table, owns_db=True)
