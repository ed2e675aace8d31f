"""Turn latency while the background is busy: local-rag and the hybrid preset, with a real e5.

A voice turn must answer in well under a second, also right after the user heard long replies
that the memory now embeds, indexes and reads for facts in the background. Measured here:

* **one process**: a fresh memory (``local-rag`` at its defaults, or ``CompositeMemory`` with
  ``preset: hybrid``), warmed with 6 short exchanges; ``--idle`` idle turns; then for each case
  of N long replies (1, 8, 16): ``--rounds`` rounds of N exchanges whose reply has 4,800 words
  (LoCoMo dev sentences, shuffled: real conversational English, about 6,700 e5 tokens) stored
  back to back, then ``--turns`` turns ``--gap`` seconds apart. A turn is
  ``build_conversation_context`` (timed) then ``update_history`` of a short exchange (timed);
  it is *busy* when local-rag still had exchanges to embed when it started. ``flush()`` ends
  each case, so the next one starts idle.
* **several processes** (``--procs 4 --threads 4``): P processes x T threads on one store (the
  same files), each thread its own session, alternating one long exchange with
  ``--multi-turns`` turns, for ``--rounds`` rounds; then the same with 20-word replies, which
  leave almost nothing to embed: what that many concurrent turns cost on the machine anyway.

Each run ends with ``flush()`` and checks that nothing is lost: every stored long exchange is
stored and embedded and none is left pending; it also counts how many a search with the reply's
opening 40 words finds in the top 5 (a long reply's vector is the mean of its windows, so its
opening words weigh 1/17 of it).
Reported: median, p99 and max of the busy turns (ms), the idle turns, ``update_history`` on
busy turns, ``flush()`` time, and per process how many exchanges it embedded (each must be
embedded once: processes lease their work).

Targets (this project's, on a 2-core machine): p99 of a busy ``build_conversation_context``
<= 150 ms and max <= 500 ms for both backends with 16 long replies.

Usage::

    python benchmarks/bench_busy_turns.py --full [--write docs/benchmarks.md]   # every case (~30 min)
    python benchmarks/bench_busy_turns.py --quick                              # local-rag, 1 long reply
    python benchmarks/bench_busy_turns.py --cases local-rag:16,hybrid:16 --multi none

It drives whichever ``ovos_memory_plugins`` the interpreter imports (``PYTHONPATH`` can point at
another checkout to compare), through public calls plus two private looks: local-rag's count of
pending exchanges (to label a turn busy) and its vector keys (to check nothing is lost).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402  (sibling module: the page's sections)
import locomo  # noqa: E402  (sibling module: the LoCoMo dev data)

LONG_WORDS = 4800
#: Words of a reply in the floor runs of several processes (almost nothing to embed).
FLOOR_WORDS = 20
QUESTIONS = (
    "What did Caroline say about the adoption agency?", "When did Melanie go camping with her kids?",
    "What instrument does Melanie play?", "Where did Caroline move from four years ago?",
    "What books did Melanie read recently?", "What did you tell me about the charity race?",
    "What is Caroline's identity?", "What painting did Melanie make last week?",
    "How long have Mel and her husband been married?", "What career path is Caroline pursuing?",
)
TARGET_P99_MS, TARGET_MAX_MS = 150.0, 500.0
SECTION = "busy-turns"


# -- workload ------------------------------------------------------------------------------------
_SENTENCES: list[str] = []


def sentences() -> list[str]:
    """Every turn of LoCoMo dev: real conversational English."""
    if not _SENTENCES:
        data = json.loads(locomo.locate_dataset(None).read_text(encoding="utf-8"))
        for conversation in data:
            conv = conversation["conversation"]
            for key, turns in conv.items():
                if key.startswith("session_") and isinstance(turns, list):
                    _SENTENCES.extend(t["text"] for t in turns if t.get("text"))
    return _SENTENCES


def long_reply(seed: int, words: int = LONG_WORDS) -> str:
    rng = random.Random(seed)
    pool = sentences()
    out: list[str] = []
    count = 0
    while count < words:
        out.append(rng.choice(pool))
        count += len(out[-1].split())
    return " ".join(out)


def messages(user: str, assistant: str) -> list[Any]:
    from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

    return [AgentMessage(MessageRole.USER, user), AgentMessage(MessageRole.ASSISTANT, assistant)]


def build(backend: str, folder: str) -> Any:
    os.environ["XDG_DATA_HOME"] = folder  # the hybrid preset's files go under it
    if backend == "local-rag":
        from ovos_memory_plugins.local_rag import LocalRAGMemory

        return LocalRAGMemory({"db_path": os.path.join(folder, "rag.db")})
    from ovos_memory_plugins.composite import CompositeMemory

    return CompositeMemory({"preset": "hybrid"})


def rag_of(memory: Any) -> Any:
    members = getattr(memory, "members", None)
    return next(m.memory for m in members if m.module.endswith("local-rag")) if members else memory


def pending(memory: Any) -> int:
    return int(rag_of(memory)._docs.count_pending())


def warm(memory: Any, session: str) -> None:
    pool = sentences()
    for i in range(6):
        memory.update_history(messages(pool[2 * i], pool[2 * i + 1]), session)
    memory.flush(600)
    memory.build_conversation_context("hello there", session)


def stats(values: list[float]) -> dict[str, float]:
    """n, median, p99 and max, in milliseconds (p99: nearest rank)."""
    if not values:
        return {"n": 0}
    ms = sorted(v * 1000 for v in values)
    return {"n": len(ms), "median": statistics.median(ms), "p99": ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))],
            "max": ms[-1]}


class Turns:
    """Timings of the turns of one case."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {"build_busy": [], "build_quiet": [], "update_busy": [],
                                                "update_long": []}
        self._lock = threading.Lock()

    def turn(self, memory: Any, session: str, rng: random.Random) -> None:
        busy = pending(memory) > 0
        question = rng.choice(QUESTIONS)
        start = time.perf_counter()
        memory.build_conversation_context(question, session)
        built = time.perf_counter()
        memory.update_history(messages(question, "Sure, here is what I remember about that."), session)
        done = time.perf_counter()
        with self._lock:
            self.samples["build_busy" if busy else "build_quiet"].append(built - start)
            if busy:
                self.samples["update_busy"].append(done - built)

    def store_long(self, memory: Any, session: str, seed: int, words: int = LONG_WORDS) -> tuple[str, str, str]:
        question = f"Tell me the whole story number {seed}, please."
        reply = long_reply(seed, words)
        start = time.perf_counter()
        memory.update_history(messages(question, reply), session)
        with self._lock:
            self.samples["update_long"].append(time.perf_counter() - start)
        return session, question, reply

    def report(self) -> dict[str, Any]:
        return {**{name: stats(values) for name, values in self.samples.items()},
                "samples_ms": {name: [round(v * 1000, 2) for v in values] for name, values in self.samples.items()}}


def verify(memory: Any, stored: list[tuple[str, str, str]], flush_timeout: float) -> dict[str, Any]:
    """After flush(): nothing pending, every long exchange stored and embedded (none lost or
    unsearchable); and how many the memory finds in its top 5 by their opening 40 words."""
    start = time.perf_counter()
    flushed = bool(memory.flush(flush_timeout))
    flush_s = time.perf_counter() - start
    rag = rag_of(memory)
    keys = {str(r[0]) for r in rag._db.execute("SELECT key FROM ovos_vec_items")}
    unembedded = unfound = 0
    for session, question, reply in stored:
        docs = [d for d in rag._docs.for_session(session) if d.text.startswith(f"Q: {question}")]
        if not docs or docs[0].doc_id not in keys:
            unembedded += 1
        hits = memory.search(" ".join(reply.split()[:40]), session, top_k=5)
        if not any(reply[:200] in h.content for h in hits):
            unfound += 1
    return {"flush_ok": flushed, "flush_s": flush_s, "pending_after_flush": int(rag._docs.count_pending()),
            "long_exchanges": len(stored), "not_embedded": unembedded, "not_found": unfound}


# -- one process ---------------------------------------------------------------------------------
def single(backend: str, longs: list[int], args: argparse.Namespace) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="bench-busy-")
    memory = build(backend, folder)
    session, rng = "kitchen", random.Random(7)
    warm(memory, session)
    idle = []
    for _ in range(args.idle):
        start = time.perf_counter()
        memory.build_conversation_context(rng.choice(QUESTIONS), session)
        idle.append(time.perf_counter() - start)
        time.sleep(0.02)
    out: dict[str, Any] = {"backend": backend, "idle": stats(idle), "cases": []}
    seed = 1000
    for n in longs:
        turns, stored = Turns(), []
        for _ in range(args.rounds):
            for _ in range(n):
                seed += 1
                stored.append(turns.store_long(memory, session, seed))
            for _ in range(args.turns):
                turns.turn(memory, session, rng)
                time.sleep(args.gap)
        case = {"long": n, **turns.report(), "verify": verify(memory, stored, args.flush_timeout)}
        out["cases"].append(case)
        log(f"{backend} {n:>2} long: busy {fmt(case['build_busy'])}; quiet {fmt(case['build_quiet'])}; "
            f"verify {case['verify']}")
    memory.close()
    return out


# -- several processes -------------------------------------------------------------------------
def _process(index: int, backend: str, folder: str, args: dict[str, Any], queue: Any, start_at: float) -> None:
    """One of the processes: ``args["threads"]`` threads, each its own session."""
    memory = build(backend, folder)
    rag = rag_of(memory)
    embedded = [0]
    store_documents = rag._store_documents

    def counted(docs: Any) -> None:
        store_documents(docs)
        embedded[0] += len(docs)

    rag._store_documents = counted
    warm(memory, f"p{index}-warm")
    turns, stored, lock = Turns(), [], threading.Lock()
    while time.time() < start_at:  # every process starts together
        time.sleep(0.01)

    def thread(t: int) -> None:
        session, rng = f"p{index}t{t}", random.Random(index * 100 + t)
        mine = []
        for r in range(args["rounds"]):
            mine.append(turns.store_long(memory, session, 10_000 * (index + 1) + 100 * t + r, args["words"]))
            for _ in range(args["turns"]):
                turns.turn(memory, session, rng)
                time.sleep(args["gap"] * rng.uniform(0.5, 1.5))
        with lock:
            stored.extend(mine)

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(args["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result = {"samples": turns.samples, "verify": verify(memory, stored, args["flush_timeout"]),
              "embedded": embedded[0], "documents": int(rag._docs.count())}
    memory.close()
    queue.put(result)


def multi(backend: str, args: argparse.Namespace, words: int) -> dict[str, Any]:
    """P processes x T threads on one store; ``words`` per reply (a short one measures what the
    turns cost on this machine with almost no background work: the floor)."""
    folder = tempfile.mkdtemp(prefix="bench-busy-multi-")
    build(backend, folder).close()  # the files and schema exist before the processes race to open them
    context = mp.get_context("spawn")
    queue = context.Queue()
    start_at = time.time() + 10.0 + 2.0 * args.procs
    settings = {k: getattr(args, k) for k in ("rounds", "turns", "gap", "threads", "flush_timeout")}
    settings["words"] = words
    procs = [context.Process(target=_process, args=(i, backend, folder, settings, queue, start_at))
             for i in range(args.procs)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=7200) for _ in procs]
    for p in procs:
        p.join()
    merged: dict[str, list[float]] = {}
    for result in results:
        for name, values in result["samples"].items():
            merged.setdefault(name, []).extend(values)
    out = {"backend": backend, "procs": args.procs, "threads": args.threads, "words": words,
           **{name: stats(values) for name, values in merged.items()},
           "verify": [r["verify"] for r in results], "embedded": [r["embedded"] for r in results],
           "documents": max(r["documents"] for r in results)}
    log(f"{backend} {args.procs}x{args.threads}, {words}-word replies: busy {fmt(out['build_busy'])}, all "
        f"{fmt(stats(merged['build_busy'] + merged['build_quiet']))}; embedded {out['embedded']} "
        f"of {out['documents']}")
    out["build_all"] = stats(merged["build_busy"] + merged["build_quiet"])
    return out


# -- report --------------------------------------------------------------------------------------
def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def fmt(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "-"
    return f"{_ms(s['median'])} / {_ms(s['p99'])} / {_ms(s['max'])} ms (n={s['n']})"


def _cell(s: dict[str, Any] | None) -> str:
    return fmt(s).replace(" ms", "") if s else "-"


def _verdict(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "-"
    ok = s["p99"] <= TARGET_P99_MS and s["max"] <= TARGET_MAX_MS
    return "meets" if ok else "misses"


def _lost(v: dict[str, Any]) -> str:
    bad = v["not_embedded"] + v["pending_after_flush"] + (0 if v["flush_ok"] else 1)
    return "none" if not bad else (f"{v['not_embedded']} not embedded, {v['pending_after_flush']} pending"
                                   + ("" if v["flush_ok"] else ", flush() failed"))


def _found(v: dict[str, Any]) -> str:
    return f"{v['long_exchanges'] - v['not_found']} / {v['long_exchanges']}"


def markdown(report: dict[str, Any]) -> str:
    runs = report.get("runs") or [report]
    made = "; ".join(f"`{r['command']}` ({r['package']}{_parts(r)}) on {r['started']}, in {r['elapsed_s']:.0f} s, "
                     f"load average before {r['load_before'][0]:.1f} and after {r['load_after'][0]:.1f}" for r in runs)
    lines = [f"<!-- section:start {SECTION} -->", "## Turns while the background is busy", "",
             f"Generated by {made}, on {report['cores']} cores. A real e5 embedder; each long reply has "
             f"{LONG_WORDS:,} words (LoCoMo sentences). A *busy* turn started while local-rag still had exchanges "
             "to embed. Times in ms: median / p99 / max (n). Targets: a busy `build_conversation_context` "
             f"p99 <= {TARGET_P99_MS:.0f} ms and max <= {TARGET_MAX_MS:.0f} ms with 16 long replies. "
             "*Found by opening words*: the long exchanges a search with the reply's opening 40 words ranks in "
             "its top 5 (a long reply's vector is the mean of its windows, so its opening words weigh a 17th of it). "
             "See `benchmarks/bench_busy_turns.py` for the protocol.", ""]
    if report.get("single"):
        lines += ["| backend | long replies per round | busy turns | target | quiet turns | update_history "
                  "(busy) | flush after | lost or unindexed after flush | found by opening words |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for run in report["single"]:
            lines.append(f"| {run['backend']} | idle | {_cell(run['idle'])} | | | | | | |")
            for case in run["cases"]:
                v = case["verify"]
                lines.append(f"| {run['backend']} | {case['long']} | {_cell(case['build_busy'])} | "
                             f"{_verdict(case['build_busy'])} | {_cell(case['build_quiet'])} | "
                             f"{_cell(case['update_busy'])} | {v['flush_s']:.0f} s | {_lost(v)} | {_found(v)} |")
        lines += ["", _targets(report["single"]), ""]
    if report.get("multi"):
        lines += ["Several processes on one store (each thread its own session; one reply per thread and round, "
                  "then turns). The rows with 20-word replies have almost no background work: they are what that "
                  "many concurrent turns cost on this machine, the floor for the rows above them. Each exchange "
                  "must be embedded once in all (processes lease their work):", "",
                  "| backend | processes x threads | reply words | busy turns | target | all turns | update_history "
                  "(busy) | embedded per process (documents) | lost after flush |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for run in report["multi"]:
            lost = "; ".join(sorted({_lost(v) for v in run["verify"]}))
            lines.append(f"| {run['backend']} | {run['procs']} x {run['threads']} | {run['words']:,} | "
                         f"{_cell(run['build_busy'])} | {_verdict(run['build_busy'])} | {_cell(run['build_all'])} | "
                         f"{_cell(run['update_busy'])} | {' + '.join(map(str, run['embedded']))} "
                         f"({run['documents']}) | {lost} |")
        lines.append("")
    if max(max(r["load_before"][0], r["load_after"][0]) for r in runs) > report["cores"]:
        lines += ["The load average was above the number of cores: other work shared them, so the slowest turns "
                  "include time spent waiting for a core, not only for this memory. Rerun on a quiet machine to "
                  "compare.", ""]
    lines.append("<!-- section:end -->")
    return "\n".join(lines)


def _targets(single_runs: list[dict[str, Any]]) -> str:
    """One sentence: do the targets (16 long replies) hold, per backend."""
    said = []
    for run in single_runs:
        for case in run["cases"]:
            busy = case["build_busy"]
            if case["long"] == 16 and busy.get("n"):
                held = "hold" if _verdict(busy) == "meets" else "do not hold"
                said.append(f"{run['backend']}: p99 {busy['p99']:,.0f} ms, max {busy['max']:,.0f} ms, "
                            f"the targets {held}")
    if not said:
        return "The targets are judged with 16 long replies, which this run did not measure."
    return (f"**With 16 long replies** ({'; '.join(said)}). With 32 busy turns per case, p99 is close to the "
            "slowest turn.")


def _parts(run: dict[str, Any]) -> str:
    parts = [name for name, key in (("one process", "single"), ("several processes", "multi")) if run.get(key)]
    return f"; {' and '.join(parts)}" if parts else ""


def combined(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' reports as one (their single- and several-process parts, in order)."""
    if len(reports) == 1:
        return reports[0]
    runs = [run for r in reports for run in r.get("runs") or [r]]
    return {**reports[0], "runs": runs, "single": [x for r in reports for x in r.get("single", [])],
            "multi": [x for r in reports for x in r.get("multi", [])]}


def write_section(path: Path, section: str) -> None:
    """Put ``section`` into ``path`` in place of an earlier one of the same name, else at the end."""
    _report.replace_section(path, f"<!-- section:start {SECTION} -->", section)


def package() -> str:
    """The version of ovos_memory_plugins measured, and its commit when it is a git checkout."""
    import importlib.metadata
    import subprocess

    import ovos_memory_plugins

    where = str(Path(ovos_memory_plugins.__file__).resolve().parent)
    try:
        version = importlib.metadata.version("ovos-memory-plugins")
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed)"
    git = ["git", "-C", where]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "."], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit, changed = "", ""
    return f"ovos-memory-plugins {version}" + (f" at {commit}" if commit else "") + (" with changes" if changed else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="both backends, 1/8/16 long replies, and 4 x 4 processes")
    mode.add_argument("--quick", action="store_true", help="local-rag, 1 long reply, a few turns (a smoke run)")
    parser.add_argument("--cases", default=None, help="backend:long,... (e.g. local-rag:16,hybrid:1), or none")
    parser.add_argument("--multi", default=None, help="backends run as --procs x --threads (comma list, or none)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--turns", type=int, default=16, help="turns after each round of long replies")
    parser.add_argument("--gap", type=float, default=0.25, help="seconds between turns")
    parser.add_argument("--idle", type=int, default=20)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--multi-turns", type=int, default=6, help="turns after each long reply (several processes)")
    parser.add_argument("--flush-timeout", type=float, default=1800.0)
    parser.add_argument("--json", default=None, help="write the raw report here")
    parser.add_argument("--write", default=None, help="put the markdown section into this file (docs/benchmarks.md)")
    parser.add_argument("--from-json", default=None,
                        help="only render (and --write) the reports of earlier --json runs (a comma list, in order)")
    args = parser.parse_args(argv)
    if args.from_json:
        text = markdown(combined([json.loads(Path(p).read_text(encoding="utf-8")) for p in args.from_json.split(",")]))
        print(text)
        if args.write:
            write_section(Path(args.write), text)
        return 0
    cases = args.cases or ("local-rag:1" if args.quick else "local-rag:1,local-rag:8,local-rag:16,hybrid:1,"
                           "hybrid:8,hybrid:16")
    multis = args.multi if args.multi is not None else ("none" if args.quick or args.cases else "local-rag,hybrid")
    cases = "" if cases == "none" else cases
    if args.quick:
        args.rounds, args.turns, args.idle = 1, 4, 5
    plan: dict[str, list[int]] = {}
    for item in filter(None, cases.split(",")):
        backend, _, n = item.partition(":")
        plan.setdefault(backend, []).append(int(n))
    started = time.time()
    report: dict[str, Any] = {
        "command": "python benchmarks/bench_busy_turns.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "package": package(),
        "cores": os.cpu_count(), "machine": platform.platform(), "load_before": os.getloadavg(),
        "single": [single(backend, longs, args) for backend, longs in plan.items()], "multi": []}
    multi_args = argparse.Namespace(**{**vars(args), "turns": args.multi_turns})
    for backend in filter(None, multis.split(",")):
        if backend != "none":
            for words in (LONG_WORDS, FLOOR_WORDS):
                report["multi"].append(multi(backend, multi_args, words))
    report.update(load_after=os.getloadavg(), elapsed_s=time.time() - started)
    text = markdown(report)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    if args.write:
        write_section(Path(args.write), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
