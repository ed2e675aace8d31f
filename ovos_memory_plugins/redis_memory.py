"""``RedisMemory``: a short-term window and a long-term summary per session, shared through Redis.

Modelled on miso-agent's Redis ``TempMemory``, as an OVOS memory plugin, so that several
satellites or processes share one conversation memory. Per session: a Redis list of messages
(appends are one ``RPUSH``, O(1)) and a summary string. When the list reaches
``compact_token_threshold`` tokens (or ``compact_threshold`` exchanges), the oldest exchanges
(about half the token threshold) are summarised in the background, through an
OpenAI-compatible LLM or, offline, extractively, and folded into the summary.

Where we differ from the reference (docs/backends/redis.md): real token estimates (not bytes/4);
both TTLs refreshed on every append and read; a summary bounded to ``max_summary_tokens`` that
keeps the facts (the model never rewrites it whole: :mod:`~ovos_memory_plugins._llm.summaries.fold`),
every request within the model's context, and a model's summary that fails its checks (a
greeting, a copied transcript, most names lost) not committed; compaction in a background thread
that commits only if the list still starts with what it read; one compactor per session (a
renewed lease); round-based compaction usable on its own; the turn is still answered while Redis
is down.

Example::

    memory = RedisMemory({"url": "redis://127.0.0.1:6379/0", "system_prompt": "Be brief."})
    memory.update_history([AgentMessage(MessageRole.USER, "hi"),
                           AgentMessage(MessageRole.ASSISTANT, "hello")], "kitchen")
    memory.build_conversation_context("what did I say?", "kitchen")
    # [SYSTEM "Be brief.", USER "hi", ASSISTANT "hello", USER "what did I say?"]
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ._core.compat import AgentMessage, MessageRole
from ._core.due import DueQueue
from ._core.log import LOG, LogOnce, Problems
from ._core.tokens import truncate_to_tokens
from ._core.worker import BackgroundWorker
from ._llm.endpoint import EndpointConfig, chat_client, with_endpoint
from ._llm.facts.extraction import forget_replies
from ._llm.summaries.fold import Fold, FoldStopped, Summarizer
from ._llm.summaries.text import summary_block
from ._memory.exports import export_messages, merged_summary, session_export, unseen_messages
from ._redis.compaction import CompactionPolicy, RoundOutcome
from ._redis.lease import Lease
from ._redis.store import REPLAYED_ROLES, CommitStatus, RedisStore, decode_array, url_problem
from .config import option
from .context import ContextConfig, ContextMemory, ContextParts
from .errors import StorageError
from .messages import (
    check_session_id,
    context_window,
    copy_message,
    fit_window,
    fold_into,
    is_role,
    role_of,
    system_message,
    to_dict,
)

__all__ = ["Conversation", "Exchange", "RedisConfig", "RedisMemory", "TempMemory"]

DAY = 86_400
_CACHED_SESSIONS = 256   # sessions whose last context is kept in RAM for when Redis is down
_CACHED_CHARS = 1 << 20  # a bigger context is not cached
_CACHED_UPDATES = 64     # updates since the last read kept with a cached context
_MAX_ROUNDS = 64         # compaction rounds per lease; then the session waits behind the others
_MAX_CONFLICTS = 8       # rounds lost to concurrent changes before giving up until the next append
_MAX_REJECTIONS = 3      # a session's model summaries rejected in a row before its narrative is written offline


@dataclasses.dataclass(frozen=True)
class RedisConfig(EndpointConfig, ContextConfig):
    url: str = option("redis://localhost:6379/0", "Redis server URL (redis://, rediss:// or unix://)",
                      aliases=("redis_url",))
    prefix: str = option("ovos:memory", "key prefix; memories with different prefixes never see each other")
    compact_token_threshold: int | None = option(
        4000, "compact when the short-term list reaches this many tokens; 0 or null: off; "
        "takes precedence over compact_threshold when both are set", kind=int, minimum=0, nullable=True)
    compact_threshold: int | None = option(
        None, "compact when the list holds this many exchanges (all but keep_recent); 0 or null: off; "
        "set alone, it replaces the token threshold", kind=int, minimum=0)
    keep_recent: int | None = option(
        None, "newest exchanges never compacted; null: 1 with the token threshold (it keeps about half "
        "the threshold of recent context), 2 with the round threshold (all but the two most recent)",
        kind=int, minimum=0)
    short_term_ttl: float | None = option(
        30 * DAY, "seconds the short-term list lives after the last activity (30 days); 0 or null: forever",
        kind=float, minimum=0, nullable=True, aliases=("short_term_memory_ttl",))
    long_term_ttl: float | None = option(
        30 * DAY, "seconds the summary lives after the last activity (30 days); 0 or null: forever",
        kind=float, minimum=0, nullable=True, aliases=("long_term_memory_ttl",))
    max_summary_tokens: int = option(256, "upper bound of the long-term summary", minimum=16)
    max_history: int | None = option(
        None, "newest short-term messages sent in the context; 0 or null: the whole list", kind=int, minimum=0)
    socket_timeout: float = option(2.0, "seconds to connect to or hear from Redis before it counts as down",
                                   minimum=0.01)
    retry_after: float = option(5.0, "seconds before the first reconnection attempt while Redis is down; each failed "
                                "attempt doubles the wait, up to 60 s", minimum=0)
    lock_timeout: float = option(30.0, "compaction lease in seconds (renewed while a summary is written)",
                                 minimum=0.1)


def _exchange_pair(exchange: Any) -> tuple[str, str]:
    if isinstance(exchange, Exchange):
        pair: Any = (exchange.user, exchange.assistant)
    elif isinstance(exchange, Mapping):
        pair = (exchange.get("user"), exchange.get("assistant"))
    elif isinstance(exchange, (tuple, list)) and len(exchange) == 2:
        pair = tuple(exchange)
    else:
        pair = None
    if pair is None or not all(isinstance(text, str) for text in pair):
        raise TypeError("an exchange is an Exchange(user, assistant), a {'user': str, 'assistant': str} dict "
                        f"or a (user, assistant) pair of str, not {exchange!r}"[:300])
    if not any(text.strip() for text in pair):
        # Stored, it read back as "User: \nAssistant: " in load_formatted and took a kept place.
        raise ValueError("an exchange needs a user or an assistant text: both are empty")
    return pair[0], pair[1]


_dropped_log = LogOnce()


def _conversation(messages: list[AgentMessage], owner: str) -> list[AgentMessage]:
    """``messages`` without system and developer ones, said once. The list is replayed to the
    model as the conversation: only its turns are kept there, and an item of another role found
    there is left out (decode_array), so that none reaches the model as an instruction."""
    kept = [m for m in messages if role_of(m) in REPLAYED_ROLES]
    if len(kept) < len(messages):
        _dropped_log.warning("roles", "%s: system and developer messages given to update_history or an import are "
                             "not stored (the list keeps the conversation's user, assistant and tool messages)", owner)
    return kept


def _within(history: list[AgentMessage], tokens: int, keep: int) -> list[AgentMessage]:
    """The newest messages within the compaction threshold, as a context window: while compaction
    is behind (a slow model, an endpoint down) the list grows past it, and the prompt must not
    grow with it. What is left out is being folded into the summary; so the newest ``keep``
    exchanges, which compaction never folds, go whatever their size (a long answer the user asks
    about next would be in neither)."""
    fitted = fit_window(history, tokens, True)[0]
    users = [i for i, m in enumerate(history) if is_role(m, "user")]
    waiting = _trailing_questions(history)  # questions not answered yet
    count = keep + waiting
    start = users[-count] if count and len(users) >= count else 0
    newest = history[start:] if count else []
    return fitted if len(fitted) >= len(newest) else context_window(newest, True)


def _compaction_policy(s: RedisConfig, token_threshold_given: bool) -> CompactionPolicy:
    """The reference's rules (docs/backends/redis.md): the token threshold is the default;
    ``compact_threshold`` alone replaces it (round-based); when both are set, the token
    threshold takes precedence."""
    tokens, rounds = s.compact_token_threshold or 0, s.compact_threshold or 0
    if rounds and not token_threshold_given:
        tokens = 0
    elif rounds and tokens:
        rounds = 0
    keep = s.keep_recent if s.keep_recent is not None else (1 if tokens else 2)
    return CompactionPolicy(tokens, rounds, keep)


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One user turn and the reply to it (miso-agent's ``Conversation``)."""

    user: str
    assistant: str

    def format(self) -> str:
        return f"User: {self.user}\nAssistant: {self.assistant}"


@dataclasses.dataclass
class _Snapshot:
    summary: str
    blob: str                       # the read script's JSON array
    later: list[list[AgentMessage]]  # batches appended since


class RedisMemory(ContextMemory):
    """Short-term messages plus a compacted long-term summary per session, in Redis.

    The context is ``[SYSTEM(system_prompt)?] + [SYSTEM("[Conversation summary so far]\\n" +
    summary)?] + short-term messages (minus trailing USER) + USER(utterance)``.
    """

    Config: ClassVar[type] = RedisConfig
    plugin_name: ClassVar[str] = "ovos-memory-plugin-redis"
    export_parts: ClassVar[frozenset[str]] = frozenset({"window", "summary"})

    @classmethod
    def check_settings(cls, settings: Any) -> list[str]:
        problems = [f"'url': {problem}"] if (problem := url_problem(settings.url)) else []
        if "{" in settings.prefix or "}" in settings.prefix:
            # A session's keys are <prefix>:{<session>}:<kind>: with a brace in a prefix, another
            # prefix and session id could spell the same keys and read this memory.
            problems.append(f"'prefix' {settings.prefix!r} may not hold '{{' or '}}'")
        return super().check_settings(settings) + problems

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self.settings = s = with_endpoint(self.settings, config, self.plugin_name)
        self._store = RedisStore(s.url, s.prefix, s.short_term_ttl, s.long_term_ttl, s.socket_timeout,
                                 s.retry_after, self.plugin_name)
        self._policy = _compaction_policy(s, token_threshold_given="compact_token_threshold" in self.config)
        if s.compact_token_threshold and not self._policy.token_threshold:  # rounds alone replaced it
            self.settings = s = dataclasses.replace(s, compact_token_threshold=None)
        self.settings = s = dataclasses.replace(s, keep_recent=self._policy.keep_recent)  # what is in force
        self._summarizer: Callable[[str, list[dict], int], str] | None = self.config.get("_summarizer")
        self._client = chat_client(s, owner=self.plugin_name)
        self._folder = Summarizer(self._client, s.max_summary_tokens)
        self._rejections: dict[str, int] = {}  # per session, since its last committed summary
        self._problems = Problems()
        self._log = LogOnce()
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, _Snapshot] = OrderedDict()  # the last read, for when Redis is down
        self._due = DueQueue()  # sessions waiting for compaction
        self._worker = BackgroundWorker(f"{self.plugin_name}:compaction", self._compact_step, retry_delay=1.0)

    # -- the OPM contract ----------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        return self._read(check_session_id(session_id))[1]

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        """Append the messages; a system or developer message is not stored (said once): see
        :func:`_conversation`."""
        messages = _conversation(self._incoming(new_messages, session_id), self.plugin_name)
        if not messages:
            return
        self._append(session_id, messages)

    def context_parts(self, utterance: str, session_id: str, *, window: bool = True,
                      blocks: bool = True) -> ContextParts:
        """The summary and the newest messages, read together (one script: a compaction
        committing meanwhile is seen whole or not at all)."""
        if not window:
            return ContextParts([], self.context_blocks(session_id, utterance) if blocks else [])
        newest = self.settings.max_history or 0
        # One more than max_history: a question waiting for its answer (appends keep at most one
        # at the end) does not take one of the places of the messages before it.
        summary, history, tokens = self._read(session_id, newest + 1 if newest else 0)
        if newest:  # (the cached copy used while Redis is down may be longer)
            history = history[max(0, len(history) - _trailing_questions(history) - newest):]
        threshold = self._policy.token_threshold
        # The list's count, kept by every append, says whether it is over (None: the RAM copy).
        over = threshold and (tokens is None or tokens > threshold)
        sent = _within(history, threshold, self._policy.keep_recent) if over else history
        block = summary_block(summary) if blocks else ""
        # An answer whose question max_history (or the threshold) left out goes too: chat templates
        # that want turns to alternate refuse a prompt opening with one.
        return ContextParts(context_window(sent, True), [system_message(block)] if block else [], history)

    def context_blocks(self, session_id: str, utterance: str = "") -> list[AgentMessage]:
        """The system block this memory adds besides its prompt: the summary, if any (for composites)."""
        check_session_id(session_id)
        try:
            summary = self._store.summary(session_id)
        except StorageError:
            summary = self._cached(session_id)[0]
        block = summary_block(summary)
        return [system_message(block)] if block else []

    # -- miso-agent's API --------------------------------------------------------------------
    def load(self, session_id: str) -> tuple[str, list[Exchange]]:
        """``(long-term summary, short-term exchanges)``, oldest first (``Load``)."""
        summary, history, _ = self._read(check_session_id(session_id))
        return summary, _exchanges(history)

    def load_locked(self, session_id: str, timeout: float = 10.0) -> tuple[str, list[Exchange]]:
        """Like :meth:`load`, after any running compaction of the session has committed.

        Every load is already atomic (one script reads both parts); this one also holds the
        compaction lease while reading, so the summary is not about to change. After
        ``timeout`` seconds it reads anyway. (The reference's ``LoadLocked``.)
        """
        lease = self._store.lease(check_session_id(session_id), self.settings.lock_timeout)
        try:
            held = self._store.io(lambda: lease.acquire(wait=timeout))
        except StorageError:
            held = False
        try:
            return self.load(session_id)
        finally:
            if held:
                lease.release()

    def load_formatted(self, session_id: str, lock: bool = False) -> tuple[str, str]:
        """``(summary, "User: …\\nAssistant: …" lines)`` ready for a prompt (``LoadFormatted``)."""
        summary, exchanges = self.load_locked(session_id) if lock else self.load(session_id)
        return summary, "\n".join(e.format() for e in exchanges)

    def append(self, session_id: str, exchange: Exchange | Mapping[str, str] | tuple[str, str]) -> None:
        """Store one exchange (``Append``): an ``Exchange``, a ``{"user", "assistant"}`` dict
        or a ``(user, assistant)`` pair. Anything else is a ``TypeError``; an exchange whose two
        texts are both empty (or only whitespace) is a ``ValueError``."""
        check_session_id(session_id)
        user, assistant = _exchange_pair(exchange)
        self.update_history([AgentMessage(MessageRole.USER, user), AgentMessage(MessageRole.ASSISTANT, assistant)],
                            session_id)

    # -- data ownership ------------------------------------------------------------------
    def sessions(self) -> list[str]:
        """The sessions in Redis (and any held here while it is down); StoreUnavailable while it
        is down: "none" would be a lie."""
        return self._listed(self._store.sessions())

    def forget(self, session_id: str) -> dict[str, int]:
        """Delete every key of the session (messages, summary, counters, lease) and the RAM copies."""
        check_session_id(session_id)
        with self._held.turn(session_id):  # after a write in flight, which it then deletes
            messages, summaries = self._store.forget(session_id)  # raises while Redis is down: RAM stays as is
            held = self._held.drop(session_id)
        forget_replies()
        with self._lock:
            self._cache.pop(session_id, None)
            self._rejections.pop(session_id, None)  # a new conversation under this id starts afresh
        self._problems.forget(session_id)
        self._due.discard(session_id)
        return {"messages": messages + held, "summaries": summaries}

    def export(self, session_id: str) -> dict[str, Any]:
        """The session as stored in Redis; StoreUnavailable while it is down (an export of the RAM
        copy would look complete and not be)."""
        sid = check_session_id(session_id)
        self._write_held(sid)
        summary, blob, _ = self._store.read(sid)
        history = decode_array(blob)
        data = super().export(session_id)
        data.update(summary=summary, window=[to_dict(m) for m in history])
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        """Load what :meth:`export` produced: the summary joins the session's (the stored one first),
        the window's new messages are appended (importing the same export again changes nothing). Checked whole
        first; unlike a turn it raises while Redis is down: nothing is held for an import."""
        data, sid = session_export(data, session_id, self)
        messages = _conversation(export_messages(data), self.plugin_name)
        if not isinstance(data.get("summary") or "", str):
            raise TypeError("the export's 'summary' must be a string")
        stored_summary, blob, _ = self._store.read(sid)
        summary = truncate_to_tokens(merged_summary(stored_summary, str(data.get("summary") or "")),
                                     self.settings.max_summary_tokens)
        new = unseen_messages(decode_array(blob), messages)
        if summary and summary != stored_summary:
            self._store.set_summary(sid, summary)
        if new:
            self._write_held(sid)  # anything held for this session goes first, in order
            tokens, rounds = self._store.append(sid, new)
            self._cache_append(sid, new)
            self._compact_if_due(sid, tokens, rounds)  # an import over the threshold compacts as a turn would

    def degraded(self) -> dict[str, str]:
        out = self._store.failing()  # Redis down (turns answered from RAM, messages held), or failing
        out.update(self._problems.report(self.plugin_name))
        if self._client.problem:
            out[self.plugin_name] = f"{self._client.problem}; old messages are summarised without the model"
        return out

    def flush(self, timeout: float | None = None) -> bool:
        """Write what is held (trying Redis at once, whatever the pause after its last failure)
        and wait for compaction; False while anything is still held."""
        written = self._write_held_now()
        return self._worker.flush(timeout) and written

    def close(self) -> None:
        if not self._closed:
            if not self._write_held_now():
                LOG.error(f"{self.plugin_name}: closing with {self._held.count()} message(s) held; they are lost: "
                          f"Redis at {self._store.where} {self._store.problem or 'did not take them'}")
            self._worker.close()
            self._store.close()
        super().close()

    def _write_held_now(self) -> bool:
        if self._held.sessions():
            self._store.attempt_now()
        return self._write_all_held()

    # -- reads, and what is kept for when Redis is down --------------------------------------
    def _read(self, session_id: str, newest: int = 0) -> tuple[str, list[AgentMessage], int | None]:
        """``(summary, newest messages or all, tokens of the whole list)``; from the RAM cache (or
        empty, the tokens None) while Redis is down. Messages held while it was down are written
        first, so they are in what is read."""
        try:
            if not self._write_held(session_id):
                return (*self._cached(session_id), None)
            summary, blob, tokens = self._store.read(session_id, newest)
        except StorageError:
            return (*self._cached(session_id), None)
        with self._lock:
            # The reply's JSON text is an immutable snapshot: caching it costs nothing per turn.
            if len(blob) <= _CACHED_CHARS:
                self._cache[session_id] = _Snapshot(summary, blob, [])
                self._cache.move_to_end(session_id)
                while len(self._cache) > _CACHED_SESSIONS:
                    self._cache.popitem(last=False)
            else:
                self._cache.pop(session_id, None)
        return summary, decode_array(blob), tokens

    def _cached(self, session_id: str) -> tuple[str, list[AgentMessage]]:
        """The last context read, plus what was appended since (stored or held), as copies."""
        with self._lock:
            snapshot = self._cache.get(session_id)
            batches = list(snapshot.later) if snapshot else []
            batches.append(self._held.peek(session_id))
        history = decode_array(snapshot.blob) if snapshot else []
        for batch in batches:
            pop, add = fold_into(history[-1] if history else None, batch)
            history = (history[:-1] if pop else history) + add
        return (snapshot.summary if snapshot else ""), [copy_message(m) for m in history]

    def _write_held(self, session_id: str) -> bool:
        """Write the messages held for the session while Redis was down, in order, before anything
        else; True when none are left held."""
        return session_id not in self._held or self._append(session_id, [])

    def _append(self, session_id: str, messages: list[AgentMessage]) -> bool:
        """Append what is held for the session, then ``messages``, and compact if
        due; while Redis is down they are held instead (see _core/held.py). True when written."""
        written: list[tuple[list[AgentMessage], tuple[int, int]]] = []
        try:
            held = self._held.write(session_id, messages,
                                    lambda batch: written.append((batch, self._store.append(session_id, batch))),
                                    (StorageError,))
        except StorageError:
            self._store.forget_tail(session_id)
            return False
        finally:
            # What reached Redis (held updates one call each, then this one), as one update of the
            # RAM copy: it keeps a bounded number of updates, and a replay is one.
            if written:
                self._cache_append(session_id, [m for batch, _ in written for m in batch])
        if not written:
            return True  # nothing held, nothing given
        if held:
            LOG.info(f"{self.plugin_name}: wrote {held} message(s) of {session_id!r} held while Redis was down")
            self._log.clear("held")
        tokens, rounds = written[-1][1]  # the list's totals after the last call
        self._compact_if_due(session_id, tokens, rounds)
        return True

    def _cache_append(self, session_id: str, messages: list[AgentMessage]) -> None:
        with self._lock:
            snapshot = self._cache.get(session_id)
            if snapshot is not None:
                snapshot.later.append(messages)  # our own copies (coerce_messages): safe to keep
                if len(snapshot.later) > _CACHED_UPDATES:
                    del self._cache[session_id]

    # -- compaction (background) ---------------------------------------------------------
    def _compact_if_due(self, session_id: str, tokens: int, rounds: int) -> None:
        """Queue the session's compaction (in the background) when its list is over a threshold."""
        if self._policy.due(tokens, rounds):
            self._due.add(session_id)
            self._worker.notify()

    def _compact_step(self) -> bool:
        session_id = self._due.pop()
        if session_id is None:
            return False
        try:
            self._compact(session_id)
        except StorageError:
            pass  # logged by the store; the next append over the threshold queues it again
        return bool(self._due)

    def _compact(self, session_id: str) -> None:
        lease = self._store.lease(session_id, self.settings.lock_timeout)
        # Another process may be compacting this session: wait for our turn, then look again
        # (it may have done our part, or stopped before the appends that queued us).
        if not self._store.io(lambda: lease.acquire(wait=self.settings.lock_timeout)):
            return
        try:
            conflicts = 0
            for _ in range(_MAX_ROUNDS):
                outcome = self._compact_once(session_id, lease)
                if outcome is RoundOutcome.DONE:
                    return
                if outcome is RoundOutcome.CONFLICT:
                    conflicts += 1
                    if conflicts >= _MAX_CONFLICTS:
                        return
            self._due.add(session_id)  # a long backlog: the rest after the other sessions' turn
        finally:
            lease.release()

    def _compact_once(self, session_id: str, lease: Lease) -> RoundOutcome:
        """One read-summarise-commit round."""
        read = self._store.snapshot(session_id)
        summary, items = read.summary, read.items
        cut = self._policy.cut(items)  # queued over a threshold: down to about half of it
        if not cut:
            return RoundOutcome.DONE
        head = items[:cut]
        forgotten = self._held.dropped_since(session_id)  # forget drops what is held
        # The LLM calls run outside any data lock: writers keep appending meanwhile.
        # A lost lease stops the fold before its next model request too: another process's
        # forget deletes the lease with the session, and the forgotten turns must not go on being sent.
        try:
            fold = self._fold(session_id, summary, [to_dict(i.message) for i in head],
                              lambda: forgotten() or lease.lost)
        except FoldStopped:
            if lease.lost and not forgotten():
                self._lease_lost(session_id)
            return RoundOutcome.DONE
        if fold.rejected:
            return RoundOutcome.DONE  # the old summary stays; the next append over the threshold tries again
        head = head[:fold.folded]  # what the fold read; the rest waits for the next round
        status, tokens, rounds = self._store.commit(session_id, lease, read, fold.summary, head)
        if status is CommitStatus.LEASE_LOST:
            if not forgotten():  # forget deleted the lease with the rest: nothing was lost
                self._lease_lost(session_id)
            return RoundOutcome.DONE
        if status is not CommitStatus.COMMITTED:
            LOG.debug(f"{self.plugin_name}: {session_id!r} changed during compaction ({status.name}); reading again")
            return RoundOutcome.CONFLICT
        LOG.debug(f"{self.plugin_name}: folded {len(head)} message(s) of {session_id!r} into its summary")
        return RoundOutcome.MORE if self._policy.due(tokens, rounds, started=True) else RoundOutcome.DONE

    def _lease_lost(self, session_id: str) -> None:
        try:
            gone = not self._store.holds(session_id)
        except StorageError:
            gone = False
        if gone:  # forgotten by another process: nothing to write, nothing lost
            LOG.debug(f"{self.plugin_name}: {session_id!r} was forgotten during its compaction")
        else:
            LOG.warning(f"{self.plugin_name}: lost the compaction lease of {session_id!r}; summary not written")

    def _fold(self, session_id: str, previous: str, messages: list[dict[str, Any]],
              stop: Callable[[], bool]) -> Fold:
        """The new summary (bounded to ``max_summary_tokens``), or a rejection that keeps the old one."""
        limit = self.settings.max_summary_tokens
        if self._summarizer is not None:
            text = truncate_to_tokens((self._summarizer(previous, messages, limit) or "").strip(), limit)
            return Fold(text, {}, "custom")
        with self._lock:
            rejections = self._rejections.get(session_id, 0)
        fold = self._folder.fold(previous, None, messages, narrate=rejections < _MAX_REJECTIONS, stop=stop)
        with self._lock:
            if fold.rejected:
                self._rejections[session_id] = rejections + 1
                self._problems.set("summary", f"the model's summary of {session_id!r} was rejected ({fold.rejected});"
                                   " the old summary stays and is tried again at the next compaction", session_id)
            else:
                self._rejections.pop(session_id, None)
                if fold.source == "llm":
                    self._problems.clear("summary")
        if fold.rejected:
            self._log.warning("rejected", f"{self.plugin_name}: the model's summary of {session_id!r} was not used: "
                                          f"{fold.rejected}; the old summary stays, tried again later")
        elif fold.source == "llm":
            self._log.clear("rejected")
        return fold


def _trailing_questions(history: Sequence[AgentMessage]) -> int:
    """How many USER messages end ``history`` (questions still waiting for their answer)."""
    count = 0
    while count < len(history) and is_role(history[-1 - count], "user"):
        count += 1
    return count


def _exchanges(history: Sequence[AgentMessage]) -> list[Exchange]:
    """Group messages into exchanges: a USER turn and the ASSISTANT text after it."""
    pairs: list[list[str]] = []
    for msg in history:
        if is_role(msg, "user"):
            pairs.append([msg.content, ""])
        elif is_role(msg, "assistant") and msg.content:
            if not pairs:
                pairs.append(["", ""])
            pairs[-1][1] = f"{pairs[-1][1]}\n{msg.content}" if pairs[-1][1] else msg.content
    return [Exchange(u, a) for u, a in pairs]


#: The reference's (miso-agent's ``TempMemory``) names for the memory and for one exchange.
TempMemory = RedisMemory
Conversation = Exchange
