"""Neighbour context (retrieval.neighbour_weight): found through the exchange next door, and a
deleted exchange never lives on in a neighbour's context."""
from __future__ import annotations

import numpy as np
import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.composite import HYBRID_PRESET, CompositeMemory
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.testing.embeddings import FakeEmbedder
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
CONVERSATION = [
    ("I visited an adoption agency today", "How did it go?"),
    ("I chose them because they help everyone", "That is kind"),  # the answer about the agency
    ("the weather is sunny", "enjoy it"),
]


def feed(memory, session="s", conversation=CONVERSATION):
    for question, answer in conversation:
        memory.update_history([AgentMessage(U, question), AgentMessage(A, answer)], session)


def test_lexical_finds_the_answer_through_the_exchange_before(tmp_path, closing):
    plain = closing(LexicalMemory({"db_path": str(tmp_path / "plain.db")}))
    mixed = closing(LexicalMemory({"db_path": str(tmp_path / "mixed.db"), "retrieval": {"neighbour_weight": 0.5}}))
    for memory in (plain, mixed):
        feed(memory)
        assert memory.flush(patience(10))  # neighbour context is in the index (until then, own words match)
    assert [h.source for h in plain.search("adoption agency", "s")] == ["s_0"]
    found = [h.source for h in mixed.search("adoption agency", "s")]
    assert found[0] == "s_0" and "s_1" in found and "s_2" not in found  # own words still rank first


def test_lexical_context_is_rebuilt_when_a_neighbour_expires(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db"), "retrieval": {"neighbour_weight": 0.5}}))
    feed(memory)
    assert memory.flush(patience(10))  # the background indexer has written the FTS5 rows
    with memory._db.atomic() as con:  # the first exchange expires
        memory._delete_documents(memory._docs.delete_older_than(con, memory._docs.for_session("s")[1].ts))
    rows = memory._db.execute(f"SELECT rowid, ctx FROM {memory._fts}")
    assert rows and not any("adoption" in (ctx or "") for _, ctx in rows)
    assert memory.search("adoption agency", "s") == []


def test_turning_the_option_off_stops_matching_old_context(tmp_path, closing):
    path = str(tmp_path / "l.db")
    before = LexicalMemory({"db_path": path, "retrieval": {"neighbour_weight": 0.5}})
    feed(before)
    before.close()  # the persona restarts with the option off
    memory = closing(LexicalMemory({"db_path": path}))
    assert memory.flush(patience(10))  # the RAM copy retires: the index holds context it cannot rank
    assert memory._mirror._unusable
    assert [h.source for h in memory.search("adoption agency", "s")] == ["s_0"]


def test_an_index_from_before_the_context_column_is_migrated(tmp_path, closing):
    import sqlite3

    path = str(tmp_path / "old.db")
    old = LexicalMemory({"db_path": path})
    feed(old)
    old.close()
    con = sqlite3.connect(path)
    con.execute("DROP TABLE lexical_memory")  # rebuild the version-1 layout with its rows
    con.execute("CREATE VIRTUAL TABLE lexical_memory USING fts5(content, session_id UNINDEXED, "
                "tokenize = 'unicode61 remove_diacritics 2')")
    con.execute("INSERT INTO lexical_memory (rowid, content, session_id) SELECT id, content, session_id "
                "FROM lexical_memory_docs")
    con.execute("DELETE FROM ovos_memory_migrations WHERE component = 'fts:lexical_memory' AND version > 1")
    con.commit()
    con.close()
    memory = closing(LexicalMemory({"db_path": path, "retrieval": {"neighbour_weight": 0.5}}))
    sql = memory._db.execute("SELECT sql FROM sqlite_master WHERE name = 'lexical_memory'")[0][0]
    assert "ctx" in sql and "unicode61 remove_diacritics 2" in sql and "porter" not in sql  # tokenizer kept
    assert [h.source for h in memory.search("weather", "s")] == ["s_2"]


def stored(memory, doc_id):
    db = memory._vector_slot.get()
    return np.asarray(db.get_embeddings(doc_id, collection_name=memory.settings.collection), dtype=float)


def unit(v):
    return v / np.linalg.norm(v)


def test_local_rag_mixes_the_neighbours_vectors(tmp_path, closing):
    embedder = FakeEmbedder()
    memory = closing(LocalRAGMemory({"db_path": str(tmp_path / "r.db"), "_embedder": embedder,
                                     "retrieval": {"neighbour_weight": 0.5}}))
    feed(memory)
    assert memory.flush(patience(10))
    own = [np.asarray(embedder.get_embeddings(d.text), dtype=float) for d in memory._docs.for_session("s")]
    assert np.allclose(stored(memory, "s_0"), unit(own[0] + 0.5 * own[1] / 2), atol=1e-5)
    assert np.allclose(stored(memory, "s_1"), unit(own[1] + 0.5 * (own[0] + own[2]) / 2), atol=1e-5)
    assert np.allclose(stored(memory, "s_2"), unit(own[2] + 0.5 * own[1] / 2), atol=1e-5)
    with memory._db.atomic() as con:  # the middle exchange expires: its neighbours are rebuilt without it
        doomed = [d for d in memory._docs.for_session("s") if d.doc_id == "s_1"]
        con.execute(f"DELETE FROM {memory._docs.table} WHERE id = ?", (doomed[0].rowid,))
    memory._delete_documents(doomed)
    assert np.allclose(stored(memory, "s_0"), unit(own[0] + 0.5 * own[2] / 2), atol=1e-5)
    assert memory._db.execute(f"SELECT COUNT(*) FROM {memory._docs.table}_own_vectors")[0][0] == 2


def test_forget_leaves_no_vector_behind(tmp_path, closing):
    memory = closing(LocalRAGMemory({"db_path": str(tmp_path / "r.db"), "_embedder": FakeEmbedder(),
                                     "retrieval": {"neighbour_weight": 0.5}}))
    feed(memory)
    feed(memory, "other")
    assert memory.flush(patience(10))
    memory.forget("s")
    db = memory._vector_slot.get()
    keys = {k for k, *_ in db.query(np.ones(64), top_k=100, collection_name=memory.settings.collection)}
    assert keys == {"other_0", "other_1", "other_2"}
    assert memory._db.execute(f"SELECT COUNT(*) FROM {memory._docs.table}_own_vectors")[0][0] == 3


@pytest.mark.parametrize("name", ["ovos-memory-plugin-lexical", "ovos-memory-plugin-local-rag"])
def test_the_hybrid_preset_indexes_neighbours(name):
    config = next(m["config"] for m in HYBRID_PRESET if m["module"] == name)
    assert config["retrieval"]["neighbour_weight"] == 0.5


def test_the_hybrid_preset_recalls_through_neighbours(tmp_path, closing, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    memory = closing(CompositeMemory({"preset": "hybrid"}))
    assert memory.settings.fusion == "score"
    feed(memory)
    memory.flush(patience(60))
    assert "s_1" in [h.source for h in memory.search("adoption agency", "s")]


@pytest.mark.parametrize("cls", [LexicalMemory, LocalRAGMemory])
@pytest.mark.parametrize("bad", [-0.5, "much"])
def test_a_bad_neighbour_weight_is_a_clear_error(tmp_path, cls, bad):
    from ovos_memory_plugins.errors import ConfigError

    with pytest.raises(ConfigError, match="neighbour_weight"):
        cls({"db_path": str(tmp_path / "m.db"), "retrieval": {"neighbour_weight": bad}})


def test_lexical_context_is_the_same_indexed_in_one_batch_or_one_by_one(tmp_path, closing):
    conversation = [(f"question {i} about topic{i}", f"answer {i}") for i in range(6)]
    settings = {"retrieval": {"neighbour_weight": 0.5}}
    batched = closing(LexicalMemory({"db_path": str(tmp_path / "b.db"), **settings}))
    single = closing(LexicalMemory({"db_path": str(tmp_path / "s.db"), **settings}))
    for question, answer in conversation:
        for memory in (batched, single):
            memory.update_history([AgentMessage(U, question), AgentMessage(A, answer)], "s")
        assert single.flush(patience(10))  # one exchange per index batch
    assert batched.flush(patience(10))  # all of them in one
    rows = [m._db.execute(f"SELECT rowid, content, ctx FROM {m._fts} ORDER BY rowid") for m in (batched, single)]
    assert rows[0] == rows[1] and len(rows[0]) == 6
    assert "topic1" in rows[0][0][2] and "topic0" in rows[0][1][2] and "topic2" in rows[0][1][2]
