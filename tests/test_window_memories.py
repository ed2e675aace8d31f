"""BasicShortTermMemory and RecencyMemory: the reference behaviour we keep (docs/compatibility.md) and ours."""
from __future__ import annotations

import time

import pytest
from ovos_plugin_manager.agents import load_memory_plugin
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.short_term import BasicShortTermMemory

U, A, S = MessageRole.USER, MessageRole.ASSISTANT, MessageRole.SYSTEM


def contents(msgs):
    return [m.content for m in msgs]


def test_the_persona_default_example_context():
    memory = BasicShortTermMemory(config={"max_history": 10, "system_prompt": "You are a helpful assistant."})
    memory.update_history([AgentMessage(U, "what is 2+2?"), AgentMessage(A, "4")], "sess-123")
    ctx = memory.build_conversation_context("what is the capital of France?", "sess-123")
    assert [(m.role, m.content) for m in ctx] == [
        (S, "You are a helpful assistant."), (U, "what is 2+2?"), (A, "4"), (U, "what is the capital of France?")]


def test_short_term_defaults_to_five_messages_and_drops_an_answer_cut_from_its_question():
    memory = BasicShortTermMemory()
    for i in range(3):
        memory.update_history([AgentMessage(U, f"q{i}"), AgentMessage(A, f"a{i}")], "s")
    assert contents(memory.get_history("s")) == ["a0", "q1", "a1", "q2", "a2"]
    assert contents(memory.build_conversation_context("next", "s")) == ["q1", "a1", "q2", "a2", "next"]


def test_short_term_empty_update_is_a_no_op_not_an_index_error():
    memory = BasicShortTermMemory()
    memory.update_history([], "new")
    memory.update_history([], "new")
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "new")
    assert contents(memory.get_history("new")) == ["q", "a"]


def test_short_term_merges_answers_recorded_in_several_calls_without_touching_the_caller():
    memory = BasicShortTermMemory()
    memory.update_history([AgentMessage(U, "tell me a story")], "s")
    first, second = AgentMessage(A, "Once upon a time"), AgentMessage(A, "the end.")
    memory.update_history([first], "s")
    memory.update_history([second], "s")
    assert contents(memory.get_history("s")) == ["tell me a story", "Once upon a time\nthe end."]
    assert second.content == "the end."


def test_short_term_keeps_its_window_across_restarts_with_db_path(tmp_path):
    path = str(tmp_path / "persona.db")
    memory = BasicShortTermMemory({"db_path": path})
    memory.update_history([AgentMessage(U, "my name is Ana"), AgentMessage(A, "hi Ana")], "s")
    memory.close()
    assert contents(BasicShortTermMemory({"db_path": path}).get_history("s")) == ["my name is Ana", "hi Ana"]


def test_short_term_is_registered_as_the_persona_default_replacement():
    cls = load_memory_plugin("ovos-memory-plugin-short-term")
    assert cls is BasicShortTermMemory
    memory = cls(config={})
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "s")
    assert list(memory.session2history) == ["s"]


def test_recency_zero_keeps_everything_and_max_age_forgets(monkeypatch):
    import time as time_module

    memory = RecencyMemory({"max_history": 0, "max_age": 60})
    for i in range(30):
        memory.update_history([AgentMessage(U, f"q{i}"), AgentMessage(A, f"a{i}")], "s")
    assert len(memory.get_history("s")) == 60
    real = time_module.time
    monkeypatch.setattr(time_module, "time", lambda: real() + 120)
    assert memory.get_history("s") == []
    assert contents(memory.build_conversation_context("hi", "s")) == ["hi"]


def test_recency_context_strips_the_prompt_and_drops_trailing_questions():
    memory = RecencyMemory({"system_prompt": "  Be kind.  "})
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a"), AgentMessage(U, "unanswered")], "s")
    ctx = memory.build_conversation_context("  new  ", "s")
    assert [(m.role, m.content) for m in ctx] == [(S, "Be kind."), (U, "q"), (A, "a"), (U, "new")]


def test_the_max_turns_example_keeps_string_roles_as_given(capsys):
    m = RecencyMemory({"max_turns": 2})
    m.update_history([AgentMessage(role="user", content="my dog is called Rex"),
                      AgentMessage(role="assistant", content="Noted.")], "demo")
    for msg in m.build_conversation_context("what is my dog called?", "demo"):
        print(msg.role, "|", msg.content)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["user | my dog is called Rex", "assistant | Noted."]
    assert lines[2].endswith("| what is my dog called?")


@pytest.mark.parametrize("cls", [RecencyMemory, BasicShortTermMemory])
def test_max_turns_sets_max_history_to_two_messages_a_turn(cls):
    m = cls({"max_turns": 2})
    for i in range(5):
        m.update_history([AgentMessage(MessageRole.USER, f"q{i}"), AgentMessage(MessageRole.ASSISTANT, f"a{i}")], "t")
    assert m.max_history == 4
    assert contents(m.get_history("t")) == ["q3", "a3", "q4", "a4"]


@pytest.mark.parametrize("path", ["r.db", "r.json"])
def test_recency_persists_and_exports(tmp_path, path):
    memory = RecencyMemory({"db_path": str(tmp_path / path), "max_history": 4})
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "s")
    data = memory.export("s")
    assert data["window"] == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert memory.sessions() == ["s"]
    assert memory.forget("s") == {"messages": 2}
    assert memory.get_history("s") == []
    memory.import_session(data)
    assert contents(memory.get_history("s")) == ["q", "a"]


# -- session2history: the original's attribute, live over every window store ------------------
STORES = {"ram": None, "sqlite": "w.db", "json": "w.json"}


@pytest.fixture(params=list(STORES))
def short_term(request, tmp_path):
    name = STORES[request.param]
    memory = BasicShortTermMemory({"max_history": 10, **({"db_path": str(tmp_path / name)} if name else {})})
    yield memory
    memory.close()


def test_session2history_assignment_seeds_a_session_with_copies(short_term):
    seeded = [AgentMessage(U, "what is 2+2?"), AgentMessage(A, "4")]
    short_term.session2history["s"] = seeded
    assert contents(short_term.get_history("s")) == ["what is 2+2?", "4"]
    assert contents(short_term.build_conversation_context("and 3+3?", "s")) == ["what is 2+2?", "4", "and 3+3?"]
    seeded.append(AgentMessage(U, "later"))  # the caller's list is not the stored one
    seeded[0].content = "changed"
    assert contents(short_term.get_history("s")) == ["what is 2+2?", "4"]


def test_session2history_assignment_replaces_the_whole_window(short_term):
    short_term.update_history([AgentMessage(U, "old q"), AgentMessage(A, "old a")], "s")
    short_term.session2history["s"] = [AgentMessage(U, "new q"), AgentMessage(A, "new a")]
    assert contents(short_term.get_history("s")) == ["new q", "new a"]


def test_appending_to_a_list_from_session2history_is_stored(short_term):
    short_term.update_history([AgentMessage(U, "q1"), AgentMessage(A, "a1")], "t")
    history = short_term.session2history["t"]
    history.append(AgentMessage(U, "q2"))
    history.extend([AgentMessage(A, "a2")])
    assert contents(short_term.get_history("t")) == ["q1", "a1", "q2", "a2"]
    history[0] = AgentMessage(U, "first")
    del history[-2:]
    assert contents(short_term.get_history("t")) == ["first", "a1"]
    history += [AgentMessage(U, "q3")]
    assert contents(short_term.get_history("t")) == ["first", "a1", "q3"]


def test_session2history_writes_follow_the_window_rules(short_term):
    # a USER after a USER replaces it, answers merge, the window keeps max_history messages
    short_term.session2history["s"] = [AgentMessage(U, "hanging"), AgentMessage(U, "q"), AgentMessage(A, "a"),
                                       AgentMessage(A, "b")]
    assert contents(short_term.get_history("s")) == ["q", "a\nb"]
    short_term.session2history["s"] = [AgentMessage(U if i % 2 == 0 else A, str(i)) for i in range(12)]
    assert contents(short_term.get_history("s")) == [str(i) for i in range(2, 12)]


def test_a_bad_message_appended_through_session2history_changes_nothing(short_term):
    short_term.session2history["s"] = [AgentMessage(U, "q"), AgentMessage(A, "a")]
    history = short_term.session2history["s"]
    with pytest.raises(TypeError):
        history.append("not a message")
    assert contents(history) == ["q", "a"]
    assert contents(short_term.get_history("s")) == ["q", "a"]


def test_session2history_lists_and_deletes_sessions_like_a_dict(short_term):
    short_term.update_history([AgentMessage(U, "q")], "a")
    short_term.update_history([AgentMessage(U, "q")], "b")
    view = short_term.session2history
    assert list(view) == ["a", "b"] and len(view) == 2 and "a" in view and "zz" not in view
    with pytest.raises(KeyError):
        view["zz"]
    assert view.get("zz") is None
    del view["a"]
    assert list(short_term.session2history) == ["b"] and short_term.get_history("a") == []
    with pytest.raises(KeyError):
        del view["a"]


def test_session2history_setdefault_returns_a_live_list_for_a_new_session(short_term):
    short_term.session2history.setdefault("new", []).append(AgentMessage(U, "hello"))
    assert contents(short_term.get_history("new")) == ["hello"]


def test_assigning_a_whole_dict_to_session2history_replaces_every_session(short_term):
    short_term.update_history([AgentMessage(U, "dropped")], "old")
    short_term.update_history([AgentMessage(U, "replaced")], "kept")
    short_term.session2history = {"kept": [AgentMessage(U, "q"), AgentMessage(A, "a")],
                                  "new": [AgentMessage(U, "n")]}
    assert list(short_term.session2history) == ["kept", "new"]
    assert contents(short_term.get_history("kept")) == ["q", "a"] and short_term.get_history("old") == []
    assert short_term.session2history == {"kept": [AgentMessage(U, "q"), AgentMessage(A, "a")],
                                          "new": [AgentMessage(U, "n")]}


def test_a_bad_dict_assigned_to_session2history_leaves_the_store_untouched(short_term):
    short_term.update_history([AgentMessage(U, "q")], "s")
    with pytest.raises(TypeError):
        short_term.session2history = {"s": [AgentMessage(U, "fine")], "t": ["not a message"]}
    with pytest.raises(TypeError):
        short_term.session2history = [("s", [])]
    assert list(short_term.session2history) == ["s"] and contents(short_term.get_history("s")) == ["q"]


def test_session2history_writes_survive_a_restart(tmp_path):
    path = str(tmp_path / "persona.db")
    memory = BasicShortTermMemory({"db_path": path})
    memory.session2history["s"] = [AgentMessage(U, "my name is Ana")]
    memory.session2history["s"].append(AgentMessage(A, "hi Ana"))
    memory.close()
    again = BasicShortTermMemory({"db_path": path})
    assert contents(again.session2history["s"]) == ["my name is Ana", "hi Ana"]


@pytest.mark.parametrize("cls", [RecencyMemory, BasicShortTermMemory])
def test_max_context_tokens_leaves_out_the_oldest_messages_first(cls):
    from ovos_memory_plugins._core.tokens import estimate_tokens

    memory = cls({"max_history": 0, "max_context_tokens": 60, "system_prompt": "Be brief."})
    for i in range(10):
        memory.update_history([AgentMessage(U, f"question number {i} about the weather"),
                               AgentMessage(A, f"answer number {i}: sunny")], "s")
    ctx = memory.build_conversation_context("and tomorrow?", "s")
    assert ctx[0].content == "Be brief." and ctx[-1].content == "and tomorrow?"
    assert sum(estimate_tokens(m.content) + 4 for m in ctx) <= 60
    kept = [m.content for m in ctx[1:-1]]
    assert kept and kept[-1] == "answer number 9: sunny" and kept[0].startswith("question")  # newest, whole pairs
    unbounded = cls({"max_history": 0}).build_conversation_context("x", "s")
    assert len(unbounded) == 1  # another instance, no shared state; the budget is per memory


def test_short_term_keeps_a_leading_system_note_and_drops_only_answers():
    memory = BasicShortTermMemory({"max_history": 0})
    memory.update_history([AgentMessage(S, "sys note"), AgentMessage(U, "u3"), AgentMessage(A, "a3")], "s")
    assert [(m.role, m.content) for m in memory.build_conversation_context("z", "s")] == [
        (S, "sys note"), (U, "u3"), (A, "a3"), (U, "z")]
    trimmed = BasicShortTermMemory({"max_history": 3})
    trimmed.update_history([AgentMessage(U, "u1"), AgentMessage(A, "a1"), AgentMessage(U, "u2"),
                            AgentMessage(A, "a2")], "s")
    assert [m.content for m in trimmed.build_conversation_context("z", "s")] == ["u2", "a2", "z"]


def test_a_live_history_reads_back_what_the_window_rules_stored(short_term):
    short_term.session2history["s"] = [AgentMessage(U, "q0"), AgentMessage(A, "a0")]
    history = short_term.session2history["s"]
    history.append(AgentMessage(U, "q1"))
    history.append(AgentMessage(U, "q2"))  # a USER after a USER replaces it
    assert contents(history) == ["q0", "a0", "q2"] == contents(short_term.get_history("s"))
    history.pop()
    assert contents(short_term.get_history("s")) == ["q0", "a0"]  # q1 does not come back


def test_a_window_that_cannot_be_read_is_not_overwritten_through_the_view(tmp_path, monkeypatch):
    from ovos_memory_plugins.errors import StoreUnavailable

    memory = BasicShortTermMemory({"db_path": str(tmp_path / "w.db")})
    memory.update_history([AgentMessage(U, "q0"), AgentMessage(A, "a0")], "s")

    def busy(*args, **kwargs):
        raise StoreUnavailable("database is locked")

    monkeypatch.setattr(memory._window, "load", busy)
    with pytest.raises(StoreUnavailable):
        memory.session2history["s"].append(AgentMessage(U, "lost?"))
    monkeypatch.undo()
    assert contents(memory.get_history("s")) == ["q0", "a0"]
    memory.close()


def test_degraded_says_the_window_cannot_be_stored_until_it_can(tmp_path, monkeypatch):
    from ovos_memory_plugins.errors import StorageError

    memory = RecencyMemory({"db_path": str(tmp_path / "w.db")})
    assert memory.degraded() == {}

    def full(*args, **kwargs):
        raise StorageError("database or disk is full")

    monkeypatch.setattr(memory._window, "append", full)
    memory.update_history([AgentMessage(U, "q0"), AgentMessage(A, "a0")], "s")  # the turn goes on
    assert list(memory.degraded()) == ["ovos-memory-plugin-recency:write"]
    assert "disk is full" in memory.degraded()["ovos-memory-plugin-recency:write"]
    monkeypatch.undo()
    memory.update_history([AgentMessage(U, "q1"), AgentMessage(A, "a1")], "s")  # the refused exchange first
    assert memory.degraded() == {} and contents(memory.get_history("s")) == ["q0", "a0", "q1", "a1"]
    memory.close()


def test_a_list_held_across_an_update_keeps_that_update_when_edited(short_term):
    short_term.update_history([AgentMessage(U, "q0"), AgentMessage(A, "a0")], "s")
    held = short_term.session2history["s"]
    short_term.update_history([AgentMessage(U, "q1"), AgentMessage(A, "a1")], "s")  # the persona's turn
    held.append(AgentMessage(U, "note"))
    assert contents(short_term.get_history("s")) == ["q0", "a0", "q1", "a1", "note"]


def test_edits_from_several_threads_lose_none(short_term):
    import threading

    short_term.session2history["s"] = [AgentMessage(U, "q")]

    def add_parts(t):
        for i in range(10):
            short_term.session2history["s"].append(AgentMessage(A, f"part {t}-{i}"))

    threads = [threading.Thread(target=add_parts, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answer = short_term.get_history("s")[-1].content  # consecutive answers merge into one
    assert sorted(answer.split("\n")) == sorted(f"part {t}-{i}" for t in range(4) for i in range(10))


def test_a_replaced_window_leaves_no_trace_in_the_file(tmp_path):
    path = tmp_path / "w.db"
    memory = BasicShortTermMemory({"db_path": str(path)})
    memory.update_history([AgentMessage(U, "my pin is 4711-secret"), AgentMessage(A, "noted")], "s")
    memory.session2history["s"] = [AgentMessage(U, "hello"), AgentMessage(A, "hi")]
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("w.db"))
    assert b"4711-secret" not in on_disk
    memory.close()


def test_a_json_window_of_the_wrong_shape_degrades_the_turn_instead_of_raising(tmp_path):
    import json

    path = tmp_path / "r.json"
    # a list where a record belongs, beside a record of the store's own
    path.write_text(json.dumps({"s": [{"role": "user", "content": "hi"}], "u": {"buffer": []}}))
    memory = RecencyMemory({"db_path": str(path), "system_prompt": "Be kind."})
    assert [(m.role, m.content) for m in memory.build_conversation_context("x", "s")] == [(S, "Be kind."), (U, "x")]
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "t")  # other sessions still work
    assert contents(memory.get_history("t")) == ["q", "a"]


def test_an_unreadable_message_in_a_json_window_is_left_out_and_the_session_still_stores(tmp_path):
    import json

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"s": {"buffer": [
        {"role": "user", "content": "my dog is Rex", "ts": 1.0},
        {"role": "bogus", "content": "a line damaged by hand", "ts": 2.0},
        {"role": "assistant", "content": {"oops": 1}, "ts": 3.0},
        {"role": "assistant", "content": "noted", "ts": 4.0}]}}))
    memory = RecencyMemory({"db_path": str(path), "max_history": 0})
    assert contents(memory.get_history("s")) == ["my dog is Rex", "noted"]
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "s")  # the session stores again
    assert contents(memory.get_history("s")) == ["my dog is Rex", "noted", "q", "a"]
    memory.export("s")  # and exports


def _window_changed_on_disk(path, change: str) -> RecencyMemory:
    """A recency memory on ``path`` holding one exchange, whose window rows ``change`` (SQL with
    ``{table}``) altered behind its back, opened again."""
    import sqlite3

    memory = RecencyMemory({"db_path": str(path)})
    memory.update_history([AgentMessage(U, "my dog is Rex"), AgentMessage(A, "noted")], "s")
    memory.close()
    con = sqlite3.connect(path)
    table = next(r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE '%window%'"))
    con.execute(change.format(table=table))
    con.commit()
    con.close()
    return RecencyMemory({"db_path": str(path)})


def test_a_window_row_whose_text_became_a_blob_is_read_as_text(tmp_path):
    memory = _window_changed_on_disk(tmp_path / "r.db",
                                     "UPDATE {table} SET content = CAST(content AS BLOB) WHERE role = 'user'")
    assert contents(memory.get_history("s")) == ["my dog is Rex", "noted"]
    assert all(isinstance(m.content, str) for m in memory.get_history("s"))


def test_a_window_row_with_a_role_no_memory_writes_costs_that_message_only(tmp_path):
    memory = _window_changed_on_disk(tmp_path / "r.db",  # another program's row
                                     "UPDATE {table} SET role = 'function' WHERE role = 'assistant'")
    assert contents(memory.get_history("s")) == ["my dog is Rex"]
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "s")
    assert contents(memory.get_history("s")) == ["my dog is Rex", "q", "a"]
    assert not list(tmp_path.glob("*.corrupt*"))  # the file was not set aside for one row


@pytest.mark.parametrize("db_path", ["w.db", "w.json"])
def test_a_window_stores_an_update_with_the_time_it_was_said(db_path, tmp_path):
    # A replay of what was kept while the store was down stores it with when it was said: max_age
    # then expires it as it would have, on SQLite as in the JSON file.
    from ovos_memory_plugins._core.clock import said_at

    memory = RecencyMemory({"db_path": str(tmp_path / db_path), "max_age": 3600})
    try:
        with said_at(time.time() - 7200):
            memory.update_history([AgentMessage(MessageRole.USER, "two hours ago"),
                                   AgentMessage(MessageRole.ASSISTANT, "ok")], "s")
        memory.update_history([AgentMessage(MessageRole.USER, "now"), AgentMessage(MessageRole.ASSISTANT, "ok")], "s")
        assert [m.content for m in memory.get_history("s")] == ["now", "ok"]
    finally:
        memory.close()
