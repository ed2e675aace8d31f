"""One process (or memory object) at a time does a store's background model work."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._core.worklock import GaveUp, WorkLock
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.testing.llm import FakeLLMServer
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


def test_a_second_holder_waits_for_the_first_and_gives_up_when_told(tmp_path):
    path = str(tmp_path / "store.json.work.lock")
    first, second, third = WorkLock(path), WorkLock(path), WorkLock(path)  # a descriptor each, as processes
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def hold_second() -> None:
        with second.held(lambda: False):
            order.append("second")
            holding.set()
            release.wait(patience(10))

    with first.held(lambda: False):
        waiter = threading.Thread(target=hold_second)
        waiter.start()
        assert not holding.wait(0.5)  # it waits while the first holds the lock
        order.append("first done")
    assert holding.wait(patience(5))
    with pytest.raises(GaveUp), third.held(lambda: True):
        pass  # never entered: the second holds it, and the third was told to give up
    release.set()
    waiter.join(patience(5))
    assert order == ["first done", "second"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for lock in (first, second, third):
        lock.close()


@pytest.mark.parametrize("make", [
    lambda url, path: LongTermMemory({"api_url": url, "db_path": path, "summarize_every": 4, "recent_window": 2}),
    lambda url, path: EntityMemory({"api_url": url, "db_path": path}),
], ids=["longterm", "entity"])
def test_two_memories_on_one_file_ask_the_model_no_more_than_one_does(tmp_path, make):
    def requests(memories: int) -> int:
        with FakeLLMServer(reply="The user talked about gardening.", model="m") as llm:
            llm.mode, llm.delay = "slow", 0.1  # a model takes a while: the two would work at once
            folder = tmp_path / f"with{memories}"
            folder.mkdir()
            opened = [make(llm.url, str(folder / "store.json")) for _ in range(memories)]
            for n in range(16):
                opened[n % memories].update_history([AgentMessage(U, f"question {n} about my garden"),
                                                     AgentMessage(A, f"answer {n}")], "s")
            for memory in opened:
                assert memory.flush(patience(60))
                memory.close()
            return llm.count("/chat/completions")

    one, two = requests(1), requests(2)
    assert one > 0
    assert two < 1.5 * one, (one, two)  # without the lock each memory sends the backlog: about twice


def test_a_lock_that_cannot_be_made_lets_the_work_run_and_says_so_once(tmp_path, monkeypatch):
    from ovos_memory_plugins._core import worklock

    warned: list[str] = []
    monkeypatch.setattr(worklock.LOG, "warning", lambda msg, *a, **k: warned.append(str(msg)))
    lock = WorkLock(str(tmp_path / "no such folder" / "store.json.work.lock"))
    ran = 0
    for _ in range(3):
        with lock.held(lambda: False):
            ran += 1
    assert ran == 3 and len(warned) == 1 and "work lock" in warned[0]


def test_a_memory_kept_in_ram_makes_no_lock_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    memory = LongTermMemory({"backend": "memory", "api_url": None, "summarize_every": 1, "recent_window": 0})
    memory.update_history([AgentMessage(U, "my name is Ana"), AgentMessage(A, "hi Ana")], "s")
    assert memory.flush(patience(30))
    memory.close()
    assert not (tmp_path / "xdg").exists()
