"""What the reliability tests share: backend specs, markers, child writers, log capture, scanners.

Every update a test writes carries a unique *marker* (``zq<tag>n<5 digits>``) in its user turn,
so "present exactly once" is a count of markers in what the backend returns (``export()``),
and "forgotten" is the absence of the session id and its markers in every SQLite table, file,
PostgreSQL table and Redis key. A backend is covered as soon as ``tests/factories`` has a module for it; the
table ``SPECS`` only tunes what a generic run cannot guess (keep every message, no summary
that would drop markers, smaller counts for JSON stores that rewrite the file per update).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._core.log import LOG
from ovos_memory_plugins.testing.llm import closed_port_url
from tests._postgres import POSTGRES_ENTRY_POINTS, URL_ENV, folder_url, schema_cells
from tests._timing import patience
from tests.factories import all_factories

REPO = Path(__file__).resolve().parents[2]
U, A = MessageRole.USER, MessageRole.ASSISTANT
MARKER = re.compile(r"zq[a-z0-9]+n\d{5}")
#: An endpoint that refuses connections: backends with an LLM use their offline paths.
CLOSED_LLM = closed_port_url()


def marker(tag: str, n: int) -> str:
    return f"zq{tag}n{n:05d}"


def exchange(tag: str, n: int) -> list[AgentMessage]:
    """One update: the marker only in the user turn ("I like X" is also a fact for entity)."""
    return [AgentMessage(U, f"I like {marker(tag, n)}"), AgentMessage(A, "noted")]


def markers_in(text: str) -> list[str]:
    return MARKER.findall(text or "")


# -- backends ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Spec:
    """How the reliability tests drive one entry point.

    Attributes:
        keep_all: overrides under which every update stays visible to ``export()`` (no window
            trimming, no lossy summary, no fact cap).
        concurrency: (processes, threads per process, updates per thread).
        compaction: overrides that make summaries/compaction run during the concurrency test
            while keeping markers (see :func:`marker_summary` and :func:`marker_llm_reply`).
        note: why a count is lower than the default, for the report.
        persistent: False for a memory that stores nothing itself (the composite).
        llm: the backend calls an OpenAI-compatible endpoint (``api_url``).
        namespace_key: a config key naming the store itself (Redis key prefix), set per test.
    """

    keep_all: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    concurrency: tuple[int, int, int] = (2, 4, 500)
    compaction: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    note: str = ""
    persistent: bool = True
    llm: bool = False
    namespace_key: str | None = None


SPECS: dict[str, Spec] = {
    "ovos-memory-plugin-short-term": Spec({"max_history": 0}),
    "ovos-memory-plugin-recency": Spec({"max_history": 0}),
    "ovos-memory-plugin-lexical": Spec({"max_history": 0}),
    "ovos-memory-plugin-local-rag": Spec({"max_history": 0}),
    "ovos-memory-plugin-longterm": Spec(
        {"summarize_every": 1_000_000, "api_url": CLOSED_LLM, "request_timeout": 2},
        (2, 4, 60), {"summarize_every": 3, "recent_window": 2, "max_summary_tokens": 100_000},
        note="JSON file rewritten (fsync) per update; summaries by a marker-keeping fake LLM", llm=True),
    "ovos-memory-plugin-entity": Spec(
        {"max_facts": 0, "api_url": CLOSED_LLM, "request_timeout": 2}, (2, 4, 20),
        note="JSON file rewritten per update, and at most 200 exchanges may await extraction", llm=True),
    "ovos-memory-plugin-redis": Spec(
        {"compact_token_threshold": 0, "max_history": 0, "api_url": None},
        compaction={"compact_token_threshold": 0, "compact_threshold": 4, "keep_recent": 1,
                    "max_summary_tokens": 1_000_000},
        llm=True, namespace_key="prefix"),
    "ovos-memory-plugin-composite": Spec(persistent=False),
}


def spec_for(entry_point: str) -> Spec:
    return SPECS.get(entry_point, Spec())


def entry_points() -> list[str]:
    return sorted(all_factories())


def persistent_entry_points() -> list[str]:
    return [ep for ep in entry_points() if spec_for(ep).persistent]


#: A variant's ``db_url``: the PostgreSQL schema of the test's store folder (tests/_postgres.py),
#: the same in every process; such cases carry the ``postgres`` marker (tests/conftest.py).
POSTGRES = "{postgres}"
ON_POSTGRES: dict[str, Any] = {"db_url": POSTGRES}

#: Store configurations beyond each factory's default: (name, entry point, overrides). A
#: ``db_path`` starting with ``{folder}`` is placed in the test's store folder.
STORE_VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("ovos-memory-plugin-recency (json)", "ovos-memory-plugin-recency", {"db_path": "{folder}/recency.json"}),
    ("ovos-memory-plugin-short-term (json)", "ovos-memory-plugin-short-term",
     {"db_path": "{folder}/short_term.json"}),
    ("ovos-memory-plugin-longterm (sqlite)", "ovos-memory-plugin-longterm",
     {"backend": "sqlite", "db_path": "{folder}/longterm.db"}),
    ("ovos-memory-plugin-entity (sqlite)", "ovos-memory-plugin-entity",
     {"backend": "sqlite", "db_path": "{folder}/entity.db"}),
]


STORE_VARIANTS += [(f"{ep} (postgres)", ep, ON_POSTGRES) for ep in sorted(POSTGRES_ENTRY_POINTS)
                   if ep != "ovos-memory-plugin-composite"]


def store_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """Every persistent entry point with its factory's store, plus the other stores it can use."""
    known = set(persistent_entry_points())
    return [(ep, ep, {}) for ep in sorted(known)] + [v for v in STORE_VARIANTS if v[1] in known]


def with_postgres(names: list[str]) -> list[Any]:
    """``(entry point, store overrides)`` params: each on its factory's store, and on PostgreSQL
    when it can be (those marked ``postgres``)."""
    import pytest

    return [pytest.param(ep, {}, id=ep) for ep in names] + [
        pytest.param(ep, ON_POSTGRES, id=f"{ep}-postgres", marks=pytest.mark.postgres)
        for ep in names if ep in POSTGRES_ENTRY_POINTS]


def namespaced(entry_point: str, config: Mapping[str, Any], tag: str) -> dict[str, Any]:
    """``config`` with a store namespace of its own (a Redis key prefix) for backends that have one."""
    out = dict(config)
    key = spec_for(entry_point).namespace_key
    if key:
        out[key] = f"rel:{tag}:{uuid.uuid4().hex}"
    return out


def make_memory(entry_point: str, folder: Path, overrides: Mapping[str, Any] | None = None,
                make_folder: bool = True) -> Any:
    """A memory of ``entry_point`` with its files in ``folder`` (made here, unless ``make_folder`` is
    False: then the backend must make it)."""
    if make_folder:
        folder.mkdir(parents=True, exist_ok=True)
    config = dict(overrides or {})
    path = config.get("db_path")
    if isinstance(path, str) and path.startswith("{folder}"):
        config["db_path"] = str(folder) + path[len("{folder}"):]
    if config.get("db_url") == POSTGRES:
        config["db_url"] = folder_url(folder)
    return all_factories()[entry_point](folder, config)


def redis_prefix(memory: Any) -> str | None:
    settings = getattr(memory, "settings", None)
    return getattr(settings, "prefix", None) if hasattr(settings, "url") else None


def members_of(memory: Any) -> list[Any]:
    return [m.memory for m in getattr(memory, "members", [])] or [memory]


# -- what a backend holds ------------------------------------------------------------------
def views(exported: Mapping[str, Any], name: str = "") -> dict[str, Counter]:
    """Marker counts per independent view of ``export()``: documents, window (+summary), facts."""
    out: dict[str, Counter] = {}
    for member, data in (exported.get("members") or {}).items():
        out.update(views(data, f"{name}{member}/"))
    if "documents" in exported:
        out[name + "documents"] = Counter(m for d in exported["documents"] for m in markers_in(d.get("content", "")))
    for key in ("window", "recent"):
        if key in exported:
            texts = [d.get("content", "") for d in exported[key] if d.get("role") == "user"]
            out[name + key] = Counter(m for t in texts for m in markers_in(t)) + summary_markers(
                str(exported.get("summary") or ""))
    if "facts" in exported:
        out[name + "facts"] = Counter(m for f in exported["facts"] for m in markers_in(str(f.get("text", f))))
    return out


def summary_markers(summary: str) -> Counter:
    """Markers in a summary: its narrative counts each mention; its facts part (a statement read
    as a fact, "User likes zq...") adds the markers the narrative does not mention. One fold that
    both states a fact and tells of it is one copy; a marker told twice is two."""
    facts, header, narrative = summary.partition("Conversation so far:")
    if not header:
        facts, narrative = ("", summary) if not summary.startswith("Facts about the user:") else (summary, "")
    told = Counter(markers_in(narrative))
    return told + Counter({m: 1 for m in set(markers_in(facts)) if m not in told})


def check_exactly_once(memory: Any, sid: str, expected: list[str], maybe: list[str] = ()) -> dict[str, Counter]:
    """Every marker of ``expected`` once in every view; ``maybe`` (in flight at a kill) 0 or 1 times,
    the same in every view. Returns the views; raises AssertionError naming what is wrong."""
    found = views(memory.export(sid))
    assert found, f"export() of {type(memory).__name__} holds no window, documents or facts: cannot check"
    for view, counts in found.items():
        lost = [m for m in expected if counts[m] == 0]
        twice = sorted(m for m, c in counts.items() if c > 1)
        assert not lost, f"{view}: {len(lost)} acknowledged update(s) lost, e.g. {lost[:5]}"
        assert not twice, f"{view}: update(s) stored more than once: {twice[:5]}"
        unknown = set(counts) - set(expected) - set(maybe)
        assert not unknown, f"{view}: update(s) that were never written: {sorted(unknown)[:5]}"
    for m in maybe:
        seen = {view: counts[m] for view, counts in found.items()}
        assert len(set(seen.values())) == 1, f"update {m} half applied: {seen}"
    return found


# -- logs -----------------------------------------------------------------------------------
class LogRecorder:
    """Collects what the package logs through ``LOG`` (ovos_utils loggers do not propagate)."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {"error": [], "warning": [], "info": [], "exception": []}

    @property
    def errors(self) -> list[str]:
        return self.lines["error"] + self.lines["exception"]

    def errors_without(self, *ignore: str) -> list[str]:
        return [e for e in self.errors if not any(i in e for i in ignore)]


@contextlib.contextmanager
def recording_logs(monkeypatch: Any) -> Iterator[LogRecorder]:
    recorder = LogRecorder()
    for level in recorder.lines:
        def log(msg: Any, *args: Any, _level: str = level, **kwargs: Any) -> None:
            text = str(msg)
            with contextlib.suppress(TypeError, ValueError):
                text = text % args if args else text
            recorder.lines[_level].append(text)
        monkeypatch.setattr(LOG, level, log)
    yield recorder


# -- child writers --------------------------------------------------------------------------
class Writer:
    """A child process writing updates through a backend; acknowledgements come over a pipe.

    The child writes the ack *after* ``update_history`` returned, so every ack the parent reads
    (even one still in the pipe when the child is killed) is an update that returned.
    """

    def __init__(self, job: Mapping[str, Any], log_path: Path, env: Mapping[str, str]):
        read_fd, write_fd = os.pipe()
        self.acks: queue.Queue[str | None] = queue.Queue()
        self._log = open(log_path, "ab")  # noqa: SIM115 - the child writes it until close()
        child_env = {**os.environ, **env, "PYTHONPATH": str(REPO), "OVOS_DEFAULT_LOG_LEVEL": "WARNING"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability._writer", json.dumps({**job, "ack_fd": write_fd})],
            cwd=str(REPO), env=child_env, pass_fds=(write_fd,), stdout=self._log, stderr=subprocess.STDOUT)
        os.close(write_fd)
        self._reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self._reader.start()
        self.log_path = log_path

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for line in pipe:
                self.acks.put(line.decode().strip())
        self.acks.put(None)

    def next_ack(self, timeout: float | None = None) -> str | None:
        """The next ack, or None once the child is gone and its pipe drained."""
        timeout = patience(120) if timeout is None else timeout
        try:
            return self.acks.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"writer sent nothing for {timeout}s; its log:\n{self.output()}") from None

    def rest(self) -> list[str]:
        """Every ack left in the pipe, up to the child's end."""
        out = []
        while True:
            # The last ack ("done") follows the writer's flush, which may take patience(120).
            item = self.next_ack(patience(150))
            if item is None:
                return out
            out.append(item)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()  # SIGKILL
        self.process.wait(patience(30))

    def wait(self, timeout: float | None = None) -> int:
        code = self.process.wait(patience(600) if timeout is None else timeout)
        self._log.close()
        return code

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        self._reader.join(10)
        self._log.close()


class Zygote:
    """A process that imported every backend once and forks a fresh writer per job (fast restarts)."""

    def __init__(self, log_path: Path, env: Mapping[str, str]):
        self._log = open(log_path, "ab")  # noqa: SIM115 - the zygote writes it until close()
        self.log_path = log_path
        child_env = {**os.environ, **env, "PYTHONPATH": str(REPO), "OVOS_DEFAULT_LOG_LEVEL": "WARNING"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability._writer", "--zygote"], cwd=str(REPO), env=child_env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                self.events.put(json.loads(line))
        self.events.put(None)

    def event(self, timeout: float) -> dict[str, Any]:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the writer said nothing for {timeout}s; log:\n{self.output()}") from None
        if item is None:
            raise AssertionError(f"the zygote died; log:\n{self.output()}")
        return item

    def start(self, job: Mapping[str, Any]) -> ForkedWriter:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(job) + "\n").encode())
        self.process.stdin.flush()
        return ForkedWriter(self, int(self.event(patience(120))["pid"]))

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(patience(30))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        if self.process.stdout:
            self.process.stdout.close()
        self._log.close()


class ForkedWriter:
    """One writer forked by a :class:`Zygote`; the same interface as :class:`Writer`."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote = zygote
        self.pid = pid
        self.status: int | None = None

    def next_ack(self, timeout: float | None = None) -> str | None:
        if self.status is not None:
            return None
        event = self.zygote.event(patience(120) if timeout is None else timeout)
        if "status" in event:
            self.status = int(event["status"])
            return None
        return str(event["ack"])

    def rest(self) -> list[str]:
        out = []
        while (ack := self.next_ack(patience(120))) is not None:
            out.append(ack)
        return out

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self.rest()
        return os.waitstatus_to_exitcode(self.status or 0)

    def output(self) -> str:
        return self.zygote.output()

    def close(self) -> None:
        if self.status is None:
            self.kill()
            self.rest()


def writer_env(xdg: Path) -> dict[str, str]:
    from tests._redis import server_url

    return {"XDG_DATA_HOME": str(xdg), "OVOS_MEMORY_REDIS_URL": server_url()}


def marker_summary(previous: str, messages: list[dict[str, Any]], max_tokens: int = 0) -> str:
    """A "summary" that keeps exactly the markers folded into it (and the previous ones)."""
    found = markers_in(previous) + [m for d in messages if d.get("role") == "user"
                                    for m in markers_in(str(d.get("content", "")))]
    return " ".join(found)


def marker_llm_reply(messages: list[dict[str, Any]]) -> str:
    """A FakeLLMServer reply for summary prompts: the markers of the prompt, in order. A fact
    extraction (a system prompt asking for JSON) finds no fact, so each marker is in the summary once."""
    if messages and messages[0].get("role") == "system" and "JSON" in str(messages[0].get("content", "")):
        return '{"facts": []}'
    prompt = str(messages[-1].get("content", "")) if messages else ""
    return " ".join(markers_in(prompt)) or "nothing"


# -- on disk and in Redis --------------------------------------------------------------------
def sqlite_cells(path: Path) -> list[tuple[str, str]]:
    """(table, text) of every cell of every table, blobs decoded, read through SQLite itself."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = []
        for table in tables:
            try:
                rows = con.execute(f'SELECT * FROM "{table}"').fetchall()
            except sqlite3.Error:
                continue  # a virtual table whose module is missing
            for row in rows:
                for cell in row:
                    if isinstance(cell, bytes):
                        out.append((table, cell.decode("utf-8", "replace")))
                    elif cell is not None:
                        out.append((table, str(cell)))
        return out
    finally:
        con.close()


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def folder_texts(folder: Path) -> list[tuple[str, str]]:
    """(where, text) for everything under ``folder``: SQLite cells, the raw bytes of every file, and
    every cell of the folder's PostgreSQL schema (when the server is up)."""
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if is_sqlite(path):
            out.extend((f"{path.name}:{table}", text) for table, text in sqlite_cells(path))
        out.append((f"{path.name} (bytes)", path.read_bytes().decode("utf-8", "replace")))
    if os.environ.get(URL_ENV):
        out.extend(schema_cells(folder_url(folder)))
    return out


def redis_texts(prefix: str) -> list[tuple[str, str]]:
    import redis

    from tests._redis import server_url

    client = redis.Redis.from_url(server_url(), decode_responses=True)
    out = []
    try:
        for key in client.scan_iter(match=f"{prefix}*"):
            out.append(("key", key))
            kind = client.type(key)
            if kind == "string":
                value: Any = client.get(key)
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "hash":
                value = client.hgetall(key)
            elif kind == "set":
                value = sorted(client.smembers(key))
            elif kind == "zset":
                value = client.zrange(key, 0, -1, withscores=True)
            else:
                value = kind
            out.append((key, json.dumps(value, ensure_ascii=False)))
    finally:
        client.close()
    return out


def snapshot_tree(*roots: Path) -> set[str]:
    found = set()
    for root in roots:
        if root.exists():
            found.update(str(p) for p in root.rglob("*"))
    return found


def timed(fn: Any, repeat: int = 5) -> float:
    """Median seconds of ``fn()`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
