"""Finding memory plugins by entry-point name, once.

``ovos_plugin_manager.agents.load_memory_plugin`` imports every plugin of the group on every
call and has no cache; a composite with four members, or a persona retrying a missing plugin,
would pay that each time. Here a name is looked up through ``importlib.metadata`` (which
imports only the one plugin asked for), falling back to OPM. A class found through entry
points is cached; OPM's answer and a miss are not: a plugin installed later is found on the
next call (late adoption).
"""
from __future__ import annotations

import importlib.metadata
import threading
from typing import Any

from ._log import LOG

__all__ = ["MEMORY_GROUP", "load_memory_class"]

MEMORY_GROUP = "opm.agents.memory"

_cache: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def load_memory_class(name: str, group: str = MEMORY_GROUP) -> type | None:
    """The class registered as ``name`` in ``group``, or None. Errors while importing are logged.

    Entry points are cached (installed packages do not change under a running process); what
    ovos-plugin-manager's loader returns is not, so a plugin it finds later, or a patched
    loader in a test, is seen on the next call.
    """
    key = (group, name)
    with _lock:
        if key in _cache:
            return _cache[key]
    found = _from_metadata(name, group)
    if found is not None:
        with _lock:
            _cache[key] = found
        return found
    return _from_opm(name) if group == MEMORY_GROUP else None


def _from_metadata(name: str, group: str) -> type | None:
    for ep in importlib.metadata.entry_points(group=group, name=name):
        try:
            return ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the caller down
            LOG.error(f"memory plugin {name!r} failed to import: {exc}")
            return None
    return None


def _from_opm(name: str) -> type | None:
    try:
        from ovos_plugin_manager.agents import load_memory_plugin

        return load_memory_plugin(name)
    except Exception as exc:  # noqa: BLE001
        LOG.error(f"memory plugin {name!r} could not be loaded: {exc}")
        return None
