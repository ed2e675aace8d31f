"""A composite member whose store does not answer at start waits for it, then joins the others
with every update it missed (the logic, with a member whose store is switched off; the real
PostgreSQL case is in test_postgres.py)."""
from __future__ import annotations

import threading
import time

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins import composite as composite_module
from ovos_memory_plugins._core.log import LOG
from ovos_memory_plugins._memory import late_start
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.errors import ConfigError, StorageError, StoreUnavailable
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.recency import RecencyMemory
from tests._outage import refuse_unless_up
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


class DownAtFirst(RecencyMemory):
    """A window whose store does not answer until ``up`` (then, with ``broken``, a bad config)."""

    up = False
    broken = False
    attempts = 0

    def __init__(self, config=None):
        refuse_unless_up(DownAtFirst)
        super().__init__(config)


class DownAtFirstLexical(LexicalMemory):
    """A keyword memory whose store does not answer until ``DownAtFirst.up``."""

    def __init__(self, config=None):
        if not DownAtFirst.up:
            raise StoreUnavailable("connection refused")
        super().__init__(config)


class SlowToStart(RecencyMemory):
    """A member that takes a while to start (local-rag loading its model), during which the store
    of the member before it comes up."""

    def __init__(self, config=None):
        DownAtFirst.up = True
        time.sleep(0.3)
        super().__init__(config)


@pytest.fixture
def late(monkeypatch):
    real = composite_module.load_memory_plugin
    extra = {"test-down": DownAtFirst, "test-slow": SlowToStart, "test-down-lexical": DownAtFirstLexical}
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda name: extra.get(name) or real(name))
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
        # Its store may hold the session from an earlier run: the forget says it is not whole.
        with pytest.raises(StorageError, match="but not by test-down failed to start.*forget again"):
            memory.forget("s")
        assert "s" not in memory.sessions()
        assert memory.not_started() == {"test-down": "failed to start (ConfigError: 'max_history' must be a number)"}


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


def test_a_store_that_answers_while_the_composite_is_still_starting_is_used(late, tmp_path):
    with CompositeMemory({"members": [
            {"module": "test-down", "config": {"db_path": str(tmp_path / "d.db")}},
            {"module": "test-slow", "config": {"db_path": str(tmp_path / "s.db")}}]}) as memory:
        wait_for(lambda: len(memory.members) == 2)
        assert [m.name for m in memory.members] == ["test-down", "test-slow"]
        assert not memory.degraded()


def test_in_person_scope_the_member_gets_what_the_person_said_while_it_waited(late, tmp_path):
    people = {"alice": ["kitchen", "car"]}
    with composite(tmp_path, scope="person", people=people) as memory:
        say(memory, "kitchen", "from the kitchen")
        say(memory, "car", "from the car")
        DownAtFirst.up = True
        wait_for(lambda: len(memory.members) == 2)
        late_member = memory.members[1].memory
        assert [m.content for m in late_member.get_history("kitchen") if m.role == U] == [
            "from the kitchen", "from the car"]


def test_a_turn_during_the_join_reaches_the_member_that_joins(late, tmp_path, monkeypatch):
    real_join = CompositeMemory._join_late
    turn = []

    def slow_join(self, spec, memory):  # a turn arrives while the member joins
        turn.append(threading.Thread(target=say, args=(self, "s", "during the join")))
        turn[0].start()
        time.sleep(0.2)
        real_join(self, spec, memory)

    monkeypatch.setattr(CompositeMemory, "_join_late", slow_join)
    with composite(tmp_path) as memory:
        say(memory, "s", "before")
        DownAtFirst.up = True
        wait_for(lambda: len(memory.members) == 2)
        turn[0].join()
        say(memory, "s", "after")
        assert [m.content for m in memory.members[1].memory.get_history("s") if m.role == U] == [
            "before", "during the join", "after"]


def test_flush_is_not_done_and_close_says_what_is_lost_while_a_replay_runs(late, tmp_path, monkeypatch):
    replayed, errors = [], []
    monkeypatch.setattr(LOG, "error", lambda msg, *a, **k: errors.append(str(msg)))

    def slow_replay(memory, session_id, batch, ts):
        time.sleep(0.1)
        replayed.append(batch[0].content)

    monkeypatch.setattr(CompositeMemory, "_replay_late", staticmethod(slow_replay))
    monkeypatch.setattr(late_start, "CLOSE_WAIT_S", 0.3)  # a replay longer than close() waits for
    memory = composite(tmp_path)
    for n in range(10):
        say(memory, "s", f"u{n}")
    DownAtFirst.up = True
    wait_for(lambda: replayed)
    assert memory.flush(0) is False, "flush() said done while a replay runs"
    memory.close()
    done = list(replayed)
    time.sleep(0.3)
    assert replayed == done, "a replay went on after close() returned"
    assert len(done) < 10 and any(f"the {10 - len(done)} update(s) said meanwhile were never stored" in e
                                  for e in errors), errors


def test_a_member_given_up_after_waiting_is_said_with_what_it_loses(late, tmp_path, monkeypatch):
    errors = []
    monkeypatch.setattr(LOG, "error", lambda msg, *a, **k: errors.append(str(msg)))
    with composite(tmp_path) as memory:
        say(memory, "s", "kept for it")
        DownAtFirst.broken = True
        wait_for(lambda: "failed to start" in memory.degraded().get("test-down", ""))
        wait_for(lambda: any("failed to start" in e for e in errors))
        assert any("test-down' will not start; the 1 update(s) kept for it are dropped" in e for e in errors), errors


def test_storing_a_document_is_refused_while_a_member_waits(late, tmp_path):
    with composite(tmp_path) as memory, pytest.raises(StoreUnavailable, match="nothing was stored"):
        memory.store("a note", "s")


def test_a_cause_hidden_by_from_none_is_not_an_outage():
    try:
        try:
            raise StoreUnavailable("down")
        except StoreUnavailable:
            raise ConfigError("bad key") from None
    except ConfigError as exc:
        assert not late_start.store_unreachable(exc)


def test_flush_waits_for_the_attempt_it_starts(late, tmp_path, monkeypatch):
    monkeypatch.setattr(late_start, "FIRST_PAUSE_S", 600.0)  # the thread deep in its pause
    with composite(tmp_path) as memory:
        say(memory, "s", "said while down")
        DownAtFirst.up = True
        assert memory.flush(patience(10)), memory.degraded()
        assert [m.content for m in memory.members[1].memory.get_history("s") if m.role == U] == ["said while down"]


def test_close_just_after_the_store_comes_back_stores_what_was_kept(late, tmp_path, monkeypatch):
    monkeypatch.setattr(late_start, "FIRST_PAUSE_S", 600.0)
    memory = composite(tmp_path)
    say(memory, "s", "said while down")
    DownAtFirst.up = True
    memory.close()
    with RecencyMemory({"db_path": str(tmp_path / "d.db"), "max_history": 50}) as reopened:
        assert [m.content for m in reopened.get_history("s") if m.role == U] == ["said while down"]


def test_a_member_composite_whose_member_waits_refuses_changes_before_touching_any(late, tmp_path):
    inner = {"module": "ovos-memory-plugin-composite", "config": {"members": [
        {"module": "test-down", "config": {"db_path": str(tmp_path / "d.db")}}]}}
    with CompositeMemory({"members": [
            {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}}, inner]}) as outer:
        say(outer, "s", "my secret")
        with pytest.raises(StoreUnavailable, match="ovos-memory-plugin-composite/test-down cannot reach"):
            outer.import_exchanges("s", [{"question": "imported", "answer": "a"}])
        with pytest.raises(StoreUnavailable, match="nothing was forgotten"):
            outer.forget("s")
        assert users_words(outer) == ["my secret"], "a refused change changed something"


def test_what_a_member_missed_is_stored_with_the_time_it_was_said(late, tmp_path):
    with CompositeMemory({"members": [
            {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
            {"module": "test-down-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]}) as memory:
        before = time.time()
        say(memory, "s", "the zebra escaped")
        after = time.time()
        time.sleep(1.0)
        DownAtFirst.up = True
        assert memory.flush(patience(10))
        hits = memory.members[1].memory.search("zebra", "s")
        assert hits and before <= hits[0].metadata["ts"] <= after, (before, hits[0].metadata, after)


def test_an_update_stored_late_itself_keeps_its_time_for_a_member_that_waits(late, tmp_path):
    # A composite that is itself a late member is given its updates with their time (said_at):
    # what it keeps for its own waiting member carries that time, not the replay's.
    from ovos_memory_plugins._core.clock import said_at

    with CompositeMemory({"members": [
            {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
            {"module": "test-down-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]}) as memory:
        with said_at(1_700_000_000.0):
            say(memory, "s", "the zebra escaped")
        DownAtFirst.up = True
        assert memory.flush(patience(10))
        hits = memory.members[1].memory.search("zebra", "s")
        assert hits and hits[0].metadata["ts"] == 1_700_000_000.0, hits[0].metadata
