"""The host types from ovos-plugin-manager, on the stable 2.2.0 and on the newest pre-release.

OPM 2.2.0 has ``AgentMessage(role, content)`` only: no ``ToolCall`` and no ``MessageRole.TOOL``.
Newer releases add the tool fields. Everything in this package that touches tool fields goes
through this module, so the difference is handled in one place.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ovos_plugin_manager.templates.agents import AgentContextManager, AgentMessage, MessageRole

try:  # OPM >= 2.7 (pre-release); absent on the stable 2.2.0
    from ovos_plugin_manager.templates.agents import ToolCall
except ImportError:  # pragma: no cover - exercised on the stable OPM
    ToolCall = None  # type: ignore[assignment,misc]

__all__ = [
    "HAS_TOOLS",
    "AgentContextManager",
    "AgentMessage",
    "MessageRole",
    "ToolCall",
    "make_message",
    "tool_fields",
]

_MESSAGE_FIELDS = {f.name for f in dataclasses.fields(AgentMessage)}

#: True when this OPM can express tool calls (``ToolCall``, ``MessageRole.TOOL``, tool fields).
HAS_TOOLS = ToolCall is not None and "tool_calls" in _MESSAGE_FIELDS and hasattr(MessageRole, "TOOL")

_TOOL_FIELDS = ("tool_calls", "tool_call_id", "name")


def make_message(role: Any, content: str, **tool: Any) -> AgentMessage:
    """Build an ``AgentMessage``, passing tool fields only when this OPM knows them."""
    extra = {k: v for k, v in tool.items() if v is not None and k in _MESSAGE_FIELDS}
    return AgentMessage(role, content, **extra)


def tool_fields(msg: Any) -> dict[str, Any]:
    """The tool fields set on ``msg`` (empty on OPM 2.2.0 or for plain messages)."""
    out = {}
    for key in _TOOL_FIELDS:
        value = getattr(msg, key, None)
        if value is not None:
            out[key] = value
    return out
