"""Messages as a careless host sends them: another message type, tool calls of any shape."""
from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["WIRE_CALL", "Said"]


@dataclasses.dataclass
class Said:
    """A host's message type other than AgentMessage (role, content and the tool fields): what
    ``update_history`` accepts on every ovos-plugin-manager, with or without ``ToolCall``."""

    role: Any
    content: str
    tool_calls: Any = None
    tool_call_id: Any = None
    name: Any = None


#: A tool call in the OpenAI wire format: ``arguments`` is JSON text, not a dict.
WIRE_CALL = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Porto"}'}}
