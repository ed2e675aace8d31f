"""Output and errors of the ``ovos-memory`` command: rich consoles, one-line failures, logs on stderr."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from .._core.log import LOG
from .._core.paths import PRIVATE_FILE_MODE

__all__ = ["EXIT_ENDPOINT", "EXIT_ERROR", "EXIT_INPUT", "EXIT_NO_SESSION", "UI", "CLIError", "Text", "count_items",
           "escape", "logs_to_stderr", "printable", "private_stdout"]

EXIT_ERROR, EXIT_INPUT, EXIT_ENDPOINT, EXIT_NO_SESSION = 1, 2, 3, 4


class CLIError(Exception):
    """A failure reported as one line, with its exit status."""

    def __init__(self, message: str, code: int = EXIT_INPUT):
        super().__init__(message)
        self.code = code


# -- output ----------------------------------------------------------------------------------
#: What a terminal reads as a command, not text: C0 and C1 controls (ESC starts colour, title and
#: screen-clearing sequences) and the marks that reorder text on screen (bidirectional overrides).
_CONTROL_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[{_CONTROL_CHARS}]")
# In an id, also what prints as nothing (zero-width spaces and joiners, direction marks, a soft
# hyphen): "person\u200b:alice" must not look like Alice's "person:alice". Text keeps them (an
# emoji's joiner).
_INVISIBLE = ("\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u2060-\u2064\u3164\ufe00-\ufe0f\ufeff\uffa0"
              "\U000e0000-\U000e007f")
_LINE_BREAKS = re.compile(f"[\t\n{_CONTROL_CHARS}{_INVISIBLE}]")  # and the tab and newline a text may hold


def printable(text: str, lines: bool = True) -> str:
    """``text`` safe to print on a terminal: each control character written as its escape
    (``\x1b``), as Python writes it; ``lines=False`` escapes line breaks, tabs and characters
    that print as nothing too (an id on a line of its own)."""
    return (_CONTROLS if lines else _LINE_BREAKS).sub(lambda m: m.group().encode("unicode_escape").decode("ascii"),
                                                      text)


def escape(text: str) -> str:
    """User text in rich markup (a message may contain "[bold]"), safe to print."""
    from rich.markup import escape as _escape

    return _escape(printable(text))


def Text(text: str, style: str = "") -> Any:  # noqa: N802 - reads like rich's class
    """User text for a rich table or panel, safe to print (see :func:`printable`)."""
    from rich.text import Text as _Text

    return _Text(printable(text), style=style)


class UI:
    def __init__(self) -> None:
        from rich.console import Console

        self.out = Console(highlight=False)
        self.err = Console(stderr=True, highlight=False)

    def write(self, text: str) -> None:
        """Plain text on stdout (JSON, streamed replies): no markup, no wrapping."""
        sys.stdout.write(text)
        sys.stdout.flush()


def private_stdout() -> None:
    """Make stdout ``0600`` when it is an empty regular file of ours: what ``> export.json`` has
    just created (or emptied) with the shell's umask. A file appended to (``>>``), someone
    else's, a pipe or a terminal keeps its mode."""
    try:
        fd = sys.stdout.fileno()
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.geteuid():
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (a test's capture, a closed one)
        pass


class _Held(list):  # type: ignore[type-arg]
    """Log lines kept until a command ends (see :func:`logs_to_stderr`)."""

    def write(self, text: str) -> None:
        self.append(text)

    def flush(self) -> None:
        pass


_held: _Held | None = None


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (stdout carries JSON and replies), or
    holds the lines while a command that reports its own failure runs."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return _held if _held is not None else sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


@contextlib.contextmanager
def logs_to_stderr(level: str, hold: bool = False) -> Iterator[None]:
    """ovos_utils' LOG writes to stdout; here it goes to stderr, at ``level``.

    ``hold``: keep the lines until the block ends; they are written if it succeeds (what degraded
    on the way), and dropped if it raises, since its one-line error says the same (a dead
    server would otherwise be reported twice).
    """
    global _held
    original = LOG.__dict__["create_logger"]
    old_level = LOG.level

    def fix(logger: logging.Logger) -> logging.Logger:
        for i, handler in enumerate(logger.handlers):
            if type(handler) is logging.StreamHandler and handler.stream in (sys.stdout, sys.__stdout__):
                replacement = _StderrHandler()
                replacement.setFormatter(handler.formatter)
                logger.handlers[i] = replacement
        return logger

    def create_logger(cls: Any, name: str, tostdout: bool = True) -> logging.Logger:
        return fix(original.__func__(cls, name, tostdout))

    LOG.create_logger = classmethod(create_logger)  # type: ignore[method-assign,assignment]
    for logger in list(LOG._loggers.values()):
        fix(logger)
    LOG.set_level(level)
    _held = _Held() if hold else None
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        lines, _held = _held, None
        if lines and not failed:
            sys.stderr.write("".join(lines))
        LOG.create_logger = original  # type: ignore[method-assign]
        LOG.set_level(old_level)


def count_items(counts: Any) -> int:
    """The total of a (nested) mapping of counts, as forget() returns."""
    if isinstance(counts, Mapping):
        return sum(count_items(v) for v in counts.values())
    return int(counts) if isinstance(counts, (int, float)) and not isinstance(counts, bool) else 0
