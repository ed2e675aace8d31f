"""What every backend of this package shares: config handling, lifecycle and data ownership."""
from __future__ import annotations

import copy
import inspect
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from .._core.compat import AgentContextManager, AgentMessage
from .._core.held import HeldWrites, Unstorable
from .._core.log import LOG, LogOnce
from .._core.paths import check_store_path, is_memory_path, resolve_path
from ..config import parse_config, replace_setting, setting_names
from ..errors import ConfigError, MemoryClosed, MemoryPluginError, StorageError
from ..messages import check_session_id, coerce_messages
from .people import People, inside, keyed, parse_people, unmapped
from .waiting import WaitsForStore

__all__ = ["MemoryPlugin", "store_path_problems"]


def store_path_problems(key: str, path: Any) -> list[str]:
    """``["'key': why"]`` when ``path`` names what no store may use (a FIFO, a directory, a
    device: see :func:`~._core.paths.check_store_path`); else ``[]``. Nothing is opened or made."""
    if isinstance(path, str) and path.strip() and not is_memory_path(path):
        try:
            check_store_path(resolve_path(path))
        except ConfigError as exc:
            return [f"'{key}': {exc}"]
    return []


#: Copies of a session moved into a person before it is forgotten, while a writer keeps adding to it.
_MOVE_ROUNDS = 5
#: Items (messages, or the exchanges entity keeps) held per session while the store refuses writes.
HELD_ITEMS = 200
#: ... and in all sessions: a household's satellites through one long outage stay bounded in RAM.
HELD_TOTAL = 2_000
#: What a store raises when it cannot take a write now (down, full, locked): the write is held.
_REFUSED = (MemoryPluginError, OSError)


class MemoryPlugin(AgentContextManager, metaclass=WaitsForStore):
    """Base of this package's backends (not part of the OPM contract).

    Subclasses set ``Config`` (a frozen dataclass of :func:`~ovos_memory_plugins.config.option`
    fields) and ``plugin_name`` (the entry-point name, used in messages). The caller's dict is
    deep-copied into ``self.config`` and parsed once into ``self.settings``.

    Every resolved setting is also an attribute of the instance, as in the reference package
    (``memory.scope``, ``memory.max_history``, ...). Assigning one of ``live_settings`` (the
    knobs read on every turn) checks the value as the config would and takes effect at once;
    the others (paths, plugins, stores) are fixed at construction and assigning them is an
    ``AttributeError`` that says so.

    Beyond the three contract methods every backend offers ``forget``, ``export``,
    ``import_session``, ``sessions``, ``flush`` and ``close``, and works as a context manager.

    With ``scope: person`` (see :mod:`~ovos_memory_plugins._memory.people`) every public method's
    ``session_id`` is mapped to the memory key before the backend sees it, so a backend keys by
    it as by any session id; ``people``, ``forget_person`` and ``export_person`` act on a person.
    """

    Config: ClassVar[type]
    plugin_name: ClassVar[str] = "ovos-memory-plugin"
    #: Keys read by something else than ``Config`` (so they are not reported as unknown).
    extra_config_keys: ClassVar[tuple[str, ...]] = ()
    #: Settings that may be assigned after construction (see the class docstring).
    live_settings: ClassVar[frozenset[str]] = frozenset()
    #: Names of instance attributes that are not the setting of the same name (the composite's
    #: ``members`` are the loaded members, not their config).
    own_attributes: ClassVar[frozenset[str]] = frozenset()
    #: Session ids this backend keeps for itself (entity's record of the facts every session
    #: shares): refused as a session's, and a composite refuses them before any member stores.
    reserved_session_ids: ClassVar[frozenset[str]] = frozenset()
    #: The parts of an export this backend keeps ("window", "documents", "summary", "facts"): what
    #: it takes from another backend's export (see ``_memory/conversion.py``).
    export_parts: ClassVar[frozenset[str]] = frozenset()
    #: Whether updates the store refused are given back in one ``_store_batch`` call, inside
    #: ``said_at`` the newest one's time, rather than one call per update at its own time: for a
    #: backend whose items carry their time, or that keeps only the last update's (see
    #: ``_core/held.py``).
    held_in_one_call: ClassVar[bool] = False
    #: Private methods whose ``session_id`` is mapped like a public method's (``session2history``
    #: reads and edits through them).
    keyed_private_methods: ClassVar[tuple[str, ...]] = ("_replace_window", "_stored_window")
    #: Built while its store does not answer, the backend starts anyway and catches up once it
    #: does (see ``_memory/waiting.py``).
    waits_for_store: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, fn in list(vars(cls).items()):
            if _takes_session(name, fn, cls.keyed_private_methods):
                setattr(cls, name, keyed(fn))

    def __init__(self, config: Mapping[str, Any] | None = None):
        # Private injection keys (``_con``, ``_embedder``) hold live objects: never deep-copy them
        # (nor those of a composite's member configs).
        if config is not None and not isinstance(config, Mapping):
            raise ConfigError(f"{self.plugin_name}: config must be a dict, not {type(config).__name__}")
        raw = dict(config or {})
        private = {k: v for k, v in raw.items() if k.startswith("_")}
        public = _copy_config({k: v for k, v in raw.items() if not k.startswith("_")})
        self.settings: Any = parse_config(self.Config, public, self.plugin_name, self.extra_config_keys)
        problems = self.check_settings(self.settings)
        if problems:
            raise ConfigError(f"{self.plugin_name}: {problems[0]}")
        super().__init__({**public, **private})
        self._closed = False
        self._people = self._people_of(self.settings)
        self._adoption = threading.Lock()
        self._adoption_log = LogOnce()  # a move that cannot happen is said once, not on every call
        self._adopted = self._people is None
        self._held: HeldWrites[Any] = HeldWrites(HELD_ITEMS, self._held_overflow, self.held_in_one_call,
                                                 self._held_dropped, HELD_TOTAL)

    def _people_of(self, settings: Any) -> People | None:
        """The person mapping of ``scope: person``; None in any other scope."""
        if getattr(settings, "scope", None) != "person":
            if getattr(settings, "people", None):
                LOG.warning(f"{self.plugin_name}: 'people' is set but scope is {settings.scope!r}: sessions are not "
                            "mapped to people (set \"scope\": \"person\")")
            return None
        owners = parse_people(getattr(settings, "people", {}))
        if not owners:
            LOG.warning(f"{self.plugin_name}: scope 'person' without 'people': every session keeps a memory of "
                        "its own, as in scope 'session'")
        return People(owners, bool(getattr(settings, "household", False)))

    @classmethod
    def check_settings(cls, settings: Any) -> list[str]:
        """What would stop this backend from starting with ``settings``, beyond each key's own
        checks; without I/O or side effects, so ``ovos-memory check-config`` reports it too.
        Subclasses extend the list (``super().check_settings(settings) + [...]``)."""
        from .._llm.endpoint import endpoint_url_problem  # the LLM memories' and the composite's api_url
        from ..storage import store_location

        problem = endpoint_url_problem(getattr(settings, "api_url", None))
        problems = store_path_problems("db_path", getattr(settings, "db_path", None)) + (
            [f"'api_url' is {settings.api_url!r}: {problem}"] if problem else [])
        try:
            store_location(getattr(settings, "db_path", None), getattr(settings, "db_url", None),
                           getattr(settings, "backend", None))
        except ConfigError as exc:
            problems.append(str(exc))
        return problems

    @property
    def system_prompt(self) -> str:
        return str(getattr(self.settings, "system_prompt", "") or "")

    # -- settings as attributes ------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: settings never shadow real attributes.
        settings = self.__dict__.get("settings")
        if settings is not None and not name.startswith("_") and name in setting_names(type(settings)):
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        settings = self.__dict__.get("settings")
        if (settings is None or name.startswith("_") or name in self.own_attributes
                or name not in setting_names(type(settings))):
            object.__setattr__(self, name, value)
            return
        if hasattr(type(self), name):
            if callable(getattr(type(self), name)):  # a method named as a setting ("people"): not this
                raise AttributeError(f"{self.plugin_name}: {name!r} is fixed at construction; set it in the config")
            object.__setattr__(self, name, value)
            return
        self._assign_setting(name, value)

    def _assign_setting(self, name: str, value: Any) -> None:
        """Check ``value`` as the config would and apply it (live settings only)."""
        if name not in self.live_settings:
            raise AttributeError(f"{self.plugin_name}: {name!r} is fixed at construction; set it in the config")
        object.__setattr__(self, "settings", replace_setting(self.settings, name, value, self.plugin_name))
        if name == "scope":  # into or out of person scope: the mapping follows at once
            self._people = self._people_of(self.settings)
            self._adopted = self._people is None
        self._settings_changed()

    def _settings_changed(self) -> None:
        """Rebuild what is derived from ``settings`` (after a live setting was assigned)."""

    # -- people ---------------------------------------------------------------------------
    def people(self) -> dict[str, list[str]]:
        """The people of ``scope: person``, each with their session ids and patterns, by name
        (empty in another scope)."""
        if self._people is None:
            return {}
        return {name: list(self._people.owners[name]) for name in self._people.names()}

    def forget_person(self, name: str) -> dict[str, Any]:
        """Forget everything of person ``name``, whichever of their sessions stored it (the
        household's memory when it is shared)."""
        key = self._person_key(name)
        self._gather_person(key)
        with inside():  # the key is this package's, not a caller's session id
            return self.forget(key)

    def export_person(self, name: str) -> dict[str, Any]:
        """Everything of person ``name``, shaped as :meth:`export`."""
        key = self._person_key(name)
        self._gather_person(key)
        with inside():
            return self.export(key)

    def _gather_person(self, key: str) -> None:
        """Move into ``key`` what its sessions stored under their own ids since this memory moved
        them (a process still on the old ``people`` wrote there): a long-running process (the
        web page) forgets or exports a person whole, as a command starting afresh does."""
        assert self._people is not None
        if _storage_read_only():  # a command that only looks moves nothing (it names them instead)
            return
        self._adopt_moved_sessions()
        with self._adoption:
            self._move_sessions_of_people(into=key)

    def memory_key(self, session_id: str) -> str:
        """The key ``session_id``'s memory is stored under: its person's in ``scope: person``, else
        itself (what :meth:`sessions` lists)."""
        return self._people.memory_key(session_id, from_caller=False) if self._people is not None else session_id

    def _person_key(self, name: str) -> str:
        if self._people is None:
            raise ConfigError(f"{self.plugin_name}: people exist only with scope 'person' (scope is "
                              f"{getattr(self.settings, 'scope', None)!r})")
        try:
            return self._people.key_of(name)
        except ConfigError as exc:
            raise ConfigError(f"{self.plugin_name}: {exc}") from exc

    def _adopt_moved_sessions(self) -> None:
        """Once per instance: what a session stored under its own id before it became a person's
        (``people`` changed) moves into the person's memory, and a person's into the household's
        when the people share one, so a change of ``people`` loses nothing.

        Each moved session is exported, imported into the person's key (imports skip what is
        already there, so a second process doing the same adds nothing) and only then forgotten.
        """
        if self._adopted or _storage_read_only():  # a command that only looks moves nothing
            return
        with self._adoption:
            if self._adopted:
                return
            self._adopted = True  # first: the moves below call keyed methods, which land here
            try:
                self._move_sessions_of_people()
            except MemoryPluginError as exc:  # the store is down: the turn goes on, the move waits
                self._adopted = False
                self._adoption_log.warning("move", "%s: cannot move the sessions that now belong to people yet (%s); "
                                           "trying again on the next call", self.plugin_name, exc)
            else:
                self._adoption_log.clear("move")

    def _move_sessions_of_people(self, into: str | None = None) -> None:
        """Move each session stored under its own id into the key it belongs to now (only those
        of ``into``, when given)."""
        people = self._people
        assert people is not None
        for session_id in self.sessions():
            try:  # where it belongs now: its person's key, or the household's for a person's key
                key = people.memory_key(session_id, from_caller=False)
            except ConfigError as exc:  # two people's patterns claim it: it stays, the others move
                self._adoption_log.error(f"claimed:{session_id}", "%s: %s; its memory stays under %r",
                                         self.plugin_name, exc, session_id)
                continue
            if key != session_id and (into is None or key == into):
                self._move(session_id, key)

    def _move(self, session_id: str, key: str) -> None:
        with unmapped():  # the session's own copy, under its own id
            data = self.export(session_id)
        for _ in range(_MOVE_ROUNDS):
            with inside():  # into the person's key, as each member maps it (a household member: the household's)
                self.import_session(data, key)
            # A process still on the old ``people`` may have written meanwhile: copy again until
            # nothing new came (imports skip what is there), so the forget loses nothing it wrote.
            with unmapped():
                again = self.export(session_id)
            if again == data:
                break
            data = again
        with unmapped():
            self.forget(session_id)
        # A warning: another persona's memory on the same files would be taken so (people: {"me": ["*"]}).
        LOG.warning(f"{self.plugin_name}: session {session_id!r} belongs to {key!r} by the people config; its memory "
                    f"was moved there (give each persona files of its own if {session_id!r} was another's)")

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        """The session ids this memory holds anything for."""
        return self._listed(())

    def _listed(self, stored: Iterable[str]) -> list[str]:
        """``stored`` (the sessions the store lists) and those with updates held here, sorted:
        a session whose turns the store refused is still one this memory holds."""
        return sorted(set(stored).union(self._held.sessions()))

    def forget(self, session_id: str) -> dict[str, int]:
        """Delete everything stored for ``session_id``; returns counts of what was removed."""
        return {}

    def export(self, session_id: str) -> dict[str, Any]:
        """Everything stored for ``session_id`` as JSON-ready data (see :meth:`import_session`)."""
        check_session_id(session_id)  # as forget(): None or a number is a mistake, not an empty export
        self._write_held(session_id)  # what the store refused earlier is part of the session
        return {"plugin": self.plugin_name, "session_id": session_id}

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        """Load what :meth:`export` produced (into ``session_id`` if given)."""

    # -- health ---------------------------------------------------------------------------
    def degraded(self) -> dict[str, str]:
        """What works less well than configured right now, and why: ``{part: reason}``, empty when all is well.

        A part is a plugin name ("ovos-memory-plugin-entity"), with a suffix when one plugin has
        several ("…:summary"). Tools show it (``ovos-memory chat`` says which memory degraded);
        the turn is answered either way.
        """
        return {}

    # -- lifecycle -----------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Store what the store refused earlier and wait until background work (embedding,
        summaries) is done; True if both finished."""
        return self._write_all_held()

    def close(self) -> None:
        """Finish background work and release files and connections. Idempotent."""
        self._closed = True

    # -- updates the store refused (see _core/held.py) ---------------------------------------------
    _log: LogOnce  # each backend's own: one line when storing breaks, one when it works again

    def _store_batch(self, session_id: str, batch: list[Any]) -> None:
        """Store ``batch`` (what ``update_history`` keeps of a turn's messages, held ones first)
        for the session in one transaction; raise a MemoryPluginError or OSError when the store
        cannot take it now. Backends that store updates implement it."""
        raise NotImplementedError(f"{type(self).__name__} stores no updates")

    def _write_update(self, session_id: str, items: list[Any]) -> bool:
        """Store ``items`` after anything held for the session. Refused, they are held (and the
        failure logged once per outage): the turn goes on. True when stored."""
        try:
            written = self._held.write(session_id, items, lambda batch: self._store_batch(session_id, batch),
                                       _REFUSED)
        except _REFUSED as exc:
            self._say_held(session_id, exc)
            return False
        self._log.clear("write", f"{self.plugin_name}: storing works again")
        self._log.clear("held")  # a later outage that overflows is said again
        if written:
            LOG.info(f"{self.plugin_name}: stored {written} held item(s) of {session_id!r}")
        return True

    def _with_held(self, session_id: str, history: list[AgentMessage], policy: Any) -> list[AgentMessage]:
        """``history`` as read from the store, with the messages it refused since appended under
        the window's rules: while a file is locked or a disk full, the turns said meanwhile are
        still the conversation ("and tomorrow?" needs the question before it)."""
        if session_id not in self._held:  # the turn's fast path: a dict lookup, no lock
            return history
        held = self._held.peek(session_id)
        if not held:
            return history
        from ..storage.windows import append_entries  # the storage layer, loaded only when needed

        now = time.time()
        return [m for _, m in append_entries([(now, m) for m in history], held, policy, now)]

    def _say_held(self, session_id: str, exc: BaseException) -> None:
        self._log.error("write", "%s: could not store an update of %r (%s); it is kept in memory and stored "
                        "with the next one that can be", self.plugin_name, session_id, exc)

    def _recording_writes(self) -> Any:
        """A block whose writes join a transaction the caller commits (a composite's): yields
        what they stored, for :meth:`_hold_uncommitted` should that commit fail."""
        return self._held.recording()

    def _hold_uncommitted(self, stored: list[Any], exc: BaseException) -> None:
        """The transaction ``stored`` (from :meth:`_recording_writes`) was written in did not
        commit: it is held, as a write the store refused."""
        self._held.hold_again(stored)
        for session_id in dict.fromkeys(sid for sid, _, _ in stored):
            self._say_held(session_id, exc)

    def _write_held(self, session_id: str) -> bool:
        """Store what is held for ``session_id`` (before an export, a flush); True when nothing
        is left held. Free when nothing is. What the store can never take for the session (held
        during an outage, refused for good once it ended) is dropped, and said once."""
        with self._held.turn(session_id):  # a replay in flight has taken what it stores: after it
            if session_id not in self._held:
                return True
        try:
            return self._write_update(session_id, [])
        except Unstorable as exc:
            self._log.error("unstorable", "%s: dropped what was held for a session the store cannot keep (%s)",
                            self.plugin_name, exc)
            return True

    def _require_held_written(self, session_id: str) -> None:
        """Before a forget of one exchange: what is held must be stored first (the exchange may
        be among it, and would be stored after the forget); a StorageError while it cannot be."""
        if not self._write_held(session_id):
            raise StorageError(f"{self.plugin_name}: updates of {session_id!r} the store refused earlier are still "
                               "waiting to be stored; nothing was forgotten: try again once the store works")

    def _write_all_held(self) -> bool:
        """Store what is held for every session (``flush``); True when nothing is left held."""
        return all([self._write_held(sid) for sid in self._held.sessions()])

    def _close_held(self) -> None:
        """Before the store is released: store what is held, or say what is lost with the process."""
        if not self._write_all_held():
            dropped = f" ({self._held.dropped} older ones were dropped earlier)" if self._held.dropped else ""
            LOG.error(f"{self.plugin_name}: closing with {self._held.count()} item(s) the store refused; they "
                      f"are lost{dropped}")

    def _held_dropped(self, exc: BaseException) -> None:
        self._log.error("dropped", "%s: dropped an update held while the store refused writes, which the store "
                                   "then could not take (%r); the updates after it are stored", self.plugin_name, exc)

    def _held_overflow(self) -> None:
        self._log.warning("held", "%s: the store has refused writes for too long; keeping only the newest %d "
                          "items per session, %d in all", self.plugin_name, HELD_ITEMS, HELD_TOTAL)

    def _incoming(self, new_messages: Any, session_id: str) -> list[AgentMessage]:
        """What ``update_history`` is given, checked at the boundary: the session id, the memory
        still open, and the messages normalised (an empty list: nothing to store)."""
        check_session_id(session_id)
        self._check_open()
        return coerce_messages(new_messages)

    def _check_open(self, call: str = "update_history") -> None:
        """Refuse ``call`` on a closed memory with :class:`MemoryClosed`.

        Its stores are released: the update would be dropped (a SQLite store) or written by a
        memory that no longer runs its background work, while the caller believes it was kept.
        """
        if self._closed:
            raise MemoryClosed(f"{self.plugin_name}: {call}() after close(); this memory is closed and stores "
                               "nothing more (create a new one)")

    def __enter__(self) -> MemoryPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _storage_read_only() -> bool:
    from ..storage import is_read_only  # the stores import this module's package

    return is_read_only()


def _takes_session(name: str, fn: Any, private: tuple[str, ...]) -> bool:
    """Whether ``name`` is a method whose ``session_id`` names a memory (so person scope maps it)."""
    if not inspect.isfunction(fn) or (name.startswith("_") and name not in private):
        return False
    return "session_id" in inspect.signature(fn).parameters


for _name in ("forget", "export", "import_session"):
    setattr(MemoryPlugin, _name, keyed(getattr(MemoryPlugin, _name)))


def _copy_config(value: Any) -> Any:
    """A deep copy of a config, except the values of private (``_``) keys, which are shared."""
    if isinstance(value, Mapping):
        return {k: v if isinstance(k, str) and k.startswith("_") else _copy_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_config(v) for v in value)
    return copy.deepcopy(value)
