"""The Redis side of ``RedisMemory``: the connection, the scripts, and one method per operation.

Every method turns Redis failures into this package's errors: ``StoreUnavailable`` when the
server cannot be reached (logged once, then no new attempt for ``retry_after`` seconds, so a
dead server costs one quick failure per period and not one per turn), ``StorageError`` for any
other Redis error. Recovery is logged once too.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from .._core.clock import said_now
from .._core.compat import AgentMessage, MessageRole
from .._core.held import current_update
from .._core.log import LogOnce
from .._core.tokens import estimate_tokens
from ..errors import ConfigError, MissingDependencyError, StorageError, StoreUnavailable
from ..messages import fold_into, from_dict, is_role, to_dict
from . import scripts as scripts
from .lease import Lease

__all__ = ["REPLAYED_ROLES", "CommitStatus", "Item", "RedisStore", "Snapshot", "decode", "decode_array", "encode",
           "message_of", "probe", "url_problem"]

_INSTALL = "pip install 'ovos-memory-plugins[redis]'"
_APPEND_ATTEMPTS = 64  # compare-and-set retries when other writers keep moving the tail
_BATCH = 500           # messages per append script call (Lua's unpack has a stack limit)
_TAILS = 1024          # sessions whose last raw item is remembered (saves a read per append)


class CommitStatus(enum.Enum):
    """What the commit script answered (its numeric codes are the values)."""

    COMMITTED = 1
    LEASE_LOST = -1        # another process holds the session's compaction lease now
    SUMMARY_CHANGED = -2   # the summary was replaced meanwhile (an import, another compactor)
    LIST_CHANGED = -3      # the list no longer starts with the messages that were summarised


@dataclasses.dataclass(frozen=True)
class Item:
    """A decoded list item: the message plus what the counters need."""

    raw: bytes  # as Redis holds it: the scripts compare items byte for byte (a damaged one too)
    message: AgentMessage
    tokens: int
    is_user: bool


def message_tokens(msg: AgentMessage) -> int:
    tokens = estimate_tokens(msg.content)
    if getattr(msg, "tool_calls", None):
        tokens += estimate_tokens(json.dumps(to_dict(msg)["tool_calls"]))
    return tokens


def encode(msg: AgentMessage, now: float) -> tuple[str, int, int]:
    """(JSON without its id, tokens, 1 if USER): the append script adds the id."""
    data = to_dict(msg, round(now, 3))
    tokens = message_tokens(msg)
    data["tok"] = tokens
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")), tokens, int(is_role(msg, "user"))


_ROLES = {r.value: r for r in MessageRole}
_TOOL_KEYS = ("tool_calls", "tool_call_id", "name")
#: The roles of the items replayed. The memory stores no others (see RedisMemory.update_history):
#: a system item in the list was written by hand, and would reach the model as an instruction.
REPLAYED_ROLES = ("user", "assistant", "tool")


class _NotReplayed(ValueError):
    """An item of a role the list does not replay (its role is the argument)."""


def message_of(data: dict[str, Any]) -> AgentMessage:
    """The message of a decoded item (ids, token counts and timestamps are ignored)."""
    if data["role"] not in REPLAYED_ROLES:
        raise _NotReplayed(data["role"])
    if any(k in data for k in _TOOL_KEYS):
        return from_dict(data)
    return AgentMessage(_ROLES.get(data["role"], data["role"]), data["content"])


def decode_array(blob: str) -> list[AgentMessage]:
    """The messages of a ``[item,item,...]`` reply of the read script. An item that is not one
    of ours (written by hand, damaged) is left out and said once: it must not cost the session
    every later turn."""
    try:
        items = json.loads(blob)
    except ValueError:
        items = _items_one_by_one(blob)
    out = []
    for data in items:
        try:
            out.append(message_of(data))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            _unreadable(exc)
    return out


def _items_one_by_one(blob: str) -> list[Any]:
    """The items of ``[item,item,...]`` that parse, when one does not (the array is the raw items
    joined by commas: each of ours is an object, so the next one starts at ``,{``)."""
    decoder, items, at = json.JSONDecoder(), [], 1
    while at < len(blob) - 1:
        try:
            item, end = decoder.raw_decode(blob, at)
            items.append(item)
            at = end + 1  # past the comma
        except ValueError as exc:
            _unreadable(exc)
            following = blob.find(",{", at)
            if following < 0:
                break
            at = following + 1
    return items


_unreadable_log = LogOnce()


def _unreadable(exc: Exception) -> None:
    if isinstance(exc, _NotReplayed):  # stored by an earlier version (which kept them), or by hand: no damage
        _unreadable_log.warning("role", "a Redis short-term item of the %s role is left out of the window and of "
                                "summaries (a system message stored by an earlier version, or written by hand)", exc)
        return
    _unreadable_log.error("unreadable", "a Redis short-term item is not a message this package wrote (%s); it is "
                          "left out of the window and of summaries", exc)


#: The largest token count an item may carry (the scripts read the same: counters stay 64-bit).
MAX_ITEM_TOKENS = 10**12


def _stored_count(value: Any) -> int:
    """An item's token count as the scripts read it: a whole number from 0 to
    :data:`MAX_ITEM_TOKENS`, else 0 (``"tok": 1e300`` written by hand must not reach HINCRBY)."""
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return count if 0 <= count <= MAX_ITEM_TOKENS else 0


def decode(raw: bytes) -> Item:
    """The item stored as ``raw``; one that is not ours reads as an empty system message that
    no window shows and no summary folds (see :func:`decode_array`)."""
    try:
        # Bytes that are not UTF-8 (damaged) read as U+FFFD, as the read script's reply does.
        data = json.loads(raw.decode("utf-8", "replace"))
        tokens = _stored_count(data.pop("tok", 0))
        data.pop("id", None)
        msg = message_of(data)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        _unreadable(exc)
        return Item(raw, AgentMessage(MessageRole.SYSTEM, ""), 0, False)
    return Item(raw, msg, tokens, is_role(msg, "user"))


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A session as compaction reads it: the summary (as text, and as Redis holds it, for the
    commit's check) and every item."""

    summary: str
    summary_raw: bytes
    items: list[Item]


_recounted_log = LogOnce()


def _recounted(owner: str, session_id: str, how: int) -> None:
    if how == 2:
        _recounted_log.warning("set aside", "%s: a Redis key of session %r had the wrong type (written by hand?); "
                               "it was renamed to '<key>:damaged' and the session goes on without it", owner,
                               session_id)
        return
    _recounted_log.warning("recounted", "%s: the Redis counters of session %r were missing or damaged (its meta "
                           "hash evicted, deleted or edited); they were counted again from its list", owner,
                           session_id)


#: The longest wait between two attempts to reach a Redis that does not answer.
RETRY_MAX_S = 60.0


def _credentials_refused(exc: Exception) -> str | None:
    """What to tell when ``exc`` is Redis refusing the connection's credentials (redis-py reports
    a wrong password as a ConnectionError, and a missing one by the command it refused), or the
    database number: a mistake in the url, not an outage."""
    text = str(exc)
    # First: redis-py raises AuthenticationError for a missing password too (its HELLO refused).
    if "NOAUTH" in text or "must be called with the client already authenticated" in text \
            or "Authentication required" in text:
        return f"needs a password ({text}): put it in the url, redis://:PASSWORD@host:port/db"
    if type(exc).__name__ == "AuthenticationError" or "WRONGPASS" in text or "invalid password" in text:
        return (f"refused the credentials in the url ({text}): check the password, "
                "redis://[user]:PASSWORD@host:port/db")
    if "DB index is out of range" in text:  # /99 on a server of 16 databases
        return (f"has no database of the number in the url ({text}): a server has 16 by default, "
                "redis://host:port/0 to /15")
    return None


def _ms(seconds: float | None) -> int:
    # Rounded up: a TTL under a millisecond is one, not 0 (which means "never expires").
    return math.ceil(seconds * 1000) if seconds else 0


#: The URL schemes the redis client takes.
URL_SCHEMES = ("redis", "rediss", "unix")


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a Redis URL (None if nothing): checked before any connection."""
    if url != url.strip():  # read as given, a space reads as part of the scheme or the database
        return f"{safe_url(url.strip())!r} has white space before or after it in the config: remove it"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return f"{safe_url(url)!r} is not a URL: {exc}"
    if parts.scheme not in URL_SCHEMES:
        return (f"{safe_url(url)!r} is not a Redis URL: it must start with "
                f"{', '.join(s + '://' for s in URL_SCHEMES)}")
    database = parts.path.strip("/")
    if parts.scheme != "unix" and database and not database.isdigit():
        return f"{safe_url(url)!r}: the database must be a number (redis://host:6379/0), not {database!r}"
    return _query_problem(url) if parts.query else None


def _query_problem(url: str) -> str | None:
    """What the redis client refuses in ``url``'s query (``?socket_timeot=1``): it takes any name
    there and fails at each connection, so every turn would; found here by building a connection
    object, which opens no socket. None without the client (its absence is said elsewhere)."""
    try:
        import redis
    except ImportError:
        return None
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError, redis.RedisError) as exc:
        return f"{safe_url(url)!r}: its query is not one the redis client takes ({exc})"
    return None


def safe_url(url: str) -> str:
    """The URL without credentials, for messages and log lines."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable url>"
    if not parts.netloc and parts.scheme not in URL_SCHEMES:  # no URL ("", "localhost:6379"): shown as given
        return url.split("?")[0] if "@" not in url else "<url with credentials>"
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def probe(url: str, timeout: float) -> None:
    """Connect to ``url`` once and ping it (``ovos-memory check-config``): a
    :class:`StoreUnavailable` when nothing answers (a server still starting: the memory waits
    for it), a :class:`ConfigError` when the server refuses the url (a password, a database number)."""
    try:
        import redis
    except ImportError as exc:
        raise MissingDependencyError(f"the redis memory needs the redis client: {_INSTALL}") from exc
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    except redis.RedisError as exc:
        refused = _credentials_refused(exc)
        if refused:
            raise ConfigError(f"Redis at {safe_url(url)} {refused}") from exc
        raise StoreUnavailable(f"Redis at {safe_url(url)} does not answer ({exc})") from exc
    finally:
        client.close()


class RedisStore:
    """Short-term lists, summaries and leases of one key prefix on one Redis server."""

    def __init__(self, url: str, prefix: str, short_ttl: float | None, long_ttl: float | None,
                 socket_timeout: float, retry_after: float, owner: str):
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise MissingDependencyError(f"{owner} needs the redis client: {_INSTALL}") from exc
        self.where = safe_url(url)
        # A rediss:// URL for a server without TLS waits for a handshake that never comes.
        self._tls_hint = "; rediss:// connects with TLS: is the server set up for it (redis:// if not)?" \
            if url.startswith("rediss://") else ""
        self.prefix = prefix
        self._owner = owner
        self._retry_after = retry_after
        self._errors = redis.RedisError
        self._down_errors = (redis.ConnectionError, redis.TimeoutError)
        try:
            # No I/O here: the pools connect on first use. No client-side retries: see the module doc.
            options: dict[str, Any] = dict(socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
                                           retry=Retry(NoBackoff(), 0))
            # Bytes that are not UTF-8 (an item or a summary damaged, or written by hand) read as
            # U+FFFD: strict decoding raised on every read of the session.
            self.client = redis.Redis.from_url(url, decode_responses=True, encoding_errors="replace", **options)
            # Replies of the items the scripts compare with what was read (the tail an append folds
            # against, the head a compaction folds): as bytes, so a damaged item still matches.
            self._raw = redis.Redis.from_url(url, **options)
        except ValueError as exc:
            raise ConfigError(f"{owner}: 'url' {self.where!r} is not a Redis URL: {exc}") from exc
        register = self.client.register_script
        self._append, self._read, self._commit = register(scripts.APPEND), register(scripts.READ), register(
            scripts.COMMIT)
        self._renew, self._release = register(scripts.RENEW), register(scripts.RELEASE)
        self._expire_if_none = register(scripts.EXPIRE_IF_NONE)
        # short, long, meta: the counters must outlive both the list and the summary.
        self._ttls = [_ms(short_ttl), _ms(long_ttl), max(_ms(short_ttl), _ms(long_ttl))
                      if short_ttl and long_ttl else 0]
        self._log = LogOnce()
        self._down_until = 0.0
        self._pause = retry_after  # the wait before the next attempt once it fails; doubles while it does
        self._failed_at = 0.0  # when the last failure that lengthened the pause came (monotonic)
        self.problem = ""  # why the last call that could not reach Redis failed ("" once one succeeds)
        self._lock = threading.Lock()
        self._tails: dict[str, bytes] = {}

    def keys(self, session_id: str) -> scripts.SessionKeys:
        return scripts.SessionKeys.of(self.prefix, session_id)

    # -- error handling ------------------------------------------------------------------
    def io(self, fn: Callable[[], Any], write: bool = False) -> Any:
        """Run one Redis call; failures become StorageError/StoreUnavailable, logged once.

        Reads and writes are logged apart: under ``maxmemory`` (OOM) reads succeed while every
        write fails, and a successful read must not make the next failed write log again.
        """
        kind = "write-error" if write else "read-error"
        if time.monotonic() < self._down_until:
            raise StoreUnavailable(f"Redis at {self.where} is down (next attempt within {self._pause:g}s)")
        started = time.monotonic()
        try:
            result = fn()
        except self._errors as exc:
            refused = _credentials_refused(exc)
            if refused is None and not isinstance(exc, self._down_errors):
                self._log.error(kind, "%s: Redis at %s failed: %s", self._owner, self.where, exc)
                raise StorageError(str(exc)) from exc
            # Each failed attempt waits longer before the next (up to RETRY_MAX_S): a server that
            # swallows packets costs a turn its socket_timeout only now and then, not every turn.
            # Calls that were already under way when it failed count as that one attempt.
            with self._lock:
                if started >= self._failed_at:
                    self._failed_at = time.monotonic()
                    self._down_until = self._failed_at + self._pause
                    self._pause = min(max(self._pause * 2, self._retry_after), max(self._retry_after, RETRY_MAX_S))
            self.problem = refused or f"is unreachable ({exc}){self._tls_hint}"
            self._log.error("down", "%s: Redis at %s %s; turns are answered from the in-process cache and new "
                            "messages are held until it answers", self._owner, self.where, self.problem)
            raise StoreUnavailable(str(exc)) from exc
        self._pause = self._retry_after
        self.problem = ""
        self._log.clear("down", f"{self._owner}: Redis at {self.where} is reachable again")
        self._log.clear(kind)
        return result

    def attempt_now(self) -> None:
        """Let the next call try Redis whatever the pause after the last failure (a flush, a
        close: the caller waits for the answer, and what is held is lost if nobody tries)."""
        with self._lock:
            self._down_until = 0.0

    def failing(self) -> dict[str, str]:
        """Redis unreachable, or reads or writes failing, until a call succeeds (``degraded()``)."""
        return self._log.failing(self._owner)

    @staticmethod
    def _call(script: Any, keys: list[str], args: list[Any], client: Any = None) -> Callable[[], Any]:
        return lambda: script(keys=keys, args=args, client=client)

    def _counted(self, session_id: str, recounted: Any) -> None:
        if recounted:
            _recounted(self._owner, session_id, int(recounted))

    def _tail(self, short: str) -> bytes:
        """The list's last item as Redis holds it (b"": none). A key of the wrong type reads as
        an empty list: the append script sets it aside (``scripts.set_aside``) and appends."""
        from redis import ResponseError

        try:
            tail = self._raw.lindex(short, -1)  # the raw client: bytes
        except ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                return b""
            raise
        return tail if isinstance(tail, bytes) else b""

    # -- operations ----------------------------------------------------------------------
    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> tuple[int, int]:
        """Normalise (``fold_into``) and append; returns the list's (tokens, exchanges) after."""
        result = (0, 0)
        for start in range(0, len(messages), _BATCH):
            result = self._append_batch(session_id, list(messages[start:start + _BATCH]), start // _BATCH)
        return result

    def _append_batch(self, session_id: str, messages: list[AgentMessage], part: int = 0) -> tuple[int, int]:
        keys = self.keys(session_id)
        with self._lock:
            tail_raw = self._tails.get(session_id)
        if tail_raw is None:
            tail_raw = self.io(lambda: self._tail(keys.short))
        now = said_now()  # a held update keeps the time it was said
        # The script keeps the newest updates' ids: a retry of an append whose reply was lost (a
        # timeout, the connection cut after Redis applied it) finds its id, and appends nothing.
        update, retried = current_update() or ("", False)
        update = f"{update}.{part}" if update else ""
        for _ in range(_APPEND_ATTEMPTS):
            tail = decode(tail_raw) if tail_raw else None
            pop, add = fold_into(tail.message if tail else None, messages)
            popped = tail if pop else None
            args: list[Any] = [tail_raw, int(pop), popped.tokens if popped else 0,
                               int(bool(popped and popped.is_user)), *self._ttls, update, int(retried)]
            for msg in add:
                args.extend(encode(msg, now))
            ok, raw, tokens, rounds, recounted = self.io(
                self._call(self._append, [keys.short, keys.meta, keys.summary], args, self._raw), write=True)
            self._counted(session_id, recounted)
            if ok:
                with self._lock:
                    if len(self._tails) >= _TAILS:
                        self._tails.clear()
                    self._tails[session_id] = raw
                return int(tokens), int(rounds)
            tail_raw = raw  # another writer moved the tail: fold against the real one
        raise StorageError(f"could not append to {session_id!r}: the tail kept changing")

    def forget_tail(self, session_id: str) -> None:
        with self._lock:
            self._tails.pop(session_id, None)

    def read(self, session_id: str, newest: int = 0) -> tuple[str, str, int]:
        """``(summary, JSON array of the newest items or all, tokens of the whole list)``;
        refreshes both TTLs (reading is activity).

        The array stays a string until :func:`decode_array`: callers can keep it as an immutable
        snapshot for free.
        """
        keys = self.keys(session_id)
        summary, blob, tokens, recounted = self.io(self._call(self._read, [keys.short, keys.meta, keys.summary],
                                                              [*self._ttls, newest]))
        self._counted(session_id, recounted)
        return summary, blob, int(tokens)

    def summary(self, session_id: str) -> str:
        return self.io(lambda: self.client.get(self.keys(session_id).summary)) or ""

    def snapshot(self, session_id: str) -> Snapshot:
        """The summary and every item, read atomically, without refreshing TTLs (for compaction)."""
        keys = self.keys(session_id)

        def read() -> list[Any]:
            pipe = self._raw.pipeline(transaction=True)
            pipe.get(keys.summary)
            pipe.lrange(keys.short, 0, -1)
            return pipe.execute()

        summary, raws = self.io(read)
        summary = summary or b""
        return Snapshot(summary.decode("utf-8", "replace"), summary, [decode(raw) for raw in raws])

    def commit(self, session_id: str, lease: Lease, read: Snapshot, new_summary: str,
               head: Sequence[Item]) -> tuple[CommitStatus, int, int]:
        """Fold ``head`` into the summary if nothing changed since ``read``; ``(status, tokens,
        exchanges)`` left (the counters are 0 unless the status is ``COMMITTED``). See ``scripts.COMMIT``."""
        keys = self.keys(session_id)
        args: list[Any] = [lease.token, read.summary_raw, new_summary, len(head), sum(i.tokens for i in head),
                           sum(i.is_user for i in head), *self._ttls, *(i.raw for i in head)]
        status, *left = self.io(self._call(self._commit, [keys.short, keys.meta, keys.summary, keys.lock], args,
                                           self._raw), write=True)
        outcome = CommitStatus(int(status))
        if outcome is not CommitStatus.COMMITTED:
            return outcome, 0, 0
        self._counted(session_id, left[2])
        return outcome, int(left[0]), int(left[1])

    def lease(self, session_id: str, seconds: float) -> Lease:
        return Lease(self.client, self.keys(session_id).lock, seconds, self._renew, self._release,
                     self._expire_if_none)

    def set_summary(self, session_id: str, text: str) -> None:
        """Replace the summary (import); also creates the counters so the session is listed."""
        keys = self.keys(session_id)

        def write() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.set(keys.summary, text, px=self._ttls[1] or None)
            pipe.hsetnx(keys.meta, "seq", 0)
            if self._ttls[2]:
                pipe.pexpire(keys.meta, self._ttls[2])
            elif not self._ttls[1]:  # a summary that never expires keeps its counters (it stays listed)
                pipe.persist(keys.meta)
            pipe.execute()

        self.io(write, write=True)

    def forget(self, session_id: str) -> tuple[int, int]:
        """Delete every key of the session; ``(messages, summaries)`` that were there."""
        keys = self.keys(session_id)
        self.forget_tail(session_id)

        def delete() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.llen(keys.short)
            pipe.exists(keys.summary)
            pipe.delete(*keys.all(), *keys.set_aside())
            # A key of the wrong type fails its count, not the delete that runs after it: the
            # session is gone, and so said.
            return pipe.execute(raise_on_error=False)

        messages, summaries, deleted = self.io(delete, write=True)
        if isinstance(deleted, Exception):
            raise deleted
        return (messages if isinstance(messages, int) else 0), (summaries if isinstance(summaries, int) else 0)

    def sessions(self) -> list[str]:
        pattern = scripts.glob_escape(self.prefix) + ":{*}:meta"
        keys = self.io(lambda: list(self.client.scan_iter(match=pattern, count=1000)))
        found = sorted({sid for sid in (scripts.session_from_key(self.prefix, k) for k in keys) if sid is not None})
        return [sid for sid, held in zip(found, self.io(lambda: self._holding(found))) if held]

    def holds(self, session_id: str) -> bool:
        """Whether the session still holds messages or a summary."""
        return bool(self.io(lambda: self._holding([session_id]))[0])

    def _holding(self, sessions: list[str]) -> list[bool]:
        """Whether each session still holds messages or a summary: its counters outlive both (so
        ids never repeat), and a session whose messages and summary expired is gone for the user."""
        pipe = self.client.pipeline(transaction=False)
        for sid in sessions:
            keys = self.keys(sid)
            pipe.exists(keys.short, keys.summary)
        return [bool(n) for n in pipe.execute()] if sessions else []

    def close(self) -> None:
        self.client.close()
        self._raw.close()
