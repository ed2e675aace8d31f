"""Durable stores shared by every backend with state.

Two kinds of store, each with a reference implementation in RAM and durable ones:

* a **window store** keeps each session's verbatim messages. ``append`` normalises the new
  messages against the last stored one (:func:`~ovos_memory_plugins.messages.fold_into`),
  appends them and trims to the policy, all in one atomic step, so two processes appending to
  one session never lose or duplicate a message.
* a **record store** keeps one JSON-able dict per session (a summary, a list of facts).
  ``update(session_id, fn)`` is an atomic read-modify-write.

:func:`open_window_store` and :func:`open_record_store` choose the implementation from the
``backend`` name or, when that is not given, from the path: ``":memory:"`` or ``None`` keeps it
in RAM, a ``.json`` file uses the JSON store, anything else is SQLite (the default).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._compat import AgentMessage
from .._paths import is_memory_path, resolve_path
from ..errors import ConfigError
from .policy import WindowPolicy

__all__ = [
    "BACKENDS",
    "RecordStore",
    "WindowPolicy",
    "WindowStore",
    "backend_for",
    "open_record_store",
    "open_window_store",
]

#: The store backends a config may name.
BACKENDS = ("sqlite", "json", "memory")


class WindowStore(Protocol):
    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> None: ...
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
    def close(self) -> None: ...


def backend_for(path: str | None, backend: str | None = None) -> str:
    """The store backend for ``path``: explicit ``backend`` first, then the path's shape."""
    if is_memory_path(path):
        return "memory"
    if backend:
        if backend not in BACKENDS:
            raise ConfigError(f"'backend' is {backend!r}; allowed values are {', '.join(map(repr, BACKENDS))}")
        return backend
    return "json" if str(path).lower().endswith(".json") else "sqlite"


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
