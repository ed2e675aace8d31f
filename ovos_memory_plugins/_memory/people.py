"""Person scope: the sessions of one person share one memory, every other session keeps its own.

A persona's ``people`` names who owns which sessions: ``{"alice": ["kitchen", "alice-*"]}`` (ids,
or ``fnmatch`` patterns). Every public call of a memory in ``scope: person`` turns its
``session_id`` into a *memory key* once, at the boundary (:func:`keyed`), and the stores key by
that as they key by session ids otherwise:

* a session of a person -> ``person:<name>``: the window, recall, facts and summary follow the
  person from one device to the next;
* with ``household: true`` every person's session -> ``household:`` (one memory shared by the
  household; a member of a composite can be the only shared part, e.g. the facts);
* any other session (a guest) -> its own id: it sees nothing of anyone else's and writes nowhere
  else. A caller's session id may not start with a reserved prefix (``person:``, ``household:``),
  so no guest can name its way into a person's memory.

The mapping happens once per call chain (a thread-local depth): a composite maps the id and its
members receive the key, which maps to itself.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import inspect
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..config import described
from ..errors import ConfigError

__all__ = ["HOUSEHOLD_KEY", "PERSON_PREFIX", "People", "inside", "is_memory_key", "keyed", "listed_as",
           "listed_keys", "move_sessions_of_people", "parse_people", "unmapped"]

PERSON_PREFIX = "person:"
HOUSEHOLD_KEY = "household:"
_RESERVED = (PERSON_PREFIX, HOUSEHOLD_KEY)
_GLOB_CHARS = frozenset("*?[")
_SEEN_MAX = 4096

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class People:
    """Who owns which sessions (``{name: (id or pattern, ...)}``), and whether they share one memory."""

    owners: Mapping[str, tuple[str, ...]]
    household: bool = False
    #: session id -> its person (None: a guest), so a turn's nested calls match patterns once.
    _seen: dict[str, str | None] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def names(self) -> list[str]:
        return sorted(self.owners)

    def key_of(self, name: str) -> str:
        """The memory key of person ``name`` (the household's when it shares one)."""
        if name not in self.owners:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"no person named {name!r} in 'people' (known: {known})")
        return HOUSEHOLD_KEY if self.household else PERSON_PREFIX + name

    def person_of(self, session_id: str) -> str | None:
        """The person owning ``session_id``; None for a guest. A session two people's patterns
        both match is refused (ids claimed twice are refused at construction already)."""
        if session_id in self._seen:
            return self._seen[session_id]
        owners = [name for name, patterns in self.owners.items() if _claims(patterns, session_id)]
        if len(owners) > 1:
            raise ConfigError(f"session {session_id!r} is claimed by both {owners[0]!r} and {owners[1]!r} in 'people'")
        if len(self._seen) >= _SEEN_MAX:  # bounded: a caller may invent session ids without end
            self._seen.clear()
        self._seen[session_id] = owners[0] if owners else None
        return self._seen[session_id]

    def memory_key(self, session_id: str, from_caller: bool) -> str:
        """The key ``session_id`` is stored under. A key this mapping made maps to itself (a
        composite passes its members the key), a person's to the household's when the people
        share one; from a caller, a reserved prefix is refused. A person's key is never matched
        against the patterns: ``person:bob`` of a person no longer in ``people`` is bob's memory,
        not that of whoever's pattern ``*`` would claim it."""
        if is_memory_key(session_id):
            if from_caller:
                refuse_reserved(session_id)
            return self.household_key(session_id) or session_id
        person = self.person_of(session_id)
        return session_id if person is None else self.key_of(person)

    def household_key(self, key: str) -> str | None:
        """``household:`` for the key of a person in ``people`` when they share one memory, else None."""
        name = key.removeprefix(PERSON_PREFIX)
        return HOUSEHOLD_KEY if self.household and key != name and name in self.owners else None

    def refuse_unowned(self, key: Any) -> None:
        """An import must not create a memory no session reads: a person's key (``person:bob``)
        that names nobody in ``people``, or the household's when the people do not share one."""
        if not isinstance(key, str) or not is_memory_key(key):
            return
        if (key == HOUSEHOLD_KEY) if self.household else (key.removeprefix(PERSON_PREFIX) in self.owners):
            return
        known = ", ".join(self.names()) or "none"
        raise ValueError(f"cannot import into {key!r}: no session of 'people' reads it (people: {known}"
                         f"{'; they share the household memory' if self.household else ''}); "
                         "import it under one of your session ids instead")


def is_memory_key(session_id: str) -> bool:
    """Whether ``session_id`` is a key this mapping makes (never a caller's session id)."""
    return session_id.startswith(_RESERVED)


def _claims(patterns: tuple[str, ...], session_id: str) -> bool:
    return any(p == session_id or (_is_pattern(p) and fnmatch.fnmatchcase(session_id, p)) for p in patterns)


def _is_pattern(text: str) -> bool:
    return bool(_GLOB_CHARS & set(text))


def parse_people(people: Any) -> dict[str, tuple[str, ...]]:
    """``people`` checked: names to non-empty lists of session ids or patterns; an id two people
    claim (listed by both, or listed by one and matched by the other's pattern) is refused."""
    if not isinstance(people, Mapping):
        raise ConfigError("'people' must be an object of person name to session ids ({\"alice\": [\"kitchen\"]}), "
                          f"not {described(people)}")
    owners: dict[str, tuple[str, ...]] = {}
    for name, sessions in people.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"'people' has a person name {name!r}; a name must be non-empty text")
        if isinstance(sessions, str) or not isinstance(sessions, (list, tuple)) or not sessions:
            raise ConfigError(f"'people'[{name!r}] must be a non-empty list of session ids or patterns, "
                              f"got {sessions!r}")
        for item in sessions:
            if not isinstance(item, str) or not item:
                raise ConfigError(f"'people'[{name!r}] holds {item!r}; each entry must be a non-empty session id "
                                  "or pattern")
            if item.startswith(_RESERVED):
                raise ConfigError(f"'people'[{name!r}] holds {item!r}, which starts with a reserved prefix "
                                  f"({', '.join(_RESERVED)})")
        owners[name] = tuple(sessions)
    _refuse_shared_ids(owners)
    return owners


def _refuse_shared_ids(owners: Mapping[str, tuple[str, ...]]) -> None:
    # Literal ids by owner, looked up; only the patterns are tried one by one (thousands of ids load fast).
    literal: dict[str, str] = {}
    globs = [(name, p) for name, patterns in owners.items() for p in patterns if _is_pattern(p)]
    for name, patterns in owners.items():
        for session_id in (p for p in patterns if not _is_pattern(p)):
            other = literal.setdefault(session_id, name)
            if other == name:
                other = next((o for o, p in globs if o != name and fnmatch.fnmatchcase(session_id, p)), name)
            if other != name:
                first, second = sorted((name, other))
                raise ConfigError(f"session {session_id!r} is claimed by both {first!r} and {second!r} in 'people'")
    # Two people's patterns: when one, read as a session id, matches the other ("x-*" and "x-*",
    # "bob-*" and "*"), that id is claimed twice, and so is every id like it. Other overlaps
    # ("a*" and "*b") show only when a session comes, which is refused then.
    for i, (name, pattern) in enumerate(globs):
        for other, theirs in globs[i + 1:]:
            if other != name and (_takes_in(theirs, pattern) or _takes_in(pattern, theirs)):
                (a, a_pattern), (b, b_pattern) = sorted(((name, pattern), (other, theirs)))
                raise ConfigError(f"the patterns {a_pattern!r} of {a!r} and {b_pattern!r} of {b!r} in 'people' "
                                  "claim the same sessions; give each person patterns of their own")


def _takes_in(pattern: str, other: str) -> bool:
    """Whether a session id ``other`` claims is one ``pattern`` claims too: ``other`` read as a
    session id, or (holding a ``[`` set, read as text otherwise) one id it matches, each set read
    as a character it takes ("a-[0-9]*" as "a-0", which "a-*" claims too)."""
    if "[" not in other:
        return fnmatch.fnmatchcase(other, pattern)
    example = _example(other)
    return example is not None and fnmatch.fnmatchcase(example, other) and fnmatch.fnmatchcase(example, pattern)


_PART = re.compile(r"\[(!?)(\]?[^\]]*)\]|.", re.DOTALL)


def _example(pattern: str) -> str | None:
    """A session id ``pattern`` matches, if one is easily had: each ``[set]`` as a character of it
    (one outside it for ``[!set]``), ``?`` as "x", ``*`` as nothing; None when no candidate fits."""
    out = []
    for part in _PART.finditer(pattern):
        token = part.group(0)
        if len(token) == 1:
            out.append({"*": "", "?": "x"}.get(token, token))
            continue
        negated, chars = part.group(1), part.group(2)
        candidates = "x0a_-Z9" if negated else chars.replace("-", "") + "x0a_-"
        char = next((c for c in candidates if fnmatch.fnmatchcase(c, token)), None)
        if char is None:
            return None
        out.append(char)
    return "".join(out)


# -- the boundary ------------------------------------------------------------------------------
_calls = threading.local()


def _depth() -> int:
    return getattr(_calls, "depth", 0)


@contextlib.contextmanager
def inside() -> Iterator[None]:
    """Calls made in this block come from the package, not a caller: a memory key passes."""
    _calls.depth = _depth() + 1
    try:
        yield
    finally:
        _calls.depth -= 1


def listed_as(memory: Any, key: str) -> list[str]:
    """The sessions ``memory`` lists whose memory is ``key``: the key itself, and a device of its
    person stored under its own id (not moved yet); one two people's patterns claim is nobody's."""
    def theirs(session_id: str) -> bool:
        try:
            return session_id == key or memory.memory_key(session_id) == key
        except ConfigError:
            return False

    return [s for s in sorted(memory.sessions()) if theirs(s)]


def move_sessions_of_people(memory: Any) -> None:
    """Before a tool names memories by the keys ``sessions()`` lists: once, in person scope, the
    sessions that became a person's since they stored something (``people`` changed) move into
    the person's memory, so a person's memory is whole where the tool reads or forgets it."""
    with inside():
        adopt = getattr(memory, "_adopt_moved_sessions", None)
        if callable(adopt):
            adopt()


@contextlib.contextmanager
def listed_keys() -> Iterator[None]:
    """Calls made in this block name memories by the keys ``sessions()`` lists (the command line,
    the web page): a session id reaches the stores as it is (a device listed under its own id is
    its own memory, not its person's), and so does a person's key, except in a member that holds
    nothing under it and shares a household memory (see ``_listed``). Nothing is moved meanwhile:
    the page moves sessions once, before it lists them."""
    with _calls_flagged("listed"):
        yield


@contextlib.contextmanager
def unmapped() -> Iterator[None]:
    """Calls made in this block reach the stores with the ids given, unmapped (moving what a
    session stored under its own id into a person's memory)."""
    with _calls_flagged("unmapped"):
        yield


@contextlib.contextmanager
def _calls_flagged(flag: str) -> Iterator[None]:
    """Package calls (``inside``) with ``flag`` set on this thread, restored after."""
    before = getattr(_calls, flag, False)
    setattr(_calls, flag, True)
    try:
        with inside():
            yield
    finally:
        setattr(_calls, flag, before)


def keyed(fn: F) -> F:
    """``fn`` (a memory's method with a ``session_id`` parameter) with that argument mapped to the
    memory key by the instance's ``_people`` (see the module docstring); unchanged without it."""
    if getattr(fn, "_keyed", False):
        return fn
    params = list(inspect.signature(fn).parameters)
    position = params.index("session_id") - 1  # without self
    imports = fn.__name__ == "import_session"
    # Forgetting or exporting what is stored under a reserved key stays possible in any scope
    # (a memory once in person scope, now back in session scope, still holds its people's).
    owners_only = fn.__name__.startswith(("forget", "export"))

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        people: People | None = self.__dict__.get("_people")
        if people is not None and getattr(_calls, "listed", False) and not imports:
            args, kwargs = _listed(self, people, position, args, kwargs)
        elif people is None:
            if not owners_only and _depth() == 0 and not getattr(_calls, "listed", False):
                _refuse_reserved(_given(position, args, kwargs), args, kwargs, imports)
        elif not getattr(_calls, "unmapped", False):
            self._adopt_moved_sessions()
            if imports and _given(position, args, kwargs) is None:
                args, kwargs = _export_key(people, position, args, kwargs)
            else:
                args, kwargs = _mapped(people, position, args, kwargs)
            if imports:
                people.refuse_unowned(_given(position, args, kwargs))
        _calls.depth = _depth() + 1  # inline rather than inside(): this runs on every call of a turn
        try:
            return fn(self, *args, **kwargs)
        finally:
            _calls.depth -= 1

    wrapper._keyed = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def refuse_reserved(session_id: Any) -> None:
    """A ValueError for a caller's session id that is a key of the people's memories."""
    if isinstance(session_id, str) and is_memory_key(session_id):
        raise ValueError(f"session_id {session_id!r} starts with a prefix reserved for the memories of people "
                         f"({', '.join(_RESERVED)}); choose another session id")


def _refuse_reserved(session_id: Any, args: tuple[Any, ...], kwargs: dict[str, Any], imports: bool) -> None:
    """Without ``people`` too, a caller's session id may not be a person's key: what it stored
    there would be that person's memory once ``scope: person`` is switched on."""
    if imports and session_id is None:  # an import without an id goes where its export names
        data = args[0] if args else kwargs.get("data")
        session_id = data.get("session_id") if isinstance(data, Mapping) else None
    refuse_reserved(session_id)


def _given(position: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return kwargs["session_id"] if "session_id" in kwargs else args[position] if position < len(args) else None


def _export_key(people: People, position: int, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``import_session(data)`` with no session id: the key of the session the export names, so a
    device's export lands in its person's memory (where its turns read), and an export of a
    person's memory (``person:<name>``, what export gives) goes back under that key."""
    data = args[0] if args else kwargs.get("data")
    named = data.get("session_id") if isinstance(data, Mapping) else None
    if not isinstance(named, str):
        return args, kwargs  # the import itself names what is missing
    # The session id given positionally was None; it goes by name (nothing follows it).
    return args[:position], {**kwargs, "session_id": people.memory_key(named, from_caller=False)}


def _mapped(people: People, position: int, args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    from_caller = _depth() == 0
    return _with_key(position, args, kwargs, lambda session_id: people.memory_key(session_id, from_caller))


def _listed(memory: Any, people: People, position: int, args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A key as ``listed_keys`` reads it: a session id as it is; a person's key as it is where
    this memory holds it, else the household's where its people share one (a composite's
    household member keeps the person's facts there)."""
    def key(session_id: str) -> str:
        shared = people.household_key(session_id) if is_memory_key(session_id) else None
        return shared if shared and session_id not in memory.sessions() else session_id

    return _with_key(position, args, kwargs, key)


def _with_key(position: int, args: tuple[Any, ...], kwargs: dict[str, Any],
              key: Callable[[str], str]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if "session_id" in kwargs:
        if isinstance(kwargs["session_id"], str):
            kwargs = {**kwargs, "session_id": key(kwargs["session_id"])}
    elif position < len(args) and isinstance(args[position], str):
        args = (*args[:position], key(args[position]), *args[position + 1:])
    return args, kwargs
