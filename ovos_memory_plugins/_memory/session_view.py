"""``session2history``: a memory's per-session windows as the mutable mapping the reference exposes.

ovos-persona's memory, and the reference's retrieval base, keep ``{session_id: [AgentMessage]}``
in a plain dict, and code around personas (and subclasses) reads and assigns it. Here the
windows live in a durable store, so the mapping is a live view: reads show the stored window,
and every assignment or list mutation writes the whole window back in one transaction.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any, Protocol

from .._core.compat import AgentMessage
from .people import inside, is_memory_key

__all__ = ["EditableWindow", "LiveHistory", "SessionHistoryView"]


class EditableWindow(Protocol):
    """What a memory offers for its windows to be viewed and edited as ``session2history``."""

    _edit_lock: Any

    def sessions(self) -> list[str]: ...
    def memory_key(self, session_id: str) -> str: ...
    def forget(self, session_id: str) -> Any: ...
    def _stored_window(self, session_id: str) -> list[AgentMessage]: ...
    def _replace_window(self, session_id: str, messages: Iterable[Any]) -> list[AgentMessage]: ...


class SessionHistoryView(MutableMapping[str, list]):
    """``memory.session2history``: the sessions' windows as a mutable mapping.

    * ``view[sid]`` is the window (``KeyError`` for an unknown session, as the original's dict),
      as a :class:`LiveHistory` list: ``append``, ``extend``, item assignment and every other
      list mutation write the whole window back to the store at once.
    * ``view[sid] = messages`` replaces the window with copies of ``messages`` (the caller's
      list and messages are never modified); ``del view[sid]`` forgets the session.
    * iteration and ``len`` list the stored sessions (in person scope, the memory keys: a
      person's memory is ``person:<name>``, and any session of the person is in the view).

    Writes go through the window rules of ``update_history``: the window is normalised (a USER
    after a USER replaces it, consecutive answers merge), trimmed to ``max_history``, and its
    messages are timestamped at the write (``max_age`` counts from there). Each write replaces
    the window in one transaction: a crash keeps the old window or the new one, never neither.
    Stores keep no empty windows, so a session assigned ``[]`` (or made by ``setdefault(sid,
    [])``) is remembered in RAM as present and empty, as a dict key would be.
    """

    def __init__(self, memory: EditableWindow):
        self._memory = memory
        self._empty: set[str] = memory.__dict__.setdefault("_empty_windows", set())

    def _known(self) -> list[str]:
        stored = self._memory.sessions()
        return stored + sorted(self._empty.difference(stored))

    def __getitem__(self, session_id: str) -> LiveHistory:
        with _as_listed(session_id):
            history = self._memory._stored_window(session_id)
        if not history and session_id not in self:
            raise KeyError(session_id)
        return LiveHistory(self._memory, session_id, history)

    def __setitem__(self, session_id: str, messages: Iterable[Any]) -> None:
        stored = self._memory._replace_window(session_id, messages)
        if stored:
            self._empty.discard(session_id)
        else:
            self._empty.add(session_id)

    def __delitem__(self, session_id: str) -> None:
        if session_id not in self:
            raise KeyError(session_id)
        self._empty.discard(session_id)
        with _as_listed(session_id):
            self._memory.forget(session_id)

    def __contains__(self, session_id: object) -> bool:
        if session_id in self._empty:
            return True
        return isinstance(session_id, str) and self._memory.memory_key(session_id) in self._memory.sessions()

    def __iter__(self) -> Iterator[str]:
        return iter(self._known())

    def __len__(self) -> int:
        return len(self._known())

    def setdefault(self, session_id: str, default: Iterable[Any] | None = None) -> LiveHistory:  # type: ignore[override]
        """The live window, stored first as ``default`` when the session is unknown.

        Returns the live list even when the window is empty, so ``setdefault(sid, []).append(m)``
        stores ``m`` as ``dict.setdefault`` would.
        """
        if session_id not in self:
            self[session_id] = list(default or [])
        with _as_listed(session_id):
            return LiveHistory(self._memory, session_id, self._memory._stored_window(session_id))

    def get(self, session_id: str, default: Any = None) -> Any:
        try:
            return self[session_id]
        except KeyError:
            return default

    def __repr__(self) -> str:
        return f"{type(self).__name__}({ {sid: list(self[sid]) for sid in self}!r})"


def _as_listed(session_id: Any) -> contextlib.AbstractContextManager[None]:
    """A key the view lists (a person's memory, ``person:<name>``) is read and forgotten as it is;
    writes still refuse it: a person's memory is written through their sessions."""
    return inside() if isinstance(session_id, str) and is_memory_key(session_id) else contextlib.nullcontext()


class LiveHistory(list):
    """One session's window as a list bound to its memory: each mutation writes it back whole.

    If the write fails (a message that is not one, a store error), the list is restored to what
    it held before and the error is raised.
    """

    def __init__(self, memory: EditableWindow, session_id: str, messages: Iterable[AgentMessage] = ()):
        super().__init__(messages)
        self._memory = memory
        self._session_id = session_id

    def _refresh(self) -> None:
        """Start from the stored window: an update_history since this list was read must not be lost."""
        list.__setitem__(self, slice(None), self._memory._stored_window(self._session_id))

    def _write_back(self, before: list) -> None:
        try:
            stored = self._memory._replace_window(self._session_id, self)
        except BaseException:
            list.__setitem__(self, slice(None), before)
            raise
        # What was stored: normalising and trimming may have changed it, and a later mutation
        # must start from that, not from this list's own idea of the window.
        list.__setitem__(self, slice(None), stored)

    def copy(self) -> list:  # type: ignore[override]
        """A plain, unbound list (as ``list.copy``)."""
        return list(self)

    def __reduce__(self) -> Any:  # pickles and deep copies are plain lists: the memory is no part of them
        return list, (list(self),)


def _writing(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def mutate(self: LiveHistory, *args: Any, **kwargs: Any) -> Any:
        # One edit at a time per memory, each applied to the window as stored now, as edits of
        # ovos-persona's one shared list would be. (Another process's update_history between
        # the read and the write can still be lost: edit a shared file through update_history.)
        with self._memory._edit_lock:
            self._refresh()
            before = list(self)
            result = method(self, *args, **kwargs)
            self._write_back(before)
        return result

    return mutate


for _name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
              "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(LiveHistory, _name, _writing(getattr(list, _name)))
del _name


class SessionHistoryMixin:
    """Gives a memory with the :class:`EditableWindow` hooks its ``session2history`` attribute."""

    @property
    def session2history(self) -> SessionHistoryView:
        """``{session_id: [AgentMessage]}`` as ovos-persona's attribute, live over the window store."""
        return SessionHistoryView(self)  # type: ignore[arg-type]

    @session2history.setter
    def session2history(self, value: Any) -> None:
        """Replace every session, as assigning the original's dict does: sessions not in ``value`` are dropped."""
        from collections.abc import Mapping

        from ..messages import check_session_id, coerce_messages

        if not isinstance(value, Mapping):
            raise TypeError(f"session2history must be a mapping of session id to messages, not {type(value).__name__}")
        memory: EditableWindow = self  # type: ignore[assignment]
        # Validate (and copy) everything before the store changes: a bad item leaves it untouched.
        wanted = {check_session_id(sid): coerce_messages(messages) for sid, messages in list(value.items())}
        view = SessionHistoryView(memory)
        # In person scope the view lists ``person:alice`` where the value names her "kitchen": the
        # same memory, which the value keeps (its window is replaced below, not forgotten).
        kept = {memory.memory_key(sid) for sid in wanted}
        with memory._edit_lock:
            for sid in list(view):
                if sid not in wanted and memory.memory_key(sid) not in kept:
                    del view[sid]
            for sid, messages in wanted.items():
                view[sid] = messages
