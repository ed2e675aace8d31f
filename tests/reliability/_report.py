"""The figures of the reliability suite, rendered to ``docs/reliability.md``.

Tests call :func:`record` with what they measured; after each call the report is rendered
again from everything recorded in this pytest process, so it is complete when the last test
ends (no conftest hook needed). The shape is fixed: every section and column is always
present; a section whose tests did not run says so.

A test run never changes a tracked file: the report goes to ``build/reports/reliability.md``
(``$OVOS_MEMORY_REPORT_DIR`` moves it). ``make reliability-report`` runs the whole suite and,
only when every test passed, copies the report over ``docs/reliability.md``.
"""
from __future__ import annotations

import os
import platform
import threading
from pathlib import Path
from typing import Any

__all__ = ["SECTIONS", "record", "render", "report_path"]

REPO = Path(__file__).resolve().parents[2]

#: section -> (title, intro, columns). Columns after the first are the recorded fields.
SECTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "crash": (
        "1. Crash safety (SIGKILL)",
        "A child process calls `update_history` and acknowledges each call after it returned; the parent "
        "SIGKILLs it at random moments (during start-up, between and inside calls), reopens the store and "
        "checks through `export()` that every acknowledged update is present exactly once, and that an "
        "update in flight at the kill is either wholly present or wholly absent (then the next writer starts "
        "after it). The composite stores nothing of its own: its members are the rows here.",
        ("backend", "run", "kills", "updates acknowledged", "updates checked", "in flight, found committed",
         "folded into summaries", "lost"),
    ),
    "corruption": (
        "1b. Damaged store files",
        "A store file is damaged between two runs. JSON (truncated mid-way, garbage bytes, empty, not an "
        "object, invalid UTF-8, nested 100,000 deep) and SQLite (garbage header, schema page overwritten, truncated "
        "mid-way, one page in the middle overwritten, found at open or only at run time): the file is moved to "
        "`<file>.corrupt` (`<file>.corrupt-<time>` when an earlier copy holds that name) byte for byte (SQLite: with "
        "its journal), one ERROR names both paths, and the backend goes on with a fresh file; every turn is answered "
        "and every update made after the damage is in the store. Damage that leaves the file readable (three "
        "flipped bytes of text, one malformed record of another session) costs no session but the damaged one. "
        "Damage to lexical's keyword index alone, in a file otherwise sound, costs nothing stored: the index is "
        "built again from the stored exchanges in the background, with one WARNING (tests/test_lexical_damage.py).",
        ("store", "damages", "quarantined", "errors logged", "keeps working", "updates after the damage",
         "updates lost"),
    ),
    "misuse": (
        "1c. Wrong paths, wrong commands, wrong config",
        "What a user can get wrong, tried on every backend it applies to: a store path that is a device (made "
        "with mknod in a temporary folder), a FIFO, a socket or a directory; `db_path: \"\"`; a read-only command "
        "(`sessions`, `stats`, `show`, `export`, `search`) pointed at a file that is not a store; a config "
        "value out of range or of the wrong type; an import of the wrong shape, or of the same export twice. "
        "Each must be refused with a clear error (or be harmless), change no file it was not asked to "
        "change, and lose nothing stored.",
        ("case", "backend", "tried", "clear error or harmless", "files changed", "stored data lost"),
    ),
    "concurrency": (
        "2. Concurrency",
        "Several processes, each with several threads, write one store (one session, one file, one "
        "PostgreSQL database, each process on its own connections, or one Redis key) at once, with "
        "summaries/compaction running where the backend has them.",
        ("backend", "processes x threads x updates", "updates", "present exactly once", "lost", "duplicated",
         "folded into summaries", "note"),
    ),
    "hostile": (
        "3. Hostile input",
        "Generated (hypothesis) and hand-written hostile utterances, messages and session ids through "
        "`update_history`, `build_conversation_context` and `get_history`; no undocumented exception may "
        "escape and no file may appear outside the configured data directory.",
        ("backend", "inputs tried", "clear TypeError/ValueError", "escaped exceptions", "files outside data dir",
         "1 MB turn then normal turn, time ratio"),
    ),
    "faults": (
        "4. Faults",
        "A failing dependency while turns go on: every turn is answered, the failure is logged once, "
        "and the store is consistent afterwards.",
        ("fault", "backend", "turns", "turns answered", "errors logged", "consistent afterwards"),
    ),
    "disk-full": (
        "4b. A disk that fills up",
        "Each store on a small tmpfs (8 MB) mounted for the test; after a few turns of about 40 kB each, a file takes "
        "every byte left, then, for each cycle: three turns go on (each answered; `update_history` logs the failure, "
        "once per outage, and holds them in memory), an import raises (or, if it returns, was stored), every "
        "acknowledged turn must still read back; the file goes, and the next turn and import must work, that turn "
        "storing the held ones first. At the end the store is opened again: every turn is there exactly once, those "
        "the full disk refused included. Each cycle starts with the WAL files truncated, so a write really needs "
        "space. Also on the full disk: `forget()` of one session "
        "(it finishes or raises, all or nothing, and no other session is touched; once space is back it leaves no "
        "byte of the session) and a new store (a command is refused at once with the package's error; a "
        "persona's starts anyway, waits for room, then stores what was said meanwhile). With room to delete but "
        "not to compact the file, `forget()` returns and says so once in the log; the first write once there is "
        "room compacts it, and no byte of the session is left.",
        ("store", "cycles", "turns refused, stored after", "imports refused, with an error",
         "errors logged for failed turns", "forgets and new stores on a full disk", "acknowledged lost",
         "works after space is freed"),
    ),
    "privacy": (
        "5. Privacy",
        "After `forget(session_id)` every SQLite table (read through SQLite), every file's raw bytes, "
        "every row of the store's PostgreSQL schema and every Redis key and value is searched for the "
        "session id and its content; another session must be untouched.",
        ("backend", "places searched", "remnants found", "other session intact"),
    ),
    "privacy-size": (
        "5b. Privacy at every store size",
        "Two sessions of 5, 150 and 2,000 exchanges each (varied lengths, indexed in batches of one to three "
        "updates); after `forget()` of one, the raw bytes of every file of the store (database, WAL, shm, index "
        "segments, vectors, locks) and every Redis key are searched for its session id and its marker word. "
        "A small store is clean by luck of layout: a row moved by a page split or merge leaves an old copy in the "
        "unused part of a live page, which `secure_delete` does not reach; `forget()` therefore rewrites the file "
        "(`VACUUM`) and empties the WAL. The time is `forget()` itself, on this machine.",
        ("backend", "exchanges per session", "files searched", "bytes searched", "remnants found",
         "other session intact", "forget took (s)"),
    ),
    "permissions": (
        "5c. Private files",
        "Every store kept in files is created under folders that do not exist yet, under the umask a service "
        "usually runs with (022) and under none (000); after turns, background work and a `forget()`, every file "
        "(database, WAL, shm, JSON, lock, vectors) must be 0600 and every folder the package made 0700, while the "
        "folder that was already there keeps its mode. Also checked: the default data folder, a damaged file set "
        "aside with its replacement, and an export redirected to a new file (a file appended to keeps its mode).",
        ("store", "where", "umasks tried", "files checked", "folders checked", "not private"),
    ),
    "outage": (
        "6. Outages and repeated operations",
        "A command or call that cannot reach its store fails with one line and a non-zero exit, and nothing is "
        "reported as done that was not; messages held while Redis is down reach it, in order, once it is back; "
        "importing an export a second time changes nothing.",
        ("case", "backend", "tried", "failed loudly or done", "reported done but not done", "lost", "duplicated"),
    ),
}

_figures: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {}
_lock = threading.Lock()


def report_path() -> Path:
    folder = os.environ.get("OVOS_MEMORY_REPORT_DIR")
    return (Path(folder) if folder else REPO / "build" / "reports") / "reliability.md"


def record(section: str, row: tuple[str, ...] | str, **values: Any) -> None:
    """Add a row's figures (numbers add up over calls; other values replace) and rewrite the report."""
    key = (row,) if isinstance(row, str) else tuple(row)
    with _lock:
        current = _figures.setdefault(section, {}).setdefault(key, {})
        for name, value in values.items():
            old = current.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(old, (int, float)):
                current[name] = old + value
            else:
                current[name] = value
        text = render()
    path = report_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def _totals() -> list[str]:
    crash = _figures.get("crash", {}).values()
    conc = _figures.get("concurrency", {}).values()
    hostile = _figures.get("hostile", {}).values()
    damaged = _figures.get("corruption", {}).values()
    lost = sum(int(r.get("lost", 0) or 0) for r in [*crash, *conc]) + sum(
        int(r.get("updates lost", 0) or 0) for r in damaged) + sum(
        int(r.get("lost", 0) or 0) for r in _figures.get("outage", {}).values()) + sum(
        int(r.get("acknowledged lost", 0) or 0) for r in _figures.get("disk-full", {}).values())
    sized = _figures.get("privacy-size", {})
    faults = _figures.get("faults", {}).values()
    forgets = _figures.get("privacy", {})
    perms = _figures.get("permissions", {}).values()
    full = _figures.get("disk-full", {}).values()
    return [
        f"- kills survived: {sum(int(r.get('kills', 0)) for r in crash):,}",
        f"- updates checked: {sum(int(r.get('updates checked', 0)) for r in crash) + sum(int(r.get('updates', 0)) for r in conc):,}",  # noqa: E501
        f"- hostile inputs tried: {sum(int(r.get('inputs tried', 0)) for r in hostile):,}",
        f"- turns under an injected fault: {sum(int(r.get('turns', 0)) for r in faults):,}, all answered: "
        f"{'yes' if all(r.get('turns') == r.get('turns answered') for r in faults) else 'no'}",
        f"- stores checked byte by byte after forget(): {len(forgets) + len(sized)}, remnants found: "
        f"{sum(int(r.get('remnants found', 0)) for r in [*forgets.values(), *sized.values()])}",
        f"- files and folders checked for their mode: {sum(int(r.get('files checked', 0)) + int(r.get('folders checked', 0)) for r in perms):,}, "  # noqa: E501
        f"not private: {sum(int(r.get('not private', 0)) for r in perms)}",
        f"- misuse cases tried: {sum(int(r.get('tried', 0)) for r in _figures.get('misuse', {}).values()):,}, "
        f"files changed that should not have been: "
        f"{sum(int(r.get('files changed', 0)) for r in _figures.get('misuse', {}).values())}",
        f"- disk-full cycles: {sum(int(r.get('cycles', 0)) for r in full):,}, turns refused and stored after: "
        f"{sum(int(r.get('turns refused, stored after', 0)) for r in full):,}, acknowledged lost: "
        f"{sum(int(r.get('acknowledged lost', 0)) for r in full)}",
        f"- updates lost: {lost:,}",
    ]


def render() -> str:
    """The whole report as Markdown (fixed shape; numbers from this run)."""
    lines = [
        "# Reliability and security report",
        "",
        "Generated by the test suite in `tests/reliability/`; do not edit by hand. Regenerate with",
        "`make reliability-report` (the whole suite, slow tests included, against a local redis-server "
        "and PostgreSQL).",
        f"Python {platform.python_version()}, {_opm_version()}.",
        "",
        "## Summary",
        "",
        *_totals(),
        "",
    ]
    for section, (title, intro, columns) in SECTIONS.items():
        lines += [f"## {title}", "", intro, ""]
        rows = _figures.get(section)
        if not rows:
            lines += ["Not run in this session.", ""]
            continue
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "---|" * len(columns))
        key_columns = len(next(iter(rows)))
        for key in sorted(rows):
            values = rows[key]
            cells = list(key) + [_cell(values.get(c)) for c in columns[key_columns:]]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _opm_version() -> str:
    try:
        from importlib.metadata import version

        return f"ovos-plugin-manager {version('ovos-plugin-manager')}"
    except Exception:  # noqa: BLE001
        return "ovos-plugin-manager (unknown version)"
