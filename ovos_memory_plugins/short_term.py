"""``BasicShortTermMemory``: the persona default memory (seed 000), drop-in and safer.

Differences from ovos-persona's class, all deliberate:

* an empty update is a no-op (the original raises ``IndexError``);
* the caller's messages are never mutated (the original edits ``new[0].content`` on merge);
* ``db_path`` optionally keeps the window across restarts (the original is RAM only);
* every message of an update is normalised, not only the first against the window: one update
  ``[USER q1, USER q2, ASSISTANT a1, ASSISTANT a2]`` is kept as ``[USER q2, ASSISTANT "a1\na2"]``
  (seed 002); for the persona's own ``[USER, ASSISTANT]`` pairs the two agree.

``session2history`` is kept as in the original (``{session_id: [AgentMessage]}``, SPEC B 3.2),
but as a live view over the window store rather than a dict, so code that seeds or edits it
directly also works when the window lives in SQLite or JSON. See :class:`SessionHistoryView`.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, ClassVar

from ._compat import AgentMessage
from ._window import WindowConfig, WindowMemory
from .config import option
from .messages import check_session_id, coerce_messages

__all__ = ["BasicShortTermMemory", "SessionHistoryView", "ShortTermConfig"]


@dataclasses.dataclass(frozen=True)
class ShortTermConfig(WindowConfig):
    max_history: int = option(5, "messages kept per session; one exchange is two; 0 keeps all", minimum=0)


class BasicShortTermMemory(WindowMemory):
    """A per-session window of the last ``max_history`` messages (default 5).

    Example::

        memory = BasicShortTermMemory({"max_history": 10, "system_prompt": "You are helpful."})
        memory.update_history([AgentMessage(MessageRole.USER, "what is 2+2?"),
                               AgentMessage(MessageRole.ASSISTANT, "4")], "sess-123")
        memory.build_conversation_context("and 3+3?", "sess-123")
        # [SYSTEM "You are helpful.", USER "what is 2+2?", ASSISTANT "4", USER "and 3+3?"]
    """

    Config: ClassVar[type] = ShortTermConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-short-term"
    drop_leading_answers: ClassVar[bool] = True

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self._edit_lock = threading.RLock()  # session2history edits: read, change, write as one

    @property
    def session2history(self) -> SessionHistoryView:
        """``{session_id: [AgentMessage]}`` as ovos-persona's attribute, live over the window store."""
        return SessionHistoryView(self)

    @session2history.setter
    def session2history(self, value: Mapping[str, Iterable[Any]]) -> None:
        """Replace every session, as assigning the original's dict does: sessions not in ``value`` are dropped."""
        if not isinstance(value, Mapping):
            raise TypeError(f"session2history must be a mapping of session id to messages, not {type(value).__name__}")
        # Validate (and copy) everything before the store changes: a bad item leaves it untouched.
        wanted = {check_session_id(sid): coerce_messages(messages) for sid, messages in list(value.items())}
        for sid in self.sessions():
            if sid not in wanted:
                self._window.forget(sid)
        for sid, messages in wanted.items():
            self._replace_window(sid, messages)

    def _replace_window(self, session_id: str, messages: Iterable[Any]) -> list[AgentMessage]:
        """Make ``messages`` the session's whole window (normalised and trimmed as by update_history).

        Unlike ``update_history`` a store failure raises: this is an explicit edit of the data,
        and its caller must know it did not happen. Returns the window as stored.
        """
        check_session_id(session_id)
        return self._window.replace(session_id, coerce_messages(messages), self.policy)  # one atomic write

    def _stored_window(self, session_id: str) -> list[AgentMessage]:
        """The session's window; unlike ``get_history`` a store failure raises, so an edit of
        what could not be read never overwrites what is stored."""
        return self._window.load(check_session_id(session_id), self.policy)


class SessionHistoryView(MutableMapping[str, list]):
    """``memory.session2history``: the sessions' windows as a mutable mapping.

    * ``view[sid]`` is the window (``KeyError`` for an unknown session, as the original's dict),
      as a :class:`LiveHistory` list: ``append``, ``extend``, item assignment and every other
      list mutation write the whole window back to the store at once.
    * ``view[sid] = messages`` replaces the window with copies of ``messages`` (the caller's
      list and messages are never modified); ``del view[sid]`` forgets the session.
    * iteration and ``len`` list the stored sessions.

    Writes go through the window rules of ``update_history``: the window is normalised (a USER
    after a USER replaces it, consecutive answers merge), trimmed to ``max_history``, and its
    messages are timestamped at the write (``max_age`` counts from there). A window left empty is
    no session at all (stores keep no empty windows). Each write replaces the window in one
    transaction: a crash keeps the old window or the new one, never neither.
    """

    def __init__(self, memory: BasicShortTermMemory):
        self._memory = memory

    def __getitem__(self, session_id: str) -> LiveHistory:
        history = self._memory._stored_window(session_id)
        if not history and session_id not in self._memory.sessions():
            raise KeyError(session_id)
        return LiveHistory(self._memory, session_id, history)

    def __setitem__(self, session_id: str, messages: Iterable[Any]) -> None:
        self._memory._replace_window(session_id, messages)

    def __delitem__(self, session_id: str) -> None:
        if session_id not in self._memory.sessions():
            raise KeyError(session_id)
        self._memory.forget(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._memory.sessions()

    def __iter__(self) -> Iterator[str]:
        return iter(self._memory.sessions())

    def __len__(self) -> int:
        return len(self._memory.sessions())

    def setdefault(self, session_id: str, default: Iterable[Any] | None = None) -> LiveHistory:  # type: ignore[override]
        """The live window, stored first as ``default`` when the session is unknown.

        Returns the live list even when the window is empty, so ``setdefault(sid, []).append(m)``
        stores ``m`` as ``dict.setdefault`` would.
        """
        if session_id not in self:
            self[session_id] = list(default or [])
        return LiveHistory(self._memory, session_id, self._memory._stored_window(session_id))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({ {sid: list(self[sid]) for sid in self}!r})"


class LiveHistory(list):
    """One session's window as a list bound to its memory: each mutation writes it back whole.

    If the write fails (a message that is not one, a store error), the list is restored to what
    it held before and the error is raised.
    """

    def __init__(self, memory: BasicShortTermMemory, session_id: str, messages: Iterable[AgentMessage] = ()):
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
