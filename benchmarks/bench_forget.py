"""What leaving no byte behind costs: ``forget()`` and the integrity check at open, by store size.

A keyword store (``lexical``) is filled with ``--n`` exchanges over seven sessions (imported in
batches, then indexed), then timed: opening its file (``PRAGMA quick_check`` included), the check
alone, and ``forget()`` of one session (rows deleted, keyword index rewritten, then the file
rewritten by ``VACUUM`` and the WAL emptied), with the rewrite's share. Numbers depend on the
disk and the page cache (a warm cache here); rerun on the target device.

Usage: python benchmarks/bench_forget.py [--n 100000]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import time

WORDS = ["morning", "coffee", "sister", "work", "walk", "river", "dinner", "neighbours", "coast", "spring", "garden",
         "piano", "lesson", "doctor", "birthday", "cake", "holiday", "mountains", "train", "ticket", "museum", "friday",
         "weekend", "recipe", "soup", "bread", "cheese", "tomato", "basil", "market", "bicycle", "jacket", "rain"]


def build(path: str, n: int) -> None:
    from ovos_memory_plugins.lexical import LexicalMemory

    rnd = random.Random(1)
    memory = LexicalMemory({"db_path": path, "max_history": 20})
    batch: dict[str, list] = {}
    for i in range(n):
        question = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 16)))
        answer = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(6, 30)))
        batch.setdefault(f"s{i % 7}", []).append({"content": f"Q: {question}\nA: {answer}",
                                                 "metadata": {"question": question, "answer": answer}})
        if i % 5000 == 4999 or i == n - 1:
            for sid, docs in batch.items():
                memory.import_session({"session_id": sid, "documents": docs})
            batch = {}
    memory.flush()
    memory.close()


def timed_forget(path: str) -> tuple[float, float]:
    """``(forget() in all, of which the rewrite)``, in seconds."""
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.storage.sqlite import Database

    original = Database.compact
    spent = [0.0]

    def compact(self: Database) -> bool:
        start = time.perf_counter()
        try:
            return original(self)
        finally:
            spent[0] += time.perf_counter() - start

    Database.compact = compact  # type: ignore[method-assign]
    try:
        memory = LexicalMemory({"db_path": path, "max_history": 20})
        memory._mirror.wait(600) if memory._mirror is not None else None  # a running assistant has it loaded
        start = time.perf_counter()
        memory.forget("s3")
        took = time.perf_counter() - start
        memory.close()
    finally:
        Database.compact = original  # type: ignore[method-assign]
    return took, spent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="exchanges in the store")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-forget-") as root:
        os.environ["XDG_DATA_HOME"] = os.path.join(root, "xdg")
        source = os.path.join(root, "lexical.db")
        build(source, args.n)
        con = sqlite3.connect(source)
        start = time.perf_counter()
        con.execute("PRAGMA quick_check(1)").fetchall()
        check = time.perf_counter() - start
        con.close()
        from ovos_memory_plugins.storage.sqlite import Database

        start = time.perf_counter()
        Database(source).close()  # what opening adds: the connection and the check
        opened = time.perf_counter() - start
        took, rewrite = timed_forget(source)
        results = {"exchanges": args.n, "file MB": round(os.path.getsize(source) / 1e6, 1),
                   "quick_check s": round(check, 3), "open (connection + check) s": round(opened, 3),
                   "forget of one session (1/7 of the store) s": round(took, 3),
                   "of which the rewrite (VACUUM + WAL emptied) s": round(rewrite, 3)}
        json.dump(results, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
