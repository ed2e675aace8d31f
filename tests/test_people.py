"""Person scope: one memory per person across their sessions, guests apart, a household by choice.

The conformance kit (tests/test_contract.py) checks every backend and store in person scope;
this file covers the config, moving a session into a person, the composite, the household,
what forget does to facts, a restart, and the command line.
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.cli import main
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.errors import ConfigError
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.testing.llm import closed_port_url

U, A = MessageRole.USER, MessageRole.ASSISTANT
PEOPLE = {"alice": ["kitchen", "alice-*"], "bob": ["bob-phone"]}
PERSON = {"scope": "person", "people": PEOPLE}


def tell(memory, session_id, text, answer="I will remember that."):
    memory.update_history([AgentMessage(U, text), AgentMessage(A, answer)], session_id)
    memory.flush()


def contents(memory, session_id):
    return [m.content for m in memory.get_history(session_id)]


def context_text(memory, session_id, utterance="what do you know about me?"):
    return "\n".join(m.content for m in memory.build_conversation_context(utterance, session_id)[:-1])


def entity(tmp_path, **config):
    return EntityMemory({"db_path": str(tmp_path / "entity.json"), "api_url": closed_port_url(),
                         "request_timeout": 2, **config})


# -- config ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("people", "words"), [
    (["alice"], ["'people'", "an object"]),
    ({"alice": "kitchen"}, ["'people'['alice']", "list"]),
    ({"alice": []}, ["'people'['alice']", "non-empty"]),
    ({"alice": ["kitchen", 3]}, ["'people'['alice']", "3"]),
    ({"": ["kitchen"]}, ["person name"]),
    ({"alice": ["person:bob"]}, ["'person:bob'", "reserved"]),
])
def test_a_malformed_people_is_a_config_error_naming_it(people, words, tmp_path):
    with pytest.raises(ConfigError) as caught:
        RecencyMemory({"scope": "person", "people": people})
    assert all(w in str(caught.value) for w in words), str(caught.value)


def test_people_of_a_caller_that_is_no_json_is_named_not_a_crash():
    from ovos_memory_plugins._memory.people import parse_people

    with pytest.raises(ConfigError, match="must be an object of person name to session ids.*not a list"):
        parse_people(["alice", {"kitchen"}])  # a set inside: no TypeError out of the message


@pytest.mark.parametrize("people", [
    {"alice": ["kitchen"], "bob": ["kitchen"]},
    {"alice": ["kitchen"], "bob": ["kit*"]},
    {"bob": ["k?tchen"], "alice": ["kitchen", "alice-*"]},
])
def test_a_session_claimed_by_two_people_is_refused_at_construction_naming_it_and_both(people):
    with pytest.raises(ConfigError) as caught:
        RecencyMemory({"scope": "person", "people": people})
    assert "'kitchen'" in str(caught.value) and "'alice'" in str(caught.value) and "'bob'" in str(caught.value)


@pytest.mark.parametrize("people", [
    {"alice": ["x-*"], "bob": ["x-*"]},
    {"alice": ["*"], "bob": ["bob-*"]},
    {"bob": ["bob-?"], "alice": ["alice-*", "b*"]},
    {"alice": ["a-*"], "bob": ["a-[0-9]*"]},  # a set: every one of bob's ids is alice's too
    {"alice": ["a-[!x]"], "bob": ["a-[ab]"]},
])
def test_patterns_of_two_people_that_claim_the_same_sessions_are_refused_at_construction(people):
    # They were accepted, and every session of the shared kind refused once it came.
    with pytest.raises(ConfigError, match="claim the same sessions") as caught:
        RecencyMemory({"scope": "person", "people": people})
    assert "'alice'" in str(caught.value) and "'bob'" in str(caught.value)


@pytest.mark.parametrize("people", [{"alice": ["a-[!0-9]*"], "bob": ["a-[0-9]*"]},
                                    {"alice": ["kitchen-[ab]"], "bob": ["kitchen-[cd]"]}])
def test_patterns_with_sets_that_share_no_session_are_accepted(people):
    with RecencyMemory({"scope": "person", "people": people}) as memory:
        assert sorted(memory.people()) == ["alice", "bob"]


def test_a_session_two_patterns_claim_is_refused_when_it_comes(tmp_path):
    # Two patterns may overlap on ids nobody can list in advance: the first such id is refused.
    with RecencyMemory({"scope": "person", "people": {"alice": ["*-kitchen"], "bob": ["bob-*"]}}) as memory:
        tell(memory, "alice-kitchen", "hello")
        with pytest.raises(ConfigError, match="'bob-kitchen' is claimed by both 'alice' and 'bob'"):
            memory.get_history("bob-kitchen")


def test_a_window_takes_no_global_scope_and_retrieval_takes_person(monkeypatch):
    # The reference's window had no 'scope' and ignored one: the persona loads, warned, and each
    # session keeps its own window.
    from ovos_memory_plugins._core.log import LOG

    warned: list[str] = []
    monkeypatch.setattr(LOG, "warning", lambda msg, *a, **k: warned.append(str(msg)))
    with RecencyMemory({"scope": "global"}) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        assert memory.scope == "session" and contents(memory, "bedroom") == []
    assert any("'scope' is 'global', not one of 'session', 'person'; read as 'session'" in w for w in warned)
    with pytest.raises(ConfigError, match="'scope' is 'persons'"):  # a typo of ours is no reference value
        RecencyMemory({"scope": "persons", "people": {"alice": ["kitchen"]}})
    with LexicalMemory({"db_path": ":memory:", **PERSON}) as memory:
        assert memory.scope == "person" and memory.people() == PEOPLE


def test_the_callers_people_dict_is_not_kept_or_changed():
    people = {"alice": ["kitchen"]}
    with RecencyMemory({"scope": "person", "people": people}) as memory:
        people["alice"].append("bedroom")
        tell(memory, "kitchen", "my dog is Rex")
        assert contents(memory, "bedroom") == []
    assert people == {"alice": ["kitchen", "bedroom"]}


def test_person_scope_without_people_keeps_every_session_apart():
    with RecencyMemory({"scope": "person"}) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        assert contents(memory, "bedroom") == [] and memory.people() == {}


def test_people_methods_outside_person_scope_or_for_an_unknown_name_are_clear_errors():
    with RecencyMemory({}) as memory:
        assert memory.people() == {}
        with pytest.raises(ConfigError, match="scope 'person'"):
            memory.forget_person("alice")
    with RecencyMemory(PERSON) as memory, pytest.raises(ConfigError, match="no person named 'carol'.*alice, bob"):
        memory.export_person("carol")


@pytest.mark.parametrize("session_id", ["person:alice", "household:"])
def test_a_caller_cannot_use_a_key_of_the_people(session_id):
    with RecencyMemory({**PERSON, "household": session_id == "household:"}) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        with pytest.raises(ValueError, match="reserved"):
            memory.get_history(session_id)
        with pytest.raises(ValueError, match="reserved"):
            memory.update_history([AgentMessage(U, "poison")], session_id)


@pytest.mark.parametrize("cls", [RecencyMemory, LexicalMemory, EntityMemory])
def test_a_key_of_the_people_is_refused_in_session_scope_too_so_it_cannot_reach_someones_memory(cls, tmp_path):
    config = {"db_path": str(tmp_path / "store.db"), **({"api_url": None} if cls is EntityMemory else {})}
    with cls(config) as memory:
        for session_id in ("person:alice", "household:"):
            with pytest.raises(ValueError, match="reserved"):
                tell(memory, session_id, "My name is Mallory. I live in Berlin.")
            with pytest.raises(ValueError, match="reserved"):
                memory.build_conversation_context("what's my name?", session_id)
            with pytest.raises(ValueError, match="reserved"):
                memory.import_session({"plugin": memory.plugin_name, "session_id": session_id, "window": []})
        assert memory.sessions() == []
    with cls({**config, **PERSON}) as memory:  # person scope switched on later: alice's memory is hers alone
        assert "Mallory" not in context_text(memory, "kitchen", "what's my name?")


def test_what_a_person_scope_stored_can_still_be_exported_and_forgotten_in_session_scope(tmp_path):
    config = {"db_path": str(tmp_path / "w.db")}
    with RecencyMemory({**config, **PERSON}) as memory:
        tell(memory, "kitchen", "my dog is Rex")
    with RecencyMemory(config) as memory:  # back in session scope: the person's key is listed
        assert memory.sessions() == ["person:alice"]
        assert [m["content"] for m in memory.export("person:alice")["window"]][0] == "my dog is Rex"
        memory.forget("person:alice")
        assert memory.sessions() == []


# -- a person across sessions, restarts and stores -----------------------------------------------
@pytest.mark.parametrize("store", ["window.db", "window.json"])
def test_the_window_continues_from_room_to_room_and_across_a_restart(store, tmp_path):
    config = {"db_path": str(tmp_path / store), **PERSON}
    with RecencyMemory(config) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        tell(memory, "alice-bedroom", "and my cat is Tom")
        tell(memory, "guest-1", "I am a guest")
    with RecencyMemory(config) as memory:
        assert contents(memory, "alice-phone") == ["my dog is Rex", "I will remember that.", "and my cat is Tom",
                                                   "I will remember that."]
        assert contents(memory, "bob-phone") == [] and contents(memory, "guest-2") == []
        assert contents(memory, "guest-1")[0] == "I am a guest"
        assert memory.sessions() == ["guest-1", "person:alice"]


def test_recall_follows_the_person_and_not_to_a_guest(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "lex.db"), "max_history": 0, **PERSON}) as memory:
        tell(memory, "kitchen", "my passport is in the blue drawer")
        tell(memory, "guest-1", "my passport is in the red suitcase")
        mine = [h.content for h in memory.search("passport", "alice-car")]
        assert any("blue drawer" in h for h in mine) and not any("red suitcase" in h for h in mine)
        assert not any("blue drawer" in h.content for h in memory.search("passport", "guest-1"))
        assert "blue drawer" in context_text(memory, "alice-car", "where is my passport?")


def test_the_summary_is_the_persons(tmp_path):
    config = {"db_path": str(tmp_path / "lt.json"), "api_url": None, "summarize_every": 2, "recent_window": 1,
              **PERSON}
    with LongTermMemory(config) as memory:
        for n in range(4):
            tell(memory, ("kitchen", "alice-bedroom")[n % 2], f"my favourite colour number {n} is teal")
        assert "teal" in memory.export("alice-garden")["summary"]
        assert memory.export("bob-phone")["summary"] == ""


def test_two_satellites_of_one_person_at_once_lose_no_turn_and_keep_each_ones_order(tmp_path):
    with RecencyMemory({"db_path": str(tmp_path / "w.db"), "max_history": 0, **PERSON}) as memory:
        def talk(session_id):
            for n in range(25):
                memory.update_history([AgentMessage(U, f"{session_id} {n}"), AgentMessage(A, "ok")], session_id)

        threads = [threading.Thread(target=talk, args=(sid,)) for sid in ("kitchen", "alice-bedroom")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        window = contents(memory, "alice-phone")
    for sid in ("kitchen", "alice-bedroom"):
        assert [w for w in window if w.startswith(sid + " ")] == [f"{sid} {n}" for n in range(25)]


# -- people change: a session that becomes a person's keeps what it stored --------------------------
def test_a_session_moved_to_a_person_brings_its_window_and_documents_with_their_times(tmp_path):
    before = {"db_path": str(tmp_path / "lex.db"), "max_history": 0, **PERSON}
    with LexicalMemory(before) as memory:
        tell(memory, "kitchen", "my bike is green")
        tell(memory, "office", "my locker number is 42")
        office_docs = {d["content"]: d["ts"] for d in memory.export("office")["documents"]}
    after = {**before, "people": {**PEOPLE, "alice": ["kitchen", "office", "alice-*"]}}
    with LexicalMemory(after) as memory:
        assert contents(memory, "alice-x") == ["my bike is green", "I will remember that.",
                                               "my locker number is 42", "I will remember that."]
        docs = {d["content"]: d["ts"] for d in memory.export_person("alice")["documents"]}
        assert office_docs and all(docs.get(text) == ts for text, ts in office_docs.items())
        assert memory.sessions() == ["person:alice"]
        assert "locker number is 42" in context_text(memory, "kitchen", "what is my locker number?")
    with LexicalMemory(after) as memory:  # moved once: a second start adds nothing
        assert len(memory.export_person("alice")["documents"]) == len(docs)


def test_a_long_running_memory_forgets_and_exports_a_person_whole_after_an_old_config_wrote_apart(tmp_path):
    # The web page runs for days with the new people; a persona still on the old one writes its
    # device's session under its own id after the page's memory moved the sessions once.
    old = {"db_path": str(tmp_path / "lex.db"), "scope": "person", "people": {"alice": ["alice-*"]}}
    new = {**old, "people": {"alice": ["alice-*", "kitchen"]}}
    with LexicalMemory(new) as page:
        tell(page, "alice-phone", "my bike is green")
        with LexicalMemory(old) as persona:
            tell(persona, "kitchen", "the kitchen secret is kitchensecret99")
        assert "kitchen" in page.sessions()
        exported = json.dumps(page.export_person("alice"))
        assert "kitchensecret99" in exported and "my bike is green" in exported
        tell(page, "alice-phone", "and my car is red")
        with LexicalMemory(old) as persona:
            tell(persona, "kitchen", "the pantry code word is pantryword77")
        page.forget_person("alice")
        assert page.sessions() == []
    assert b"kitchensecret99" not in (tmp_path / "lex.db").read_bytes()
    assert b"pantryword77" not in (tmp_path / "lex.db").read_bytes()


def test_a_moved_session_joins_the_persons_summary_and_facts(tmp_path):
    lt = {"db_path": str(tmp_path / "lt.json"), "api_url": None, "summarize_every": 1, "recent_window": 0}
    with LongTermMemory({**lt, **PERSON}) as memory:
        tell(memory, "kitchen", "my sister is called Maya")
        tell(memory, "office", "my boss is called Igor")
    with LongTermMemory({**lt, "scope": "person", "people": {"alice": ["kitchen", "office"]}}) as memory:
        summary = memory.export_person("alice")["summary"]
        assert "Maya" in summary and "Igor" in summary
    with entity(tmp_path, **PERSON) as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "office", "I moved to Berlin")
    with entity(tmp_path, scope="person", people={"alice": ["kitchen", "office"]}) as memory:
        assert memory.facts("kitchen") == ["User lives in Berlin"]  # merged, the later city superseding


# -- the composite and the household ----------------------------------------------------------------
def composite(tmp_path, **top):
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
               {"module": "ovos-memory-plugin-entity",
                "config": {"db_path": str(tmp_path / "e.json"), "household": True}}]
    return CompositeMemory({"members": members, "api_url": closed_port_url(), "request_timeout": 2, **top})


def test_the_composite_gives_its_scope_and_people_to_every_member(tmp_path):
    with composite(tmp_path, **PERSON) as memory:
        for member in memory.members:
            assert member.memory.scope == "person" and member.memory.people() == PEOPLE
        assert memory.people() == PEOPLE


def test_a_global_composite_still_loads_a_window_member(tmp_path):
    with composite(tmp_path, scope="global") as memory:
        assert [m.memory.scope for m in memory.members] == ["session", "global"]


def test_household_facts_are_heard_by_every_person_and_never_written_by_a_guest(tmp_path):
    with composite(tmp_path, **PERSON) as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "guest-1", "my name is Mallory")
        bob = context_text(memory, "bob-phone")
        assert "lives in Paris" in bob and "Mallory" not in bob
        assert "I live in Paris" not in bob  # the window stays alice's
        assert "Paris" not in context_text(memory, "guest-2")
        assert "Mallory" in context_text(memory, "guest-1")


def test_a_member_that_keeps_its_own_per_person_in_a_household_composite_keeps_it_private(tmp_path):
    # "Share the facts, keep the chats private": the top level shares, the window and recall say no.
    private = {"household": False}
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db"), **private}},
               {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db"), **private}},
               {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json")}}]
    with CompositeMemory({"members": members, "api_url": closed_port_url(), "request_timeout": 2, "household": True,
                          **PERSON}) as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "alice-car", "my diary entry: I secretly dislike the cooking")
        bob = context_text(memory, "bob-phone", "what is in the diary entry about cooking?")
        assert "lives in Paris" in bob  # the household's facts
        assert "diary" not in bob and "Paris" not in " ".join(contents(memory, "bob-phone"))
        assert [m.memory.sessions() for m in memory.members] == [["person:alice"], ["person:alice"], ["household:"]]
        assert "diary" in context_text(memory, "kitchen", "what is in the diary entry about cooking?")


@pytest.mark.parametrize("own", [{"scope": "session"}, {"scope": " Session"}, {"scope": None},
                                 {"people": {"alice": ["alice-*"]}}],
                         ids=["scope-session", "scope-spelt-otherwise", "scope-null", "people"])
def test_a_members_own_scope_or_people_in_a_person_composite_is_refused_naming_it(tmp_path, own):
    # The composite hands every member the person's key: that member's own mapping would be ignored.
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db"), **own}}]
    with pytest.raises(ConfigError, match=f"ovos-memory-plugin-recency.*{next(iter(own))}"):
        CompositeMemory({"members": members, **PERSON})
    same = {"db_path": str(tmp_path / "r.db"), "scope": "person", "people": PEOPLE}
    with CompositeMemory({"members": [{"module": "ovos-memory-plugin-recency", "config": same}], **PERSON}):
        pass  # the same values are no conflict


def test_a_global_member_of_a_person_composite_still_shares_with_every_session(tmp_path):
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
               {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json"),
                                                                  "scope": "global"}}]
    with CompositeMemory({"members": members, "api_url": None, **PERSON}) as memory:
        tell(memory, "kitchen", "I live in Paris")
        assert "lives in Paris" in context_text(memory, "guest-1")


def test_forget_of_a_person_forgets_both_the_new_and_the_previous_value(tmp_path):
    with entity(tmp_path, **PERSON) as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "alice-car", "I moved to Berlin")
        tell(memory, "bob-phone", "I live in Lisbon")
        memory.forget("alice-car")
        assert memory.facts("kitchen") == [] and memory.export_person("alice")["superseded"] == []
        assert memory.facts("bob-phone") == ["User lives in Lisbon"]


def test_forget_of_a_household_memory_forgets_it_for_everyone(tmp_path):
    with entity(tmp_path, household=True, **PERSON) as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "guest-1", "I live in Rome")
        memory.forget_person("bob")
        assert memory.facts("alice-car") == [] and memory.facts("guest-1") == ["User lives in Rome"]


# -- the command line -------------------------------------------------------------------------------
@pytest.fixture
def people_cli(tmp_path):
    config = {"db_path": str(tmp_path / "w.db"), **PERSON}
    with RecencyMemory(config) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        tell(memory, "bob-phone", "my dog is Fido")
        tell(memory, "guest-1", "just visiting")
    return ["--module", "ovos-memory-plugin-recency", "--config", json.dumps(config)]


def test_sessions_and_stats_show_people(people_cli, capsys):
    assert main(["sessions", *people_cli]) == 0
    assert capsys.readouterr().out.split() == ["guest-1", "person:alice", "person:bob"]
    assert main(["stats", *people_cli]) == 0
    out = capsys.readouterr().out
    assert "2 of them people's" in out
    assert re.search(r"person:alice\s*│\s*alice\s*│", out) and re.search(r"guest-1\s*│\s*-\s*│", out), out


def test_stats_counts_a_household_members_facts_in_the_households_row_only(tmp_path, capsys):
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
               {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json"),
                                                                  "household": True}}]
    config = {"members": members, "api_url": None, **PERSON}
    with CompositeMemory(config) as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "bob-phone", "My name is Bob")
    assert main(["stats", "--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in out.splitlines() if line.count("│") > 3}
    assert rows["household:"][-1] == "2" and rows["total"][-1] == "2", out
    assert rows["person:alice"][-1] == rows["person:bob"][-1] == "0", out


def test_export_and_forget_by_person(people_cli, capsys):
    assert main(["export", "--person", "alice", *people_cli]) == 0
    assert json.loads(capsys.readouterr().out)["window"][0]["content"] == "my dog is Rex"
    assert main(["export", "alice-anything", *people_cli]) == 0
    assert json.loads(capsys.readouterr().out)["session_id"] == "person:alice"
    assert main(["forget", "--person", "alice", *people_cli]) == 0
    assert "forgot person 'alice': 2 item(s) deleted" in capsys.readouterr().out
    assert main(["sessions", *people_cli]) == 0
    assert capsys.readouterr().out.split() == ["guest-1", "person:bob"]


def test_an_unknown_person_is_one_line_with_exit_4(people_cli, capsys):
    assert main(["forget", "--person", "carol", *people_cli]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no person 'carol'" in err and "alice, bob" in err


# -- the documented personas ------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def documented_blocks(page):
    """The composite blocks of the persona JSON in ``page`` (whole personas and bare blocks)."""
    blocks = []
    for text in re.findall(r"```json\n(.*?)```", (ROOT / page).read_text(encoding="utf-8"), re.S):
        data = json.loads(text if text.lstrip().startswith("{") else "{" + text + "}")
        block = data.get("ovos-memory-plugin-composite")
        if block is not None:
            blocks.append(block)
    return blocks


@pytest.mark.parametrize("page", ["README.md", "docs/first-persona.md", "docs/people.md"])
def test_every_documented_persona_remembers_a_person_in_a_second_session(page):
    blocks = [b for b in documented_blocks(page) if b.get("scope") == "person"]
    assert blocks, f"{page} shows no persona in person scope"
    for block in blocks:
        sessions = next(iter(block["people"].values()))  # the first person's
        one, two = (sessions + [sessions[0]])[:2]
        with CompositeMemory({**block, "api_url": closed_port_url(), "request_timeout": 2}) as memory:
            tell(memory, one.replace("*", "1"), "My dog is called Biscuit")
            assert "Biscuit" in context_text(memory, two.replace("*", "2"), "what is my dog called?"), (page, block)
            assert "Biscuit" not in context_text(memory, "visitor", "what is my dog called?") or "*" in sessions


def test_a_store_down_while_moving_sessions_costs_no_turn_and_the_move_happens_later(tmp_path, monkeypatch):
    from ovos_memory_plugins.errors import StoreUnavailable

    config = {"db_path": str(tmp_path / "w.db"), **PERSON}
    with RecencyMemory(config) as memory:
        tell(memory, "office", "my locker number is 42")
    moved = {**config, "people": {**PEOPLE, "alice": ["kitchen", "office"]}}
    with RecencyMemory(moved) as memory:
        def down():
            raise StoreUnavailable("the store is down")

        monkeypatch.setattr(memory, "sessions", down)
        tell(memory, "kitchen", "my bike is green")  # the turn is stored all the same
        monkeypatch.undo()
        assert contents(memory, "kitchen") == ["my bike is green", "I will remember that.",
                                               "my locker number is 42", "I will remember that."]


@pytest.mark.parametrize("cls", [RecencyMemory, LexicalMemory])
def test_turns_another_process_writes_while_a_session_moves_are_moved_too(cls, tmp_path, monkeypatch):
    config = {"db_path": str(tmp_path / "w.db"), **PERSON}
    old = cls(config)  # a persona still on the old people, writing its session as it moves
    tell(old, "office", "my locker number is 42")
    moved = {**config, "people": {**PEOPLE, "alice": ["kitchen", "office"]}}
    with cls(moved) as memory:
        export, writes = memory.export, iter(["my bike is green", "my dog is Rex"])

        def export_then_a_write(session_id):
            data = export(session_id)
            text = next(writes, None)
            if text:  # lands after this copy was taken, before the forget
                tell(old, "office", text)
            return data

        monkeypatch.setattr(memory, "export", export_then_a_write)
        texts = contents(memory, "kitchen")
        monkeypatch.undo()
        assert [t for t in texts if t.startswith("my ")] == ["my locker number is 42", "my bike is green",
                                                            "my dog is Rex"]
        assert memory.sessions() == ["person:alice"]
    old.close()


def test_a_longterm_session_moving_while_written_counts_each_exchange_once(tmp_path, monkeypatch):
    base = {"db_path": str(tmp_path / "lt.json"), "api_url": None, "summarize_every": 100, "recent_window": 50}
    old = LongTermMemory({**base, **PERSON})
    for text in ("my bike is green", "my dog is Rex"):
        tell(old, "office", text)
    with LongTermMemory({**base, "scope": "person", "people": {"alice": ["kitchen", "office"]}}) as memory:
        export, writes = memory.export, iter(["my cat is Tom"])

        def export_then_a_write(session_id):
            data = export(session_id)
            text = next(writes, None)
            if text:
                tell(old, "office", text)
            return data

        monkeypatch.setattr(memory, "export", export_then_a_write)
        memory.get_history("kitchen")
        monkeypatch.undo()
        data = memory.export("kitchen")
        assert (len(data["recent"]) // 2, data["exchange_count"]) == (3, 3)
    old.close()


def test_session2history_shows_the_persons_window_under_any_of_their_sessions():
    with RecencyMemory(PERSON) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        view = memory.session2history
        assert "alice-car" in view and "bob-phone" not in view and list(view) == ["person:alice"]
        assert [m.content for m in view["alice-car"]] == ["my dog is Rex", "I will remember that."]
        view["alice-car"].append(AgentMessage(U, "and a cat"))
        assert contents(memory, "kitchen")[-1] == "and a cat"


def test_session2history_in_person_scope_reads_and_forgets_the_keys_it_lists():
    with RecencyMemory(PERSON) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        view = memory.session2history
        assert {key: [m.content for m in window] for key, window in dict(view).items()} == {
            "person:alice": ["my dog is Rex", "I will remember that."]}
        assert "my dog is Rex" in repr(view)
        with pytest.raises(ValueError, match="person:alice"):  # written only through a session of hers
            view["person:alice"] = [AgentMessage(U, "I am Alice now")]
        del view["person:alice"]
        assert list(view) == [] and contents(memory, "kitchen") == []


def test_assigning_session2history_in_person_scope_keeps_the_memory_of_a_session_it_names(tmp_path):
    # The view lists "person:alice"; a value naming her "kitchen" is the same memory: its window is
    # replaced, and her recall documents are not forgotten with a key the value did not spell.
    with LexicalMemory({"db_path": str(tmp_path / "l.db"), **PERSON}) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        tell(memory, "bob-phone", "my cat is Tom")
        memory.session2history = {"kitchen": list(memory.session2history["kitchen"])}
        assert [h.content.split("\n")[0] for h in memory.search("dog", "alice-car")] == ["Q: my dog is Rex"]
        assert memory.sessions() == ["person:alice"] and contents(memory, "alice-car")[0] == "my dog is Rex"


def test_facts_stated_in_global_scope_move_to_their_person_and_are_forgotten_with_them(tmp_path):
    path = tmp_path / "entity.json"
    with entity(tmp_path, scope="global") as memory:
        tell(memory, "kitchen", "My favourite colour is turquoise")
        tell(memory, "bob-phone", "I live in Berlin")
    with entity(tmp_path, **PERSON) as memory:
        assert "turquoise" in context_text(memory, "alice-car") and "Berlin" not in context_text(memory, "alice-car")
        assert memory.sessions() == ["person:alice", "person:bob"]  # moved out of the shared record
        assert [f["value"] for f in memory.export_person("alice")["facts"]] == ["turquoise"]
        memory.forget_person("alice")
    assert b"turquoise" not in path.read_bytes() and b"Berlin" in path.read_bytes()
    with entity(tmp_path, scope="session") as memory:  # and in session scope, still the session's to see and forget
        tell(memory, "den", "I live in Oslo")
    with entity(tmp_path, scope="global") as memory:
        tell(memory, "porch", "My favourite colour is amber")
    with entity(tmp_path, scope="global") as memory:
        tell(memory, "porch", "I live in Lisbon")
    with entity(tmp_path, scope="session") as memory:
        assert "porch" in memory.sessions() and "amber" in json.dumps(memory.export("porch"))
        lisbon = next(f["text"] for f in memory.export("porch")["facts"] if "Lisbon" in f["text"])
        assert memory.forget_fact("porch", lisbon) == 1 and memory.forget_fact("den", "User lives in Oslo") == 1
        assert "Lisbon" not in json.dumps(memory.export("porch"))
        with pytest.raises(ValueError, match="__global__"):  # the shared record is no session's
            memory.export("__global__")
        memory.forget("porch")
    assert b"amber" not in path.read_bytes() and b"Lisbon" not in path.read_bytes()


@pytest.mark.parametrize("after", [{"scope": "session"}, PERSON])
def test_facts_a_session_stated_while_global_reach_its_turns_in_its_own_scope_after(tmp_path, after):
    # A guest (or any session of nobody's) said them while the scope was global: listed and
    # exported as the session's, they never reached its context after the scope changed.
    with entity(tmp_path, scope="global") as memory:
        tell(memory, "guest-1", "My name is Mallory. I work at Evilcorp.")
        tell(memory, "bob-phone", "I live in Berlin")
    with entity(tmp_path, **after) as memory:
        seen = context_text(memory, "guest-1", "what is my name and where do I work?")
        assert "Mallory" in seen and "Evilcorp" in seen and "Berlin" not in seen
        assert "Mallory" not in context_text(memory, "bob-phone", "what is my name?")
        tell(memory, "guest-1", "I work at Initech now.")  # the moved facts are superseded as any are
        assert "Initech" in context_text(memory, "guest-1", "where do I work?")
        assert "Evilcorp" not in context_text(memory, "guest-1", "where do I work?")
        memory.forget("guest-1")
    assert b"Mallory" not in (tmp_path / "entity.json").read_bytes()


def test_people_cannot_be_assigned_after_construction():
    with RecencyMemory(PERSON) as memory:
        with pytest.raises(AttributeError, match="'people' is fixed at construction"):
            memory.people = {"alice": ["kitchen"]}
        assert memory.people() == {"alice": ["kitchen", "alice-*"], "bob": ["bob-phone"]}


def test_assigning_scope_person_maps_sessions_from_the_next_call(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "lex.db"), "people": PEOPLE}) as memory:
        tell(memory, "kitchen", "my bike is green")
        assert contents(memory, "alice-car") == []
        memory.scope = "person"
        assert contents(memory, "alice-car")[0] == "my bike is green"  # the kitchen's window moved to alice
        memory.scope = "session"
        assert contents(memory, "alice-car") == [] and memory.people() == {}


def test_forget_in_global_scope_removes_the_sessions_facts_without_reviving_what_they_superseded(tmp_path):
    with entity(tmp_path, scope="global") as memory:
        tell(memory, "kitchen", "I live in Paris")
        tell(memory, "car", "I moved to Berlin")
        tell(memory, "kitchen", "my name is Ana")
        memory.forget("car")
        assert memory.facts("anywhere") == ["User's name is Ana"]


def test_the_web_page_lists_people_forgets_and_exports_them(tmp_path):
    from ovos_memory_plugins._serve import views

    with RecencyMemory({"db_path": str(tmp_path / "w.db"), **PERSON}) as memory:
        tell(memory, "kitchen", "my dog is Rex")
        assert views.people(memory) == [{"name": "alice", "sessions": ["alice-*", "kitchen"]},
                                        {"name": "bob", "sessions": ["bob-phone"]}]
        assert views.memory_info(memory)["people"] is True
        assert views.export_person(memory, "alice")["window"][0]["content"] == "my dog is Rex"
        assert views.forget_person(memory, "alice")["forgotten"] == 2
        assert contents(memory, "alice-car") == []
    with RecencyMemory({}) as memory:
        assert views.people(memory) == [] and views.memory_info(memory)["people"] is False


def test_a_guest_who_becomes_a_person_brings_their_facts_into_a_household_member(tmp_path):
    with composite(tmp_path, scope="person", people={"alice": ["kitchen"], "bob": ["bob-phone"]}) as memory:
        tell(memory, "office", "I live in Paris")  # a guest, for now
        assert "Paris" not in context_text(memory, "bob-phone")
    with composite(tmp_path, scope="person", people={"alice": ["kitchen", "office"], "bob": ["bob-phone"]}) as memory:
        assert "lives in Paris" in context_text(memory, "bob-phone")  # the household's facts now
        assert "office" not in memory.sessions()


@pytest.mark.parametrize("make", [
    lambda tmp_path: RecencyMemory({"db_path": str(tmp_path / "recency.db"), **PERSON}),
    lambda tmp_path: LexicalMemory({"db_path": str(tmp_path / "lexical.db"), **PERSON}),
    lambda tmp_path: CompositeMemory({**PERSON, "members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]}),
], ids=["recency", "lexical", "composite"])
def test_an_export_imported_without_a_session_id_lands_where_its_session_reads(make, tmp_path):
    with RecencyMemory({"db_path": str(tmp_path / "before.db")}) as before:  # the kitchen before it was Alice's
        tell(before, "kitchen", "the oven is broken")
        device_export = before.export("kitchen")
    with make(tmp_path) as memory:
        tell(memory, "alice-phone", "my locker code is 4242")
        person_export = memory.export_person("alice")
        memory.import_session({**device_export, "plugin": memory.plugin_name})
        assert memory.sessions() == ["person:alice"]
        assert "the oven is broken" in contents(memory, "alice-phone")
        memory.forget_person("alice")
        memory.import_session(person_export)  # a person's export goes back under the person's key
        assert memory.sessions() == ["person:alice"] and "my locker code is 4242" in contents(memory, "kitchen")


@pytest.mark.parametrize("household", [False, True])
def test_an_import_into_a_memory_no_session_reads_is_refused_naming_it(tmp_path, household):
    with RecencyMemory({"db_path": str(tmp_path / "before.db"), **PERSON}) as before:
        tell(before, "alice-phone", "my locker code is 4242")
        alice = before.export_person("alice")
    unknown = {**alice, "session_id": "person:zoe"}
    # With a household, alice's key maps to the household's memory, which her sessions read.
    strays = [] if household else [{**alice, "session_id": "household:"}]
    with RecencyMemory({"db_path": str(tmp_path / "after.db"), **PERSON, "household": household}) as memory:
        for data in [unknown, *strays]:
            with pytest.raises(ValueError, match="no session of 'people' reads it") as err:
                memory.import_session(data)
            assert repr(data["session_id"]) in str(err.value)
        assert memory.sessions() == []
        memory.import_session(alice)
        assert "my locker code is 4242" in contents(memory, "kitchen")


# -- keys listed after people changed: each is the memory it names ------------------------------
def _cli_of(config):
    return ["--module", "ovos-memory-plugin-recency", "--config", json.dumps(config)]


def test_a_removed_persons_key_is_their_memory_never_the_one_a_pattern_now_claims(tmp_path, capsys):
    from ovos_memory_plugins._memory.people import inside

    config = {"db_path": str(tmp_path / "w.db"), "scope": "person"}
    with RecencyMemory({**config, "people": {"alice": ["alice-*"], "bob": ["bob-*"]}}) as memory:
        tell(memory, "alice-phone", "my diary word is hummingbird")
        tell(memory, "bob-phone", "my secret word is lemonade")
        bob = memory.export_person("bob")
    everyone = {**config, "people": {"alice": ["*"]}}  # bob left; alice's pattern matches any id
    with RecencyMemory(everyone) as memory:
        assert memory.memory_key("person:bob") == "person:bob"
        with inside():
            assert "lemonade" in json.dumps(memory.export("person:bob"))
            assert "hummingbird" not in json.dumps(memory.export("person:bob"))
        with pytest.raises(ValueError, match="no session of 'people' reads it"):
            memory.import_session(bob)  # not into alice's memory
    assert main(["export", "person:bob", *_cli_of(everyone)]) == 0
    assert "lemonade" in capsys.readouterr().out
    assert main(["forget", "person:bob", *_cli_of(everyone)]) == 0
    with RecencyMemory(everyone) as memory:
        assert memory.sessions() == ["person:alice"]
        assert contents(memory, "anything")[0] == "my diary word is hummingbird"


def test_a_device_listed_under_its_own_id_is_shown_exported_and_forgotten_as_itself(tmp_path, capsys):
    config = {"db_path": str(tmp_path / "w.db"), "scope": "person"}
    with RecencyMemory({**config, "people": {"alice": ["alice-*"]}}) as memory:
        tell(memory, "alice-phone", "my locker code is 4242")
        tell(memory, "kitchen", "the oven is broken")  # a guest, then
    claimed = _cli_of({**config, "people": {"alice": ["alice-*", "kitchen"]}})
    # A command that only reads moves nothing: the kitchen is still listed apart, and is itself.
    assert main(["sessions", *claimed]) == 0
    assert capsys.readouterr().out.split() == ["kitchen", "person:alice"]
    assert main(["export", "kitchen", *claimed]) == 0
    kitchen = capsys.readouterr().out
    assert "oven" in kitchen and "4242" not in kitchen
    assert main(["export", "--all", *claimed]) == 0
    sessions = {s["session_id"]: json.dumps(s) for s in json.loads(capsys.readouterr().out)["sessions"]}
    assert "oven" in sessions["kitchen"] and "4242" not in sessions["kitchen"] and "4242" in sessions["person:alice"]
    assert main(["forget", "kitchen", *claimed]) == 0  # the kitchen's own copy, not alice
    with RecencyMemory({**config, "people": {"alice": ["alice-*"]}}) as memory:
        assert memory.sessions() == ["person:alice"]
        assert contents(memory, "alice-phone")[0] == "my locker code is 4242"


def test_forget_by_person_reaches_a_device_people_named_after_it_stored(tmp_path, capsys):
    config = {"db_path": str(tmp_path / "lex.db"), "scope": "person"}
    with LexicalMemory({**config, "people": {"alice": ["kitchen"]}}) as memory:
        tell(memory, "kitchen", "my locker code is 4242")
        tell(memory, "alice-tablet", "my bank pin is 7788")  # a guest, then
    claimed = ["--module", "ovos-memory-plugin-lexical",
               "--config", json.dumps({**config, "people": {"alice": ["kitchen", "alice-tablet"]}})]
    assert main(["export", "--person", "alice", *claimed]) == 0  # an export only looks: it says what it left
    out, err = capsys.readouterr()
    assert "4242" in out and "7788" not in out and "'alice-tablet'" in err
    assert main(["forget", "--person", "alice", *claimed]) == 0
    capsys.readouterr()
    assert not any(b"7788" in path.read_bytes() or b"4242" in path.read_bytes() for path in tmp_path.iterdir())
    with LexicalMemory({**config, "people": {"alice": ["kitchen", "alice-tablet"]}}) as memory:
        assert memory.sessions() == [] and "7788" not in context_text(memory, "kitchen", "what is my bank pin?")
    with LexicalMemory({**config, "people": {"alice": ["kitchen"]}}) as memory:
        tell(memory, "bob-kitchen", "a guest's words")
    both = ["--module", "ovos-memory-plugin-lexical",
            "--config", json.dumps({**config, "people": {"alice": ["*-kitchen"], "bob": ["bob-*"]}})]
    assert main(["export", "--person", "alice", *both]) == 0  # a session two people claim is nobody's
    assert "bob-kitchen" not in capsys.readouterr().err


def test_a_session_two_peoples_patterns_claim_stays_apart_said_once_and_the_others_move(tmp_path, monkeypatch):
    from ovos_memory_plugins._core import log as _log

    errors: list[str] = []
    monkeypatch.setattr(_log.LOG, "error", lambda msg, *a: errors.append(str(msg)))
    config = {"db_path": str(tmp_path / "w.db"), "scope": "person"}
    with RecencyMemory({**config, "people": {"alice": ["alice-*"]}}) as memory:
        tell(memory, "bob-kitchen", "bob was here")
        tell(memory, "zed-kitchen", "zed's turn")
    overlapping = {**config, "people": {"alice": ["*-kitchen", "alice-*"], "bob": ["bob-*"]}}
    with RecencyMemory(overlapping) as memory:
        for _ in range(3):
            assert contents(memory, "alice-phone") == ["zed's turn", "I will remember that."]
        assert memory.sessions() == ["bob-kitchen", "person:alice"]
    claimed = [e for e in errors if "'bob-kitchen'" in e]
    assert len(claimed) == 1 and "claimed by both" in claimed[0]


def test_switching_the_household_on_moves_each_persons_memory_into_it(tmp_path):
    config = {"db_path": str(tmp_path / "w.db"), **PERSON}
    with RecencyMemory(config) as memory:
        tell(memory, "kitchen", "my diary word is hummingbird")
    with RecencyMemory({**config, "household": True}) as memory:
        assert contents(memory, "bob-phone")[0] == "my diary word is hummingbird"
        assert memory.sessions() == ["household:"]


def test_forgetting_a_person_from_the_command_line_reaches_a_household_member_of_a_composite(tmp_path, capsys):
    config = {"scope": "person", "people": PEOPLE, "members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "w.db")}},
        {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json"), "api_url": None,
                                                           "household": True}}]}
    cli = ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]
    for forget in (["--person", "alice"], ["kitchen"], ["person:alice"]):
        with CompositeMemory(config) as memory:
            tell(memory, "kitchen", "I live in Paris")
            assert "Paris" in context_text(memory, "bob-phone", "where do I live?")  # the household's fact
        assert main(["forget", *forget, *cli]) == 0, forget
        assert "Paris" not in (tmp_path / "e.json").read_text(), forget
        capsys.readouterr()


@pytest.mark.parametrize("private", [False, True], ids=["all-shared", "window-private"])
def test_a_household_composites_sessions_are_shown_forgotten_and_listed_by_any_of_their_ids(tmp_path, capsys, private):
    recency = {"db_path": str(tmp_path / "w.db"), **({"household": False} if private else {})}
    config = {"scope": "person", "people": PEOPLE, "household": True, "api_url": None, "members": [
        {"module": "ovos-memory-plugin-recency", "config": recency},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]}
    cli = ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]
    with CompositeMemory(config) as memory:
        tell(memory, "kitchen", "my diary word is hummingbird")
        assert "kitchen" in memory.session2history and "guest-1" not in memory.session2history
        assert memory.sessions() == (["household:", "person:alice"] if private else ["household:"])
    assert main(["show", "kitchen", *cli]) == 0 and "hummingbird" in capsys.readouterr().out
    assert main(["forget", "--person", "alice", *cli]) == 0
    capsys.readouterr()
    for name in ("w.db", "l.db"):
        assert b"hummingbird" not in b"".join(p.read_bytes() for p in tmp_path.glob(name + "*")), name


def test_a_json_store_given_the_file_of_a_sqlite_store_refuses_it_and_the_sqlite_store_keeps_working(tmp_path):
    shared = str(tmp_path / "all.db")
    with RecencyMemory({"db_path": shared}) as memory:
        tell(memory, "s", "my bike is green")
    with pytest.raises(ConfigError, match="SQLite database, not a JSON store"):
        RecencyMemory({"db_path": shared, "backend": "json"})
    # An LLM memory on its default backend reads an SQLite file as SQLite (as the reference's
    # "sqlite" backend wrote it), in tables of its own beside the window's.
    with LongTermMemory({"db_path": shared, "api_url": None}) as memory:
        tell(memory, "s", "my cat is Tom")
    with RecencyMemory({"db_path": shared}) as memory:
        assert contents(memory, "s")[0] == "my bike is green"


@pytest.mark.parametrize("backend", ["json", "sqlite"])
def test_forgetting_a_guest_leaves_no_trace_in_a_persons_facts_it_once_replaced(tmp_path, backend):
    # Said while the scope was global, the guest's fact replaced Alice's; in person scope Alice's
    # record still named it as what replaced hers, after the guest was forgotten too.
    path = tmp_path / f"entity.{backend}"
    config = {"db_path": str(path), "backend": backend}
    with entity(tmp_path, scope="global", **config) as memory:
        tell(memory, "alice-phone", "My nickname is QUOKKA-9931.")
        tell(memory, "guest", "My nickname is MANGO-77.")
        memory.flush()
    with entity(tmp_path, **PERSON, **config) as memory:
        assert "MANGO" in json.dumps(memory.export("guest"))
        memory.forget("guest")
        assert "MANGO" not in json.dumps(memory.export("alice-phone"))
        assert "QUOKKA" in json.dumps(memory.export("alice-phone")), "Alice's own fact was lost"
    assert b"MANGO" not in path.read_bytes()


def test_forgetting_a_fact_unnames_it_in_every_record_that_named_it(tmp_path):
    with entity(tmp_path, scope="global") as memory:
        tell(memory, "alice-phone", "My nickname is QUOKKA-9931.")
        tell(memory, "guest", "My nickname is MANGO-77.")
        memory.flush()
    with entity(tmp_path, **PERSON) as memory:
        memory.export("alice-phone")  # Alice's facts move to her record
        assert memory.forget_fact("guest", "User's nickname is MANGO-77") == 1
        assert "MANGO" not in json.dumps(memory.export("alice-phone"))
    assert b"MANGO" not in (tmp_path / "entity.json").read_bytes()


@pytest.mark.parametrize("preset", [{"preset": "hybrid"}, {}], ids=["preset", "members"])
def test_a_composites_scope_cannot_be_assigned_its_members_keep_the_one_they_were_built_with(tmp_path, preset):
    # The members store and recall by their own scope: a composite saying "session" over members
    # still global shared one session's facts with every other.
    members = {} if preset else {"members": [
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]}
    with CompositeMemory({**preset, **members, "data_dir": str(tmp_path / "c"), "api_url": None,
                          "scope": "global"}) as memory:
        with pytest.raises(AttributeError, match="'scope' is fixed at construction"):
            memory.scope = "session"
        assert memory.scope == "global"
        lexical = next(m.memory for m in memory.members if m.module == "ovos-memory-plugin-lexical")
        assert lexical.scope == "global"
        memory.fusion = "rrf"  # the per-turn knobs still can be assigned
        assert memory.fusion == "rrf"
