"""``BasicShortTermMemory``: the persona default memory, drop-in and safer.

Differences from ovos-persona's class, all deliberate (docs/compatibility.md):

* an empty update is a no-op (the original raises ``IndexError``);
* the caller's messages are never mutated (the original edits ``new[0].content`` on merge);
* ``db_path`` optionally keeps the window across restarts (the original is RAM only);
* every message of an update is normalised, not only the first against the window: one update
  ``[USER q1, USER q2, ASSISTANT a1, ASSISTANT a2]`` is kept as ``[USER q2, ASSISTANT "a1\na2"]``;
  for the persona's own ``[USER, ASSISTANT]`` pairs the two agree.

``session2history`` is kept as in the original (``{session_id: [AgentMessage]}``), as a live
view over the window store rather than a dict, so code that seeds or edits it directly also
works when the window lives in SQLite or JSON (see ``_memory/session_view.py``).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ._memory.session_view import LiveHistory, SessionHistoryView
from ._memory.window import WindowConfig, WindowMemory
from .config import option

__all__ = ["BasicShortTermMemory", "LiveHistory", "SessionHistoryView", "ShortTermConfig"]


@dataclasses.dataclass(frozen=True)
class ShortTermConfig(WindowConfig):
    max_history: int = option(5, "messages kept per session; one exchange is two; 0 keeps all", minimum=0)


class BasicShortTermMemory(WindowMemory):
    """A per-session window of the last ``max_history`` messages (default 5).

    Example::

        memory = BasicShortTermMemory({"max_history": 10, "system_prompt": "You are helpful."})
        memory.update_history([AgentMessage(MessageRole.USER, "what is 2+2?"),
                               AgentMessage(MessageRole.ASSISTANT, "4")], "sess-123")
        memory.build_conversation_context("and 3+3?", "sess-123")
        # [SYSTEM "You are helpful.", USER "what is 2+2?", ASSISTANT "4", USER "and 3+3?"]
    """

    Config: ClassVar[type] = ShortTermConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-short-term"
    store_name: ClassVar[str] = "short_term"
    drop_leading_answers: ClassVar[bool] = True

