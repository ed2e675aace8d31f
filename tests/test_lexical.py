"""LexicalMemory: safe keyword queries, stop words, one file shared by several processes."""
from __future__ import annotations

import multiprocessing
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins.lexical import LexicalMemory, match_expression
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
FTS_SYNTAX = st.text(alphabet=st.sampled_from(list('"\'*-()^:+{}[],.NEAROTDn \x00é你😀')) , max_size=40) | \
    st.lists(st.sampled_from(["NEAR", "AND", "OR", "NOT", "*", '"', "(", ")", "-", "^", "col:", "{a b}", "'"]),
             max_size=12).map(" ".join)


def test_stop_words_keep_what_is_my_name_from_recalling_everything(tmp_path):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db")})
    m.update_history([AgentMessage(U, "my name is Ana"), AgentMessage(A, "Hello Ana")], "s")
    for filler in ("what is the weather", "it is raining", "is it late"):
        m.update_history([AgentMessage(U, filler), AgentMessage(A, "it is what it is")], "s")
    hits = m.search("what is my name", "s")
    assert [h.content for h in hits] == ["Q: my name is Ana\nA: Hello Ana"]


def test_without_stop_words_every_exchange_with_is_matches(tmp_path):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db"), "retrieval": {"stopword_languages": []}})
    m.update_history([AgentMessage(U, "my name is Ana"), AgentMessage(A, "Hello Ana")], "s")
    m.update_history([AgentMessage(U, "it is raining"), AgentMessage(A, "ok")], "s")
    assert m.flush(patience(10))  # indexed: until then a turn matches them by half the query's words
    assert len(m.search("what is my name", "s")) == 2


def test_portuguese_stop_words_and_diacritics(tmp_path):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db")})
    m.update_history([AgentMessage(U, "o meu café favorito é o expresso"), AgentMessage(A, "anotado")], "s")
    m.update_history([AgentMessage(U, "o dia está bonito"), AgentMessage(A, "é verdade")], "s")
    hits = m.search("qual é o meu cafe favorito", "s")
    assert len(hits) == 1 and "expresso" in hits[0].content


@pytest.mark.parametrize(("question", "said"), [
    ("how old is my son?", "My son Tom turns seven in May"),  # "son": Spanish for "are"
    ("what colour is the front door?", "I painted the front door red"),  # "door": Dutch for "through"
    ("where did I leave my hat?", "my hat is on the hook"),  # "hat": German for "has"
    ("which war was it about?", "the film was about the war in Spain"),  # "war": German for "was"
    # Too short to tell their language: the word only one language (not English) lists stays.
    ("Ben", "Ben is my neighbour"),  # Dutch "ben" (am), alone: a name said alone is meant
    ("where's Ben?", "Ben is my neighbour"),
    ("where's ben", "Ben is my neighbour"),  # as a speech recogniser writes it
    ("Mia", "Mia starts school in September"),  # Italian "mia" (my)
    ("the door", "I painted the front door red"),
    # English as likely as any language: its other words stay, though two languages list "son".
    ("my son", "My son Tom turns seven in May"),
    ("and my son?", "My son Tom turns seven in May"),
])
def test_one_languages_stop_word_is_anothers_word_and_is_searched_there(tmp_path, question, said):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db")})
    m.update_history([AgentMessage(U, said), AgentMessage(A, "noted")], "s")
    m.update_history([AgentMessage(U, "what did I do yesterday?"), AgentMessage(A, "yes, you went out")], "s")
    hits = m.search(question, "s")
    assert hits and hits[0].content.startswith(f"Q: {said}")


def test_a_short_command_with_too_few_stop_words_to_tell_its_language_searches_no_function_word(tmp_path):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db")})
    for said in ("I work in a hospital", "my sister is a nurse", "turn on the radio"):
        m.update_history([AgentMessage(U, said), AgentMessage(A, "ok")], "s")
    assert m.search("set a timer", "s") == []  # "a" matched every exchange holding it
    m.update_history([AgentMessage(U, "did you set it?"), AgentMessage(A, "yes, thanks for asking")], "s")
    assert m.search("Yes", "s") == m.search("thanks", "s") == []  # a reply word is no name
    assert [h.content.split("\n")[0] for h in m.search("turn on a lamp", "s")] == ["Q: turn on the radio"]


def test_a_spanish_question_still_leaves_out_spanish_stop_words(tmp_path):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db")})
    m.update_history([AgentMessage(U, "mis hijos son Ana y Rui"), AgentMessage(A, "anotado")], "s")
    m.update_history([AgentMessage(U, "las fresas son rojas"), AgentMessage(A, "claro")], "s")
    hits = m.search("¿cómo se llaman mis hijos?", "s")
    assert [h.content.split("\n")[0] for h in hits] == ["Q: mis hijos son Ana y Rui"]
    assert "son" not in match_expression("¿cuáles son tus frutas?", m._stop.for_text("¿cuáles son tus frutas?"))


def test_fts_operators_in_an_utterance_are_plain_words(tmp_path):
    m = LexicalMemory({"db_path": str(tmp_path / "l.db")})
    m.update_history([AgentMessage(U, "NEAR the OR gate"), AgentMessage(A, "ok")], "s")
    m.update_history([AgentMessage(U, "gate keeper"), AgentMessage(A, "ok")], "s")
    assert match_expression('NEAR(a b) "x" -y*') == '"near" OR "a" OR "b" OR "x" OR "y"'
    assert {h.content.split("\n")[0] for h in m.search('"NEAR" gate*', "s")} == {"Q: NEAR the OR gate",
                                                                                   "Q: gate keeper"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=FTS_SYNTAX)
def test_hostile_query_strings_never_raise(tmp_path, text):
    m = LexicalMemory({"db_path": str(tmp_path / "h.db")})
    try:
        m.update_history([AgentMessage(U, text), AgentMessage(A, text)], "s")
        m.search(text, "s")
        ctx = m.build_conversation_context(text, "s")
        assert ctx[-1].role == U and ctx[-1].content == text.strip()
    finally:
        m.close()


def test_one_transaction_per_update_keeps_window_and_index_consistent(tmp_path):
    path = tmp_path / "l.db"
    m = LexicalMemory({"db_path": str(path)})
    for i in range(50):
        m.update_history([AgentMessage(U, f"item {i}"), AgentMessage(A, "ok")], "s")
    m.close()
    con = sqlite3.connect(path)
    docs = con.execute("SELECT COUNT(*) FROM lexical_memory_docs WHERE indexed = 1").fetchone()[0]
    fts = con.execute("SELECT COUNT(*) FROM lexical_memory").fetchone()[0]
    assert docs == fts == 50
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _writer(path: str, name: str, count: int) -> None:
    m = LexicalMemory({"db_path": path, "max_history": 0})
    for i in range(count):
        m.update_history([AgentMessage(U, f"{name} question {i}"), AgentMessage(A, f"{name} answer {i}")], "shared")
    m.close()


@pytest.mark.heavy
def test_two_processes_writing_one_file_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, name, 300)) for name in ("alpha", "beta")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    m = LexicalMemory({"db_path": path, "max_history": 0})
    history = [x.content for x in m.get_history("shared")]
    assert len(history) == 1200
    for name in ("alpha", "beta"):
        answers = [c for c in history if c.startswith(f"{name} answer")]
        assert answers == [f"{name} answer {i}" for i in range(300)]
    docs = m.export("shared")["documents"]
    assert len(docs) == 600 and len({d["doc_id"] for d in docs}) == 600


def test_a_database_the_reference_package_wrote_is_adopted_and_recalled(tmp_path):
    import sqlite3

    path = tmp_path / "lexical_memory.db"
    con = sqlite3.connect(path)
    con.execute("CREATE VIRTUAL TABLE lexical_memory USING fts5(doc_id UNINDEXED, session_id UNINDEXED, content)")
    rows = [("s1_0", "s1", "Q: my dog is called Rex\nA: nice dog"),
            ("s1_0", "s1", "Q: I live in Porto\nA: lovely city"),  # the reference repeats ids after a restart
            ("s2_0", "s2", "Q: my cat is Tom\nA: hello Tom")]
    con.executemany("INSERT INTO lexical_memory (doc_id, session_id, content) VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    for _ in range(2):  # reopening adopts nothing twice
        with LexicalMemory({"db_path": str(path)}) as memory:
            assert memory.flush(patience(10))
            assert [h.content for h in memory.search("dog Rex", "s1")] == ["Q: my dog is called Rex\nA: nice dog"]
            assert [h.source for h in memory.search("Porto", "s1")] == ["s1_1"]
            assert [h.source for h in memory.search("cat Tom", "s2")] == ["s2_0"]
            assert sorted(memory.sessions()) == ["s1", "s2"]
            assert len(memory.export("s1")["documents"]) == 2


def _recalls(memory, query, session_id, word):
    return any(word in m.content for m in memory.build_conversation_context(query, session_id)[:-1]
               if m.role == MessageRole.SYSTEM)


@pytest.mark.parametrize("word", ["記" * 10923, "a" * 40000])
def test_a_word_longer_than_fts5_keeps_whole_costs_no_session_its_recall(tmp_path, word):
    # FTS5 cuts a token at 32,768 bytes, mid-character: the cut term could not be read back, and
    # every later read of the vocabulary (other sessions' turns, the next start) failed.
    config = {"db_path": str(tmp_path / "l.db"), "max_history": 2}
    with LexicalMemory(config) as m:
        m.update_history([AgentMessage(U, "my favourite animal is the zebra"), AgentMessage(A, "ok")], "alice")
        m.update_history([AgentMessage(U, word), AgentMessage(A, "ok")], "mallory")
        for i in range(2):
            m.update_history([AgentMessage(U, f"filler {i}"), AgentMessage(A, "ok")], "alice")
        m.update_history([AgentMessage(U, "my car is a red tesla"), AgentMessage(A, "ok")], "bob")
        for i in range(2):  # out of the window: recalled, not repeated
            m.update_history([AgentMessage(U, f"bob filler {i}"), AgentMessage(A, "ok")], "bob")
        assert m.flush(patience(30))
        assert _recalls(m, "which animal do I like, zebra?", "alice", "zebra")
        assert _recalls(m, "which car, tesla?", "bob", "tesla")
        assert [d["content"] for d in m.export("mallory")["documents"]] == [f"Q: {word}\nA: ok"]  # kept whole
    with LexicalMemory(config) as again:  # the next start loads its postings
        again.update_history([AgentMessage(U, "the hippo"), AgentMessage(A, "ok")], "alice")
        assert again.flush(patience(30))
        assert _recalls(again, "which animal do I like, zebra?", "alice", "zebra")
        assert again.degraded() == {}


def test_a_term_an_older_store_cut_mid_character_does_not_stop_the_postings_loading(tmp_path):
    config = {"db_path": str(tmp_path / "l.db"), "max_history": 2}
    with LexicalMemory(config) as m:
        m.update_history([AgentMessage(U, "my favourite animal is the zebra"), AgentMessage(A, "ok")], "alice")
        assert m.flush(patience(30))
    con = sqlite3.connect(tmp_path / "l.db")  # what an older version wrote: the run given to FTS5 whole
    con.execute("INSERT INTO lexical_memory (rowid, content, session_id, ctx) VALUES (999, ?, 'old', NULL)",
                ("記" * 10923,))
    con.commit()
    con.close()
    with LexicalMemory(config) as again:
        again.update_history([AgentMessage(U, "the hippo"), AgentMessage(A, "ok")], "alice")
        assert again.flush(patience(30))
        assert _recalls(again, "which animal do I like, zebra?", "alice", "zebra")


def test_a_trigram_index_keeps_long_runs_whole(tmp_path):
    # Trigrams are never too long for FTS5: a space at the 4,000th character would break the
    # trigrams across it, and a phrase there would no longer be found.
    text = "日" * 3995 + "東京タワーの高さ" + "日" * 200
    with LexicalMemory({"db_path": str(tmp_path / "l.db"), "tokenizer": "trigram"}) as m:
        m.update_history([AgentMessage(U, text), AgentMessage(A, "ok")], "s")
        assert m.flush(patience(30))
        assert [h.source for h in m.search("東京タワーの高さ", "s")] == ["s_0"]


@pytest.mark.parametrize(("given", "made"), [("my-table!", "mytable"), ("1abc", "t_1abc"), ("", "t_"),
                                             ("persona_notes", "persona_notes")])
def test_the_table_attribute_is_the_table_the_memory_made(tmp_path, given, made):
    with LexicalMemory({"db_path": str(tmp_path / "lexical.db"), "table": given}) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "my dog is Rex"),
                               AgentMessage(MessageRole.ASSISTANT, "nice")], "s")
        assert memory.flush(patience(30))
        assert memory.table == made
    with sqlite3.connect(tmp_path / "lexical.db") as con:
        assert con.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = ?", (made,)).fetchone() == (1,)
