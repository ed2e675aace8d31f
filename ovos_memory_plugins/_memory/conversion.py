"""Importing one backend's export into another: what carries over, and a clear refusal when nothing does.

An export is made of *parts*, each held by the same keys whatever backend wrote it:

==============  ============================================================  ===========================
part            keys                                                          kept by
==============  ============================================================  ===========================
``window``      ``window`` (longterm: ``recent``), the verbatim messages      recency, short-term,
                                                                              lexical, local-rag,
                                                                              longterm, redis
``documents``   ``documents``, what recall searches                           lexical, local-rag
``summary``     ``summary`` and its state (``summary_state``, ...)            longterm, redis
``facts``       ``facts``, ``superseded``                                     entity
==============  ============================================================  ===========================

A backend declares the parts it keeps (``export_parts``); a composite keeps what its members
keep, and its export holds its members' exports (``members``). Importing an export of another
backend carries over the parts both keep: a lexical export into recency keeps its window; a
composite's into lexical its (longest) window and documents; a lexical export into a composite
goes to each member that keeps a part of it. An export none of whose parts the target keeps is
a ``ValueError`` naming both kinds: an import never reports success for nothing stored.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DOCUMENTS", "FACTS", "PARTS", "SUMMARY", "WINDOW", "converted", "export_parts", "member_imports",
           "parts_kept"]

WINDOW, DOCUMENTS, SUMMARY, FACTS = "window", "documents", "summary", "facts"
#: Each part and the export keys that hold it (the first key is where a converted export puts it).
PARTS: dict[str, tuple[str, ...]] = {
    WINDOW: ("window",),
    DOCUMENTS: ("documents",),
    SUMMARY: ("summary", "summary_state", "summary_history", "summary_source"),
    FACTS: ("facts", "superseded"),
}
_NAMES = {WINDOW: "a window of messages", DOCUMENTS: "documents for recall", SUMMARY: "a summary", FACTS: "facts"}


def parts_kept(memory: Any) -> frozenset[str]:
    """The parts ``memory`` keeps: its ``export_parts``, or for a composite its members'."""
    members = getattr(memory, "members", None)
    if isinstance(members, list) and all(hasattr(m, "memory") for m in members):
        return frozenset().union(*(parts_kept(m.memory) for m in members))
    return frozenset(getattr(memory, "export_parts", ()) or ())


def export_parts(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The parts ``data`` holds, each as ``{key: value}`` under the keys of :data:`PARTS`.

    A composite's export holds its members': the longest window and document list among them
    (the members' windows are views of one conversation; the longest says the most), and the
    first summary and facts.
    """
    found = _own_parts(data)
    members = data.get("members")
    if members is None:
        return found
    if not isinstance(members, Mapping):
        raise TypeError(f"the export's 'members' must be a dict of member exports, not {type(members).__name__}")
    for name, member in members.items():
        if not isinstance(member, Mapping):
            raise TypeError(f"the export's 'members'[{name!r}] must be a member's export (a dict), "
                            f"not {type(member).__name__}")
        for part, keys in export_parts(member).items():
            if part not in found or (part in (WINDOW, DOCUMENTS) and _length(keys) > _length(found[part])):
                found[part] = keys
    return found


def _own_parts(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    window = data["window"] if "window" in data else data.get("recent")
    if window is not None:
        found[WINDOW] = {"window": window}
    for part in (DOCUMENTS, SUMMARY, FACTS):
        keys = {key: data[key] for key in PARTS[part] if key in data}
        if keys:
            found[part] = keys
    return found


def _length(keys: Mapping[str, Any]) -> int:
    value = next(iter(keys.values()), None)
    return len(value) if isinstance(value, list) else 0


def converted(data: Mapping[str, Any], into: Any) -> Mapping[str, Any]:
    """``data`` as ``into`` reads it.

    Its own export (or one naming no backend, as written by hand) is returned as it is.
    Another backend's, or a composite's, becomes an export of the parts ``into`` keeps (see the
    module docstring); when it keeps none of them, a ``ValueError`` names both kinds.
    """
    source = data.get("plugin")
    if (not source or source == getattr(into, "plugin_name", None)) and "members" not in data:
        return data
    parts = export_parts(data)
    kept = parts_kept(into)
    usable = [part for part in PARTS if part in parts and part in kept]
    if not usable:
        raise ValueError(f"{_kind(data, parts)}; {getattr(into, 'plugin_name', type(into).__name__)} keeps "
                         f"{_listed(kept) or 'none of these'}: nothing in it can be imported")
    out: dict[str, Any] = {key: data[key] for key in ("plugin", "session_id") if key in data}
    for part in usable:
        out.update(parts[part])
    return out


def member_imports(data: Mapping[str, Any], members: Sequence[tuple[str, Any]], owner: str) -> dict[str, Any]:
    """What each member of a composite imports from ``data``: ``{member name: export}``.

    A composite's export gives each member the export of the member of the same name; any other
    member gets the parts of ``data`` it keeps (a member keeping none gets nothing). When no
    member gets anything, a ``ValueError`` names the export's kind and the members.
    """
    exported = data.get("members")
    if exported is not None and not isinstance(exported, Mapping):
        raise TypeError(f"the export's 'members' must be a dict of member exports, not {type(exported).__name__}")
    parts = export_parts(data)
    out: dict[str, Any] = {}
    for name, memory in members:
        if exported and name in exported:
            out[name] = exported[name]
        elif set(parts) & parts_kept(memory):
            out[name] = converted(data, memory)
    if not out:
        names = ", ".join(name for name, _ in members) or "none loaded"
        raise ValueError(f"{_kind(data, parts)}; no member of {owner} ({names}) keeps any of it: "
                         "nothing in it can be imported")
    return out


def _kind(data: Mapping[str, Any], parts: Mapping[str, Any]) -> str:
    source = data.get("plugin")
    what = f"an export of {source}" if isinstance(source, str) and source else "this export"
    return f"{what} holds {_listed(parts) or 'nothing a backend of this package keeps'}"


def _listed(parts: Any) -> str:
    names = [_NAMES[part] for part in PARTS if part in parts]
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else ""
