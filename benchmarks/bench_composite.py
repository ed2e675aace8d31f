"""The hybrid preset's turn cost against the sum of its members' turns.

The composite (``preset: "hybrid"``: recency + lexical + local-rag, both with neighbour context,
+ entity) and each of its four members alone, every one in its own folder, get the same ``--n``
exchanges. Then, in turns, each memory gets a ``build_conversation_context`` (6-word query) and an
``update_history``; the five are interleaved call by call so machine noise hits them alike.
Background work (embedding, fact extraction) is flushed after each update, untimed, as between
a persona's turns. Target: composite median <= sum of the members' medians + 1 ms.

Usage: python benchmarks/bench_composite.py [--n 300] [--calls 100]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _worker import Workload, _messages  # noqa: E402


def build_memories(root: str) -> dict[str, Any]:
    from ovos_memory_plugins._core.loading import load_memory_class
    from ovos_memory_plugins.composite import HYBRID_PRESET, CompositeMemory

    os.environ["XDG_DATA_HOME"] = os.path.join(root, "xdg")  # where the preset's relative paths land
    memories: dict[str, Any] = {"composite (hybrid preset)": CompositeMemory({"preset": "hybrid"})}
    for spec in HYBRID_PRESET:
        config = dict(spec["config"])
        config["db_path"] = os.path.join(root, "alone-" + config["db_path"])
        memories[spec["module"].replace("ovos-memory-plugin-", "")] = load_memory_class(spec["module"])(config)
    return memories


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="exchanges stored before timing")
    parser.add_argument("--calls", type=int, default=100, help="timed turns per memory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-composite-") as root:
        memories = build_memories(root)
        work = Workload(seed=3)
        for _ in range(args.n):
            exchange = _messages(*work.exchange())
            for memory in memories.values():
                memory.update_history(exchange, "bench")
        for memory in memories.values():
            memory.flush()
        build: dict[str, list[float]] = {name: [] for name in memories}
        update: dict[str, list[float]] = {name: [] for name in memories}
        for _ in range(args.calls):
            query, exchange = work.query(), _messages(*work.exchange())
            for name, memory in memories.items():
                t = time.perf_counter()
                memory.build_conversation_context(query, "bench")
                build[name].append(time.perf_counter() - t)
                t = time.perf_counter()
                memory.update_history(exchange, "bench")
                update[name].append(time.perf_counter() - t)
                memory.flush()
        for memory in memories.values():
            memory.close()
    report(build, update, args)


def report(build: dict[str, list[float]], update: dict[str, list[float]], args: argparse.Namespace) -> None:
    def ms(samples: list[float]) -> float:
        return statistics.median(samples) * 1e3

    names = list(build)
    composite, members = names[0], names[1:]
    print(f"# Hybrid preset turn cost; {args.n} exchanges stored, {args.calls} turns each; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| memory | build median ms | update median ms | turn (sum) ms |")
    print("|---|---|---|---|")
    for name in names:
        print(f"| {name} | {ms(build[name]):.2f} | {ms(update[name]):.2f} | {ms(build[name]) + ms(update[name]):.2f} |")
    b = sum(ms(build[n]) for n in members)
    u = sum(ms(update[n]) for n in members)
    print(f"| sum of the members | {b:.2f} | {u:.2f} | {b + u:.2f} |")
    turn = ms(build[composite]) + ms(update[composite])
    print(f"\ncomposite turn {turn:.2f} ms vs members' sum {b + u:.2f} ms: "
          f"{turn - (b + u):+.2f} ms (target: at most +1 ms)")


if __name__ == "__main__":
    main()
