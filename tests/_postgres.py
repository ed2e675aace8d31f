"""The PostgreSQL the tests use: ``$OVOS_MEMORY_POSTGRES_URL`` (scripts/servers.sh starts a private
one, PostgreSQL 16 with pgvector from the pgserver wheel). Tests marked ``postgres`` are deselected
without it (tests/conftest.py), and fail instead when ``OVOS_MEMORY_REQUIRE_POSTGRES`` is set, as
in CI.

Each store gets a schema of its own, named in the URL's ``search_path`` (the package creates it),
so every test starts empty and a reopened store (a crash test's restart) finds its own rows:
``fresh_url()`` names a new schema, ``folder_url(folder)`` the one of a store folder.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import select
import socket
import time
import uuid
from pathlib import Path
from typing import Any

URL_ENV = "OVOS_MEMORY_POSTGRES_URL"

#: The entry points that can keep their state in PostgreSQL (``db_url``).
POSTGRES_ENTRY_POINTS = frozenset({
    "ovos-memory-plugin-short-term", "ovos-memory-plugin-recency", "ovos-memory-plugin-lexical",
    "ovos-memory-plugin-local-rag", "ovos-memory-plugin-longterm", "ovos-memory-plugin-entity",
    "ovos-memory-plugin-composite",
})


def server_url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        raise RuntimeError(f"{URL_ENV} is not set: run the tests through scripts/with-servers")
    return url


def schema_url(schema: str) -> str:
    """The server URL with ``schema`` first on the search path (pgvector's ``public`` after it)."""
    base = server_url()
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema},public"


def fresh_url() -> str:
    return schema_url(f"t_{uuid.uuid4().hex[:16]}")


def folder_url(folder: Path | str) -> str:
    """The schema of a store folder: the same URL in every process that opens that folder."""
    return schema_url("f_" + hashlib.blake2b(str(Path(folder).resolve()).encode(), digest_size=8).hexdigest())


def schema_of(url: str) -> str:
    return url.rsplit("search_path%3D", 1)[1].split(",", 1)[0]


def connect(url: str | None = None) -> Any:
    import psycopg

    return psycopg.connect(url or server_url(), autocommit=True)


def schema_cells(url: str) -> list[tuple[str, str]]:
    """(table, text) of every non-null cell of every table of ``url``'s schema, read as text."""
    schema = schema_of(url)
    out: list[tuple[str, str]] = []
    with connect() as con:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))]
        for table in tables:
            for row in con.execute(f'SELECT t::text FROM "{schema}"."{table}" AS t'):
                out.append((f"postgres:{table}", row[0]))
    return out


class RoundTrips:
    """A Unix-socket proxy in front of the test server that counts round trips.

    A round trip is the client speaking after the server last spoke (however many packets either
    sends in between): what a statement costs in latency on a real network, whatever psycopg's
    internals do. ``url(schema_url)`` is that URL through the proxy; ``count`` the round trips
    since the last ``reset()``. ``cut()`` is an outage: every connection through it is closed
    and new ones are closed at once, until ``restore()``. ``hang()`` is a server that is alive
    but hung (its process stopped): connections stay open and new ones are accepted, but nothing
    goes through either way until ``restore()``. ``cut_at(marker)`` makes the outage begin as
    the client sends bytes holding ``marker`` (they never reach the server): a connection lost
    at that statement.
    """

    def __init__(self, folder: Path):
        import socket
        import threading
        import urllib.parse

        parts = urllib.parse.urlsplit(server_url())
        query = urllib.parse.parse_qs(parts.query)
        port = parts.port or int(query.get("port", ["5432"])[0])
        self._target = os.path.join(query["host"][0], f".s.PGSQL.{port}")
        self._folder, self._port = str(folder), port
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.path.join(self._folder, f".s.PGSQL.{port}"))
        self._listener.listen(16)
        self._lock = threading.Lock()
        self._last: dict[int, str] = {}
        self._down, self._hung, self._closed, self._generation = False, False, False, 0
        self._cut_marker: bytes | None = None
        self._prepared: dict[bytes, set[bytes]] = {}  # statement text -> names it was prepared as
        self.count = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        return url.replace(url.split("host=", 1)[1].split("&", 1)[0], self._folder)

    def reset(self) -> None:
        with self._lock:
            self.count = 0

    def cut(self) -> None:
        with self._lock:
            self._down = True
            self._generation += 1  # every connection made before this ends at its next look

    def cut_at(self, marker: bytes) -> None:
        with self._lock:
            self._cut_marker = marker

    def _carries(self, data: bytes, marker: bytes) -> bool:
        """Whether ``data`` sends the statement ``marker``, as text or by the name psycopg gave it
        when it prepared it (a frequent statement is parsed once, then only named)."""
        return marker in data or any(b"\x00" + name + b"\x00" in data for name in self._prepared.get(marker, ()))

    def hang(self) -> None:
        with self._lock:
            self._hung = True

    def restore(self) -> None:
        with self._lock:
            self._down = self._hung = False

    def close(self) -> None:
        self._closed = True
        self.cut()

    def _live(self, generation: int) -> bool:
        return not self._closed and generation == self._generation

    def _accept(self) -> None:
        import threading

        while not self._closed:
            if not select.select([self._listener], [], [], 0.05)[0]:
                continue
            client, _ = self._listener.accept()
            with self._lock:
                down, generation = self._down, self._generation
            if down:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._target)
            key = id(client)
            for src, dst, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(target=self._pipe, args=(src, dst, side, key, generation), daemon=True).start()
        self._listener.close()

    def _pipe(self, src: Any, dst: Any, side: str, key: int, generation: int) -> None:
        # Reads wait in select with a short timeout, so a cut ends both directions of a connection
        # within 50 ms (a socket closed under a blocked recv would not wake it, and its peer would
        # never see the end).
        while self._live(generation):
            if self._hung:  # bytes wait in the kernel's buffers, as they do for a stopped server
                time.sleep(0.05)
                continue
            try:
                if not select.select([src], [], [], 0.05)[0] or self._hung:  # hung while it waited
                    continue
                data = src.recv(65536)
            except (OSError, ValueError):  # closed by the other direction
                break
            if not data:
                break
            with self._lock:
                if side == "client":
                    for found in re.finditer(rb"P.{4}([^\x00]+)\x00([^\x00]+)\x00", data, re.S):
                        self._prepared.setdefault(found.group(2), set()).add(found.group(1))
                if side == "client" and self._cut_marker is not None and self._carries(data, self._cut_marker):
                    self._cut_marker, self._down = None, True
                    self._generation += 1
                    break
                if side == "client" and self._last.get(key) != "client":
                    self.count += 1
                self._last[key] = side
            try:
                dst.sendall(data)
            except OSError:
                break
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the peer sees the end even while the other thread reads
            sock.close()
