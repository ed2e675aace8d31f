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

Modes: ``"ok"``, ``"slow"``, ``"trickle"`` (the headers at once, then the body one byte every
``delay`` seconds: no single read waits long, the whole answer does), ``"error"`` (500),
``"malformed"`` (200 with a body that is not JSON), ``"garbage"`` (bytes that are not HTTP at
all), ``"bad_shape"`` (JSON without ``choices``), ``"closed"`` (connection refused, like
``close_socket()``; setting another mode listens again on the same port). Replies come from
``replies`` in order, then from ``reply`` (a string or a function of the request's messages),
else ``"OK"``.

It can also behave like the servers the memories meet, to reproduce what they do:

* ``structured``: which ``response_format`` it accepts: ``"openai"`` (``json_schema`` and
  ``json_object``), ``"llama-cpp-python"`` (``json_schema`` is an HTTP 500 validation error,
  ``{"type": "json_object", "schema": ...}`` works), ``"json_object"`` (only that type, extra
  keys ignored; anything else is a 400), ``"none"`` (any ``response_format`` is a 400, as ``json_mode=False``) or
  ``"ignore"`` (accepts anything, applies nothing).
* ``context``: the model's context in tokens; a longer request (estimated prompt plus
  ``max_tokens``) is the HTTP 400 ``context_length_exceeded`` OpenAI-compatible servers send.
* ``props``: what ``GET /props`` answers (llama.cpp's server reports ``n_ctx`` there); None: 404.
* ``system_role``: False answers a request holding a system message, or whose roles do not
  alternate user/assistant from a user message, with the HTTP 500 llama-cpp-python sends for
  Gemma's chat template ("System role not supported").
* ``thinks``: a reasoning model (Qwen3's habit): unless the last user message ends with
  "/no_think", it thinks until ``max_tokens`` runs out (an unclosed ``<think>``, finish reason
  "length", no answer); told not to, its reply opens with an empty think block.
* ``finish_reason``: of every reply ("length" for a reply cut by ``max_tokens``); every reply
  carries ``usage`` with our estimate of its prompt.
* ``stream``: how a ``"stream": true`` request is answered: ``"ok"`` (the reply in pieces, then
  a chunk with the finish reason, then ``[DONE]``), ``"cut"`` (pieces of the reply, then
  ``[DONE]`` with no finish reason: what llama-cpp-python sends when another request interrupts
  a stream) or ``"empty"`` (a finish reason and no text).
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

from .._core.tokens import estimate_messages, estimate_tokens

__all__ = ["closed_port_url", "FakeLLMServer", "free_port", "LoggedRequest"]

MODES = ("ok", "slow", "trickle", "error", "malformed", "garbage", "bad_shape", "closed")
STRUCTURED = ("openai", "llama-cpp-python", "json_object", "none", "ignore")
STREAMS = ("ok", "cut", "empty")

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
        delay: seconds ``"slow"`` mode waits before answering (``"trickle"``: between bytes).
        json_mode: False makes the server reject ``response_format`` with HTTP 400, as older
            servers do (``structured="none"``).
        structured, context, props, finish_reason, stream: see the module docstring.
    """

    def __init__(self, replies: Iterable[str] = (), reply: Reply | None = None, model: str | None = "fake-model",
                 mode: str = "ok", delay: float = 0.0, json_mode: bool = True, structured: str = "openai",
                 context: int | None = None, props: dict[str, Any] | None = None, finish_reason: str = "stop",
                 stream: str = "ok", system_role: bool = True, thinks: bool = False):
        if structured not in STRUCTURED:
            raise ValueError(f"unknown structured {structured!r}; choose one of {STRUCTURED}")
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}; choose one of {STREAMS}")
        self._replies = list(replies)
        self.reply = reply
        self.model = model
        self._mode = "ok"
        self.delay = delay
        self.structured = structured if json_mode else "none"
        self.context = context
        self.props = props
        self.finish_reason = finish_reason
        self.stream = stream
        self.system_role = system_role
        self.thinks = thinks
        self.requests: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._closed_by_mode = False
        self.mode = mode

    @property
    def json_mode(self) -> bool:
        """False: every ``response_format`` is refused with HTTP 400 (``structured = "none"``)."""
        return self.structured != "none"

    @json_mode.setter
    def json_mode(self, value: bool) -> None:
        self.structured = "openai" if value else "none"

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


def _refusal(structured: str, shape: Any) -> tuple[int, dict[str, Any]] | None:
    """How a server of kind ``structured`` refuses ``response_format`` ``shape`` (None: accepted)."""
    if shape is None or structured in ("openai", "ignore"):
        return None
    kind = shape.get("type") if isinstance(shape, dict) else None
    if structured == "none":
        return 400, {"error": {"message": "response_format is not supported"}}
    if structured == "llama-cpp-python" and kind != "json_object":
        # pydantic's validation error, answered as a 500 by llama-cpp-python 0.3
        return 500, {"error": {"message": f"[{{'type': 'literal_error', 'loc': ('body', 'response_format', "
                                          f"'type'), 'msg': \"Input should be 'text' or 'json_object'\", "
                                          f"'input': '{kind}'}}]", "type": "internal_server_error"}}
    if structured == "json_object" and kind != "json_object":
        return 400, {"error": {"message": "Unrecognized response_format"}}
    return None


def _thought(messages: list[dict[str, Any]], text: str, max_tokens: int, finish: str) -> tuple[str, str]:
    """A reasoning model's reply: thoughts until ``max_tokens`` runs out, unless told not to."""
    last_user: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    if str(last_user.get("content") or "").rstrip().endswith("/no_think"):
        return f"<think>\n\n</think>\n\n{text}", finish
    thoughts = "<think>\nOkay, let me think about what the user said." + " Hmm, let me consider it." * 400
    return thoughts[: max(16, max_tokens * 4)], "length"


def _gemma_template_error(messages: list[dict[str, Any]]) -> str | None:
    """What Gemma's chat template raises for ``messages`` (None: it renders them)."""
    roles = [m.get("role") for m in messages]
    if "system" in roles:
        return "System role not supported"
    if any(role != ("user" if i % 2 == 0 else "assistant") for i, role in enumerate(roles)):
        return "Conversation roles must alternate user/assistant/user/assistant/..."
    return None


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
        elif self.command == "GET" and self.path.rstrip("/").endswith("/props"):
            self._props(owner)
        elif self.command == "POST" and self.path.rstrip("/").endswith("/chat/completions"):
            self._chat(owner, body or {})
        else:
            self._send(404, {"error": {"message": f"no route {self.command} {self.path}"}})

    def _props(self, owner: FakeLLMServer) -> None:
        if owner.props is None:
            self._send(404, {"error": {"message": "not found"}})
        else:
            self._send(200, owner.props)

    def _models(self, owner: FakeLLMServer) -> None:
        if owner.model is None:
            self._send(404, {"error": {"message": "not found"}})
        else:
            self._send(200, {"object": "list", "data": [{"id": owner.model, "object": "model"}]})

    def _chat(self, owner: FakeLLMServer, body: dict[str, Any]) -> None:
        refusal = _refusal(owner.structured, body.get("response_format"))
        if refusal is not None:
            self._send(*refusal)
            return
        if owner.mode == "bad_shape":
            self._send(200, {"object": "chat.completion", "result": "no choices here"})
            return
        messages = body.get("messages") or []
        template_error = None if owner.system_role else _gemma_template_error(messages)
        if template_error:
            self._send(500, {"error": {"message": template_error, "type": "internal_server_error"}})
            return
        prompt_tokens = estimate_messages(messages)
        if owner.context and prompt_tokens + int(body.get("max_tokens") or 0) > owner.context:
            self._send(400, {"error": {
                "message": f"This model's maximum context length is {owner.context} tokens. However, you requested "
                           f"{prompt_tokens + int(body.get('max_tokens') or 0)} tokens ({prompt_tokens} in the "
                           f"messages, {body.get('max_tokens')} in the completion). Please reduce the length of the "
                           "messages or completion.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
            return
        text, finish = owner._next_reply(messages), owner.finish_reason
        if owner.thinks:
            text, finish = _thought(messages, text, int(body.get("max_tokens") or 0), finish)
        if body.get("stream"):
            self._stream(owner, text)
            return
        self._send(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or owner.model or "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": estimate_tokens(text),
                      "total_tokens": prompt_tokens},
        })

    def _stream(self, owner: FakeLLMServer, text: str) -> None:
        pieces = [] if owner.stream == "empty" else [text[i:i + 8] for i in range(0, len(text), 8)]
        if owner.stream == "cut":
            pieces = pieces[: max(1, len(pieces) // 2)]
        chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                                        for p in pieces]
        if owner.stream != "cut":
            chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": owner.finish_reason}]})
        payload = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload.encode("utf-8"))))
            self.end_headers()
            self.wfile.write(payload.encode("utf-8"))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: int, data: Any) -> None:
        self._send_raw(status, json.dumps(data).encode("utf-8"))

    def _send_raw(self, status: int, payload: bytes) -> None:
        owner = self.server.owner
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if owner.mode != "trickle":
                self.wfile.write(payload)
                return
            for i in range(len(payload)):
                self.wfile.write(payload[i:i + 1])
                self.wfile.flush()
                if owner._stopping.wait(owner.delay):
                    return
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to answer
