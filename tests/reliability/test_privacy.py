"""``forget(session_id)`` leaves nothing of the session anywhere, and nothing of another is lost.

The session writes enough for every kind of derived data to exist (documents, vectors, a
summary, facts); the test first checks that the scanners do find it, then forgets, and
searches every SQLite table (through SQLite), the raw bytes of every file in the data folder
(WAL included), every row of the store's PostgreSQL schema, and every Redis key and value, for
the session id and its markers.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests._postgres import folder_url, schema_cells
from tests._timing import patience
from tests.reliability._harness import (
    ON_POSTGRES,
    entry_points,
    exchange,
    folder_texts,
    make_memory,
    marker,
    members_of,
    redis_prefix,
    redis_texts,
    spec_for,
    sqlite_cells,
    store_cases,
    views,
    with_postgres,
)
from tests.reliability._report import record

#: Overrides that make each backend derive everything it can from a few turns (offline).
DERIVE_ALL = {
    "ovos-memory-plugin-longterm": {"summarize_every": 2, "recent_window": 1},
    "ovos-memory-plugin-redis": {"compact_token_threshold": 0, "compact_threshold": 2, "keep_recent": 1,
                                 "api_url": None},
    "ovos-memory-plugin-entity": {"max_facts": 0},
}
CASES = [(name, ep, {**spec_for(ep).keep_all, **DERIVE_ALL.get(ep, {}), **variant})
         for name, ep, variant in store_cases()]
CASES += [(ep, ep, {}) for ep in entry_points() if not spec_for(ep).persistent]
CASES += [(f"{ep} (postgres)", ep, ON_POSTGRES) for ep in entry_points() if not spec_for(ep).persistent]
CASES += [(f"{ep} (scope global{store})", ep, {**spec_for(ep).keep_all, "scope": "global", **variant})
          for ep in ("ovos-memory-plugin-entity", "ovos-memory-plugin-lexical") if ep in entry_points()
          for store, variant in (("", {}), (", postgres", ON_POSTGRES))]
TURNS = 4


def _places(memory: Any, folder: Path) -> list[tuple[str, str]]:
    places = folder_texts(folder)
    for member in members_of(memory):
        prefix = redis_prefix(member)
        if prefix:
            places += redis_texts(prefix)
    return places


def _remnants(places: list[tuple[str, str]], needles: list[str]) -> list[str]:
    return sorted({f"{where}: {needle}" for where, text in places for needle in needles if needle in text})


def _flush(memory: Any) -> None:
    for member in members_of(memory):
        if hasattr(member, "flush"):
            assert member.flush(patience(30)) is not False


@pytest.mark.parametrize(("name", "entry_point", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_forget_leaves_no_row_file_key_or_summary_of_the_session(name, entry_point, overrides, tmp_path):
    folder = tmp_path / "store"
    config = dict(overrides)
    spec = spec_for(entry_point)
    if spec.namespace_key:
        config[spec.namespace_key] = f"rel:privacy:{uuid.uuid4().hex}"
    victim, bystander = f"victim{uuid.uuid4().hex[:8]}", f"bystander{uuid.uuid4().hex[:8]}"
    secrets = [marker("v", n) for n in range(TURNS)]
    kept = [marker("b", n) for n in range(TURNS)]
    memory = make_memory(entry_point, folder, config)
    try:
        for n in range(TURNS):
            memory.update_history(exchange("v", n), victim)
            memory.update_history(exchange("b", n), bystander)
        _flush(memory)
        derived = memory.export(victim)
        for key in ("summary", "facts"):  # the derived data forget() must also remove exists
            assert key not in derived or derived[key], f"no {key} was derived: the test would prove less"
        before = _remnants(_places(memory, folder), [victim, *secrets])
        assert before, "the scanners found nothing of the session before forget(): the test cannot see"
        memory.forget(victim)
        _flush(memory)
        open_places = _places(memory, folder)
        left_open = _remnants(open_places, [victim, *secrets])
        bystander_views = views(memory.export(bystander))
        context = memory.build_conversation_context("what do I like?", victim)
    finally:
        memory.close()
    closed_places = _places(memory, folder)
    left_closed = _remnants(closed_places, [victim, *secrets])
    assert not left_open, f"after forget(), while open: {left_open[:10]}"
    assert not left_closed, f"after forget(), once closed: {left_closed[:10]}"
    assert not [m for m in context[:-1] if any(s in m.content for s in secrets)], "the forgotten session is recalled"
    intact = all(all(counts[m] >= 1 for m in kept) for counts in bystander_views.values()) and bool(bystander_views)
    assert intact, f"forget() touched another session: {bystander_views}"
    with make_memory(entry_point, folder, config) as memory:  # and nothing comes back on restart
        _flush(memory)
        assert not _remnants(_places(memory, folder), [victim, *secrets])
    record("privacy", name, **{"places searched": len(open_places) + len(closed_places), "remnants found": 0,
                               "other session intact": intact})


@pytest.mark.parametrize(("entry_point", "store"),
                         with_postgres([ep for ep in entry_points() if ep.endswith(("lexical", "local-rag"))]))
def test_a_forgotten_session_id_used_again_never_reuses_a_document_id(entry_point, store, tmp_path):
    # forget() drops the session's id counter too (it names the session); the ids of a new
    # conversation under the same id must still never collide with the forgotten ones.
    memory = make_memory(entry_point, tmp_path / "store", {**spec_for(entry_point).keep_all, **store})
    try:
        for n in range(3):
            memory.update_history(exchange("old", n), "reused")
        old_ids = {d["doc_id"] for d in memory.export("reused")["documents"]}
        memory.forget("reused")
        for n in range(3):
            memory.update_history(exchange("new", n), "reused")
        memory.update_history(exchange("fresh", 0), "brand-new")
        new_ids = {d["doc_id"] for d in memory.export("reused")["documents"]}
        fresh = [d["doc_id"] for d in memory.export("brand-new")["documents"]]
    finally:
        memory.close()
    assert len(old_ids) == 3 and len(new_ids) == 3
    assert not old_ids & new_ids, f"document ids reused after forget(): {sorted(old_ids & new_ids)}"
    assert all(i.startswith("reused_") for i in new_ids) and fresh[0].startswith("brand-new_")


class _Crash(BaseException):
    """The process dies here (not an Exception: nothing in the package may swallow it)."""


@pytest.mark.parametrize(("entry_point", "store"),
                         with_postgres([ep for ep in entry_points() if ep.endswith(("lexical", "local-rag"))]))
def test_a_forget_interrupted_between_its_steps_leaves_all_or_nothing(entry_point, store, tmp_path, monkeypatch):
    # forget() deletes the window and documents, then the index entries (FTS rows, vectors,
    # whose metadata holds the text). A crash between the two must not leave index entries of
    # a session that no longer exists anywhere else: invisible to export(), still on disk.
    from ovos_memory_plugins.retrieval import BaseRetrievalMemory

    folder, config = tmp_path / "store", {**spec_for(entry_point).keep_all, **store}
    victim, secrets = f"victim{uuid.uuid4().hex[:8]}", [marker("v", n) for n in range(TURNS)]
    with make_memory(entry_point, folder, config) as memory:
        for n in range(TURNS):
            memory.update_history(exchange("v", n), victim)
            memory.update_history(exchange("b", n), "bystander")
        _flush(memory)
        cls = type(memory)

        def crash(self: Any, docs: Any) -> None:
            raise _Crash

        monkeypatch.setattr(cls, "_delete_documents", crash)
        with pytest.raises(_Crash):
            memory.forget(victim)
        monkeypatch.setattr(cls, "_delete_documents", BaseRetrievalMemory._delete_documents)
        monkeypatch.undo()
    with make_memory(entry_point, folder, config) as memory:  # the restart
        _flush(memory)
        exported = {m for counts in views(memory.export(victim)).values() for m in counts}
        cells = [(where, text) for path in folder.glob("*.db") for where, text in sqlite_cells(path)]
        cells += schema_cells(folder_url(folder)) if store else []
        on_disk = _remnants(cells, [victim, *secrets])
    complete = set(secrets) <= exported
    assert complete or not on_disk, f"forget() half done: gone from export() but still on disk: {on_disk[:6]}"
