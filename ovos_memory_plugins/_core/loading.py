"""Finding plugins by entry-point name: memory plugins, text embedders and vector stores.

ovos-plugin-manager's loaders import every plugin of a group on every call and have no cache;
a composite with four members, or a persona retrying a missing plugin, would pay that each
time. Here a name is looked up through ``importlib.metadata``, which imports only the one plugin
asked for, and only then through ovos-plugin-manager (which also knows deprecated group names).
A class found through an entry point is cached; ovos-plugin-manager's answer and a miss are not,
so a plugin installed later is found on the next call (late adoption), and so is a loader
patched in a test.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import threading
from typing import Any

from .log import LOG

__all__ = [
    "EMBEDDINGS_DB_GROUP",
    "MEMORY_GROUP",
    "TEXT_EMBEDDINGS_GROUP",
    "allows_value",
    "find_plugin_class",
    "installed_plugins",
    "load_memory_class",
    "reads_key",
]

MEMORY_GROUP = "opm.agents.memory"
TEXT_EMBEDDINGS_GROUP = "opm.embeddings.text"
EMBEDDINGS_DB_GROUP = "opm.embeddings"

#: This package's own embedders and store, imported directly: a source checkout without
#: installed entry points finds them too.
_OWN = {
    (TEXT_EMBEDDINGS_GROUP, "ovos-memory-e5-embeddings-plugin"): ("ovos_memory_plugins.embedders", "E5Embedder"),
    (TEXT_EMBEDDINGS_GROUP, "ovos-memory-minilm-embeddings-plugin"): ("ovos_memory_plugins.embedders",
                                                                      "MiniLMEmbedder"),
    (EMBEDDINGS_DB_GROUP, "ovos-memory-sqlite-embeddings-plugin"): ("ovos_memory_plugins.vectordb",
                                                                    "SqliteEmbeddingsDB"),
}

_cache: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def find_plugin_class(name: str, group: str) -> type | None:
    """The class registered as ``name`` in ``group``, or None. Import errors are logged."""
    key = (group, name)
    with _lock:
        if key in _cache:
            return _cache[key]  # type: ignore[no-any-return]
    found = _own(key) or _from_metadata(name, group)
    if found is not None:
        with _lock:
            _cache[key] = found
        return found
    return _from_opm(name, group)


def load_memory_class(name: str) -> type | None:
    """The memory plugin class registered as ``name`` (``opm.agents.memory``), or None."""
    return find_plugin_class(name, MEMORY_GROUP)


def installed_plugins(group: str) -> list[str]:
    """The names registered in ``group`` (for messages that say what could be used instead)."""
    names = {ep.name for ep in importlib.metadata.entry_points(group=group)}
    names |= {name for g, name in _OWN if g == group}
    return sorted(names)


def closest_plugin(name: str, group: str = MEMORY_GROUP) -> str | None:
    """The installed plugin of ``group`` that ``name`` most likely meant: a short name
    ("recency") or a typo ("lexicl"), judged on what follows the names' shared prefix (all of this
    package's start "ovos-memory-plugin-", which alone made any typo look like one of them)."""
    import difflib

    installed = installed_plugins(group)
    prefix = "ovos-memory-plugin-"
    tail = name.lower().removeprefix(prefix)
    by_tail = {n.removeprefix(prefix): n for n in installed}
    close = difflib.get_close_matches(tail, list(by_tail), n=1, cutoff=0.6)
    if close:
        return by_tail[close[0]]
    if tail != name.lower():  # ours, spelt past recognition
        return None
    close = difflib.get_close_matches(name, installed, n=1, cutoff=0.8)  # another package's plugin
    return close[0] if close else None


def did_you_mean(name: str, group: str = MEMORY_GROUP) -> str:
    """``"; did you mean 'X'?"`` for :func:`closest_plugin`, else a pointer to the list."""
    close = closest_plugin(name, group)
    return f"; did you mean '{close}'?" if close and close != name else " (see 'ovos-memory plugins')"


def _own(key: tuple[str, str]) -> type | None:
    if key not in _OWN:
        return None
    module, attr = _OWN[key]
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def _from_metadata(name: str, group: str) -> type | None:
    for ep in importlib.metadata.entry_points(group=group, name=name):
        try:
            return ep.load()  # type: ignore[no-any-return]
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the caller down
            LOG.error(f"plugin {name!r} ({group}) failed to import: {exc}")
            return None
    return None


def _from_opm(name: str, group: str) -> type | None:
    try:
        if group == MEMORY_GROUP:
            from ovos_plugin_manager.agents import load_memory_plugin

            return load_memory_plugin(name)  # type: ignore[no-any-return]
        from ovos_plugin_manager.embeddings import find_embeddings_db_plugins, find_text_embeddings_plugins

        finder = find_text_embeddings_plugins if group == TEXT_EMBEDDINGS_GROUP else find_embeddings_db_plugins
        return finder().get(name)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - a broken plugin or an old OPM: nothing found
        LOG.error(f"plugin {name!r} ({group}) could not be loaded: {exc}")
        return None


def reads_key(cls: type, key: str, third_party: bool = True) -> bool:
    """Whether ``cls`` reads ``key``; for a plugin that does not declare its keys, ``third_party``."""
    config_cls = getattr(cls, "Config", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        return third_party  # the reference pushes scope to every member
    return any(f.name == key or f.metadata.get("key") == key for f in dataclasses.fields(config_cls))


def allows_value(cls: type, key: str, value: Any) -> bool:
    """Whether ``cls`` accepts ``value`` for ``key`` (a window takes no 'global' scope: it keeps
    its own per session then, as it always did)."""
    config_cls = getattr(cls, "Config", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        return True
    choices = [f.metadata.get("choices") for f in dataclasses.fields(config_cls) if f.name == key]
    return not choices or choices[0] is None or value in choices[0]
