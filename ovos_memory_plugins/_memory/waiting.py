"""A backend whose store does not answer when it is built: it starts anyway, and catches up.

A persona on a board that boots faster than its database server would otherwise get no memory at
all (ovos-persona runs without one when the plugin fails to load). Instead, building one of this
package's backends while its store does not answer (:class:`~ovos_memory_plugins.errors.StoreUnavailable`
among the causes) gives a :class:`StartingMemory`:

* turns are answered by a *stand-in*, the same backend with the same config but its store in RAM:
  it remembers what is said from then on, and renders it as the backend does;
* every update is also kept (the newest ``KEPT_PER_SESSION`` per session), and a background thread
  (:class:`~._memory.late_start.LateStarts`, as for a composite's member) builds the backend
  again, after a couple of seconds and then less often, until the store answers; the backend
  then gets what was kept, oldest first, each with the time it was said, and every later call
  goes to it;
* until then, anything else that reads or changes stored memory (forget, export, import, search,
  sessions, the live ``session2history`` view) raises ``StoreUnavailable``: the stand-in holds
  only what was said since the start.

A composite builds its members with :func:`no_waiting` (it waits for them itself), and so do the
management commands: a command asked to act on a store that does not answer says so.
"""
from __future__ import annotations

import abc
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .._core.clock import said_at
from .._core.compat import AgentContextManager
from .._core.loading import allows_value, reads_key
from .._core.log import LOG, LogOnce
from .._core.paths import MEMORY_PATH
from ..config import setting_names
from ..errors import StorageError, StoreUnavailable
from ..messages import coerce_messages
from .late_start import LateStarts, Waiting, store_unreachable

__all__ = ["no_waiting", "StartingMemory", "WaitsForStore"]

_WAITS: contextvars.ContextVar[bool] = contextvars.ContextVar("ovos_memory_waits_for_store", default=True)
#: Updates kept per session for the backend while it waits (as a backend holds refused writes).
KEPT_PER_SESSION = 200
#: The settings the stand-in has its own values of (see :func:`stand_in_config`).
_STORE_KEYS = frozenset({"db_url", "db_path", "backend"})
#: Values read from the stand-in as they are: what holds no stored memory.
_PLAIN = (str, int, float, bool, tuple, frozenset, type(None))
#: Seconds a new attempt waits for a PostgreSQL server to answer before the backend is built again.
PROBE_TIMEOUT_S = 3.0
#: Methods the stand-in answers while the backend waits: the turn, and what reads no store.
_ANSWERED = frozenset({"build_conversation_context", "update_history", "get_history", "memory_key",
                       "check_settings"})


@contextlib.contextmanager
def no_waiting() -> Iterator[None]:
    """Backends built in the block raise when their store does not answer, as they used to."""
    token = _WAITS.set(False)
    try:
        yield
    finally:
        _WAITS.reset(token)


class WaitsForStore(abc.ABCMeta):
    """The metaclass of this package's backends: building one whose store does not answer gives a
    :class:`StartingMemory` (unless in :func:`no_waiting`, the class sets ``waits_for_store``
    False, or it is given more than its config), which counts as an instance of the class."""

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any):
        super().__init__(name, bases, namespace, **kwargs)
        # What the class takes is its __init__'s parameters, not __call__'s (*args, **kwargs).
        with contextlib.suppress(TypeError, ValueError):
            init = inspect.signature(cls.__init__)  # type: ignore[misc]
            cls.__signature__ = init.replace(parameters=list(init.parameters.values())[1:])

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        config = kwargs["config"] if set(kwargs) == {"config"} and not args else (
            args[0] if len(args) == 1 and not kwargs else None)
        waits = (_WAITS.get() and getattr(cls, "waits_for_store", True) and len(args) + len(kwargs) <= 1
                 and (config is None or isinstance(config, Mapping)))
        if not waits:
            return super().__call__(*args, **kwargs)
        stand_in = None
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            if not store_unreachable(exc):
                raise
            # If it cannot even run in RAM, the store's error is the news.
            with contextlib.suppress(Exception), no_waiting():
                stand_in = super().__call__(stand_in_config(cls, config))
            if stand_in is None:
                raise
            return StartingMemory(cls, dict(config or {}), stand_in, exc)

    def __instancecheck__(cls, instance: Any) -> bool:
        return super().__instancecheck__(instance) or (
            type(instance) is StartingMemory and issubclass(instance.backend_class, cls))


def stand_in_config(cls: type, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` with the store in RAM: no ``db_url``, ``db_path`` ":memory:", ``backend`` "memory"."""
    out = {k: v for k, v in dict(config or {}).items() if k != "db_url"}
    if reads_key(cls, "db_path", third_party=False):
        out["db_path"] = MEMORY_PATH
    if reads_key(cls, "backend", third_party=False) and allows_value(cls, "backend", "memory"):
        out["backend"] = "memory"
    return out


def _server_url(config: Mapping[str, Any]) -> str | None:
    """The PostgreSQL URL ``config`` stores in, if any (``db_url``, or ``db_path`` holding one)."""
    from ..storage.postgres import is_postgres_url

    return next((v for v in (config.get("db_url"), config.get("db_path")) if is_postgres_url(v)), None)


class StartingMemory(AgentContextManager):
    """A backend waiting for its store, answering from a stand-in in RAM (see the module docstring).

    Once the store answers, every attribute and call is the backend's own; ``memory`` is it (None
    while it waits), ``backend_class`` the class it was built as.
    """

    def __init__(self, cls: type, config: dict[str, Any], stand_in: Any, exc: BaseException):
        # The config as given (the stand-in's own points at RAM); private keys hold live objects.
        shown = {k: v for k, v in stand_in.config.items() if k not in _STORE_KEYS}
        super().__init__({**shown, **{k: config[k] for k in _STORE_KEYS if k in config}})
        self.backend_class, self._config, self._stand_in = cls, config, stand_in
        self.memory: Any = None
        self.plugin_name = str(getattr(cls, "plugin_name", cls.__name__))
        self._lock = threading.RLock()
        self._assigned: dict[str, Any] = {}
        self._readers = 0  # calls answered by the stand-in right now
        self._stand_in_closed = False
        self._closed = False
        self._given_up = False  # the store refused for good: no retry
        self._log = LogOnce()
        self._fault = (f"waiting for its store ({exc}); turns are answered from what was said since it started, "
                       "and it starts when the store answers")
        self._late = LateStarts(self.plugin_name, self._lock, self._start, self._replay, self._join, self._gave_up,
                                self._settled, KEPT_PER_SESSION)
        self._late.add(Waiting(0, self.plugin_name, self.plugin_name, 1.0, {}))
        LOG.error(f"{self.plugin_name}: cannot reach its store ({exc}); it starts when the store answers, and "
                  "until then remembers only what is said from now on")
        self._late.start()

    # -- the turn ------------------------------------------------------------------------
    def build_conversation_context(self, utterance: str, session_id: str) -> list[Any]:
        return self._answer("build_conversation_context", utterance, session_id)

    def update_history(self, new_messages: Any, session_id: str) -> None:
        with self._lock:  # an update lands either in what is kept or with the started backend
            if self.memory is None:
                messages = coerce_messages(new_messages)  # once: a generator is read once; copies, kept
                self._stand_in.update_history(messages, session_id)  # checks the session id too
                self._late.record(session_id, messages)
                return
            memory = self.memory
        memory.update_history(new_messages, session_id)

    def get_history(self, session_id: str) -> list[Any]:
        return self._answer("get_history", session_id)

    @property
    def system_prompt(self) -> str:
        return str(self._current().system_prompt)

    # -- health and lifecycle --------------------------------------------------------------
    def degraded(self) -> dict[str, str]:
        memory = self.memory
        if memory is not None:
            return dict(memory.degraded())
        return {**self._stand_in.degraded(), self.plugin_name: self._fault}

    def flush(self, timeout: float | None = None) -> bool:
        """Try the store at once (waiting up to ``timeout`` for the backend to start and get what
        was kept), then the backend's own flush; False while it waits."""
        if self.memory is None and not self._closed:
            self._late.try_now(timeout)
        memory = self.memory
        return bool(memory.flush(timeout)) if memory is not None else False

    def close(self) -> None:
        """One last attempt at the store (see LateStarts.close), then close everything; later
        calls get what a closed backend gives. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._late.close()
        self._retire_stand_in(now=True)
        if self.memory is not None:
            self.memory.close()

    def __enter__(self) -> StartingMemory:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- everything else ---------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails, so the attributes set in __init__ are found first.
        if name.startswith("__") or "_stand_in" not in self.__dict__:
            raise AttributeError(name)
        memory = self.__dict__.get("memory")
        if memory is not None:
            return getattr(memory, name)
        if name in _STORE_KEYS:  # as configured, not the stand-in's RAM
            return self._config.get(name)
        value = getattr(self._stand_in, name)
        settings = getattr(self._stand_in, "settings", None)
        if name in _ANSWERED or isinstance(value, (type, *_PLAIN)) or (
                settings is not None and name in setting_names(type(settings)) and not callable(value)):
            return value
        refused: StorageError = StoreUnavailable(
            f"{self.plugin_name}: its store does not answer yet; nothing was done ({name}): try again once it "
            "answers (see degraded())")
        if self._given_up:
            refused = StorageError(f"{self.plugin_name}: nothing was done ({name}): it {self._fault}")
        if not callable(value):  # a view of stored memory (session2history): it would miss the store
            raise refused

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise refused
        return refuse

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name in ("memory", "plugin_name", "config", "backend_class"):
            object.__setattr__(self, name, value)
            return
        with self._lock:  # a setting assigned while waiting applies to the backend once it starts
            setattr(self.memory if self.memory is not None else self._stand_in, name, value)
            if self.memory is None:
                self._assigned[name] = value

    def _current(self) -> Any:
        memory = self.memory
        return memory if memory is not None else self._stand_in

    def _answer(self, method: str, *args: Any) -> Any:
        """``method(*args)`` of the backend, or of the stand-in while it waits (the stand-in is
        closed once the backend started and no call uses it any more)."""
        with self._lock:
            memory, stand_in = self.memory, self._stand_in
            self._readers += memory is None
        if memory is not None:
            return getattr(memory, method)(*args)
        try:
            return getattr(stand_in, method)(*args)
        finally:
            with self._lock:
                self._readers -= 1
            self._retire_stand_in()

    def _retire_stand_in(self, now: bool = False) -> None:
        """Close the stand-in once the backend started and no call uses it (``now``: closing),
        and let it go once the backend answers for it."""
        with self._lock:
            done = self._stand_in_closed or not (now or (self.memory is not None and not self._readers))
            self._stand_in_closed = self._stand_in_closed or not done
            stand_in = self._stand_in
            if not done and self.memory is not None:
                self._stand_in = None  # its RAM store and model go with it (a second e5 on a small board)
        if done:
            return
        if now:
            stand_in.close()
        else:  # not on a turn's thread: its worker may still be finishing work nobody needs
            threading.Thread(target=stand_in.close, name=f"{self.plugin_name}-stand-in-close", daemon=True).start()

    def _apply_assigned(self, memory: Any) -> None:
        for name, value in self._assigned.items():
            try:
                setattr(memory, name, value)
            except Exception as exc:  # noqa: BLE001 - the stand-in took it: say it, go on
                self._log.error(f"assigned:{name}", "%s: %r, assigned while it waited, could not be applied (%s)",
                                self.plugin_name, name, exc)

    # -- LateStarts' callbacks -----------------------------------------------------------
    def _start(self, waiting: Waiting) -> Any:
        url = _server_url(self._config)
        if url is not None:  # a server that still does not answer: said once already, not rebuilt (and re-said)
            from ..storage.postgres import probe

            try:
                probe(url, PROBE_TIMEOUT_S)
            except StoreUnavailable:
                raise
            except Exception:  # noqa: BLE001,S110 - refused for good, say: building it says why
                pass
        with no_waiting():
            memory = self.backend_class(self._config)
        with self._lock:  # before what was kept is replayed: the window trims by the setting as assigned
            self._apply_assigned(memory)
        return memory

    @staticmethod
    def _replay(memory: Any, session_id: str, batch: list[Any], ts: float) -> None:
        with said_at(ts):
            memory.update_history(list(batch), session_id)

    def _join(self, waiting: Waiting, memory: Any) -> None:
        self._apply_assigned(memory)  # and what was assigned during the replay
        self.memory = memory
        object.__setattr__(self, "config", memory.config)
        LOG.info(f"{self.plugin_name}: reached its store and started")

    def _settled(self) -> None:
        self._retire_stand_in()  # every new call goes to the backend now

    def _gave_up(self, waiting: Waiting, exc: BaseException) -> None:
        self._given_up = True
        self._fault = (f"failed to start ({exc}); turns are answered from what was said since the persona started, "
                       "until it is restarted")
        self._log.error("gave-up", "%s: %s", self.plugin_name, self._fault)
