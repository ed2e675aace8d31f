"""Outages and repeated operations: nothing reported done that was not, nothing done twice.

* every ``ovos-memory`` command that cannot reach its store (Redis down) fails with one line on
  stderr and a non-zero exit; none reports an empty store or an import that went nowhere;
* messages held while Redis is down reach it, in order, once it is back: they are in the next
  context, ``flush()`` is True only when nothing is held, ``close()`` writes what it holds;
* importing the same export twice changes nothing, for every backend.
"""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests._redis import RedisServer
from tests._timing import patience
from tests.reliability._harness import (
    entry_points,
    exchange,
    make_memory,
    marker,
    markers_in,
    namespaced,
    persistent_entry_points,
    spec_for,
    views,
)
from tests.reliability._report import record

REDIS = "ovos-memory-plugin-redis"


def _redis_config(server: RedisServer) -> dict:
    return {"url": server.url, "socket_timeout": 0.3, "retry_after": 0.1, "compact_token_threshold": 0,
            "max_history": 0, "api_url": None, "prefix": f"rel:outage:{uuid.uuid4().hex}"}


def _user_markers(messages) -> list[str]:
    return [m for msg in messages if getattr(msg, "content", None) for m in markers_in(msg.content)]


@pytest.mark.parametrize("command", [["sessions"], ["stats"], ["export", "--all"], ["export", "s"], ["show", "s"],
                                     ["forget", "s"], ["import", "{file}"]])
def test_a_command_that_cannot_reach_redis_fails_in_one_line(command, tmp_path, capsys):
    from ovos_memory_plugins.cli import main

    server = RedisServer().start()
    config = _redis_config(server)
    export = tmp_path / "export.json"
    window = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    export.write_text(json.dumps({"plugin": REDIS, "session_id": "s", "window": window}))
    try:
        server.stop()
        args = [a.replace("{file}", str(export)) for a in command]
        code = main([*args, "--module", REDIS, "--config", json.dumps(config)])
        captured = capsys.readouterr()
    finally:
        server.cleanup()
    err = captured.err.strip()
    assert code != 0, f"{command} with Redis down exited 0; stdout {captured.out!r}"
    assert err.count("\n") == 0 and err, f"not one line on stderr: {err!r}"
    assert "imported" not in captured.out and '"sessions": []' not in captured.out, captured.out
    record("outage", (f"Redis down: ovos-memory {' '.join(command).replace('{file}', 'FILE')}", REDIS), tried=1, **{
        "failed loudly or done": True, "reported done but not done": 0, "lost": 0, "duplicated": 0})


def test_messages_held_while_redis_is_down_reach_it_in_order_once_it_is_back(tmp_path):
    server = RedisServer().start()
    sid = "held"
    try:
        with make_memory(REDIS, tmp_path / "store", _redis_config(server)) as memory:
            memory.update_history(exchange("a", 0), sid)
            server.stop()
            for n in range(3):
                memory.update_history(exchange("h", n), sid)
            assert memory.flush(patience(5)) is False, "flush() said done while messages are held"
            server.start()
            time.sleep(0.2)  # past retry_after
            context = memory.build_conversation_context("what do I like?", sid)  # no new update first
            in_context = _user_markers(context)
            assert memory.flush(patience(10)) is True, "flush() not done with Redis back"
            stored = _user_markers(memory.get_history(sid))
            # ... and close() writes what it holds when it can.
            server.stop()
            memory.update_history(exchange("z", 0), sid)
            server.start()
            time.sleep(0.2)
        with make_memory(REDIS, tmp_path / "store", {**_redis_config(server), "prefix": memory.settings.prefix}) \
                as reopened:
            after_close = _user_markers(reopened.get_history(sid))
    finally:
        server.cleanup()
    held = [marker("h", n) for n in range(3)]
    assert in_context == held, f"held messages missing from the context after recovery: {in_context}"
    assert stored == held, f"held messages not written in order: {stored}"
    # The test server keeps nothing across a restart: after the second one only what close() wrote is there.
    assert after_close == [marker("z", 0)], f"close() dropped what it held: {after_close}"
    record("outage", ("messages held while Redis was down, then Redis back", REDIS), tried=4, **{
        "failed loudly or done": True, "reported done but not done": 0, "lost": 0, "duplicated": 0})


@pytest.mark.parametrize("entry_point", [ep for ep in persistent_entry_points()] + ["ovos-memory-plugin-composite"])
def test_importing_the_same_export_twice_changes_nothing(entry_point, tmp_path):
    config = namespaced(entry_point, spec_for(entry_point).keep_all, "import")
    with make_memory(entry_point, tmp_path / "source", config) as source:
        for n in range(3):
            source.update_history(exchange("imp", n), "s")
        source.flush(patience(30))
        exported = json.loads(json.dumps(source.export("s")))
    target_config = namespaced(entry_point, config, "import")
    with make_memory(entry_point, tmp_path / "target", target_config) as target:
        target.import_session(exported, "t")
        target.flush(patience(30))
        once = views(target.export("t"))
        target.import_session(exported, "t")
        target.flush(patience(30))
        twice = views(target.export("t"))
        if hasattr(target, "search"):
            hits = [h.metadata.get("question") or h.content for h in target.search(marker("imp", 1), "t", top_k=10)]
    duplicated = sum(max(0, c - 1) for counts in twice.values() for c in counts.values())
    assert once and all(counts[marker("imp", n)] == 1 for counts in once.values() for n in range(3)), once
    assert twice == once, f"a second import changed the session: {once} -> {twice}"
    if hasattr(target, "search"):
        assert sum(marker("imp", 1) in h for h in hits) == 1, f"search returns an imported exchange twice: {hits}"
    record("outage", ("the same export imported twice", entry_point), tried=2, **{
        "failed loudly or done": True, "reported done but not done": 0, "lost": 0, "duplicated": duplicated})


WINDOWS = ("recency", "short-term", "lexical", "local-rag", "redis")
RETRIEVERS = ("lexical", "local-rag")
#: (what is wrong, the export, the backends it applies to: None for all).
BAD_EXPORTS = [
    ("None", None, None), ("a list", [], None), ("a string", "export.json", None),
    ("no session id", {"summary": "x"}, None),
    ("window not a list", {"session_id": "s", "window": "hi"}, WINDOWS),
    ("a message that is not a dict", {"session_id": "s", "window": ["hi"]}, WINDOWS),
    ("a message without content", {"session_id": "s", "window": [{"role": "user"}]}, WINDOWS),
    ("a document without content", {"session_id": "s", "documents": [{"metadata": {}}]}, RETRIEVERS),
    ("documents not a list", {"session_id": "s", "documents": {"content": "x"}}, RETRIEVERS),
    ("recent not a list", {"session_id": "s", "recent": "hi"}, ("longterm",)),
    ("facts not a list", {"session_id": "s", "facts": "likes tea"}, ("entity",)),
    ("members not a dict", {"session_id": "s", "members": ["x"]}, ("composite",)),
]
IMPORT_CASES = [(ep, name, data) for ep in entry_points() for name, data, kinds in BAD_EXPORTS
                if kinds is None or ep.removeprefix("ovos-memory-plugin-") in kinds]


@pytest.mark.parametrize(("entry_point", "bad", "data"), IMPORT_CASES, ids=[f"{c[0]}-{c[1]}" for c in IMPORT_CASES])
def test_a_malformed_import_is_a_clear_error_and_changes_nothing(entry_point, bad, data, tmp_path):
    config = namespaced(entry_point, spec_for(entry_point).keep_all, "import")
    folder = tmp_path / "store"
    with make_memory(entry_point, folder, config) as memory:
        memory.update_history(exchange("keep", 0), "s")
        memory.flush(patience(30))
        before = memory.export("s")
        files_before = _files(folder)
        with pytest.raises((TypeError, ValueError)) as caught:
            memory.import_session(data)
        memory.flush(patience(30))
        after = memory.export("s")
        files_after = _files(folder)
    message = str(caught.value)
    assert "export" in message or "session_id" in message, f"the error does not say what is wrong: {message}"
    assert after == before and files_after == files_before, "a refused import changed the store"
    record("misuse", ("an import of the wrong shape", entry_point), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.glob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def test_a_composite_whose_redis_member_is_down_never_reports_a_whole_forget(tmp_path):
    from ovos_memory_plugins.composite import CompositeMemory
    from ovos_memory_plugins.errors import StorageError

    server = RedisServer().start()
    try:
        members = [{"module": REDIS, "config": _redis_config(server)},
                   {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]
        with CompositeMemory({"members": members}) as memory:
            memory.update_history(exchange("f", 0), "s")
            memory.flush(patience(30))
            server.stop()
            with pytest.raises(StorageError):
                memory.forget("s")
            with pytest.raises(StorageError):
                memory.sessions()
            left = views(memory.members[1].memory.export("s"))
    finally:
        server.cleanup()
    assert not any(left.values()), f"the reachable member did not forget: {left}"
    record("outage", ("Redis member down: composite forget and sessions", "ovos-memory-plugin-composite"), tried=2,
           **{"failed loudly or done": True, "reported done but not done": 0, "lost": 0, "duplicated": 0})
