"""Several satellites write one store at once: every update is stored exactly once.

Each process runs several threads, all writing the same session of the same file (or Redis
key prefix), with summaries or compaction running where the backend has them: longterm folds
through a fake LLM whose "summary" keeps exactly the markers it was given, Redis compacts
through a summariser that does the same, so a message folded twice or dropped shows up.
"""
from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from ovos_memory_plugins.testing.llm import FakeLLMServer
from tests._timing import patience
from tests.reliability._harness import (
    Writer,
    check_exactly_once,
    make_memory,
    marker,
    marker_llm_reply,
    markers_in,
    spec_for,
    store_cases,
    writer_env,
)
from tests.reliability._report import record

CASES = store_cases()
IDS = [name for name, _, _ in CASES]


#: Person scope: every satellite (writer process) of the person has a session of its own.
ONE_PERSON = {"scope": "person", "people": {"ana": ["ana-*"]}}


def concurrency_run(name: str, entry_point: str, variant: dict[str, Any], tmp_path: Path, processes: int,
                    threads: int, per_thread: int, note: str = "", person: bool = False) -> Any:
    """The run; returns the window read back (in person scope, from a session none of the writers used)."""
    spec = spec_for(entry_point)
    overrides: dict[str, Any] = {**spec.keep_all, **spec.compaction, **variant, **(ONE_PERSON if person else {})}
    if spec.namespace_key:
        overrides[spec.namespace_key] = f"rel:conc:{uuid.uuid4().hex}"
    folder, sid = tmp_path / "store", "ana-reader" if person else "shared-session"
    with contextlib.ExitStack() as stack:
        if spec.compaction and "api_url" in spec.keep_all and spec.keep_all["api_url"]:
            llm = stack.enter_context(FakeLLMServer(reply=marker_llm_reply))
            overrides.update(api_url=llm.url, request_timeout=10)
        # Create the store first, as an installed system would be: the race under test is the
        # writers', not two first-time schema creations (which the migration code serialises anyway).
        make_memory(entry_point, folder, overrides).close()
        env = writer_env(Path(os.environ["XDG_DATA_HOME"]))
        writers = [
            Writer({"entry_point": entry_point, "folder": str(folder), "overrides": overrides,
                    "sid": f"ana-satellite{p}" if person else sid,
                    "tag": f"p{p}", "start": 0, "stop": per_thread, "threads": threads, "marker_summaries": True},
                   tmp_path / f"writer{p}.log", env)
            for p in range(processes)
        ]
        acked = []
        try:
            for writer in writers:
                acks = writer.rest()
                assert acks and acks[-1] == "done", f"writer ended with {acks[-1:]}:\n{writer.output()}"
                assert writer.wait() == 0, f"writer failed:\n{writer.output()}"
                acked += acks[:-1]
        finally:
            for writer in writers:
                writer.close()
        total = processes * threads * per_thread
        assert len(acked) == total
        expected = [marker(f"p{p}t{t}", n) for p in range(processes) for t in range(threads)
                    for n in range(per_thread)]
        memory = make_memory(entry_point, folder, overrides)
        try:
            assert memory.flush(patience(120)) is not False
            found = check_exactly_once(memory, sid, expected)
            folded = markers_in(str(memory.export(sid).get("summary") or "")) if spec.compaction else []
            assert folded or not spec.compaction, "no summary/compaction ran during the test"
            window = memory.get_history(sid)
        finally:
            memory.close()
    record("concurrency", (name, f"{processes} x {threads} x {per_thread}"), **{"updates": total,
        "present exactly once": sum(len(v) for v in found.values()) // max(1, len(found)),
        "lost": 0, "duplicated": 0, "folded into summaries": len(folded), "note": note})
    return window


@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=IDS)
def test_two_processes_with_two_threads_each_lose_and_duplicate_nothing(name, entry_point, variant, tmp_path):
    concurrency_run(name, entry_point, variant, tmp_path / "quick", 2, 2, 10)


@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=IDS)
def test_two_satellites_of_one_person_lose_nothing_and_keep_each_ones_order(name, entry_point, variant, tmp_path):
    window = concurrency_run(f"{name}, person scope", entry_point, variant, tmp_path / "person", 2, 2, 10,
                             note="two sessions of one person", person=True)
    # Each writer thread's updates are in the window in the order it made them (the threads
    # interleave: the window is in the order the store received the turns).
    per_writer: dict[str, list[int]] = {}
    for message in window:
        for found in markers_in(message.content):
            tag, n = found.rsplit("n", 1)
            per_writer.setdefault(tag, []).append(int(n))
    for tag, numbers in per_writer.items():
        assert numbers == sorted(numbers), f"{tag}'s turns are out of order in the person's window: {numbers}"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=IDS)
def test_two_processes_with_four_threads_each_lose_and_duplicate_nothing(name, entry_point, variant, tmp_path):
    processes, threads, per_thread = spec_for(entry_point).concurrency
    note = spec_for(entry_point).note
    if str(variant.get("db_path", "")).endswith(".json"):  # a JSON window rewrites the whole file per update
        processes, threads, per_thread = 2, 4, 60
        note = "JSON file rewritten (fsync) per update"
    elif variant.get("backend") == "sqlite" and "longterm" in entry_point:
        per_thread, note = 250, "summaries by a marker-keeping fake LLM"
    elif variant.get("backend") == "sqlite" and "entity" in entry_point:
        note = "at most 200 exchanges may await extraction"
    concurrency_run(name, entry_point, variant, tmp_path, processes, threads, per_thread, note)
