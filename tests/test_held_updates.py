"""Updates a store refuses (down, full, locked) are held in memory and stored by the next write.

The real outages are in tests/reliability (a full tmpfs) and tests/test_postgres.py (a database
cut off); here the logic, with a store made to refuse."""
from __future__ import annotations

import json
import time

import pytest

from ovos_memory_plugins._core import log as _log
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._core.held import HeldWrites, stamp
from ovos_memory_plugins.errors import StorageError
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


def _hold(held, session_id, items):
    """Hold ``items`` as one update said now, in front of what is held (a write refused again)."""
    said = stamp()
    held._hold(session_id, [(said, item) for item in items])


def test_held_items_go_first_in_order_and_a_refused_batch_is_held_whole():
    held, stored = HeldWrites(limit=10), []

    def refuse(batch):
        raise StorageError("down")

    for n in range(2):
        with pytest.raises(StorageError):
            held.write("s", [n], refuse, (StorageError,))
    assert held.peek("s") == [0, 1] and "s" in held and held.count() == 2
    assert held.write("s", [2], stored.extend, (StorageError,)) == 2
    assert stored == [0, 1, 2] and "s" not in held and held.sessions() == []


def test_an_error_that_is_not_a_refusal_drops_the_new_items_after_what_was_held_is_stored():
    held, stored = HeldWrites(limit=10), []
    _hold(held, "s", ["old"])
    _hold(held, "s", ["older"])  # refused again later: in front

    def broken(batch):
        if "bad" in batch:
            raise TypeError("a bug in the new item")
        stored.extend(batch)

    with pytest.raises(TypeError):
        held.write("s", ["bad"], broken, (StorageError,))
    assert stored == ["older", "old"] and "s" not in held  # the item that can never be stored goes


def test_held_items_are_bounded_per_session_keeping_the_newest_and_saying_so():
    told = []
    held = HeldWrites(limit=3, on_overflow=lambda: told.append(1))
    _hold(held, "s", [1, 2])
    _hold(held, "s", [0])  # older, refused again: in front
    assert held.peek("s") == [0, 1, 2] and not told
    _hold(held, "t", [1, 2, 3, 4])
    assert held.peek("t") == [2, 3, 4] and told


def test_writes_whose_transaction_did_not_commit_are_held_again_in_order():
    held, stored = HeldWrites(limit=10), []
    _hold(held, "s", ["old"])
    with held.recording() as written:
        held.write("s", ["a"], stored.extend, (StorageError,))
        held.write("t", ["x"], stored.extend, (StorageError,))
        held.write("s", ["b"], stored.extend, (StorageError,))
    held.write("u", ["y"], stored.extend, (StorageError,))  # after the block: not noted
    assert stored == ["old", "a", "x", "b", "y"] and "s" not in held
    _hold(held, "s", ["later"])  # held meanwhile: newer than what the transaction stored
    held.hold_again(written)
    assert held.peek("s") == ["old", "a", "b", "later"] and held.peek("t") == ["x"] and "u" not in held


def test_writes_of_a_session_forgotten_before_their_commit_failed_are_not_held_again():
    held = HeldWrites(limit=10)
    with held.recording() as written:
        held.write("s", ["secret"], lambda batch: None, (StorageError,))
    held.drop("s")
    held.hold_again(written)
    assert held.count() == 0


def test_a_write_refused_while_its_session_is_forgotten_is_not_held_again():
    held = HeldWrites(limit=10)
    _hold(held, "s", ["old"])

    def forgotten_then_refused(batch):
        held.drop("s")  # forget() runs while the write waits for the store
        raise StorageError("locked")

    with pytest.raises(StorageError):
        held.write("s", ["new"], forgotten_then_refused, (StorageError,))
    assert held.peek("s") == [] and held.count() == 0


def test_a_forget_waits_for_a_write_in_flight_so_the_store_forget_deletes_what_it_stored():
    import threading

    held, stored, events = HeldWrites(limit=10), [], []
    _hold(held, "s", ["h"])
    entered = threading.Event()

    def slow_success(batch):
        entered.set()
        time.sleep(0.2)
        stored.extend(batch)
        events.append("stored")

    thread = threading.Thread(target=held.write, args=("s", ["a"], slow_success, (StorageError,)))
    thread.start()
    entered.wait(5)
    held.drop("s")
    events.append("dropped")
    thread.join(5)
    assert events == ["stored", "stored", "dropped"] and stored == ["h", "a"] and held.count() == 0  # one call each


def test_writes_of_one_session_take_turns_so_a_batch_held_again_stays_in_front():
    import threading

    held, stored = HeldWrites(limit=10), []
    _hold(held, "s", ["h"])
    entered = threading.Event()

    def slow_refusal(batch):
        entered.set()
        time.sleep(0.2)  # a store waiting for a lock, then refusing
        raise StorageError("locked")

    def first():
        with pytest.raises(StorageError):
            held.write("s", ["a"], slow_refusal, (StorageError,))

    thread = threading.Thread(target=first)
    thread.start()
    entered.wait(5)
    held.write("s", ["b"], stored.extend, (StorageError,))  # waits for the first, then stores all
    thread.join(5)
    assert stored == ["h", "a", "b"]


def _memories(tmp_path):
    from ovos_memory_plugins.composite import CompositeMemory
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.longterm import LongTermMemory
    from ovos_memory_plugins.recency import RecencyMemory
    from ovos_memory_plugins.short_term import BasicShortTermMemory

    return {
        "short-term": lambda: BasicShortTermMemory({"db_path": str(tmp_path / "st.db"), "max_history": 0}),
        "recency": lambda: RecencyMemory({"db_path": str(tmp_path / "r.db")}),
        "lexical": lambda: LexicalMemory({"db_path": str(tmp_path / "l.db")}),
        "longterm": lambda: LongTermMemory({"db_path": str(tmp_path / "lt.json"), "api_url": None}),
        "entity": lambda: EntityMemory({"db_path": str(tmp_path / "e.json"), "api_url": None}),
        "composite": lambda: CompositeMemory({"members": [
            {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "cr.db")}},
            {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "cl.db")}}]}),
    }


KINDS = ["short-term", "recency", "lexical", "longterm", "entity", "composite"]


def _refusing(memory, monkeypatch):
    """Make the memory's store refuse every update until ``monkeypatch.undo()``."""
    def refuse(session_id, batch):
        raise StorageError("database or disk is full")

    monkeypatch.setattr(memory, "_store_batch", refuse)


def _say(memory, sid, words):
    memory.update_history([AgentMessage(U, f"My name is {words}."), AgentMessage(A, "noted")], sid)


@pytest.mark.parametrize("kind", KINDS)
def test_refused_updates_are_stored_in_order_by_the_first_update_that_can_be(kind, tmp_path, monkeypatch):
    with _memories(tmp_path)[kind]() as memory:
        _say(memory, "s", "Zqoneq")
        _refusing(memory, monkeypatch)
        _say(memory, "s", "Zqtwoq")
        _say(memory, "s", "Zqthreeq")
        assert memory.flush(patience(5)) is False and any(k.endswith(":write") for k in memory.degraded())
        monkeypatch.undo()
        _say(memory, "s", "Zqfourq")
        assert memory.flush(patience(30)) and not any(k.endswith(":write") for k in memory.degraded())
        text = json.dumps(memory.export("s"))
    found = [w for w in ("Zqoneq", "Zqtwoq", "Zqthreeq", "Zqfourq") if w in text]
    assert found == ["Zqoneq", "Zqtwoq", "Zqthreeq", "Zqfourq"]
    if kind != "entity":  # facts are in the export's order of statement; windows must keep the turns' order
        assert [text.index(w) for w in found] == sorted(text.index(w) for w in found)


@pytest.mark.parametrize("kind", KINDS)
def test_forget_drops_what_is_held_so_it_is_never_stored_after(kind, tmp_path, monkeypatch):
    with _memories(tmp_path)[kind]() as memory:
        _refusing(memory, monkeypatch)
        _say(memory, "s", "Zqsecretq")
        assert memory.sessions() == ["s"]  # its only turn is held: still a session to export or forget
        monkeypatch.undo()
        memory.forget("s")
        assert memory.sessions() == []
        _say(memory, "other", "Ana")
        assert memory.flush(patience(30))
        assert "Zqsecretq" not in json.dumps(memory.export("s")) + json.dumps(memory.export("other"))
        assert memory.sessions() == ["other"]


@pytest.mark.parametrize("kind", KINDS)
def test_close_stores_what_is_held_or_says_what_is_lost(kind, tmp_path, monkeypatch):
    errors = []
    monkeypatch.setattr(_log.LOG, "error", lambda msg, *a: errors.append(str(msg)))
    memory = _memories(tmp_path)[kind]()
    _refusing(memory, monkeypatch)
    _say(memory, "s", "Zqlostq")
    memory.close()
    assert any("closing with 1 item(s)" in e or "closing with 2 item(s)" in e for e in errors), errors
    kept = _memories(tmp_path)[kind]()
    try:
        assert "Zqlostq" not in json.dumps(kept.export("s"))
    finally:
        kept.close()
    memory = _memories(tmp_path)[kind]()
    _refusing(memory, monkeypatch)
    _say(memory, "s", "Zqkeptq")
    monkeypatch.setattr(memory, "_store_batch", type(memory)._store_batch.__get__(memory))  # the store is back
    memory.close()  # stores it on the way out
    kept = _memories(tmp_path)[kind]()
    try:
        assert "Zqkeptq" in json.dumps(kept.export("s"))
    finally:
        kept.close()


@pytest.mark.parametrize("kind", KINDS)
def test_forget_exchange_while_updates_are_held_says_it_did_nothing(kind, tmp_path, monkeypatch):
    from ovos_memory_plugins.errors import StorageError as Refused

    with _memories(tmp_path)[kind]() as memory:
        _refusing(memory, monkeypatch)
        _say(memory, "s", "Zqsecretq")
        with pytest.raises(Refused, match="still waiting to be stored"):
            memory.forget_exchange("s", "Q: My name is Zqsecretq.\nA: noted")
        monkeypatch.undo()
        memory.forget_exchange("s", "Q: My name is Zqsecretq.\nA: noted")  # stored first, then forgotten
        assert memory.flush(patience(30))
        if kind in ("short-term", "recency", "lexical", "composite"):  # they forget the exchange's messages
            assert "Zqsecretq" not in json.dumps(memory.export("s"))


def test_an_overflow_is_said_again_in_a_later_outage(tmp_path, monkeypatch):
    from ovos_memory_plugins._memory.plugin import HELD_ITEMS

    warnings = []
    monkeypatch.setattr(_log.LOG, "warning", lambda msg, *a: warnings.append(str(msg)))
    with _memories(tmp_path)["recency"]() as memory:
        for outage in range(2):
            with monkeypatch.context() as patch:
                _refusing(memory, patch)
                for n in range(HELD_ITEMS // 2 + 1):
                    _say(memory, "s", f"n{n}")
            _say(memory, "s", "back")
            assert len([w for w in warnings if "refused writes for too long" in w]) == outage + 1


def _refused_at(held, *said):
    """Write each ``(time, item)`` of session "s" while the store refuses: held, said then."""
    from ovos_memory_plugins._core.clock import said_at

    def refuse(batch):
        raise StorageError("down")

    for ts, item in said:
        with said_at(ts), pytest.raises(StorageError):
            held.write("s", [item], refuse, (StorageError,))


def test_each_held_update_is_stored_at_the_time_it_was_said():
    from ovos_memory_plugins._core.clock import said_at, said_now

    held, calls = HeldWrites(limit=10), []

    _refused_at(held, (100.0, "a"), (200.0, "b"))
    with said_at(300.0):
        assert held.write("s", ["c", "d"], lambda batch: calls.append((said_now(), batch)), (StorageError,)) == 2
    assert calls == [(100.0, ["a"]), (200.0, ["b"]), (300.0, ["c", "d"])]


def test_a_store_refusing_halfway_through_the_held_updates_holds_the_rest_with_their_times():
    from ovos_memory_plugins._core.clock import said_at, said_now

    held, calls = HeldWrites(limit=10), []

    _refused_at(held, (100.0, "a"), (200.0, "b"))

    def down_after_one(batch):
        if calls:
            raise StorageError("down again")
        calls.append((said_now(), batch))

    with said_at(300.0), pytest.raises(StorageError):
        held.write("s", ["c"], down_after_one, (StorageError,))
    assert calls == [(100.0, ["a"])] and held.peek("s") == ["b", "c"]
    with held.recording() as written:
        held.write("s", [], lambda batch: calls.append((said_now(), batch)), (StorageError,))
    assert calls[1:] == [(200.0, ["b"]), (300.0, ["c"])] and "s" not in held
    held.hold_again(written)  # their transaction did not commit: held again, times kept
    calls.clear()
    held.write("s", [], lambda batch: calls.append((said_now(), batch)), (StorageError,))
    assert calls == [(200.0, ["b"]), (300.0, ["c"])]


@pytest.mark.parametrize("kind", ["lexical", "composite", "recency", "recency-json"])
def test_an_update_held_through_an_outage_keeps_the_time_it_was_said(kind, tmp_path, monkeypatch):
    from ovos_memory_plugins._core.clock import said_at
    from ovos_memory_plugins.composite import CompositeMemory
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.recency import RecencyMemory

    hour_ago = time.time() - 3600
    memory = {"lexical": lambda: LexicalMemory({"db_path": str(tmp_path / "l.db")}),
              "composite": lambda: CompositeMemory({"members": [
                  {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "cl.db")}}]}),
              # a window keeping the last half hour: what was said an hour ago has expired
              "recency": lambda: RecencyMemory({"db_path": str(tmp_path / "r.db"), "max_age": 1800}),
              "recency-json": lambda: RecencyMemory({"db_path": str(tmp_path / "r.json"), "max_age": 1800}),
              }[kind]()
    with memory:
        _refusing(memory, monkeypatch)
        with said_at(hour_ago):  # the turn an hour ago, while the store was down
            _say(memory, "s", "Zqoldq")
        monkeypatch.undo()  # the store is back now
        _say(memory, "s", "Zqnewq")
        assert memory.flush(patience(30))
        if kind.startswith("recency"):
            window = " ".join(m.content for m in memory.get_history("s"))
            assert "Zqnewq" in window and "Zqoldq" not in window
            on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
            assert b"Zqoldq" not in on_disk, "an update that expired while held was written anyway"
            return
        export = memory.export("s")
        documents = export["members"]["ovos-memory-plugin-lexical"]["documents"] if kind == "composite" \
            else export["documents"]
        times = {d["content"].split()[4].rstrip("."): d["ts"] for d in documents}
    assert abs(times["Zqoldq"] - hour_ago) < 1 and times["Zqnewq"] > hour_ago + 3000


def test_a_held_update_that_raises_a_bug_is_dropped_and_does_not_block_its_session():
    told = []
    held, stored, down = HeldWrites(limit=10, on_dropped=told.append), [], [True]

    def store(batch):
        if down[0]:
            raise StorageError("down")
        if any(item.startswith("poison") for item in batch):
            raise ValueError("a bug this item triggers")
        stored.extend(batch)

    for item in ("ok1", "poison1", "ok2", "poison2", "ok3"):
        with pytest.raises(StorageError):
            held.write("s", [item], store, (StorageError,))
    down[0] = False
    with pytest.raises(ValueError):  # the first bad one goes and the write goes on; the second waits
        held.write("s", ["t1"], store, (StorageError,))
    assert stored == ["ok1", "ok2"] and held.peek("s") == ["poison2", "ok3", "t1"] and len(told) == 1
    held.write("s", ["t2"], store, (StorageError,))  # this write drops poison2: t2 is stored, nothing raised
    assert stored == ["ok1", "ok2", "ok3", "t1", "t2"] and "s" not in held and len(told) == 2


def test_in_one_call_what_is_held_goes_with_the_new_items_at_the_newest_time():
    from ovos_memory_plugins._core.clock import said_at, said_now

    held, calls = HeldWrites(limit=10, one_call=True), []

    _refused_at(held, (100.0, "a"), (200.0, "b"))
    with said_at(300.0):
        assert held.write("s", ["c"], lambda batch: calls.append((said_now(), batch)), (StorageError,)) == 2
    assert calls == [(300.0, ["a", "b", "c"])]


def test_in_one_call_a_bug_is_found_update_by_update_and_only_its_update_dropped():
    held, stored = HeldWrites(limit=10, one_call=True), []

    def refuse(batch):
        raise StorageError("down")

    def store(batch):
        if "poison" in batch or "bug" in batch:
            raise ValueError("a bug this item triggers")
        stored.append(batch)

    for item in ("a", "poison", "b"):
        with pytest.raises(StorageError):
            held.write("s", [item], refuse, (StorageError,))
    assert held.write("s", ["c"], store, (StorageError,)) == 2  # the poison dropped, the rest stored
    assert stored == [["a"], ["b"], ["c"]] and "s" not in held
    with pytest.raises(ValueError):
        held.write("s", ["bug"], store, (StorageError,))  # the new item is the bug: it goes
    assert stored == [["a"], ["b"], ["c"]] and "s" not in held


def test_an_interrupted_replay_keeps_what_it_had_not_stored():
    held, stored = HeldWrites(limit=10), []

    def refuse(batch):
        raise StorageError("down")

    for item in ("a", "b"):
        with pytest.raises(StorageError):
            held.write("s", [item], refuse, (StorageError,))

    def interrupted(batch):
        if batch == ["b"]:
            raise KeyboardInterrupt
        stored.extend(batch)

    with pytest.raises(KeyboardInterrupt):
        held.write("s", ["c"], interrupted, (StorageError,))
    assert stored == ["a"] and held.peek("s") == ["b", "c"]


def test_past_the_limit_an_update_is_dropped_whole_never_its_question_alone():
    held = HeldWrites(limit=3)
    _hold(held, "s", ["q1", "a1"])
    _hold(held, "s", ["q0", "a0"])  # older, in front: the oldest update goes whole, not q0 alone
    assert held.peek("s") == ["q1", "a1"]
    _hold(held, "t", ["one", "big", "update", "alone"])  # bigger than the limit: its newest items
    assert held.peek("t") == ["big", "update", "alone"]


def test_the_items_of_one_update_stay_in_one_call_after_what_was_held():
    # An update's messages are one exchange: split over two calls, another writer's exchange
    # could land between its question and its answer.
    held, calls = HeldWrites(limit=10), []

    def refuse(batch):
        raise StorageError("down")

    with pytest.raises(StorageError):
        held.write("s", ["q0", "a0"], refuse, (StorageError,))
    held.write("s", ["q1", "a1", "more of a1"], calls.append, (StorageError,))
    assert calls == [["q0", "a0"], ["q1", "a1", "more of a1"]]


@pytest.mark.parametrize("kind", ["recency", "lexical"])
def test_forgetting_an_exchange_while_its_held_update_is_being_stored_waits_and_forgets_it(kind, tmp_path,
                                                                                            monkeypatch):
    import threading

    with _memories(tmp_path)[kind]() as memory:
        _refusing(memory, monkeypatch)
        _say(memory, "s", "Zqsecretq")  # held
        monkeypatch.undo()
        real, storing = memory._store_batch, threading.Event()

        def slow(session_id, batch):
            if any("Zqsecretq" in m.content for m in batch):
                storing.set()
                time.sleep(0.3)  # the held update is on its way to the store
            real(session_id, batch)

        monkeypatch.setattr(memory, "_store_batch", slow)
        later = threading.Thread(target=_say, args=(memory, "s", "Zqlaterq"))
        later.start()
        assert storing.wait(patience(10))
        memory.forget_exchange("s", "Q: My name is Zqsecretq.\nA: noted")
        later.join(patience(10))
        text = json.dumps(memory.export("s"))
    assert "Zqsecretq" not in text and "Zqlaterq" in text


def test_an_update_that_expired_while_held_leaves_no_document(tmp_path, monkeypatch):
    from ovos_memory_plugins._core.clock import said_at
    from ovos_memory_plugins.lexical import LexicalMemory

    with LexicalMemory({"db_path": str(tmp_path / "l.db"), "max_age": 1800}) as memory:
        _say(memory, "s", "Zqfirstq")  # expiry runs at the first update, then every 100th: not after the outage
        _refusing(memory, monkeypatch)
        with said_at(time.time() - 3600):  # an hour ago, while the store was down
            _say(memory, "s", "Zqoldq")
        monkeypatch.undo()
        _say(memory, "s", "Zqnewq")
        assert memory.flush(patience(30))
        text = json.dumps(memory.export("s"))
        assert "Zqnewq" in text and "Zqoldq" not in text and not memory.search("Zqoldq", "s")


def test_a_backend_drops_a_held_update_its_store_cannot_take_says_so_once_and_stores_the_turn(tmp_path,
                                                                                              monkeypatch):
    errors = []
    monkeypatch.setattr(_log.LOG, "error", lambda msg, *a: errors.append(str(msg) % a if a else str(msg)))
    with _memories(tmp_path)["lexical"]() as memory:
        real = memory._store_batch
        _refusing(memory, monkeypatch)
        _say(memory, "s", "Zqpoisonq")
        _say(memory, "s", "Zqheldq")

        def broken_for_poison(session_id, batch):
            if any("Zqpoisonq" in m.content for m in batch):
                raise ValueError("a bug this update triggers")
            real(session_id, batch)

        monkeypatch.setattr(memory, "_store_batch", broken_for_poison)
        _say(memory, "s", "Zqnowq")  # answered and stored: the old update's bug is not this turn's
        text = json.dumps(memory.export("s"))
    assert "Zqheldq" in text and "Zqnowq" in text and "Zqpoisonq" not in text
    assert len([e for e in errors if "dropped an update held" in e]) == 1


def test_a_bad_held_update_said_at_the_same_time_as_the_turn_does_not_take_the_turn_with_it():
    from ovos_memory_plugins._core.clock import said_at

    told, stored = [], []
    held = HeldWrites(limit=10, on_dropped=told.append)

    def store(batch):
        if "poison" in batch:
            raise ValueError("a bug this item triggers")
        stored.extend(batch)

    with said_at(100.0):  # a coarse clock: the held update and the turn carry one time
        _refused_at(held, (100.0, "poison"))
        assert held.write("s", ["turn"], store, (StorageError,)) == 0  # none of what was held is stored
    assert stored == ["turn"] and "s" not in held and len(told) == 1


def test_telling_of_a_dropped_update_cannot_lose_the_updates_after_it():
    def broken_log(exc):
        raise RuntimeError("the log handler failed")

    held, stored = HeldWrites(limit=10, on_dropped=broken_log), []
    _refused_at(held, (1.0, "poison"), (2.0, "ok"))

    def store(batch):
        if "poison" in batch:
            raise ValueError("a bug this item triggers")
        stored.extend(batch)

    assert held.write("s", ["new"], store, (StorageError,)) == 1
    assert stored == ["ok", "new"] and "s" not in held


def test_two_updates_said_at_the_same_instant_are_still_two_updates():
    from ovos_memory_plugins._core.clock import said_at, said_now

    told, calls = [], []
    held = HeldWrites(limit=10, on_dropped=told.append)

    def store(batch):
        if "poison" in batch:
            raise ValueError("a bug this item triggers")
        calls.append((said_now(), batch))

    with said_at(100.0):  # one said_at, or a clock that coarse: both updates carry one time
        _refused_at(held, (100.0, "poison"), (100.0, "ok"))
    assert held.write("s", ["new"], store, (StorageError,)) == 1
    # the bad update goes alone: the good one said at the same instant is stored, at its time
    assert calls[0] == (100.0, ["ok"]) and calls[1][1] == ["new"] and len(told) == 1


def test_past_the_limit_an_update_said_at_the_same_instant_as_the_next_is_dropped_alone():
    from ovos_memory_plugins._core.clock import said_at

    held = HeldWrites(limit=3)

    def refuse(batch):
        raise StorageError("down")

    with said_at(100.0):
        for pair in (["q1", "a1"], ["q2", "a2"]):
            with pytest.raises(StorageError):
                held.write("s", pair, refuse, (StorageError,))
    assert held.peek("s") == ["q2", "a2"] and held.dropped == 2  # the older update whole, not all


def test_past_the_total_limit_the_oldest_updates_of_any_session_go_whole():
    from ovos_memory_plugins._core.clock import said_at

    told = []
    held = HeldWrites(limit=10, on_overflow=lambda: told.append(1), total_limit=7)

    def refuse(batch):
        raise StorageError("down")

    said = [(10.0, "a", ["a1q", "a1a"]), (20.0, "b", ["b1q", "b1a"]), (30.0, "a", ["a2q", "a2a"]),
            (40.0, "c", ["c1q", "c1a"])]
    for ts, sid, update in said:
        with said_at(ts), pytest.raises(StorageError):
            held.write(sid, update, refuse, (StorageError,))
    # 8 items past 7: the oldest update (a's first) goes whole, not half of it
    assert held.peek("a") == ["a2q", "a2a"] and held.peek("b") == ["b1q", "b1a"] and held.peek("c") == ["c1q", "c1a"]
    assert held.count() == 6 and held.dropped == 2 and told
    with said_at(50.0), pytest.raises(StorageError):
        held.write("c", ["c2q", "c2a"], refuse, (StorageError,))
    # b's only update is older than c's first, but a session keeps its newest update: c's first goes
    assert held.peek("b") == ["b1q", "b1a"] and held.peek("c") == ["c2q", "c2a"] and held.count() == 6
    stored = []
    assert held.write("a", [], stored.extend, (StorageError,)) == 2 and held.count() == 4
    assert held.drop("b") == 2 and held.count() == 2


def test_a_backend_bounds_what_it_holds_across_sessions(tmp_path, monkeypatch):
    from ovos_memory_plugins._memory import plugin

    monkeypatch.setattr(plugin, "HELD_TOTAL", 6)  # read when the memory is built
    with _memories(tmp_path)["lexical"]() as memory, monkeypatch.context() as patch:
        _refusing(memory, patch)
        for sid, words in (("kitchen", "Zqoneq"), ("hall", "Zqtwoq"), ("kitchen", "Zqthreeq"),
                           ("bedroom", "Zqfourq")):
            _say(memory, sid, words)
        held = json.dumps([memory._held.peek(sid) for sid in ("kitchen", "hall", "bedroom")], default=str)
        assert memory._held.count() == 6
    assert [w for w in ("Zqoneq", "Zqtwoq", "Zqthreeq", "Zqfourq") if w in held] == ["Zqtwoq", "Zqthreeq", "Zqfourq"]


@pytest.mark.parametrize("backend", ["recency", "short-term", "lexical"])
def test_turns_the_store_refused_are_in_the_next_turns_window(tmp_path, backend, monkeypatch):
    # A file locked by another process, a full disk: "and tomorrow?" still needs the question before it.
    from ovos_memory_plugins.errors import StoreUnavailable
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.recency import RecencyMemory
    from ovos_memory_plugins.short_term import BasicShortTermMemory

    cls = {"recency": RecencyMemory, "short-term": BasicShortTermMemory, "lexical": LexicalMemory}[backend]
    memory = cls({"db_path": str(tmp_path / "m.db"), "max_history": 4})
    try:
        memory.update_history([AgentMessage(MessageRole.USER, "stored 0"), AgentMessage(MessageRole.ASSISTANT, "ok")],
                              "s")
        real = memory._store_batch

        def refuse(*args):
            raise StoreUnavailable("database is locked")

        monkeypatch.setattr(memory, "_store_batch", refuse)
        for i in range(2):
            memory.update_history([AgentMessage(MessageRole.USER, f"held {i}"),
                                   AgentMessage(MessageRole.ASSISTANT, f"answer {i}")], "s")
        said = [m.content for m in memory.build_conversation_context("and tomorrow?", "s") if m.role != "system"]
        held = ["held 0", "answer 0", "held 1", "answer 1"]  # max_history 4: the window's own rules
        assert said == [*held, "and tomorrow?"], said
        monkeypatch.setattr(memory, "_store_batch", real)
        assert memory.flush(10)
        assert [m.content for m in memory.get_history("s")] == held
    finally:
        memory.close()
