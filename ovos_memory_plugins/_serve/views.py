"""What ``ovos-memory serve`` shows and does, as plain functions over a memory's public methods.

No web framework here: each function takes the memory (any ``opm.agents.memory`` plugin; what
it cannot do is :class:`Unsupported`), returns JSON-ready data, and raises :class:`NotFound`
for a session, person, fact or document that does not exist. A composite is shown as one
memory: its members' summaries, facts and stored exchanges side by side, each naming its member.

People: a memory with a person scope answers ``people()`` (``{name: [session ids]}``),
``forget_person(name)`` and ``export_person(name)``; without one, :func:`people` is empty and
the page shows no people.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .._cli.output import count_items
from .._core.paths import set_aside_reported
from .._llm.summaries.fold import parse_summary
from .._memory.people import PERSON_PREFIX, listed_as, listed_keys, move_sessions_of_people
from ..messages import role_of

__all__ = ["SEARCH_MODES", "NotFound", "Unsupported", "as_listed", "backlog", "export_person",
           "export_session", "forget_exchange", "forget_fact", "forget_person", "forget_session", "import_sessions",
           "memory_info", "people", "person_view", "search", "session_ids", "session_view"]

#: all: what the memory recalls (fused, for a composite); keyword / meaning: its keyword or
#: semantic retrievers alone.
SEARCH_MODES = ("all", "keyword", "meaning")
_SCORE_KINDS = {"keyword": "keyword", "meaning": "semantic"}


class NotFound(LookupError):
    """What the request names does not exist in this memory."""


class Unsupported(Exception):
    """This memory cannot do what was asked (a plugin without search, no person scope, ...)."""


def _name(memory: Any) -> str:
    return str(getattr(memory, "plugin_name", type(memory).__name__))


def _members(memory: Any) -> list[tuple[str, Any]]:
    """``(name, memory)`` of a composite's members, or of the memory alone."""
    members = getattr(memory, "members", None)
    if isinstance(members, list) and all(hasattr(m, "memory") and hasattr(m, "name") for m in members):
        return [(m.name, m.memory) for m in members]
    return [(_name(memory), memory)]


def _retrievers(memory: Any, mode: str) -> list[tuple[str, Any]]:
    kind = _SCORE_KINDS[mode]
    return [(name, m) for name, m in _members(memory)
            if callable(getattr(m, "search", None)) and getattr(m, "score_kind", None) == kind]


# -- the memory --------------------------------------------------------------------------------
def memory_info(memory: Any) -> dict[str, Any]:
    """The memory's name, its members and what the page can offer for it."""
    modes = [m for m in SEARCH_MODES if (callable(getattr(memory, "search", None)) if m == "all"
                                         else bool(_retrievers(memory, m)))]
    return {"plugin": _name(memory), "members": [name for name, _ in _members(memory)], "search_modes": modes,
            "people": bool(_people_of(memory)),
            "forget_fact": callable(getattr(memory, "forget_fact", None)),
            "forget_exchange": callable(getattr(memory, "forget_exchange", None)),
            "import": callable(getattr(memory, "import_session", None))}


def backlog(memory: Any) -> int | None:
    """Documents waiting for the index (None: the memory does not say)."""
    fn = getattr(memory, "index_backlog", None)
    return int(fn()) if callable(fn) else None


def as_listed(memory: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a view of ``memory``) on the keys the page lists (``listed_keys``): a session
    listed under its own id is that session's memory, never its person's, so a forget there does
    not reach the whole person. First, once, in person scope, the sessions that became a person's
    since they stored something (``people`` changed) move into the person's memory, so the page
    does not list them apart. (Only once: a move forgets the session's own copy, and a persona
    still running with the old ``people`` may be writing there; what it writes later is listed
    under its own id.) An import maps its session ids as any package call does (a device's export
    lands in its person's memory): ``listed_keys`` leaves imports alone."""
    move_sessions_of_people(memory)
    with listed_keys():
        return fn(*args)


# -- sessions ----------------------------------------------------------------------------------
def session_ids(memory: Any) -> list[str]:
    fn = getattr(memory, "sessions", None)
    if not callable(fn):
        raise Unsupported(f"{_name(memory)} cannot list its sessions")
    return sorted(fn())


def _require_session(memory: Any, session_id: str) -> None:
    if session_id not in session_ids(memory):
        raise NotFound("no such session")


def session_view(memory: Any, session_id: str) -> dict[str, Any]:
    """The session's window, summaries, facts and stored exchanges (one per text, oldest first)."""
    _require_session(memory, session_id)
    data = memory.export(session_id) if callable(getattr(memory, "export", None)) else {}
    window = [{"role": role_of(m), "content": m.content} for m in memory.get_history(session_id)]
    summaries: list[dict[str, Any]] = []
    facts: dict[str, dict[str, Any]] = {}
    documents: dict[str, dict[str, Any]] = {}
    for member, part in _parts(data, _name(memory)):
        if part.get("summary"):
            summaries.append({"member": member, "text": str(part["summary"])})
            for text in parse_summary(str(part["summary"]))["facts"]:
                facts.setdefault(text, {"text": text, "member": member, "kind": "summary"})
        for fact in part.get("facts") or []:
            text = str(fact.get("text") if isinstance(fact, Mapping) else fact)
            facts.setdefault(text, {"text": text, "member": member, "kind": "fact"})
        for old in part.get("superseded") or []:
            if isinstance(old, Mapping) and old.get("text"):
                facts.setdefault(str(old["text"]), {"text": str(old["text"]), "member": member, "kind": "superseded"})
        for doc in part.get("documents") or []:
            documents.setdefault(str(doc.get("content")), {"doc_id": doc.get("doc_id"), "member": member,
                                                           "content": doc.get("content"), "ts": doc.get("ts")})
    return {"id": session_id, "window": window, "summaries": summaries, "facts": list(facts.values()),
            "documents": sorted(documents.values(), key=lambda d: float(d.get("ts") or 0))}


def _parts(data: Mapping[str, Any], name: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(member name, export)`` of each part of an export (a composite's members, nested ones too)."""
    members = data.get("members")
    if isinstance(members, Mapping):
        for member, part in members.items():
            if isinstance(part, Mapping):
                yield from _parts(part, str(member))
    else:
        yield name, data


def export_session(memory: Any, session_id: str) -> dict[str, Any]:
    _require_session(memory, session_id)
    return dict(memory.export(session_id))


def _forgotten(forget: Callable[[], Any]) -> dict[str, Any]:
    """What ``forget()`` deleted, and the damaged copies set aside earlier that it could not reach
    (``left_behind``: the server's log names them too, but the page's user never sees it)."""
    with set_aside_reported() as copies:
        counts = forget() or {}
    return {"forgotten": count_items(counts), "counts": counts, "left_behind": copies}


def forget_session(memory: Any, session_id: str) -> dict[str, Any]:
    _require_session(memory, session_id)
    return _forgotten(lambda: memory.forget(session_id))


def forget_fact(memory: Any, session_id: str, text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        raise ValueError("'text' must name the fact to forget")
    fn = getattr(memory, "forget_fact", None)
    if not callable(fn):
        raise Unsupported(f"{_name(memory)} keeps no facts it can forget one by one")
    _require_session(memory, session_id)
    # What the session's page shows: in scope global the memory's facts are shared, and a fact
    # another session stated is not this one's to remove.
    if text not in {fact["text"] for fact in session_view(memory, session_id)["facts"]}:
        raise NotFound("no such fact in this session")
    removed = count_items(fn(session_id, text))
    if not removed:
        raise NotFound("no such fact in this session")
    return {"forgotten": removed}


def forget_exchange(memory: Any, session_id: str, doc_id: str, member: str | None = None) -> dict[str, Any]:
    """Forget the stored exchange ``doc_id`` (of ``member``, whose ids they are, in a composite)
    everywhere the memory keeps it."""
    owner = memory
    if member:
        members = dict(_members(memory))
        if member not in members:
            raise ValueError(f"'member' must name one of {sorted(members)}, not {member!r}")
        owner = members[member]
    find = getattr(owner, "document", None)
    if not callable(getattr(memory, "forget_exchange", None)):
        raise Unsupported(f"{_name(memory)} cannot forget one exchange (forget the session instead)")
    if not callable(find):
        if not member:
            raise Unsupported(f"{_name(memory)} keeps no exchanges by id (forget the session instead)")
        raise Unsupported(f"{member} keeps no exchanges by id: name the member the exchange's id is from")
    _require_session(memory, session_id)
    doc = find(session_id, doc_id)
    if doc is None:
        raise NotFound("no such exchange in this session")
    return _forgotten(lambda: memory.forget_exchange(session_id, doc["content"]))


# -- search ------------------------------------------------------------------------------------
def search(memory: Any, query: str, session_id: str | None, mode: str = "all", top_k: int = 10) -> list[dict[str, Any]]:
    """The best ``top_k`` stored items for ``query``: what the memory recalls (``all``), or what its
    keyword or semantic retrievers find (``keyword``, ``meaning``), each hit naming its member."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"'mode' must be one of {', '.join(SEARCH_MODES)}, not {mode!r}")
    if not 1 <= top_k <= 100:
        raise ValueError("'k' must be between 1 and 100")
    if session_id is not None:
        _require_session(memory, session_id)
    if mode == "all":
        if not callable(getattr(memory, "search", None)):
            raise Unsupported(f"{_name(memory)} does not search (it is not a retriever)")
        return [_hit(h, _name(memory)) for h in memory.search(query, session_id, top_k=top_k)]
    retrievers = _retrievers(memory, mode)
    if not retrievers:
        raise Unsupported(f"{_name(memory)} has no search by {mode}")
    hits = [_hit(h, name) for name, m in retrievers for h in m.search(query, session_id, top_k=top_k)]
    return sorted(hits, key=lambda h: -h["score"])[:top_k] if len(retrievers) > 1 else hits


def _hit(hit: Any, member: str) -> dict[str, Any]:
    meta = hit.metadata or {}
    return {"content": hit.content, "doc_id": hit.source, "session_id": meta.get("session_id"),
            "score": float(meta.get("fusion_score", hit.score)), "ts": meta.get("ts"),
            "member": str(meta.get("retriever") or member)}


# -- people (a memory with a person scope) -------------------------------------------------------
def _people_of(memory: Any) -> dict[str, Any]:
    """``people()`` of a memory in person scope; {} otherwise (every memory of this package has
    the method: outside person scope, or without people, it answers {})."""
    fn = getattr(memory, "people", None)
    return dict(fn()) if callable(fn) else {}


def people(memory: Any) -> list[dict[str, Any]]:
    """Each person the memory knows, with their sessions; [] without a person scope."""
    return [{"name": name, "sessions": sorted(sessions)} for name, sessions in sorted(_people_of(memory).items())]


def _person(memory: Any, name: str) -> dict[str, Any]:
    if not _people_of(memory):
        raise Unsupported(f"{_name(memory)} has no person scope")
    found = {p["name"]: p for p in people(memory)}.get(name)
    if found is None:
        raise NotFound("no such person")
    return found


def person_view(memory: Any, name: str) -> dict[str, Any]:
    """The person, their session ids and patterns, and ``stored``: the listed memories that are
    theirs (their key, the household's when they share one, a device's not moved yet)."""
    found = _person(memory, name)
    if not callable(getattr(memory, "memory_key", None)):
        return {**found, "stored": []}
    return {**found, "stored": listed_as(memory, memory.memory_key(PERSON_PREFIX + name))}


def forget_person(memory: Any, name: str) -> dict[str, Any]:
    _person(memory, name)
    return _forgotten(lambda: memory.forget_person(name))


def export_person(memory: Any, name: str) -> dict[str, Any]:
    _person(memory, name)
    return dict(memory.export_person(name))


# -- import ------------------------------------------------------------------------------------
def import_sessions(memory: Any, items: Sequence[Mapping[str, Any]], session_id: str | None,
                    progress: Callable[[int], None]) -> int:
    """Import session exports one by one, calling ``progress(done)`` after each; returns how many."""
    if not callable(getattr(memory, "import_session", None)):
        raise Unsupported(f"{_name(memory)} cannot import sessions")
    for done, item in enumerate(items, 1):
        try:
            memory.import_session(item, session_id)
        except (TypeError, ValueError) as exc:  # which one, and that the ones before it are in
            named = session_id or (item.get("session_id") if isinstance(item, Mapping) else None)
            raise ValueError(f"session {done} of {len(items)} ({named!r}) was not imported, {done - 1} before "
                             f"it were: {exc}") from exc
        progress(done)
    return len(items)
