"""What the LLM-backed memories (longterm, entity) share: endpoint keys, record store, worker."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ._llm import ChatClient
from ._log import LOG, LogOnce
from ._memory import MemoryPlugin
from ._paths import default_path, is_memory_path
from ._worker import BackgroundWorker
from .config import option
from .errors import ConfigError, MemoryPluginError
from .storage import open_record_store

__all__ = ["STORE_BACKENDS", "EndpointConfig", "LLMMemory", "chat_client", "open_session_store"]

STORE_BACKENDS = ("json", "sqlite", "memory")


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    api_url: str | None = option("http://localhost:8000/v1", "OpenAI-compatible endpoint (a local llama.cpp or "
                                 "Ollama); null or empty: no model, the offline fallback only", kind=str,
                                 nullable=True)
    model: str = option("", "model name; empty: the first model the server lists")
    api_key: str | None = option(None, "bearer token for servers that require one", kind=str)
    request_timeout: float = option(30.0, "seconds one LLM request may take", minimum=0.1)


def chat_client(settings: EndpointConfig) -> ChatClient:
    return ChatClient(settings.api_url, settings.model, settings.request_timeout, settings.api_key)


def open_session_store(owner: str, backend: str, db_path: str | None, stem: str, unknown: str,
                       open_sqlite: Callable[[str], Any]) -> tuple[Any, str]:
    """The record store for ``backend`` and the path it uses.

    Args:
        owner: the plugin name, for messages.
        backend: ``json``, ``sqlite`` or ``memory``; any other value means ``unknown`` (the
            reference accepted anything, so an old persona file must still load).
        db_path: the configured file, or None for ``$XDG_DATA_HOME/ovos/<stem>.json|.db``.
        open_sqlite: builds the SQLite store for a path (each backend keeps its own schema).
    """
    if backend not in STORE_BACKENDS:
        LOG.warning(f"{owner}: unknown backend {backend!r}; using {unknown} (as the reference)")
        backend = unknown
    path = db_path or default_path(f"{stem}.db" if backend == "sqlite" else f"{stem}.json")
    try:
        if backend == "sqlite" and not is_memory_path(path):
            return open_sqlite(path), path  # each backend keeps its own (reference) schema
        return open_record_store(path, backend), path
    except (MemoryPluginError, OSError) as exc:
        raise ConfigError(f"{owner}: cannot open db_path {path!r}: {exc}") from exc


class LLMMemory(MemoryPlugin):
    """Base of memories keeping one record per key and doing LLM work off the turn.

    Subclasses declare ``store_stem`` (the default file name), ``unknown_backend`` and three
    hooks: ``_open_sqlite(path)``, ``_has_work(record)`` and ``_work_on(key)``. The work queue
    is the set of record keys with work due; the records themselves hold the work (messages not
    yet summarised, exchanges not yet read for facts), so a restart resumes it: the first
    worker step scans the store once.
    """

    store_stem: ClassVar[str]
    unknown_backend: ClassVar[str] = "json"

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        s = self.settings
        self._store, self.db_path = open_session_store(self.plugin_name, s.backend, s.db_path, self.store_stem,
                                                       self.unknown_backend, self._open_sqlite)
        self.client = chat_client(s)
        self._log = LogOnce()
        self._due: dict[str, None] = {}  # an ordered set of keys with work due
        self._due_lock = threading.Lock()
        self._scan = True  # look for work left by an earlier run, once, off the turn
        self._worker = BackgroundWorker(f"{self.plugin_name}-worker", self._step)
        try:
            if self._store.sessions():
                self._worker.notify()
        except (MemoryPluginError, OSError) as exc:
            LOG.error(f"{self.plugin_name}: cannot read {self.db_path}: {exc}")

    # -- hooks -------------------------------------------------------------------------------
    def _open_sqlite(self, path: str) -> Any:
        raise NotImplementedError

    def _has_work(self, record: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def _work_on(self, key: str) -> None:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def _load(self, key: str) -> dict[str, Any]:
        try:
            return dict(self._store.load(key))
        except (MemoryPluginError, OSError) as exc:
            self._log.error("read", f"{self.plugin_name}: cannot read {self.db_path}: {exc}")
            return {}

    def _load_field(self, key: str, field: str) -> Any:
        """One field of a record: a turn reads the facts, not the queue of exchanges beside them."""
        try:
            return self._store.load_field(key, field)
        except (MemoryPluginError, OSError) as exc:
            self._log.error("read", f"{self.plugin_name}: cannot read {self.db_path}: {exc}")
            return None

    def _mark_due(self, key: str, wake: bool = True) -> None:
        with self._due_lock:
            self._due[key] = None
        if wake:
            self._worker.notify()

    def _unmark(self, key: str) -> None:
        with self._due_lock:
            self._due.pop(key, None)

    def _step(self) -> bool:
        if self._scan:
            for key in self._store.sessions():
                if self._has_work(self._store.load(key)):
                    self._mark_due(key, wake=False)
            self._scan = False  # only once it succeeded: a failed scan is retried with the step
        with self._due_lock:
            if not self._due:
                return False
            key = next(iter(self._due))
            del self._due[key]
        try:
            self._work_on(key)
        except BaseException:
            self._mark_due(key, wake=False)  # the worker retries after its delay
            raise
        with self._due_lock:
            return bool(self._due)

    # -- lifecycle -----------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        return self._worker.flush(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._worker.close(timeout=self.settings.request_timeout + 5)
        self._store.close()
        super().close()
