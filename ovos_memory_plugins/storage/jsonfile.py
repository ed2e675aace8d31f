"""A JSON file of ``{session_id: record}``, the reference package's format, made safe.

* Every write is atomic: a temp file in the same folder, fsync, ``os.replace``, fsync of the
  folder. A crash leaves the old file or the new one, never half of one.
* Read-modify-write holds an exclusive ``flock`` on ``<file>.lock``, so several processes
  (two satellites, one file) never lose each other's updates.
* The parsed file is cached and read again only when it changed on disk (another inode,
  size or mtime: every write is a rename, so any other writer's change is seen). A read takes
  no lock: every write is a rename, so the file on disk is always a whole one, and a turn
  never waits for another thread's or process's read-modify-write and fsync. Only a file that
  does not parse takes the lock, to look again and quarantine it.
* A file that does not parse is moved aside to ``<file>.corrupt`` (``<file>.corrupt-<time>``
  when an earlier quarantine holds that name: none is ever overwritten) with an ERROR naming
  both paths, and the store starts empty: the bad bytes stay on disk for the user to inspect.

Each save costs O(file size). Prefer the SQLite store beyond a few hundred sessions.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._core.log import LOG
from .._core.paths import (
    DISK_ERRNOS,
    PRIVATE_FILE_MODE,
    cannot_create,
    check_store_path,
    is_regular_file,
    make_private_dirs,
    open_lock_file,
    quarantine_file,
    refuse_foreign_file,
    warn_set_aside_copies,
)
from ..errors import ConfigError, StorageError, StoreUnavailable
from .readonly import StoreReadOnly, is_read_only
from .records import as_record

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: thread safety only
    fcntl = None  # type: ignore[assignment]

__all__ = ["JsonRecordStore", "MemoryJsonStore"]

#: Keys of a persona file (a memory store's keys are session ids, whose values are records).
PERSONA_KEYS = ("memory_module", "solvers", "handlers")
#: The random part of the temp file names ``tempfile.mkstemp`` makes.
_TEMP_RANDOM = 8
#: Between the store's name and that random part: ``memory.json.ovos-write-k3y9qz1x.tmp``. A name
#: of our own, so that a user's ``notes.json.draft001.tmp`` is never taken for a crashed write.
_TEMP_TAG = ".ovos-write-"
#: How long a writer waits for another process holding the store's lock before giving up (as
#: SQLite's busy timeout): a stuck process must not hang every caller for ever.
LOCK_TIMEOUT_S = 30.0


class JsonRecordStore:
    #: The fields one of a memory's records names (None: any object is a record, as for the
    #: reference's general-purpose ``persistence.JsonStore``).
    record_fields: frozenset[str] | None = None

    def __init__(self, path: str):
        self.path = check_store_path(path)
        self._lock = threading.RLock()
        self._cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None  # (file signature, data)
        #: Opened by a command that only looks (storage.readonly): read without a lock, never written.
        self.read_only = is_read_only()
        if os.path.exists(self.path):  # before any lock file is made: a file that is no store stays as it is
            refuse_foreign_file(self.path, json_store=True, records=self._holds_store_records)
            try:
                self._check_at_open(self._read(quarantine=False))
            except StorageError:
                if self.read_only:
                    raise  # damaged: a read-only command reports it, the next writer quarantines it
        if self.read_only:
            return
        try:
            make_private_dirs(os.path.dirname(self.path) or ".")
            with self._locked():
                self._remove_crash_leftovers()
                if not os.path.exists(self.path):
                    self._write({})
        except OSError as exc:
            raise cannot_create(self.path, exc) from exc

    def load(self, session_id: str) -> dict[str, Any]:
        return _copy(self._record(self._current(), session_id))

    def load_field(self, session_id: str, field: str) -> Any:
        """A copy of one field of the record (None if absent): cheap when the rest is large."""
        return _copy(self._record(self._current(), session_id).get(field))

    def save(self, session_id: str, record: dict[str, Any]) -> None:
        self.update(session_id, lambda _old: record)

    def update(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        with self._locked():
            data = dict(self._read())  # the cached dict stays as on disk if the write fails
            self._still_a_store(data)
            record = fn(_copy(self._record(data, session_id)))
            data[session_id] = record
            self._write(data)
            return record

    def sessions(self) -> list[str]:
        return sorted(self._current())  # every write is a rename: the file read is a whole one

    def delete(self, session_id: str) -> bool:
        with self._locked():
            self._remove_crash_leftovers()  # a forget leaves no copy of the session behind
            data = dict(self._read())
            self._still_a_store(data)
            found = session_id in data
            if found:
                del data[session_id]
                self._write(data)
        # Only a forget deletes; also when the session is not in the file (any more): a copy set
        # aside when the file was found damaged may be all that holds it.
        warn_set_aside_copies(self.path)
        return found

    def compact(self) -> bool:
        """Every write is a new file, the old one's bytes leave with it; what a crashed write left
        beside it (a temp file holding every session) goes too."""
        warn_set_aside_copies(self.path)
        with self._locked():
            self._remove_crash_leftovers()
        return True

    def _remove_crash_leftovers(self) -> None:
        """Delete the temp files of writes that never reached their rename (a process killed in
        between): each holds a whole copy of the store. Only under the lock, which every writer
        holds until its rename, so no live write's file is taken; only our own regular files
        named as ``_write`` names them."""
        if fcntl is None or self.read_only:  # without the lock another process may be writing one
            return
        folder, base = os.path.dirname(self.path) or ".", os.path.basename(self.path)
        try:
            names = [n for n in os.listdir(folder) if n.endswith(".tmp") and _crashed_write_name(base, n)]
        except OSError:
            return
        for name in names:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and \
                        (name.startswith(base + _TEMP_TAG) or self._holds_records(path)):
                    os.unlink(path)
                    LOG.info(f"memory store {self.path}: removed {name}, left by a write that never finished")

    def _holds_records(self, path: str) -> bool:
        """Whether the file at ``path`` is a copy of a store (version 1.3.0 named its temp files
        without :data:`_TEMP_TAG`: one of those is taken only when it holds a store's records)."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return False
        return self._holds_store_records(data)

    def _holds_store_records(self, data: Any) -> bool:
        """Whether ``data`` (an object read from a file) holds a store's records: each value an
        object or a list, one of them naming a field a memory writes (any, for a store of any
        records) or a window's messages. A user's ``{"title": "notes", "tags": ["work"]}`` does not."""
        if not isinstance(data, dict) or not data or not all(isinstance(v, (dict, list)) for v in data.values()):
            return False
        fields = self.record_fields or RECORD_FIELDS
        return any(v and (_looks_like_a_record(v, fields) or all(isinstance(m, dict) and "role" in m for m in v))
                   for v in data.values())

    def close(self) -> None:
        pass

    def _check_at_open(self, data: dict[str, Any]) -> None:
        """A ConfigError if the file (its ``data``) is not a store this one may use: checked before
        anything, a lock file included, is made beside it."""
        self._check_is_store(data, self.record_fields)

    def _check_is_store(self, data: dict[str, Any], fields: frozenset[str] | None = None) -> None:
        """A JSON file that is not a store, given by mistake, is refused, never used, rewritten or
        moved aside: an export (``ovos-memory export`` writes ``{"plugin": name, ...}``), a persona
        file (a store's keys are session ids; a record damaged by hand, whatever its shape, still
        loads, and costs that session only)."""
        if isinstance(data.get("plugin"), str):
            raise ConfigError(f"{self.path} is an export of {data['plugin']!r}, not a memory store (load it with "
                              "'ovos-memory import'); it was left as it is")
        persona = [key for key in PERSONA_KEYS if key in data and not isinstance(data[key], dict)]
        if persona:
            raise ConfigError(f"{self.path} is a persona file (its {persona[0]!r}), not a memory store; it was "
                              "left as it is: name a file of its own in db_path")
        if data and not _holds_a_record(data, fields):
            # Settings ({"volume": 3}, mycroft.conf's sections): a store's values are records, and
            # every record names a field a memory writes; one damaged by hand costs its session,
            # but a file with no record at all was never a store, and is not rewritten.
            key = next((k for k, v in data.items() if not isinstance(v, (dict, list))), next(iter(data)))
            raise ConfigError(f"{self.path} holds no memory record (its {key!r} is not one): it is not a memory "
                              "store; it was left as it is: name a file of its own in db_path")

    def _still_a_store(self, data: dict[str, Any]) -> None:
        """Before a write: a file replaced since it opened by one that is not a store (a persona
        file, an export) is someone's, and is not written into."""
        try:
            self._check_is_store(data)
        except ConfigError as refused:
            raise StorageError(str(refused)) from None

    def _record(self, data: dict[str, Any], session_id: str) -> dict[str, Any]:
        return as_record(data.get(session_id, {}), session_id, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if fcntl is None or self.read_only:  # every write is a rename: a reader needs no lock
                yield
                return
            fd = open_lock_file(self.path + ".lock")
            try:
                self._wait_for_lock(fd)
                try:
                    yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _wait_for_lock(self, fd: int) -> None:
        deadline, pause = time.monotonic() + LOCK_TIMEOUT_S, 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreUnavailable(f"memory store {self.path} is locked by another process "
                                           f"(waited {LOCK_TIMEOUT_S:g} s)") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.005)  # a waiting writer goes on within ~5 ms of the release

    def _current(self) -> dict[str, Any]:
        """The parsed file for a read, without waiting for a writer.

        Every write is a rename, so the file on disk is always a whole one: it is read without
        the lock (from the cache when that still matches it), and a turn never waits for a
        background write's fsync. Only a missing or unparsable file takes the lock, to look
        again and quarantine it.
        """
        cache = self._cache
        with contextlib.suppress(OSError):
            if cache is not None and cache[0] == _signature(os.stat(self.path)):
                return cache[1]
        with contextlib.suppress(OSError, ValueError, RecursionError):
            return self._parse()
        with self._locked():
            return self._read()

    def _parse(self) -> dict[str, Any]:
        """The whole file, parsed (the cache when it matches the file); raises when it does not parse."""
        with open(self.path, "rb") as f:
            signature = _signature(os.fstat(f.fileno()))
            cache = self._cache
            if cache is not None and cache[0] == signature:
                return cache[1]
            # Bytes that are not UTF-8 inside a string (bit rot) read as U+FFFD: a few flipped
            # bytes of text must not cost every session; broken structure still quarantines.
            data = json.loads(f.read().decode("utf-8", "replace"))
        if not isinstance(data, dict):
            raise ValueError(f"top level is a {type(data).__name__}, not an object")
        self._cache = (signature, data)
        return data

    def _read(self, quarantine: bool = True) -> dict[str, Any]:
        """The whole file, parsed; callers must not modify it (it is the cache). A file that does
        not parse is quarantined, or with ``quarantine`` False (and read-only) a StorageError."""
        try:
            return self._parse()
        except FileNotFoundError:
            return {}
        except (ValueError, RecursionError) as exc:
            # RecursionError: nesting deeper than the parser's stack (a hostile or broken file)
            reason = exc if not isinstance(exc, RecursionError) else ValueError("nested too deeply")
            if self.read_only or not quarantine:
                raise StorageError(f"{self.path} is not a JSON memory store ({reason}); it was left as it is") from None
            self._quarantine(reason)
            return {}
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc

    def _quarantine(self, exc: Exception) -> None:
        try:
            target = quarantine_file(self.path, json_store=True, records=self._holds_store_records)
        except ConfigError as refused:  # replaced by someone's file since it opened: the store failed
            raise StorageError(str(refused)) from None
        self._cache = None
        LOG.error(f"memory store {self.path} is corrupt ({exc}); moved it to {target} and started empty")
        self._write({})

    def _write(self, data: dict[str, Any]) -> None:
        if self.read_only:
            raise StoreReadOnly(f"{self.path} was opened read-only")
        if os.path.lexists(self.path) and not is_regular_file(self.path):  # replaced by something else since
            raise StorageError(f"{self.path} is no longer a regular file; it is not replaced")
        folder = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(self.path) + _TEMP_TAG, suffix=".tmp")
        try:
            _keep_access(fd, self.path)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False, indent=2)
                f.flush()
                os.fsync(f.fileno())
                signature = _signature(os.fstat(f.fileno()))  # rename keeps inode, size and mtime
            os.replace(tmp, self.path)
            self._cache = (signature, data)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):  # a full disk passes: unavailable for now, as a server that is down
                kind = StoreUnavailable if exc.errno in DISK_ERRNOS else StorageError
                raise kind(f"cannot write {self.path}: {exc}") from exc
            raise
        _fsync_dir(folder)


#: The fields of the records the memories keep in JSON (the reference's and this package's).
RECORD_FIELDS = frozenset({
    "buffer", "facts", "meta", "history", "pending", "summary", "recent", "exchange_count", "summary_state",
    "summary_rejections", "summary_source", "due_since", "updated_at",
})


def _crashed_write_name(base: str, name: str) -> bool:
    """Whether ``name`` is named as a write of the store ``base`` names its temp file (or as
    version 1.3.0 named it: ``base.<random>.tmp``)."""
    for prefix in (base + _TEMP_TAG, base + "."):
        if name.startswith(prefix) and len(name) == len(prefix) + _TEMP_RANDOM + 4:
            return True
    return False


def _holds_a_record(data: dict[str, Any], fields: frozenset[str] | None) -> bool:
    """Whether ``data`` holds a session's record: one naming a field, or only emptied ones (a
    store whose records were all emptied). An empty object beside settings is a setting
    (``{"editor.fontSize": 14, "files.exclude": {}}``)."""
    values = list(data.values())
    if any(_looks_like_a_record(value, fields) and value for value in values):
        return True
    return all(isinstance(value, (dict, list)) and not value for value in values)


def _looks_like_a_record(value: Any, fields: frozenset[str] | None) -> bool:
    """A session's record: an object naming one of ``fields`` (or none at all: emptied); with no
    ``fields``, any object or list."""
    if fields is None:
        return isinstance(value, (dict, list))
    return isinstance(value, dict) and (not value or not fields.isdisjoint(value))


#: Whose records a file holds, by the fields only that kind writes: two kinds in one file would
#: read each other's records as damaged, and one's forget would delete the other's.
RECORD_KINDS: dict[str, frozenset[str]] = {
    "a window": frozenset({"buffer"}),
    "facts": frozenset({"facts", "pending", "meta", "history"}),
    "a summary": frozenset({"summary", "recent", "exchange_count", "summary_state"}),
}


class MemoryJsonStore(JsonRecordStore):
    """The JSON store of this package's memories: a file none of whose objects is a memory's
    record (a configuration file such as mycroft.conf) is someone else's, and left alone; with
    ``kind`` (a key of :data:`RECORD_KINDS`), so is a file holding another kind's records."""

    record_fields = RECORD_FIELDS

    def __init__(self, path: str, kind: str | None = None):
        self._kind = kind
        super().__init__(path)

    def _check_at_open(self, data: dict[str, Any]) -> None:
        super()._check_at_open(data)
        if self._kind is not None:
            self._check_kind(self._kind, data)

    def _check_kind(self, kind: str, data: dict[str, Any]) -> None:
        own = RECORD_KINDS[kind]
        for other, fields in RECORD_KINDS.items():
            if other == kind:
                continue
            theirs = next((sid for sid, record in data.items()
                           if isinstance(record, dict) and not fields.isdisjoint(record) and own.isdisjoint(record)),
                          None)
            if theirs is not None:
                raise ConfigError(f"{self.path} holds another memory's {other} (session {theirs!r}), not {kind}: "
                                  "two memories in one file would read, and forget, each other's; it was left as "
                                  "it is: name a file of its own in db_path")


def _keep_access(fd: int, path: str) -> None:
    """Give the new file the access of the one it replaces when its owner opened it to a group
    (0640, 0660: a store shared by a service's group keeps that, as a SQLite store does) and the
    group can be kept; anything else, a new store included, is private (0600). Bits for others
    are never kept: a file made world-readable by a umask was never meant to be."""
    try:
        old = os.stat(path)
    except OSError:
        old = None
    mode = stat.S_IMODE(old.st_mode) if old is not None else 0
    if old is None or mode & 0o007 or not mode & 0o070:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # mkstemp's 0600 went through the umask
        return
    try:
        if old.st_gid != os.fstat(fd).st_gid:
            os.fchown(fd, -1, old.st_gid)  # only a member of the group (or root) may give it
    except OSError:
        mode &= ~0o070  # the group could not be kept: another group must not get its access
    os.fchmod(fd, mode & 0o770)


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def _copy(record: Any) -> Any:
    # Records are JSON by construction; a JSON round trip copies them faster than deepcopy.
    return json.loads(json.dumps(record))


def _fsync_dir(folder: str) -> None:
    # The rename is durable only once the directory entry is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
