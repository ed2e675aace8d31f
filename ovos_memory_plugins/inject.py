"""The five inject modes: where recalled context goes in the message list (the reference's shapes, docs/index.md).

All shapes, with S=system, D=developer, U=user, A=assistant, T=tool::

    system        S base? | extra... | S "header\\n\\nContext:\\n..." | history | U utterance
    developer     S base? | extra... | D "header\\n\\nContext:\\n..." | history | U utterance
    system_prompt S template(base, header, context) | extra... | history | U utterance
    user          S base? | extra... | history | U template(header, context, utterance)
    tool          S base? | extra... | history | A "" tool_calls=[search] | T context | U utterance

With no context every mode is ``S base? | extra... | history | U utterance``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ._core.compat import HAS_TOOLS, AgentMessage, MessageRole, ToolCall, make_message
from .errors import ConfigError

__all__ = ["assemble_context", "check_inject_mode", "INJECT_MODES", "Injection"]

INJECT_MODES = ("system", "developer", "system_prompt", "user", "tool")


@dataclasses.dataclass(frozen=True)
class Injection:
    """How recalled context is folded into the messages."""

    mode: str = "system"
    header: str = ""
    system_prompt_template: str = "{system}\n\n{header}\n\nContext:\n{context}"
    user_template: str = "{header}\n\nContext:\n{context}\n\nQuestion: {utterance}"
    tool_name: str = "search_memory"


def check_inject_mode(mode: str, owner: str) -> None:
    """Tool mode needs an ovos-plugin-manager with ``ToolCall``; say so at construction."""
    if mode == "tool" and not HAS_TOOLS:
        raise ConfigError(
            f"{owner}: 'inject_mode' is 'tool', but the installed ovos-plugin-manager has no ToolCall "
            "(tool messages need ovos-plugin-manager>=2.7.0a1: pip install --pre 'ovos-plugin-manager>=2.7.0a1'); "
            "or choose one of 'system', 'developer', 'system_prompt', 'user'"
        )


def _context_block(header: str, context: str) -> str:
    return f"{header}\n\nContext:\n{context}"


def assemble_context(
    utterance: str,
    history: Sequence[AgentMessage],
    context: str,
    injection: Injection,
    system_prompt: str = "",
    extra_system: Sequence[AgentMessage] = (),
    tool_call_id: str = "",
) -> list[AgentMessage]:
    """The message list for one turn. ``utterance`` must already be stripped."""
    mode = injection.mode if context else "none"
    out: list[AgentMessage] = []
    if mode == "system_prompt":
        filled = injection.system_prompt_template.format(
            system=system_prompt, header=injection.header, context=context)
        out.append(AgentMessage(MessageRole.SYSTEM, filled.strip()))
    elif system_prompt.strip():
        out.append(AgentMessage(MessageRole.SYSTEM, system_prompt))
    out.extend(extra_system)
    if mode in ("system", "developer"):
        role = MessageRole.SYSTEM if mode == "system" else MessageRole.DEVELOPER
        out.append(AgentMessage(role, _context_block(injection.header, context)))
    out.extend(history)
    if mode == "tool":
        call = ToolCall(id=tool_call_id, name=injection.tool_name, arguments={"query": utterance})
        out.append(make_message(MessageRole.ASSISTANT, "", tool_calls=[call]))
        out.append(make_message(MessageRole.TOOL, context, tool_call_id=tool_call_id, name=injection.tool_name))
    if mode == "user":
        out.append(AgentMessage(MessageRole.USER, injection.user_template.format(
            header=injection.header, context=context, utterance=utterance)))
    else:
        out.append(AgentMessage(MessageRole.USER, utterance))
    return out
