"""Key layout and the Lua scripts of the Redis memory: every change of shared data is one script.

A Lua script runs atomically on the server, so two satellites writing the same session can
never interleave half-updates. The scripts stay dumb on purpose: the message normalisation
(``messages.fold_into``) runs in Python, and the append script only applies it if the list's
tail is still the one Python folded against (compare-and-set). On a mismatch it returns the
real tail and the client folds again. Items are compared as the bytes Redis holds, never parsed,
except to count the counters again when they are missing or damaged (``check_counters``).

Keys of one session (``{sid}`` is a hash tag: on a Redis Cluster all keys of a session share a
slot, which multi-key scripts need)::

    <prefix>:{<sid>}:short    list of JSON messages, oldest first (RPUSH appends, LTRIM compacts)
    <prefix>:{<sid>}:meta     hash: seq (message id counter), tokens and rounds of the list,
                              compacted (messages folded into the summary so far)
    <prefix>:{<sid>}:summary  the long-term summary (a string)
    <prefix>:{<sid>}:lock     the compaction lease (a random token, with an expiry)

A key of another type than these (written by hand) is renamed to ``<key>:damaged`` by the first
script that meets it, so that the session works again.
"""
from __future__ import annotations

import dataclasses
import re

__all__ = [
    "APPEND",
    "COMMIT",
    "EXPIRE_IF_NONE",
    "KINDS",
    "READ",
    "RELEASE",
    "RENEW",
    "SessionKeys",
    "glob_escape",
    "session_from_key",
]

KINDS = ("short", "meta", "summary", "lock")
#: The suffix of a key set aside for its wrong type.
DAMAGED = ":damaged"


@dataclasses.dataclass(frozen=True)
class SessionKeys:
    short: str
    meta: str
    summary: str
    lock: str

    @classmethod
    def of(cls, prefix: str, session_id: str) -> SessionKeys:
        return cls(*(f"{prefix}:{{{session_id}}}:{kind}" for kind in KINDS))

    def all(self) -> tuple[str, ...]:
        return (self.short, self.meta, self.summary, self.lock)

    def set_aside(self) -> tuple[str, ...]:
        """Where the scripts rename a key of the wrong type (``set_aside``): forget deletes them too."""
        return tuple(f"{key}{DAMAGED}" for key in (self.short, self.meta, self.summary))


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis MATCH pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def session_from_key(prefix: str, key: str, kind: str = "meta") -> str | None:
    """The session id of ``<prefix>:{<sid>}:<kind>``, or None for any other key."""
    head, tail = f"{prefix}:{{", f"}}:{kind}"
    if key.startswith(head) and key.endswith(tail) and len(key) >= len(head) + len(tail):
        return key[len(head):len(key) - len(tail)]
    return None


# Shared by every script: set or clear a key's expiry (0 milliseconds means "never expires").
_REFRESH = """
local function refresh(key, ms)
  ms = tonumber(ms)
  if ms > 0 then redis.call('PEXPIRE', key, ms) else redis.call('PERSIST', key) end
end
-- The counters' expiry. With both TTLs set it is the longer one. With one of them "never", the
-- counters live as long as the data still there: forever beside a key that never expires, else
-- as long as the list or summary that does (never-expiring counters beside data that expired
-- were left behind for good, out of sessions() and so out of reach of forget).
local function refresh_meta(meta, short, summary, short_ms, long_ms, meta_ms)
  short_ms, long_ms, meta_ms = tonumber(short_ms), tonumber(long_ms), tonumber(meta_ms)
  if meta_ms > 0 then redis.call('PEXPIRE', meta, meta_ms) return end
  local ms, forever, any = 0, false, false
  for _, pair in ipairs({{short, short_ms}, {summary, long_ms}}) do
    if redis.call('EXISTS', pair[1]) == 1 then
      any = true
      if pair[2] > 0 then ms = math.max(ms, pair[2]) else forever = true end
    end
  end
  if not any then ms = math.max(short_ms, long_ms) end
  if forever or ms == 0 then redis.call('PERSIST', meta) else redis.call('PEXPIRE', meta, ms) end
end
-- Counters that are missing beside a list (the meta hash evicted or deleted) or are not whole
-- numbers (edited by hand) are counted again from the list: HINCRBY refuses a value that is not
-- a whole number (every append failed), and counters started again from 0 beside a full list
-- stayed behind it for good (compaction started late). The items are parsed only then. Counted
-- as the client reads them: the tokens and user turns of user, assistant and tool items, the
-- highest id. Returns 1 when it counted again, else 0.
-- A counter is a whole number of at most 15 digits, never negative: a longer one passes a digit
-- check but not HINCRBY (a signed 64-bit integer), which failed after the script's first write.
local function whole(value) return value and #value <= 15 and string.match(value, '^%d+$') ~= nil end
-- A number read from an item, kept within what a counter can hold ("tok":1e300 written by hand).
local function count(value)
  local n = math.floor(tonumber(value) or 0)
  if n ~= n or n < 0 or n > 1e12 then return 0 end
  return n
end
-- A key of the wrong type (written by hand, or by another program under this prefix) fails every
-- command of the session: it is renamed aside, beside the session's keys, so the session works
-- again and the key can still be read, for as long as a summary is kept (ms; 0: no expiry). The
-- latest one set aside is kept. Returns 2 when it did (the scripts' "set aside" flag).
local function set_aside(key, want, ms)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' or kind == want then return 0 end
  local aside = key .. '""" + DAMAGED + """'
  redis.call('RENAME', key, aside)
  if tonumber(ms) > 0 then redis.call('PEXPIRE', aside, ms) end
  return 2
end
local function set_aside_all(short, meta, summary, ms)
  return math.max(set_aside(short, 'list', ms), set_aside(meta, 'hash', ms), set_aside(summary, 'string', ms))
end
local function check_counters(short, meta)
  local got = redis.call('HMGET', meta, 'tokens', 'rounds', 'seq', 'compacted')
  if got[4] and not whole(got[4]) then redis.call('HDEL', meta, 'compacted') end
  if redis.call('EXISTS', short) == 0 then
    if got[3] and not whole(got[3]) then redis.call('HDEL', meta, 'seq') end
    return 0
  end
  if whole(got[1]) and whole(got[2]) and whole(got[3]) then return 0 end
  local tokens, rounds, seq = 0, 0, (whole(got[3]) and tonumber(got[3])) or 0
  for _, raw in ipairs(redis.call('LRANGE', short, 0, -1)) do
    local ok, item = pcall(cjson.decode, raw)
    if ok and type(item) == 'table' then
      if item.role == 'user' or item.role == 'assistant' or item.role == 'tool' then
        tokens = tokens + count(item.tok)
        if item.role == 'user' then rounds = rounds + 1 end
      end
      seq = math.max(seq, count(item.id))
    end
  end
  redis.call('HSET', meta, 'tokens', math.min(tokens, 99999999999999), 'rounds', rounds, 'seq', seq)
  return 1
end
"""

#: KEYS: short, meta, summary.
#: ARGV: expected tail ('' = empty list), pop (1/0), popped tokens, popped is user (1/0),
#:       short ttl ms, long ttl ms, meta ttl ms, the update's id ('' = none), look for it first (1/0),
#:       then (json without its id, tokens, is user) per message.
#: Returns {0, real tail, 0, 0, recounted} when the tail changed, {2, tail, tokens, rounds, recounted}
#: when the update was already appended (a retry of an append whose reply was lost), else
#: {1, new tail, tokens, rounds, recounted}; recounted is 0, 1 when check_counters counted again,
#: 2 when a key of the wrong type was set aside (see set_aside).
#: The ids of the newest updates (about 30) are kept in the meta hash's 'updates', " id id ... ",
#: not in the items: a read does not carry them.
APPEND = _REFRESH + """
local short, meta, summary = KEYS[1], KEYS[2], KEYS[3]
local aside = set_aside_all(short, meta, summary, ARGV[6])
local recounted = math.max(aside, check_counters(short, meta))
if redis.call('EXISTS', short) == 0 then
  -- the list expired or was never written: its counters start again (seq keeps counting)
  redis.call('HSET', meta, 'tokens', 0, 'rounds', 0)
end
local update = ARGV[8]
if update ~= '' and ARGV[9] == '1' then
  local seen = redis.call('HGET', meta, 'updates') or ''
  if string.find(seen, ' ' .. update .. ' ', 1, true) then
    return {2, redis.call('LINDEX', short, -1) or '', tonumber(redis.call('HGET', meta, 'tokens') or 0),
            tonumber(redis.call('HGET', meta, 'rounds') or 0), recounted}
  end
end
local tail = redis.call('LINDEX', short, -1) or ''
if tail ~= ARGV[1] then return {0, tail, 0, 0, recounted} end
local tokens, rounds = 0, 0
if ARGV[2] == '1' then
  redis.call('RPOP', short)
  tokens = tokens - tonumber(ARGV[3])
  if ARGV[4] == '1' then rounds = rounds - 1 end
end
local items = {}
for i = 10, #ARGV, 3 do
  local id = redis.call('HINCRBY', meta, 'seq', 1)
  items[#items + 1] = '{"id":' .. id .. ',' .. string.sub(ARGV[i], 2)
  tokens = tokens + tonumber(ARGV[i + 1])
  if ARGV[i + 2] == '1' then rounds = rounds + 1 end
end
-- The counters first: should one fail, the list has not changed.
tokens = redis.call('HINCRBY', meta, 'tokens', tokens)
rounds = redis.call('HINCRBY', meta, 'rounds', rounds)
if #items > 0 then redis.call('RPUSH', short, unpack(items)) end
if update ~= '' then
  local seen = (redis.call('HGET', meta, 'updates') or ' ') .. update .. ' '
  if #seen > 640 then seen = string.sub(seen, string.find(seen, ' ', #seen - 600, true)) end
  redis.call('HSET', meta, 'updates', seen)
end
refresh(short, ARGV[5])
refresh(summary, ARGV[6])
refresh_meta(meta, short, summary, ARGV[5], ARGV[6], ARGV[7])
return {1, redis.call('LINDEX', short, -1) or '', tokens, rounds, recounted}
"""

#: KEYS: short, meta, summary.  ARGV: short ttl ms, long ttl ms, meta ttl ms, newest n (0 = all).
#: Returns {summary, "[item,item,...]", the whole list's tokens, recounted}: one JSON array, so the client
#: parses one reply and one document instead of one per message. Reading is activity: every TTL
#: is refreshed.
READ = _REFRESH + """
local short, meta, summary = KEYS[1], KEYS[2], KEYS[3]
local aside = set_aside_all(short, meta, summary, ARGV[2])
local recounted = math.max(aside, check_counters(short, meta))
local n = tonumber(ARGV[4])
local items
if n > 0 then items = redis.call('LRANGE', short, -n, -1) else items = redis.call('LRANGE', short, 0, -1) end
local text = redis.call('GET', summary) or ''
if #items > 0 then refresh(short, ARGV[1]) end
if text ~= '' then refresh(summary, ARGV[2]) end
if redis.call('EXISTS', meta) == 1 then refresh_meta(meta, short, summary, ARGV[1], ARGV[2], ARGV[3]) end
return {text, '[' .. table.concat(items, ',') .. ']', tonumber(redis.call('HGET', meta, 'tokens')) or 0, recounted}
"""

#: KEYS: short, meta, summary, lock.
#: ARGV: lease token, summary read, new summary, n, tokens of the n, rounds of the n,
#:       short ttl ms, long ttl ms, meta ttl ms, then the n raw items that were read.
#: Folds the first n items into the summary only if the lease is still ours, the summary is
#: unchanged and the list still starts with exactly those n items (the optimistic check).
#: Returns {1, tokens left, rounds left, recounted}, or {-1} lease lost, {-2} summary changed, {-3} list changed.
COMMIT = _REFRESH + """
local short, meta, summary, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('GET', lock) ~= ARGV[1] then return {-1} end
if set_aside(summary, 'string', ARGV[8]) > 0 or (redis.call('GET', summary) or '') ~= ARGV[2] then return {-2} end
local n = tonumber(ARGV[4])
local head = redis.call('LRANGE', short, 0, n - 1)
if #head ~= n then return {-3} end
for i = 1, n do
  if head[i] ~= ARGV[9 + i] then return {-3} end
end
local recounted = math.max(set_aside(meta, 'hash', ARGV[8]), check_counters(short, meta))
-- The counters, then the summary, then the trim: Redis keeps a script's writes made before a
-- command that fails, and the folded items must never leave the list before the summary holds them.
-- The list's expiry first: a write Redis takes when its memory is full (a compaction frees memory),
-- after which it lets the script's other writes run.
refresh(short, ARGV[7])
local tokens = redis.call('HINCRBY', meta, 'tokens', -tonumber(ARGV[5]))
local rounds = redis.call('HINCRBY', meta, 'rounds', -tonumber(ARGV[6]))
redis.call('HINCRBY', meta, 'compacted', n)
if ARGV[3] == '' then
  redis.call('DEL', summary)
else
  redis.call('SET', summary, ARGV[3])
  refresh(summary, ARGV[8])
end
redis.call('LTRIM', short, n, -1)
refresh_meta(meta, short, summary, ARGV[7], ARGV[8], ARGV[9])
return {1, tokens, rounds, recounted}
"""

#: KEYS: lock.  ARGV: token, lease ms.  Extends the lease only if it is still ours.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

#: KEYS: lock.  ARGV: lease ms.  Gives a lock key without an expiry one, in one step (every lease
#: is set with one; a key without is stale, and a lease taken meanwhile keeps its own).
EXPIRE_IF_NONE = """
if redis.call('PTTL', KEYS[1]) == -1 then return redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 0
"""

#: KEYS: lock.  ARGV: token.  Releases the lease only if it is still ours.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
