"""Reading what ``export()`` wrote back in: checked whole before anything is stored, and idempotent.

``import_session`` takes an export of one session. Everything in it is checked first, so a
malformed export is a ``TypeError`` or ``ValueError`` naming the part that is wrong, and the
store is unchanged. Importing what is already there changes nothing: messages already at the
end of the window are not appended again (:func:`unseen_messages`), and documents already
stored (same text, same time) are not stored twice. Another backend's export is converted
first: what both backends keep carries over (:mod:`.conversion`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core.compat import AgentMessage
from ..messages import check_session_id, from_dict, to_dict
from ..storage.documents import metadata_text
from .conversion import converted

__all__ = ["check_export", "export_documents", "export_fact_list", "export_messages", "merged_summary",
           "session_export", "unseen_messages"]


def session_export(data: Any, session_id: str | None, into: Any = None) -> tuple[Mapping[str, Any], str]:
    """``(data, the session id to import into)``; TypeError if ``data`` is not an export.

    With ``into`` (the memory importing it), another backend's export comes back as the parts
    of it ``into`` keeps, and one holding none of them is a ValueError (:mod:`.conversion`).
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"import_session takes one session as export() returns it (a dict), not "
                        f"{type(data).__name__}")
    if session_id is None and "session_id" not in data:
        raise ValueError("the export names no 'session_id'; pass session_id= to say where it goes")
    sid = check_session_id(session_id if session_id is not None else data.get("session_id"))
    return (data if into is None else converted(data, into)), sid


def _list_of(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"the export's '{key}' must be a list, not {type(value).__name__}")
    return value


def export_messages(data: Mapping[str, Any], key: str = "window") -> list[AgentMessage]:
    """The messages of ``data[key]`` (a list of message dicts); errors name the bad item."""
    out = []
    for i, item in enumerate(_list_of(data, key)):
        if not isinstance(item, Mapping):
            raise TypeError(f"the export's '{key}'[{i}] must be a message dict, not {type(item).__name__}")
        if not isinstance(item.get("role"), str) or not isinstance(item.get("content"), str):
            raise ValueError(f"the export's '{key}'[{i}] needs a 'role' and a 'content' string")
        try:
            out.append(from_dict(dict(item)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the export's '{key}'[{i}] is not a message: {exc}") from exc
    return out


def export_documents(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The documents of ``data["documents"]``, each with a text ``content``; errors name the bad one."""
    docs = _list_of(data, "documents")
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise TypeError(f"the export's 'documents'[{i}] must be a dict, not {type(doc).__name__}")
        if not isinstance(doc.get("content"), str) or not doc["content"].strip():
            raise ValueError(f"the export's 'documents'[{i}] has no 'content' text")
        if not isinstance(doc.get("metadata") or {}, Mapping):
            raise TypeError(f"the export's 'documents'[{i}]['metadata'] must be a dict")
        try:
            metadata_text(doc.get("metadata") or {})
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"the export's 'documents'[{i}]['metadata']: {exc}") from exc
        check_seconds(doc.get("ts"), f"the export's 'documents'[{i}]['ts']")
    return docs


#: The latest time an export may hold: the end of year 9999, as datetime can show it.
LATEST_S = 253402300799.0


def check_seconds(ts: Any, where: str) -> None:
    """``ts`` is None or a time a store keeps (POSIX seconds, from 1970 to the year 9999):
    NaN, an infinity or 1e308 was stored as the time of the import, silently."""
    if ts is None:
        return
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise TypeError(f"{where} must be a number (seconds), not {ts!r}")
    if not 0 <= ts <= LATEST_S:  # NaN fails both comparisons
        raise ValueError(f"{where} is {ts!r}, not a time (POSIX seconds from 1970 to the year 9999)")


def export_fact_list(data: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """``data[key]``: a list of ``{"text": ...}`` dicts (a bare string is a text), checked."""
    items = data.get(key) or []
    if not isinstance(items, list):
        raise TypeError(f"the export's '{key}' must be a list, not {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        entry = dict(item) if isinstance(item, Mapping) else {"text": item}
        if not isinstance(entry.get("text"), str) or not entry["text"].strip():
            raise TypeError(f"the export's '{key}'[{i}] must be a fact text or a {{'text': ...}} dict")
        check_seconds(entry.get("ts"), f"the export's '{key}'[{i}]['ts']")
        out.append(entry)
    return out


def check_export(data: Mapping[str, Any]) -> None:
    """Check the messages and documents of an export as each backend's import does, raising the
    same errors, so a composite refuses a malformed export before any member stored its part."""
    for key in ("window", "recent"):
        export_messages(data, key)
    export_documents(data)
    for key in ("facts", "superseded"):
        export_fact_list(data, key)
    members = data.get("members")
    for name, part in (members.items() if isinstance(members, Mapping) else ()):  # a composite's, nested
        if not isinstance(part, Mapping):
            raise TypeError(f"the export's 'members'[{name!r}] must be a member's export (a dict)")
        check_export(part)


def unseen_messages(stored: Sequence[AgentMessage], imported: Sequence[AgentMessage]) -> list[AgentMessage]:
    """The part of ``imported`` the stored window does not hold yet.

    Nothing when ``imported`` already appears in ``stored`` as a run (the same export imported
    again, even after newer turns); else what follows the longest end of ``stored`` that
    ``imported`` starts with (a newer export of the same session); else nothing when its last
    exchange is in ``stored`` (an older export of a window that has moved on since: appended,
    what it held before would push the newer turns out); else all of it.
    """
    if not imported:
        return []
    have = [_key(m) for m in stored]
    new = [_key(m) for m in imported]
    n = len(new)
    if any(have[i:i + n] == new for i in range(len(have) - n + 1)):
        return []
    for overlap in range(min(len(have), n - 1), 0, -1):
        if have[-overlap:] == new[:overlap]:
            return list(imported[overlap:])
    tail = new[-2:]  # the export's last question and its answer
    if n >= 2 and any(have[i:i + 2] == tail for i in range(len(have) - 1)):
        return []
    return list(imported)


def merged_summary(stored: str, imported: str) -> str:
    """The summary of a memory that receives another's: both kept (the stored one first), once.

    Importing the same export again, or into an empty memory, gives what a plain replace would.
    """
    stored, imported = stored.strip(), imported.strip()
    if not stored:
        return imported
    return stored if imported in stored else f"{stored}\n\n{imported}"


def _key(msg: AgentMessage) -> tuple[Any, ...]:
    data = to_dict(msg)
    return tuple(sorted((k, repr(v)) for k, v in data.items()))
