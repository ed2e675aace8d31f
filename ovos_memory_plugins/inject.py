"""The five inject modes: where a memory's blocks (a summary, facts) and its recalled context go.

The reference's shapes for recall, with S=system, D=developer, U=user, A=assistant, T=tool::

    system        S base? | blocks... | S "header\\n\\nContext:\\n..." | history | U utterance
    developer     S base? | blocks... (D) | D "header\\n\\nContext:\\n..." | history | U utterance
    system_prompt S template(base + blocks, header, context) | history | U utterance
    user          S base? | history | U template(header, blocks + context, utterance)
    tool          S base? | blocks... | history | A "" tool_calls=[search] | T context | U utterance

Blocks follow the mode too: their own system messages (``system``, ``tool``), developer
messages (``developer``), joined into the one system message (``system_prompt``: the base
prompt and a summary in one message, as the reference's long-term memory sends them), or into
the user turn with the recalled context (``user``: for chat engines that drop system messages).
With no blocks and no context every mode is ``S base? | history | U utterance``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ._core.compat import HAS_TOOLS, AgentMessage, MessageRole, ToolCall, make_message
from ._core.untrusted import strip_control_tokens
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


def _without_control_tokens(message: AgentMessage) -> AgentMessage:
    """A window message without chat-template control tokens: a stored ``<|im_start|>system``
    replayed every turn would open a system turn in the model's template (recall strips them
    too); a message holding none is passed as it is."""
    content = message.content
    cleaned = strip_control_tokens(content) if isinstance(content, str) else content
    return message if cleaned == content else dataclasses.replace(message, content=cleaned)


def assemble_context(
    utterance: str,
    history: Sequence[AgentMessage],
    context: str,
    injection: Injection,
    system_prompt: str = "",
    extra_system: Sequence[AgentMessage] = (),
    tool_call_id: str = "",
    given: Sequence[AgentMessage] = (),
) -> list[AgentMessage]:
    """The message list for one turn. ``utterance`` must already be stripped.

    ``extra_system`` are the memory's blocks (a summary, facts), placed as the mode says;
    ``given`` are a subclass's own messages, placed as given right after the system part in
    every mode (the reference's order for its ``extra_system``).
    """
    mode = injection.mode
    blocks = [b for b in extra_system if b.content.strip()]
    out: list[AgentMessage] = []
    if mode == "system_prompt" and (blocks or context):
        # The prompt as the memory gives it (a retriever's unstripped); only the filled result is stripped.
        base = "\n\n".join(p for p in (system_prompt, *(b.content for b in blocks)) if p.strip())
        if context:
            base = injection.system_prompt_template.format(system=base, header=injection.header, context=context)
        out.append(AgentMessage(MessageRole.SYSTEM, base.strip()))
    elif system_prompt:
        out.append(AgentMessage(MessageRole.SYSTEM, system_prompt))
    out.extend(given)
    if mode == "developer":
        out.extend(AgentMessage(MessageRole.DEVELOPER, b.content) for b in blocks)
    elif mode in ("system", "tool"):
        out.extend(blocks)
    if context and mode in ("system", "developer"):
        role = MessageRole.SYSTEM if mode == "system" else MessageRole.DEVELOPER
        out.append(AgentMessage(role, _context_block(injection.header, context)))
    out.extend(map(_without_control_tokens, history))
    if context and mode == "tool":
        call = ToolCall(id=tool_call_id, name=injection.tool_name, arguments={"query": utterance})
        out.append(make_message(MessageRole.ASSISTANT, "", tool_calls=[call]))
        out.append(make_message(MessageRole.TOOL, context, tool_call_id=tool_call_id, name=injection.tool_name))
    carried = "\n\n".join([*(b.content for b in blocks), *([context] if context else [])])
    if mode == "user" and carried:
        out.append(AgentMessage(MessageRole.USER, injection.user_template.format(
            header=injection.header, context=carried, utterance=utterance)))
    else:
        out.append(AgentMessage(MessageRole.USER, utterance))
    return out
