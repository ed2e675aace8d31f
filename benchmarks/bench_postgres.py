"""PostgreSQL against SQLite, side by side in one run, on the same machine.

1. **Turn latency** of lexical, local-rag and the hybrid preset at 10k and 100k stored exchanges
   (one session holding them all: the worst case), each on SQLite (the default) and on
   PostgreSQL (``db_url``, a local server over its Unix socket): medians and p90 of
   ``build_conversation_context`` and ``update_history``, alternating, as in docs/benchmarks.md.
   Embedding is excluded: the embedder is a stand-in returning fixed pseudo-random vectors
   (about 20 µs), so what is measured is the store. The stored exchanges are written straight
   into each memory's document log and index in large transactions (what that many updates would
   leave; 100k real updates would take hours of the same statements). On PostgreSQL the vector
   collection's HNSW index is built before timing (its build time is reported: a maintenance
   step the store runs in the background, never on a turn).
2. **Writers**: 4 processes x 1,000 ``update_history`` into one session of a lexical memory on
   PostgreSQL, each on its own connection; every exchange must be stored exactly once.
3. **LoCoMo recall** of lexical on both engines (recall@5 and @10 on the dev split, as
   benchmarks/locomo.py measures it) and how often the two return the same top-5 set.

Without ``--url`` a private PostgreSQL 16 with pgvector is started for the run, *durable*
(fsync on, synchronous commit: every update costs one WAL flush, as in production), from the
pgserver wheel (scripts/postgres_server.py), and stopped at the end.

Usage::

    python benchmarks/bench_postgres.py                    # everything (about 20 minutes)
    python benchmarks/bench_postgres.py --quick            # 1k exchanges, fewer calls (a smoke run)
    python benchmarks/bench_postgres.py --sizes 10000 --skip-locomo --url postgresql://...

Prints markdown tables (the ones in docs/benchmarks.md) and writes the figures as JSON to
``build/bench/postgres.json``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _report  # noqa: E402  (sibling module: the page's sections)
import numpy as np  # noqa: E402
from _worker import Workload, _messages, alternate_turns  # noqa: E402

from ovos_memory_plugins.storage.documents import format_exchange  # noqa: E402

SESSION = "bench"
DIM = 384
BATCH = 1000
BACKENDS = ("lexical", "local-rag", "hybrid")


# -- a stand-in embedder ------------------------------------------------------------------------
#: Sentence embeddings are not uniform in 384 dimensions: texts gather around topics in a space
#: of few effective dimensions, which is what makes an HNSW graph work (on uniform random
#: vectors it must visit many more nodes, for worse recall). The stand-in draws each vector
#: near one of TOPICS points of a LATENT-dimensional space, mapped into DIM dimensions.
TOPICS, LATENT, SPREAD = 2000, 32, 0.35
_MODEL = np.random.default_rng(20)
_CENTRES = _MODEL.standard_normal((TOPICS, LATENT)).astype(np.float32)
_LIFT = (_MODEL.standard_normal((LATENT, DIM)) / np.sqrt(LATENT)).astype(np.float32)


def embedding_like(rng: Any, count: int) -> Any:
    """``count`` unit vectors drawn as sentence embeddings spread (see TOPICS)."""
    latent = _CENTRES[rng.integers(0, TOPICS, count)] + SPREAD * rng.standard_normal((count, LATENT))
    rows = (latent @ _LIFT + 0.05 * rng.standard_normal((count, DIM))).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class FixedVectors:
    """Deterministic vectors per text (numpy, ~20 µs): embedding costs nothing measurable."""

    model_id = "bench-fixed-vectors"

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def _vector(self, text: str) -> Any:
        found = self._cache.get(text)
        if found is None:
            found = embedding_like(np.random.default_rng(zlib.crc32(text.encode())), 1)[0]
            if len(self._cache) < 10_000:
                self._cache[text] = found
        return found

    def get_embeddings(self, text: str) -> Any:
        return self._vector(text)

    def get_query_embeddings(self, text: str) -> Any:
        return self._vector(text)

    def get_embeddings_batch(self, texts: Sequence[str]) -> list[Any]:
        return [self._vector(t) for t in texts]


# -- the PostgreSQL server ------------------------------------------------------------------------
class Server:
    """A durable private server for the run (or the one ``--url`` names)."""

    def __init__(self, url: str | None):
        self.url, self.folder = url, None
        if url is None:
            # 1 GB of cache: the 100k-vector HNSW index (about 200 MB) stays in it, as a sized server's would.
            out = subprocess.run([sys.executable, str(HERE.parent / "scripts" / "postgres_server.py"), "start",
                                  "--durable", "--shared-buffers", "1GB", "--owner", str(os.getpid()), "--print-env"],
                                 check=True, capture_output=True, text=True).stdout
            env = dict(line.split("=", 1) for line in out.split())
            self.url = env["OVOS_MEMORY_POSTGRES_URL"].strip("'")
            self.folder = env["OVOS_MEMORY_PGSERVER_DIR"].strip("'")

    def schema(self, name: str, async_commit: bool = False) -> str:
        assert self.url is not None
        # Asynchronous commit: acknowledged before the WAL reaches the disk, so a crash of the
        # server (not of the client) may lose the last fraction of a second: the durability
        # of SQLite's WAL with synchronous=NORMAL, our embedded default, under a power cut.
        extra = "%20-csynchronous_commit%3Doff" if async_commit else ""
        return f"{self.url}{'&' if '?' in self.url else '?'}options=-csearch_path%3D{name},public{extra}"

    def fresh(self, async_commit: bool = False) -> str:
        return self.schema(f"bench_{uuid.uuid4().hex[:12]}", async_commit)

    def commit_floor(self, calls: int = 200) -> dict[str, float]:
        """What one durable commit of one row costs on this server and disk (the WAL flush)."""
        import psycopg

        with psycopg.connect(str(self.url), autocommit=True) as con:
            table = f"bench_floor_{uuid.uuid4().hex[:8]}"  # a real table: a temporary one writes no WAL
            con.execute(f"CREATE TABLE {table} (x int)")
            samples = []
            for i in range(calls):
                t = time.perf_counter()
                with con.transaction():
                    con.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
                samples.append(time.perf_counter() - t)
            con.execute(f"DROP TABLE {table}")
        return ms(samples)

    def stop(self) -> None:
        if self.folder:
            subprocess.run([sys.executable, str(HERE.parent / "scripts" / "postgres_server.py"), "stop", self.folder],
                           check=False)


# -- building and filling memories ---------------------------------------------------------------
def config_for(backend: str, engine: str, server: Server, folder: str) -> tuple[Any, dict[str, Any]]:
    """(class, config) of one benchmarked memory."""
    from ovos_memory_plugins.composite import HYBRID_PRESET, CompositeMemory
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.local_rag import LocalRAGMemory
    from ovos_memory_plugins.testing.llm import closed_port_url

    store: dict[str, Any] = {"db_url": server.fresh(engine == "postgres-async")} if engine != "sqlite" else \
        {"db_path": os.path.join(folder, f"{backend}.db")}
    if backend == "lexical":
        return LexicalMemory, store
    if backend == "local-rag":
        return LocalRAGMemory, {**store, "_embedder": FixedVectors()}
    members = []
    for spec in HYBRID_PRESET:  # the preset, with the stand-in embedder and no LLM to wait for
        config = dict(spec["config"])
        if spec["module"].endswith("local-rag"):
            config["_embedder"] = FixedVectors()
        if spec["module"].endswith("entity"):
            config.update(api_url=closed_port_url(), request_timeout=1)
        members.append({"module": spec["module"], "config": config})
    return CompositeMemory, {**({"db_url": store["db_url"]} if engine != "sqlite" else {}), "members": members}


def retrievers(memory: Any) -> list[Any]:
    return [m.memory for m in getattr(memory, "members", [])] or [memory]


def populate(memory: Any, n: int, work: Workload) -> dict[str, float]:
    """Write ``n`` exchanges into every retriever's log and index (and vectors); returns timings."""
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.local_rag import LocalRAGMemory, _portable

    pairs = [work.exchange() for _ in range(n)]
    timings: dict[str, float] = {}
    start = time.perf_counter()
    for member in retrievers(memory):
        if not isinstance(member, (LexicalMemory, LocalRAGMemory)):
            continue
        member.search("warm up", SESSION)  # loads the plugins, creates the collection
        vectors = member._vector_slot.get() if isinstance(member, LocalRAGMemory) else None
        if vectors is not None and hasattr(vectors, "build_index"):
            # A bulk load: the HNSW index is built once after it (inserting into one costs ~1 ms a vector).
            vectors._maybe_build_index = lambda *args: None
        rng = np.random.default_rng(1)
        for first in range(0, n, BATCH):
            chunk = pairs[first:first + BATCH]
            with member._db.atomic() as con:
                docs = [member._docs.add(con, SESSION, format_exchange(q, a), {"question": q, "answer": a},
                                         indexed=True) for q, a in chunk]
                if isinstance(member, LexicalMemory):
                    member._store_documents(docs)  # FTS5 rows or postings, in the same transaction
            if vectors is not None:
                matrix = embedding_like(rng, len(docs))
                vectors.add_embeddings_batch([d.doc_id for d in docs], list(matrix), [_portable(d) for d in docs],
                                             collection_name=member.settings.collection)
        memory.flush()
        if vectors is not None and hasattr(vectors, "build_index"):
            del vectors._maybe_build_index  # from now on, as in production
        if vectors is not None and hasattr(vectors, "build_index") and n > vectors.settings.hnsw_above:
            t = time.perf_counter()
            vectors.build_index(member.settings.collection)  # waits for a background build under way
            timings["hnsw_build_s"] = time.perf_counter() - t
    for q, a in pairs[-5:]:  # a window, as a live session has
        memory.update_history(_messages(q, a), SESSION)
    memory.flush()
    timings["populate_s"] = time.perf_counter() - start
    vacuumed = vacuum(memory)
    if vacuumed is not None:
        timings["vacuum_s"] = vacuumed
    return timings


def vacuum(memory: Any) -> float | None:
    """VACUUM (ANALYZE) a PostgreSQL memory's schema after the bulk load; its duration in seconds.

    A store that grew to N exchanges over months has been vacuumed and analysed by autovacuum many
    times; a bulk load written a second before the first turn still has the planner statistics of
    empty tables, and plans keyword searches for them (measured: ``ANALYZE`` alone takes lexical
    at 100k from 5.4 to 3.4 ms a build). None on SQLite.
    """
    db = next((m._db for m in retrievers(memory) if getattr(m, "_db", None) is not None), None)
    if db is None or db.engine != "postgres":
        return None
    start = time.perf_counter()
    with db.dedicated() as raw:
        tables = [r[0] for r in raw.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        for table in tables:
            raw.execute(f'VACUUM (ANALYZE) "{table}"'.encode())
    return time.perf_counter() - start


def ms(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(s * 1000 for s in samples)
    return {"median": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))]}


def latency_cell(backend: str, engine: str, n: int, calls: int, server: Server) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as folder:
        os.environ["XDG_DATA_HOME"] = os.path.join(folder, "xdg")  # the preset's relative db_paths land here
        cls, config = config_for(backend, engine, server, folder)
        memory = cls(config)
        try:
            work = Workload(seed=1)
            timings = populate(memory, n, work)
            # At rest: the previous exchange indexed before the next turn (untimed), as when turns
            # are seconds apart. Then right after: the build runs while that indexing does.
            rested, _, _ = alternate_turns(memory, work, calls, SESSION, after_update=memory.flush)
            builds, updates, _ = alternate_turns(memory, work, calls, SESSION)
            memory.flush()
        finally:
            memory.close()
    return {"build_ms": ms(rested), "build_after_update_ms": ms(builds), "update_ms": ms(updates), **timings}


# -- concurrent writers ---------------------------------------------------------------------------
def _writer(url: str, tag: str, count: int, barrier: Any, out: Any) -> None:
    from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
    from ovos_memory_plugins.lexical import LexicalMemory

    with LexicalMemory({"db_url": url, "max_history": 0}) as memory:
        barrier.wait()
        start = time.perf_counter()
        for n in range(count):
            memory.update_history([AgentMessage(MessageRole.USER, f"note zq{tag}n{n:05d}"),
                                   AgentMessage(MessageRole.ASSISTANT, "noted")], "shared")
        out.put(time.perf_counter() - start)


def writers(server: Server, processes: int, count: int) -> dict[str, Any]:
    import re
    from collections import Counter

    from ovos_memory_plugins.lexical import LexicalMemory

    url = server.fresh()
    LexicalMemory({"db_url": url}).close()  # the store exists, as in an installed system
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, f"p{i}", count, barrier, out)) for i in range(processes)]
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    seconds = [out.get(timeout=3600) for _ in procs]
    for proc in procs:
        proc.join()
    with LexicalMemory({"db_url": url, "max_history": 0}) as memory:
        exported = memory.export("shared")
    docs = Counter(m for d in exported["documents"] for m in re.findall(r"zq\w+n\d{5}", d["content"]))
    window = Counter(m for d in exported["window"] for m in re.findall(r"zq\w+n\d{5}", d["content"]))
    expected = {f"zqp{i}n{n:05d}" for i in range(processes) for n in range(count)}
    return {"processes": processes, "updates_each": count, "seconds": time.perf_counter() - start,
            "updates_per_s": processes * count / max(seconds),
            "lost": len(expected - set(docs)) + len(expected - set(window)),
            "doubled": sum(1 for c in docs.values() if c > 1) + sum(1 for c in window.values() if c > 1)}


# -- LoCoMo ---------------------------------------------------------------------------------------
def locomo(server: Server, limit: int | None) -> dict[str, Any]:
    import locomo as lc

    from ovos_memory_plugins.lexical import LexicalMemory

    hits = {"sqlite": {5: 0, 10: 0}, "postgres": {5: 0, 10: 0}}
    same_set = same_order = total = 0
    with tempfile.TemporaryDirectory(prefix="bench-locomo-") as folder:
        for i, conv in enumerate(lc.load_conversations(limit=limit)):
            sid = f"locomo-{conv.get('sample_id', i)}"
            pair = {"sqlite": LexicalMemory({"db_path": os.path.join(folder, f"{i}.db")}),
                    "postgres": LexicalMemory({"db_url": server.fresh()})}
            try:
                for memory in pair.values():
                    lc._feed(memory, conv, sid)
                for qa in lc.questions(conv, (1, 2, 3, 4)):
                    wanted = [lc._squash(e) for e in qa["evidence"]]
                    found = {engine: memory.search(qa["question"], sid, top_k=10) for engine, memory in pair.items()}
                    for engine, ranked in found.items():
                        for k in (5, 10):
                            joined = lc._squash("\n".join(h.content for h in ranked[:k]))
                            hits[engine][k] += any(w in joined for w in wanted)
                    tops = [[h.source for h in found[e][:5]] for e in ("sqlite", "postgres")]
                    same_set += set(tops[0]) == set(tops[1])
                    same_order += tops[0] == tops[1]
                    total += 1
            finally:
                for memory in pair.values():
                    memory.close()
    return {"questions": total, **{f"{engine}_r@{k}": hits[engine][k] / max(total, 1)
                                   for engine in hits for k in (5, 10)},
            "same_top5_set": same_set / max(total, 1), "same_top5_order": same_order / max(total, 1)}


# -- report ---------------------------------------------------------------------------------------
def markdown(results: dict[str, Any]) -> str:
    floor = results.get("commit_floor")
    lines = [f"Run on {results['date']}, load average {results['load_before']} before and {results['load_after']} "
             f"after, {results['calls']} alternating calls per cell. "
             + (f"One durable commit of one row on this server costs {floor['median']:.2f} ms (median; p90 "
                f"{floor['p90']:.2f}): the floor of every PostgreSQL update." if floor else ""), "",
             "| backend | stored | engine | build (ms) | build right after an update (ms) | update (ms) | note |",
             "|---|---|---|---|---|---|---|"]
    for cell in results["latency"]:
        b, a, u = cell["build_ms"], cell["build_after_update_ms"], cell["update_ms"]
        notes = [f"HNSW built in {cell['hnsw_build_s']:.0f} s" if "hnsw_build_s" in cell else "",
                 f"vacuumed in {cell['vacuum_s']:.1f} s" if "vacuum_s" in cell else ""]
        note = f"{', '.join(n for n in notes if n)} before timing" if any(notes) else ""
        lines.append(f"| {cell['backend']} | {cell['n']:,} | {cell['engine']} | {b['median']:.2f} / {b['p90']:.2f} | "
                     f"{a['median']:.2f} / {a['p90']:.2f} | {u['median']:.2f} / {u['p90']:.2f} | {note} |")
    w = results.get("writers")
    if w:
        lines += ["", f"Writers: {w['processes']} processes x {w['updates_each']:,} updates of one session on "
                  f"PostgreSQL: {w['lost']} lost, {w['doubled']} doubled, {w['updates_per_s']:.0f} updates/s "
                  f"({w['seconds']:.1f} s)."]
    lc = results.get("locomo")
    if lc:
        lines += ["", "| lexical on | LoCoMo R@5 | R@10 |", "|---|---|---|",
                  f"| SQLite (FTS5) | {lc['sqlite_r@5']:.3f} | {lc['sqlite_r@10']:.3f} |",
                  f"| PostgreSQL | {lc['postgres_r@5']:.3f} | {lc['postgres_r@10']:.3f} |",
                  "", f"{lc['questions']} questions; the same top-5 set for {100 * lc['same_top5_set']:.1f}%, "
                  f"in the same order for {100 * lc['same_top5_order']:.1f}%."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k exchanges, 60 calls, 2 LoCoMo conversations")
    parser.add_argument("--sizes", default="10000,100000", help="stored exchanges (default: %(default)s)")
    parser.add_argument("--calls", type=int, help="alternating calls per cell (default: 300; --quick: 60)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--engines", default="sqlite,postgres",
                        help="sqlite, postgres (durable commits) and postgres-async (synchronous_commit=off)")
    parser.add_argument("--url", help="a PostgreSQL to use instead of a private durable one (needs pgvector)")
    parser.add_argument("--skip-locomo", action="store_true")
    parser.add_argument("--skip-writers", action="store_true")
    parser.add_argument("--json", default=str(HERE.parent / "build" / "bench" / "postgres.json"))
    parser.add_argument("--write", action="store_true", help="also put the tables into docs/benchmarks.md")
    args = parser.parse_args(argv)
    unknown = set(args.engines.split(",")) - {"sqlite", "postgres", "postgres-async"}
    if unknown:
        parser.error(f"unknown engine(s): {', '.join(sorted(unknown))}")
    sizes = [1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    calls = args.calls or (60 if args.quick else 300)
    if not args.skip_locomo:
        import locomo as lc

        lc.locate_dataset()  # missing data fails now, not after the latency cells
    server = Server(args.url)
    results: dict[str, Any] = {"latency": [], "sizes": sizes, "calls": calls,
                               "date": time.strftime("%Y-%m-%d %H:%M %Z"), "load_before": _load()}
    progress: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    try:
        results["commit_floor"] = server.commit_floor()
        for n in sizes:
            for backend in args.backends.split(","):
                for engine in args.engines.split(","):
                    t = time.perf_counter()
                    cell = latency_cell(backend, engine, n, calls, server)
                    results["latency"].append({"backend": backend, "engine": engine, "n": n, **cell})
                    progress(f"{backend} {engine} {n:,}: build {cell['build_ms']['median']:.2f} ms, update "
                             f"{cell['update_ms']['median']:.2f} ms ({time.perf_counter() - t:.0f} s)")
        if not args.skip_writers:
            results["writers"] = writers(server, 4, 100 if args.quick else 1000)
            progress(f"writers: {results['writers']}")
        if not args.skip_locomo:
            results["locomo"] = locomo(server, 2 if args.quick else None)
            progress(f"locomo: {results['locomo']}")
    finally:
        server.stop()
        results["load_after"] = _load()
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))  # what was measured, even after a failure
    print(markdown(results))
    if args.write:
        write_section(markdown(results), " ".join(["python benchmarks/bench_postgres.py", *(argv or sys.argv[1:])]))
    return 0


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


SECTION = "<!-- section:start postgres"


def write_section(tables: str, command: str) -> None:
    """Put the tables into docs/benchmarks.md as its PostgreSQL section (replacing the last one)."""
    path = HERE.parent / "docs" / "benchmarks.md"
    block = "\n".join([f"{SECTION} (generated by `{command}`; do not edit) -->", "## PostgreSQL", "", INTRO, "",
                       tables, "", "Rerun: `make bench-postgres` (`python benchmarks/bench_postgres.py --write`).",
                       "<!-- section:end -->"])
    _report.replace_section(path, SECTION, block)


INTRO = """The same backends on SQLite (the default) and on PostgreSQL (`db_url`: a local PostgreSQL 16
with pgvector 0.6, durable as in production, over its Unix socket), side by side in one run of
`benchmarks/bench_postgres.py`. Each cell stores N exchanges in one session (the worst case:
with many users, each session's share is what a query scans), then alternates
`build_conversation_context` and `update_history`. Embedding is excluded (a stand-in embedder
returns fixed vectors drawn as sentence embeddings spread: around 2,000 topics of a
32-dimensional space), so local-rag's build is the store's work. Times are median / p90 in ms.
*build* is a turn whose previous exchange is already indexed (turns seconds apart, as with a
voice assistant); *build right after an update* comes at once after `update_history`, while
the background indexer stores that exchange's vector (on PostgreSQL, an insert into the HNSW
index, and with the hybrid preset's neighbour mixing, the previous exchange's vector rewritten
too): the turn does not wait for it (the new exchange is found by its words), but shares the
machine with it. The N exchanges are bulk-loaded, so before timing a PostgreSQL store is
vacuumed and analysed (`VACUUM (ANALYZE)`, in the note): autovacuum has done that many times to
a store that grew to N exchanges over months, while a bulk load a second old has the planner
statistics of empty tables (lexical at 100,000 measured 5.4 ms per build and 4.1 per update
without it, 3.4 and 2.2 after `ANALYZE` alone). A lexical update on PostgreSQL is four round
trips to the server (statements whose answer nobody reads go with the next one) and one
durable commit, which waits for the WAL flush (the commit floor below;
`synchronous_commit=off`, docs/deployment.md, removes that wait at the price of the last
acknowledged updates on a server crash); local-rag searches larger scopes through an HNSW
index, built before timing. The writers line is 4 processes, each with its own connection,
updating one session of a lexical memory at once. LoCoMo: the dev split, categories 1-4,
recall@k of lexical on each engine (docs/deployment.md explains the ranking differences)."""


if __name__ == "__main__":
    sys.exit(main())
