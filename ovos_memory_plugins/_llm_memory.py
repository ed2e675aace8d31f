"""What the LLM-backed memories (longterm, entity) share: endpoint keys and their record store."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ._llm import ChatClient
from ._log import LOG
from ._paths import default_path, is_memory_path
from .config import option
from .errors import ConfigError, MemoryPluginError
from .persistence import JsonStore
from .storage.memory import MemoryRecordStore

__all__ = ["STORE_BACKENDS", "EndpointConfig", "chat_client", "open_session_store"]

STORE_BACKENDS = ("json", "sqlite", "memory")


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    api_url: str = option("http://localhost:8000/v1", "OpenAI-compatible endpoint (a local llama.cpp or Ollama)")
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
        if backend == "memory" or is_memory_path(path):
            return MemoryRecordStore(), path
        if backend == "sqlite":
            return open_sqlite(path), path
        return JsonStore(path), path
    except (MemoryPluginError, OSError) as exc:
        raise ConfigError(f"{owner}: cannot open db_path {path!r}: {exc}") from exc
