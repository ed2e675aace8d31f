"""A backend built while its store does not answer starts anyway: it answers turns from RAM, keeps
every update, and catches up once the store answers (the logic, with a backend whose store is
switched off; the real PostgreSQL case is in test_postgres.py)."""
from __future__ import annotations

import json
import threading
import time

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins._cli.persona import open_memory
from ovos_memory_plugins._memory import late_start
from ovos_memory_plugins._memory.waiting import StartingMemory, no_waiting, stand_in_config
from ovos_memory_plugins.errors import ConfigError, StorageError, StoreUnavailable
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.recency import RecencyMemory
from tests._outage import refuse_unless_up
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


class Switch:
    up = False
    broken = False
    attempts = 0
    writes, stored_before_cut, back = 0, 0, True


class DownAtFirst(RecencyMemory):
    """A window whose store does not answer until ``Switch.up`` (its stand-in, in RAM, always does)."""

    hold: threading.Event | None = None  # set: the stand-in's turns wait for it

    def __init__(self, config=None):
        if (config or {}).get("db_path") != ":memory:":
            refuse_unless_up(Switch)
        super().__init__(config)

    def build_conversation_context(self, utterance, session_id):
        if DownAtFirst.hold is not None and self.settings.db_path == ":memory:":
            DownAtFirst.hold.wait(patience(10))
        return super().build_conversation_context(utterance, session_id)


class DownAtFirstLexical(LexicalMemory):
    def __init__(self, config=None):
        if (config or {}).get("db_path") != ":memory:":
            refuse_unless_up(Switch)
        super().__init__(config)


@pytest.fixture(autouse=True)
def switch(monkeypatch):
    monkeypatch.setattr(late_start, "FIRST_PAUSE_S", 0.02)
    monkeypatch.setattr(late_start, "MAX_PAUSE_S", 0.05)
    Switch.up, Switch.broken, Switch.attempts = False, False, 0
    Switch.writes, Switch.stored_before_cut, Switch.back = 0, 0, True
    DownAtFirst.hold = None


def say(memory, sid, text, answer="noted"):
    memory.update_history([AgentMessage(U, text), AgentMessage(A, answer)], sid)


def users_words(memory, sid="s"):
    return [m.content for m in memory.get_history(sid) if m.role == U]


def wait_for(check, seconds=10.0):
    deadline = time.monotonic() + patience(seconds)
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_backend_whose_store_is_down_at_start_answers_and_catches_up(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db"), "max_history": 50}) as memory:
        assert isinstance(memory, StartingMemory) and memory.memory is None
        assert "waiting for its store" in memory.degraded()["ovos-memory-plugin-recency"]
        for n in range(3):
            context = memory.build_conversation_context(f"turn {n}", "s")
            assert context[-1].content == f"turn {n}"
            say(memory, "s", f"down {n}")
        assert [m.content for m in memory.build_conversation_context("now", "s") if m.role == U][:3] == [
            "down 0", "down 1", "down 2"], "what was said while it waited is not in the turn"
        say(memory, "other", "elsewhere")
        assert memory.flush(0) is False, "flush() said done while updates wait for the store"
        wait_for(lambda: Switch.attempts >= 3)  # tried again in the background
        assert memory.memory is None
        Switch.up = True
        wait_for(lambda: memory.memory is not None)
        say(memory, "s", "after")
        assert memory.flush(patience(10))
        assert isinstance(memory.memory, DownAtFirst)
        assert users_words(memory.memory) == ["down 0", "down 1", "down 2", "after"], "in order, once each"
        assert users_words(memory.memory, "other") == ["elsewhere"]
        assert memory.degraded() == {}
        memory.forget("s")  # the backend's own, now
        assert users_words(memory) == []
    with no_waiting():
        reopened = RecencyMemory({"db_path": str(tmp_path / "w.db")})
    try:
        assert users_words(reopened, "other") == ["elsewhere"], "the kept updates did not reach the file"
    finally:
        reopened.close()


def test_updates_kept_while_waiting_are_stored_with_the_time_they_were_said(tmp_path):
    with DownAtFirstLexical({"db_path": str(tmp_path / "l.db")}) as memory:
        say(memory, "s", "the zqplum tree in the garden")
        said = time.time()
        time.sleep(0.3)
        Switch.up = True
        assert memory.flush(patience(10))
        hits = memory.search("zqplum", "s", top_k=1)
        assert hits and "zqplum" in hits[0].content
        assert abs(hits[0].metadata["ts"] - said) < 0.25, "stored with the time it was caught up, not said"


def test_while_it_waits_what_needs_the_store_is_refused_and_nothing_is_lost(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db")}) as memory:
        say(memory, "s", "keep me")
        for call in (lambda: memory.forget("s"), lambda: memory.export("s"), lambda: memory.sessions(),
                     lambda: memory.import_session({"plugin": "x", "session_id": "s"})):
            with pytest.raises(StoreUnavailable, match="its store does not answer yet; nothing was done"):
                call()
        assert users_words(memory) == ["keep me"]
        Switch.up = True
        assert memory.flush(patience(10))
        assert users_words(memory.memory) == ["keep me"]


def test_bad_messages_are_refused_at_the_boundary_and_not_kept(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db")}) as memory:
        with pytest.raises((TypeError, ValueError)):
            memory.update_history([{"role": "user"}], "s")
        with pytest.raises((TypeError, ValueError)):
            memory.update_history([{"role": "user", "content": "x"}], None)
        say(memory, "s", "good")
        Switch.up = True
        assert memory.flush(patience(10))
        assert users_words(memory.memory) == ["good"]


def test_a_setting_assigned_while_waiting_applies_once_it_starts(tmp_path):
    with DownAtFirstLexical({"db_path": str(tmp_path / "l.db"), "max_history": 50}) as memory:
        assert memory.max_history == 50
        memory.max_history = 2
        assert memory.max_history == 2
        assert memory.db_path == str(tmp_path / "l.db"), "the stand-in's store shown as the configured one"
        with pytest.raises(AttributeError):
            memory.db_path = "elsewhere.db"
        Switch.up = True
        assert memory.flush(patience(10))
        assert memory.memory.max_history == 2


def test_other_failures_at_start_still_raise():
    Switch.broken = True
    with pytest.raises(ConfigError, match="max_history"):
        DownAtFirst({"db_path": "w.db"})


def test_without_waiting_an_unreachable_store_raises_as_before(tmp_path):
    with no_waiting(), pytest.raises(ConfigError, match="cannot open db_url") as info:
        DownAtFirst({"db_path": str(tmp_path / "w.db")})
    assert isinstance(info.value.__cause__, StoreUnavailable)


def test_a_management_command_does_not_wait_for_the_store(monkeypatch):
    from ovos_memory_plugins._cli import persona

    monkeypatch.setattr(persona, "memory_class", lambda module, *a: DownAtFirst)
    with pytest.raises(ConfigError, match="cannot open db_url"):
        open_memory("test-down", {"db_path": "w.db"})


def test_a_backend_that_then_fails_otherwise_goes_on_from_ram_and_says_so(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db")}) as memory:
        Switch.broken = True
        wait_for(lambda: "failed to start" in memory.degraded()["ovos-memory-plugin-recency"])
        attempts = Switch.attempts
        say(memory, "s", "still heard")
        time.sleep(0.2)
        assert Switch.attempts == attempts, "a bad config is tried again"
        assert users_words(memory) == ["still heard"]
        with pytest.raises(StorageError, match="failed to start") as refused:
            memory.forget("s")
        assert not isinstance(refused.value, StoreUnavailable), "an outage said where no retry will help"


def test_closing_while_it_waits_stops_trying(tmp_path):
    memory = DownAtFirst({"db_path": str(tmp_path / "w.db")})
    say(memory, "s", "lost")
    memory.close()
    memory.close()  # idempotent
    attempts = Switch.attempts
    Switch.up = True
    time.sleep(0.2)
    assert Switch.attempts == attempts, "tried again after close()"
    assert not any(t.name.endswith("-late-start") and t.is_alive() for t in __import__("threading").enumerate())


def test_the_stand_in_keeps_its_store_in_ram():
    config = {"db_url": "postgresql://db.lan/memory", "db_path": "x.db", "backend": "sqlite", "max_history": 4}
    assert stand_in_config(RecencyMemory, config) == {"db_path": ":memory:", "backend": "memory", "max_history": 4}
    assert stand_in_config(LexicalMemory, {"db_url": "postgresql://db.lan/memory"}) == {"db_path": ":memory:"}
    assert config["db_url"] == "postgresql://db.lan/memory", "the caller's config was changed"


def test_a_turn_answered_by_the_stand_in_as_the_backend_starts_is_answered_whole(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db")}) as memory:
        say(memory, "s", "said while down")
        DownAtFirst.hold = threading.Event()
        answers = []
        turn = threading.Thread(target=lambda: answers.append(memory.build_conversation_context("now", "s")))
        turn.start()
        Switch.up = True
        wait_for(lambda: memory.memory is not None)
        stand_in = memory._stand_in
        assert not stand_in._closed, "the stand-in was closed under a turn it was answering"
        DownAtFirst.hold.set()
        turn.join(patience(10))
        assert [m.content for m in answers[0]] == ["said while down", "noted", "now"]
        wait_for(lambda: stand_in._closed)  # closed once its last turn was answered, off the turn's thread
        assert [m.content for m in memory.build_conversation_context("later", "s")][-1] == "later"


# -- found by review ---------------------------------------------------------------------------
def test_updates_given_as_a_generator_are_kept_whole_and_as_they_were_when_given(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db")}) as memory:
        memory.update_history((m for m in [AgentMessage(U, "from a generator"), AgentMessage(A, "ok")]), "s")
        mine = [AgentMessage(U, "as said"), AgentMessage(A, "ok")]
        memory.update_history(mine, "s")
        mine[0].content = "edited later by the caller"
        Switch.up = True
        assert memory.flush(patience(10))
        assert users_words(memory.memory) == ["from a generator", "as said"]


def test_the_live_session_view_is_refused_while_it_waits_so_a_forget_cannot_be_undone(tmp_path):
    with DownAtFirst({"db_path": str(tmp_path / "w.db")}) as memory:
        say(memory, "s", "secret")
        with pytest.raises(StoreUnavailable):
            del memory.session2history["s"]
        Switch.up = True
        assert memory.flush(patience(10))
        del memory.session2history["s"]  # the backend's own, now
        assert users_words(memory.memory) == []


def test_a_setting_assigned_while_waiting_applies_before_what_was_kept_is_replayed(tmp_path):
    with DownAtFirstLexical({"db_path": str(tmp_path / "l.db"), "max_history": 2}) as memory:
        memory.max_history = 20
        for n in range(5):
            say(memory, "s", f"u{n}")
        Switch.up = True
        assert memory.flush(patience(10))
        assert users_words(memory.memory) == [f"u{n}" for n in range(5)], "trimmed by the old value"


def test_once_started_the_stand_in_is_let_go_and_the_config_is_the_backends(tmp_path):
    import gc
    import weakref

    config = {"db_path": str(tmp_path / "w.db")}
    with DownAtFirst(config) as memory:
        assert memory.config["db_path"] == config["db_path"], "the stand-in's RAM store shown as the config"
        stand_in = weakref.ref(memory._stand_in)
        Switch.up = True
        assert memory.flush(patience(10))
        gc.collect()
        assert stand_in() is None, "the stand-in (its RAM store, its model) is kept for the persona's life"
        assert memory.config is memory.memory.config
        assert memory.system_prompt == memory.memory.system_prompt


def test_a_started_memory_closed_answers_as_its_backend_closed(tmp_path):
    memory = DownAtFirst({"db_path": str(tmp_path / "w.db")})
    say(memory, "s", "said while down")
    Switch.up = True
    assert memory.flush(patience(10))
    say(memory, "s", "said after start")
    memory.close()
    assert memory.degraded() == memory.memory.degraded()
    assert memory.get_history("s") == memory.memory.get_history("s")


def test_it_counts_as_an_instance_of_its_class_and_shows_its_classes_signature(tmp_path):
    import inspect

    with DownAtFirstLexical({"db_path": str(tmp_path / "l.db")}) as memory:
        assert isinstance(memory, DownAtFirstLexical) and isinstance(memory, LexicalMemory)
        assert not isinstance(memory, RecencyMemory)
    assert list(inspect.signature(LexicalMemory).parameters) == ["config"]


class Tagged(DownAtFirst):
    def __init__(self, config=None, tag="none"):
        self.tag = tag
        super().__init__(config)


def test_a_class_given_more_than_its_config_raises_as_before(tmp_path):
    with pytest.raises(ConfigError, match="cannot open db_url"):
        Tagged({"db_path": str(tmp_path / "w.db")}, tag="kitchen")


class NoStandIn(DownAtFirst):
    def __init__(self, config=None):
        if (config or {}).get("db_path") == ":memory:":
            raise RuntimeError("no RAM store for this one")
        super().__init__(config)


def test_when_the_stand_in_fails_too_the_stores_error_is_raised_with_its_cause(tmp_path):
    with pytest.raises(ConfigError, match="cannot open db_url") as info:
        NoStandIn({"db_path": str(tmp_path / "w.db")})
    assert isinstance(info.value.__cause__, StoreUnavailable)


def test_a_server_that_still_does_not_answer_is_probed_not_built_again(monkeypatch):
    from ovos_memory_plugins.storage import postgres

    def probe(url, timeout):
        if not Switch.up:
            raise StoreUnavailable(f"cannot connect to {url}")

    monkeypatch.setattr(postgres, "probe", probe)
    with DownAtFirst({"db_url": "postgresql://ovos@127.0.0.1:1/memory?connect_timeout=1"}) as memory:
        time.sleep(0.3)  # several attempts, each building it again would say its config's warnings again
        assert Switch.attempts == 1, "built again while the server does not answer"
        Switch.up = True  # the probe answers: it is built again (here it then finds no server there)
        wait_for(lambda: Switch.attempts >= 2)
        assert memory.memory is None


class FailsMidReplay(DownAtFirst):
    """Its store goes away again after ``Switch.stored_before_cut`` writes, until ``Switch.back``."""

    def _store_batch(self, session_id, batch):
        if self.settings.db_path != ":memory:":
            Switch.writes += 1
            if Switch.writes > Switch.stored_before_cut and not Switch.back:
                raise StoreUnavailable("the database went away again")
        return super()._store_batch(session_id, batch)


def test_a_store_that_goes_away_during_the_replay_loses_nothing_and_stores_nothing_twice(tmp_path):
    Switch.writes, Switch.stored_before_cut, Switch.back = 0, 40, False
    said = [f"u{n:03d}" for n in range(150)]
    with FailsMidReplay({"db_path": str(tmp_path / "w.db"), "max_history": 400}) as memory:
        for text in said:
            say(memory, "s", text)
        Switch.up = True
        wait_for(lambda: Switch.writes > 41)  # the replay ran into the second outage
        time.sleep(0.2)
        assert memory.memory is None, "started with updates still held"
        Switch.back = True
        say(memory, "s", "after")
        assert memory.flush(patience(10))
        assert users_words(memory.memory) == [*said, "after"], "lost or stored twice"


@pytest.mark.parametrize("error", ["EROFS", "ENOSPC"])
@pytest.mark.parametrize("backend", ["recency", "longterm", "entity"])
def test_a_json_store_on_a_read_only_or_full_file_system_waits_for_it_and_catches_up(tmp_path, monkeypatch,
                                                                                    backend, error):
    # A remount or a cleanup fixes it without a change of config: the persona must load.
    import errno
    import os

    from ovos_memory_plugins._core import paths
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.longterm import LongTermMemory

    cls = {"recency": RecencyMemory, "longterm": LongTermMemory, "entity": EntityMemory}[backend]
    config = {"db_path": str(tmp_path / "m.json")} | ({} if backend == "recency" else {"api_url": None})
    real_open, down = os.open, [True]

    def fs_open(path, flags, *args, **kwargs):
        if down[0] and str(path).endswith(".lock"):
            raise OSError(getattr(errno, error), os.strerror(getattr(errno, error)), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(paths.os, "open", fs_open)
    with cls(config) as memory:
        assert isinstance(memory, StartingMemory) and memory.memory is None
        memory.update_history([AgentMessage(U, "My name is Ana."), AgentMessage(A, "Hello Ana.")], "s")
        assert memory.build_conversation_context("hi", "s")[-1].content == "hi"
        down[0] = False
        wait_for(lambda: memory.memory is not None)
        assert memory.flush(patience(10))
    with no_waiting(), cls(config) as reopened:
        assert "Ana" in json.dumps(reopened.export("s"), default=str), "what was said while it waited was lost"
