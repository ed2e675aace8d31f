"""Message helpers: validation at the boundary, normalisation, and a dict round-trip.

Nothing here mutates the caller's objects: every function that keeps a message keeps a copy.

Normalisation (ovos-persona's rules, applied to every backend's verbatim window here)::

    >>> from ovos_memory_plugins.messages import fold_into
    >>> from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole
    >>> U, A = MessageRole.USER, MessageRole.ASSISTANT
    >>> pop, add = fold_into(AgentMessage(U, "hanging?"), [AgentMessage(U, "hi"), AgentMessage(A, "hello")])
    >>> pop, [m.content for m in add]
    (True, ['hi', 'hello'])
    >>> pop, add = fold_into(AgentMessage(A, "part one"), [AgentMessage(A, "part two")])
    >>> pop, [m.content for m in add]
    (True, ['part one\\npart two'])
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._core.compat import HAS_TOOLS, AgentMessage, MessageRole, ToolCall, make_message, tool_fields
from ._core.log import LOG, LogOnce
from ._core.tokens import estimate_tokens

__all__ = [
    "check_session_id",
    "check_utterance",
    "clean_text",
    "coerce_messages",
    "context_window",
    "copy_message",
    "fit_blocks",
    "fit_window",
    "fold_into",
    "from_dict",
    "is_role",
    "MAX_MESSAGE_CHARS",
    "MESSAGE_OVERHEAD_TOKENS",
    "message_tokens",
    "RAW_ARGUMENTS",
    "role_of",
    "to_dict",
    "tool_calls_of",
    "user_message",
]

#: Longer message contents are cut (with a warning each time) so that a runaway reply cannot
#: make every later turn slow. 100,000 characters is about 25,000 tokens, more than any chat
#: reply. The cut keeps the start and the end, where a pasted text's point usually is.
MAX_MESSAGE_CHARS = 100_000
#: The share of a cut message kept from its end.
_TAIL_SHARE = 0.2

#: Tool-call arguments that are not a JSON object (plain text, a list) are kept under this key:
#: ``arguments`` is a dict everywhere in this package, as in ovos-plugin-manager's ``ToolCall``.
RAW_ARGUMENTS = "_raw"

_ROLES = {r.value: r for r in MessageRole}
_log = LogOnce()


def role_of(msg: Any) -> str:
    """The role of ``msg`` as its plain string value (``"user"``, ``"assistant"``, ...)."""
    role = msg.role
    value = role.value if isinstance(role, MessageRole) else role
    if value not in _ROLES and value != "tool":
        raise ValueError(f"unknown message role {role!r}; expected one of {sorted(_ROLES)}")
    return str(value)


def is_role(msg: Any, role: str) -> bool:
    return role_of(msg) == role


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """``text`` without lone surrogates (a JSON reply may escape one, "\\ud800"): no store can
    write them as UTF-8. A valid pair is one character in a str already, so any left is lone."""
    return text if text.isascii() else _LONE_SURROGATE.sub("", text)


def clean_text(text: str) -> str:
    """Text that any store can hold: lone surrogates replaced, and bounded in length."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from a bad decoder upstream) cannot be stored as UTF-8.
        text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) > MAX_MESSAGE_CHARS:
        text = _cut_middle(text)
    return text


def _cut_middle(text: str) -> str:
    """``text`` within :data:`MAX_MESSAGE_CHARS`: its start and its end, with a marker saying how
    much of the middle was cut; logged every time (each cut loses something that was said)."""
    marker = "\n[... {} characters cut ...]\n"
    cut = len(text) - MAX_MESSAGE_CHARS + len(marker.format(len(text)))
    cut = len(text) - MAX_MESSAGE_CHARS + len(marker.format(cut))  # the count may have fewer digits
    room = len(text) - cut
    tail = int(room * _TAIL_SHARE)
    head = room - tail
    LOG.warning(f"a message of {len(text)} characters is over {MAX_MESSAGE_CHARS}: its middle "
                f"({cut} characters) was cut, the first {head} and the last {tail} are kept")
    return text[:head] + marker.format(cut) + text[-tail:]


def check_session_id(session_id: Any) -> str:
    """``session_id`` unchanged; ``TypeError`` for a non-string, ``ValueError`` for one no store can key.

    A lone surrogate (``"\\ud800"``, from a bad decoder upstream) cannot be encoded as UTF-8, so
    SQLite, JSON files and Redis would each fail on it in their own way deep inside; unlike
    message text it cannot be repaired silently, since two ids must never map to one session.
    """
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"session_id {session_id!r} is not valid Unicode text ({exc.reason})") from None
    return session_id


def check_utterance(utterance: Any) -> str:
    """The utterance, stripped and otherwise exactly as given; a non-string is a ``TypeError``.

    The last message of every context is this text: whatever the caller said comes back to it
    unchanged. What a memory stores or searches for is cleaned separately (:func:`clean_text`).
    """
    if not isinstance(utterance, str):
        raise TypeError(f"utterance must be a str, not {type(utterance).__name__}")
    return utterance.strip()


def copy_message(msg: AgentMessage) -> AgentMessage:
    """A copy that shares no mutable state (tool call lists) with ``msg``.

    A shallow copy plus copies of the tool calls: ``copy.deepcopy`` was 95% of a recency turn.
    """
    if hasattr(msg, "__dict__") and dataclasses.is_dataclass(msg):
        out: Any = object.__new__(type(msg))  # copy.copy's generic protocol costs 4 µs a message
        vars(out).update(vars(msg))
        calls = getattr(msg, "tool_calls", None)
        if calls:  # a list of calls, or (from a careless host) anything: coerce_messages reads it
            out.tool_calls = [copy.deepcopy(c) for c in calls] if isinstance(calls, list) else copy.deepcopy(calls)
        return out  # type: ignore[no-any-return]
    return make_message(msg.role, msg.content, **copy.deepcopy(tool_fields(msg)))


def coerce_messages(new_messages: Any) -> list[AgentMessage]:
    """Validate an ``update_history`` argument and return clean copies.

    Accepts ``AgentMessage`` objects (or anything with ``role`` and ``content``) and dicts with
    ``role`` and ``content`` keys. Raises ``TypeError``/``ValueError`` naming the bad item.
    """
    if isinstance(new_messages, Mapping) or (hasattr(new_messages, "role") and hasattr(new_messages, "content")):
        raise TypeError(f"new_messages must be a list of messages, not one {type(new_messages).__name__}: "
                        "wrap it in a list")
    if new_messages is None or isinstance(new_messages, (str, bytes)) or not isinstance(new_messages, Iterable):
        raise TypeError(f"new_messages must be a list of AgentMessage, not {type(new_messages).__name__}")
    out = []
    for i, item in enumerate(new_messages):
        msg = from_dict(item) if isinstance(item, dict) else item
        if not hasattr(msg, "role") or not hasattr(msg, "content"):
            raise TypeError(f"new_messages[{i}] is a {type(item).__name__}, not an AgentMessage")
        calls = item.get("tool_calls") if isinstance(item, dict) else getattr(msg, "tool_calls", None)
        text = _content_text(msg.content, calls=bool(calls))
        if text is None:
            raise TypeError(f"new_messages[{i}].content must be a str, not {type(msg.content).__name__}")
        role_of(msg)
        msg = copy_message(msg)
        msg.content = clean_text(text)
        if getattr(msg, "tool_calls", None) is not None:
            msg.tool_calls = tool_calls_of(msg.tool_calls)
        for key in ("tool_call_id", "name"):
            value = getattr(msg, key, None)
            if value is not None and not isinstance(value, str):
                setattr(msg, key, str(value))
        out.append(msg)
    return out


def _content_text(content: Any, calls: bool = False) -> str | None:
    """A message's content as text: a str as it is; ``None`` beside tool ``calls`` as "" (the
    OpenAI wire shape of a turn that only calls tools); a list of parts (its multimodal shape) as
    its text parts, one per line. None for anything else."""
    if isinstance(content, str):
        return content
    if content is None:
        return "" if calls else None
    if isinstance(content, (list, tuple)) and all(isinstance(p, (str, Mapping)) for p in content):
        texts = [p if isinstance(p, str) else p.get("text") for p in content]
        return "\n".join(t for t in texts if isinstance(t, str) and t.strip())
    return None


def tool_calls_of(value: Any) -> list[Any] | None:
    """``tool_calls`` as this package keeps them: a list of ``ToolCall`` (of dicts on an OPM without
    it), each with ``id`` and ``name`` strings and ``arguments`` a JSON-ready dict; None if none.

    A message's text must not be lost to the shape of its tool calls. Read: ``ToolCall`` objects,
    ``{"id", "name", "arguments"}`` dicts, the OpenAI wire shape (``{"id", "function": {"name",
    "arguments": "<JSON text>"}}``), and a JSON text of a list of those. What is none of these (a
    number, a plain string) is dropped, with one warning.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, Mapping) or (hasattr(value, "name") and hasattr(value, "arguments")):
        value = [value]  # one call given bare
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    calls = [call for call in (_call_dict(item) for item in items) if call is not None]
    if len(calls) < len(items):
        _log.warning("tool_calls", f"tool calls that are not ToolCall objects or call dicts were dropped "
                                   f"(first seen: {str(value)[:80]!r}); the message itself is kept")
    if not calls:
        return None
    return [ToolCall(**call) for call in calls] if HAS_TOOLS else calls


def _mergeable(a: AgentMessage, b: AgentMessage) -> bool:
    # Tool-call turns are never merged: their ids pair them with TOOL results.
    return (
        is_role(a, "assistant") and is_role(b, "assistant")
        and not getattr(a, "tool_calls", None) and not getattr(b, "tool_calls", None)
    )


def fold_into(tail: AgentMessage | None, new: Sequence[AgentMessage]) -> tuple[bool, list[AgentMessage]]:
    """Normalise ``new`` against the last stored message ``tail``.

    Rules, applied to each new message in turn: a USER after a USER replaces it (the first was
    a question that got no answer); an ASSISTANT after an ASSISTANT is merged into one message
    joined by a newline (one answer recorded in several calls).

    Returns ``(pop_tail, to_append)``: whether the stored ``tail`` must be removed, and the
    messages to append after that. ``new`` is not modified; merged messages are new objects.
    """
    work: list[AgentMessage] = [tail] if tail is not None else []
    for msg in new:
        last = work[-1] if work else None
        if last is not None and is_role(last, "user") and is_role(msg, "user"):
            work.pop()
        elif last is not None and _mergeable(last, msg):
            work.pop()
            msg = _joined(last, msg)
        work.append(msg)
    if tail is not None and work and work[0] is tail:
        return False, work[1:]
    return tail is not None, work


def _joined(first: AgentMessage, then: AgentMessage) -> AgentMessage:
    """One message saying ``first`` then ``then`` (a copy of ``then``; neither is modified)."""
    return dataclasses.replace(copy_message(then), content=f"{first.content}\n{then.content}")


def context_window(history: Sequence[AgentMessage], drop_leading_answers: bool = False) -> list[AgentMessage]:
    """The part of a window that goes into a prompt.

    Trailing USER messages are dropped (the current utterance is appended after the window, and
    two USER turns in a row confuse chat models). With ``drop_leading_answers``, leading ASSISTANT
    messages are dropped too: an answer whose question was trimmed away (as ovos-persona does); a leading
    SYSTEM or DEVELOPER note stays, as in ovos-persona.
    TOOL results are sent only after the ASSISTANT message that made their calls: left at the
    start by trimming, or stored by an OPM whose messages cannot hold the calls, they are invalid
    for every chat API. An ASSISTANT message with neither text (whitespace is none) nor tool calls
    says nothing and goes too; the USER messages it separated become one (joined by a line break),
    as templates that require the roles to alternate refuse two in a row, and a USER message it
    left last goes as any trailing one.
    """
    end = len(history)
    while end and is_role(history[end - 1], "user"):
        end -= 1
    start = 0
    while start < end and (
        is_role(history[start], "tool") or (drop_leading_answers and is_role(history[start], "assistant"))
    ):
        start += 1
    window = history[start:end]
    # The common window (no tool result, every message saying something) as it is: this runs on
    # every turn. MessageRole is a str enum, so == "tool" reads either spelling of the role.
    if all(m.content and m.role != "tool" and not m.content.isspace() for m in window):
        return list(window)
    out: list[AgentMessage] = []
    calls_open = unanswered = False
    for msg in window:
        if is_role(msg, "tool"):
            if calls_open:
                out.append(msg)
            continue
        calls = bool(getattr(msg, "tool_calls", None))
        calls_open = calls and is_role(msg, "assistant")
        if is_role(msg, "assistant") and not calls and not (msg.content or "").strip():
            unanswered = bool(out) and is_role(out[-1], "user")
            continue
        if unanswered and is_role(msg, "user"):
            out[-1] = _joined(out[-1], msg)
        else:
            out.append(msg)
        unanswered = False
    while out and is_role(out[-1], "user"):
        out.pop()
    return out


def user_message(utterance: str) -> AgentMessage:
    return AgentMessage(MessageRole.USER, utterance)


def system_message(text: str) -> AgentMessage:
    return AgentMessage(MessageRole.SYSTEM, text)


def _call_dict(call: Any) -> dict[str, Any] | None:
    """One tool call as ``{"id", "name", "arguments"}`` (see :func:`tool_calls_of`); None if it is none."""
    if isinstance(call, Mapping):
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        ident, name = call.get("id"), call.get("name", function.get("name"))
        arguments = call.get("arguments", function.get("arguments"))
    elif hasattr(call, "name") and hasattr(call, "arguments"):
        ident, name, arguments = getattr(call, "id", None), call.name, call.arguments
    else:
        return None
    return {"id": "" if ident is None else str(ident), "name": "" if name is None else str(name),
            "arguments": _arguments(arguments)}


def _arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments as a JSON-ready dict: the wire format's JSON text decoded; anything
    but an object kept under :data:`RAW_ARGUMENTS`; values JSON cannot hold written as text."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            pass
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        value = {RAW_ARGUMENTS: value}
    try:
        # A copy that every store can write (a datetime becomes its text, a set its repr).
        out = json.loads(json.dumps(dict(value), default=str))
    except (TypeError, ValueError):  # keys JSON cannot hold
        out = {str(k): str(v) for k, v in value.items()}
    return out if isinstance(out, dict) else {}


def to_dict(msg: AgentMessage, ts: float | None = None) -> dict[str, Any]:
    """A JSON-ready dict of ``msg``: ``{"role", "content"}``, plus ``ts`` and tool fields if set."""
    out: dict[str, Any] = {"role": role_of(msg), "content": msg.content}
    if ts is not None:
        out["ts"] = ts
    fields = tool_fields(msg)
    if "tool_calls" in fields:
        calls = tool_calls_of(fields.pop("tool_calls"))
        if calls:
            out["tool_calls"] = [_call_dict(c) for c in calls]
    out.update({k: v if isinstance(v, str) else str(v) for k, v in fields.items()})
    return out


def from_dict(data: dict[str, Any]) -> AgentMessage:
    """The inverse of :func:`to_dict`. Tool fields are dropped on an OPM that cannot hold them."""
    if "role" not in data or "content" not in data:
        raise ValueError(f"a message dict needs 'role' and 'content' keys, got {sorted(data)}")
    role = data["role"]
    role = _ROLES.get(role, role) if isinstance(role, str) else role
    if not isinstance(role, MessageRole) and role != "tool":
        raise ValueError(f"unknown message role {role!r}; expected one of {sorted(_ROLES)}")
    extra: dict[str, Any] = {}
    if HAS_TOOLS:
        if data.get("tool_calls"):
            extra["tool_calls"] = tool_calls_of(data["tool_calls"])
        for key in ("tool_call_id", "name"):
            value = data.get(key)
            extra[key] = value if value is None or isinstance(value, str) else str(value)
    return make_message(role, data["content"], **extra)


#: Tokens a chat template spends per message besides its text (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4


def message_tokens(text: str) -> int:
    """Tokens one message of ``text`` costs in a prompt (0 for no text: no message is sent)."""
    return estimate_tokens(text) + MESSAGE_OVERHEAD_TOKENS if text else 0


def fit_blocks(blocks: Sequence[AgentMessage], budget: int) -> list[AgentMessage]:
    """The system blocks (facts, a summary) that fit ``budget`` tokens, in order.

    A block that does not fit whole keeps its first lines that do: its header and the first
    items of its list. One that would keep no item (a header alone, or with a sub-heading such
    as "Facts about the user:" and nothing under it, or a one-line block) goes.

        >>> from ovos_plugin_manager.templates.agents import MessageRole
        >>> facts = AgentMessage(MessageRole.SYSTEM, "Known facts:\\n- likes tea\\n- lives in Porto")
        >>> [m.content for m in fit_blocks([facts], 12)]
        ['Known facts:\\n- likes tea']
        >>> fit_blocks([facts], 6)
        []
        >>> summary = AgentMessage(MessageRole.SYSTEM, "[Summary]\\nFacts about the user:\\n- likes tea")
        >>> fit_blocks([summary], 14)
        []
    """
    out: list[AgentMessage] = []
    left = budget
    for block in blocks:
        text = block.content
        if message_tokens(text) > left:
            lines = text.split("\n")
            kept = 0
            while kept < len(lines) and message_tokens("\n".join(lines[:kept + 1])) <= left:
                kept += 1
            while kept > 1 and lines[kept - 1].rstrip().endswith(":"):  # a sub-heading with nothing under it
                kept -= 1
            text = "\n".join(lines[:kept]) if kept > 1 else ""
        if text:
            short = copy_message(block)
            short.content = text
            out.append(short)
            left -= message_tokens(text)
    return out


def fit_window(window: Sequence[AgentMessage], budget: int,
               drop_leading_answers: bool = False) -> tuple[list[AgentMessage], int]:
    """The newest messages of ``window`` that fit ``budget`` tokens, and the tokens left over.

    The oldest go first, and an answer whose question the cut left out goes with it; the result
    is a valid context window (see :func:`context_window`).

        >>> U, A = MessageRole.USER, MessageRole.ASSISTANT
        >>> msgs = [AgentMessage(U, "hello there"), AgentMessage(A, "hi"),
        ...         AgentMessage(U, "one two"), AgentMessage(A, "three")]
        >>> [m.content for m in fit_window(msgs, 100)[0]]
        ['hello there', 'hi', 'one two', 'three']
        >>> [m.content for m in fit_window(msgs, 16)[0]]  # room for "hi", not for its question
        ['one two', 'three']
    """
    costs = [message_tokens(m.content) for m in window]
    start, total = 0, sum(costs)
    while start < len(window) and total > budget:
        total -= costs[start]
        start += 1
    kept = context_window(window[start:], drop_leading_answers or start > 0)  # a cut orphans no answer
    used = sum(message_tokens(m.content) for m in kept)
    return kept, max(0, budget - used)
