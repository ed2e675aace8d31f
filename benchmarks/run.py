"""Side-by-side benchmarks: this package against the public reference package, in one run.

    python benchmarks/run.py --quick   # about a minute: N = 1k, fewer calls, one LoCoMo conversation
    python benchmarks/run.py --full    # N = 1k, 10k, 100k, all of LoCoMo dev, all embedders

The reference (``pip install --pre ovos-memory-plugins`` from PyPI, without its ``local-rag``
extra) goes into its own virtual environment under ``.bench-cache/reference-venv``. Its code is
never imported here: both packages are driven through their ``opm.agents.memory`` entry points
by the same script (``benchmarks/_worker.py``) in separate processes, one process per
measurement. Longterm and entity talk to one local OpenAI-compatible test endpoint started by
this process, so both packages see the same LLM.

Output: ``docs/benchmarks.md`` and ``docs/img/*.png`` (``--full``; ``--quick`` writes to
``.bench-cache/report-quick/`` unless ``--out`` is given); the raw numbers go to
``.bench-cache/results-<mode>.json``.
The reference's local-rag needs a C++ build (llama.cpp) and a model download from Hugging Face,
so it cannot run offline and is not measured; ours is measured for recall only.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = ROOT / ".bench-cache"
REF_VENV = CACHE / "reference-venv"
WORKER = HERE / "_worker.py"
REFERENCE_SPEC = "ovos-memory-plugins"
sys.path.insert(0, str(HERE))

import locomo  # noqa: E402  (sibling module; no package imports)

EP = "ovos-memory-plugin-"
#: A LoCoMo row with this suffix is measured with the second protocol: the dated import.
DATED = " (dated import)"


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    ns: tuple[int, ...]
    calls: int            # alternating build/update calls after populating (300 in full mode)
    budget_s: float       # populate time per cell; a slower store is measured where it got to
    startup_reps: int
    locomo_limit: int | None
    locomo_runs: tuple[tuple[str, str, str], ...]  # (package, backend, embedder)
    install_timeout_s: float
    worker_timeout_s: float
    flush_timeout_s: float | None  # wait for our background work at most this long (None: until done)


QUICK = Mode("quick", (1000,), 40, 3.0, 1, 1,
             (("ours", "lexical", ""), ("reference", "lexical", "")), 90, 120, 10.0)
FULL = Mode("full", (1000, 10_000, 100_000), 300, 150.0, 3, None,
            (("ours", "lexical", ""), ("reference", "lexical", ""), ("ours", "local-rag", "e5"),
             ("ours", "local-rag", "minilm"), ("ours", "lexical-neighbours", ""),
             ("ours", "local-rag-neighbours", "e5"), ("ours", "composite-plain", "e5"),
             ("ours", "composite-hybrid-rrf", "e5"), ("ours", "composite-hybrid", "e5"),
             ("ours", "composite-hybrid-loco", "e5"), ("ours", "composite-hybrid-loco" + DATED, "e5")),
            900, 1800, None)

BACKENDS = ("recency", "lexical", "longterm", "entity", "composite")
STORAGES = ("ram", "file")


def backend_config(backend: str, storage: str, llm_url: str | None) -> tuple[str, dict[str, Any]] | None:
    """``(entry point, config)`` shared by both packages; ``{dir}`` is a fresh folder per process.

    Every config is one a persona JSON could hold and both packages accept (drop-in). "ram" runs
    in a folder on tmpfs when a backend has no in-memory mode (longterm keeps a JSON file).
    """
    file = storage == "file"
    llm = {"api_url": llm_url, "model": "bench-model"}
    if backend == "recency":
        return EP + "recency", ({"db_path": "{dir}/recency.json"} if file else {})
    if backend == "lexical":
        return EP + "lexical", {"db_path": "{dir}/lexical.db" if file else ":memory:"}
    if backend == "composite":
        return EP + "composite", {"members": [
            {"module": EP + "recency", "config": {"db_path": "{dir}/recency.json"} if file else {}},
            {"module": EP + "lexical", "config": {"db_path": "{dir}/lexical.db" if file else ":memory:"}}]}
    if llm_url is None:
        return None
    if backend == "longterm":
        return EP + "longterm", {**llm, "backend": "sqlite" if file else "json",
                                 "db_path": "{dir}/longterm.db" if file else "{dir}/longterm.json"}
    if backend == "entity":
        return EP + "entity", {**llm, **({"backend": "json", "db_path": "{dir}/entity.json"} if file
                                         else {"backend": "memory"})}
    raise ValueError(backend)


# -- processes -----------------------------------------------------------------------------------
def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ram_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def run_worker(python: str, task: dict[str, Any], timeout: float, data_home: str) -> dict[str, Any]:
    """Run one task in a fresh process; the result carries the process wall time."""
    env = {**os.environ, "XDG_DATA_HOME": data_home, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    try:
        # -I: isolated mode, so neither the working folder nor PYTHONPATH can put our source on the
        # reference's path (and the same for ours: only what each venv installed is importable).
        proc = subprocess.run([python, "-I", str(WORKER), json.dumps(task)], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=task.get("workdir") or None)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - start
    marker = proc.stdout.rfind("@@RESULT@@")
    if marker < 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"ok": False, "error": f"worker exit {proc.returncode}: {' | '.join(tail)}"}
    result = json.loads(proc.stdout[marker + len("@@RESULT@@"):].strip().splitlines()[0])
    result["process_wall_s"] = wall
    return result


def ensure_reference(python: str, timeout: float, refresh: bool) -> tuple[str | None, str]:
    """The reference venv's Python and its version, creating it if needed; ``(None, why)`` if not."""
    ref_python = REF_VENV / "bin" / "python"
    if refresh and REF_VENV.exists():
        shutil.rmtree(REF_VENV)
    try:
        if not ref_python.exists():
            log(f"creating {REF_VENV} and installing {REFERENCE_SPEC} (pre-release) from the package index")
            subprocess.run([python, "-m", "venv", str(REF_VENV)], check=True, capture_output=True, timeout=timeout)
            subprocess.run([str(ref_python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--pre",
                            REFERENCE_SPEC], check=True, capture_output=True, text=True, timeout=timeout)
        version = subprocess.run(
            [str(ref_python), "-I", "-c", "import importlib.metadata as m; print(m.version('ovos-memory-plugins'), "
                                    "m.version('ovos-plugin-manager'))"],
            check=True, capture_output=True, text=True, timeout=60).stdout.split()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        # A half-made venv would be reused next time: remove it so the next run retries.
        shutil.rmtree(REF_VENV, ignore_errors=True)
        return None, f"reference venv could not be created ({type(exc).__name__}: {str(detail).strip()[-300:] or exc})"
    return str(ref_python), f"ovos-memory-plugins {version[0]} (ovos-plugin-manager {version[1]})"


def our_version(python: str) -> str:
    out = subprocess.run([python, "-I", "-c", "import importlib.metadata as m; print(m.version('ovos-memory-plugins'), "
                                        "m.version('ovos-plugin-manager'))"], capture_output=True, text=True)
    parts = out.stdout.split()
    return f"ovos-memory-plugins {parts[0]} (ovos-plugin-manager {parts[1]})" if len(parts) == 2 else "unknown"


_llm_server: Any = None


def _forget_llm_requests() -> None:
    """The test server logs every request; drop the log between cells so the runner stays small."""
    if _llm_server is not None and callable(getattr(_llm_server, "reset_log", None)):
        _llm_server.reset_log()


def _llm_reply(messages: list[dict[str, Any]]) -> str:
    """A plausible answer: a JSON fact list when the prompt asks for JSON (entity), else a summary."""
    prompt = " ".join(str(m.get("content", "")) for m in messages).lower()
    if "json" in prompt:
        return '["The user likes synthetic benchmarks."]'
    return "The user and the assistant exchanged synthetic benchmark sentences about many topics."


@contextlib.contextmanager
def llm_endpoint() -> Iterator[tuple[str | None, str]]:
    """The shared fake OpenAI-compatible endpoint (ours, from ovos_memory_plugins.testing.llm)."""
    try:
        from ovos_memory_plugins.testing.llm import FakeLLMServer
    except ImportError as exc:
        yield None, f"no test endpoint: ovos_memory_plugins.testing.llm is missing ({exc})"
        return
    with FakeLLMServer(reply=_llm_reply, model="bench-model") as server:
        global _llm_server
        _llm_server = server
        yield server.url, f"`FakeLLMServer` (ovos_memory_plugins.testing.llm) on {server.url}, answering at once"


# -- measurements --------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "memory": mem,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "filesystem_file_db": _fs_type(CACHE), "ram_dir": ram_dir()}


def _fs_type(path: Path) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, timeout=5).stdout.splitlines()
        return out[-1].split()[1]
    return "unknown"


def latency_cells(mode: Mode, pythons: dict[str, str], llm_url: str | None, data_home: str) -> list[dict[str, Any]]:
    cells = []
    for backend in BACKENDS:
        for storage in STORAGES:
            for n in mode.ns:
                spec = backend_config(backend, storage, llm_url)
                for package, python in pythons.items():
                    cell = {"backend": backend, "storage": storage, "n": n, "package": package}
                    if spec is None:
                        cells.append({**cell, "ok": False, "error": "no test LLM endpoint"})
                        continue
                    workdir = ram_dir() if storage == "ram" else str(CACHE / "tmp")
                    os.makedirs(workdir, exist_ok=True)
                    task = {"task": "latency", "entry_point": spec[0], "config": spec[1], "n": n,
                            "calls": mode.calls, "seed": 7, "budget_s": mode.budget_s, "workdir": workdir,
                            "flush_timeout_s": mode.flush_timeout_s}
                    result = run_worker(python, task, mode.worker_timeout_s, data_home)
                    _forget_llm_requests()
                    cells.append({**cell, **result})
                    log(f"{backend:9} {storage:4} N={n:>6} {package:9} " + _brief(result))
    return cells


def _brief(r: dict[str, Any]) -> str:
    if not r.get("ok"):
        return "FAILED " + r.get("error", "")
    return (f"build {r['build_us']['median']:.1f}/{r['build_us']['p90']:.1f} µs, update "
            f"{r['update_us']['median']:.1f}/{r['update_us']['p90']:.1f} µs, stored {r['stored']}, "
            f"rss {r['peak_rss_mb']:.0f} MB")


def startup_cells(mode: Mode, pythons: dict[str, str], llm_url: str | None, data_home: str) -> list[dict[str, Any]]:
    cells = []
    for backend in BACKENDS:
        spec = backend_config(backend, "file", llm_url)
        for package, python in pythons.items():
            if spec is None:
                cells.append({"backend": backend, "package": package, "ok": False, "error": "no test LLM endpoint"})
                continue
            workdir = str(CACHE / "tmp")
            os.makedirs(workdir, exist_ok=True)
            task = {"task": "startup", "entry_point": spec[0], "config": spec[1], "workdir": workdir}
            runs = [run_worker(python, task, 120, data_home) for _ in range(mode.startup_reps)]
            good = [r for r in runs if r.get("ok")]
            if not good:
                cells.append({"backend": backend, "package": package, **runs[-1]})
                continue
            # The median run by process wall time stands for all of them.
            good.sort(key=lambda r: r["process_wall_s"])
            cells.append({"backend": backend, "package": package, **good[len(good) // 2], "reps": len(good)})
            log(f"startup {backend:9} {package:9} {good[len(good) // 2]['process_wall_s'] * 1000:.0f} ms")
    return cells


def locomo_cells(mode: Mode, pythons: dict[str, str], data_home: str) -> list[dict[str, Any]]:
    try:
        data = str(locomo.locate_dataset())
    except FileNotFoundError as exc:
        return [{"ok": False, "error": str(exc), "package": "-", "backend": "-", "embedder": ""}]
    cells = []
    for package, backend, embedder in mode.locomo_runs:
        cell = {"package": package, "backend": backend, "embedder": embedder}
        if package not in pythons:
            continue
        name = backend.removesuffix(DATED)
        entry_point, config = locomo.backend_config(name, Path("{dir}"), embedder or "e5")
        workdir = str(CACHE / "tmp")
        os.makedirs(workdir, exist_ok=True)
        task = {"task": "locomo", "entry_point": entry_point, "config": config, "locomo_path": data,
                "limit": mode.locomo_limit, "ks": [5, 10], "workdir": workdir, "dated": name != backend,
                "overrides": _fold_weights(pythons[package], data) if name.endswith("-loco") else {}}
        result = run_worker(pythons[package], task, mode.worker_timeout_s, data_home)
        cells.append({**cell, **result})
        if result.get("ok"):
            o = result["overall"]
            log(f"locomo {package:9} {backend:16} {embedder:6} R@5 {o['5']['recall']:.3f} R@10 {o['10']['recall']:.3f}")
        else:
            log(f"locomo {package:9} {backend:16} {embedder:6} FAILED {result.get('error')}")
    return cells


def _fold_weights(python: str, data: str) -> dict[str, Any]:
    """``{conversation: {"fusion_weights": ...}}``: each conversation's score-fusion weights fitted on
    the other two (benchmarks/fit_fusion.py, in its own process)."""
    path = CACHE / "fusion-folds.json"
    subprocess.run([python, str(Path(__file__).with_name("fit_fusion.py")), "--folds", str(path)], check=True,
                   env={**os.environ, "LOCOMO_PATH": data}, stdout=subprocess.DEVNULL, timeout=3600)
    folds = json.loads(path.read_text(encoding="utf-8"))
    return {conv: {"fusion_weights": weights} for conv, weights in folds.items()}


# -- entry point ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="CI smoke run (< 2 minutes): N=1k, fewer calls")
    group.add_argument("--full", action="store_true", help="N = 1k, 10k, 100k and the whole LoCoMo dev split")
    parser.add_argument("--out", default=None, help="report folder (default: docs/ for --full, "
                                                    ".bench-cache/report-quick/ for --quick)")
    parser.add_argument("--python", default=sys.executable, help="the Python that has this package installed")
    parser.add_argument("--no-reference", action="store_true", help="measure this package only")
    parser.add_argument("--refresh-reference", action="store_true", help="recreate the reference venv")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: latency,startup,locomo,busy")
    args = parser.parse_args(argv)
    mode = FULL if args.full else QUICK
    out = Path(args.out) if args.out else (ROOT / "docs" if mode is FULL else CACHE / "report-quick")
    skip = set(filter(None, args.skip.split(",")))
    command = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    CACHE.mkdir(exist_ok=True)

    pythons = {"ours": args.python}
    notes: list[str] = []
    reference = "not measured (--no-reference)"
    if not args.no_reference:
        ref_python, reference = ensure_reference(args.python, mode.install_timeout_s, args.refresh_reference)
        if ref_python:
            pythons["reference"] = ref_python
        else:
            notes.append(f"**The reference package was not measured**: {reference}. Only this package's numbers "
                         "are shown; there are no ratios.")
    log(f"reference: {reference}")
    results: dict[str, Any] = {"mode": mode.name, "command": command, "reference": reference,
                               "ours": our_version(args.python), "machine": machine_info(),
                               "load_before": os.getloadavg(), "started": dt.datetime.now(dt.timezone.utc).isoformat(
                                   timespec="seconds"), "notes": notes, "calls": mode.calls,
                               "budget_s": mode.budget_s}
    with tempfile.TemporaryDirectory(prefix="bench-xdg-") as data_home, llm_endpoint() as (llm_url, llm_note):
        results["llm"] = llm_note
        log(llm_note)
        if llm_url is None:
            notes.append(f"longterm and entity were not measured: {llm_note}.")
        results["latency"] = [] if "latency" in skip else latency_cells(mode, pythons, llm_url, data_home)
        results["startup"] = [] if "startup" in skip else startup_cells(mode, pythons, llm_url, data_home)
        results["locomo"] = [] if "locomo" in skip else locomo_cells(mode, pythons, data_home)
    results["load_after"] = os.getloadavg()
    results["elapsed_s"] = time.time() - started

    import _report  # matplotlib is imported only here

    path = _report.write(results, out, CACHE / f"results-{mode.name}.json")
    log(f"report written to {path} in {results['elapsed_s']:.0f} s")
    if "busy" not in skip:
        busy_turns(mode, args.python, path)
    return 0


def busy_turns(mode: Mode, python: str, report: Path) -> None:
    """Turns while the background is busy (ours only): its own section of the report."""
    try:
        data = str(locomo.locate_dataset())
    except FileNotFoundError as exc:
        log(f"busy turns not measured: {exc}")
        return
    command = [python, str(HERE / "bench_busy_turns.py"), f"--{mode.name}", "--write", str(report),
               "--json", str(CACHE / f"busy-turns-{mode.name}.json")]
    log("busy turns: " + " ".join(command[1:]))
    subprocess.run(command, check=False, env={**os.environ, "LOCOMO_PATH": data}, timeout=4 * 3600)


if __name__ == "__main__":
    sys.exit(main())
