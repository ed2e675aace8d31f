"""``RecencyMemory``: a sliding window of the most recent messages, bounded by count and age.

Drop-in with the reference (``max_history`` 10, 0 keeps all; ``max_age`` in seconds;
``system_prompt``; ``db_path``), plus: tool fields survive persistence, the window is
normalised like every other backend's (docs/index.md), SQLite is used for a ``db_path`` that does
not end in ``.json``, and several processes may share one file.
"""
from __future__ import annotations

from typing import ClassVar

from ._memory.window import WindowConfig, WindowMemory

__all__ = ["RecencyMemory"]


class RecencyMemory(WindowMemory):
    """The lightest memory: the last few turns, no model, no index.

    Example::

        memory = RecencyMemory({"max_history": 4, "max_age": 3600})
    """

    Config: ClassVar[type] = WindowConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-recency"
    store_name: ClassVar[str] = "recency"
