"""A real redis-server for the tests: the one CI started, or a private one started here.

``server_url()`` returns ``$OVOS_MEMORY_REDIS_URL`` when set (CI starts redis-server and sets
it); otherwise it starts ``/usr/bin/redis-server`` once per test process on a free port in a
temporary folder (no persistence) and stops it at exit. It never skips: a missing server is
a failure. ``RedisServer`` is also used directly by tests that need to stop a server.
"""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

__all__ = ["RedisServer", "answers", "redis_server_url", "server_url"]

#: Set by ``make test-fast``: a test that would start a server there is missing its ``redis`` marker.
NO_SERVERS_ENV = "OVOS_MEMORY_TEST_NO_SERVERS"
REDIS_SERVER = os.environ.get("OVOS_MEMORY_REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"


def _die_with_parent() -> None:
    """In the child: ask Linux to stop redis-server if the test process dies without cleaning up."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: atexit still stops it on a normal exit


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(port: int) -> bool:
    """Whether a Redis server on 127.0.0.1:``port`` answers a PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A private redis-server process on 127.0.0.1 (``--save ""``, ``--appendonly no``)."""

    def __init__(self, port: int | None = None):
        if os.environ.get(NO_SERVERS_ENV):
            raise RuntimeError(f"{NO_SERVERS_ENV} is set (make test-fast) but this test starts redis-server: "
                               "mark it `redis`")
        self.port = port or free_port()
        self._folder = tempfile.TemporaryDirectory(prefix="ovos-redis-")
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self._process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self._folder.name, "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            # The death signal follows the thread that started the server: only the main thread's.
            preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                self._process.stderr.close()
                raise RuntimeError(f"redis-server exited with {self._process.returncode}: {err}")
            if self._answers():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stderr:
                self._process.stderr.close()
            self._process = None

    def cleanup(self) -> None:
        self.stop()
        self._folder.cleanup()

    def _answers(self) -> bool:
        return answers(self.port)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


_shared: RedisServer | None = None
_shared_lock = threading.Lock()


def server_url() -> str:
    """The Redis URL the tests use; starts a private server on first use when none is configured."""
    global _shared
    url = os.environ.get("OVOS_MEMORY_REDIS_URL")
    if url:
        return url
    with _shared_lock:
        if _shared is None:
            _shared = RedisServer().start()
            atexit.register(_shared.cleanup)
        return _shared.url


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    return server_url()
