"""RedisMemory latency with 10k exchanges per key against a local redis-server.

Workload: the side-by-side report's (docs/benchmarks.md): 8-word user + 15-word assistant turns
from 3,000 synthetic tokens and 16 common words. Store N exchanges in one session, then alternate
build_conversation_context (6-word query) and update_history (one new exchange). Compaction is
not counted: after each timed update the script waits for background compaction (``flush()``)
outside the timer.

Configurations:

* ``redis default``: compaction at 4,000 tokens (extractive summaries, no LLM): the key has seen
  N exchanges; the list holds the last ~2-4k tokens, the rest is in the summary;
* ``redis no compaction, max_history 20``: all N exchanges stay in the list (2N items): shows
  that an append is O(1) whatever the list length, and a bounded context read;
* ``redis no compaction, whole list`` (full run only): the context is the whole 2N-item list,
  the unbounded case, for honesty (no target; its updates are slowed by the 20k-message builds
  that precede them).

Baselines measured in the same run: ``redis PING`` (one round trip, the floor of any call),
``redis RPUSH`` (one raw append of a 200-byte item), and ``RecencyMemory`` on SQLite
(``db_path``, max_history 10).

Usage: python benchmarks/bench_redis.py [--quick] [--exchanges 10000] [--calls 300]
Uses $OVOS_MEMORY_REDIS_URL if set, else starts /usr/bin/redis-server on a free port.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _worker import Workload, _messages, alternate_turns  # noqa: E402

from ovos_memory_plugins.recency import RecencyMemory  # noqa: E402
from ovos_memory_plugins.redis_memory import RedisMemory  # noqa: E402

TARGETS = {"update": 1000.0, "build": 2000.0}  # µs, median


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def start_server(folder: str) -> tuple[str, subprocess.Popen | None]:
    url = os.environ.get("OVOS_MEMORY_REDIS_URL")
    if url:
        return url, None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return f"redis://127.0.0.1:{port}/0", proc
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def run_turns(memory: Any, n: int, calls: int, after_update: Callable[[], Any] = lambda: None) -> dict[str, Any]:
    work = Workload(seed=1)
    started = time.perf_counter()
    for _ in range(n):
        memory.update_history(_messages(*work.exchange()), "bench")
    after_update()
    fill = time.perf_counter() - started
    # compaction (after_update) is not counted
    build, update, _ = alternate_turns(memory, work, calls, "bench", after_update=after_update)
    return {"build": percentiles([s * 1e6 for s in build]), "update": percentiles([s * 1e6 for s in update]),
            "fill_s": fill,
            "context": len(memory.build_conversation_context("x", "bench"))}


def measure_redis(url: str, n: int, calls: int, **overrides: Any) -> dict[str, Any]:
    config = {"url": url, "prefix": f"bench:{uuid.uuid4().hex[:8]}", "api_url": None, **overrides}
    memory = RedisMemory(config)
    try:
        result = run_turns(memory, n, calls, after_update=memory.flush)
        summary, exchanges = memory.load("bench")
        result["list"] = len(exchanges)
        result["summary_chars"] = len(summary)
        memory.forget("bench")
    finally:
        memory.close()
    return result


def measure_recency(folder: str, n: int, calls: int) -> dict[str, Any]:
    memory = RecencyMemory({"db_path": os.path.join(folder, "recency.db"), "max_history": 10})
    try:
        return run_turns(memory, n, calls)
    finally:
        memory.close()


def measure_raw(url: str, calls: int) -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(url)
    key = f"bench:raw:{uuid.uuid4().hex[:8]}"
    payload = "x" * 200
    ping, push = [], []
    try:
        for _ in range(calls):
            t = time.perf_counter()
            client.ping()
            ping.append((time.perf_counter() - t) * 1e6)
            t = time.perf_counter()
            client.rpush(key, payload)
            push.append((time.perf_counter() - t) * 1e6)
        client.delete(key)
    finally:
        client.close()
    return {"ping": percentiles(ping), "rpush": percentiles(push)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 exchanges and 100 calls")
    parser.add_argument("--exchanges", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None)
    args = parser.parse_args(argv)
    n = args.exchanges or (1000 if args.quick else 10_000)
    calls = args.calls or (100 if args.quick else 300)
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as folder:
        url, proc = start_server(folder)
        try:
            raw = measure_raw(url, calls)
            rows = [
                ("redis default (compaction at 4000 tokens)", measure_redis(url, n, calls)),
                ("redis no compaction, max_history 20",
                 measure_redis(url, n, calls, compact_token_threshold=0, max_history=20)),
            ]
            if not args.quick:
                rows.append(("redis no compaction, whole list",
                             measure_redis(url, n, calls, compact_token_threshold=0)))
            recency = measure_recency(folder, n, calls)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()
    ping, push = raw["ping"][0], raw["rpush"][0]
    print(f"RedisMemory, {n:,} exchanges per key, {calls} alternating calls; µs median / p90 "
          f"(targets: update <= {TARGETS['update']:.0f}, build <= {TARGETS['build']:.0f})")
    print(f"baseline redis PING      {raw['ping'][0]:8.1f} / {raw['ping'][1]:8.1f}")
    print(f"baseline redis RPUSH     {raw['rpush'][0]:8.1f} / {raw['rpush'][1]:8.1f}")
    print(f"baseline recency SQLite  build {recency['build'][0]:8.1f} / {recency['build'][1]:8.1f}   "
          f"update {recency['update'][0]:8.1f} / {recency['update'][1]:8.1f}")
    print()
    header = f"{'configuration':44} {'build med/p90':>19} {'update med/p90':>19} {'upd/PING':>9} " \
             f"{'upd/RPUSH':>9} {'upd/recency':>11} {'build/recency':>13} {'list':>6} {'ctx':>5} {'fill s':>7} ok"
    print(header)
    failed = False
    for name, r in rows:
        (bm, bp), (um, up) = r["build"], r["update"]
        unbounded = "whole list" in name  # the pathological configuration: reported, no target
        within = um <= TARGETS["update"] and bm <= TARGETS["build"]
        failed |= not (within or unbounded)
        verdict = "n/a" if unbounded else ("yes" if within else "NO")
        print(f"{name:44} {bm:8.1f} / {bp:8.1f} {um:8.1f} / {up:8.1f} {um / ping:8.2f}x {um / push:8.2f}x "
              f"{um / recency['update'][0]:10.2f}x {bm / recency['build'][0]:12.2f}x {r['list']:6d} "
              f"{r['context']:5d} {r['fill_s']:7.1f} {verdict}")
    print("\n(list: exchanges in the short-term list at the end; ctx: messages in the context; "
          "the whole-list row is the unbounded case and has no target)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
