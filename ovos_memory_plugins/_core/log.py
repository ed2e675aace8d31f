"""Logging: everything goes through ``ovos_utils.log.LOG``; repeated failures are logged once."""
from __future__ import annotations

import threading
from typing import Any

from ovos_utils.log import LOG

__all__ = ["LOG", "LogOnce", "Problems"]


class LogOnce:
    """Logs a failure the first time it happens and stays quiet until it is cleared.

    A dead LLM endpoint or a missing plugin would otherwise write one line per turn; users want
    one line when it breaks and one when it recovers.
    """

    def __init__(self) -> None:
        self._seen: dict[str, str | None] = {}  # key -> its error message; None for a warning
        self._lock = threading.Lock()

    def error(self, key: str, msg: str, *args: Any) -> bool:
        return self._emit(LOG.error, key, msg, args, True)

    def warning(self, key: str, msg: str, *args: Any) -> bool:
        return self._emit(LOG.warning, key, msg, args, False)

    def clear(self, key: str, recovered_msg: str | None = None) -> None:
        if key not in self._seen:
            return  # the common case, every successful call: nothing was failing
        with self._lock:
            was_failing = key in self._seen
            self._seen.pop(key, None)
        if was_failing and recovered_msg:
            LOG.info(recovered_msg)

    def failing(self, owner: str) -> dict[str, str]:
        """``{"<owner>:<key>": message}`` of the errors logged and not cleared since: what is
        broken now, in the shape of ``degraded()``."""
        with self._lock:
            return {f"{owner}:{key}": msg for key, msg in self._seen.items() if msg is not None}

    def _emit(self, log_fn: Any, key: str, msg: str, args: tuple[Any, ...], is_error: bool) -> bool:
        if key in self._seen:
            return False  # a failure repeated every turn costs no formatting
        text = msg % args if args else msg
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = text if is_error else None
        log_fn(text)
        return True


class Problems:
    """A memory's degradations other than its store's and endpoint's, by part, for ``degraded()``
    (``{"<plugin>:summary": "the model's summary of 's' was rejected ..."}``). One that names a
    session goes with a forget of it: a session id is memory too."""

    def __init__(self) -> None:
        self._why: dict[str, str] = {}
        self._session: dict[str, str] = {}  # part -> the session its problem names
        self._lock = threading.Lock()

    def set(self, part: str, why: str, session_id: str | None = None) -> None:
        with self._lock:
            self._why[part] = why
            self._session.pop(part, None)
            if session_id is not None:
                self._session[part] = session_id

    def clear(self, part: str) -> None:
        with self._lock:
            self._why.pop(part, None)
            self._session.pop(part, None)

    def forget(self, session_id: str) -> None:
        """Clear every problem naming ``session_id``."""
        with self._lock:
            for part in [p for p, sid in self._session.items() if sid == session_id]:
                self._why.pop(part, None)
                del self._session[part]

    def report(self, owner: str) -> dict[str, str]:
        with self._lock:
            return {f"{owner}:{part}": why for part, why in self._why.items()}
