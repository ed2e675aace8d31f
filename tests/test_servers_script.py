"""The scripts that start the test servers: they never share a server with another run, and
never delete what they did not make.

scripts/servers.sh starts each run's redis-server on a free port: with one fixed port, two test
runs on one machine shared a server (the second found the first's answering) and each stopped it
for the other. scripts/postgres_server.py's ``stop FOLDER`` shuts a server down and deletes FOLDER:
given an empty argument (an unset shell variable) it once deleted the working directory, a whole
checkout. No PostgreSQL is needed here: what is refused is refused before any server binary is
looked for.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._redis import answers
from tests._timing import patience

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "postgres_server.py"


def _stop(folder: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "stop", folder], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("given", ["", ".", "{here}", "{tmp_pgt}"])
def test_stop_refuses_a_folder_start_did_not_make_and_deletes_nothing(given, tmp_path):
    here = tmp_path / "checkout"
    here.mkdir()
    (here / "precious.py").write_text("keep me")
    # Named as start names its folders, but not made by it (no marker): refused all the same.
    lookalike = Path(f"/tmp/pgt-test{os.getpid()}")
    lookalike.mkdir(exist_ok=True)
    (lookalike / "data").mkdir(exist_ok=True)
    try:
        done = _stop(given.format(here=here, tmp_pgt=lookalike), here)
        assert done.returncode != 0
        assert "refusing to stop or delete" in done.stderr
        assert (here / "precious.py").read_text() == "keep me"
        assert (lookalike / "data").is_dir()
    finally:
        (lookalike / "data").rmdir()
        lookalike.rmdir()


# -- scripts/servers.sh: redis ---------------------------------------------------------------------
def _start_redis(env: dict[str, str] | None = None) -> subprocess.Popen:
    """A shell that sourced servers.sh, ran ``start_redis`` and printed the URL; it stops the server
    when its stdin closes."""
    script = '. scripts/servers.sh && start_redis && echo "$OVOS_MEMORY_REDIS_URL" && read -r _'
    return subprocess.Popen(["bash", "-c", script], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**_without_port(os.environ), **(env or {})})


def _without_port(environ: os._Environ[str]) -> dict[str, str]:
    # A port the outer run was told to use (and holds) is not this test's unless it says so.
    return {k: v for k, v in environ.items() if k != "OVOS_MEMORY_REDIS_PORT"}


def _finish(shell: subprocess.Popen) -> tuple[str, str]:
    return shell.communicate(timeout=60)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.redis
def test_two_runs_at_once_each_get_a_redis_server_of_their_own(monkeypatch):
    monkeypatch.delenv("OVOS_MEMORY_REDIS_PORT", raising=False)
    first, second = _start_redis(), _start_redis()
    try:
        urls = [shell.stdout.readline().strip() for shell in (first, second)]
        assert all(url.startswith("redis://127.0.0.1:") for url in urls), urls
        assert urls[0] != urls[1]
        ports = [_port(url) for url in urls]
        assert all(answers(port) for port in ports)
    finally:
        for shell in (first, second):
            _finish(shell)
    deadline = time.monotonic() + patience(10)  # each shell stopped its own server as it exited
    while any(map(answers, ports)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(answers, ports))


@pytest.mark.redis
def test_a_given_port_another_server_holds_is_an_error_naming_it():
    first = _start_redis()
    try:
        port = _port(first.stdout.readline().strip())
        second = _start_redis({"OVOS_MEMORY_REDIS_PORT": str(port)})
        out, err = _finish(second)
        assert second.returncode != 0 and out == ""
        assert f"redis-server did not start on port {port}" in err
    finally:
        _finish(first)
