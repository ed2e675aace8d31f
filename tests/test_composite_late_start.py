"""A composite member whose store does not answer at start waits for it, then joins the others
with every update it missed (the logic, with a member whose store is switched off; the real
PostgreSQL case is in test_postgres.py)."""
from __future__ import annotations

import time

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins import composite as composite_module
from ovos_memory_plugins._memory import late_start
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.errors import ConfigError, StoreUnavailable
from ovos_memory_plugins.recency import RecencyMemory
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


class DownAtFirst(RecencyMemory):
    """A window whose store does not answer until ``up`` (then, with ``broken``, a bad config)."""

    up = False
    broken = False
    attempts = 0

    def __init__(self, config=None):
        DownAtFirst.attempts += 1
        if DownAtFirst.broken:
            raise ConfigError("'max_history' must be a number")
        if not DownAtFirst.up:
            try:
                raise ConnectionRefusedError("connection refused")
            except ConnectionRefusedError as exc:  # as a backend wraps it: the cause names the outage
                raise ConfigError("cannot open db_url 'postgresql://db.lan/memory'") from StoreUnavailable(str(exc))
        super().__init__(config)


@pytest.fixture
def late(monkeypatch):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda name: DownAtFirst if name == "test-down" else real(name))
    monkeypatch.setattr(late_start, "FIRST_PAUSE_S", 0.02)
    monkeypatch.setattr(late_start, "MAX_PAUSE_S", 0.05)
    DownAtFirst.up, DownAtFirst.broken, DownAtFirst.attempts = False, False, 0


def composite(tmp_path, **config):
    return CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
        {"module": "test-down", "config": {"db_path": str(tmp_path / "d.db"), "max_history": 50}},
    ], **config})


def say(memory, sid, text):
    memory.update_history([AgentMessage(U, text), AgentMessage(A, "noted")], sid)


def users_words(memory):
    return [m.content for m in memory.get_history("s") if m.role == U]


def wait_for(check, seconds=10.0):
    deadline = time.monotonic() + patience(seconds)
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_member_whose_store_is_down_at_start_joins_with_what_it_missed(late, tmp_path):
    with composite(tmp_path) as memory:
        assert [m.name for m in memory.members] == ["ovos-memory-plugin-recency"]
        assert "waiting for its store" in memory.degraded()["test-down"]
        for n in range(3):  # every turn answered meanwhile
            assert memory.build_conversation_context(f"turn {n}", "s")[-1].content == f"turn {n}"
            say(memory, "s", f"down {n}")
        say(memory, "other", "elsewhere")
        assert memory.flush(0) is False, "flush() said done while updates wait for a member"
        wait_for(lambda: DownAtFirst.attempts >= 3)  # tried again, in the background, while down
        assert [m.name for m in memory.members] == ["ovos-memory-plugin-recency"]
        DownAtFirst.up = True
        wait_for(lambda: len(memory.members) == 2)
        assert [m.name for m in memory.members] == ["ovos-memory-plugin-recency", "test-down"], "not in its place"
        say(memory, "s", "after")
        assert memory.flush(patience(10))
        late_member = memory.members[1].memory
        assert [m.content for m in late_member.get_history("s") if m.role == U] == [
            "down 0", "down 1", "down 2", "after"], "the updates it missed, in order, once each"
        assert [m.content for m in late_member.get_history("other") if m.role == U] == ["elsewhere"]
        assert "test-down" not in memory.degraded()


def test_while_a_member_waits_changes_of_stored_memory_are_refused_whole(late, tmp_path):
    with composite(tmp_path) as memory:
        say(memory, "s", "keep me")
        for change in (lambda: memory.forget("s"), lambda: memory.export("s"),
                       lambda: memory.import_exchanges("s", [{"question": "x", "answer": "y"}]),
                       lambda: memory.forget_exchange("s", "Q: keep me\nA: noted"),
                       lambda: memory.forget_fact("s", "x")):
            with pytest.raises(StoreUnavailable, match="test-down cannot reach its store yet; nothing was"):
                change()
        assert users_words(memory) == ["keep me"], "a refused forget forgot something"
        DownAtFirst.up = True
        wait_for(lambda: len(memory.members) == 2)
        memory.forget("s")
        assert users_words(memory) == [] and memory.members[1].memory.get_history("s") == []


def test_a_member_that_fails_otherwise_on_a_retry_is_given_up_and_said(late, tmp_path):
    with composite(tmp_path) as memory:
        DownAtFirst.broken = True
        wait_for(lambda: "failed to start" in memory.degraded().get("test-down", ""))
        attempts = DownAtFirst.attempts
        say(memory, "s", "hello")
        time.sleep(0.2)
        assert DownAtFirst.attempts == attempts, "a bad config is tried again"
        assert memory.flush(0), "updates kept for a member that will never start"
        memory.forget("s")  # nothing waits any more


def test_a_member_that_fails_for_another_reason_at_start_is_not_retried(late, tmp_path):
    DownAtFirst.broken = True
    with composite(tmp_path) as memory:
        time.sleep(0.2)
        assert DownAtFirst.attempts == 1
        assert "failed to start" in memory.degraded()["test-down"]


def test_the_configured_primary_takes_over_the_window_once_it_starts(late, tmp_path):
    with composite(tmp_path, primary="test-down") as memory:
        say(memory, "s", "first")
        assert memory.primary.name == "ovos-memory-plugin-recency"  # meanwhile, the one that started
        DownAtFirst.up = True
        wait_for(lambda: len(memory.members) == 2)
        assert memory.primary.name == "test-down"
        assert users_words(memory) == ["first"]


def test_closing_while_a_member_waits_stops_trying_and_says_what_it_loses(late, tmp_path, caplog):
    memory = composite(tmp_path)
    say(memory, "s", "lost to it")
    memory.close()
    attempts = DownAtFirst.attempts
    DownAtFirst.up = True
    time.sleep(0.2)
    assert DownAtFirst.attempts == attempts, "tried again after close()"
    assert not any(t.name.endswith("-late-start") and t.is_alive() for t in __import__("threading").enumerate())


def test_a_late_member_on_an_earlier_members_store_is_refused_before_it_stores_anything(late, tmp_path):
    same = str(tmp_path / "r.db")
    with CompositeMemory({"members": [{"module": "ovos-memory-plugin-recency", "config": {"db_path": same}},
                                      {"module": "test-down", "config": {"db_path": same}}]}) as memory:
        say(memory, "s", "once")
        DownAtFirst.up = True
        wait_for(lambda: "test-down (second)" in memory.degraded())
        assert [m.name for m in memory.members] == ["ovos-memory-plugin-recency"]
        assert "test-down" not in memory.degraded()
        assert users_words(memory) == ["once"], "stored twice in the shared store"
        assert memory.flush(0)
