"""``forget(session_id)`` leaves nothing of the session anywhere, and nothing of another is lost.

The session writes enough for every kind of derived data to exist (documents, vectors, a
summary, facts); the test first checks that the scanners do find it, then forgets, and
searches every SQLite table (through SQLite), the raw bytes of every file in the data folder
(WAL included), every row of the store's PostgreSQL schema, and every Redis key and value, for
the session id and its markers.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from tests._postgres import folder_url, schema_cells
from tests._timing import patience
from tests.reliability._harness import (
    CLOSED_LLM,
    ON_POSTGRES,
    POSTGRES,
    REPO,
    entry_points,
    exchange,
    folder_texts,
    make_memory,
    marker,
    members_of,
    namespaced,
    redis_prefix,
    redis_texts,
    spec_for,
    sqlite_cells,
    store_cases,
    views,
    with_postgres,
)
from tests.reliability._report import record

U, A = MessageRole.USER, MessageRole.ASSISTANT

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
            assert member.flush(patience(120)) is not False  # longterm folds 2,000 exchanges: ~30 s here


@pytest.mark.parametrize(("name", "entry_point", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_forget_leaves_no_row_file_key_or_summary_of_the_session(name, entry_point, overrides, tmp_path):
    folder = tmp_path / "store"
    config = namespaced(entry_point, overrides, "privacy")
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


PERSON_CASES = [c for c in CASES if "scope global" not in c[0]]


@pytest.mark.parametrize(("name", "entry_point", "overrides"), PERSON_CASES, ids=[c[0] for c in PERSON_CASES])
def test_forget_from_one_session_of_a_person_leaves_nothing_of_any_of_their_sessions(name, entry_point, overrides,
                                                                                      tmp_path):
    folder, tag = tmp_path / "store", uuid.uuid4().hex[:8]
    victim, bystander = f"ana{tag}", f"ben{tag}"
    people = {victim: [f"{victim}-kitchen", f"{victim}-*"], bystander: [f"{bystander}-phone"]}
    config = namespaced(entry_point, {**overrides, "scope": "person", "people": people}, "privacy-person")
    sessions = [f"{victim}-kitchen", f"{victim}-bedroom"]
    secrets = [marker("v", n) for n in range(TURNS)]
    kept = [marker("b", n) for n in range(TURNS)]
    memory = make_memory(entry_point, folder, config)
    try:
        for n in range(TURNS):
            memory.update_history(exchange("v", n), sessions[n % 2])  # the person moves between rooms
            memory.update_history(exchange("b", n), f"{bystander}-phone")
        _flush(memory)
        assert _remnants(_places(memory, folder), [victim, *secrets]), "the scanners found nothing before forget()"
        memory.forget(f"{victim}-car")  # a session of hers that never said a word
        _flush(memory)
        left_open = _remnants(_places(memory, folder), [victim, *secrets])
        bystander_views = views(memory.export_person(bystander))
        contexts = [memory.build_conversation_context("what do I like?", sid) for sid in sessions]
    finally:
        memory.close()
    assert not left_open, f"after forget(), while open: {left_open[:10]}"
    assert not _remnants(_places(memory, folder), [victim, *secrets]), "after forget(), once closed"
    recalled = [m for ctx in contexts for m in ctx[:-1] if any(s in m.content for s in secrets)]
    assert not recalled, f"recalled after forget: {recalled}"
    assert bystander_views and all(all(c[m] >= 1 for m in kept) for c in bystander_views.values()), (
        f"forget() of one person touched another: {bystander_views}")
    record("privacy", f"{name}, person scope", **{"remnants found": 0, "other person intact": True})


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


# -- forget() while another process embeds --------------------------------------------------------
#: A persona process storing turns of two sessions, its embedder slower than its user.
_PERSONA = """
import sys, time
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.testing.embeddings import FakeEmbedder
from tests.reliability._harness import exchange

class Slow(FakeEmbedder):
    def encode(self, texts, query=False):
        if not query:
            time.sleep(0.1)
        return super().encode(texts, query)

memory = LocalRAGMemory({"db_path": sys.argv[1], "max_history": 0, "_embedder": Slow()})
for n in range(int(sys.argv[2])):
    memory.update_history(exchange("v", n), "victim")
    memory.update_history(exchange("b", n), "bystander")
print("stored", flush=True)
assert memory.flush(300)
memory.close()
print("done", flush=True)
"""
RACES = 3


def _leased(path: Path) -> bool:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return bool(con.execute("SELECT COUNT(*) FROM local_rag_docs_leases").fetchone()[0])


def test_forget_while_another_process_embeds_the_session_leaves_no_vector_of_it(tmp_path, capsys):
    # `ovos-memory forget` while the persona's indexer is still embedding the session: the indexer
    # must write nothing for documents that no longer exist, and forget must not wait for it.
    from ovos_memory_plugins.cli import main

    searched = 0
    for race in range(RACES):
        folder = tmp_path / f"race{race}"
        folder.mkdir()
        db = folder / "rag.db"
        persona = subprocess.Popen([sys.executable, "-c", _PERSONA, str(db), "30"], cwd=REPO, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert persona.stdout.readline().strip() == "stored", persona.stderr.read()
            deadline = time.monotonic() + patience(30)
            while not _leased(db) and time.monotonic() < deadline:
                time.sleep(0.01)
            code = main(["forget", "victim", "--module", "ovos-memory-plugin-local-rag",
                         "--config", json.dumps({"db_path": str(db)})])
            capsys.readouterr()
            still_embedding = _leased(db)
            assert code == 0
            assert persona.stdout.readline().strip() == "done", persona.stderr.read()
        finally:
            persona.kill()
            persona.wait()
            persona.stdout.close()
            persona.stderr.close()
        assert still_embedding, "forget() returned only once the other process had embedded its backlog"
        with make_memory("ovos-memory-plugin-local-rag", folder, {"db_path": str(db)}) as memory:
            memory.forget("nobody")  # compacts what the persona wrote since, as any forget does
            kept = views(memory.export("bystander"))
        places = folder_texts(folder)
        searched += len(places)
        left = _remnants(places, ["victim", *[marker("v", n) for n in range(30)]])
        assert not left, f"race {race}: after forget(), written by the other process: {left[:6]}"
        assert all(counts[marker("b", 29)] == 1 for counts in kept.values()), kept
    record("privacy", "ovos-memory-plugin-local-rag (forget while another process embeds it)", **{
        "places searched": searched, "remnants found": 0, "other session intact": True})


# -- forget() at every store size ----------------------------------------------------------------
#: Exchanges per session. A small store is clean by luck of layout: rows that move when a page
#: splits or merges leave old copies in the unused part of a live page (secure_delete only zeroes
#: what is deleted), and index segments are rewritten; both come with size.
SIZES = (5, 150, 2000)
#: Turns written one by one after the bulk of a JSON store (imported: it rewrites the file per update).
TAIL = 20
FILLER = ["morning", "coffee", "with", "my", "sister", "before", "work", "then", "a", "long", "walk", "by", "the",
          "river", "and", "dinner", "at", "eight", "neighbours", "who", "moved", "here", "from", "coast", "spring"]


def _hybrid(folder: Path, overrides: dict) -> Any:
    """The hybrid preset, its files in ``folder``, with a fast embedder and the entity facts on SQLite
    (its JSON file is the entity case of its own, built faster)."""
    from ovos_memory_plugins.composite import HYBRID_PRESET, CompositeMemory
    from ovos_memory_plugins.testing.embeddings import FakeEmbedder

    members = []
    for spec in HYBRID_PRESET:
        config = {**spec["config"], "db_path": str(folder / Path(spec["config"]["db_path"]).name)}
        if spec["module"].endswith("local-rag"):
            config["_embedder"] = FakeEmbedder()
        if spec["module"].endswith("entity"):
            config.update(backend="sqlite", db_path=str(folder / "hybrid_entity.db"), api_url=CLOSED_LLM,
                          request_timeout=2)
        members.append({"module": spec["module"], "config": config})
    return CompositeMemory({"members": members, **overrides})


#: Summaries and compaction as in DERIVE_ALL; facts capped as by default (every fact kept would make
#: each update rewrite thousands of them: a store nobody has).
SIZED_CASES = [(name, ep, {**DERIVE_ALL.get(ep, {}), **variant}) for name, ep, variant in store_cases()
               if not ep.endswith("entity")]
SIZED_CASES += [(name, ep, variant) for name, ep, variant in store_cases() if ep.endswith("entity")]
SIZED_CASES += [(f"{ep} (neighbour_weight 0.5)", ep, {"retrieval": {"neighbour_weight": 0.5}})
                for ep in ("ovos-memory-plugin-lexical", "ovos-memory-plugin-local-rag") if ep in entry_points()]
SIZED_CASES.append(("ovos-memory-plugin-composite (hybrid preset)", "hybrid", {}))


def _sized_memory(entry_point: str, folder: Path, config: dict) -> Any:
    if entry_point == "hybrid":
        folder.mkdir(parents=True, exist_ok=True)
        return _hybrid(folder, config)
    return make_memory(entry_point, folder, config)


def _words(tag: str, n: int, rnd: Any) -> list[AgentMessage]:
    """An exchange of varied length (rows of one size would fill pages too regularly)."""
    filler = " ".join(rnd.choice(FILLER) for _ in range(rnd.randint(3, 40)))
    return [AgentMessage(U, f"I like {marker(tag, n)}. {filler.capitalize()}."), AgentMessage(A, f"Noted, {filler}.")]


def _json_store(memory: Any, folder: Path) -> bool:
    return any(folder.glob("*.json")) and not any(folder.glob("*.db"))


def _fill(memory: Any, entry_point: str, folder: Path, config: dict, count: int, sessions: dict[str, str]) -> None:
    """``count`` exchanges in each session, interleaved. A JSON store rewrites its file per update:
    its bulk is built in a RAM twin and imported (one write), the last ``TAIL`` turns one by one."""
    import random

    rnd = random.Random(count)
    bulk = max(0, count - TAIL) if _json_store(memory, folder) else 0
    if bulk:
        twin_config = {**config, "db_path": None}
        if entry_point.endswith(("longterm", "entity")):
            twin_config["backend"] = "memory"
        twin = make_memory(entry_point, folder / "twin", twin_config)
        try:
            for n in range(bulk):
                for tag, sid in sessions.items():
                    twin.update_history(_words(tag, n, rnd), sid)
            _flush(twin)
            exports = {sid: twin.export(sid) for sid in sessions.values()}
        finally:
            twin.close()
        for sid, data in exports.items():
            memory.import_session(data, sid)
    due = rnd.randint(1, 3)
    for n in range(bulk, count):
        for tag, sid in sessions.items():
            memory.update_history(_words(tag, n, rnd), sid)
            due -= 1
            if not due:  # background indexing in batches of 1 to 3 updates, as on a busy device
                _flush(memory)
                due = rnd.randint(1, 3)
    _flush(memory)


def _file_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (main files, WAL, shm, locks, quarantined copies), lower-cased."""
    return {str(p.relative_to(folder)): p.read_bytes().lower() for p in sorted(folder.rglob("*")) if p.is_file()}


def _store_bytes(folder: Path, overrides: dict) -> dict[str, bytes]:
    """:func:`_file_bytes`, and for a store on PostgreSQL every row of its schema (per table, as
    text, lower-cased). There a deleted row's bytes stay in the server's files until vacuum reuses
    them, out of reach of any query (docs/deployment.md, Forgetting): the rows are what is checked."""
    found = _file_bytes(folder)
    if overrides.get("db_url") == POSTGRES:
        tables: dict[str, list[str]] = {}
        for table, text in schema_cells(folder_url(folder)):
            tables.setdefault(table, []).append(text)
        found.update({table: "\n".join(texts).lower().encode() for table, texts in tables.items()})
    return found


@pytest.mark.parametrize("size", [pytest.param(s, marks=pytest.mark.slow) if s > 150 else s for s in SIZES])
@pytest.mark.parametrize(("name", "entry_point", "overrides"), SIZED_CASES, ids=[c[0] for c in SIZED_CASES])
def test_forget_leaves_no_byte_of_the_session_in_any_file_at_any_store_size(name, entry_point, overrides, size,
                                                                            tmp_path, monkeypatch):
    import time

    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.local_rag import LocalRAGMemory

    # Index batches end only where _fill flushes, so the file's layout is the same on every run.
    for cls in (LexicalMemory, LocalRAGMemory):
        monkeypatch.setattr(cls, "index_delay", 3600.0)

    folder = tmp_path / "store"
    config = namespaced(entry_point, overrides, "privacy")
    # Tags share no first letter with anything else stored, so the index's prefix compression
    # cannot hide a remnant from a byte search: a term that survives is stored whole at least once.
    victim_tag, bystander_tag = f"xv{uuid.uuid4().hex[:6]}", f"qb{uuid.uuid4().hex[:6]}"
    victim, bystander = f"victim{uuid.uuid4().hex[:8]}", f"bystander{uuid.uuid4().hex[:8]}"
    memory = _sized_memory(entry_point, folder, config)
    try:
        _fill(memory, entry_point, folder, config, size, {victim_tag: victim, bystander_tag: bystander})
        before = _store_bytes(folder, overrides)
        redis_before = [t for m in members_of(memory) if redis_prefix(m) for t in redis_texts(redis_prefix(m))]
        assert any(victim_tag.encode() in b for b in before.values()) or any(
            victim_tag in t for _, t in redis_before), "the session is in no file before forget(): the test is blind"
        kept_before = views(memory.export(bystander))
        started = time.perf_counter()
        memory.forget(victim)
        took = time.perf_counter() - started
        _flush(memory)
        redis_left = [f"redis {where}" for m in members_of(memory) if redis_prefix(m)
                      for where, text in redis_texts(redis_prefix(m)) if victim_tag in text or victim in text]
        kept = views(memory.export(bystander))
    finally:
        memory.close()
    files = _store_bytes(folder, overrides)
    needles = [victim.encode(), victim_tag.encode()]
    left = sorted(f"{path}: {needle.decode()} x{data.count(needle)}" for path, data in files.items()
                  for needle in needles if needle in data) + redis_left
    assert not left, f"forget() at {size} exchanges left the session in: {left}"
    bystander_whole = kept == kept_before and any(kept.values())
    assert bystander_whole, f"forget() touched the other session: {kept_before} -> {kept}"
    record("privacy-size", (name, f"{size:>5,}"), **{  # right-aligned: rows sort by size
        "files searched": len(files), "bytes searched": sum(len(b) for b in files.values()), "remnants found": 0,
        "other session intact": bystander_whole, "forget took (s)": round(took, 2)})
