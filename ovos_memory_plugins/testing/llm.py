"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks (stdlib only).

It speaks ``GET /v1/models`` and ``POST /v1/chat/completions`` over a real socket, so the
client's timeouts, error mapping and circuit breaker are exercised for real, and it can be
switched at run time to misbehave::

    with FakeLLMServer(replies=["a summary"]) as llm:
        memory = LongTermMemory({"api_url": llm.url, ...})
        llm.mode = "error"          # every request answers HTTP 500
        llm.mode = "slow"           # wait ``delay`` seconds, then answer
        llm.close_socket()          # connection refused (``reopen()`` brings it back)
        assert llm.count("/chat/completions") == 1

Modes: ``"ok"``, ``"slow"``, ``"error"`` (500), ``"malformed"`` (200 with a body that is not
JSON), ``"garbage"`` (bytes that are not HTTP at all), ``"bad_shape"`` (JSON without
``choices``), ``"closed"`` (connection refused, like ``close_socket()``; setting another mode
listens again on the same port). Replies come from ``replies`` in order, then from ``reply`` (a string or a
function of the request's messages), else ``"OK"``.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

__all__ = ["FakeLLMServer", "LoggedRequest", "closed_port_url", "free_port"]

MODES = ("ok", "slow", "error", "malformed", "garbage", "bad_shape", "closed")

Reply = Union[str, Callable[[list[dict[str, Any]]], str]]  # noqa: UP007 - evaluated at run time on 3.10


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port_url() -> str:
    """An ``api_url`` whose connections are refused at once (no server, no waiting)."""
    return f"http://127.0.0.1:{free_port()}/v1"


@dataclass
class LoggedRequest:
    method: str
    path: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    time: float = 0.0

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def prompt(self) -> str:
        """The text of the last message (what a summary or extraction request asks)."""
        msgs = self.messages
        return str(msgs[-1].get("content", "")) if msgs else ""


class FakeLLMServer:
    """An OpenAI-compatible chat server with switchable failure modes; see the module docstring.

    Args:
        replies: answers used in order, one per completion.
        reply: the answer once ``replies`` is used up: a string or ``fn(messages) -> str``.
        model: the model ``/v1/models`` lists (``None``: the listing answers 404).
        mode: one of ``MODES``.
        delay: seconds ``"slow"`` mode waits before answering.
        json_mode: False makes the server reject ``response_format`` with HTTP 400, as older
            servers do.
    """

    def __init__(self, replies: Iterable[str] = (), reply: Reply | None = None, model: str | None = "fake-model",
                 mode: str = "ok", delay: float = 0.0, json_mode: bool = True):
        self._replies = list(replies)
        self.reply = reply
        self.model = model
        self._mode = "ok"
        self.delay = delay
        self.json_mode = json_mode
        self.requests: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._closed_by_mode = False
        self.mode = mode

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"unknown mode {value!r}; choose one of {MODES}")
        self._mode = value
        if value == "closed" and self._server is not None:
            self._closed_by_mode = True
            self.close_socket()
        elif value != "closed" and self._closed_by_mode:
            self._closed_by_mode = False
            self.reopen()

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        if self._server is not None:
            return self
        if self._mode == "closed":
            if self.port == 0:
                self.port = free_port()  # a URL that refuses connections until another mode is set
            self._closed_by_mode = True
            return self
        self._stopping.clear()
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.owner = self
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-llm-{self.port}", daemon=True)
        self._thread.start()
        return self

    def close_socket(self) -> None:
        """Stop listening: new connections are refused until :meth:`reopen`."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # slow handlers give up their wait
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def reopen(self) -> FakeLLMServer:
        """Listen again on the same port."""
        return self.start()

    stop = close_socket

    def close(self) -> None:
        self.close_socket()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what tests read and set -----------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add_replies(self, *replies: str) -> None:
        with self._lock:
            self._replies.extend(replies)

    def count(self, path: str | None = None) -> int:
        """Requests received so far, all or those whose path ends with ``path``."""
        with self._lock:
            return sum(1 for r in self.requests if path is None or r.path.endswith(path))

    def chat_requests(self) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- used by the handler -----------------------------------------------------------------
    def _log(self, entry: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(entry)

    def _next_reply(self, messages: list[dict[str, Any]]) -> str:
        with self._lock:
            if self._replies:
                return self._replies.pop(0)
        if callable(self.reply):
            return str(self.reply(messages))
        return "OK" if self.reply is None else str(self.reply)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FakeLLMServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle(None)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            self._send(400, {"error": {"message": "request body is not JSON"}})
            return
        self._handle(body)

    def _handle(self, body: Any) -> None:
        owner = self.server.owner
        owner._log(LoggedRequest(self.command, self.path, body, dict(self.headers.items()), time.time()))
        mode = owner.mode
        if mode == "slow" and owner._stopping.wait(owner.delay):
            return
        if mode == "garbage":
            self.wfile.write(b"this is not an HTTP response\r\n\r\n")
            self.close_connection = True
            return
        if mode == "error":
            self._send(500, {"error": {"message": "internal error (fake)"}})
        elif mode == "malformed":
            self._send_raw(200, b'{"choices": [{"message": {"content": "trunc')
        elif self.command == "GET" and self.path.rstrip("/").endswith("/models"):
            self._models(owner)
        elif self.command == "POST" and self.path.rstrip("/").endswith("/chat/completions"):
            self._chat(owner, body or {})
        else:
            self._send(404, {"error": {"message": f"no route {self.command} {self.path}"}})

    def _models(self, owner: FakeLLMServer) -> None:
        if owner.model is None:
            self._send(404, {"error": {"message": "not found"}})
        else:
            self._send(200, {"object": "list", "data": [{"id": owner.model, "object": "model"}]})

    def _chat(self, owner: FakeLLMServer, body: dict[str, Any]) -> None:
        if "response_format" in body and not owner.json_mode:
            self._send(400, {"error": {"message": "response_format is not supported"}})
            return
        if owner.mode == "bad_shape":
            self._send(200, {"object": "chat.completion", "result": "no choices here"})
            return
        messages = body.get("messages") or []
        text = owner._next_reply(messages)
        self._send(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or owner.model or "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        })

    def _send(self, status: int, data: Any) -> None:
        self._send_raw(status, json.dumps(data).encode("utf-8"))

    def _send_raw(self, status: int, payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to answer
