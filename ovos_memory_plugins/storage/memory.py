"""Stores held in RAM: the reference implementations, and what ``":memory:"`` gives."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from .._core.clock import said_now
from .._core.compat import AgentMessage
from ..messages import copy_message
from .policy import WindowPolicy
from .windows import Chooser, Entry, append_entries, prune_entries

__all__ = ["MemoryRecordStore", "MemoryWindowStore"]


class MemoryWindowStore:
    """Each session's window as a list of ``(timestamp, message copy)`` in RAM."""

    def __init__(self) -> None:
        self._windows: dict[str, list[Entry]] = {}
        self._lock = threading.Lock()

    def append(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> None:
        with self._lock:
            entries = self._windows.get(session_id, [])
            self._windows[session_id] = append_entries(entries, messages, policy, said_now())

    def replace(self, session_id: str, messages: list[AgentMessage], policy: WindowPolicy) -> list[AgentMessage]:
        with self._lock:
            entries = append_entries([], messages, policy, time.time())
            if entries:
                self._windows[session_id] = entries
            else:
                self._windows.pop(session_id, None)
            return [copy_message(msg) for _, msg in entries]

    def load(self, session_id: str, policy: WindowPolicy) -> list[AgentMessage]:
        with self._lock:
            entries = prune_entries(self._windows.get(session_id, []), policy, time.time())
            return [copy_message(msg) for _, msg in entries]

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._windows)

    def forget(self, session_id: str) -> int:
        with self._lock:
            return len(self._windows.pop(session_id, []))

    def drop(self, session_id: str, choose: Chooser) -> int:
        """Delete the messages ``choose`` picks; returns how many."""
        with self._lock:
            entries = self._windows.get(session_id, [])
            doomed = choose([msg for _, msg in entries])
            kept = [e for i, e in enumerate(entries) if i not in doomed]
            if kept:
                self._windows[session_id] = kept
            else:
                self._windows.pop(session_id, None)
            return len(doomed)

    def close(self) -> None:
        pass


class MemoryRecordStore:
    """One record per session in RAM, kept as JSON text.

    Text, because it makes every read a fresh copy at C speed (deepcopy of a record with a few
    hundred facts cost 0.4 ms a turn) and because a record that is not JSON fails here as it
    would in a file store.
    """

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str) -> dict[str, Any]:
        with self._lock:
            text = self._records.get(session_id)
        return json.loads(text) if text is not None else {}

    def load_field(self, session_id: str, field: str) -> Any:
        return self.load(session_id).get(field)

    def save(self, session_id: str, record: dict[str, Any]) -> None:
        text = json.dumps(record, ensure_ascii=False)
        with self._lock:
            self._records[session_id] = text

    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            text = self._records.get(session_id)
            record = fn(json.loads(text) if text is not None else {})
            self._records[session_id] = json.dumps(record, ensure_ascii=False)
            return record

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._records)

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._records.pop(session_id, None) is not None

    def compact(self) -> bool:
        return True

    def close(self) -> None:
        pass
