"""One benchmark measurement in a fresh process, printed as one JSON line on stdout.

``benchmarks/run.py`` starts this script with the Python of *either* virtual environment (ours,
or the reference package's under ``.bench-cache/``), so the same workload code drives both
packages. It reaches a plugin only through its ``opm.agents.memory`` entry point
(``ovos_plugin_manager.agents.load_memory_plugin``) and needs nothing but the standard library
and ovos-plugin-manager: the plugin is a black box.

Usage: ``python _worker.py '<json task>'``. Tasks:

- ``{"task": "latency", "entry_point", "config", "n", "calls", "seed", "budget_s"}``: store ``n``
  exchanges with ``update_history``, then alternate ``build_conversation_context`` (a 6-word
  query) and ``update_history`` (one exchange), ``calls`` calls in all; per-call µs.
- ``{"task": "startup", "entry_point", "config"}``: cost of the first load, construction, update
  and build in a cold process.
- ``{"task": "locomo", "entry_point", "config", "locomo_path", "limit", "ks"}``: recall through
  ``benchmarks/locomo.py``.

Config values may hold ``{dir}``, replaced by a fresh folder for each memory.
"""
from __future__ import annotations

import time

_PROCESS_START = time.perf_counter()

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

# 16 common English words mixed into the synthetic vocabulary (the workload of docs/benchmarks.md): they make keyword
# queries match many stored rows, as real conversation does.
COMMON_WORDS = ("the", "and", "is", "to", "of", "a", "in", "it", "you", "that", "i", "my", "was", "for",
                "on", "what")
SYNTHETIC_TOKENS = 3000
COMMON_SHARE = 0.25  # share of words drawn from COMMON_WORDS; the rest uniformly from the tokens
SESSION = "bench"


class Workload:
    """Deterministic synthetic turns: the same seed gives the same text in every process."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab: set[str] = set()
        while len(vocab) < SYNTHETIC_TOKENS:
            vocab.add("".join(self.rng.choice(letters) for _ in range(self.rng.randint(4, 9))))
        self.tokens = sorted(vocab)

    def words(self, count: int) -> str:
        rng = self.rng
        return " ".join(rng.choice(COMMON_WORDS) if rng.random() < COMMON_SHARE else rng.choice(self.tokens)
                        for _ in range(count))

    def exchange(self) -> tuple[str, str]:
        return self.words(8), self.words(15)

    def query(self) -> str:
        return self.words(6)


def _messages(user: str, assistant: str) -> list[Any]:
    from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

    return [AgentMessage(MessageRole.USER, user), AgentMessage(MessageRole.ASSISTANT, assistant)]


def _fill(value: Any, folder: str) -> Any:
    if isinstance(value, str):
        return value.replace("{dir}", folder)
    if isinstance(value, list):
        return [_fill(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, folder) for k, v in value.items()}
    return value


def _load(entry_point: str) -> type:
    from ovos_plugin_manager.agents import load_memory_plugin

    cls = load_memory_plugin(entry_point)
    if cls is None:
        raise LookupError(f"{entry_point} is not installed or failed to import")
    return cls


def _stats(seconds: list[float]) -> dict[str, float]:
    us = sorted(s * 1e6 for s in seconds)
    if not us:
        return {"median": float("nan"), "p90": float("nan"), "n": 0}
    return {"median": statistics.median(us), "p90": us[min(len(us) - 1, round(0.9 * (len(us) - 1)))],
            "n": len(us)}


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    Linux keeps ``ru_maxrss`` across ``execve``, so a worker forked from a big runner would
    report the runner's peak: read the high-water mark of this process's own address space.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _flush(memory: Any, timeout: float | None = None) -> tuple[float, bool]:
    """Wait for background work; returns (seconds, finished)."""
    start = time.perf_counter()
    done = True
    if callable(getattr(memory, "flush", None)):
        done = memory.flush() if timeout is None else memory.flush(timeout)
    return time.perf_counter() - start, done is not False


def _close(memory: Any) -> None:
    if callable(getattr(memory, "close", None)):
        memory.close()


def alternate_turns(memory: Any, work: Workload, calls: int, session: str = SESSION,
                    after_update: Any = None) -> tuple[list[float], list[float], list[int]]:
    """``calls`` alternating build_conversation_context / update_history calls.

    Returns the build and update durations in seconds and the built contexts' sizes in
    characters. ``after_update`` runs after each timed update, untimed (e.g. a flush).
    """
    builds, updates, sizes = [], [], []
    for i in range(calls):
        if i % 2 == 0:
            query = work.query()
            t = time.perf_counter()
            context = memory.build_conversation_context(query, session)
            builds.append(time.perf_counter() - t)
            sizes.append(sum(len(m.content or "") for m in context))
        else:
            new = _messages(*work.exchange())
            t = time.perf_counter()
            memory.update_history(new, session)
            updates.append(time.perf_counter() - t)
            if after_update is not None:
                after_update()
    return builds, updates, sizes


def run_latency(task: dict[str, Any], folder: str) -> dict[str, Any]:
    cls = _load(task["entry_point"])
    memory = cls(_fill(task["config"], folder))
    work = Workload(task.get("seed", 0))
    budget = float(task.get("budget_s", 1e9))
    n, calls = int(task["n"]), int(task["calls"])
    try:
        start = time.perf_counter()
        stored = 0
        while stored < n:
            memory.update_history(_messages(*work.exchange()), SESSION)
            stored += 1
            # A store that cannot reach n in the budget is measured where it got to (reported).
            if stored % 10 == 0 and time.perf_counter() - start > budget:
                break
        populate_s = time.perf_counter() - start
        flush_timeout = task.get("flush_timeout_s")
        settle_s, settled = _flush(memory, flush_timeout)
        builds, updates, sizes = alternate_turns(memory, work, calls)
        drain_s, drained = _flush(memory, flush_timeout)
    finally:
        _close(memory)
    return {"stored": stored, "populate_s": populate_s, "populate_us_per_exchange": populate_s / max(stored, 1) * 1e6,
            "settle_s": settle_s, "settled": settled, "drain_s": drain_s, "drained": drained,
            "build_us": _stats(builds), "update_us": _stats(updates),
            "context_chars_median": statistics.median(sizes) if sizes else 0, "peak_rss_mb": _peak_rss_mb()}


def run_startup(task: dict[str, Any], folder: str) -> dict[str, Any]:
    # The host's own import is timed apart: the two venvs may hold different OPM releases.
    th = time.perf_counter()
    import ovos_plugin_manager.agents  # noqa: F401
    t0 = time.perf_counter()
    cls = _load(task["entry_point"])
    t1 = time.perf_counter()
    memory = cls(_fill(task["config"], folder))
    t2 = time.perf_counter()
    work = Workload(task.get("seed", 0))
    new = _messages(*work.exchange())
    query = work.query()
    t3 = time.perf_counter()
    memory.update_history(new, SESSION)
    t4 = time.perf_counter()
    memory.build_conversation_context(query, SESSION)
    t5 = time.perf_counter()
    _close(memory)
    return {"interpreter_to_main_s": th - _PROCESS_START, "opm_import_s": t0 - th, "load_s": t1 - t0,
            "construct_s": t2 - t1, "first_update_s": t4 - t3, "first_build_s": t5 - t4, "peak_rss_mb": _peak_rss_mb()}


def run_locomo(task: dict[str, Any], folder: str) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("locomo", os.path.join(os.path.dirname(__file__), "locomo.py"))
    locomo = importlib.util.module_from_spec(spec)
    sys.modules["locomo"] = locomo
    spec.loader.exec_module(locomo)
    cls = _load(task["entry_point"])

    overrides = task.get("overrides") or {}  # per conversation (leave-one-out weights)

    def factory(hint: str) -> Any:
        sub = os.path.join(folder, hint)
        os.makedirs(sub, exist_ok=True)
        return cls({**_fill(task["config"], sub), **overrides.get(hint.removeprefix("locomo-"), {})})

    report = locomo.evaluate(factory, ks=tuple(task.get("ks", (5, 10))), limit_conversations=task.get("limit"),
                             path=task.get("locomo_path"), context=task.get("context"),
                             dated=bool(task.get("dated")))
    report["peak_rss_mb"] = _peak_rss_mb()
    return report


TASKS = {"latency": run_latency, "startup": run_startup, "locomo": run_locomo}


def main(argv: list[str]) -> int:
    task = json.loads(argv[1])
    root = task.get("workdir") or None
    with tempfile.TemporaryDirectory(prefix="bench-", dir=root) as folder:
        # Default paths ($XDG_DATA_HOME/ovos/...) land in the throwaway folder, never in the
        # user's real memory, however the worker was started.
        os.environ["XDG_DATA_HOME"] = os.path.join(folder, "xdg")
        try:
            result = {"ok": True, **TASKS[task["task"]](task, folder)}
        except Exception as exc:  # reported to the runner, which records the cell as failed
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["python"] = sys.version.split()[0]
    print("\n@@RESULT@@" + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
