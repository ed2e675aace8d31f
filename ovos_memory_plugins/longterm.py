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
  assistant's recommendations and promises (:mod:`~ovos_memory_plugins._llm.summaries.fold`).
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

from ._core.clock import said_now
from ._core.compat import AgentMessage
from ._core.tokens import estimate_tokens
from ._llm.endpoint import EndpointConfig
from ._llm.facts.extraction import forget_replies
from ._llm.facts.merging import without_fact
from ._llm.memory import LLMMemory
from ._llm.summaries.fold import Fold, FoldStopped, Summarizer, parse_summary, render_summary
from ._llm.summaries.text import summary_block
from ._memory.exports import export_messages, merged_summary, session_export, unseen_messages
from .config import option
from .context import ContextConfig, ContextParts
from .inject import INJECT_MODES
from .messages import (
    check_session_id,
    context_window,
    fold_into,
    from_dict,
    is_role,
    system_message,
    to_dict,
)
from .persistence import JsonStore, SqliteStore
from .storage import BACKENDS
from .storage.documents import exchange_positions
from .storage.records import shape_problem

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
    # The reference summarised when the count reached summarize_every: 0 was every exchange.
    summarize_every: int = option(6, "exchanges between two summaries; 0 is read as 1 (the reference's reading)",
                                  minimum=1, read_as={0: 1})
    max_summary_tokens: int = option(256, "max_tokens of a summary; also bounds the offline summary", minimum=1)
    recent_window: int = option(4, "exchanges kept verbatim after a summary; 0 keeps none", minimum=0)
    backend: str = option("json", "store: json, sqlite, memory (RAM only) or postgres (with db_url)",
                          choices=BACKENDS, otherwise="json")
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
    export_parts: ClassVar[frozenset[str]] = frozenset({"window", "summary"})
    held_in_one_call: ClassVar[bool] = True  # its record keeps only the time of the last update

    store_stem: ClassVar[str] = "longterm_memory"
    record_kind: ClassVar[str | None] = "a summary"
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

    def _record_problem(self, record: Mapping[str, Any]) -> str | None:
        # A bad message in "recent" is skipped where it is read; the list itself must be one.
        return shape_problem(record, values={"recent": list, "summary": str, "exchange_count": (int, float),
                                             "due_since": (int, float)})

    @property
    def _keep(self) -> int:
        return 2 * self.settings.recent_window

    def _is_due(self, record: Mapping[str, Any]) -> bool:
        return self._due_fold(record)[0] > 0

    def _due_fold(self, record: Mapping[str, Any]) -> tuple[int, int]:
        """How many of the oldest unsummarised messages the summary due now folds (0: none is
        due), and how many exchanges came after the one that made it due.

        A summary falls due every ``summarize_every`` exchanges and folds what came before the
        last ``2 * recent_window`` messages of that moment (as the reference's, run inside that
        turn). Ours runs in the background, maybe several exchanges later: the record counts
        those (``due_since``), so what is folded and kept does not depend on when the summary
        ran. A moment with nothing to fold passes, as the reference's empty summary does. After
        a rejected summary, the next one folds all but the last messages, as the reference's
        retry after a failure does (so does a record without the count: a store from elsewhere).
        """
        if int(record.get("exchange_count") or 0) < self.settings.summarize_every:
            return 0, 0
        recent = record.get("recent") or []
        answers = [i for i, m in enumerate(recent) if isinstance(m, Mapping) and m.get("role") == "assistant"]
        later = 0 if record.get("summary_rejections") else int(record.get("due_since") or 0)
        later = max(0, min(later, len(answers) - 1))
        while True:
            due_at = answers[len(answers) - 1 - later] + 1 if answers else len(recent)  # just after its answer
            if due_at > self._keep:
                return due_at - self._keep, later
            if later < self.settings.summarize_every:
                return 0, 0
            later -= self.settings.summarize_every

    # -- the OPM contract ----------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        return _messages(self._load(session_id))

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        messages = self._incoming(new_messages, session_id)
        if messages:
            self._write_update(session_id, messages)

    def _store_batch(self, session_id: str, batch: list[Any]) -> None:
        now = said_now()  # a held update keeps the time it was said
        self._update(session_id, lambda record: _appended(record, batch, now, self.settings.summarize_every),
                     self._is_due)

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
        end, later = self._due_fold(record)
        if not end:
            return
        recent = list(record.get("recent") or [])
        foldable = recent[:end]
        chunk = _chunk(foldable)
        previous = str(record.get("summary") or "")
        rejections = int(record.get("summary_rejections") or 0)
        state = record.get("summary_state") if isinstance(record.get("summary_state"), dict) else None
        try:
            fold = self._summarizer.fold(previous, state, chunk, narrate=rejections < MAX_REJECTIONS,
                                         stop=self._held.dropped_since(session_id))
        except FoldStopped:
            return  # forgotten meanwhile: the model is sent nothing more of it
        chunk = chunk[:fold.folded]  # what the fold read; the rest waits for the next step
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
            # The count starts again after the exchange that made the summary due; a partial fold
            # leaves it due at that same exchange.
            since = later + max(0, int(current.get("exchange_count") or 0) - base_count)
            count = since + (self.settings.summarize_every if partial else 0)
            current.update(summary=fold.summary, summary_state=fold.state, recent=head[len(chunk):],
                           updated_at=time.time(), summary_source=fold.source, summary_rejections=0,
                           exchange_count=count, due_since=max(0, count - self.settings.summarize_every))
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
                                     "the old summary stays and is tried again at the next exchange", session_id)
        elif fold.source == "llm":
            self._log.clear("rejected")
            self._problem("summary", None)

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return self._listed(self._store.sessions())

    def forget(self, session_id: str) -> dict[str, int]:
        check_session_id(session_id)
        held = self._held.drop(session_id)  # first: what the store refused is never stored now
        record = self._load(session_id)
        self._delete(session_id)
        self._problems.forget(session_id)
        forget_replies()
        return {"messages": len(record.get("recent") or []) + held, "summaries": 1 if record.get("summary") else 0}

    def export(self, session_id: str) -> dict[str, Any]:
        """The summary (its text, and its structured state: ``summary_state`` holds the facts and
        the narrative, ``summary_history`` the facts they superseded), the messages not folded yet
        and how many exchanges are due."""
        data = super().export(session_id)
        record = self._load(session_id)
        state = record.get("summary_state")
        state = state if isinstance(state, dict) else {}
        data.update(summary=str(record.get("summary") or ""), recent=list(record.get("recent") or []),
                    exchange_count=int(record.get("exchange_count") or 0),
                    summary_source=str(record.get("summary_source") or ""),
                    summary_history=list(state.get("history") or []),
                    summary_state={k: v for k, v in state.items() if k != "history"})
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        """Load what :meth:`export` produced. An empty session takes the export as it is, the
        summary's state and history included (importing the same export again changes nothing);
        a session that holds something (a session moved into a person's) keeps it: the summaries
        are joined, the stored one first, and the messages it lacks are added after its own."""
        data, sid = session_export(data, session_id, self)
        if "recent" not in data:
            self._import_converted(data, sid)
            return
        messages = export_messages(data, "recent")
        recent = [to_dict(m) for m in messages]
        count = data.get("exchange_count") or 0
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(f"the export's 'exchange_count' must be a count, not {count!r}")
        if not isinstance(data.get("summary") or "", str):
            raise TypeError("the export's 'summary' must be a string")
        summary = str(data.get("summary") or "")
        record: dict[str, Any] = {"summary": summary, "recent": recent, "updated_at": time.time(),
                                  "exchange_count": count}
        state = _imported_state(data, summary)
        if state is not None:
            record.update(summary_state=state, summary_source=str(data.get("summary_source") or ""))

        def merge(old: dict[str, Any]) -> dict[str, Any]:
            if not old.get("summary") and not old.get("recent"):
                return record
            stored = _messages(old)
            added = unseen_messages(stored, messages)
            joined = merged_summary(str(old.get("summary") or ""), summary)
            if not added and joined == (old.get("summary") or ""):
                return old  # already there
            # Counted as appended: an export imported again (a session moving while it is
            # written) adds only its new exchanges.
            extra = count if len(added) == len(messages) else sum(1 for m in added if is_role(m, "user"))
            merged = {**old, "summary": joined, "recent": [to_dict(m) for m in [*stored, *added]],
                      "updated_at": time.time(), "exchange_count": int(old.get("exchange_count") or 0) + extra}
            if joined != (old.get("summary") or ""):
                merged.pop("summary_state", None)  # it described the stored summary alone; the next fold rebuilds it
            return merged

        self._update(sid, merge, self._is_due)

    def _import_converted(self, data: Mapping[str, Any], sid: str) -> None:
        """Another backend's window (and summary, from redis): its messages not yet in the session
        are appended as turns would be, and its summary, if any, replaces the session's."""
        messages = export_messages(data)
        if not isinstance(data.get("summary") or "", str):
            raise TypeError("the export's 'summary' must be a string")
        summary = str(data.get("summary") or "")
        state = _imported_state(data, summary) if summary else None
        now = time.time()

        def merge(record: dict[str, Any]) -> dict[str, Any]:
            record = _appended(record, unseen_messages(_messages(record), messages), now)
            if summary:
                record["summary"] = summary
                record.pop("summary_state", None)  # it described the summary replaced
                if state:
                    record["summary_state"] = state
            return record

        self._update(sid, merge, self._is_due)

    def forget_fact(self, session_id: str, text: str) -> int:
        """Delete the fact ``text`` from the session's summary (its list of facts and their
        history); the summary is written again without it and the store compacted. The
        narrative is left as it is. Returns how many facts held it (0: none)."""
        sid = check_session_id(session_id)
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        removed = 0

        def drop(record: dict[str, Any]) -> dict[str, Any]:
            nonlocal removed
            kept, removed = without_fact(_summary_state(record), text)
            if removed:
                record.update(summary=render_summary(kept, self.settings.max_summary_tokens), summary_state=kept)
            return record

        record = self._load(sid)
        if text and text in f"{record.get('summary')}{record.get('summary_state')}":  # no write when absent
            self._store.update(sid, drop)  # a summary being written meanwhile sees the change and starts again
            if removed:
                self._store.compact()
        return removed

    def forget_exchange(self, session_id: str, content: str) -> dict[str, int]:
        """Delete the not yet summarised messages of the exchange stored as ``content`` (as a
        retrieval memory formats it), and the summary's narrative when it quotes the exchange
        (the offline summary is made of the user's and the assistant's own sentences): the
        facts stay. A narrative a model wrote in its own words cannot be searched for what it
        took from one exchange: that stays until the session or the fact is forgotten."""
        sid = check_session_id(session_id)
        if not isinstance(content, str):
            raise TypeError(f"content must be a str, not {type(content).__name__}")
        forget_replies()
        dropped, narratives = 0, 0
        quoted = _quoted_part(content)
        self._require_held_written(sid)

        def drop(record: dict[str, Any]) -> dict[str, Any]:
            nonlocal dropped, narratives
            recent = list(record.get("recent") or [])
            # A malformed entry (a hand-edited file) stands as a message that matches nothing.
            messages = [(_message(m) if isinstance(m, Mapping) else None) or system_message("") for m in recent]
            doomed = exchange_positions(messages, content)
            dropped = len(doomed)
            record["recent"] = [m for i, m in enumerate(recent) if i not in doomed]
            state = _summary_state(record)
            if quoted and quoted in " ".join(str(state.get("narrative") or "").split()):
                kept = {**state, "narrative": ""}
                record.update(summary=render_summary(kept, self.settings.max_summary_tokens), summary_state=kept)
                narratives = 1
            return record

        record = self._load(sid)
        if record.get("recent") or record.get("summary"):
            self._store.update(sid, drop)
        self._store.compact()  # also when none is left: an older copy of the record may sit in the WAL
        return {"messages": dropped, "summaries": narratives}


#: Shorter sides ("ok", "thanks") are in many narratives by chance, not because they were folded there.
_QUOTED_MIN_CHARS = 12


def _quoted_part(content: str) -> str | None:
    """What of an exchange stored as ``content`` says a narrative quotes it (whitespace
    collapsed): the user's words when long enough, else the answer (an answer alone, such as
    "I don't know that.", may be quoted from another exchange that got it too)."""
    for line in content.split("\nA: ", 1):
        text = " ".join(line.removeprefix("Q:").split())
        if len(text) >= _QUOTED_MIN_CHARS:
            return text
    return None


def _summary_state(record: Mapping[str, Any]) -> dict[str, Any]:
    """The structured state of a record's summary (read from its text when an older version or
    the reference wrote only that)."""
    state = record.get("summary_state")
    return state if isinstance(state, dict) else parse_summary(str(record.get("summary") or ""))


def _appended(record: dict[str, Any], messages: list[AgentMessage], now: float,
              every: int | None = None) -> dict[str, Any]:
    """``record`` with ``messages`` appended to its unsummarised messages, normalised as a turn's.

    ``every``: ``summarize_every``, to count the exchanges stored after a summary fell due
    (``due_since``); None (an import) counts none, so one summary folds all it brings."""
    recent = list(record.get("recent") or [])
    tail = _message(recent[-1]) if recent else None
    pop_tail, to_add = fold_into(tail, messages)
    merged = pop_tail and tail is not None and is_role(tail, "assistant")
    if pop_tail:
        recent.pop()
    recent.extend(to_dict(m) for m in to_add)
    # A reply recorded in two calls is merged into one message: one exchange, not two.
    added = sum(1 for m in to_add if is_role(m, "assistant")) - (1 if merged else 0)
    before = int(record.get("exchange_count") or 0)
    after = before + max(0, added)
    record.update(summary=record.get("summary") or "", recent=recent, updated_at=now, exchange_count=after)
    if every is not None and after > every:
        record["due_since"] = int(record.get("due_since") or 0) + after - max(before, every)
    return record


def _imported_state(data: Mapping[str, Any], summary: str) -> dict[str, Any] | None:
    """The summary's structured state from an export (None: it has none); checked whole."""
    history = data.get("summary_history") or []
    if not isinstance(history, list) or not all(isinstance(h, Mapping) and isinstance(h.get("text"), str)
                                                for h in history):
        raise TypeError("the export's 'summary_history' must be a list of superseded facts ({'text': ...} dicts)")
    given = data.get("summary_state")
    if given is None:
        if not history:
            return None
        given = parse_summary(summary)  # an export without the state: the facts are read from the text
    if not isinstance(given, Mapping):
        raise TypeError(f"the export's 'summary_state' must be a dict, not {type(given).__name__}")
    facts, meta = given.get("facts") or [], given.get("meta") or {}
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts) or not isinstance(meta, Mapping):
        raise TypeError("the export's 'summary_state' needs 'facts' (a list of strings) and 'meta' (a dict)")
    if not isinstance(given.get("narrative") or "", str):
        raise TypeError("the export's 'summary_state' 'narrative' must be a string")
    return {**given, "history": [dict(h) for h in history]}


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
