"""A store that does not answer, as a backend's constructor reports it (for the tests of waiting)."""
from __future__ import annotations

from typing import Any

from ovos_memory_plugins.errors import ConfigError, StoreUnavailable


def refuse_unless_up(switch: Any) -> None:
    """Count an attempt on ``switch``; raise as a backend does while its store does not answer
    (a ConfigError whose cause is a StoreUnavailable) unless ``switch.up``, and a bad config's
    ConfigError when ``switch.broken``."""
    switch.attempts += 1
    if switch.broken:
        raise ConfigError("'max_history' must be a number")
    if not switch.up:
        try:
            raise ConnectionRefusedError("connection refused")
        except ConnectionRefusedError as exc:  # as a backend wraps it: the cause names the outage
            raise ConfigError("cannot open db_url 'postgresql://db.lan/memory'") from StoreUnavailable(str(exc))
