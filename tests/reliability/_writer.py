"""Child processes of the crash and concurrency tests.

``python -m tests.reliability._writer JOB`` runs one job. ``python -m tests.reliability._writer
--zygote`` imports every backend once, then forks one writer per job line read on stdin, so a
crash test restarts its writer twenty times without paying Python's and OPM's import time
twenty times (the store is opened after the fork, in the writer; the zygote never opens one).

JOB (JSON): entry_point, folder, overrides, sid, tag, start, stop, threads, idle_at_end and
marker_summaries. Each thread ``i`` writes updates ``start..stop-1`` with the tag ``<tag>t<i>``
(one thread: the tag itself) and, after each ``update_history`` returned, writes
``"<tag> <n>\\n"`` to the ack pipe. At the end: ``flush()``, ``close()``, then ``"done"``.

Zygote protocol (one JSON object per stdout line): ``{"pid": n}`` after a fork, ``{"ack": s}``
per acknowledgement, ``{"status": code}`` once the writer is gone.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from tests._timing import patience

BACKEND_MODULES = ("short_term", "recency", "lexical", "local_rag", "longterm", "entity", "redis_memory",
                   "composite", "testing.embeddings", "vectordb")


def run_job(job: dict[str, Any], fd: int) -> int:
    from tests.reliability._harness import exchange, make_memory, marker_summary

    overrides = dict(job.get("overrides") or {})
    if job.get("marker_summaries") and job["entry_point"] == "ovos-memory-plugin-redis":
        overrides["_summarizer"] = marker_summary
    memory = make_memory(job["entry_point"], Path(job["folder"]), overrides)
    lock = threading.Lock()
    failures: list[BaseException] = []

    def ack(text: str) -> None:
        with lock:
            os.write(fd, (text + "\n").encode())

    def run(tag: str) -> None:
        try:
            for n in range(job["start"], job["stop"]):
                memory.update_history(exchange(tag, n), job["sid"])
                ack(f"{tag} {n}")
        except BaseException as exc:  # noqa: BLE001 - reported to the parent through the exit code
            failures.append(exc)
            raise

    threads = int(job.get("threads") or 1)
    tags = [job["tag"]] if threads == 1 else [f"{job['tag']}t{i}" for i in range(threads)]
    workers = [threading.Thread(target=run, args=(tag,)) for tag in tags]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if job.get("idle_at_end"):
        time.sleep(3600)  # the parent kills us
    flushed = memory.flush(patience(120)) if hasattr(memory, "flush") else True
    memory.close()
    ack("done" if flushed else "flush-timeout")
    return 1 if failures else 0


def zygote() -> int:
    import importlib

    import tests.reliability._harness  # noqa: F401 - imported once, before any fork

    for name in BACKEND_MODULES:
        try:
            importlib.import_module(f"ovos_memory_plugins.{name}")
        except ImportError:
            pass  # a backend not written yet; its jobs will import (and fail) in the child
    out = sys.stdout

    def say(data: dict[str, Any]) -> None:
        out.write(json.dumps(data) + "\n")
        out.flush()

    for line in sys.stdin:
        job = json.loads(line)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer
            os.close(read_fd)
            code = 1
            try:
                os.dup2(2, 1)  # keep the protocol stream clean (log handlers hold fd 1 too)
                code = run_job(job, write_fd)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        os.close(write_fd)
        say({"pid": pid})
        with os.fdopen(read_fd, "rb") as pipe:
            for ack in pipe:  # until the writer exits or is killed
                say({"ack": ack.decode().strip()})
        _, status = os.waitpid(pid, 0)
        say({"status": status})
    return 0


def main() -> int:
    if sys.argv[1:] == ["--zygote"]:
        return zygote()
    job = json.loads(sys.argv[1])
    return run_job(job, int(job["ack_fd"]))


if __name__ == "__main__":
    sys.exit(main())
