"""What every backend of this package shares: config handling, lifecycle and data ownership."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from ._compat import AgentContextManager
from .config import parse_config

__all__ = ["MemoryPlugin"]


class MemoryPlugin(AgentContextManager):
    """Base of this package's backends (not part of the OPM contract).

    Subclasses set ``Config`` (a frozen dataclass of :func:`~ovos_memory_plugins.config.option`
    fields) and ``plugin_name`` (the entry-point name, used in messages). The caller's dict is
    deep-copied into ``self.config`` and parsed once into ``self.settings``.

    Beyond the three contract methods every backend offers ``forget``, ``export``,
    ``import_session``, ``sessions``, ``flush`` and ``close``, and works as a context manager.
    """

    Config: ClassVar[type]
    plugin_name: ClassVar[str] = "ovos-memory-plugin"
    #: Keys read by something else than ``Config`` (so they are not reported as unknown).
    extra_config_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Mapping[str, Any] | None = None):
        # Private injection keys (``_con``, ``_embedder``) hold live objects: never deep-copy them.
        raw = dict(config or {})
        private = {k: v for k, v in raw.items() if k.startswith("_")}
        public = copy.deepcopy({k: v for k, v in raw.items() if not k.startswith("_")})
        self.settings: Any = parse_config(self.Config, public, self.plugin_name, self.extra_config_keys)
        super().__init__({**public, **private})
        self._closed = False

    @property
    def system_prompt(self) -> str:
        return str(getattr(self.settings, "system_prompt", "") or "")

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        """The session ids this memory holds anything for."""
        return []

    def forget(self, session_id: str) -> dict[str, int]:
        """Delete everything stored for ``session_id``; returns counts of what was removed."""
        return {}

    def export(self, session_id: str) -> dict[str, Any]:
        """Everything stored for ``session_id`` as JSON-ready data (see :meth:`import_session`)."""
        return {"plugin": self.plugin_name, "session_id": session_id}

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        """Load what :meth:`export` produced (into ``session_id`` if given)."""

    # -- lifecycle -----------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until background work (embedding, summaries) is done; True if it finished."""
        return True

    def close(self) -> None:
        """Finish background work and release files and connections. Idempotent."""
        self._closed = True

    def __enter__(self) -> MemoryPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
