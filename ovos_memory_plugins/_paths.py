"""Default file locations: always under the XDG data directory, never the current directory."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MEMORY_PATH", "data_dir", "default_path", "is_memory_path", "resolve_path"]

#: The special path meaning "keep it in RAM" (as SQLite spells it).
MEMORY_PATH = ":memory:"


def data_dir() -> Path:
    """``$XDG_DATA_HOME/ovos`` (``~/.local/share/ovos`` when unset). Not created here."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "ovos"


def default_path(filename: str) -> str:
    """The default location of a store file named ``filename``."""
    return str(data_dir() / filename)


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
