"""Past exchanges keep their dates: ``import_exchanges``, and ``export`` -> ``import_session``."""
from __future__ import annotations

import time

import pytest
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.testing import FakeEmbedder
from ovos_memory_plugins.vectordb import SqliteEmbeddingsDB
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
DAY = 86400.0
LONG_AGO = time.time() - 400 * DAY


def lexical(tmp_path, name="l.db", **config):
    return LexicalMemory({"db_path": str(tmp_path / name), **config})


def test_import_exchanges_stores_each_at_its_time_like_update_history(tmp_path, closing):
    dated = closing(lexical(tmp_path, max_history=3, retrieval={"neighbour_weight": 0.5}))
    live = closing(lexical(tmp_path, "live.db", max_history=3, retrieval={"neighbour_weight": 0.5}))
    past = [{"question": f"note {i} about the garden", "answer": f"ok {i}", "ts": LONG_AGO + i * DAY}
            for i in range(4)] + [{"question": "a question left unanswered"}, {"answer": "an answer alone"}]
    assert dated.import_exchanges("s", past) == 6
    for item in past:
        live.update_history([AgentMessage(U, item["question"])] if "question" in item else [], "s")
        if "answer" in item:
            live.update_history([AgentMessage(A, item["answer"])], "s")
    docs = dated._docs.for_session("s")
    assert [d.ts for d in docs[:4]] == [LONG_AGO + i * DAY for i in range(4)]
    assert [d.metadata["ts"] for d in docs[:4]] == [d.ts for d in docs[:4]]
    assert time.time() - docs[4].ts < 60  # no time given: now
    assert [d.text for d in docs[:4]] == [d.text for d in live._docs.for_session("s")][:4]
    assert [m.content for m in dated.get_history("s")] == ["ok 3", "a question left unanswered",
                                                           "an answer alone"]
    assert [h.source for h in dated.search("garden note 2", "s")][:1] == ["s_2"]


def test_import_exchanges_skips_what_max_age_has_already_expired(tmp_path, closing):
    memory = closing(lexical(tmp_path, max_age=30 * DAY))
    stored = memory.import_exchanges("s", [{"question": "old", "answer": "x", "ts": LONG_AGO},
                                           {"question": "recent", "answer": "y", "ts": time.time() - DAY}])
    assert stored == 1 and [d.text for d in memory._docs.for_session("s")] == ["Q: recent\nA: y"]
    assert [m.content for m in memory.get_history("s")] == ["recent", "y"]


def test_an_export_import_round_trip_keeps_the_dates(tmp_path, closing):
    memory = closing(lexical(tmp_path, max_age=1000 * DAY))
    memory.import_exchanges("s", [{"question": "my cat is Miso", "answer": "cute", "ts": LONG_AGO}])
    exported = memory.export("s")
    other = closing(lexical(tmp_path, "other.db", max_age=1000 * DAY))
    other.import_session(exported)
    (doc,) = other._docs.for_session("s")
    assert doc.ts == LONG_AGO and doc.metadata["ts"] == LONG_AGO
    short = closing(lexical(tmp_path, "short.db", max_age=30 * DAY))
    short.import_session(exported)
    short._store.expire(short.settings.max_age)  # the housekeeping of the first update
    assert short._docs.for_session("s") == []  # imported history expires by its own date


def test_an_exported_time_ahead_of_the_clock_is_imported_as_now_and_one_not_a_time_refused(tmp_path, closing):
    memory = closing(lexical(tmp_path))
    memory.import_session({"session_id": "s", "documents": [{"content": "Q: a\nA: b", "ts": time.time() + 10 * DAY}]})
    assert all(d.ts <= time.time() for d in memory._docs.for_session("s"))
    with pytest.raises(ValueError, match=r"'documents'\[0\]\['ts'\] is nan, not a time"):
        memory.import_session({"session_id": "t", "documents": [{"content": "Q: c\nA: d", "ts": float("nan")}]})
    assert memory.sessions() == ["s"]


# -- scoring candidates found by another retriever ---------------------------------------------
def test_local_rag_scores_candidates_with_the_searchs_query_vector(tmp_path, closing):
    embedder = FakeEmbedder()
    memory = closing(LocalRAGMemory({"db_path": str(tmp_path / "r.db"), "_embedder": embedder}))
    for text in ("my dog Rex barks", "sunny weather today", "Rex likes the park"):
        memory.update_history([AgentMessage(U, text), AgentMessage(A, "ok")], "s")
    assert memory.flush(patience(30))
    hits = memory.search("where does Rex walk", "s", top_k=3)
    calls = embedder.calls
    other = lexical(tmp_path, "k.db")  # the same exchanges in another memory: ids may differ, texts match
    closing(other)
    for text in ("sunny weather today", "my dog Rex barks", "Rex likes the park"):
        other.update_history([AgentMessage(U, text), AgentMessage(A, "ok")], "s")
    theirs = other.search("Rex", "s", top_k=3)
    scored = memory.score_candidates("where does Rex walk", theirs, "s")
    assert embedder.calls == calls, "the question was embedded again"
    assert scored == pytest.approx([next(h.score for h in hits if h.content == t.content) for t in theirs])
    assert memory.score_candidates("where does Rex walk", [theirs[0].__class__("never stored", "x_9")], "s") == [None]


def test_the_vector_store_scores_keys_from_its_ram_matrix(tmp_path):
    db = SqliteEmbeddingsDB({"path": str(tmp_path / "v.db")})
    db.add_embeddings("a", [1.0, 0.0])
    db.add_embeddings("b", [0.6, 0.8])
    by_query = {key: 1.0 - distance for key, distance in db.query([1.0, 0.0], top_k=2)}
    assert db.similarities([2.0, 0.0], ["b", "missing", "a"]) == pytest.approx([by_query["b"], None, by_query["a"]])
    db.close()
