"""A crash at any instant leaves a readable store holding every update that returned.

A child process writes through the backend and acknowledges each returned ``update_history``
over a pipe; the parent SIGKILLs it at random moments, reopens the store in-process, and checks
through ``export()`` that every acknowledged update is there exactly once. Then the child is
restarted from the last acknowledged update, until all updates are written.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest

from ovos_memory_plugins.testing.llm import FakeLLMServer
from tests._timing import patience
from tests.reliability._harness import (
    CLOSED_LLM,
    Zygote,
    check_exactly_once,
    make_memory,
    marker,
    marker_llm_reply,
    markers_in,
    recording_logs,
    spec_for,
    store_cases,
    writer_env,
)
from tests.reliability._report import record

#: Crashes while summaries/compaction run too: a fake LLM (or summariser) keeps exactly the
#: markers it folds, so a message lost or folded twice by a kill mid-summary shows up.
SUMMARY_CASES = [
    ("ovos-memory-plugin-longterm (summaries)", "ovos-memory-plugin-longterm",
     {"summarize_every": 3, "recent_window": 2, "max_summary_tokens": 100_000, "api_url": "{llm}",
      "request_timeout": 10}),
    ("ovos-memory-plugin-redis (compaction)", "ovos-memory-plugin-redis",
     {"compact_threshold": 4, "keep_recent": 1, "max_summary_tokens": 1_000_000, "lock_timeout": 2}),
]
CASES = store_cases() + [c for c in SUMMARY_CASES if c[1] in {ep for _, ep, _ in store_cases()}]
IDS = [name for name, _, _ in CASES]
_LLM_HOST = CLOSED_LLM.split("//")[1].split("/")[0]


def _seed(entry_point: str) -> int:
    return int(os.environ.get("OVOS_MEMORY_RELIABILITY_SEED", "0")) ^ zlib.crc32(entry_point.encode())


def _overrides(entry_point: str, variant: dict[str, Any]) -> dict[str, Any]:
    spec = spec_for(entry_point)
    overrides = {**spec.keep_all, **variant}
    if spec.namespace_key:
        overrides[spec.namespace_key] = f"rel:crash:{uuid.uuid4().hex}"
    return overrides


def _parse(ack: str, tag: str, expected: int) -> None:
    assert ack == f"{tag} {expected}", f"acknowledgements out of order: got {ack!r}, expected {tag} {expected}"


#: Person scope: the writer talks to the kitchen satellite, the checks read the bedroom's session.
ONE_PERSON = {"scope": "person", "people": {"ana": ["kitchen", "bedroom"]}}


def crash_run(name: str, entry_point: str, variant: dict[str, Any], tmp_path: Path, monkeypatch: Any, total: int,
              min_kills: int, person: bool = False) -> dict[str, int]:
    rng = random.Random(_seed(name))
    folder, sid, tag = tmp_path / "store", ("kitchen", "bedroom") if person else "crash-session", "c"
    overrides = _overrides(entry_point, {**variant, **(ONE_PERSON if person else {})})
    with contextlib.ExitStack() as stack:
        if overrides.get("api_url") == "{llm}":
            overrides["api_url"] = stack.enter_context(FakeLLMServer(reply=marker_llm_reply)).url
        zygote = Zygote(tmp_path / "writer.log", writer_env(Path(os.environ["XDG_DATA_HOME"])))
        stack.callback(zygote.close)
        figures = _crash_loop(entry_point, tmp_path, monkeypatch, total, min_kills, rng, zygote, folder, sid, tag,
                              overrides)
    record("crash", (name, f"{'full' if total >= 1000 else 'quick'}, {total:,} updates"), **figures)
    return figures


def _crash_loop(entry_point: str, tmp_path: Path, monkeypatch: Any, total: int, min_kills: int, rng: random.Random,
                zygote: Zygote, folder: Path, sids: str | tuple[str, str], tag: str,
                overrides: dict[str, Any]) -> dict[str, int]:
    """``sids``: one session, or (the one written, the one read back) of one person."""
    written, sid = (sids, sids) if isinstance(sids, str) else sids
    acked = kills = checked = committed_in_flight = folded = 0
    while acked < total:
        kills_left = min_kills - kills
        # A life that will be killed writes at most twice its share, then idles until the kill:
        # otherwise a fast backend finishes before the parent's SIGKILL lands.
        share = max(1, (total - acked) // (kills_left + 1)) if kills_left > 0 else total - acked
        stop = min(total, acked + 2 * share) if kills_left > 0 else total
        job = {"entry_point": entry_point, "folder": str(folder), "overrides": overrides, "sid": written, "tag": tag,
               "start": acked, "stop": stop, "idle_at_end": kills_left > 0, "marker_summaries": True}
        writer = zygote.start(job)
        try:
            if kills_left > 0:
                if rng.random() < 0.15:
                    time.sleep(rng.uniform(0.0, 0.05))  # while opening or migrating the store
                else:
                    for _ in range(rng.randint(1, max(1, 2 * share - 1))):
                        ack = writer.next_ack()
                        if ack is None or not ack.startswith(tag + " "):
                            break
                        _parse(ack, tag, acked)
                        acked += 1
                    time.sleep(rng.uniform(0.0, 0.004))  # land inside the next call
                writer.kill()
                kills += 1
            for ack in writer.rest():
                if ack.startswith(tag + " "):
                    _parse(ack, tag, acked)
                    acked += 1
                else:
                    assert ack == "done", f"the writer ended with {ack!r}:\n{writer.output()}"
            if kills_left <= 0:
                assert writer.wait() == 0, f"the writer failed:\n{writer.output()}"
        finally:
            writer.close()

        # The store must open cleanly and hold every acknowledged update, once.
        with recording_logs(monkeypatch) as logs:
            memory = make_memory(entry_point, folder, overrides)
            try:
                assert memory.flush(patience(60)) is not False, "background work did not finish after the restart"
                in_flight = marker(tag, acked)
                found = check_exactly_once(memory, sid, [marker(tag, n) for n in range(acked)], [in_flight])
                checked += acked
                if any(view[in_flight] for view in found.values()):
                    acked += 1  # committed but killed before the ack: the next writer starts after it
                    committed_in_flight += 1
                folded = len(markers_in(str(memory.export(sid).get("summary") or "")))
                context = memory.build_conversation_context("what do I like?", sid)
                assert context[-1].content == "what do I like?"
            finally:
                memory.close()
        assert not logs.errors_without(_LLM_HOST), f"reopening after a kill logged errors: {logs.errors}"
    assert kills >= min_kills
    return {"kills": kills, "updates acknowledged": acked, "updates checked": checked,
            "in flight, found committed": committed_in_flight, "folded into summaries": folded, "lost": 0}


@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=IDS)
def test_a_few_sigkills_lose_no_acknowledged_update(name, entry_point, variant, tmp_path, monkeypatch):
    figures = crash_run(name, entry_point, variant, tmp_path, monkeypatch, total=40, min_kills=3)
    assert figures["updates acknowledged"] == 40


@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=IDS)
def test_a_few_sigkills_in_person_scope_lose_no_acknowledged_update(name, entry_point, variant, tmp_path,
                                                                    monkeypatch):
    figures = crash_run(f"{name}, person scope", entry_point, variant, tmp_path, monkeypatch, total=40, min_kills=3,
                        person=True)
    assert figures["updates acknowledged"] == 40


@pytest.mark.slow
@pytest.mark.parametrize(("name", "entry_point", "variant"), CASES, ids=IDS)
def test_a_thousand_updates_survive_twenty_sigkills(name, entry_point, variant, tmp_path, monkeypatch):
    figures = crash_run(name, entry_point, variant, tmp_path, monkeypatch, total=1000, min_kills=20)
    if name in dict((c[0], c) for c in SUMMARY_CASES):
        assert figures["folded into summaries"] > 0, "no summary was written: the kills never hit one"
    assert figures["kills"] >= 20 and figures["updates acknowledged"] == 1000
