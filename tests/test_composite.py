"""CompositeMemory: member loading, write-through, fusion, plain-member blocks, fault isolation."""
from __future__ import annotations

import time

import pytest
from ovos_plugin_manager.templates.agents import AgentContextManager, AgentMessage, MessageRole

from ovos_memory_plugins import composite as composite_module
from ovos_memory_plugins.common import MemoryHit
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.errors import ConfigError
from ovos_memory_plugins.fusion import fuse
from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.retrieval import BaseRetrievalMemory
from tests._timing import patience

U, A, S = MessageRole.USER, MessageRole.ASSISTANT, MessageRole.SYSTEM


class FactsMemory(AgentContextManager):
    """A plain member that adds a system block (like entity) and has a system prompt of its own."""

    instances: list = []

    def __init__(self, config=None):
        super().__init__(config)
        self.updates = []
        self.context_calls = 0
        FactsMemory.instances.append(self)

    def get_history(self, session_id):
        return []

    def update_history(self, new_messages, session_id):
        self.updates.append((session_id, [m.content for m in new_messages]))

    def build_conversation_context(self, utterance, session_id):
        self.context_calls += 1
        self.asked = utterance
        prompt = [AgentMessage(S, self.system_prompt)] if self.system_prompt else []
        return prompt + [AgentMessage(S, "Known facts about the user:\n- likes tea"), AgentMessage(U, utterance)]


class BrokenAtStart(AgentContextManager):
    def __init__(self, config=None):
        raise RuntimeError("cannot start")

    def get_history(self, session_id):
        return []

    def update_history(self, new_messages, session_id):
        pass

    def build_conversation_context(self, utterance, session_id):
        return []


class FlakyRetriever(RecencyMemory):
    fail = True

    def search(self, query, session_id=None, top_k=None):
        if FlakyRetriever.fail:
            raise RuntimeError("index offline")
        return [MemoryHit("Q: flaky\nA: ok", "f_0", 1.0, {"session_id": session_id})]

    def update_history(self, new_messages, session_id):
        if FlakyRetriever.fail:
            raise RuntimeError("disk full")
        super().update_history(new_messages, session_id)


@pytest.fixture
def fake_plugins(monkeypatch):
    real = composite_module.load_memory_plugin
    extra = {"test-facts": FactsMemory, "test-broken": BrokenAtStart, "test-flaky": FlakyRetriever}
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda name: extra.get(name) or real(name))
    FactsMemory.instances = []
    FlakyRetriever.fail = True


def hybrid(tmp_path, *extra, **config):
    members = [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db"), "max_history": 2}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}},
        *extra,
    ]
    return CompositeMemory({"members": members, **config})


def test_the_reference_fusion_example():
    a = [MemoryHit("x", score=0.9), MemoryHit("y", score=0.5)]
    b = [MemoryHit("y", score=12), MemoryHit("z", score=3)]
    lists = [("A", 1.0, a), ("B", 2.0, b)]
    assert [(h.content, round(h.metadata["fusion_score"], 5)) for h in fuse("rrf", lists)] == [
        ("y", 0.04892), ("z", 0.03226), ("x", 0.01639)]
    assert [h.content for h in fuse("priority", lists)] == ["x", "y"]
    assert [h.content for h in fuse("merge", lists, dedup=False)] == ["y", "z", "x", "y"]
    assert "fusion_score" not in a[0].metadata, "members' hits must not be mutated"
    with pytest.raises(ValueError):
        fuse("average", lists)


def test_a_plain_primary_still_adds_its_system_block(tmp_path, fake_plugins):
    memory = CompositeMemory({"members": ["test-facts", {"module": "ovos-memory-plugin-lexical",
                                                         "config": {"db_path": str(tmp_path / "l.db")}}]})
    assert memory.primary.module == "test-facts"
    ctx = memory.build_conversation_context("what do I drink?", "s")
    assert [(m.role, m.content) for m in ctx] == [(S, "Known facts about the user:\n- likes tea"),
                                                  (U, "what do I drink?")]


def test_another_packages_member_is_asked_with_the_utterance_not_the_folded_query(tmp_path, fake_plugins):
    memory = hybrid(tmp_path, "test-facts", retrieval={"query_mode": "follow-up"})
    memory.update_history([AgentMessage(U, "Tell me about my sister."), AgentMessage(A, "She is Lena.")], "s")
    assert memory.build_query("Where does she live?", "s") == "Where does she live? Tell me about my sister."
    memory.build_conversation_context("Where does she live?", "s")
    assert FactsMemory.instances[-1].asked == "Where does she live?"


def test_a_session_id_a_member_keeps_for_itself_is_refused_before_any_member_stores(tmp_path):
    entity = {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json"), "api_url": ""}}
    memory = hybrid(tmp_path, entity)
    with pytest.raises(ValueError, match="'__global__' is reserved by the member 'ovos-memory-plugin-entity'"):
        memory.update_history([AgentMessage(U, "my pin is 4321"), AgentMessage(A, "ok")], "__global__")
    with pytest.raises(ValueError, match="reserved"):
        memory.import_exchanges("__global__", [{"question": "hi", "answer": "yo", "ts": 1.0}])
    assert memory.sessions() == []
    # A store written before holds it in the other members: exported and forgotten without entity.
    memory.members[0].memory.update_history([AgentMessage(U, "hi"), AgentMessage(A, "yo")], "__global__")
    assert memory.sessions() == ["__global__"]
    assert "ovos-memory-plugin-entity" not in memory.export("__global__")["members"]
    memory.forget("__global__")
    assert memory.sessions() == []


def test_members_are_found_through_the_opm_loader_every_time(monkeypatch):
    import ovos_plugin_manager.agents as opm_agents

    monkeypatch.setattr(opm_agents, "load_memory_plugin", lambda name: FactsMemory if name == "opm-only" else None)
    assert CompositeMemory({"members": ["opm-only"]}).members[0].module == "opm-only"
    monkeypatch.setattr(opm_agents, "load_memory_plugin", lambda name: None)  # uninstalled since
    assert CompositeMemory({"members": ["opm-only"]}).members == []


def test_unknown_fusion_is_a_config_error():
    with pytest.raises(ConfigError, match="'fusion'"):
        CompositeMemory({"fusion": "average"})


def test_zero_members_is_a_passthrough():
    memory = CompositeMemory({"system_prompt": "Hi."})
    memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], "s")
    assert [(m.role, m.content) for m in memory.build_conversation_context(" x ", "s")] == [(S, "Hi."), (U, "x")]
    assert memory.search("x", "s") == []
    assert memory.degraded() == {"ovos-memory-plugin-composite": "no members loaded: nothing is remembered"}


def test_members_that_are_missing_broken_or_the_composite_itself_are_skipped(tmp_path, fake_plugins):
    memory = hybrid(tmp_path, "no-such-plugin", "test-broken", "ovos-memory-plugin-composite")
    assert [m.module for m in memory.members] == ["ovos-memory-plugin-recency", "ovos-memory-plugin-lexical"]
    degraded = memory.degraded()  # what `ovos-memory chat` tells the user
    assert degraded["no-such-plugin"] == "not installed; skipped"
    assert degraded["test-broken"].startswith("failed to start (")
    assert degraded["ovos-memory-plugin-composite"] == "a composite member needs 'members' or 'preset'; skipped"


def test_a_composite_member_given_a_preset_loads_it_and_recalls_through_it(tmp_path):
    inner = {"module": "ovos-memory-plugin-composite",
             "config": {"preset": "hybrid", "data_dir": str(tmp_path / "inner"), "api_url": None}}
    members = [inner, {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}}]
    with CompositeMemory({"members": members}) as memory:
        assert [m.module for m in memory.members] == ["ovos-memory-plugin-composite", "ovos-memory-plugin-recency"]
        nested = memory.members[0].memory
        assert {m.module for m in nested.members} >= {"ovos-memory-plugin-lexical", "ovos-memory-plugin-entity"}
        memory.update_history([AgentMessage(U, "my locker code is 4417"), AgentMessage(A, "noted")], "s")
        assert memory.flush(patience(60))
        assert any("4417" in h.content for h in memory.search("locker code", "s"))


@pytest.mark.parametrize("members", [
    ["ovos-memory-plugin-lexical", "ovos-memory-plugin-lexical"],  # both on the default file
    [{"module": "ovos-memory-plugin-lexical", "config": {"db_path": "same.db"}},
     {"module": "ovos-memory-plugin-lexical", "config": {"db_path": "same.db"}}],
    [{"module": "ovos-memory-plugin-recency", "config": {"db_path": "w.db"}},
     {"module": "ovos-memory-plugin-short-term", "config": {"db_path": "w.db"}}],
    [{"module": "ovos-memory-plugin-entity", "config": {"db_path": "f.json", "api_url": None}},
     {"module": "ovos-memory-plugin-longterm", "config": {"db_path": "f.json", "api_url": None}}],
    [{"module": "ovos-memory-plugin-lexical", "config": {"db_path": "same.db", "table": "lexical_memory"}},
     {"module": "ovos-memory-plugin-lexical", "config": {"db_path": "same.db", "table": "LEXICAL_Memory"}}],
], ids=["defaults", "one file", "one window table", "one json file", "table names differing in case"])
def test_a_second_member_writing_the_store_of_another_is_skipped_and_reported(tmp_path, monkeypatch, members):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    memory = CompositeMemory({"members": members})
    try:
        assert len(memory.members) == 1
        (fault,) = memory.degraded().values()
        assert fault.startswith("shares ") and fault.endswith("; skipped")
        memory.update_history([AgentMessage(U, "my dog is Rex"), AgentMessage(A, "nice")], "s")
        history = [m.content for m in memory.get_history("s")]
        assert history in ([], ["my dog is Rex", "nice"])  # once (entity keeps no window)
    finally:
        memory.close()


def test_members_on_one_file_with_tables_of_their_own_are_kept(tmp_path):
    one = str(tmp_path / "one.db")
    memory = CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": one}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": one}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": one, "table": "other"}}]})
    try:
        assert len(memory.members) == 3 and memory.degraded() == {}
    finally:
        memory.close()


def test_update_history_writes_through_to_every_member_and_history_comes_from_the_primary(tmp_path, fake_plugins):
    memory = hybrid(tmp_path, "test-facts")
    memory.update_history([AgentMessage(U, "my tea is green"), AgentMessage(A, "noted")], "s")
    assert FactsMemory.instances[0].updates == [("s", ["my tea is green", "noted"])]
    assert [m.content for m in memory.get_history("s")] == ["my tea is green", "noted"]
    assert memory.members[1].memory.search("tea", "s")[0].content == "Q: my tea is green\nA: noted"
    named = hybrid(tmp_path, primary="ovos-memory-plugin-lexical")
    assert named.primary.module == "ovos-memory-plugin-lexical"


def test_plain_members_add_their_blocks_once_without_duplicating_prompts(tmp_path, fake_plugins):
    memory = hybrid(tmp_path, {"module": "test-facts", "config": {"system_prompt": "member prompt"}},
                    system_prompt="Composite prompt.")
    ctx = memory.build_conversation_context("hello", "s")
    assert [(m.role, m.content) for m in ctx] == [
        (S, "Composite prompt."), (S, "Known facts about the user:\n- likes tea"), (U, "hello")]
    plain = hybrid(tmp_path, "test-facts", system_prompt="Composite prompt.")
    assert [m.content for m in plain.build_conversation_context("hello", "s")].count("Composite prompt.") == 1


def test_recall_is_fused_deduplicated_against_the_window_and_tagged(tmp_path):
    memory = hybrid(tmp_path)
    memory.update_history([AgentMessage(U, "my locker code is 4417"), AgentMessage(A, "noted")], "s")
    memory.update_history([AgentMessage(U, "what time is it"), AgentMessage(A, "noon")], "s")
    ctx = memory.build_conversation_context("what is my locker code", "s")
    assert ctx[0].role == S and "Q: my locker code is 4417\nA: noted" in ctx[0].content
    assert [m.content for m in ctx[1:]] == ["what time is it", "noon", "what is my locker code"]
    hits = memory.search("locker code", "s")
    assert hits and hits[0].metadata["retriever"] == "ovos-memory-plugin-lexical"
    assert hits[0].metadata["retrievers"] == ["ovos-memory-plugin-lexical"]
    assert "fusion_score" in hits[0].metadata
    window_only = memory.build_conversation_context("what time is it", "s")
    assert not any("Context:" in m.content for m in window_only), "the window's own exchange was recalled again"


@pytest.mark.parametrize("fusion", ["rrf", "merge", "score"])
def test_hits_name_the_module_that_recalled_them_even_when_a_module_is_listed_twice(tmp_path, fusion):
    members = [{"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / f"{n}.db")}}
               for n in ("a", "b")]
    with CompositeMemory({"members": members, "fusion": fusion, "dedup": False}) as memory:
        memory.update_history([AgentMessage(U, "the zebra code is 42"), AgentMessage(A, "ok")], "s")
        hits = memory.search("zebra code", "s")
        assert [m.name for m in memory.members] == ["ovos-memory-plugin-lexical", "ovos-memory-plugin-lexical#2"]
    assert hits and {h.metadata["retriever"] for h in hits} == {"ovos-memory-plugin-lexical"}
    assert all(h.metadata["retrievers"] == ["ovos-memory-plugin-lexical"] for h in hits)


def test_min_score_applies_to_the_fused_score(tmp_path):
    memory = hybrid(tmp_path, min_score=None)
    memory.update_history([AgentMessage(U, "the spare key is under the mat"), AgentMessage(A, "ok")], "s")
    assert memory.search("spare key", "s")
    strict = hybrid(tmp_path, retrieval={"min_score": 0.5})  # rrf scores are at most ~1/61 per member
    assert strict.search("spare key", "s") == []


@pytest.mark.parametrize(("min_score", "fusion", "warned"), [(0.3, "rrf", True), (0.02, "rrf", False),
                                                            (0.3, "weighted", False), (2.5, "weighted", True),
                                                            (9.0, "merge", False)])
def test_a_min_score_no_fused_hit_can_reach_is_warned_at_start(tmp_path, monkeypatch, min_score, fusion, warned):
    # 0.3, copied from a local-rag block, keeps nothing of rrf's ~1/61 a member: the turn says nothing.
    from ovos_memory_plugins._core.log import LOG

    said: list[str] = []
    monkeypatch.setattr(LOG, "warning", lambda msg, *a, **k: said.append(str(msg)))
    hybrid(tmp_path, retrieval={"min_score": min_score}, fusion=fusion)
    assert not any("unknown config key" in w for w in said), said
    assert any("nothing will be recalled" in w for w in said) is warned, said


def test_max_num_results_is_a_top_level_key(tmp_path):
    memory = hybrid(tmp_path, max_num_results=2)
    for i in range(6):
        memory.update_history([AgentMessage(U, f"banana fact {i}"), AgentMessage(A, "ok")], "s")
    assert memory.k == 2 and memory.fetch_k == 4
    assert len(memory.search("banana", "s")) == 2
    assert hybrid(tmp_path, retrieval={"max_num_results": 3}).k == 3


def test_a_member_failing_at_run_time_costs_only_its_own_part(tmp_path, fake_plugins):
    memory = hybrid(tmp_path, "test-flaky")
    memory.update_history([AgentMessage(U, "the car is blue"), AgentMessage(A, "ok")], "s")
    ctx = memory.build_conversation_context("what colour is the car", "s")
    assert ctx[-1].content == "what colour is the car"
    assert memory.degraded()["test-flaky:search"].startswith("search failed (")
    FlakyRetriever.fail = False
    assert any(h.metadata["retriever"] == "test-flaky" for h in memory.search("flaky", "s"))
    assert "test-flaky:search" not in memory.degraded()  # works again: no longer reported


def test_forget_and_export_fan_out(tmp_path):
    memory = hybrid(tmp_path)
    memory.update_history([AgentMessage(U, "secret"), AgentMessage(A, "kept")], "s")
    exported = memory.export("s")
    assert set(exported["members"]) == {"ovos-memory-plugin-recency", "ovos-memory-plugin-lexical"}
    assert memory.forget("s") == {"ovos-memory-plugin-recency": {"messages": 2},
                                  "ovos-memory-plugin-lexical": {"messages": 2, "documents": 1}}
    assert memory.get_history("s") == [] and memory.search("secret", "s") == []
    memory.import_session(exported)
    assert memory.search("secret", "s")


def test_a_forget_one_member_could_not_finish_says_what_was_forgotten_and_to_try_again(tmp_path, monkeypatch):
    from ovos_memory_plugins.errors import StoreUnavailable

    memory = hybrid(tmp_path)
    memory.update_history([AgentMessage(U, "secret"), AgentMessage(A, "kept")], "s")
    lexical = memory.members[1].memory

    def busy(session_id):
        raise StoreUnavailable("database is locked")

    monkeypatch.setattr(lexical, "forget", busy)
    with pytest.raises(StoreUnavailable, match=r"forgotten by ovos-memory-plugin-recency but not by "
                                               r"ovos-memory-plugin-lexical \(database is locked\); forget it again"):
        memory.forget("s")
    assert memory.get_history("s") == []  # the others did forget
    monkeypatch.undo()
    memory.forget("s")
    assert memory.search("secret", "s") == []


def _with_entity_unable_to_start(tmp_path):
    """A composite whose entity member stored facts, then fails to start in a second run (its
    lock file replaced by a folder): its store still holds them."""
    config = {"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
        {"module": "ovos-memory-plugin-entity", "config": {"api_url": None, "db_path": str(tmp_path / "e.json")}}]}
    first = CompositeMemory(config)
    first.update_history([AgentMessage(U, "my name is Zorblax"), AgentMessage(A, "hello Zorblax")], "s")
    assert first.flush(20)
    first.close()
    (tmp_path / "e.json.lock").unlink()
    (tmp_path / "e.json.lock").mkdir()
    return config


def test_a_member_that_failed_to_start_blocks_export_and_import_and_a_forget_says_it_is_not_whole(tmp_path):
    from ovos_memory_plugins.errors import StorageError

    memory = CompositeMemory(_with_entity_unable_to_start(tmp_path))
    try:
        assert set(memory.not_started()) == {"ovos-memory-plugin-entity"}
        for call, what in ((lambda: memory.export("s"), "exported"),
                           (lambda: memory.import_session({"plugin": "x", "session_id": "t", "messages": []}),
                            "imported")):
            with pytest.raises(StorageError, match=f"ovos-memory-plugin-entity failed to start .*e.json.lock.*"
                                                   f"nothing was {what}"):
                call()
        assert [m.content for m in memory.get_history("s")] == ["my name is Zorblax", "hello Zorblax"]
        memory.update_history([AgentMessage(U, "still here"), AgentMessage(A, "yes")], "s")  # turns go on
        # A forget does what the running members can, and says it is not whole.
        with pytest.raises(StorageError, match="forgotten by no member but not by "  # recency keeps no facts
                                               "ovos-memory-plugin-entity failed to start .*forget again"):
            memory.forget_fact("s", "User's name is Zorblax")
        with pytest.raises(StorageError, match="forgotten by ovos-memory-plugin-recency but not by "
                                               "ovos-memory-plugin-entity failed to start .*forget again"):
            memory.forget("s")
        assert memory.get_history("s") == []
    finally:
        memory.close()
    assert "Zorblax" in (tmp_path / "e.json").read_text()  # left for a forget that can reach it


def test_a_composite_can_be_a_member_of_a_composite(tmp_path):
    inner = {"module": "ovos-memory-plugin-composite", "config": {"members": [
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "inner.db")}}]}}
    outer = CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}}, inner]})
    outer.update_history([AgentMessage(U, "the boat is called Wave"), AgentMessage(A, "nice")], "s")
    assert outer.search("boat", "s")[0].content == "Q: the boat is called Wave\nA: nice"


class CorruptFacts(FactsMemory):
    """A plain member whose store is damaged: reading it raises a ValueError (as json does)."""

    def build_conversation_context(self, utterance, session_id):
        raise ValueError("Expecting value: line 1 column 1 (char 0)")

    def import_session(self, data, session_id=None):
        raise ValueError("not an export of this memory")


def test_a_member_raising_a_value_error_on_a_turn_is_skipped(tmp_path, monkeypatch):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda name: CorruptFacts if name == "test-corrupt" else real(name))
    memory = hybrid(tmp_path, "test-corrupt")
    memory.update_history([AgentMessage(U, "my cat is Tom"), AgentMessage(A, "nice")], "s")
    ctx = memory.build_conversation_context("what is my cat called?", "s")
    assert ctx[-1].content == "what is my cat called?"
    with pytest.raises(ValueError, match="not an export"):
        memory.import_session({"members": {"test-corrupt": {}}}, "s")  # an explicit operation reports bad data


class BadClose(FactsMemory):
    def close(self):
        raise ValueError("already closed elsewhere")


def test_close_reaches_every_member_even_if_one_raises(tmp_path, monkeypatch):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda name: BadClose if name == "test-badclose" else real(name))
    memory = CompositeMemory({"members": ["test-badclose", {"module": "ovos-memory-plugin-lexical",
                                                            "config": {"db_path": str(tmp_path / "l.db")}}]})
    lexical = memory.members[1].memory
    memory.close()
    assert lexical._closed


def test_store_writes_through_to_every_retriever_and_search_finds_it(tmp_path):
    members = [{"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "a.db")}},
               {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "b.db")}}]
    with CompositeMemory({"members": members}) as memory:
        doc_id = memory.store("the spare key is under the blue flowerpot", "s1")
        assert doc_id == "s1_0"
        hits = memory.search("spare key flowerpot", "s1")
        assert [h.content for h in hits] == ["the spare key is under the blue flowerpot"]
        assert all(m.memory.search("flowerpot", "s1") for m in memory.retrievers)
        assert memory.store("   ", "s1") is None


def test_the_composite_keeps_no_store_of_its_own(tmp_path):
    with hybrid(tmp_path) as memory:
        assert not hasattr(memory, "_store") and getattr(memory, "db_path", None) is None
        assert isinstance(memory, BaseRetrievalMemory) and issubclass(CompositeMemory, BaseRetrievalMemory)
        memory.update_history([AgentMessage(U, "my dog is Rex"), AgentMessage(A, "nice")], "s")
        assert [m.content for m in memory.session2history["s"]] == ["my dog is Rex", "nice"]
        memory.session2history["s"] = [AgentMessage(U, "edited"), AgentMessage(A, "yes")]
        assert [m.content for m in memory.members[0].memory.get_history("s")] == ["edited", "yes"]


class SummaryWithFacts(FactsMemory):
    """A plain member whose block repeats a fact another member sends, beside text of its own."""

    def build_conversation_context(self, utterance, session_id):
        return [AgentMessage(S, "Summary:\n- likes tea\nTalked about the weather."), AgentMessage(U, utterance)]


def test_content_two_members_send_is_sent_once(tmp_path, fake_plugins, monkeypatch):
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda name, real=composite_module.load_memory_plugin: (
                            SummaryWithFacts if name == "test-summary" else real(name)))
    memory = hybrid(tmp_path, "test-facts", "test-summary", "test-facts")
    blocks = [m.content for m in memory.build_conversation_context("hello", "s") if m.role == S]
    assert blocks == ["Known facts about the user:\n- likes tea", "Summary:\nTalked about the weather."]


def test_a_block_left_with_its_header_only_is_not_sent():
    from ovos_memory_plugins.composite import distinct_blocks
    from ovos_memory_plugins.messages import system_message

    facts = system_message("Known facts about the user:\n- User lives in Porto")
    again = system_message("Facts:\n- User lives in Porto\n")
    assert [b.content for b in distinct_blocks([facts, again])] == [facts.content]
    assert facts.content == "Known facts about the user:\n- User lives in Porto", "the input is not changed"


class IndexingMember(FactsMemory):
    """A plain member whose update queues background work, which records the writes it sees."""

    seen: list = []

    def __init__(self, config=None):
        from ovos_memory_plugins._core.worker import BackgroundWorker

        super().__init__(config)
        self.worker = BackgroundWorker("test-indexer", self._step)

    def update_history(self, new_messages, session_id):
        super().update_history(new_messages, session_id)
        self.worker.notify()

    def _step(self):
        IndexingMember.seen.append(sum(len(m.updates) for m in FactsMemory.instances))
        return False

    def flush(self, timeout=None):
        return self.worker.flush(timeout)

    def close(self):
        self.worker.close()


class SlowWriter(FactsMemory):
    def update_history(self, new_messages, session_id):
        time.sleep(0.3)  # long enough for a woken worker to start and step
        super().update_history(new_messages, session_id)


def test_members_background_work_starts_once_every_member_has_written(monkeypatch, fake_plugins):
    real = composite_module.load_memory_plugin
    extra = {"test-indexing": IndexingMember, "test-slow": SlowWriter}
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda name: extra.get(name) or real(name))
    IndexingMember.seen = []
    memory = CompositeMemory({"members": ["test-indexing", "test-slow"]})
    memory.update_history([AgentMessage(U, "hi"), AgentMessage(A, "hello")], "s")
    memory.flush(5)
    # Woken at its own write, the first member's work could run before the second member wrote.
    assert IndexingMember.seen and IndexingMember.seen[0] == 2
    memory.close()


def test_check_config_names_the_members_the_composite_would_skip():
    from ovos_memory_plugins._cli.check import config_problems

    lexical = "ovos-memory-plugin-lexical"
    assert config_problems("ovos-memory-plugin-composite", {"members": [lexical, lexical]}) == [
        f"members[1] would write the same store as members[0] ({lexical}); it would be skipped: "
        "give it a db_path (or table) of its own"]
    assert config_problems("ovos-memory-plugin-composite", {"members": ["ovos-memory-plugin-composite"]}) == [
        "members[0] is the composite itself; it would be skipped"]
    apart = [{"module": lexical, "config": {"db_path": "a.db"}}, {"module": lexical, "config": {"db_path": "b.db"}}]
    assert config_problems("ovos-memory-plugin-composite", {"members": apart}) == []


# -- data_dir: a persona's files of its own ------------------------------------------------------
def test_data_dir_holds_every_members_files_and_nothing_lands_in_the_data_folder(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": "recent.db"}},  # relative
               "ovos-memory-plugin-lexical",  # its default file
               {"module": "ovos-memory-plugin-entity", "config": {"api_url": "", "db_path": "facts.json"}}]
    config = {"members": members, "data_dir": str(tmp_path / "kitchen")}
    with CompositeMemory(config) as memory:
        memory.update_history([AgentMessage(U, "My name is Ana."), AgentMessage(A, "Hi Ana")], "s")
        assert memory.flush(30)
    names = set(os.listdir(tmp_path / "kitchen"))
    assert {"recent.db", "lexical_memory.db", "facts.json"} <= names, names
    assert not (tmp_path / "xdg").exists(), "a member's file went to the data folder"
    assert oct((tmp_path / "kitchen").stat().st_mode & 0o777) == "0o700"
    with CompositeMemory({"members": members, "data_dir": str(tmp_path / "hall")}) as other:
        assert other.get_history("s") == [], "two personas with folders of their own share a memory"


def test_a_relative_data_dir_is_under_the_data_folder_and_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": "recent.db"}}]
    with CompositeMemory({"members": members, "data_dir": "kitchen"}) as memory:
        memory.update_history([AgentMessage(U, "hi"), AgentMessage(A, "hello")], "s")
    assert (tmp_path / "xdg" / "ovos" / "kitchen" / "recent.db").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="'data_dir' .* is not a folder"):
        CompositeMemory({"preset": "hybrid", "data_dir": str(tmp_path / "afile")})
