"""LexicalMemory latency at 1k, 10k and 100k stored exchanges on a file DB.

Workload: the side-by-side report's (docs/benchmarks.md): 8-word user + 15-word assistant turns
from 3,000 synthetic tokens and 16 common words; then alternating build_conversation_context
(6-word query) and update_history.
Baselines measured in the same run on the same machine:

* ``raw insert``: one plain FTS5 INSERT + COMMIT per exchange through sqlite3 (WAL, NORMAL), the
  least a durable keyword store can do per update;
* ``raw match``: the same OR-of-terms FTS5 MATCH (stop words removed, session filter) + bm25
  ORDER BY on that raw table, the least a keyword recall can do per turn.

Our update commits the window and the document log; the FTS5 entries are written by a
background thread in batches (the raw insert baseline writes FTS5 in the call). The last column
is that thread's time spent per timed exchange, so nothing is hidden.

With ``--neighbours`` it measures neighbour context instead (``retrieval.neighbour_weight: 0.5``,
as in the hybrid preset): the turn ranked from the RAM postings (the default) against the same
store ranked by FTS5 (``ram_index: false``), both in the same run.

Usage: python benchmarks/bench_lexical.py [--quick] [--sizes 1000,10000,100000] [--neighbours]
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _worker import Workload, _messages, alternate_turns  # noqa: E402

from ovos_memory_plugins._index.stopwords import LANGUAGES, stopwords  # noqa: E402
from ovos_memory_plugins.lexical import LexicalMemory, match_expression  # noqa: E402


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def measure_ours(folder: str, n: int, calls: int, **config: object) -> dict[str, tuple[float, float]]:
    work = Workload(seed=1)
    memory = LexicalMemory({"db_path": os.path.join(folder, "lex.db"), **config})
    for _ in range(n):
        memory.update_history(_messages(*work.exchange()), "bench")
    memory.flush()  # background work done (the RAM postings loaded), as between a persona's turns
    indexing = [0.0]  # seconds the background indexer spent on the timed turns' exchanges
    step = memory._index_step

    def timed_step(*args: object, **kwargs: object) -> bool:
        t = time.perf_counter()
        try:
            return step(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            indexing[0] += time.perf_counter() - t

    memory._index_step = timed_step  # type: ignore[method-assign]  # a query's catch-up
    memory._worker._step = timed_step  # type: ignore[union-attr]  # the background thread
    build, update, _ = alternate_turns(memory, work, calls, "bench")
    memory.flush()
    memory.close()
    per_exchange = indexing[0] / max(1, len(update)) * 1e6
    return {"build": percentiles([s * 1e6 for s in build]), "update": percentiles([s * 1e6 for s in update]),
            "indexing": (per_exchange, per_exchange)}


def measure_raw(folder: str, n: int, calls: int) -> dict[str, tuple[float, float]]:
    work = Workload(seed=1)
    con = sqlite3.connect(os.path.join(folder, "raw.db"), isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA synchronous = NORMAL")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(content, session_id UNINDEXED)")

    def insert(user: str, assistant: str) -> None:
        con.execute("BEGIN")
        con.execute("INSERT INTO t (content, session_id) VALUES (?, ?)", (f"Q: {user}\nA: {assistant}", "bench"))
        con.execute("COMMIT")

    for _ in range(n):
        insert(*work.exchange())
    match, add = [], []
    for i in range(calls):
        if i % 2 == 0:
            expression = match_expression(work.query(), stopwords(LANGUAGES))
            t = time.perf_counter()
            con.execute("SELECT rowid, content, bm25(t) AS r FROM t WHERE t MATCH ? AND session_id = ? "
                        "ORDER BY r LIMIT 5", (expression, "bench")).fetchall()
            match.append((time.perf_counter() - t) * 1e6)
        else:
            user, assistant = work.exchange()
            t = time.perf_counter()
            insert(user, assistant)
            add.append((time.perf_counter() - t) * 1e6)
    con.close()
    return {"build": percentiles(match), "update": percentiles(add)}


def neighbours(sizes: list[int], calls: int) -> None:
    print(f"# LexicalMemory with neighbour context (0.5) on a file DB; {calls} alternating calls; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| N | build, RAM copy med / p90 µs | build, FTS5 med / p90 µs | ratio | update, RAM copy med / p90 µs |")
    print("|---|---|---|---|---|")
    for n in sizes:
        with tempfile.TemporaryDirectory() as folder:
            ram = measure_ours(folder, n, calls, retrieval={"neighbour_weight": 0.5})
        with tempfile.TemporaryDirectory() as folder:
            fts = measure_ours(folder, n, calls, retrieval={"neighbour_weight": 0.5}, ram_index=False)
        b, f, u = ram["build"], fts["build"], ram["update"]
        print(f"| {n:,} | {b[0]:.0f} / {b[1]:.0f} | {f[0]:.0f} / {f[1]:.0f} | {b[0] / f[0]:.2f}x "
              f"| {u[0]:.0f} / {u[1]:.0f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k only, 100 calls")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--neighbours", action="store_true", help="neighbour context: RAM copy against FTS5")
    args = parser.parse_args()
    sizes = [1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    calls = 100 if args.quick else args.calls
    if args.neighbours:
        neighbours(sizes, calls)
        return
    print(f"# LexicalMemory on a file DB; {calls} alternating calls; load average {os.getloadavg()[0]:.2f}")
    print("| N | build med / p90 µs | raw match med / p90 | ratio "
          "| update med / p90 µs | raw insert med / p90 | ratio | background indexing µs/exchange |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        with tempfile.TemporaryDirectory() as folder:
            ours = measure_ours(folder, n, calls)
            raw = measure_raw(folder, n, calls)
        b, rb, u, ru = ours["build"], raw["build"], ours["update"], raw["update"]
        print(f"| {n:,} | {b[0]:.0f} / {b[1]:.0f} | {rb[0]:.0f} / {rb[1]:.0f} | {b[0] / rb[0]:.1f}x "
              f"| {u[0]:.0f} / {u[1]:.0f} | {ru[0]:.0f} / {ru[1]:.0f} | {u[0] / ru[0]:.1f}x "
              f"| {ours['indexing'][0]:.0f} |", flush=True)


if __name__ == "__main__":
    main()
