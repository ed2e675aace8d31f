"""How long ``update_history`` takes in longterm and entity while the LLM is slow or down.

Target: median <= 5 ms while the endpoint takes 2 s per call, and when it is down.
The reference does the LLM work inside ``update_history``, so its turn costs the full call;
the same synchronous call is measured here as the comparison, and RecencyMemory on the same
store as the storage-only baseline (what persisting a turn costs with no LLM at all).

Usage: ``python benchmarks/bench_longterm_entity.py [--quick] [--turns N]``
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole  # noqa: E402

from ovos_memory_plugins._llm.client import ChatClient  # noqa: E402
from ovos_memory_plugins._llm.summaries.text import llm_summary  # noqa: E402
from ovos_memory_plugins.entity import EntityMemory  # noqa: E402
from ovos_memory_plugins.longterm import LongTermMemory  # noqa: E402
from ovos_memory_plugins.recency import RecencyMemory  # noqa: E402
from ovos_memory_plugins.testing.llm import FakeLLMServer, closed_port_url  # noqa: E402

U, A = MessageRole.USER, MessageRole.ASSISTANT
SLOW_S = 2.0
TARGET_MS = 5.0
#: (label, backend, folder): JSON on disk pays two fsyncs per turn (file and folder); on tmpfs
#: it shows the cost without them; SQLite in WAL mode commits without an fsync per turn.
STORES = (("json", "json", None), ("json-shm", "json", "/dev/shm"), ("sqlite", "sqlite", None))


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def turns(memory: Any, n: int, sid: str = "bench") -> list[float]:
    out = []
    for i in range(n):
        msgs = [AgentMessage(U, f"My name is Ana and I like topic number {i}, tell me more about it."),
                AgentMessage(A, f"Topic {i} is interesting for many reasons that I will now explain briefly.")]
        t = time.perf_counter()
        memory.update_history(msgs, sid)
        out.append((time.perf_counter() - t) * 1000)
    return out


def build_ms(memory: Any, n: int = 50, sid: str = "bench") -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        memory.build_conversation_context("what do you remember about me?", sid)
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def make(kind: str, backend: str, folder: str, api_url: str) -> Any:
    ext = "json" if backend == "json" else "db"
    if kind == "recency":
        return RecencyMemory({"db_path": f"{folder}/recency.{ext}", "max_history": 8})
    if kind == "longterm":
        return LongTermMemory({"db_path": f"{folder}/lt.{ext}", "backend": backend, "api_url": api_url,
                               "summarize_every": 2, "recent_window": 2, "request_timeout": 30})
    return EntityMemory({"db_path": f"{folder}/entity.{ext}", "backend": backend, "api_url": api_url,
                         "request_timeout": 30})


def run(n: int) -> list[dict[str, Any]]:
    rows = []
    with FakeLLMServer(reply='["User\'s name is Ana"]', model="bench-model") as llm:
        for store, backend, where in STORES:
            if where is not None and not os.path.isdir(where):
                continue
            for kind in ("recency", "longterm", "entity"):
                conditions = ["none"] if kind == "recency" else ["fast", "slow", "down"]
                for condition in conditions:
                    llm.mode, llm.delay = ("slow", SLOW_S) if condition == "slow" else ("ok", 0.0)
                    llm.reset_log()
                    url = closed_port_url() if condition == "down" else llm.url
                    with tempfile.TemporaryDirectory(dir=where) as folder:
                        memory = make(kind, backend, folder, url)
                        samples = turns(memory, n)
                        build = build_ms(memory)
                        requests = llm.count() if condition != "down" else memory.client.attempts
                        llm.mode = "ok"  # drain quickly: the turn latency is what is measured
                        memory.flush(120)
                        memory.close()
                    median, p90 = stats(samples)
                    rows.append({"kind": kind, "backend": store, "llm": condition, "median": median, "p90": p90,
                                 "build": build, "requests": requests})
        # What the reference's turn costs: the summary call made inside update_history.
        llm.mode, llm.delay = "slow", SLOW_S
        t = time.perf_counter()
        llm_summary(ChatClient(llm.url, model="m", timeout=30), "", [{"role": "user", "content": "hi"}], 64)
        sync_ms = (time.perf_counter() - t) * 1000
    rows.append({"kind": "synchronous LLM call", "backend": "-", "llm": "slow", "median": sync_ms, "p90": sync_ms,
                 "build": float("nan"), "requests": 1})
    return rows


def report(rows: list[dict[str, Any]], n: int) -> None:
    base = {r["backend"]: r["median"] for r in rows if r["kind"] == "recency"}
    sync = next(r["median"] for r in rows if r["kind"] == "synchronous LLM call")
    print(f"update_history over {n} turns (ms); endpoint slow = {SLOW_S:g} s per call; "
          f"target median <= {TARGET_MS:g} ms")
    print(f"{'backend':10} {'store':8} {'llm':6} {'median':>8} {'p90':>8} {'build':>7} {'x recency':>10} "
          f"{'x sync call':>12} {'reqs@turns':>10}  target")
    for r in rows:
        ratio_base = r["median"] / base[r["backend"]] if r["backend"] in base else float("nan")
        ok = "" if r["kind"] in ("recency", "synchronous LLM call") else ("ok" if r["median"] <= TARGET_MS else "MISS")
        print(f"{r['kind'][:10]:10} {r['backend']:8} {r['llm']:6} {r['median']:8.2f} {r['p90']:8.2f} "
              f"{r['build']:7.2f} {ratio_base:10.2f} {r['median'] / sync:12.5f} {r['requests']:10d}  {ok}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 turns per cell instead of 100")
    parser.add_argument("--turns", type=int, default=None)
    args = parser.parse_args()
    n = args.turns or (20 if args.quick else 100)
    report(run(n), n)


if __name__ == "__main__":
    main()
