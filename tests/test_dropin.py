"""Code written against the reference package works unchanged: its public names, the attributes of
every instance, the subclassing contract of the retrieval base, and the utterance returned exactly."""
from __future__ import annotations

import dataclasses

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins import BaseRetrievalMemory, MemoryHit
from ovos_memory_plugins._core.compat import HAS_TOOLS
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.errors import ConfigError
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.short_term import BasicShortTermMemory
from ovos_memory_plugins.testing import FakeEmbedder, check_backend, closed_port_url

U, A = MessageRole.USER, MessageRole.ASSISTANT


def exchange(question, answer):
    return [AgentMessage(U, question), AgentMessage(A, answer)]


# -- the fusion names of ``common`` ------------------------------------------------------------
def test_common_keeps_the_reference_fusion_names_and_maths():
    from ovos_memory_plugins.common import (
        FUSION_MODES,
        RankedLists,
        fuse,
        fuse_interleave,
        fuse_merge,
        fuse_priority,
        fuse_rrf,
        fuse_weighted,
    )

    a = [MemoryHit("x", score=0.9), MemoryHit("y", score=0.5)]
    b = [MemoryHit("y", score=12), MemoryHit("z", score=3)]
    lists: RankedLists = [("A", 1.0, a), ("B", 2.0, b)]
    assert FUSION_MODES == ("rrf", "weighted", "merge", "priority", "interleave")
    assert [(h.content, round(h.metadata["fusion_score"], 5)) for h in fuse_rrf(lists)] == [
        ("y", 0.04892), ("z", 0.03226), ("x", 0.01639)]
    assert [(h.content, round(h.metadata["fusion_score"], 5)) for h in fuse_rrf(lists, k=1)] == [
        ("y", 1.33333), ("z", 0.66667), ("x", 0.5)]
    assert [(h.content, h.metadata["fusion_score"]) for h in fuse_weighted(lists)] == [
        ("y", 2.0), ("x", 1.0), ("z", 0.0)]
    assert [h.content for h in fuse_merge(lists)] == ["y", "z", "x"]
    assert [h.content for h in fuse_merge(lists, dedup=False)] == ["y", "z", "x", "y"]
    assert [h.content for h in fuse_priority(lists)] == ["x", "y"]
    assert [h.content for h in fuse_interleave(lists)] == ["x", "y", "z"]
    assert [h.content for h in fuse_interleave(lists, dedup=False)] == ["x", "y", "y", "z"]
    assert [h.content for h in fuse("rrf", lists, rrf_k=1)] == ["y", "z", "x"]
    with pytest.raises(TypeError):
        fuse("rrf", lists, 1)  # rrf_k and dedup are keyword-only, as in the reference
    assert [h.metadata for h in a] == [{}, {}], "fusion must not touch the members' hits"


def test_a_text_one_member_returns_twice_counts_once_in_rank_fusion():
    from ovos_memory_plugins.common import fuse_rrf, fuse_weighted

    # "x" stored twice comes back twice from A: A votes for it once, at its best rank.
    a = [MemoryHit("x", score=0.9), MemoryHit("x ", score=0.8), MemoryHit("y", score=0.5)]
    b = [MemoryHit("y", score=12), MemoryHit("z", score=3)]
    fused = {h.content.strip(): round(h.metadata["fusion_score"], 5) for h in fuse_rrf([("A", 1.0, a), ("B", 1.0, b)])}
    assert fused == {"x": round(1 / 61, 5), "y": round(1 / 63 + 1 / 61, 5), "z": round(1 / 62, 5)}
    weighted = {h.content.strip(): h.metadata["fusion_score"] for h in fuse_weighted([("A", 1.0, a)])}
    assert weighted == {"x": 1.0, "y": 0.0}


# -- settings as attributes --------------------------------------------------------------------
def test_every_resolved_setting_of_the_retrieval_base_is_an_attribute(tmp_path):
    memory = LexicalMemory({"db_path": str(tmp_path / "l.db"), "scope": "global", "max_history": 4,
                            "retrieval": {"max_num_results": 3, "min_score": 0.5, "query_mode": "history"},
                            "context": {"header": "HDR", "include_sources": True}})
    with memory:
        assert (memory.scope, memory.inject_mode, memory.max_history) == ("global", "system", 4)
        assert (memory.max_num_results, memory.min_score, memory.query_mode) == (3, 0.5, "history")
        assert (memory.query_history_turns, memory.header, memory.chunk_prefix) == (3, "HDR", "- ")
        assert (memory.chunk_separator, memory.include_sources, memory.tool_name) == ("\n\n", True, "search_memory")
        assert "{context}" in memory.system_prompt_template and "{utterance}" in memory.user_template
        assert memory.db_path == str(tmp_path / "l.db")


def test_backend_specific_settings_are_attributes_too(tmp_path):
    with LocalRAGMemory({"db_path": str(tmp_path / "r.db"), "collection": "mine", "_embedder": FakeEmbedder()}) as rag:
        assert (rag.collection, rag.embeddings_plugin) == ("mine", "ovos-memory-e5-embeddings-plugin")
        assert rag.embeddings_db_plugin == "ovos-memory-sqlite-embeddings-plugin"
    with LongTermMemory({"db_path": str(tmp_path / "lt.json"), "api_url": closed_port_url()}) as lt:
        assert (lt.summarize_every, lt.recent_window, lt.max_summary_tokens) == (6, 4, 256)
        assert (lt.model, lt.request_timeout) == ("", 30.0) and lt.api_url.startswith("http://127.0.0.1")
    with EntityMemory({"db_path": str(tmp_path / "e.json"), "api_url": None}) as entity:
        assert (entity.max_facts, entity.facts_header) == (50, "Known facts about the user:")
        assert entity.db_path == str(tmp_path / "e.json")
        with pytest.raises(AttributeError):
            entity.db_path = str(tmp_path / "elsewhere.json")  # the store is open: it cannot move
        with pytest.raises(AttributeError):
            entity.max_facts = 3
    with RecencyMemory({"max_age": 60}) as recency:
        assert (recency.max_age, recency.max_history) == (60, 10)


def test_assigning_a_per_turn_setting_takes_effect_and_is_checked(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "l.db")}) as memory:
        memory.update_history(exchange("my boat is the sandpiper", "nice"), "s")
        memory.header = "Remembered:"
        memory.max_history = 0
        ctx = memory.build_conversation_context("boat sandpiper", "s")
        # max_history 0 keeps all; the exchange is in the window, so the recall is not repeated
        assert [m.content for m in ctx][-3:] == ["my boat is the sandpiper", "nice", "boat sandpiper"]
        memory.max_history = 2
        memory.update_history(exchange("and the weather?", "sunny"), "s")
        assert ctx != memory.build_conversation_context("boat sandpiper", "s")
        assert any(m.content.startswith("Remembered:") for m in memory.build_conversation_context("sandpiper", "s"))
        with pytest.raises(ConfigError, match="inject_mode"):
            memory.inject_mode = "shout"
        with pytest.raises(AttributeError):
            memory.db_path = str(tmp_path / "other.db")
        with pytest.raises(AttributeError, match="fixed at construction"):
            memory.table = "other"


def test_the_composite_lists_its_members_as_name_instance_weight(tmp_path):
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
               {"module": "ovos-memory-plugin-lexical", "weight": 2.0, "config": {"db_path": str(tmp_path / "l.db")}}]
    with CompositeMemory({"members": members, "max_num_results": 3}) as composite:
        (n1, m1, w1), (n2, m2, w2) = composite.members
        assert (n1, type(m1), w1) == ("ovos-memory-plugin-recency", RecencyMemory, 1.0)
        assert (n2, type(m2), w2) == ("ovos-memory-plugin-lexical", LexicalMemory, 2.0)
        assert [m.name for m in composite.retrievers] == [n2] and [m.name for m in composite.plain] == [n1]
        assert composite.primary.name == n1 and composite.primary.get_history("s") == []
        assert (composite.fusion, composite.rrf_k, composite.dedup) == ("rrf", 60, True)
        assert (composite.max_num_results, composite.member_fetch_k) == (3, 6)
        assert isinstance(composite, BaseRetrievalMemory)
        composite.max_num_results = 2
        composite.member_fetch_k = 8
        assert (composite.max_num_results, composite.member_fetch_k, composite.settings.top_k) == (2, 8, 2)
        with pytest.raises(ConfigError):
            composite.max_num_results = 0


# -- the subclassing contract: session2history and assemble_context -----------------------------
class ReferenceStyleRetriever(BaseRetrievalMemory):
    """A third-party retriever written as the reference documents it, with its own context building."""

    plugin_name = "my-reference-style-retriever"

    def __init__(self, config=None):
        super().__init__(config)
        self.documents = {}

    def _store_document(self, doc_id, text, session_id, metadata):
        self.documents[doc_id] = (text, metadata)

    def _query_backend(self, query, top_k):
        words = set(query.lower().split())
        hits = [MemoryHit(text, doc_id, float(len(words & set(text.lower().split()))), metadata)
                for doc_id, (text, metadata) in self.documents.items() if words & set(text.lower().split())]
        return sorted(hits, key=lambda h: h.score, reverse=True)[:top_k]

    def update_history(self, new_messages, session_id):
        history = self.session2history.setdefault(session_id, [])
        question = ""
        for message in new_messages:
            if message.role == U:
                question = message.content
            elif message.role == A and message.content:
                self.store(f"Q: {question}\nA: {message.content}", session_id)
            history.append(message)
        if self.max_history:
            self.session2history[session_id] = list(self.session2history[session_id])[-self.max_history:]

    def build_conversation_context(self, utterance, session_id):
        history = self.session2history.get(session_id, [])
        hits = self.search(utterance, session_id)
        context = "\n".join(f"{self.chunk_prefix}{h.content}" for h in hits)
        return self.assemble_context(utterance, session_id, context, history, extra_system=None)


def test_a_subclass_written_as_the_reference_describes_passes_the_contract_kit(tmp_path):
    counter = iter(range(100))
    check_backend(lambda over: ReferenceStyleRetriever({"db_path": str(tmp_path / f"s{next(counter)}.db"), **over}))


def test_session2history_reads_the_stored_window_and_assignments_reach_the_store(tmp_path):
    config = {"db_path": str(tmp_path / "l.db")}
    with LexicalMemory(config) as memory:
        memory.update_history(exchange("q1", "a1"), "s")
        assert [m.content for m in memory.session2history["s"]] == ["q1", "a1"]
        memory.session2history["s"] = exchange("seeded q", "seeded a")
        memory.session2history["s"].append(AgentMessage(U, "and then?"))
        with pytest.raises(KeyError):
            memory.session2history["nobody"]
    with LexicalMemory(config) as again:  # durable: a restart sees the edits
        assert [m.content for m in again.get_history("s")] == ["seeded q", "seeded a", "and then?"]
        assert list(again.session2history) == ["s"]


def test_assemble_context_emits_the_reference_shapes(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "l.db"), "system_prompt": "BASE.",
                        "context": {"header": "HDR"}}) as memory:
        history = [*exchange("q", "a"), AgentMessage(U, "dangling")]
        ctx = memory.assemble_context("  the question ", "s1", "- chunk", history)
        assert [(m.role, m.content) for m in ctx] == [
            (MessageRole.SYSTEM, "BASE."), (MessageRole.SYSTEM, "HDR\n\nContext:\n- chunk"),
            (U, "q"), (A, "a"), (U, "the question")]
        extra = [AgentMessage(MessageRole.SYSTEM, "FACTS")]
        ctx = memory.assemble_context("the question", "s1", "", history, extra_system=extra)
        assert [m.content for m in ctx] == ["BASE.", "FACTS", "q", "a", "the question"]


@pytest.mark.parametrize(("mode", "prompt", "shape"), [
    ("system", "BASE.", [("system", "BASE."), ("system", "EXTRA"), ("system", "HDR\n\nContext:\n- chunk")]),
    ("system", "", [("system", "EXTRA"), ("system", "HDR\n\nContext:\n- chunk")]),
    ("developer", "BASE.", [("system", "BASE."), ("system", "EXTRA"), ("developer", "HDR\n\nContext:\n- chunk")]),
    ("system_prompt", "BASE.", [("system", "BASE.\n\nHDR\n\nContext:\n- chunk"), ("system", "EXTRA")]),
    ("system_prompt", "", [("system", "HDR\n\nContext:\n- chunk"), ("system", "EXTRA")]),
    ("user", "BASE.", [("system", "BASE."), ("system", "EXTRA")]),
])
def test_assemble_context_puts_a_subclass_s_extra_messages_after_the_system_part_in_every_mode(
        tmp_path, mode, prompt, shape):
    # The reference's order for a subclass's own extra messages, whatever the mode.
    with LexicalMemory({"db_path": str(tmp_path / "l.db"), "system_prompt": prompt, "inject_mode": mode,
                        "context": {"header": "HDR"}}) as memory:
        ctx = memory.assemble_context("the question", "s1", "- chunk", exchange("q", "a"),
                                      extra_system=[AgentMessage(MessageRole.SYSTEM, "EXTRA")])
    last = "HDR\n\nContext:\n- chunk\n\nQuestion: the question" if mode == "user" else "the question"
    assert [(m.role.value, m.content) for m in ctx] == [*shape, ("user", "q"), ("assistant", "a"), ("user", last)]


@pytest.mark.skipif(not HAS_TOOLS, reason="tool messages need the pre-release OPM")
def test_assemble_context_in_tool_mode_counts_its_call_ids_per_session(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "l.db"), "inject_mode": "tool"}) as memory:
        first = memory.assemble_context("q", "s1", "- chunk", [])
        second = memory.assemble_context("q", "s1", "- chunk", [])
        other = memory.assemble_context("q", "s2", "- chunk", [])
        assert [c[-3].tool_calls[0].id for c in (first, second, other)] == ["memrag_s1_0", "memrag_s1_1", "memrag_s2_0"]


# -- default paths -----------------------------------------------------------------------------
class OtherReferenceStyleRetriever(ReferenceStyleRetriever):
    plugin_name = "my-other-retriever"


def test_two_third_party_retrievers_without_db_path_never_share_a_file():
    with ReferenceStyleRetriever({}) as one, OtherReferenceStyleRetriever({}) as two:
        assert one.db_path != two.db_path
        one.update_history(exchange("my secret is marmalade", "ok"), "s")
        assert two.get_history("s") == [] and two.sessions() == []


def test_a_subclass_of_a_builtin_backend_gets_a_default_file_of_its_own():
    class MyLexical(LexicalMemory):
        pass

    with LexicalMemory({}) as ours, MyLexical({}) as theirs:
        assert ours.db_path.endswith("lexical_memory.db") and ours.db_path != theirs.db_path


# -- rule 2: the utterance comes back exactly --------------------------------------------------
UTTERANCES = ["x" * 1_000_000 + " end", "lone \ud800 surrogate", "\ttabs and\nnewlines\n "]


@pytest.mark.parametrize("make", [
    lambda p: BasicShortTermMemory({}),
    lambda p: RecencyMemory({}),
    lambda p: LexicalMemory({"db_path": str(p / "l.db")}),
    lambda p: LocalRAGMemory({"db_path": str(p / "r.db"), "_embedder": FakeEmbedder()}),
    lambda p: LongTermMemory({"db_path": str(p / "lt.json"), "api_url": None}),
    lambda p: EntityMemory({"db_path": str(p / "e.json"), "api_url": None}),
    lambda p: CompositeMemory({"members": [{"module": "ovos-memory-plugin-lexical",
                                            "config": {"db_path": str(p / "cl.db")}}]}),
], ids=["short-term", "recency", "lexical", "local-rag", "longterm", "entity", "composite"])
@pytest.mark.parametrize("utterance", UTTERANCES, ids=["1MB", "surrogate", "whitespace"])
def test_the_last_message_is_the_callers_utterance_exactly_stripped(make, utterance, tmp_path):
    memory = make(tmp_path)
    try:
        memory.update_history(exchange("my name is Ana", "hello Ana"), "s")
        for mode_ctx in (memory.build_conversation_context(utterance, "s"),):
            assert mode_ctx[-1].role == U
            assert mode_ctx[-1].content == utterance.strip()
    finally:
        memory.close()


def test_what_is_stored_is_cleaned_and_bounded_while_the_context_keeps_the_utterance(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "l.db")}) as memory:
        memory.update_history(exchange("bad \ud800 bytes", "y" * 200_000), "s")
        stored = memory.get_history("s")
        assert "\ud800" not in stored[0].content and len(stored[1].content) <= 100_000
        stored[0].content.encode("utf-8")  # storable


def test_user_inject_mode_carries_the_utterance_exactly_in_its_template(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "l.db"), "inject_mode": "user", "max_history": 2}) as memory:
        memory.update_history(exchange("my boat is the sandpiper", "nice"), "s")
        memory.update_history(exchange("other", "thing"), "s")
        ctx = memory.build_conversation_context("  boat \ud800 sandpiper? ", "s")
        assert ctx[-1].content.endswith("Question: boat \ud800 sandpiper?")


def test_dataclass_settings_stay_frozen_for_direct_writes(tmp_path):
    with LexicalMemory({"db_path": str(tmp_path / "l.db")}) as memory, pytest.raises(dataclasses.FrozenInstanceError):
        memory.settings.scope = "global"
