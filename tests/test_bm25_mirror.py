"""The RAM copy of the keyword postings ranks exactly as FTS5 does, and stays in step."""
from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins._index.postings import Tokenizer
from ovos_memory_plugins.lexical import LexicalMemory
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
SPEC = "porter unicode61 remove_diacritics 2"
_TEXT = """dog dogs running runs ran café cafe naïve garden gardens gardening Rex Max blue bottle
coffee walks walked walking park Lisbon Porto über straße año niño 42 x"""
WORDS = _TEXT.split() + [f"w{i}" for i in range(300)]  # rare words: idf above FTS5's floor of 1e-6


def exchange(rng: random.Random) -> list[AgentMessage]:
    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))
    return [AgentMessage(U, words(rng.randint(1, 8))), AgentMessage(A, words(rng.randint(0, 12)))]


def fts5_ranking(memory: LexicalMemory, query: str, session_id: str | None, k: int) -> list[tuple[str, float]]:
    mirror, memory._mirror = memory._mirror, None
    try:
        return [(h.source, h.score) for h in memory._query_backend(query, k, session_id)]
    finally:
        memory._mirror = mirror


def mirror_ranking(memory: LexicalMemory, query: str, session_id: str | None, k: int) -> list[tuple[str, float]]:
    assert memory.flush(patience(10)), "the RAM postings did not load"
    return [(h.source, h.score) for h in memory._query_backend(query, k, session_id)]


def assert_same_ranking(ours: list[tuple[str, float]], fts: list[tuple[str, float]]) -> None:
    def key(score: float) -> str:
        return f"{score:.11g}"  # the sums may differ in the last bits

    assert [key(s) for _, s in ours] == [key(s) for _, s in fts[:len(ours)]]
    # Equal scores may come in either order (also across the cut): each hit of ours has its
    # exact score among FTS5's (which the callers fetch deeper).
    assert {(key(s), src) for src, s in ours} <= {(key(s), src) for src, s in fts}


@pytest.mark.parametrize("db", ["file", ":memory:"])
def test_rankings_equal_fts5_through_inserts_and_deletes(tmp_path, closing, db):
    rng = random.Random(7)
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db") if db == "file" else ":memory:",
                                    "scope": "session"}))
    for i in range(300):
        memory.update_history(exchange(rng), f"s{i % 3}")
    queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))) for _ in range(40)]
    for step in range(3):
        for query in queries:
            for sid in ("s0", "s1", None):
                assert_same_ranking(mirror_ranking(memory, query, sid, 10), fts5_ranking(memory, query, sid, 400))
        memory.forget(f"s{step}")  # deletions change every statistic: N, average length, df
        for _ in range(20):
            memory.update_history(exchange(rng), "s2")


def test_the_mirror_answers_once_loaded(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db")}))
    memory.update_history([AgentMessage(U, "my dog is called Rex"), AgentMessage(A, "nice")], "s")
    assert memory.flush(patience(10)) and memory._mirror.ready
    calls = []
    top = memory._mirror._snapshot.top
    memory._mirror._snapshot.top = lambda *a: calls.append(a) or top(*a)
    assert [h.source for h in memory.search("dogs", "s")] == ["s_0"]
    assert calls, "the RAM postings did not answer"


def test_ram_index_false_keeps_fts5_only(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db"), "ram_index": False}))
    memory.update_history([AgentMessage(U, "my dog is called Rex"), AgentMessage(A, "nice")], "s")
    assert memory._mirror is None and [h.source for h in memory.search("dog", "s")] == ["s_0"]


def test_writes_of_another_process_are_seen(tmp_path, closing):
    path = str(tmp_path / "l.db")
    memory = closing(LexicalMemory({"db_path": path, "scope": "global"}))
    memory.update_history([AgentMessage(U, "I walk in the park"), AgentMessage(A, "nice")], "mine")
    assert memory.flush(patience(10))
    other = textwrap.dedent(f"""
        from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole
        from ovos_memory_plugins.lexical import LexicalMemory
        m = LexicalMemory({{"db_path": {path!r}}})
        U, A = MessageRole.USER, MessageRole.ASSISTANT
        m.update_history([AgentMessage(U, "the park in Lisbon"), AgentMessage(A, "ok")], "theirs")
        m.forget("mine")
        m.close()
    """)
    subprocess.run([sys.executable, "-c", other], check=True, timeout=60)
    hits = memory.search("park", None)
    assert [h.source for h in hits] == ["theirs_0"]
    assert_same_ranking(mirror_ranking(memory, "park lisbon", None, 5), fts5_ranking(memory, "park lisbon", None, 50))


def test_documents_not_indexed_yet_rank_at_once_as_fts5_will(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db")}))
    memory.update_history([AgentMessage(U, "coffee in Porto"), AgentMessage(A, "ok")], "s")
    assert memory.flush(patience(10))
    with memory._db.atomic() as con:  # as the indexer leaves it before its batch (or a failure)
        memory._docs.add(con, "s", "Q: coffee in Lisbon, coffee", {}, indexed=False)
    ranked = memory._mirror.search(["coffee"], 5, "s")
    assert ranked is not None and [rowid for rowid, _ in ranked] == [2, 1]
    assert memory._docs.count_pending() == 1
    before = mirror_ranking(memory, "coffee", "s", 5)  # flush() indexes it; a query never does
    assert memory._docs.count_pending() == 0
    assert_same_ranking(before, fts5_ranking(memory, "coffee", "s", 5))


def test_a_mirror_loaded_while_documents_wait_for_the_indexer_ranks_them(tmp_path, closing):
    path = str(tmp_path / "l.db")
    first = closing(LexicalMemory({"db_path": path}))
    first.update_history([AgentMessage(U, "coffee in Porto"), AgentMessage(A, "ok")], "s")
    assert first.flush(patience(10))
    with first._db.atomic() as con:  # another process stored these and has not indexed them yet
        for text in ("Q: coffee in Lisbon, coffee", "Q: tea in Braga"):
            first._docs.add(con, "s", text, {}, indexed=False)
    second = closing(LexicalMemory({"db_path": path}))
    second._started = True  # only load the postings: leave the pending rows to the other process
    assert second._mirror.wait(10)
    loaded = [(h.source, h.score) for h in second._query_backend("coffee tea", 5, "s")]
    assert second._docs.count_pending() == 2  # the mirror answered; nothing was indexed
    assert first.flush(patience(10))  # the other process indexes them
    assert_same_ranking(loaded, fts5_ranking(first, "coffee tea", "s", 5))


def test_an_exchange_is_recalled_right_after_it_is_stored_on_every_path(tmp_path, closing):
    for config in ({}, {"ram_index": False}, {"retrieval": {"neighbour_weight": 0.5}}):
        memory = closing(LexicalMemory({"db_path": str(tmp_path / f"{len(config)}{config}.db"), **config}))
        for i in range(20):
            memory.update_history([AgentMessage(U, f"note {i} about turnips"), AgentMessage(A, "ok")], "s")
        assert [h.source for h in memory.search("turnips", "s", top_k=1)], config
        memory.update_history([AgentMessage(U, "my cat is Rex"), AgentMessage(A, "noted")], "s")
        assert [h.source for h in memory.search("Rex", "s")][:1] == ["s_20"], config


def test_a_pruned_deletion_log_reloads(tmp_path, closing, monkeypatch):
    import ovos_memory_plugins.lexical as lexical

    monkeypatch.setattr(lexical, "DELETION_LOG_KEEP", 1)
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db"), "scope": "global"}))
    for sid in ("a", "b", "c"):
        memory.update_history([AgentMessage(U, f"garden of {sid}"), AgentMessage(A, "ok")], sid)
    assert memory.flush(patience(10))
    snapshot = memory._mirror._snapshot
    memory._mirror._snapshot.deleted_seq = 0  # as if this mirror were a process that slept through
    with memory._db.atomic() as con:
        memory._delete_documents(memory._docs.delete_session(con, "a"))
        memory._delete_documents(memory._docs.delete_session(con, "b"))
    assert memory.flush(patience(10)) and memory._mirror._snapshot is not snapshot
    assert [h.source for h in memory.search("garden", None)] == ["c_0"]


def test_non_latin_queries_and_documents_rank_as_fts5(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db")}))
    texts = ["Καλημέρα κόσμε", "Привет мир, как дела", "東京 タワー 😀 tokyo", "naïve café in Zürich"]
    for text in texts:
        memory.update_history([AgentMessage(U, text), AgentMessage(A, "ok")], "s")
    for query in ("κόσμε", "мир дела", "tokyo", "cafe zurich", "東京"):
        assert_same_ranking(mirror_ranking(memory, query, "s", 5), fts5_ranking(memory, query, "s", 50))


LATIN = st.text(alphabet=st.sampled_from(list("abcXYZ éÉçñßøÆœĳ ſ-'.,!?_0123456789\n\tªº²½µ×÷")), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(LATIN | st.text(max_size=20), min_size=1, max_size=4))
def test_word_by_word_tokenizing_equals_fts5_on_the_whole_text(texts):
    tokenizer = Tokenizer(SPEC)
    try:
        assert tokenizer.counts(texts) == tokenizer._fts5_counts(texts)
    finally:
        tokenizer.close()


def test_a_path_with_uri_characters_loads(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "we?ird #name%20.db")}))
    memory.update_history([AgentMessage(U, "garden party"), AgentMessage(A, "ok")], "s")
    assert memory.flush(patience(10)) and memory._mirror.ready


def test_exchanges_killed_before_their_index_batch_are_indexed_at_the_next_start(tmp_path, closing):
    import sqlite3

    path = str(tmp_path / "l.db")
    child = textwrap.dedent(f"""
        import os, signal
        from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole
        from ovos_memory_plugins.lexical import LexicalMemory
        LexicalMemory.index_delay = 30.0  # the batch never comes: killed first
        m = LexicalMemory({{"db_path": {path!r}}})
        for i in range(30):
            m.update_history([AgentMessage(MessageRole.USER, f"parcel {{i}} went to shelf{{i}}"),
                              AgentMessage(MessageRole.ASSISTANT, "ok")], "s")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert subprocess.run([sys.executable, "-c", child], timeout=60).returncode == -9
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT COUNT(*) FROM lexical_memory_docs WHERE indexed = 0").fetchone()[0] == 30
    assert raw.execute("SELECT COUNT(*) FROM lexical_memory").fetchone()[0] == 0
    raw.close()
    memory = closing(LexicalMemory({"db_path": path, "ram_index": False}))  # FTS5 ranks
    assert [h.source for h in memory.search("shelf29", "s")] == ["s_29"]
    assert memory.flush(patience(10)) and memory._docs.count_pending() == 0
    assert memory._db.execute("SELECT COUNT(*) FROM lexical_memory")[0][0] == 30


def test_the_word_cache_starts_again_when_full_without_losing_words(monkeypatch):
    monkeypatch.setattr(Tokenizer, "cache_limit", 3)
    tok = Tokenizer(SPEC)
    try:
        assert tok.terms(["dogs", "running", "café"]) == [("dog",), ("run",), ("cafe",)]
        assert tok.terms(["dogs", "gardens"]) == [("dog",), ("garden",)]  # cached word + new one past the limit
    finally:
        tok.close()


def test_one_document_that_cannot_be_indexed_does_not_hold_up_the_others(tmp_path, closing, monkeypatch):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db")}))
    real = LexicalMemory._store_documents

    def store(self, docs):
        if any("poison" in d.text for d in docs):
            raise RuntimeError("cannot index this one")
        real(self, docs)

    monkeypatch.setattr(LexicalMemory, "_store_documents", store)
    memory._started = True  # drive the indexer by hand
    memory._worker = None
    for text in ("apples", "poison ivy", "pears"):
        memory.update_history([AgentMessage(U, text), AgentMessage(A, "ok")], "s")
    with pytest.raises(RuntimeError, match="cannot index"):
        memory._index_step()
    indexed = {r[0] for r in memory._db.execute(f"SELECT rowid FROM {memory._fts}")}
    assert indexed == {1, 3} and memory._docs.count_pending() == 1  # the bad one waits for a retry
    assert memory._mirror.wait(10)
    assert [h.source for h in memory.search("poison", "s")] == ["s_1"]  # still recalled, from RAM


def test_a_query_never_indexes_and_does_not_wait_for_another_writer(tmp_path, closing):
    import sqlite3
    import time

    path = str(tmp_path / "l.db")
    memory = closing(LexicalMemory({"db_path": path, "ram_index": False}))
    memory.update_history([AgentMessage(U, "old note about turnips"), AgentMessage(A, "ok")], "s")
    assert memory.flush(patience(10))
    worker, memory._worker = memory._worker, None  # the next exchange stays pending
    memory.update_history([AgentMessage(U, "new note about turnips"), AgentMessage(A, "ok")], "s")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process is writing (a long forget, an import)
    try:
        started = time.monotonic()
        hits = memory.search("turnips", "s")
        assert time.monotonic() - started < 10  # not the 30 s busy timeout
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert [(h.source, "pending" in h.metadata) for h in hits] == [("s_0", False), ("s_1", True)]  # by its words
    assert memory._docs.count_pending() == 1  # the turn indexed nothing: that is the indexer's work
    memory._worker = worker
    assert memory.flush(patience(10)) and memory._docs.count_pending() == 0


def test_flush_indexes_what_another_process_left_pending(tmp_path, closing):
    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db")}))
    assert memory.search("anything", "s") == []  # started: no indexer thread yet (nothing stored here)
    with memory._db.atomic() as con:  # another process stored this and died before its batch
        memory._docs.add(con, "s", "Q: the spare key is under the mat", {}, indexed=False)
    assert memory.flush(patience(10)) and memory._docs.count_pending() == 0
    assert memory._db.execute(f"SELECT COUNT(*) FROM {memory._fts}")[0][0] == 1


# -- neighbour context (retrieval.neighbour_weight): the RAM copy links neighbours, FTS5 copies them


def neighbour_memory(tmp_path, closing, weight, name="n.db", **extra):
    config = {"db_path": str(tmp_path / name), "scope": "session", "retrieval": {"neighbour_weight": weight}}
    return closing(LexicalMemory({**config, **extra}))


@pytest.mark.parametrize("weight", [0.5, 0.3, 2.0])
def test_with_neighbour_context_rankings_equal_fts5_through_inserts_and_deletes(tmp_path, closing, weight):
    rng = random.Random(11)
    memory = neighbour_memory(tmp_path, closing, weight)
    for i in range(240):
        memory.update_history(exchange(rng), f"s{i % 3}")
    assert memory.flush(patience(10)) and memory._mirror.ready, "the RAM copy is off with neighbour context"
    queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))) for _ in range(30)]
    for step in range(4):
        for query in queries:
            for sid in ("s0", "s2", None):
                assert_same_ranking(mirror_ranking(memory, query, sid, 10), fts5_ranking(memory, query, sid, 400))
        if step == 0:
            memory.forget("s0")
        elif step == 1:  # single exchanges leave: their neighbours become each other's
            with memory._db.atomic() as con:
                gone = memory._docs.by_rowids(con, [r for r in range(100, 200, 7)])
                con.executemany(f"DELETE FROM {memory._docs.table} WHERE id = ?", [(d.rowid,) for d in gone])
                memory._delete_documents(gone)
        for _ in range(15):
            memory.update_history(exchange(rng), "s2")


@pytest.mark.parametrize("ram_index", [True, False])
def test_with_neighbour_context_scores_of_any_candidates_equal_fts5(tmp_path, closing, ram_index):
    rng = random.Random(5)
    memory = neighbour_memory(tmp_path, closing, 0.5, ram_index=ram_index)
    for i in range(120):
        memory.update_history(exchange(rng), f"s{i % 2}")
    assert memory.flush(patience(10))
    for _ in range(20):
        query = " ".join(rng.choice(WORDS) for _ in range(3))
        fts = dict(fts5_ranking(memory, query, "s1", 400))
        hits = memory.search(query, "s1", top_k=3)
        others = [h for h in memory.search(rng.choice(WORDS), "s1", top_k=20) if h.source not in fts][:3]
        scored = memory.score_candidates(query, hits + others, "s1")
        assert [f"{s:.11g}" for s in scored] == [f"{fts.get(h.source, 0.0):.11g}" for h in hits + others]


def test_a_neighbour_arriving_later_changes_the_ranking_as_in_fts5(tmp_path, closing):
    memory = neighbour_memory(tmp_path, closing, 0.5)
    memory.update_history([AgentMessage(U, "which agency did you pick"), AgentMessage(A, "a small one")], "s")
    memory.update_history([AgentMessage(U, "the weather"), AgentMessage(A, "sunny")], "t")  # another session
    assert memory.flush(patience(10))
    before = mirror_ranking(memory, "agency", "s", 5)
    memory.update_history([AgentMessage(U, "why that one"), AgentMessage(A, "they help LGBTQ+ folks")], "s")
    after = mirror_ranking(memory, "agency", "s", 5)
    assert [src for src, _ in after] == ["s_0", "s_1"] and before != after
    assert_same_ranking(after, fts5_ranking(memory, "agency", "s", 50))


def test_an_index_built_without_neighbour_context_leaves_ranking_to_fts5(tmp_path, closing):
    path = tmp_path / "old.db"
    old = LexicalMemory({"db_path": str(path)})
    for i in range(5):
        old.update_history([AgentMessage(U, f"garden note {i}"), AgentMessage(A, "ok")], "s")
    old.close()
    memory = neighbour_memory(tmp_path, closing, 0.5, name="old.db")
    assert memory.flush(patience(10))
    assert memory._mirror.search(["garden"], 5, "s") is None  # retired: FTS5 ranks the stale column
    assert [h.source for h in memory.search("garden", "s")]


def test_a_trigram_index_with_neighbour_context_ranks_with_fts5(tmp_path, closing):
    memory = neighbour_memory(tmp_path, closing, 0.5, tokenizer="trigram")
    memory.update_history([AgentMessage(U, "garden party"), AgentMessage(A, "ok")], "s")
    assert memory.flush(patience(10)) and memory._mirror.search(["garden"], 5, "s") is None
    assert [h.source for h in memory.search("garden", "s")] == ["s_0"]


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_a_query_that_matches_nothing_can_be_asked_again_and_scored(tmp_path, closing, caplog, weight):
    memory = neighbour_memory(tmp_path, closing, weight)
    memory.update_history([AgentMessage(U, "garden party"), AgentMessage(A, "ok")], "s")
    memory.update_history([AgentMessage(U, "tea time"), AgentMessage(A, "ok")], "t")
    assert memory.flush(patience(10))
    for _ in range(2):  # the second time from the kept scores of the first
        assert memory.search("garden", "t") == []
    garden = memory.search("garden", "s")
    assert memory.score_candidates("garden", garden, "t") == [0.0]  # outside the session searched
    assert memory.score_candidates("zebra", garden, "s") == [0.0]
    assert memory.score_candidates("zebra", garden, "s") == [0.0]
    assert "failed" not in caplog.text


def test_a_burst_of_long_replies_is_tokenized_off_the_turn(tmp_path, closing, monkeypatch):
    import threading

    from ovos_memory_plugins._index.postings import PostingsMirror

    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db"), "scope": "session"}))
    memory.update_history([AgentMessage(U, "my dog Rex"), AgentMessage(A, "a fine dog")], "s")
    assert memory.flush(patience(10))
    monkeypatch.setattr(PostingsMirror, "turn_sync_chars", 200)
    tokenized_on: list[str] = []
    counts = memory._mirror.tokenizer.counts
    monkeypatch.setattr(memory._mirror.tokenizer, "counts",
                        lambda texts: tokenized_on.append(threading.current_thread().name) or counts(texts))
    long_reply = " ".join(["coffee in the park with Max"] * 20)  # 540 characters, over the turn's 200
    memory.update_history([AgentMessage(U, "where do I walk"), AgentMessage(A, long_reply)], "s")
    assert memory.flush(patience(10))  # indexed in FTS5, and the RAM copy caught up
    tokenized_on.clear()
    memory.update_history([AgentMessage(U, "a second walk"), AgentMessage(A, long_reply)], "s")
    memory._query_backend("coffee park", 5, "s")  # the turn: FTS5 and the pending words answer
    assert threading.current_thread().name not in tokenized_on  # nothing tokenized on the turn
    assert_same_ranking(mirror_ranking(memory, "coffee park", "s", 5), fts5_ranking(memory, "coffee park", "s", 10))
