"""Forgetting one item: one stored exchange (every copy, its index entries, its window messages),
one fact (entity, a summary's facts), and the index backlog a person waits on. No byte of what
was forgotten may stay in any file the memory wrote."""
from __future__ import annotations

from pathlib import Path

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.testing import FakeEmbedder
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
SECRET = "zanzibarquartz"  # one word no other text holds, so its bytes can be looked for on disk


def exchange(memory, sid, user, answer):
    memory.update_history([AgentMessage(U, user), AgentMessage(A, answer)], sid)


def files_holding(folder: Path, word: str) -> list[str]:
    """The files under ``folder`` (journals and WAL included) whose bytes contain ``word``."""
    return [p.name for p in folder.rglob("*") if p.is_file() and word.encode() in p.read_bytes()]


def fill(memory, sid="kitchen"):
    exchange(memory, sid, "my dog is called Biscuit", "Lovely name!")
    exchange(memory, sid, f"my locker is {SECRET}", "Noted.")
    exchange(memory, sid, "I live in Porto", "Nice city.")
    exchange(memory, "car", "play some jazz", "Playing jazz.")


def secret_doc_id(memory, sid="kitchen"):
    docs = memory.export(sid)["documents"]
    return next(d["doc_id"] for d in docs if SECRET in d["content"])


# -- one exchange ------------------------------------------------------------------------------
@pytest.mark.parametrize("neighbours", [0.0, 0.5])
def test_forgetting_an_exchange_of_a_keyword_memory_leaves_no_byte_of_it(tmp_path, closing, neighbours):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "lex.db"),
                                    "retrieval": {"neighbour_weight": neighbours}}))
    fill(memory)
    assert files_holding(tmp_path, SECRET)
    counts = memory.forget_document("kitchen", secret_doc_id(memory))
    assert counts == {"documents": 1, "messages": 2}
    assert all(SECRET not in d["content"] for d in memory.export("kitchen")["documents"])
    assert all(SECRET not in m.content for m in memory.get_history("kitchen"))
    assert memory.search(SECRET, "kitchen") == []
    assert memory.search("Biscuit", "kitchen")[0].content == "Q: my dog is called Biscuit\nA: Lovely name!"
    assert len(memory.get_history("kitchen")) == 4 and len(memory.export("car")["documents"]) == 1
    assert files_holding(tmp_path, SECRET) == []


def test_an_exchange_stored_twice_is_forgotten_twice_and_other_sessions_keep_theirs(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "lex.db"), "max_history": 0}))
    exchange(memory, "kitchen", f"code {SECRET}", "ok")
    exchange(memory, "kitchen", "something else", "fine")
    exchange(memory, "kitchen", f"code {SECRET}", "ok")
    exchange(memory, "car", f"code {SECRET}", "ok")
    assert memory.forget_document("kitchen", "kitchen_0") == {"documents": 2, "messages": 4}
    assert [d["content"] for d in memory.export("kitchen")["documents"]] == ["Q: something else\nA: fine"]
    assert [m.content for m in memory.get_history("kitchen")] == ["something else", "fine"]
    assert len(memory.export("car")["documents"]) == 1  # the same words in another session are its own


def test_forgetting_an_unknown_document_deletes_nothing(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "lex.db")}))
    fill(memory)
    assert memory.forget_document("kitchen", "kitchen_99") == {}
    assert memory.forget_document("car", secret_doc_id(memory)) == {}  # another session's id
    assert len(memory.export("kitchen")["documents"]) == 3


def test_forgetting_an_exchange_of_a_semantic_memory_removes_its_vector(tmp_path, closing):
    memory = closing(LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), "_embedder": FakeEmbedder(),
                                     "retrieval": {"neighbour_weight": 0.5}}))
    fill(memory)
    assert memory.flush(patience(30))
    assert memory.forget_document("kitchen", secret_doc_id(memory))["documents"] == 1
    assert all(SECRET not in h.content for h in memory.search(f"locker code {SECRET}", "kitchen", top_k=10))
    assert memory.document("kitchen", "kitchen_0")["content"].startswith("Q: my dog")
    assert files_holding(tmp_path, SECRET) == []


def test_a_composite_forgets_an_exchange_in_every_member_and_its_window(tmp_path, closing):
    memory = closing(CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "recency.db")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "lexical.db")}},
        {"module": "ovos-memory-plugin-local-rag", "config": {"db_path": str(tmp_path / "rag.db"),
                                                              "_embedder": FakeEmbedder()}},
    ]}))
    fill(memory)
    assert memory.flush(patience(30))
    doc_id = secret_doc_id(memory.members[1].memory)
    assert memory.document("kitchen", doc_id)["content"] == f"Q: my locker is {SECRET}\nA: Noted."
    counts = memory.forget_document("kitchen", doc_id)
    assert counts == {"ovos-memory-plugin-recency": {"messages": 2},
                      "ovos-memory-plugin-lexical": {"messages": 2, "documents": 1},
                      "ovos-memory-plugin-local-rag": {"messages": 2, "documents": 1}}
    assert SECRET not in str(memory.export("kitchen")) and len(memory.get_history("kitchen")) == 4
    assert files_holding(tmp_path, SECRET) == []


@pytest.mark.parametrize("entity_backend", ["sqlite", "json"])
def test_an_exchange_a_window_trimmed_and_entity_read_leaves_no_byte_while_the_memory_runs(
        tmp_path, closing, entity_backend):
    # The window trimmed it and entity extracted it before the forget: neither holds it any more,
    # but old copies (deleted rows, an older record) may still sit in a WAL until compacted.
    memory = closing(CompositeMemory({"members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "recency.db"),
                                                            "max_history": 4}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "lexical.db")}},
        {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / f"facts.{entity_backend}"),
                                                           "backend": entity_backend, "api_url": None}},
    ]}))
    exchange(memory, "kitchen", f"what does {SECRET} mean?", f"{SECRET} is a word I do not know.")  # no fact
    for n in range(3):
        exchange(memory, "kitchen", f"filler {n}", "ok")
    assert memory.flush(patience(30))
    assert SECRET not in str(memory.get_history("kitchen"))  # trimmed: the window cannot find it
    assert SECRET not in str(memory.export("kitchen")["members"]["ovos-memory-plugin-entity"])  # read
    counts = memory.forget_document("kitchen", secret_doc_id(memory.members[1].memory))
    assert counts["ovos-memory-plugin-lexical"] == {"messages": 2, "documents": 1}
    assert files_holding(tmp_path, SECRET) == []  # the memory still open


@pytest.mark.parametrize("suffix", [".db", ".json"])
def test_a_window_forgets_the_messages_of_an_exchange_and_keeps_the_others_times(tmp_path, closing, suffix):
    memory = closing(RecencyMemory({"db_path": str(tmp_path / f"window{suffix}")}))
    fill(memory)
    before = memory.export("kitchen")["window"]
    assert memory.forget_exchange("kitchen", f"Q: my locker is {SECRET}\nA: Noted.") == {"messages": 2}
    after = memory.export("kitchen")["window"]
    assert after == [m for m in before if SECRET not in m["content"] and m["content"] != "Noted."]
    assert files_holding(tmp_path, SECRET) == []


def test_an_answer_whose_question_was_trimmed_away_is_forgotten_too(tmp_path, closing):
    memory = closing(RecencyMemory({"db_path": str(tmp_path / "w.db"), "max_history": 5}))
    exchange(memory, "s", "old question", f"the answer {SECRET}")
    exchange(memory, "s", "second", "two")
    exchange(memory, "s", "third", "three")  # the window now starts with the answer
    assert memory.forget_exchange("s", f"Q: old question\nA: the answer {SECRET}") == {"messages": 1}
    assert files_holding(tmp_path, SECRET) == []


def test_forget_exchange_names_a_content_that_is_not_text():
    with LexicalMemory({"db_path": ":memory:"}) as memory, pytest.raises(TypeError, match="content must be a str"):
        memory.forget_exchange("s", 42)


# -- one fact ----------------------------------------------------------------------------------
def entity(tmp_path, **config):
    return EntityMemory({"db_path": str(tmp_path / "facts.json"), "api_url": None, **config})


def test_forgetting_a_fact_of_the_entity_memory_leaves_no_byte_of_it(tmp_path, closing):
    memory = closing(entity(tmp_path))
    exchange(memory, "kitchen", "I live in Lisbon", "ok")
    exchange(memory, "kitchen", "I moved from Lisbon to Porto", "ok")
    exchange(memory, "kitchen", "my name is Ana", "hi")
    assert memory.flush(patience(30))
    assert "User lives in Porto" in memory.facts("kitchen")
    assert memory.forget_fact("kitchen", "User lives in Porto") == 1
    assert memory.facts("kitchen") == ["User's name is Ana"]
    assert "Porto" not in str(memory.export("kitchen"))
    assert files_holding(tmp_path, "Porto") == []
    assert memory.forget_fact("kitchen", "User lives in Lisbon") == 1  # a superseded fact goes too
    assert files_holding(tmp_path, "Lisbon") == []


def test_forgetting_a_fact_replaced_twice_leaves_no_byte_of_it_in_what_it_replaced(tmp_path, closing):
    memory = closing(entity(tmp_path))
    for city in ("Lisbon", "Porto", "Braga"):
        exchange(memory, "kitchen", f"I live in {city}", "ok")
    assert memory.flush(patience(30))
    assert memory.facts("kitchen") == ["User lives in Braga"]
    assert memory.forget_fact("kitchen", "User lives in Porto") == 1  # the middle one, superseded itself
    assert "Porto" not in str(memory.export("kitchen"))
    assert files_holding(tmp_path, "Porto") == []
    assert "Lisbon" in str(memory.export("kitchen"))  # the older fact stays


def test_forgetting_an_unknown_fact_writes_nothing(tmp_path, closing):
    memory = closing(entity(tmp_path))
    assert memory.forget_fact("nobody", "User likes jazz") == 0
    assert memory.sessions() == []  # no record made for a session that had none
    with pytest.raises(TypeError, match="text must be a str"):
        memory.forget_fact("nobody", None)


def test_forgetting_a_fact_of_a_summary_rewrites_the_summary_without_it(tmp_path, closing):
    memory = closing(LongTermMemory({"db_path": str(tmp_path / "lt.json"), "api_url": None,
                                     "summarize_every": 1, "recent_window": 0}))
    exchange(memory, "s", "my name is Ana and I live in Porto", "Nice to meet you, Ana.")
    exchange(memory, "s", "I work at the hospital", "Sounds busy.")
    assert memory.flush(patience(30))
    summary = memory.export("s")["summary"]
    assert "User lives in Porto" in summary
    assert memory.forget_fact("s", "User lives in Porto") == 1
    summary = memory.export("s")["summary"]
    assert "User lives in Porto" not in summary and "User's name is Ana" in summary
    assert "User lives in Porto" not in (tmp_path / "lt.json").read_text()
    assert memory.forget_fact("s", "User lives in Porto") == 0


def test_a_composite_forgets_a_fact_in_every_member_that_keeps_facts(tmp_path, closing):
    memory = closing(CompositeMemory({"api_url": None, "members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "recency.db")}},
        {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "facts.json")}},
    ]}))
    exchange(memory, "s", "my name is Ana", "hi")
    assert memory.flush(patience(30))
    assert memory.forget_fact("s", "User's name is Ana") == {"ovos-memory-plugin-entity": 1}
    assert files_holding(tmp_path, "User's name") == []  # the window keeps the message itself


# -- the index backlog -------------------------------------------------------------------------
def test_the_backlog_counts_what_waits_for_the_index_and_finds_a_changed_embedder(tmp_path):
    config = {"db_path": str(tmp_path / "rag.db")}
    with LocalRAGMemory({**config, "_embedder": FakeEmbedder({"dim": 64})}) as memory:
        fill(memory)
        assert memory.flush(patience(30)) and memory.index_backlog() == 0
    with LocalRAGMemory({**config, "_embedder": FakeEmbedder({"dim": 32})}) as memory:
        memory._worker.close()  # nothing is embedded meanwhile: the count is the whole backlog
        assert memory.index_backlog() == 4  # another model: every document is embedded again
    with LocalRAGMemory({**config, "_embedder": FakeEmbedder({"dim": 32})}) as memory:
        assert memory.flush(patience(30)) and memory.index_backlog() == 0


# -- on PostgreSQL -----------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["lexical", "local-rag"])
def test_one_exchange_is_forgotten_on_postgresql_too(backend):
    from tests._postgres import fresh_url

    url = fresh_url()
    memory = LexicalMemory({"db_url": url, "retrieval": {"neighbour_weight": 0.5}}) if backend == "lexical" \
        else LocalRAGMemory({"db_url": url, "_embedder": FakeEmbedder(), "retrieval": {"neighbour_weight": 0.5}})
    with memory:
        fill(memory)
        assert memory.flush(patience(30))
        assert memory.forget_document("kitchen", secret_doc_id(memory)) == {"documents": 1, "messages": 2}
        assert SECRET not in str(memory.export("kitchen"))
        assert all(SECRET not in h.content for h in memory.search(f"locker {SECRET}", "kitchen", top_k=10))
        assert len(memory.export("kitchen")["documents"]) == 2


def test_forgetting_an_exchange_drops_a_summary_narrative_that_quotes_it(tmp_path, closing):
    memory = closing(LongTermMemory({"db_path": str(tmp_path / "lt.json"), "api_url": None,
                                     "summarize_every": 1, "recent_window": 0}))
    fill(memory)
    assert memory.flush(patience(30))
    assert "Noted." in memory.export("kitchen")["summary"]  # the offline narrative quotes the turns
    assert memory.forget_exchange("kitchen", f"Q: my locker is {SECRET}\nA: Noted.") == {
        "messages": 0, "summaries": 1}
    summary = memory.export("kitchen")["summary"]
    assert "Conversation so far" not in summary and "User lives in Porto" in summary  # the facts stay
    assert memory.forget_exchange("kitchen", "Q: something never said at all\nA: nothing") == {
        "messages": 0, "summaries": 0}


def test_a_composite_refuses_to_forget_one_exchange_a_member_would_keep(tmp_path, closing):
    class WholeSessionsOnly:  # keeps sessions, forgets only whole ones (as the redis memory)
        def __init__(self, config=None):
            self.config = config or {}

        def sessions(self):
            return ["kitchen"]

        def update_history(self, messages, session_id):
            pass

        def get_history(self, session_id):
            return []

        def build_conversation_context(self, utterance, session_id):
            return [AgentMessage(U, utterance)]

    from ovos_memory_plugins.errors import NotSupported

    lexical = {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db")}}
    memory = closing(CompositeMemory({"members": [lexical]}))
    fill(memory)
    memory.members.append(memory.members[0]._replace(name="whole-sessions", memory=WholeSessionsOnly()))
    content = f"Q: my locker is {SECRET}\nA: Noted."
    with pytest.raises(NotSupported, match="whole-sessions"):
        memory.forget_exchange("kitchen", content)
    assert [h.content for h in memory.search(SECRET, "kitchen")] == [content]  # nothing was forgotten
