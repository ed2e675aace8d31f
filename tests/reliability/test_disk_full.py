"""A disk that fills up, for real: refused writes are reported, nothing acknowledged is lost.

Each store lives on a small tmpfs mounted for the test. After a few acknowledged turns, a filler
file takes every byte left, and then, several times over: turns go on (``update_history``
logs the failure once per outage, as it logs every store failure, and the turn is answered), an
import, which reports its failure to its caller, raises (or, if it returns, was stored); the
store must still read back every acknowledged turn; then the filler goes, and the very next
turn and import must work, and that turn stores the refused ones first (they were held in
memory). At the end the store is opened again: every turn is there exactly once, those the
full disk refused included. ``forget()`` on the full disk finishes or raises, all or nothing,
and costs no other session; a new store there is refused at once to a command, and a persona's
starts anyway, waits for room, then stores what was said meanwhile.

Turns carry a few tens of kilobytes each, more than SQLite's WAL can take without growing, and
each cycle starts with the WAL files truncated, so a write on the full disk really needs space
(a small one may fit in pages the file already has); a JSON store rewrites its whole file, so
any write needs space.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._memory.waiting import no_waiting
from ovos_memory_plugins.errors import MemoryPluginError, StoreUnavailable
from tests._timing import patience
from tests.reliability._harness import (
    check_exactly_once,
    make_memory,
    marker,
    markers_in,
    recording_logs,
    spec_for,
    views,
)
from tests.reliability._report import record

pytestmark = pytest.mark.tmpfs

U, A = MessageRole.USER, MessageRole.ASSISTANT
#: (report name, entry point, store overrides; ``{folder}`` is the tmpfs).
CASES = [
    ("ovos-memory-plugin-lexical (sqlite)", "ovos-memory-plugin-lexical", {}),
    ("ovos-memory-plugin-local-rag (sqlite)", "ovos-memory-plugin-local-rag", {}),
    ("ovos-memory-plugin-recency (sqlite)", "ovos-memory-plugin-recency", {}),
    ("ovos-memory-plugin-recency (json)", "ovos-memory-plugin-recency", {"db_path": "{folder}/recency.json"}),
    ("ovos-memory-plugin-longterm (json)", "ovos-memory-plugin-longterm", {}),
    ("ovos-memory-plugin-longterm (sqlite)", "ovos-memory-plugin-longterm",
     {"backend": "sqlite", "db_path": "{folder}/longterm.db"}),
    ("ovos-memory-plugin-entity (json)", "ovos-memory-plugin-entity", {}),
]
#: Entity keeps no turns, only the facts they state: a turn of 40 kB states none. Its JSON file is
#: rewritten whole by every write, which therefore needs space however short the turn.
SHORT_TURNS = {"ovos-memory-plugin-entity"}
CYCLES = 3
DISK = "8m"
#: Words of filler per turn (about 40 kB).
FILLER = " ".join(f"filler{n % 97}" for n in range(5000))


@contextlib.contextmanager
def small_disk(folder: Path) -> Iterator[Path]:
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0700", "tmpfs", str(folder)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"mount -t tmpfs failed: {done.stderr}"  # conftest deselects where it cannot
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill(folder: Path) -> Path:
    """Take every byte left on ``folder``'s file system with one file; returns it."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert os.statvfs(folder).f_bavail == 0
    return filler


def release_wal_space(folder: Path) -> None:
    """Give back the space of every SQLite store's WAL file (a checkpoint that truncates it), so
    the next write needs new space: a WAL once grown is reused, and a turn that fits in it does not
    need the disk at all."""
    for path in folder.glob("*.db"):
        with contextlib.closing(sqlite3.connect(path)) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def turn(entry_point: str, tag: str, n: int) -> list[AgentMessage]:
    filler = "" if entry_point in SHORT_TURNS else f" {FILLER}"
    return [AgentMessage(U, f"I like {marker(tag, n)}{filler}"), AgentMessage(A, "noted")]


def _markers(memory: Any, sid: str) -> set[str]:
    return {m for counts in views(memory.export(sid)).values() for m in counts}


def _import(memory: Any, data: dict, sid: str) -> bool:
    """Import ``data`` as session ``sid``; False if the store refused it with the package's error."""
    try:
        memory.import_session(data, sid)
    except MemoryPluginError:
        return False
    return True


@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=[c[0] for c in CASES])
def test_a_full_disk_refuses_writes_loudly_loses_nothing_and_recovers(name, entry_point, variant, tmp_path,
                                                                     monkeypatch):
    sid, acked = "full", []
    config = {**spec_for(entry_point).keep_all, **variant}
    with small_disk(tmp_path / "disk") as disk, recording_logs(monkeypatch) as logs:
        with make_memory(entry_point, disk, config) as memory:
            for n in range(3):
                memory.update_history(turn(entry_point, "ok", n), sid)
                acked.append(marker("ok", n))
            memory.flush(patience(30))
            template = memory.export(sid)
            refused_imports = reported_errors = 0
            for cycle in range(CYCLES):
                release_wal_space(disk)
                filler = fill(disk)
                errors_before = len(logs.errors)
                for n in range(3):  # turns go on while the disk is full
                    memory.build_conversation_context("what do I like?", sid)
                    memory.update_history(turn(entry_point, f"f{cycle}", n), sid)
                refused = [marker(f"f{cycle}", n) for n in range(3)]
                imported = _import(memory, template, f"copy{cycle}")
                refused_imports += not imported
                readable = _markers(memory, sid)
                assert set(acked) <= readable, f"cycle {cycle}: acknowledged turns unreadable on a full disk"
                cycle_errors = logs.errors[errors_before:]
                reported_errors += len(cycle_errors)
                # An import that returns was stored: it fitted in pages the files already had (SQLite
                # reuses its WAL file's space once checkpointed); one that did not fit must raise.
                assert not imported or set(markers_in(str(memory.export(f"copy{cycle}")))) >= {marker("ok", 0)}, (
                    f"cycle {cycle}: an import on a full disk returned as if it was stored, and was not")
                assert 1 <= len(cycle_errors) <= 2, f"cycle {cycle}: failing turns logged {cycle_errors}"
                filler.unlink()  # space again: the next turn and import must work
                memory.update_history(turn(entry_point, f"back{cycle}", 0), sid)
                acked += [*refused, marker(f"back{cycle}", 0)]
                assert _import(memory, template, f"copy{cycle}"), f"cycle {cycle}: import failed after space came back"
                assert memory.flush(patience(30)), f"cycle {cycle}: something is still held after recovery"
                missing = set(refused + [marker(f"back{cycle}", 0)]) - _markers(memory, sid)
                assert not missing, f"cycle {cycle}: not stored after recovery: {sorted(missing)}"
                assert set(markers_in(str(memory.export(f"copy{cycle}")))) >= {marker("ok", 0)}
                assert len(logs.errors) == errors_before + len(cycle_errors), "errors after space came back"
        with make_memory(entry_point, disk, config) as memory:  # a restart reads it all back
            memory.flush(patience(30))
            check_exactly_once(memory, sid, acked)
    record("disk-full", name, **{
        "cycles": CYCLES, "turns refused, stored after": 3 * CYCLES,
        "imports refused, with an error": refused_imports, "errors logged for failed turns": reported_errors,
        "acknowledged lost": 0, "works after space is freed": True})


@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=[c[0] for c in CASES])
def test_forget_and_a_new_store_on_a_full_disk_fail_loudly_or_finish_and_lose_nothing_else(name, entry_point,
                                                                                          variant, tmp_path):
    config = {**spec_for(entry_point).keep_all, **variant}
    with small_disk(tmp_path / "disk") as disk:
        with make_memory(entry_point, disk, config) as memory:
            for n in range(3):
                memory.update_history(turn(entry_point, "keep", n), "keep")
                memory.update_history(turn(entry_point, "drop", n), "drop")
            memory.flush(patience(30))
            kept, dropped = _markers(memory, "keep"), _markers(memory, "drop")
            assert len(kept) == len(dropped) == 3, (kept, dropped)
            filler = fill(disk)
            try:
                memory.forget("drop")
                forgotten = True
            except MemoryPluginError:
                forgotten = False
            assert _markers(memory, "keep") == kept, "forget() on a full disk cost another session"
            assert _markers(memory, "drop") == (set() if forgotten else dropped), "forget() half done"
            new_config = ({**config, "db_path": str(disk / "new" / "store.db")}
                          if "db_path" not in variant or variant["db_path"].endswith(".db") else
                          {**config, "db_path": str(disk / "new" / "store.json")})
            with no_waiting(), pytest.raises(StoreUnavailable):  # a command on a new store is told at once
                make_memory(entry_point, disk / "new", new_config, make_folder=False).close()
            # A persona starting on the full disk starts anyway, and waits for room (as for a server).
            with make_memory(entry_point, disk / "new", new_config, make_folder=False) as waiting:
                assert any("store" in why for why in waiting.degraded().values())
                waiting.update_history(turn(entry_point, "new", 0), "new")
                filler.unlink()
                memory.forget("drop")  # space again: it finishes, and compacts
                assert _markers(memory, "drop") == set() and _markers(memory, "keep") == kept
                assert waiting.flush(patience(30)), "the new store did not start once the disk had room"
                assert marker("new", 0) in _markers(waiting, "new")
        left = [p.name for p in disk.rglob("*") if p.is_file() and b"zqdropn" in p.read_bytes()]
        assert not left, f"bytes of the forgotten session stay in {left}"
    record("disk-full", name, **{"forgets and new stores on a full disk": 2, "acknowledged lost": 0})


def test_a_forget_that_could_not_compact_on_a_nearly_full_disk_leaves_no_byte_once_there_is_room(tmp_path,
                                                                                               monkeypatch):
    # Room to delete the rows, not to rewrite the file: forget() returns, its bytes stay for now,
    # and the first write once there is room compacts.
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.storage.sqlite import Database

    monkeypatch.setattr(Database, "COMPACT_RETRY_S", 0.0)
    pad = " lorem ipsum dolor" * 40
    with small_disk(tmp_path / "disk") as disk, recording_logs(monkeypatch) as logs:
        path = disk / "s.db"
        with LexicalMemory({"db_path": str(path), "max_history": 0}) as memory:
            for i in range(150):
                memory.update_history([AgentMessage(U, f"zqdropword {i}{pad}"), AgentMessage(A, "ok")], "drop")
                memory.update_history([AgentMessage(U, f"zqkeepword {i}{pad}"), AgentMessage(A, "ok")], "keep")
            assert memory.flush(patience(30))
            filler = fill(disk)
            os.truncate(filler, filler.stat().st_size - 150_000)
            assert memory.forget("drop")["documents"] == 150  # room enough to delete
            assert len([e for e in logs.errors if "compacted" in e]) == 1, logs.errors
            held = [p.name for p in disk.rglob("*") if p.is_file() and b"zqdropword" in p.read_bytes()]
            assert held, "the disk had room to compact: this test needs one that has not"
            memory.update_history([AgentMessage(U, "still no room"), AgentMessage(A, "ok")], "keep")
            assert len([e for e in logs.errors if "compacted" in e]) == 1, "a retry that failed said so again"
            filler.unlink()
            memory.update_history([AgentMessage(U, "room again"), AgentMessage(A, "ok")], "keep")
            left = [p.name for p in disk.rglob("*") if p.is_file() and b"zqdropword" in p.read_bytes()]
            assert not left, f"bytes of the forgotten session stay in {left}"
            assert len(memory.export("keep")["documents"]) == 152  # the other session is whole
            assert len([e for e in logs.errors if "compacted" in e]) == 1, logs.errors  # said once, not at each try
