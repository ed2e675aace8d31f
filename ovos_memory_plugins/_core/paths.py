"""Default file locations (always under the XDG data directory, never the current directory), and
how store files and folders are made: private to their owner, whatever the umask.

Conversations are private: every store file the package creates is ``0600`` and every folder it
creates ``0700``. SQLite gives its ``-wal``, ``-shm`` and ``-journal`` files the mode of the
database file, so creating that one private is enough. What already exists keeps its mode: a
folder the user made (``~/.local/share``) is theirs to set, as is a store file they opened up.
A store file another user made in a folder every user may write (``/tmp``) is refused.
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "MEMORY_PATH", "PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "check_store_path", "create_private_file", "data_dir",
    "default_name", "default_path", "files_in", "is_memory_path", "is_regular_file", "make_private_dirs",
    "quarantine_file", "resolve_path", "set_aside_copies", "set_aside_reported", "warn_set_aside_copies",
]

#: The special path meaning "keep it in RAM" (as SQLite spells it).
MEMORY_PATH = ":memory:"
#: The mode of every file and folder the package creates.
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


_FOLDER: contextvars.ContextVar[str | None] = contextvars.ContextVar("ovos_memory_data_dir", default=None)


def data_dir() -> Path:
    """``$XDG_DATA_HOME/ovos`` (``~/.local/share/ovos`` when unset), or the folder of the
    :func:`files_in` block around the call. Not created here."""
    folder = _FOLDER.get()
    if folder is not None:
        return Path(folder)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "ovos"


@contextlib.contextmanager
def files_in(folder: str | None) -> Iterator[None]:
    """Stores built in the block put their default files, and anchor their relative paths, in
    ``folder`` (an absolute path; None: the usual data directory). A composite's ``data_dir``."""
    token = _FOLDER.set(folder if folder is None else resolve_path(folder, folder=True))
    try:
        yield
    finally:
        _FOLDER.reset(token)


def default_path(filename: str) -> str:
    """The default location of a store file named ``filename``."""
    return str(data_dir() / filename)


def default_name(cls: type, attribute: str, suffix: str = "") -> str:
    """The default file name of ``cls``'s store: the ``attribute`` the class itself declares, or
    one made from its module and name, so two different backends never share a default file
    (a subclass that declares nothing of its own does not inherit its parent's file).

        >>> class MyRetriever: pass
        >>> default_name(MyRetriever, "default_db_name", ".db")
        'ovos_memory_plugins_core_paths_MyRetriever.db'
    """
    declared = cls.__dict__.get(attribute)
    if declared:
        return str(declared)
    stem = "_".join(part for part in re.split(r"[^A-Za-z0-9]+", f"{cls.__module__}.{cls.__qualname__}") if part)
    return stem + suffix


def make_private_dirs(folder: str) -> None:
    """Create ``folder`` and its missing parents, each ``0700`` whatever the umask.

    Folders that exist keep their mode (the user's ``~/.local/share`` is theirs), including one
    another process creates at the same moment.
    """
    missing = []
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process (or not a folder: the next step says so)
        os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask


#: A disk that is full or failing (errno): it passes (room is made), as an outage does.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def cannot_create(path: str, exc: OSError) -> Exception:
    """The error for a store file that could not be created: ``StoreUnavailable`` when its disk is
    full or failing (the backend then waits for it, as for a server that is down), else a
    ``ConfigError`` (a folder that cannot be made or written: /proc, a read-only mount)."""
    from ..errors import ConfigError, StoreUnavailable

    kind = StoreUnavailable if exc.errno in DISK_ERRNOS else ConfigError
    return kind(f"cannot create the store file {path}: {exc.strerror or exc}")


def create_private_file(path: str) -> bool:
    """Create ``path`` empty and ``0600`` (whatever the umask) if nothing is there; True if it did.

    A file that holds something keeps its mode (a store an earlier version made, which its owner
    may have shared on purpose). An empty one becomes ``0600``: a conversation store starts in it
    (``touch memory.db`` under a umask of 022 left it, and the -wal and -shm SQLite makes with its
    mode, readable by every user). ``O_EXCL`` makes the creation atomic, so of two processes
    starting together one creates the file and the other uses it.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        _private_if_empty(path)
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # the open's mode went through the umask
    finally:
        os.close(fd)
    return True


def _private_if_empty(path: str) -> None:
    try:  # never through a link (its target is not ours; the link is refused), nor a FIFO's open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return  # a link, or not ours to open (another user's file): it is used as it is, as before
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size == 0 and info.st_mode & 0o077:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except OSError:
        pass  # not ours to change
    finally:
        os.close(fd)


#: Errors of a file system that may pass without a change of config.
_PASSING = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN})


def open_lock_file(path: str) -> int:
    """A descriptor of the lock file ``path``, created empty and ``0600`` if absent.

    Never through a symbolic link (its target would be created wherever it points) and never a
    FIFO or a device (opening one may block, or touch what is not ours): anything but a regular
    file at ``path`` is a :class:`StorageError`, and is left as it is.
    """
    from ..errors import StorageError, StoreUnavailable

    try:
        create_private_file(path)
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        kind = "symbolic link" if os.path.islink(path) else None
        # A read-only or full file system passes (a remount, a cleanup): the memory waits for it.
        error = StoreUnavailable if exc.errno in _PASSING and not kind else StorageError
        raise error(f"cannot open the lock file {path}: "
                    f"{f'it is a {kind}, not a file this store made' if kind else exc}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise StorageError(f"the lock file {path} is a {_kind(mode)}, not a file this store made; it was left as it is")
    return fd


def is_memory_path(path: str | None) -> bool:
    return path is None or path == MEMORY_PATH


def resolve_path(path: str, folder: bool = False) -> str:
    """Expand ``~`` and environment variables and make the path absolute.

    Relative paths are anchored to the data directory rather than the current working
    directory, so a service started from another folder finds the same store. A file's path
    (``folder`` False) ending in ``/`` names a folder: a ``ConfigError``, as it would otherwise
    become a file named after the folder (the data folder itself, for ``~/.local/share/ovos/``).
    """
    if is_memory_path(path):
        return MEMORY_PATH
    if not path.strip():
        # Anchored to the data directory, an empty path would name the directory itself.
        from ..errors import ConfigError

        raise ConfigError("a store path must not be empty (leave the key out for the default)")
    expanded = os.path.expandvars(os.path.expanduser(path))
    _check_expanded(path, expanded)
    if not folder and expanded.endswith(("/", os.sep)):
        from ..errors import ConfigError

        raise ConfigError(f"store path {path!r} ends with '/': it names a folder; name a file in it "
                          f"({path.rstrip('/' + os.sep) + '/memory.db'!r}, say)")
    if not os.path.isabs(expanded):
        expanded = str(data_dir() / expanded)
    return os.path.abspath(expanded)


#: ``$NAME`` or ``${NAME}``: what ``os.path.expandvars`` leaves as it is when NAME is not set.
_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")


def _check_expanded(path: str, expanded: str) -> None:
    """A path whose variable is not set, whose ``~user`` names nobody, or holding a control
    character (a newline pasted at its end) is a ``ConfigError``: used as it is, it would make
    a folder literally named ``$HOME`` or ``~bob``, or a file name with a newline in it."""
    from ..errors import ConfigError

    unset = [m.group(0) for m in _VARIABLE.finditer(expanded) if m.group(1).strip("{}") not in os.environ]
    if unset:
        raise ConfigError(f"store path {path!r} names the environment variable {unset[0]}, which is not set")
    if expanded.startswith("~"):
        raise ConfigError(f"store path {path!r}: there is no user {expanded.split(os.sep, 1)[0]!r}")
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        raise ConfigError(f"store path {path!r} holds a control character (a newline or a tab?)")
    if path != path.strip():  # pasted with a space: " ~/x.db" would make a folder named " ~"
        raise ConfigError(f"store path {path!r} starts or ends with a space")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def check_store_path(path: str) -> str:
    """``path`` with symbolic links resolved, if it is a regular file or does not exist yet.

    A store renames and replaces its file (atomic writes, quarantine) and creates companions
    beside it (``-wal``, ``.lock``): done to ``/dev/null``, a FIFO or a directory, that would
    destroy something that is not ours (as root, the machine's ``/dev/null``). Such a path is a
    ``ConfigError`` before anything is opened, read or created. Links are resolved so that an
    atomic replace writes the file the link points to, and leaves the link in place.
    """
    from ..errors import ConfigError

    real = os.path.realpath(path)
    for companion in _COMPANIONS:  # SQLite would block on a FIFO there, or delete it
        for base in {path, real}:
            _check_companion(path, base + companion)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise ConfigError(f"cannot use store path {path!r}: {exc}") from exc
    if not stat.S_ISREG(mode):
        raise ConfigError(f"store path {path!r} is a {_kind(mode)}, not a regular file; name a file (or leave "
                          "db_path out for the default, or use ':memory:' to keep nothing on disk)")
    _refuse_planted(path, real)
    return real


def _refuse_planted(path: str, real: str) -> None:
    """Refuse a store file (or a companion) another user owns in a folder every user may write
    (``/tmp``): anyone can make one there before the store starts, and would then read every
    conversation written to it. A file of another user elsewhere (root running on a user's own
    folder) is theirs to share."""
    from ..errors import ConfigError

    try:
        if not os.stat(os.path.dirname(real) or ".").st_mode & stat.S_IWOTH:
            return
    except OSError:
        return
    for name in (real, *(real + c for c in _COMPANIONS)):
        try:
            owner = os.stat(name).st_uid
        except OSError:
            continue
        if owner != os.geteuid():
            raise ConfigError(f"store path {path!r}: {name!r} belongs to another user (uid {owner}) in a folder "
                              "every user may write: they could read what is stored there; remove it, or name a "
                              "db_path in a private folder")


#: The files SQLite keeps beside a database (the JSON stores check their lock file themselves).
_COMPANIONS = ("-wal", "-shm", "-journal")


def _check_companion(path: str, companion: str) -> None:
    from ..errors import ConfigError

    try:
        mode = os.lstat(companion).st_mode
    except OSError:
        return  # none: it is created
    if not stat.S_ISREG(mode):  # a link too: SQLite would remove it, or write where it points
        raise ConfigError(f"store path {path!r}: {companion!r} beside it is a {_kind(mode)}, not a regular file; "
                          "the store keeps its own file there: remove it, or name another db_path")


def is_regular_file(path: str) -> bool:
    """True for an existing regular file, without following a symbolic link."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def quarantine_file(path: str, companions: tuple[str, ...] = (), json_store: bool = False,
                    records: Callable[[Any], bool] | None = None) -> str:
    """Move a damaged store file aside and return where it went.

    The first quarantine of ``path`` is ``<path>.corrupt`` (as the reference names it); when that name is taken
    by an earlier one, ``<path>.corrupt-<time>`` (``-<n>`` added if needed), so no quarantined
    copy is ever overwritten. Each existing ``path + suffix`` in ``companions`` (SQLite's
    ``-wal`` and ``-shm``) moves along to ``target + suffix``: it belongs to the bad file.
    Only regular files are ever moved: anything else is a StorageError, and stays where it is.
    A file that was never a store (:func:`foreign_content`) is a ConfigError, and stays too.
    """
    from ..errors import StorageError

    if not is_regular_file(path):
        raise StorageError(f"{path} is not a regular file: it is not moved aside")
    refuse_foreign_file(path, json_store, records)
    target, n = f"{path}.corrupt", 0
    while _taken(target, companions):
        n += 1
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = f"{path}.corrupt-{stamp}" if n == 1 else f"{path}.corrupt-{stamp}-{n - 1}"
    # The journals first: a crash between two renames must not leave the old journal beside the
    # path, where the new store's first open would take it for its own and discard it.
    for suffix in companions:
        if is_regular_file(path + suffix):
            os.replace(path + suffix, target + suffix)
    os.replace(path, target)
    return target


#: Enough of a file to tell text from a store's bytes.
_SNIFF_BYTES = 4096
#: The first bytes of every SQLite database.
SQLITE_HEADER = b"SQLite format 3\x00"
#: Bytes text has among the control bytes (tab, line feed, form feed, carriage return).
_TEXT_CONTROLS = frozenset(b"\t\n\x0c\r")


#: The first bytes of files people keep that a typo in ``db_path`` may name.
_KNOWN_FORMATS = (
    (b"\x1f\x8b", "a gzip archive"), (b"\x7fELF", "a program"), (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"), (b"PK\x03\x04", "a zip archive"), (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"), (b"(\xb5/\xfd", "a zstd archive"), (b"7z\xbc\xaf'\x1c", "a 7z archive"),
    (b"%PDF", "a PDF document"), (b"MZ", "a program"),
)
#: A line only a configuration file's JSON has (JSON with comments, as OVOS's mycroft.conf).
_COMMENT_LINE = re.compile(rb"^[ \t]*(//|/\*)", re.MULTILINE)


def foreign_content(path: str, json_store: bool = False, records: Callable[[Any], bool] | None = None) -> str | None:
    """Why the file at ``path`` is someone else's rather than a damaged store of this kind, else None.

    A damaged store is set aside and replaced; a file that never was one (``/etc/passwd``, a
    script, notes, YAML, a picture, an archive, another kind of store) must be left alone, and
    the two are told apart by what the package writes. A SQLite file is binary from its first
    byte, so any text is not one, and binary data is one only with SQLite's header or its pages'
    structure (a damaged header); a JSON store is an object written
    without comments, so text not starting with ``{`` or ``[``, or holding a comment line, was
    never one, nor is a SQLite database; nor is text that is JSON once comments, commas before a
    closing bracket and single quotes are allowed (a configuration file), unless ``records`` says
    what it holds are a store's records (a byte of a store turned into a comma, a hand edit).
    A file of zeros (a crash's unwritten blocks) is damage.
    An empty or blank file is nothing to keep.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return None
    if head.startswith(SQLITE_HEADER):
        return "it is an SQLite database, not a JSON store" if json_store else None
    known = next((name for magic, name in _KNOWN_FORMATS if head.startswith(magic)), None)
    if known is not None:
        return f"it is {known}"
    utf16 = _utf16_text(head)
    if utf16 is not None:  # the package writes UTF-8 only: text in UTF-16 was never its store
        return "it holds UTF-16 text, which no store of this package does" if utf16.strip("\ufeff \t\r\n") else None
    # Text in any 8-bit encoding (UTF-8, Latin-1) has no control byte but whitespace; damage does.
    binary = any(b < 32 and b not in _TEXT_CONTROLS for b in head) or \
        (not _utf8(head) and any(0x7F <= b < 0xA0 for b in head))  # C1 controls: not Latin-1 text
    shown = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if binary:
        if not head.strip(b"\x00") or (_sqlite_pages(path) if not json_store else shown[:1] == b"{"):
            return None
        return "it holds binary data, not a JSON object" if json_store else \
            "it holds binary data that is not an SQLite database"
    if not shown:
        return None
    if json_store and shown[:1] == b"[":  # a store is one object: a list (a data export, say) never was one
        return "it holds a JSON list, not the JSON object a store is"
    if json_store and shown[:1] == b"{":
        if _COMMENT_LINE.search(head):
            return "it holds JSON with comments, as a configuration file does"
        relaxed = _relaxed_json(path)
        if relaxed is None or (records is not None and records(relaxed)):
            return None  # damage
        return "it holds JSON with comments or trailing commas, as a configuration file does"
    return "it holds text that is not a JSON object" if json_store else "it holds text, which no SQLite store does"


#: The most of a file read (in characters) to tell a configuration file from a damaged store.
_RELAXED_MAX_BYTES = 1 << 20
#: A string (double or single quoted; one left open runs to the line's end), a comment (one left
#: open, to the text's end), or a comma before a closing bracket. Each token is read once, so one
#: pass over any text is linear (a cut store's open string is not read again from each quote).
_RELAXED_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|\'(?:[^\'\\\n]|\\.)*\'?|//[^\n]*|/\*(?:.*?\*/|.*\Z)|,(?=\s*[}\]])',
                            re.DOTALL)


def _relaxed_json(path: str) -> dict[str, Any] | None:
    """The object in the file at ``path`` when it is not JSON but is once comments, commas before a
    closing bracket and single quotes are allowed (JSON5, VS Code's settings, mycroft.conf), else
    None. The package writes strict JSON; a cut store never reads so."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read(_RELAXED_MAX_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        return None
    if len(text) > _RELAXED_MAX_BYTES:
        return None
    try:
        json.loads(text)
        return None  # strict JSON: a store, or refused for what it holds
    except (ValueError, RecursionError):
        pass

    def strict(match: re.Match[str]) -> str:
        token = match.group()
        if token[0] not in "\"'":
            return ""  # a comment, or a comma before a closing bracket
        if len(token) < 2 or token[-1] != token[0]:
            return token  # a string left open: the text stays invalid
        return json.dumps(token[1:-1].replace("\\'", "'")) if token[0] == "'" else token

    try:
        data = json.loads(_RELAXED_TOKEN.sub(strict, text))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


#: The first byte of a b-tree page only.
_BTREE_KINDS = frozenset(b"\x02\x05\x0a\x0d")


def _sqlite_pages(path: str) -> bool:
    """Whether a file without SQLite's header still has its pages: whole pages of one size, and
    page 1's b-tree header just after the 100 header bytes (its cell pointers inside it), or,
    when page 1 itself is lost (zeroed, overwritten), three b-tree pages in a row whose headers
    make sense (cell count and content start inside the page). Random bytes, an array of
    numbers or an encrypted file pass one time in thousands; a damaged store with pages left,
    always."""
    try:
        with open(path, "rb") as f:
            data = f.read(4 * 65536 + 1)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    sizes = [n for n in (512 << k for k in range(8)) if size >= n]
    if len(data) > 100 and any(_page_one(data, n, size % n == 0) for n in sizes):
        return True
    return any(len(data) >= 4 * n and all(_btree_header(data, k * n, n) for k in (1, 2, 3)) for n in sizes)


def _page_one(data: bytes, size: int, whole_pages: bool) -> bool:
    """Whether page 1 of a ``size``-byte page holds the schema's b-tree header after the 100
    header bytes: a table page, its cells' pointers all inside the page's content area. With no
    cell (a store whose schema is still in its ``-wal``, as after a crash before a checkpoint),
    an empty page, and the file whole pages: a size no page size divides was never a database
    (a catalogue, a time zone, a cursor file), whatever its bytes look like."""
    kind = data[100]
    if kind not in (0x05, 0x0D):
        return False
    header = 12 if kind == 0x05 else 8
    cells = int.from_bytes(data[103:105], "big")
    start = int.from_bytes(data[105:107], "big") or 65536
    if cells == 0:
        return whole_pages and kind == 0x0D and start == size and not any(data[101:103])
    if not (100 + header + 2 * cells <= start <= size and len(data) >= 100 + header + 2 * cells):
        return False
    pointers = (int.from_bytes(data[100 + header + 2 * i:102 + header + 2 * i], "big") for i in range(cells))
    return all(start <= p < size for p in pointers)


def _btree_header(data: bytes, at: int, size: int) -> bool:
    """Whether ``data[at:]`` opens a b-tree page of ``size`` bytes: its kind, then a cell count
    whose pointers fit the page and a content area starting inside it, after the header."""
    kind = data[at]
    if kind not in _BTREE_KINDS:
        return False
    header = 12 if kind in (0x02, 0x05) else 8
    cells = int.from_bytes(data[at + 3:at + 5], "big")
    start = int.from_bytes(data[at + 5:at + 7], "big") or 65536
    return cells > 0 and header + 2 * cells <= start <= size


def _utf16_text(data: bytes) -> str | None:
    """The text of UTF-16 with its byte order mark (Windows' "Unicode" text files), else None:
    its zero bytes would otherwise read as damage."""
    if not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None
    text = data[: len(data) // 2 * 2].decode("utf-16", errors="replace")
    readable = "\ufffd" not in text[:-1] and not any(ord(c) < 32 and c not in "\t\n\x0c\r" for c in text)
    return text if readable else None


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3  # only a character cut by the sniff's end
    return True


def refuse_foreign_file(path: str, json_store: bool = False, records: Callable[[Any], bool] | None = None) -> None:
    """A ConfigError naming ``path`` if it is someone else's file (:func:`foreign_content`):
    checked before a store makes anything beside it, and again before it sets a file aside."""
    why = foreign_content(path, json_store, records)
    if why is not None:
        from ..errors import ConfigError

        raise ConfigError(f"{path} is not a memory store ({why}); it was left as it is: name a file of its own "
                          "in db_path")


def _taken(target: str, companions: tuple[str, ...]) -> bool:
    return any(os.path.exists(target + suffix) for suffix in ("", *companions))


def set_aside_copies(path: str) -> list[str]:
    """The damaged copies of ``path`` that :func:`quarantine_file` moved aside (with their journals)."""
    folder, base = os.path.split(os.path.abspath(path))
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    first = base + ".corrupt"
    return sorted(os.path.join(folder, n) for n in names
                  if (n == first or n.startswith(first + "-")) and is_regular_file(os.path.join(folder, n)))


_set_aside_warned: dict[str, float] = {}
_set_aside_sink: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("set_aside_sink", default=None)


@contextlib.contextmanager
def set_aside_reported() -> Iterator[list[str]]:
    """Collect the damaged copies the forgets inside the block cannot reach (in this thread): for a
    caller that answers someone who never sees the log (the web page)."""
    copies: list[str] = []
    token = _set_aside_sink.set(copies)
    try:
        yield copies
    finally:
        _set_aside_sink.reset(token)


def warn_set_aside_copies(path: str) -> None:
    """Before a forget: say which damaged copies it cannot reach.

    A copy set aside holds what the store held when it was damaged, the forgotten session
    included; it is the user's to recover from, so a forget never deletes it (that would lose
    every other session in it) but must not let them think no byte is left.
    """
    copies = set_aside_copies(path)
    sink = _set_aside_sink.get()
    if sink is not None:
        sink.extend(c for c in copies if c not in sink)
    now = time.monotonic()
    if copies and now - _set_aside_warned.get(path, -60.0) >= 10.0:  # once for the members sharing a file
        _set_aside_warned[path] = now
        from .log import LOG

        # An ERROR: the forget asked for is not complete, and commands show errors only.
        LOG.error(f"memory store {path}: forgotten here, but {len(copies)} damaged cop"
                  f"{'y' if len(copies) == 1 else 'ies'} set aside earlier may still hold it: "
                  f"{', '.join(copies)}; recover what you need from them, then delete them (rm)")
