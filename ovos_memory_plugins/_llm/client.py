"""A small OpenAI-compatible chat client (standard library only) with a circuit breaker.

Used by ``longterm``, ``entity`` and ``redis_memory``. It speaks the two endpoints every
local server offers (llama.cpp, llama-cpp-python, Ollama, vLLM, LM Studio):
``GET {api_url}/models`` and ``POST {api_url}/chat/completions``.

Why a breaker: the reference retries two HTTP calls on every turn while the endpoint is down,
each up to ``request_timeout`` when the host black-holes packets. Here a failure opens the
circuit for a back-off period (5 s, doubling up to 5 min); while it is open ``complete()``
raises :class:`~ovos_memory_plugins.errors.LLMUnavailable` at once, without any HTTP, so a dead
endpoint costs one attempt per period. The failure is logged once, and the recovery once.

Example::

    client = ChatClient("http://127.0.0.1:8080/v1", timeout=10)
    text = client.complete([{"role": "user", "content": "Say hi"}], max_tokens=16)

The reference module's functions :func:`chat_complete` and :func:`resolve_model` are kept.
"""
from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .._core.log import LOG, LogOnce
from ..errors import LLMError, LLMTimeout, LLMUnavailable

__all__ = ["ChatClient", "chat_complete", "resolve_model", "strip_think"]

#: ``/models`` is only a lookup: it gets a shorter timeout than a completion (as the reference).
MODELS_TIMEOUT_S = 10.0
#: A reply larger than this is not a chat answer (a misconfigured URL serving a file, say).
MAX_RESPONSE_BYTES = 4 * 1024 * 1024

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def strip_think(text: str) -> str:
    """``text`` without reasoning blocks, stripped.

    Handles ``<think>...</think>`` anywhere, a reply cut off inside an unclosed ``<think>``
    (max_tokens reached while reasoning: nothing usable follows), and a bare ``</think>``
    when the chat template opened the block in the prompt.
    """
    text = _THINK_BLOCK.sub("", text)
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    return text.strip()


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Breaker:
    """Open after a failure for a back-off period that doubles up to ``maximum``.

    When the period is over, one caller gets a trial; others still see it open until the trial
    ends, so concurrent turns never stampede a dead endpoint.
    """

    def __init__(self, initial: float, maximum: float):
        self.initial = max(0.0, initial)
        self.maximum = max(self.initial, maximum)
        self.failures = 0
        self.delay = 0.0
        self.open_until = 0.0
        self.trial = False
        self._lock = threading.Lock()

    def is_open(self) -> bool:
        with self._lock:
            return time.monotonic() < self.open_until or self.trial

    def acquire(self) -> bool:
        """True if a call may go out now (and marks a trial when recovering)."""
        with self._lock:
            if time.monotonic() < self.open_until or self.trial:
                return False
            if self.failures:
                self.trial = True
            return True

    def success(self) -> bool:
        """Close the circuit; True if it had been failing."""
        with self._lock:
            was_failing = self.failures > 0
            self.failures, self.delay, self.open_until, self.trial = 0, 0.0, 0.0, False
            return was_failing

    def failure(self) -> float:
        """Open the circuit; returns the back-off period in seconds."""
        with self._lock:
            self.failures += 1
            self.delay = self.initial if self.delay <= 0 else min(self.maximum, self.delay * 2)
            self.open_until = time.monotonic() + self.delay
            self.trial = False
            return self.delay

    def release(self) -> None:
        """End a trial without a verdict (the call failed for a reason that is not the server's)."""
        with self._lock:
            self.trial = False

    def remaining(self) -> float:
        with self._lock:
            return max(0.0, self.open_until - time.monotonic())


class ChatClient:
    """One OpenAI-compatible endpoint: model discovery, completions, JSON mode, a breaker.

    Thread-safe: the HTTP calls run outside any lock; only the breaker state is locked.

    Args:
        api_url: base URL including the version, e.g. ``http://127.0.0.1:8080/v1``.
        model: model name; empty means "ask ``/models`` once and use the first one".
        timeout: seconds for a completion request (``request_timeout`` in configs).
        api_key: sent as ``Authorization: Bearer`` when given.
        backoff: (first, maximum) seconds the circuit stays open after a failure.
    """

    def __init__(self, api_url: str | None, model: str = "", timeout: float = 30.0, api_key: str | None = None,
                 backoff: tuple[float, float] = (5.0, 300.0)):
        self.api_url = (api_url or "").strip().rstrip("/")
        self.model = model or ""
        self.timeout = float(timeout)
        self.api_key = api_key
        self._breaker = _Breaker(*backoff)
        self._resolved: str | None = None
        self._json_mode: bool | None = None  # None: not tried yet; False: the server rejected it
        self._log = LogOnce()
        #: HTTP requests sent so far (tests and benchmarks read it).
        self.attempts = 0
        # A proxy configured for the internet must not capture a server on this machine.
        handlers: list[Any] = [urllib.request.ProxyHandler({})] if _is_loopback(self.api_url) else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"ChatClient({self.api_url!r}, model={self.model or self._resolved or ''!r})"

    # -- public API ----------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """False with no endpoint configured, or while the circuit is open (a recent failure)."""
        return bool(self.api_url) and not self._breaker.is_open()

    @property
    def retry_in(self) -> float:
        """Seconds until the next attempt is allowed (0 when the circuit is closed)."""
        return self._breaker.remaining()

    def reset(self) -> None:
        """Close the circuit now (after fixing the server, or in tests)."""
        self._breaker.success()

    def resolve_model(self) -> str:
        """The configured model, else the first one ``/models`` lists (cached); "" if unknown.

        Never raises: a server that cannot list models may still accept completions.
        """
        if self.model or self._resolved is not None:
            return self.model or self._resolved or ""
        if not self.api_url or not self._breaker.acquire():
            return ""
        try:
            model = self._model_for_request()
        except LLMError as exc:
            self._on_failure(exc)
            return ""
        except BaseException:
            self._breaker.release()
            raise
        self._on_success()
        return model

    def complete(self, messages: list[dict[str, Any]], max_tokens: int = 256, json_mode: bool = False,
                 temperature: float = 0.0) -> str:
        """The assistant's reply to ``messages`` (role/content dicts), reasoning stripped.

        Raises:
            LLMUnavailable: the circuit is open, or the server refused or is unreachable.
            LLMTimeout: no answer within ``timeout``.
            LLMError: an HTTP error status or a reply that is not a chat completion.
        """
        if not self.api_url:  # configured without a model: not a failure, nothing to log
            raise LLMUnavailable("no LLM endpoint is configured (api_url is empty)")
        if not self._breaker.acquire():
            raise LLMUnavailable(f"{self.api_url}: endpoint unavailable; next try in {self.retry_in:.0f}s")
        try:
            text = self._complete(messages, max_tokens, json_mode, temperature)
        except LLMError as exc:
            self._on_failure(exc)
            raise
        except BaseException:
            self._breaker.release()  # a bug or an interrupt: never leave a trial marked as running
            raise
        self._on_success()
        return text

    # -- internals -----------------------------------------------------------------------
    def _on_success(self) -> None:
        if self._breaker.success():
            self._log.clear("endpoint", f"LLM endpoint {self.api_url} recovered")

    def _on_failure(self, exc: LLMError) -> None:
        delay = self._breaker.failure()
        self._log.warning(
            "endpoint", "LLM endpoint %s failed (%s); working without it, next try in %.3gs",
            self.api_url, exc, delay)

    def _model_for_request(self) -> str:
        if self.model:
            return self.model
        if self._resolved is not None:
            return self._resolved
        data = self._request("GET", "/models", None, min(self.timeout, MODELS_TIMEOUT_S), models=True)
        self._resolved = _first_model(data)
        if self._resolved:
            LOG.debug(f"LLM endpoint {self.api_url}: using model {self._resolved!r}")
        return self._resolved

    def _complete(self, messages: list[dict[str, Any]], max_tokens: int, json_mode: bool,
                  temperature: float) -> str:
        body: dict[str, Any] = {"messages": messages, "max_tokens": int(max_tokens), "temperature": temperature,
                                "stream": False}
        model = self._model_for_request()
        if model:
            body["model"] = model
        use_json = json_mode and self._json_mode is not False
        if use_json:
            body["response_format"] = {"type": "json_object"}
        try:
            data = self._request("POST", "/chat/completions", body, self.timeout)
        except _BadRequest as exc:
            if not use_json:
                raise LLMError(str(exc)) from exc
            # Older servers reject response_format: remember it and ask once more without it.
            self._json_mode = False
            LOG.info(f"LLM endpoint {self.api_url} does not accept JSON mode; continuing without it")
            body.pop("response_format")
            try:
                data = self._request("POST", "/chat/completions", body, self.timeout)
            except _BadRequest as exc2:
                raise LLMError(str(exc2)) from exc2
        if use_json and self._json_mode is None:
            self._json_mode = True
        return strip_think(_reply_text(data))

    def _request(self, method: str, path: str, body: dict[str, Any] | None, timeout: float,
                 models: bool = False) -> Any:
        url = self.api_url + path
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            request = urllib.request.Request(url, data=payload, headers=headers, method=method)
        except ValueError as exc:  # not a URL (no scheme): a configuration error, reported as the LLM failing
            raise LLMUnavailable(f"{url}: {exc}") from exc
        self.attempts += 1
        try:
            with self._opener.open(request, timeout=timeout) as resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            exc.close()
            if models and exc.code in (404, 405, 501):
                return {}  # no model listing here; completions may still work without a model
            if exc.code == 400:
                raise _BadRequest(f"{url}: HTTP 400 {detail}") from exc
            raise LLMError(f"{url}: HTTP {exc.code} {detail}") from exc
        except urllib.error.URLError as exc:
            raise _transport_error(url, exc.reason, timeout) from exc
        except TimeoutError as exc:
            raise LLMTimeout(f"{url}: no answer within {timeout:g}s") from exc
        except (http.client.HTTPException, ConnectionError) as exc:
            raise LLMError(f"{url}: not an HTTP answer ({type(exc).__name__}: {exc})") from exc
        except OSError as exc:
            raise _transport_error(url, exc, timeout) from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise LLMError(f"{url}: reply larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise LLMError(f"{url}: reply is not JSON ({raw[:80]!r})") from exc


class _BadRequest(LLMError):
    """HTTP 400: the server understood us and refused (an unsupported parameter, usually)."""


def _transport_error(url: str, reason: Any, timeout: float) -> LLMError:
    if isinstance(reason, (TimeoutError, socket.timeout)) or "timed out" in str(reason):
        return LLMTimeout(f"{url}: no answer within {timeout:g}s")
    return LLMUnavailable(f"{url}: {reason}")


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(400).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the detail is only for the log line
        return str(exc.reason)
    return " ".join(text.split())[:200] or str(exc.reason)


def _first_model(data: Any) -> str:
    """``data[0].id`` (OpenAI, llama.cpp) or ``models[0].name`` (Ollama); "" when absent."""
    if not isinstance(data, dict):
        return ""
    for key, field in (("data", "id"), ("models", "name")):
        items = data.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and isinstance(item.get(field), str) and item[field]:
                    return item[field]
    return ""


def _reply_text(data: Any) -> str:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"reply is not a chat completion: {str(data)[:120]}") from exc
    if content is None:
        return ""  # reasoning models may answer with reasoning only
    if not isinstance(content, str):
        raise LLMError(f"reply content is a {type(content).__name__}, not text")
    return content


# -- the reference module's functions ---------------------------------------------------
_clients: dict[tuple[str, str, float, str | None], ChatClient] = {}
_clients_lock = threading.Lock()


def _shared_client(api_url: str, model: str, timeout: float, api_key: str | None) -> ChatClient:
    # One client per endpoint and settings, so these stateless-looking calls share a breaker.
    key = (api_url.rstrip("/"), model or "", float(timeout), api_key)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if len(_clients) > 64:
                _clients.clear()
            client = _clients[key] = ChatClient(api_url, model, timeout, api_key)
        return client


def chat_complete(api_url: str, model: str, messages: list[dict[str, Any]], max_tokens: int = 256,
                  timeout: float = 30.0, api_key: str | None = None, json_mode: bool = False) -> str:
    """One chat completion (reference-compatible); raises :class:`~ovos_memory_plugins.errors.LLMError`."""
    return _shared_client(api_url, model, timeout, api_key).complete(messages, max_tokens, json_mode)


def resolve_model(api_url: str, timeout: float = MODELS_TIMEOUT_S, api_key: str | None = None) -> str:
    """The first model the server lists, or "" (never raises), as the reference's helper."""
    return _shared_client(api_url, "", timeout, api_key).resolve_model()
