"""One context pipeline: every memory's message list is built by ``ContextMemory``, under one
token budget and one inject mode; each memory supplies only its parts."""
from __future__ import annotations

import importlib.metadata

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins import BaseRetrievalMemory, MemoryHit
from ovos_memory_plugins._core.compat import HAS_TOOLS
from ovos_memory_plugins._core.loading import load_memory_class
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.context import ContextMemory
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.testing.contract import check_the_token_budget_bounds_the_context
from ovos_memory_plugins.testing.llm import closed_port_url

U, A, S, D = MessageRole.USER, MessageRole.ASSISTANT, MessageRole.SYSTEM, MessageRole.DEVELOPER


def exchange(question, answer):
    return [AgentMessage(U, question), AgentMessage(A, answer)]


def shape(ctx):
    return [(m.role, m.content) for m in ctx]


def offline(**config):
    return {"api_url": closed_port_url(), "request_timeout": 2, **config}


# -- one place ---------------------------------------------------------------------------------
def test_build_conversation_context_is_defined_once_for_every_memory():
    eps = importlib.metadata.entry_points(group="opm.agents.memory")
    ours = [ep for ep in eps if ep.dist and ep.dist.name == "ovos-memory-plugins"]
    assert len(ours) >= 8
    for ep in ours:
        cls = load_memory_class(ep.name)
        assert issubclass(cls, ContextMemory), ep.name
        assert cls.build_conversation_context is ContextMemory.build_conversation_context, (
            f"{ep.name} builds its own message list")


def test_the_composite_is_a_retrieval_memory_by_registration_not_a_document_store(tmp_path):
    assert issubclass(CompositeMemory, BaseRetrievalMemory)
    assert "_store_document" not in dir(CompositeMemory) and "keeps_documents" not in dir(CompositeMemory)


# -- inject modes reach every memory ----------------------------------------------------------------
def longterm_with_summary(tmp_path, **config):
    memory = LongTermMemory(offline(db_path=str(tmp_path / "lt.json"), summarize_every=1, recent_window=1,
                                    system_prompt="BASE.", **config))
    memory.update_history(exchange("my name is Ana", "Hello Ana"), "s")
    memory.update_history(exchange("I live in Porto", "Porto is lovely"), "s")
    assert memory.flush(30)
    return memory


def test_longterm_keeps_the_reference_shape_by_default(tmp_path):
    with longterm_with_summary(tmp_path) as memory:
        ctx = memory.build_conversation_context("where do I live?", "s")
        assert ctx[0].role == S and ctx[0].content.startswith("BASE.\n\n[Conversation summary so far]\n")
        assert [m.role for m in ctx].count(S) == 1 and ctx[-1].content == "where do I live?"


def test_longterm_in_user_mode_carries_the_summary_in_the_user_turn(tmp_path):
    with longterm_with_summary(tmp_path, inject_mode="user", context={"header": "HDR"}) as memory:
        ctx = memory.build_conversation_context("where do I live?", "s")
        assert shape(ctx)[0] == (S, "BASE.") and [m.role for m in ctx].count(S) == 1
        assert ctx[-1].role == U and ctx[-1].content.startswith("HDR\n\nContext:\n[Conversation summary so far]\n")
        assert ctx[-1].content.endswith("\n\nQuestion: where do I live?")


def test_longterm_in_system_mode_sends_the_summary_as_its_own_message(tmp_path):
    with longterm_with_summary(tmp_path, inject_mode="system") as memory:
        ctx = memory.build_conversation_context("where do I live?", "s")
        assert ctx[0].content == "BASE." and ctx[1].role == S
        assert ctx[1].content.startswith("[Conversation summary so far]\n")


def entity_with_facts(tmp_path, **config):
    memory = EntityMemory(offline(db_path=str(tmp_path / "e.json"), system_prompt="BASE.", **config))
    memory.update_history(exchange("my name is Ana", "Hello Ana"), "s")
    assert memory.flush(30)
    assert memory.facts("s")
    return memory


def test_entity_in_system_prompt_mode_sends_one_system_message(tmp_path):
    with entity_with_facts(tmp_path, inject_mode="system_prompt") as memory:
        ctx = memory.build_conversation_context("who am I?", "s")
        assert [m.role for m in ctx] == [S, U]
        assert ctx[0].content.startswith("BASE.\n\nKnown facts about the user:\n- ")


def test_entity_in_developer_mode_sends_its_facts_as_a_developer_message(tmp_path):
    with entity_with_facts(tmp_path, inject_mode="developer") as memory:
        ctx = memory.build_conversation_context("who am I?", "s")
        assert [m.role for m in ctx] == [S, D, U] and ctx[1].content.startswith("Known facts about the user:")


def test_entity_facts_obey_max_added_tokens(tmp_path):
    with entity_with_facts(tmp_path) as memory:
        memory.update_history(exchange("I live in Porto and I love jazz and my dog is Rex", "noted"), "s")
        assert memory.flush(30) and len(memory.facts("s")) >= 2
        full = memory.build_conversation_context("who am I?", "s")[1].content
    with EntityMemory(offline(db_path=str(tmp_path / "e.json"), max_added_tokens=24)) as memory:
        short = memory.build_conversation_context("who am I?", "s")
        assert short[0].content != full and full.startswith(short[0].content)
        assert 1 <= short[0].content.count("\n- ") < full.count("\n- ")


# -- the composite: members' parts, one budget, one mode ------------------------------------------
def hybrid(tmp_path, **config):
    members = [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db"), "max_history": 2}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}},
        {"module": "ovos-memory-plugin-entity", "config": offline(db_path=str(tmp_path / "e.json"))},
    ]
    memory = CompositeMemory({"members": members, "system_prompt": "BASE.", **config})
    memory.update_history(exchange("my name is Ana", "Hello Ana"), "s")
    memory.update_history(exchange("the spare key is under the blue flowerpot", "noted"), "s")
    memory.update_history(exchange("what a sunny day", "indeed"), "s")
    assert memory.flush(30)
    return memory


def test_the_composite_in_user_mode_sends_facts_and_recall_in_the_user_turn(tmp_path):
    with hybrid(tmp_path, inject_mode="user") as memory:
        ctx = memory.build_conversation_context("where is the spare key?", "s")
        assert [m.role for m in ctx] == [S, U, A, U] and ctx[0].content == "BASE."
        assert "Known facts about the user:" in ctx[-1].content and "blue flowerpot" in ctx[-1].content
        assert ctx[-1].content.endswith("Question: where is the spare key?")


def test_the_composite_in_system_prompt_mode_sends_one_system_message(tmp_path):
    with hybrid(tmp_path, inject_mode="system_prompt") as memory:
        ctx = memory.build_conversation_context("where is the spare key?", "s")
        assert [m.role for m in ctx] == [S, U, A, U]
        assert ctx[0].content.startswith("BASE.\n\nKnown facts about the user:") and "flowerpot" in ctx[0].content


def test_the_composite_budget_bounds_facts_window_and_recall_together(tmp_path):
    with hybrid(tmp_path, max_context_tokens=40) as memory:
        ctx = memory.build_conversation_context("where is the spare key?", "s")
        from ovos_memory_plugins.messages import message_tokens

        assert sum(message_tokens(m.content) for m in ctx) <= 40
        assert ctx[0].content == "BASE." and ctx[-1].content == "where is the spare key?"


class ExplodingForget(LexicalMemory):
    def forget(self, session_id):
        raise OSError("lock file unreadable")


def test_a_member_failing_to_forget_is_reported_not_swallowed(tmp_path, monkeypatch):
    from ovos_memory_plugins import composite as composite_module

    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda name: ExplodingForget if name == "exploding" else real(name))
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
               {"module": "exploding", "config": {"db_path": str(tmp_path / "x.db")}}]
    with CompositeMemory({"members": members}) as memory:
        memory.update_history(exchange("my name is Ana", "Hello Ana"), "s")
        with pytest.raises(OSError, match="lock file"):
            memory.forget("s")
        assert memory.members[0].memory.get_history("s") == [], "the other members still forget"


# -- a reference-style subclass ----------------------------------------------------------------------
class FixedHitRetriever(BaseRetrievalMemory):
    """Written as the reference documents it: hooks only, hits without session metadata."""

    plugin_name = "fixed-hit-retriever"

    def _store_document(self, doc_id, text, session_id, metadata):
        pass

    def _query_backend(self, query, top_k):
        return [MemoryHit("Q: secret word is marmalade\nA: noted", "s1_0", 1.0)]


def test_hits_that_do_not_say_their_session_are_recalled_when_no_session_stored_them(tmp_path):
    with FixedHitRetriever({"db_path": str(tmp_path / "f.db"), "context": {"header": "HDR"}}) as memory:
        memory.session2history["s1"] = [*exchange("q", "a"), AgentMessage(U, "dangling")]
        ctx = memory.build_conversation_context("what is the secret word", "s1")
        assert shape(ctx) == [(S, "HDR\n\nContext:\n- Q: secret word is marmalade\nA: noted"), (U, "q"), (A, "a"),
                              (U, "what is the secret word")]


def test_hits_that_do_not_say_their_session_are_kept_from_other_sessions(tmp_path):
    with FixedHitRetriever({"db_path": str(tmp_path / "f.db")}) as memory:
        memory.store("Q: secret word is marmalade\nA: noted", "other")
        assert memory.search("secret word", "s1") == []
        assert [h.content for h in memory.search("secret word", "other")] == ["Q: secret word is marmalade\nA: noted"]


@pytest.mark.skipif(not HAS_TOOLS, reason="tool messages need the pre-release OPM (run in the pre-release CI job)")
def test_tool_mode_after_a_trailing_user_message_keeps_the_call_result_user_order(tmp_path):
    with FixedHitRetriever({"db_path": str(tmp_path / "f.db"), "inject_mode": "tool"}) as memory:
        memory.session2history["s1"] = [*exchange("q", "a"), AgentMessage(U, "dangling")]
        ctx = memory.build_conversation_context("what is the secret word", "s1")
        assert [m.role for m in ctx] == [U, A, A, MessageRole.TOOL, U]
        assert ctx[2].tool_calls[0].id == ctx[3].tool_call_id == "memrag_s1_0"
        assert ctx[2].tool_calls[0].arguments == {"query": "what is the secret word"}


# -- the conformance kit checks the pipeline's rules, and catches a memory that breaks them ----------
def test_the_kit_fails_a_pipeline_that_ignores_the_budget(tmp_path, monkeypatch):
    def no_budget(self, utterance, parts):
        return parts.blocks, parts.window, None

    monkeypatch.setattr(ContextMemory, "_fit", no_budget)
    with pytest.raises(AssertionError, match="max_context_tokens"):
        check_the_token_budget_bounds_the_context(
            lambda over: LexicalMemory({"db_path": str(tmp_path / "l.db"), **over}))
