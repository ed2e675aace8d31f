"""``BasicShortTermMemory``: the persona default memory (seed 000), drop-in and safer.

Differences from ovos-persona's class, all deliberate:

* an empty update is a no-op (the original raises ``IndexError``);
* the caller's messages are never mutated (the original edits ``new[0].content`` on merge);
* ``db_path`` optionally keeps the window across restarts (the original is RAM only).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ._window import WindowConfig, WindowMemory
from .config import option

__all__ = ["BasicShortTermMemory", "ShortTermConfig"]


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
    drop_leading_answers: ClassVar[bool] = True

    @property
    def session2history(self) -> dict[str, list]:
        """A snapshot ``{session_id: [AgentMessage]}``, as ovos-persona's attribute reads."""
        return {sid: self.get_history(sid) for sid in self.sessions()}
