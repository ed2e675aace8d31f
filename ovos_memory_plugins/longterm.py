"""``LongTermMemory``: a rolling summary of the conversation plus a verbatim recent window.

Drop-in with the reference (keys, defaults, record format, context shape), and better where
the reference is weak (docs/compatibility.md):

* ``update_history`` only appends to the stored record and wakes a background worker, so it
  returns in milliseconds; the summary is computed off the turn. The unsummarised messages are
  the record itself, so a restart resumes where it stopped. ``flush()`` waits, ``close()``
  drains.
* The summary keeps the facts and both sides: the model never rewrites it whole. Its facts come
  from an extraction of the folded exchanges (a few per request), merged so that a change
  supersedes the old value; a narrative of the newest turns of both sides follows, with the
  assistant's recommendations and promises (:mod:`~ovos_memory_plugins._llm.summarizer`).
  Every request fits the endpoint's context.
* A model's summary that reads like a greeting, copies the transcript or loses most of the
  names it should keep is not committed: the old state stays and the fold is tried again at the
  next exchange; after three rejections in a row the narrative is written without the model.
* While the endpoint is down, the old turns are folded without a model (the offline rules for
  the facts, the user's most informative statements for the narrative) so the window stays
  bounded, and the dead endpoint costs one attempt per back-off period
  (:class:`~ovos_memory_plugins._llm.client.ChatClient`), not two HTTP calls per turn.
* A reply recorded in two calls (merged into one message) is counted as one exchange.
* The summary is computed outside any lock and committed only if the folded messages are
  still the head of the record: a message appended meanwhile is never lost.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from ._core.compat import AgentMessage
from ._core.imports import export_messages, session_export
from ._core.tokens import estimate_tokens
from ._llm.endpoint import EndpointConfig
from ._llm.memory import LLMMemory
from ._llm.summarizer import Fold, Summarizer
from ._llm.summary import summary_block
from .config import option
from .context import ContextConfig, ContextParts
from .errors import MemoryPluginError
from .inject import INJECT_MODES
from .messages import (
    check_session_id,
    coerce_messages,
    context_window,
    fold_into,
    from_dict,
    is_role,
    system_message,
    to_dict,
)
from .persistence import JsonStore, SqliteStore
from .storage import BACKENDS

# The reference module exposed its stores under these names.
_JsonStore = JsonStore
_SqliteStore = SqliteStore

__all__ = ["LongTermConfig", "LongTermMemory"]

#: Messages folded at once are bounded (a longer backlog is folded in several steps), so one
#: step reads a bounded number of statements; each request is bounded by the model's context.
MAX_FOLD_TOKENS = 1200
#: Rejected summaries of one session in a row before its narrative is written without the model.
MAX_REJECTIONS = 3


@dataclasses.dataclass(frozen=True)
class LongTermConfig(EndpointConfig, ContextConfig):
    summarize_every: int = option(6, "exchanges between two summaries", minimum=1)
    max_summary_tokens: int = option(256, "max_tokens of a summary; also bounds the offline summary", minimum=1)
    recent_window: int = option(4, "exchanges kept verbatim after a summary; 0 keeps none", minimum=0)
    backend: str = option("json", "store: json, sqlite, memory (RAM only) or postgres (with db_url)",
                          choices=BACKENDS)
    db_path: str | None = option(
        None, "store file; default $XDG_DATA_HOME/ovos/longterm_memory.json (.db for sqlite)", kind=str)
    db_url: str | None = option(
        None, "PostgreSQL URL (postgresql://user@host/database) holding the records instead of db_path, shared "
        "by every process and host; needs the [postgres] extra", kind=str)
    # The reference sends the system prompt and the summary as one system message.
    inject_mode: str = option("system_prompt", "where the summary goes: system_prompt (with the system prompt, "
                              "in one system message), system, developer, user (in the user turn) or tool",
                              choices=INJECT_MODES)


class _Conflict(Exception):
    """The record changed under a summary being computed; it is retried from the new state."""


class LongTermMemory(LLMMemory):
    """A summary of what was said long ago, and the last exchanges word for word.

    Example::

        memory = LongTermMemory({"api_url": "http://127.0.0.1:8080/v1", "summarize_every": 8})
        memory.update_history([AgentMessage(MessageRole.USER, "my name is Ana"),
                               AgentMessage(MessageRole.ASSISTANT, "Hi Ana!")], "sess")
        memory.build_conversation_context("what is my name?", "sess")
        # [SYSTEM "[Conversation summary so far]\\n..." (once there is one), USER, ASSISTANT, USER]
    """

    Config: ClassVar[type] = LongTermConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-longterm"

    store_stem: ClassVar[str] = "longterm_memory"
    offline_fallback: ClassVar[str] = "old turns are summarised without the model"

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self._summarizer = Summarizer(self.client, self.settings.max_summary_tokens)

    def _open_sqlite(self, path: str) -> Any:
        return SqliteStore(path)

    def _has_work(self, record: Mapping[str, Any]) -> bool:
        return self._is_due(record)

    def _work_on(self, key: str) -> None:
        self._summarise(key)

    @property
    def _keep(self) -> int:
        return 2 * self.settings.recent_window

    def _is_due(self, record: Mapping[str, Any]) -> bool:
        return (int(record.get("exchange_count") or 0) >= self.settings.summarize_every
                and len(record.get("recent") or []) > self._keep)

    # -- the OPM contract ----------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        return _messages(self._load(session_id))

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        check_session_id(session_id)
        messages = coerce_messages(new_messages)
        if not messages:
            return
        now = time.time()

        def append(record: dict[str, Any]) -> dict[str, Any]:
            recent = list(record.get("recent") or [])
            tail = _message(recent[-1]) if recent else None
            pop_tail, to_add = fold_into(tail, messages)
            merged = pop_tail and tail is not None and is_role(tail, "assistant")
            if pop_tail:
                recent.pop()
            recent.extend(to_dict(m) for m in to_add)
            # A reply recorded in two calls is merged into one message: one exchange, not two.
            added = sum(1 for m in to_add if is_role(m, "assistant")) - (1 if merged else 0)
            record.update(summary=record.get("summary") or "", recent=recent, updated_at=now,
                          exchange_count=int(record.get("exchange_count") or 0) + max(0, added))
            return record

        try:
            self._update(session_id, append, self._is_due)
        except (MemoryPluginError, OSError) as exc:
            # Once, not per turn: a full disk would otherwise write one line per exchange.
            self._log.error("write", f"{self.plugin_name}: could not store {len(messages)} message(s) of "
                                     f"{session_id!r}: {exc}")
            return
        self._log.clear("write", f"{self.plugin_name}: storing works again")

    def context_parts(self, utterance: str, session_id: str, *, window: bool = True,
                      blocks: bool = True) -> ContextParts:
        """The summary, and the messages not folded into it yet (one read of the record).

        The messages are the newest ``2 * (summarize_every + recent_window)``: all of them while
        the summaries keep up (a summary is due at ``summarize_every`` exchanges and keeps
        ``recent_window``), and no more while they are behind (a slow or unreachable model),
        so a backlog of summaries never makes the prompt, or the turn, grow.
        """
        record = self._load(session_id)
        newest = 2 * (self.settings.summarize_every + self.settings.recent_window)
        history = _messages(record)[-newest:] if window else []
        block = _summary_block(record) if blocks else ""
        return ContextParts(context_window(history), [system_message(block)] if block else [], history)

    def context_blocks(self, session_id: str, utterance: str = "") -> list[AgentMessage]:
        """The summary as a system block, without the system prompt (what a composite adds)."""
        return self.context_parts(utterance, check_session_id(session_id), window=False).blocks

    # -- background summaries ----------------------------------------------------------------
    def _summarise(self, session_id: str) -> None:
        """Fold one chunk of old messages into the summary (or, rejected, keep the old state)."""
        record = self._store.load(session_id)
        if not self._is_due(record):
            return
        recent = list(record.get("recent") or [])
        foldable = recent[: len(recent) - self._keep]
        chunk = _chunk(foldable)
        previous = str(record.get("summary") or "")
        rejections = int(record.get("summary_rejections") or 0)
        state = record.get("summary_state") if isinstance(record.get("summary_state"), dict) else None
        fold = self._summarizer.fold(previous, state, chunk, narrate=rejections < MAX_REJECTIONS)
        base_count = int(record.get("exchange_count") or 0)
        partial = len(chunk) < len(foldable)
        self._report(session_id, fold)

        def commit(current: dict[str, Any]) -> dict[str, Any]:
            head = list(current.get("recent") or [])
            if str(current.get("summary") or "") != previous or head[: len(chunk)] != chunk:
                raise _Conflict  # forgotten, re-imported or folded by another process meanwhile
            if fold.rejected:  # keep the old state; the next exchange tries again
                current["summary_rejections"] = rejections + 1
                return current
            count = int(current.get("exchange_count") or 0)
            current.update(summary=fold.summary, summary_state=fold.state, recent=head[len(chunk):],
                           updated_at=time.time(), summary_source=fold.source, summary_rejections=0,
                           exchange_count=count if partial else max(0, count - base_count))
            return current

        try:
            record = self._store.update(session_id, commit)
        except _Conflict:
            record = self._store.load(session_id)
        if self._is_due(record) and not fold.rejected:
            self._mark_due(session_id, wake=False)

    def _report(self, session_id: str, fold: Fold) -> None:
        if fold.rejected:
            self._log.warning("rejected", f"{self.plugin_name}: the model's summary of {session_id!r} was not "
                                          f"used: {fold.rejected}; the old summary stays, tried again later")
            self._problem("summary", f"the model's summary of {session_id!r} was rejected ({fold.rejected}); "
                                     "the old summary stays and is tried again at the next exchange")
        elif fold.source == "llm":
            self._log.clear("rejected")
            self._problem("summary", None)

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return self._store.sessions()

    def forget(self, session_id: str) -> dict[str, int]:
        check_session_id(session_id)
        record = self._load(session_id)
        self._delete(session_id)
        return {"messages": len(record.get("recent") or []), "summaries": 1 if record.get("summary") else 0}

    def export(self, session_id: str) -> dict[str, Any]:
        data = super().export(session_id)
        record = self._load(session_id)
        data.update(summary=str(record.get("summary") or ""), recent=list(record.get("recent") or []),
                    exchange_count=int(record.get("exchange_count") or 0),
                    summary_source=str(record.get("summary_source") or ""),
                    summary_history=list((record.get("summary_state") or {}).get("history") or []))
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        data, sid = session_export(data, session_id)
        recent = [to_dict(m) for m in export_messages(data, "recent")]
        count = data.get("exchange_count") or 0
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(f"the export's 'exchange_count' must be a count, not {count!r}")
        if not isinstance(data.get("summary") or "", str):
            raise TypeError("the export's 'summary' must be a string")
        record = {"summary": str(data.get("summary") or ""), "recent": recent, "updated_at": time.time(),
                  "exchange_count": count}
        self._update(sid, lambda _old: record, self._is_due)


def _message(data: Mapping[str, Any]) -> AgentMessage | None:
    try:
        return from_dict(dict(data))
    except (TypeError, ValueError):
        return None  # a hand-edited record: skip the bad entry rather than fail the turn


def _messages(record: Mapping[str, Any]) -> list[AgentMessage]:
    out = []
    for data in record.get("recent") or []:
        msg = _message(data) if isinstance(data, Mapping) else None
        if msg is not None:
            out.append(msg)
    return out


def _chunk(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The longest head of ``messages`` within MAX_FOLD_TOKENS (at least one message)."""
    used = 0
    for i, message in enumerate(messages):
        used += estimate_tokens(str(message.get("content", "")))
        if used > MAX_FOLD_TOKENS and i:
            return messages[:i]
    return messages


def _summary_block(record: dict[str, Any]) -> str:
    return summary_block(str(record.get("summary") or ""))
