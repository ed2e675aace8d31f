"""Conversations are private: what the package creates on disk is its owner's alone, whatever the umask.

Every store kept in files (SQLite with its WAL and shm, JSON with its lock, the vectors of
local-rag, the composite's members) is created under a folder that does not exist yet, with the
umask a service usually runs under (022) and with none at all (000); after turns, background
work and a ``forget()`` (which rewrites a SQLite file), every file under it must be ``0600`` and
every folder the package made ``0700``, while the folder that was already there keeps its own
mode. The same holds for the default data folder, for a damaged file set aside, and for an
export that ``ovos-memory export`` writes to a file its output is redirected to.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._timing import patience
from tests.reliability._harness import entry_points, exchange, make_memory, members_of, spec_for, store_cases
from tests.reliability._report import record

#: Stores kept in files: every persistent one but Redis and PostgreSQL, and the composite's members.
FILE_CASES = [(name, ep, variant) for name, ep, variant in store_cases()
              if not ep.endswith("redis") and "db_url" not in variant]
FILE_CASES += [(ep, ep, {}) for ep in entry_points() if not spec_for(ep).persistent]
UMASKS = [0o022, 0o000]
#: The mode given to the folder that exists before the store: it must be left as it is.
OWN_MODE = 0o751


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(top: Path) -> dict[str, int]:
    """The permission bits of everything under ``top`` (``top`` itself excluded)."""
    return {str(p.relative_to(top)): stat.S_IMODE(os.lstat(p).st_mode) for p in sorted(top.rglob("*"))}


def not_private(found: dict[str, int], top: Path) -> list[str]:
    """What under ``top`` is not 0600 (a file) or 0700 (a folder)."""
    wrong = []
    for name, mode in found.items():
        expected = 0o700 if (top / name).is_dir() else 0o600
        if mode != expected:
            wrong.append(f"{name}: {oct(mode)}, not {oct(expected)}")
    return wrong


def _use(memory, sessions: tuple[str, ...] = ("keep", "drop")) -> None:
    for sid in sessions:
        for n in range(3):
            memory.update_history(exchange(sid[:2], n), sid)
    for member in members_of(memory):
        if hasattr(member, "flush"):
            member.flush(patience(30))
    memory.build_conversation_context("what do I like?", "keep")
    memory.forget("drop")


@pytest.mark.parametrize("mask", UMASKS, ids=lambda m: f"umask {m:03o}")
@pytest.mark.parametrize(("name", "entry_point", "variant"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_every_file_the_store_creates_is_0600_and_every_folder_0700(name, entry_point, variant, mask, tmp_path):
    parent = tmp_path / "mine"
    parent.mkdir()
    os.chmod(parent, OWN_MODE)
    folder = parent / "new" / "deeper"  # two folders the package must make
    config = {**spec_for(entry_point).keep_all, **variant}
    with umask(mask), make_memory(entry_point, folder, config, make_folder=False) as memory:
        _use(memory)
    found = modes(parent)
    assert any(not (parent / n).is_dir() for n in found), f"no file was made under {parent}: {found}"
    wrong = not_private(found, parent)
    assert not wrong, f"not private under umask {mask:03o}: {wrong}"
    assert stat.S_IMODE(parent.stat().st_mode) == OWN_MODE, "the folder that was already there changed its mode"
    record("permissions", (name, "store folder given in the config"), **{
        "umasks tried": 1, "files checked": sum(1 for n in found if not (parent / n).is_dir()),
        "folders checked": sum(1 for n in found if (parent / n).is_dir()) + 1, "not private": len(wrong)})


@pytest.mark.parametrize("entry_point", ["ovos-memory-plugin-lexical", "ovos-memory-plugin-local-rag",
                                         "ovos-memory-plugin-longterm", "ovos-memory-plugin-entity"])
def test_the_default_data_folder_is_made_0700_and_its_stores_0600(entry_point, tmp_path, monkeypatch):
    home = tmp_path / "xdg"
    home.mkdir()
    os.chmod(home, OWN_MODE)
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    config = {**spec_for(entry_point).keep_all, "db_path": ""}
    with umask(0o022), make_memory(entry_point, tmp_path / "unused", config) as memory:
        _use(memory)
    found = modes(home)
    wrong = not_private(found, home)
    assert "ovos" in found and not wrong, f"the default data folder is not private: {wrong or found}"
    assert stat.S_IMODE(home.stat().st_mode) == OWN_MODE
    record("permissions", (entry_point, "default data folder"), **{
        "umasks tried": 1, "files checked": sum(1 for n in found if not (home / n).is_dir()),
        "folders checked": sum(1 for n in found if (home / n).is_dir()) + 1, "not private": len(wrong)})


@pytest.mark.parametrize("entry_point", ["ovos-memory-plugin-lexical", "ovos-memory-plugin-recency",
                                         "ovos-memory-plugin-local-rag"])
def test_an_empty_file_given_as_the_store_becomes_private_before_anything_is_written(entry_point, tmp_path):
    # "touch memory.db" under a umask of 022: the conversation, and SQLite's -wal and -shm made with
    # the file's mode, were readable by every user.
    folder = tmp_path / "store"
    folder.mkdir(mode=0o700)
    path = folder / "memory.db"
    with umask(0o022):
        path.touch()
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        with make_memory(entry_point, folder, {**spec_for(entry_point).keep_all, "db_path": str(path)}) as memory:
            _use(memory, ("keep",))
            found = modes(folder)
    assert "memory.db-wal" in found and not not_private(found, folder), found


@pytest.mark.parametrize(("name", "entry_point", "damage"), [
    # a database whose pages were overwritten (its header stays: bytes with no store's structure
    # are someone else's file, refused and left alone)
    ("ovos-memory-plugin-lexical", "ovos-memory-plugin-lexical", b"SQLite format 3\x00\xffgarbage pages"),
    ("ovos-memory-plugin-recency (json)", "ovos-memory-plugin-recency", b"{broken json"),
], ids=["sqlite", "json"])
def test_a_damaged_file_set_aside_and_its_fresh_replacement_stay_private(name, entry_point, damage, tmp_path):
    folder = tmp_path / "store"
    path = folder / ("store.json" if damage.startswith(b"{") else "store.db")
    with umask(0o022):
        with make_memory(entry_point, folder, {"db_path": str(path)}) as memory:
            _use(memory, ("keep",))
        os.chmod(path, 0o600)
        path.write_bytes(damage + damage[15:] * 199)
        with make_memory(entry_point, folder, {"db_path": str(path)}) as memory:
            _use(memory, ("keep",))
    found = modes(folder)
    assert any(".corrupt" in n for n in found), f"nothing was set aside: {found}"
    wrong = not_private(found, folder)
    assert not wrong, wrong
    record("permissions", (name, "a damaged file set aside, and its replacement"), **{
        "umasks tried": 1, "files checked": len(found), "folders checked": 0, "not private": len(wrong)})


def test_an_export_redirected_to_a_file_is_0600_and_an_appended_file_keeps_its_mode(tmp_path):
    config = json.dumps({"db_path": str(tmp_path / "store" / "lexical.db")})
    with make_memory("ovos-memory-plugin-lexical", tmp_path / "store", json.loads(config)) as memory:
        _use(memory, ("keep",))
    command = [sys.executable, "-m", "ovos_memory_plugins", "export", "keep", "--module", "ovos-memory-plugin-lexical",
               "--config", config]
    checked = []
    with umask(0o022):
        for target, how in ((tmp_path / "export.json", "w"), (tmp_path / "shared.log", "a")):
            if how == "a":
                target.write_text("an earlier line\n")  # a file that held something: not ours to change
            with open(target, how) as out:
                done = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=True, timeout=patience(120))
            assert done.returncode == 0, done.stderr
            assert "keep" in target.read_text()
            checked.append(stat.S_IMODE(target.stat().st_mode))
    assert checked == [0o600, 0o644], f"modes of the redirected export and the appended file: {list(map(oct, checked))}"
    record("permissions", ("ovos-memory export", "output redirected to a new file"), **{
        "umasks tried": 1, "files checked": 2, "folders checked": 0, "not private": 0})
