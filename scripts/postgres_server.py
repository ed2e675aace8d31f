#!/usr/bin/env python3
"""A private PostgreSQL 16 with pgvector for the tests and benchmarks, from the ``pgserver`` wheel.

    python scripts/postgres_server.py start [--owner PID] [--durable] [--print-env]
    python scripts/postgres_server.py stop FOLDER

``start`` creates a cluster in a new short folder (``/tmp/pgt-XXXXXX``: a Unix socket path is
limited to 107 bytes), starts it listening on a socket in that folder only, creates the
``vector`` extension (as the superuser ``postgres``, which a test may not be) and prints the URL
(``--print-env``: shell assignments of ``OVOS_MEMORY_POSTGRES_URL`` and ``OVOS_MEMORY_PGSERVER_DIR``).
``stop`` shuts it down and deletes the folder.

Why not ``pgserver.get_server()``: it stops its server from an ``atexit`` handler only, so a run
ended by SIGKILL (a CI timeout) leaves PostgreSQL running. With ``--owner`` a watchdog process in
its own session polls that PID (and its start time, so a reused PID does not fool it) and stops
the server when the owner is gone, however it ended.

As root, PostgreSQL refuses to run: as pgserver does, the server runs as a system user
``pgserver`` (created if missing) that owns the folder. Without ``--durable`` the server skips
fsync (tests need no crash durability of the machine, only of the processes); benchmarks pass
``--durable``.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SYSTEM_USER = "pgserver"
SUPERUSER = "postgres"
#: Where ``start`` makes its folders, and the file that marks one as made by it: ``stop`` deletes
#: nothing else (an empty or mistyped argument must never name a checkout to delete).
PARENT = Path("/tmp")
MARKER = ".ovos-memory-test-server"


def binaries() -> Path:
    """The wheel's ``bin`` folder (found without importing pgserver, which warns at import)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pgserver is not installed: pip install 'ovos-memory-plugins[test]' (or pip install pgserver)")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _run_as() -> str | None:
    return SYSTEM_USER if os.geteuid() == 0 else None


def _prepare_system_user(bin_dir: Path, folder: Path) -> None:
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
                       check=True, capture_output=True)
    wanted = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    for top in (bin_dir, bin_dir.parent / "lib", bin_dir.parent / "share"):
        for path in (top, *top.parents):  # the server must reach its binaries and libraries
            mode = path.stat().st_mode
            if mode & wanted != wanted:
                path.chmod(mode | wanted)
    shutil.chown(folder, SYSTEM_USER, SYSTEM_USER)


def _run(args: list[str], user: str | None) -> None:
    # Output to a file, not a pipe: the server inherits pg_ctl's descriptors and would keep a
    # pipe open forever.
    with tempfile.TemporaryFile() as out:
        done = subprocess.run(args, user=user, stdout=out, stderr=subprocess.STDOUT, check=False)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{text}")


def url_for(folder: Path) -> str:
    """A libpq URL for the socket in ``folder`` (an empty host plus ``?host=/dir``: a Unix socket)."""
    return f"postgresql://{SUPERUSER}@/postgres?host={folder}"


def start(owner: int | None, durable: bool, shared_buffers: str = "256MB") -> tuple[Path, str]:
    bin_dir = binaries()
    folder = Path(tempfile.mkdtemp(prefix="pgt-", dir=PARENT))
    (folder / MARKER).write_text("made by scripts/postgres_server.py start; deleted by its stop\n")
    user = _run_as()
    if user:
        _prepare_system_user(bin_dir, folder)
    data = folder / "data"
    _run([str(bin_dir / "initdb"), "-D", str(data), "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8",
          "-U", SUPERUSER, "--no-sync", "--no-instructions"], user)
    options = [f"-c unix_socket_directories={folder}", "-c listen_addresses=''", "-c max_connections=200",
               f"-c shared_buffers={shared_buffers}"]
    if not durable:
        options += ["-c fsync=off", "-c full_page_writes=off"]
    if owner:
        _spawn_watchdog(owner, folder)
    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(folder / "server.log"),
          "-o", " ".join(options), "start"], user)
    _run([str(bin_dir / "psql"), "-h", str(folder), "-U", SUPERUSER, "-d", "postgres", "-q", "-v", "ON_ERROR_STOP=1",
          "-c", "CREATE EXTENSION IF NOT EXISTS vector"], None)
    return folder, url_for(folder)


def made_here(folder: Path) -> bool:
    """Whether ``folder`` is one ``start`` made: /tmp/pgt-*, a real directory holding the marker."""
    return (folder.is_absolute() and folder.parent == PARENT and folder.name.startswith("pgt-")
            and not folder.is_symlink() and (folder / MARKER).is_file())


def stop(folder: Path) -> None:
    if not made_here(folder):
        raise SystemExit(f"refusing to stop or delete {str(folder)!r}: not a folder made by "
                         f"'postgres_server.py start' ({PARENT}/pgt-* holding {MARKER})")
    data = folder / "data"
    if (data / "postmaster.pid").exists():
        try:
            _run([str(binaries() / "pg_ctl"), "-D", str(data), "-w", "-t", "30", "-m", "fast", "stop"], _run_as())
        except RuntimeError:
            try:  # an immediate shutdown; the server's children follow it
                os.kill(int((data / "postmaster.pid").read_text().split()[0]), signal.SIGQUIT)
            except (OSError, ValueError, IndexError):
                pass
    shutil.rmtree(folder, ignore_errors=True)


def _started_at(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _spawn_watchdog(owner: int, folder: Path) -> None:
    # A new session: a kill of the test run's process group does not reach the watchdog.
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "watch", str(owner), _started_at(owner) or "",
                      str(folder)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def watch(owner: int, started: str, folder: Path) -> None:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the owner's end (or ``stop``) ends the watch
    while folder.exists() and _started_at(owner) is not None and _started_at(owner) == (started or _started_at(owner)):
        time.sleep(0.5)
    if made_here(folder):  # gone already when ``stop`` ran first
        stop(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    begin = sub.add_parser("start", help="start a server; prints its URL")
    begin.add_argument("--owner", type=int, help="stop the server when this process ends")
    begin.add_argument("--durable", action="store_true", help="keep fsync on (benchmarks)")
    begin.add_argument("--print-env", action="store_true", help="print shell assignments instead of the URL")
    begin.add_argument("--shared-buffers", default="256MB",
                       help="PostgreSQL's cache (default: %(default)s; an HNSW index should fit in it)")
    end = sub.add_parser("stop", help="stop a server and delete its folder")
    end.add_argument("folder")
    guard = sub.add_parser("watch")
    guard.add_argument("owner", type=int)
    guard.add_argument("started")
    guard.add_argument("folder")
    args = parser.parse_args(argv)
    if args.command == "start":
        folder, url = start(args.owner, args.durable, args.shared_buffers)
        print(f"OVOS_MEMORY_POSTGRES_URL='{url}'\nOVOS_MEMORY_PGSERVER_DIR='{folder}'" if args.print_env else url)
    elif args.command == "stop":
        stop(Path(args.folder))
    else:
        watch(args.owner, args.started, Path(args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
