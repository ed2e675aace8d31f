"""Importing one backend's export into another: what both keep carries over, else a clear refusal."""
from __future__ import annotations

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._memory.conversion import converted, export_parts, member_imports
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.recency import RecencyMemory
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
LEXICAL, RECENCY, ENTITY = "ovos-memory-plugin-lexical", "ovos-memory-plugin-recency", "ovos-memory-plugin-entity"


def talk(memory, sid="kitchen"):
    memory.update_history([AgentMessage(U, "my bike is a red Bianchi"), AgentMessage(A, "nice bike")], sid)
    memory.update_history([AgentMessage(U, "My name is Ana"), AgentMessage(A, "hi Ana")], sid)
    memory.flush(patience(30))


def contents(memory, sid="kitchen"):
    return [m.content for m in memory.get_history(sid)]


@pytest.fixture
def build(tmp_path, closing):
    def make(cls, name, **config):
        return closing(cls({"db_path": str(tmp_path / name), **config}))
    return make


@pytest.fixture
def lexical_export(build):
    source = build(LexicalMemory, "source.db")
    talk(source)
    return source.export("kitchen")


@pytest.fixture
def composite(tmp_path, closing):
    def make(tag, *modules):
        def path(module):
            return str(tmp_path / f"{tag}-{module.rsplit('-', 1)[-1]}.{'json' if module == ENTITY else 'db'}")
        return closing(CompositeMemory({"members": [
            {"module": m, "config": {"db_path": path(m), **({"api_url": None} if m == ENTITY else {})}}
            for m in modules]}))
    return make


WINDOW = ["my bike is a red Bianchi", "nice bike", "My name is Ana", "hi Ana"]


# -- what carries over -----------------------------------------------------------------------------
def test_a_lexical_export_into_recency_keeps_its_window(build, lexical_export):
    target = build(RecencyMemory, "r.db")
    target.import_session(lexical_export)
    assert contents(target) == WINDOW
    target.import_session(lexical_export)  # again: changes nothing
    assert contents(target) == WINDOW


def test_a_lexical_export_into_a_composite_reaches_each_member_that_keeps_a_part_of_it(composite, lexical_export):
    target = composite("c", RECENCY, LEXICAL, ENTITY)
    target.import_session(lexical_export)
    target.flush(patience(30))
    exported = target.export("kitchen")["members"]
    assert [m["content"] for m in exported[RECENCY]["window"]] == WINDOW
    assert [m["content"] for m in exported[LEXICAL]["window"]] == WINDOW
    assert len(exported[LEXICAL]["documents"]) == len(lexical_export["documents"]) == 2
    assert exported[ENTITY]["facts"] == []  # a window and documents hold no facts for it
    assert "Bianchi" in target.search("what bike do I have", "kitchen")[0].content


def test_a_composite_export_into_lexical_recency_and_entity_gives_each_what_it_keeps(build, composite):
    source = composite("src", RECENCY, LEXICAL, ENTITY)
    talk(source)
    exported = source.export("kitchen")
    lexical = build(LexicalMemory, "l.db")
    lexical.import_session(exported)
    lexical.flush(patience(30))
    assert contents(lexical) == WINDOW and len(lexical.export("kitchen")["documents"]) == 2
    recency = build(RecencyMemory, "r.db")
    recency.import_session(exported)
    assert contents(recency) == WINDOW
    entity = build(EntityMemory, "e.json", api_url=None)
    entity.import_session(exported)
    assert entity.facts("kitchen") == ["User's bike is a red Bianchi", "User's name is Ana"]


def test_a_lexical_export_into_longterm_adds_its_window_and_keeps_the_summary(build, lexical_export):
    target = build(LongTermMemory, "lt.json", api_url=None)
    target.import_session({"summary": "The user likes tea.", "recent": [], "exchange_count": 0}, "kitchen")
    target.import_session(lexical_export)
    target.import_session(lexical_export)  # again: changes nothing
    assert contents(target) == WINDOW
    data = target.export("kitchen")
    assert data["summary"] == "The user likes tea." and data["exchange_count"] == 2


def test_a_longterm_export_into_recency_keeps_its_unsummarised_messages(build):
    source = build(LongTermMemory, "lt.json", api_url=None)
    talk(source)
    target = build(RecencyMemory, "r.db")
    target.import_session(source.export("kitchen"))
    assert contents(target) == WINDOW


# -- refused: nothing in common --------------------------------------------------------------------
def test_an_entity_export_into_recency_is_refused_naming_both_kinds(build):
    source = build(EntityMemory, "e.json", api_url=None)
    talk(source)
    target = build(RecencyMemory, "r.db")
    with pytest.raises(ValueError, match=f"export of {ENTITY} holds facts; {RECENCY} keeps a window of messages"):
        target.import_session(source.export("kitchen"))
    assert target.sessions() == []


def test_a_recency_export_into_entity_is_refused(build):
    source = build(RecencyMemory, "r.db")
    talk(source)
    target = build(EntityMemory, "e.json", api_url=None)
    with pytest.raises(ValueError, match=f"{RECENCY} holds a window of messages; {ENTITY} keeps facts"):
        target.import_session(source.export("kitchen"))
    assert target.sessions() == []


def test_an_export_no_member_of_a_composite_keeps_is_refused_naming_the_members(build, composite):
    source = build(EntityMemory, "e.json", api_url=None)
    talk(source)
    target = composite("c", RECENCY, LEXICAL)
    with pytest.raises(ValueError, match=f"no member of .*composite \\({RECENCY}, {LEXICAL}\\) keeps any of it"):
        target.import_session(source.export("kitchen"))
    assert target.sessions() == []


# -- the pure parts --------------------------------------------------------------------------------
def test_a_composites_parts_are_its_longest_window_and_documents_and_its_first_facts():
    data = {"plugin": "ovos-memory-plugin-composite", "session_id": "s", "members": {
        RECENCY: {"window": [{"role": "user", "content": "b"}]},
        LEXICAL: {"window": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                  "documents": [{"content": "Q: a A: b"}]},
        ENTITY: {"facts": [{"text": "User likes tea"}], "superseded": []}}}
    parts = export_parts(data)
    assert len(parts["window"]["window"]) == 2 and parts["documents"] == {"documents": [{"content": "Q: a A: b"}]}
    assert parts["facts"] == {"facts": [{"text": "User likes tea"}], "superseded": []}


def test_an_export_naming_no_backend_or_this_one_is_read_as_it_is():
    class Recency:
        plugin_name, export_parts = RECENCY, frozenset({"window"})

    own = {"plugin": RECENCY, "session_id": "s", "window": []}
    assert converted(own, Recency()) is own
    by_hand = {"session_id": "s", "window": []}
    assert converted(by_hand, Recency()) is by_hand


@pytest.mark.parametrize("members, why", [("x", "'members' must be a dict"), ({"m": 5}, r"'members'\['m'\]")])
def test_a_malformed_composite_export_is_a_type_error_naming_the_part(members, why):
    with pytest.raises(TypeError, match=why):
        member_imports({"plugin": "ovos-memory-plugin-composite", "session_id": "s", "members": members}, [], "c")


# -- a malformed export stores nothing anywhere ----------------------------------------------------
@pytest.mark.parametrize("bad, why", [
    ({"ts": "yesterday"}, r"'documents'\[0\]\['ts'\] must be a number"),
    # Stored as the time of the import, silently: the document's age and date were lost.
    ({"ts": float("nan")}, r"'documents'\[0\]\['ts'\] is nan, not a time"),
    ({"ts": 1e308}, r"'documents'\[0\]\['ts'\] is 1e\+308, not a time"),
    ({"ts": -1e20}, r"'documents'\[0\]\['ts'\] is -1e\+20, not a time"),
    ({"metadata": {"x": float("nan")}}, r"'documents'\[0\]\['metadata'\].*JSON"),
])
def test_an_export_with_a_bad_document_is_refused_before_any_member_stores_a_part(composite, lexical_export, bad,
                                                                                   why):
    target = composite("c", RECENCY, LEXICAL)
    broken = {**lexical_export, "documents": [{**lexical_export["documents"][0], **bad}]}
    with pytest.raises((TypeError, ValueError), match=why):
        target.import_session(broken)
    assert target.sessions() == []  # not the window alone, with the documents refused


def test_an_export_with_bad_facts_or_a_bad_nested_member_stores_nothing(composite):
    target = composite("c", RECENCY, ENTITY)
    window = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    bad_facts = {"session_id": "s", "plugin": "ovos-memory-plugin-composite", "members": {
        RECENCY: {"window": window}, ENTITY: {"facts": [{"text": 3}]}}}
    with pytest.raises(TypeError, match=r"'facts'\[0\]"):
        target.import_session(bad_facts)
    nested = {"session_id": "s", "plugin": "ovos-memory-plugin-composite", "members": {
        RECENCY: {"window": window},
        ENTITY: {"members": {"inner": {"documents": [{"content": "Q: a\nA: b", "ts": "yesterday"}]}}}}}
    with pytest.raises(TypeError, match=r"'documents'\[0\]\['ts'\]"):
        target.import_session(nested)
    assert target.sessions() == []


def test_metadata_that_is_not_json_is_refused_where_it_is_stored(build):
    memory = build(LexicalMemory, "lex.db")
    with pytest.raises(ValueError, match="metadata must be JSON"):
        memory.store("a note", "kitchen", {"score": float("inf")})
    assert memory.sessions() == []


def _exchange(memory, session_id, n, tag):
    memory.update_history([AgentMessage(MessageRole.USER, f"{tag} question {n}"),
                           AgentMessage(MessageRole.ASSISTANT, f"{tag} answer {n}")], session_id)


@pytest.mark.parametrize("module", [RecencyMemory, LexicalMemory])
def test_an_older_export_imported_into_a_window_that_moved_on_keeps_the_newer_turns(module, tmp_path):
    with module({"db_path": str(tmp_path / "m.db"), "max_history": 10}) as memory:
        for n in range(5):
            _exchange(memory, "s", n, "old")
        export = memory.export("s")
        for n in range(3):
            _exchange(memory, "s", n, "new")
        before = [m.content for m in memory.get_history("s")]
        assert "old question 0" not in before  # the window has moved on past the export's start
        memory.import_session(export, "s")
        assert [m.content for m in memory.get_history("s")] == before
        # a newer export still brings what the window has not seen yet
        _exchange(memory, "s", 9, "newest")
        newer = memory.export("s")
        memory.forget("s")
        memory.import_session(export, "s")
        memory.import_session(newer, "s")
        assert [m.content for m in memory.get_history("s")][-2:] == ["newest question 9", "newest answer 9"]
