"""A verbatim window of recent messages per session: the engine of short-term and recency."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from .._core.compat import AgentMessage
from .._core.log import LogOnce
from .._core.paths import resolve_path
from ..config import option
from ..context import ContextConfig, ContextMemory
from ..errors import ConfigError, MemoryPluginError, opening_error
from ..messages import (
    check_session_id,
    coerce_messages,
    to_dict,
)
from ..storage import BACKENDS, WindowPolicy, backend_for, open_window_store, store_claim, store_location
from .exports import export_messages, session_export, unseen_messages
from .session_view import SessionHistoryMixin

__all__ = ["WindowConfig", "WindowMemory"]


@dataclasses.dataclass(frozen=True)
class WindowConfig(ContextConfig):
    max_history: int = option(10, "messages kept per session; one exchange is two; 0 keeps all", minimum=0)
    max_turns: int | None = option(
        None, "exchanges kept per session (sets max_history to twice this when given)", kind=int, minimum=0)
    max_age: float | None = option(None, "seconds after which a message is forgotten; null keeps them", kind=float,
                                   minimum=0)
    db_path: str | None = option(
        None, "file that keeps the window across restarts (a new file: .json is JSON, else SQLite; an existing "
        "one: its content decides); null: RAM only", kind=str)
    backend: str | None = option(
        None, "store for db_path: sqlite, json or memory (postgres: db_url); null: an existing file's content, "
        "else its name", kind=str, choices=BACKENDS)
    db_url: str | None = option(
        None, "PostgreSQL URL (postgresql://user@host/database) that keeps the window instead of db_path, "
        "shared by every process and host that names it; needs the [postgres] extra", kind=str)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_turns is not None:  # the one window size, read as max_history everywhere
            object.__setattr__(self, "max_history", 2 * self.max_turns)


class WindowMemory(SessionHistoryMixin, ContextMemory):
    """Keeps the last messages of each session and sends them before the utterance.

    Subclasses choose defaults through ``Config`` and whether an answer whose question was
    trimmed away is dropped from the context (``drop_leading_answers``). ``session2history`` is
    the windows as a live mapping (``_memory/session_view.py``).
    """

    Config: ClassVar[type] = WindowConfig
    drop_leading_answers: ClassVar[bool] = False
    #: Names this memory's table in a PostgreSQL database (``<store_name>_window``).
    store_name: ClassVar[str] = "window"
    export_parts: ClassVar[frozenset[str]] = frozenset({"window"})

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        s = self.settings
        self.policy = WindowPolicy(max_messages=s.max_history, max_age=s.max_age)
        self._log = LogOnce()  # a full disk or a locked file: one line when it breaks, one when it recovers
        self._edit_lock = threading.RLock()  # session2history edits: read, change, write as one
        db_path = s.db_path or None  # "" is "not given", as everywhere; a blank "  " is an error, as everywhere
        try:
            location, backend = store_location(db_path, s.db_url, s.backend)
        except ConfigError as exc:
            raise ConfigError(f"{self.plugin_name}: {exc}") from exc
        # A file holds one memory's window; a PostgreSQL database holds every memory's, each in its table.
        table = f"{self.store_name}_window" if backend == "postgres" else "window"
        try:
            self._window = open_window_store(location, backend, table=table)
        except MemoryPluginError as exc:
            message = f"{self.plugin_name}: cannot open {'db_url' if backend == 'postgres' else 'db_path'} " \
                      f"{_shown(location)!r}: {exc}"
            raise (ConfigError(message) if backend == "postgres" else opening_error(message, exc)) from exc
        self._location = location if backend in ("postgres", "memory") or location is None else resolve_path(location)
        #: The part of a store this memory writes (a composite refuses two members writing one).
        self.store_claim = store_claim(self.db_path, backend_for(self._location, backend), table)

    @property
    def db_path(self) -> str | None:
        """The store in force: the file as resolved (``~``, variables, relative to the data
        folder), ":memory:", a PostgreSQL URL without its password, or None (RAM only)."""
        return _shown(self._location)

    # -- the OPM contract ----------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        try:
            history = self._window.load(session_id, self.policy)
        except MemoryPluginError as exc:
            self._log.error("read", "%s: cannot read the history (%s); answering without it", self.plugin_name, exc)
            return self._with_held(session_id, [], self.policy)
        self._log.clear("read", f"{self.plugin_name}: reading the history works again")
        return self._with_held(session_id, history, self.policy)

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        messages = self._incoming(new_messages, session_id)
        if messages:
            self._write_update(session_id, messages)

    def _store_batch(self, session_id: str, batch: list[Any]) -> None:
        self._window.append(session_id, batch, self.policy)

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

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return self._listed(self._window.sessions())

    def forget(self, session_id: str) -> dict[str, int]:
        check_session_id(session_id)
        held = self._held.drop(session_id)  # first: what the store refused is never stored now
        return {"messages": self._window.forget(session_id) + held}

    def forget_exchange(self, session_id: str, content: str) -> dict[str, int]:
        """Delete the window's messages of the exchange a retrieval memory stores as ``content``
        (see ``BaseRetrievalMemory.forget_exchange``): a window beside a retriever in a
        composite forgets it too. The store is compacted; returns how many messages went."""
        from ..storage.documents import exchange_positions  # a retrieval module: not loaded by a window alone

        sid = check_session_id(session_id)
        self._require_held_written(sid)
        with self._edit_lock:
            return {"messages": self._window.drop(sid, lambda window: exchange_positions(window, content))}

    def export(self, session_id: str) -> dict[str, Any]:
        data = super().export(session_id)
        data["window"] = [to_dict(m) for m in self.get_history(session_id)]
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        """Load what :meth:`export` produced (checked whole first; messages already there are not
        added again). A store failure raises: the caller asked for this and must know."""
        data, sid = session_export(data, session_id, self)
        messages = export_messages(data)
        with self._edit_lock:
            new = unseen_messages(self._window.load(sid, self.policy), messages)
            if new:
                self._window.append(sid, new, self.policy)

    def degraded(self) -> dict[str, str]:
        """Reading or storing the window failing, until it works again."""
        return self._log.failing(self.plugin_name)

    def close(self) -> None:
        if not self._closed:
            self._close_held()
            self._window.close()
        super().close()


def _shown(location: str | None) -> str | None:
    """A location fit for a message: a URL without its password."""
    from ..storage.postgres import is_postgres_url, redact

    return redact(str(location)) if is_postgres_url(location) else location
