"""Default file locations: always under the XDG data directory, never the current directory."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

__all__ = [
    "MEMORY_PATH", "data_dir", "default_name", "default_path", "is_memory_path", "quarantine_file", "resolve_path",
]

#: The special path meaning "keep it in RAM" (as SQLite spells it).
MEMORY_PATH = ":memory:"


def data_dir() -> Path:
    """``$XDG_DATA_HOME/ovos`` (``~/.local/share/ovos`` when unset). Not created here."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "ovos"


def default_path(filename: str) -> str:
    """The default location of a store file named ``filename``."""
    return str(data_dir() / filename)


def default_name(cls: type, attribute: str, suffix: str = "") -> str:
    """The default file name of ``cls``'s store: the ``attribute`` the class itself declares, or
    one made from its module and name, so two different backends never share a default file
    (a subclass that declares nothing of its own does not inherit its parent's file).

        >>> class MyRetriever: pass
        >>> default_name(MyRetriever, "default_db_name", ".db")
        'ovos_memory_plugins_core_paths_MyRetriever.db'
    """
    declared = cls.__dict__.get(attribute)
    if declared:
        return str(declared)
    stem = "_".join(part for part in re.split(r"[^A-Za-z0-9]+", f"{cls.__module__}.{cls.__qualname__}") if part)
    return stem + suffix


def is_memory_path(path: str | None) -> bool:
    return path is None or path == MEMORY_PATH


def resolve_path(path: str) -> str:
    """Expand ``~`` and environment variables and make the path absolute.

    Relative paths are anchored to the data directory rather than the current working
    directory, so a service started from another folder finds the same store.
    """
    if is_memory_path(path):
        return MEMORY_PATH
    expanded = os.path.expandvars(os.path.expanduser(path))
    if not os.path.isabs(expanded):
        expanded = str(data_dir() / expanded)
    return os.path.abspath(expanded)


def quarantine_file(path: str, companions: tuple[str, ...] = ()) -> str:
    """Move a damaged store file aside and return where it went.

    The first quarantine of ``path`` is ``<path>.corrupt`` (as the reference names it); when that name is taken
    by an earlier one, ``<path>.corrupt-<time>`` (``-<n>`` added if needed), so no quarantined
    copy is ever overwritten. Each existing ``path + suffix`` in ``companions`` (SQLite's
    ``-wal`` and ``-shm``) moves along to ``target + suffix``: it belongs to the bad file.
    """
    target, n = f"{path}.corrupt", 0
    while _taken(target, companions):
        n += 1
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = f"{path}.corrupt-{stamp}" if n == 1 else f"{path}.corrupt-{stamp}-{n - 1}"
    os.replace(path, target)
    for suffix in companions:
        if os.path.exists(path + suffix):
            os.replace(path + suffix, target + suffix)
    return target


def _taken(target: str, companions: tuple[str, ...]) -> bool:
    return any(os.path.exists(target + suffix) for suffix in ("", *companions))
