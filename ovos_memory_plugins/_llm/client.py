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

import dataclasses
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
from collections.abc import Callable
from typing import Any, TypeVar

from .._core.log import LOG, LogOnce
from .._core.tokens import estimate_messages
from ..errors import LLMContextOverflow, LLMError, LLMTimeout, LLMUnavailable
from ..messages import without_surrogates
from .deadline import Deadline, build_opener
from .traits import (
    DEFAULT_CONTEXT,
    MODES,
    Traits,
    is_rejection,
    overflow_limit,
    refuses_system_role,
    response_format,
    satisfies,
    traits_for,
    without_system_role,
)

T = TypeVar("T")

__all__ = ["ChatClient", "Completion", "chat_complete", "resolve_model", "strip_think"]

#: :func:`resolve_model`'s default, as the reference's helper. A client asks ``/models`` with its
#: own ``request_timeout``: a server busy with another completion (the persona's own chat on a
#: one-slot local server) queues the lookup behind it, and the user's timeout says how long is fine.
MODELS_TIMEOUT_S = 10.0
#: A reply larger than this is not a chat answer (a misconfigured URL serving a file, say).
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: Asking the server for its context size is a hint, never worth a long wait.
PROBE_TIMEOUT_S = 3.0
#: A server that answers a completion, but slower than ``request_timeout``, is asked again at
#: once with twice as long, up to this many times ``request_timeout`` (a bigger model on a small
#: board); connecting stays bounded by ``request_timeout``.
SLOW_SERVER_PATIENCE = 4
#: Our token estimate is within about 5% of real tokenizers on whole requests; 10% more is kept free.
PROMPT_MARGIN = 1.10
#: Tokens added to a request's ``max_tokens`` for a model known to reason before it answers
#: (within what its context leaves): the thoughts that no "/no_think" turns off come first.
THINK_ALLOWANCE = 256
#: Qwen3's switch, at the end of a user message: answer without thinking first.
NO_THINK = "/no_think"

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


@dataclasses.dataclass(frozen=True)
class Completion:
    """One reply: its text (reasoning stripped) and what the server said about it.

    ``finish_reason`` is "stop", "length" (cut by ``max_tokens`` or by the context), or None
    when the server did not say; the token counts are None when the server sent no ``usage``.
    """

    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: The model reasoned before answering (thoughts in ``reasoning_content`` or a think block).
    reasoned: bool = False

    @property
    def cut(self) -> bool:
        """The reply stopped at a token limit, not where the model ended it."""
        return self.finish_reason == "length"


class ChatClient:
    """One OpenAI-compatible endpoint: model discovery, completions, structured output, a breaker.

    Thread-safe: the HTTP calls run outside any lock; only the breaker state is locked. What
    the endpoint shows about itself (the response format it honours, its context size, its
    tokenizer's ratio to our estimate) is learnt once and shared by every client of the same
    endpoint and model (:mod:`~ovos_memory_plugins._llm.traits`).

    Args:
        api_url: base URL including the version, e.g. ``http://127.0.0.1:8080/v1``.
        model: model name; empty means "ask ``/models`` once and use the first one".
        timeout: seconds for a completion request (``request_timeout`` in configs).
        api_key: sent as ``Authorization: Bearer`` when given.
        backoff: (first, maximum) seconds the circuit stays open after a failure.
        max_prompt_tokens: the model's context size in tokens, when the config knows it.
        owner: who uses the client (a plugin name), for log lines.
        think_less: memory work: a model seen reasoning is asked not to (:data:`NO_THINK`), with
            room for thoughts it has anyway. False for a person's own chat, sent as written.
    """

    def __init__(self, api_url: str | None, model: str = "", timeout: float = 30.0, api_key: str | None = None,
                 backoff: tuple[float, float] = (5.0, 300.0), max_prompt_tokens: int | None = None,
                 owner: str = "", think_less: bool = True):
        self.api_url = (api_url or "").strip().rstrip("/")
        self.model = model or ""
        self.timeout = float(timeout)
        self._patience = 1  # times ``timeout`` a completion may take (SLOW_SERVER_PATIENCE)
        self.api_key = api_key
        self.max_prompt_tokens = max_prompt_tokens or None
        self.owner = owner
        self.think_less = think_less
        self._breaker = _Breaker(*backoff)
        self._resolved: str | None = None
        self._json_mode: bool | None = None  # None: not tried yet; False: the server rejected it
        self._log = LogOnce()
        self._overflows = 0  # requests the server refused as longer than its context
        self._problem: str | None = None
        self._answered = False  # a completion succeeded: the server is worth asking about itself
        #: HTTP requests sent so far (tests and benchmarks read it).
        self.attempts = 0
        # A proxy configured for the internet must not capture a server on this machine.
        handlers: list[Any] = [urllib.request.ProxyHandler({})] if _is_loopback(self.api_url) else []
        self._opener = build_opener(*handlers)

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

    @property
    def completion_timeout(self) -> float:
        """Seconds a completion request may take now: ``timeout``, longer for a slow server."""
        return self.timeout * self._patience

    @property
    def problem(self) -> str | None:
        """Why the endpoint is not being used right now (its last failure), or None while it works."""
        return self._problem

    @property
    def traits(self) -> Traits:
        """What this endpoint has shown about itself (shared with its other clients)."""
        return traits_for(self.api_url, self.model or self._resolved or "")

    def reset(self) -> None:
        """Close the circuit now (after fixing the server, or in tests)."""
        self._breaker.success()
        self._problem = None

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
            LLMContextOverflow: the request is longer than the model's context.
            LLMError: an HTTP error status or a reply that is not a chat completion.
        """
        return self.chat(messages, max_tokens, temperature, json_mode=json_mode).text

    def chat(self, messages: list[dict[str, Any]], max_tokens: int = 256, temperature: float = 0.0,
             schema: dict[str, Any] | None = None, json_mode: bool = False) -> Completion:
        """Like :meth:`complete`, with the reply's finish reason and token counts.

        With ``schema`` (a JSON schema of an object), the reply is asked for in the best
        structured-output mode the endpoint honours, found on first use and remembered; a
        server that supports none still gets the request, without ``response_format``, so the
        prompt must describe the shape and the caller must parse the reply tolerantly.
        """
        if not self.api_url:  # configured without a model: not a failure, nothing to log
            raise LLMUnavailable("no LLM endpoint is configured (api_url is empty)")
        if not self._breaker.acquire():
            raise LLMUnavailable(f"{self.api_url}: endpoint unavailable; next try in {self.retry_in:.0f}s")
        try:
            completion = self._patiently(lambda: self._chat(messages, max_tokens, temperature, schema, json_mode))
        except LLMContextOverflow as exc:
            self._breaker.release()  # the request was too long; the endpoint is fine
            self._say_overflow(exc)
            raise
        except LLMError as exc:
            self._on_failure(exc)
            raise
        except BaseException:
            self._breaker.release()  # a bug or an interrupt: never leave a trial marked as running
            raise
        self._on_success()
        self._answered = True  # a completion, not a model listing: only then is the server probed
        self._note_blank(completion)
        return completion

    def _say_overflow(self, exc: LLMContextOverflow) -> None:
        """The first overflow teaches the client the context (the request is rebuilt smaller);
        one after that means the requests do not fit even so: said once, as any failure is."""
        self._overflows += 1
        if self._overflows > 1:
            self._log.warning("overflow", "%sLLM endpoint %s: memory requests keep exceeding the model's context "
                              "(%s tokens); those turns are read without the model: give the server a larger "
                              "context (llama.cpp: -c 4096)", self._who, self.api_url, exc.limit or "unknown")

    def context_limit(self) -> int:
        """The model's context size in tokens: configured, told by the server, learnt, or a safe default.

        The server is asked once per endpoint (llama.cpp's ``/props``, vLLM's ``/models``),
        briefly, once it has answered a completion (a dead endpoint costs no probe), and only as
        a hint: a failure there is not an endpoint failure.
        """
        if self.max_prompt_tokens:
            return self.max_prompt_tokens
        traits = self.traits
        if traits.context is None and not traits.probed and self._answered:
            traits.probed = True
            found = self._probe_context()
            if found:
                traits.learn_context(found, "server")
        return traits.context or DEFAULT_CONTEXT

    def estimate_prompt(self, messages: list[dict[str, Any]]) -> int:
        """Our estimate of the request's prompt tokens, scaled to what this endpoint has reported."""
        return int(estimate_messages(messages) * self.traits.ratio) + 1

    def fits(self, messages: list[dict[str, Any]], max_tokens: int) -> bool:
        """Whether the request and a reply of ``max_tokens`` fit the context, with a margin for error."""
        return max_tokens <= self.reply_room(messages)

    def reply_room(self, messages: list[dict[str, Any]]) -> int:
        """The tokens the context leaves for the reply to ``messages``, with a margin for error."""
        return int(self.context_limit() - self.estimate_prompt(messages) * PROMPT_MARGIN)

    # -- internals -----------------------------------------------------------------------
    def _on_success(self) -> None:
        if self._breaker.success():
            self._problem = None
            self._log.clear("endpoint", f"{self._who}LLM endpoint {self.api_url} recovered")

    def _on_failure(self, exc: LLMError) -> None:
        delay = self._breaker.failure()
        self._problem = f"LLM endpoint {self.api_url} failed ({exc})"
        self._log.warning(
            "endpoint", "%sLLM endpoint %s failed (%s); working without it, next try in %.3gs",
            self._who, self.api_url, exc, delay)

    def _patiently(self, request: Callable[[], T]) -> T:
        """``request()``, asked again at once with twice the time while the server answers, but
        slower than the time it had (up to ``SLOW_SERVER_PATIENCE``; the longer time stays).

        Every timeout wastes a whole generation: a server that is merely slow (a bigger model, a
        busy board) would time out on every request and never teach the memory anything, and
        each request it was too slow for would go to the offline fallback. One that cannot be
        reached never gets here (connecting stays bounded by ``timeout``).
        """
        while True:
            try:
                return request()
            except _SlowAnswer:
                if self._patience >= SLOW_SERVER_PATIENCE:
                    raise
                self._patience = min(self._patience * 2, SLOW_SERVER_PATIENCE)
                # Said as information: if the longer time fails too, the failure is logged (once).
                LOG.info(f"{self._who}LLM endpoint {self.api_url} answers slower than its request_timeout "
                         f"({self.timeout:g} s); asking again, its requests now get up to "
                         f"{self.completion_timeout:g} s")

    def _note_blank(self, completion: Completion) -> None:
        # No caller asks for an empty reply: a model answering with nothing (a reasoning model
        # spending max_tokens on its thoughts, a broken template) teaches the memory nothing, and
        # the user should hear it once, not find out from a memory that never learns.
        if completion.text.strip():
            self._log.clear("blank", f"{self._who}LLM endpoint {self.api_url} answers with text again")
            return
        self._log.warning("blank", "%sLLM endpoint %s answered with no text (finish reason %s); nothing is "
                          "learnt from such replies%s", self._who, self.api_url, completion.finish_reason,
                          " (raise the max tokens)" if completion.cut else "")

    @property
    def _who(self) -> str:
        return f"{self.owner}: " if self.owner else ""

    def _model_for_request(self) -> str:
        if self.model:
            return self.model
        if self._resolved is not None:
            return self._resolved
        data = self._request("GET", "/models", None, self.timeout, models=True)
        self._resolved = _first_model(data)
        if self._resolved:
            LOG.debug(f"LLM endpoint {self.api_url}: using model {self._resolved!r}")
        return self._resolved

    def _chat(self, messages: list[dict[str, Any]], max_tokens: int, temperature: float,
              schema: dict[str, Any] | None, json_mode: bool, allowance: bool = True) -> Completion:
        model = self._model_for_request()
        traits = self.traits  # the model's: found by the line above
        sent = messages if traits.system_role else without_system_role(messages)
        asked = int(max_tokens)
        if traits.thinks and self.think_less:
            sent = _without_thinking(sent)
            if allowance:
                asked = max(asked, min(asked + THINK_ALLOWANCE, self.reply_room(sent)))
        body: dict[str, Any] = {"messages": sent, "max_tokens": asked, "temperature": temperature, "stream": False}
        if model:
            body["model"] = model
        estimated = estimate_messages(messages)
        try:
            if schema is not None:
                data, mode = self._structured(body, schema, traits)
            else:
                data, mode = self._json_or_plain(body, json_mode), ""
        except LLMContextOverflow:
            if asked == int(max_tokens):
                raise
            # The room left for thoughts was more than the context holds: without it.
            return self._chat(messages, max_tokens, temperature, schema, json_mode, allowance=False)
        completion = _completion(data)
        traits.observe_prompt(estimated, completion.prompt_tokens)
        if completion.reasoned and not traits.thinks:
            # A reasoning model (Qwen3, DeepSeek-R1's distillations): memory work needs no thoughts,
            # and a small max_tokens spent on them leaves no answer. Learnt once, for every request.
            traits.thinks = True
            LOG.info(f"LLM endpoint {self.api_url}: the model reasons before it answers; memory requests now "
                     f"ask it not to ({NO_THINK}) and leave it {THINK_ALLOWANCE} more tokens")
            if self.think_less and not completion.text.strip():
                return self._chat(messages, max_tokens, temperature, schema, json_mode)
        if mode:
            traits.answered(mode, satisfies(completion.text, schema))
        return completion

    def _structured(self, body: dict[str, Any], schema: dict[str, Any], traits: Traits) -> tuple[Any, str]:
        """The reply in the best mode the endpoint honours; a refused mode is replaced at once."""
        for _ in range(len(MODES) + 1):
            mode = traits.mode
            request = dict(body)
            shape = response_format(mode, schema)
            if shape is not None:
                request["response_format"] = shape
            try:
                return self._post_chat(request), mode
            except _HTTPStatus as exc:
                if shape is None or not is_rejection(exc.status, exc.detail):
                    raise
                following = traits.rejected(mode)
                LOG.info(f"LLM endpoint {self.api_url} refused response_format mode {mode!r} "
                         f"(HTTP {exc.status}); trying {following!r}")
        raise LLMError(f"{self.api_url}: every response_format mode was refused")

    def _json_or_plain(self, body: dict[str, Any], json_mode: bool) -> Any:
        use_json = json_mode and self._json_mode is not False
        if use_json:
            body["response_format"] = {"type": "json_object"}
        try:
            data = self._post_chat(body)
        except _HTTPStatus as exc:
            if not use_json or not is_rejection(exc.status, exc.detail):
                raise
            # Older servers reject response_format: remember it and ask once more without it.
            self._json_mode = False
            LOG.info(f"LLM endpoint {self.api_url} does not accept JSON mode; continuing without it")
            body.pop("response_format")
            data = self._post_chat(body)
        if use_json and self._json_mode is None:
            self._json_mode = True
        return data

    def _probe_context(self) -> int | None:
        """The context size the server reports, if it reports one (never raises)."""
        root = self.api_url[:-3] if self.api_url.endswith("/v1") else self.api_url
        for url, read in ((root + "/props", _props_context), (self.api_url + "/models", _models_context)):
            timeout = min(self.timeout, PROBE_TIMEOUT_S)
            try:
                with Deadline(timeout), self._opener.open(urllib.request.Request(url, headers=self._headers()),
                                                          timeout=timeout) as resp:
                    found = read(json.loads(resp.read(MAX_RESPONSE_BYTES).decode("utf-8")))
            except (OSError, ValueError, http.client.HTTPException, urllib.error.URLError):
                continue
            if found:
                return found
        return None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _post_chat(self, body: dict[str, Any]) -> Any:
        try:
            return self._request("POST", "/chat/completions", body, self.completion_timeout, connect=self.timeout)
        except _HTTPStatus as exc:
            messages = body.get("messages") or []
            if not refuses_system_role(exc.status, exc.detail) or not any(m.get("role") == "system" for m in messages):
                raise
            # Perhaps a model whose chat template has no system role (Gemma's): learnt only when
            # the request without one is answered, then every request carries its instructions
            # in the first user message.
            try:
                data = self._request("POST", "/chat/completions", {**body, "messages": without_system_role(messages)},
                                     self.completion_timeout, connect=self.timeout)
            except _HTTPStatus:
                raise exc from None  # not the system message's fault: the first error stands
            self.traits.system_role = False
            LOG.info(f"LLM endpoint {self.api_url}: the model takes no system message (HTTP {exc.status}); "
                     "its instructions now open the first user message")
            return data

    def _request(self, method: str, path: str, body: dict[str, Any] | None, timeout: float,
                 models: bool = False, connect: float | None = None) -> Any:
        """The reply's JSON; ``timeout`` bounds the whole request, ``connect`` (when shorter) the
        attempt to connect: a slow server's longer time is never spent on one that cannot be reached."""
        url = self.api_url + path
        headers = self._headers()
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        try:
            request = urllib.request.Request(url, data=payload, headers=headers, method=method)
        except ValueError as exc:  # not a URL (no scheme): a configuration error, reported as the LLM failing
            raise LLMUnavailable(f"{url}: {exc}") from exc
        self.attempts += 1
        # Only a completion (given its own ``connect``) is worth asking again with more time: a
        # slow model generating.
        completion, connect = connect is not None, timeout if connect is None else min(connect, timeout)
        # The whole request, not each read: a server may trickle.
        with Deadline(timeout, read_timeout=timeout if connect != timeout else None) as deadline:
            try:
                with self._opener.open(request, timeout=connect) as resp:
                    raw = resp.read(MAX_RESPONSE_BYTES + 1)
            except urllib.error.HTTPError as exc:
                with exc:
                    if models and exc.code in (404, 405, 501):
                        return {}  # no model listing here; completions may still work without a model
                    raise self._status_error(url, exc) from exc
            except (OSError, http.client.HTTPException) as exc:
                slow = completion and deadline.connected
                raise _transport_failure(url, exc, timeout, deadline.expired, slow) from exc
        if deadline.expired:  # the socket was shut mid-body: what was read is cut short
            raise (_SlowAnswer if completion else LLMTimeout)(f"{url}: no whole answer within {timeout:g}s")
        if len(raw) > MAX_RESPONSE_BYTES:
            raise LLMError(f"{url}: reply larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise LLMError(f"{url}: reply is not JSON ({raw[:80]!r})") from exc

    def _status_error(self, url: str, exc: urllib.error.HTTPError) -> LLMError:
        detail = _error_detail(exc)
        limit = overflow_limit(exc.code, detail)
        if limit is None:
            return _HTTPStatus(f"{url}: HTTP {exc.code} {detail}", exc.code, detail)
        if limit:
            self.traits.learn_context(limit, "error")
        return LLMContextOverflow(f"{url}: the prompt is longer than the model's context (HTTP {exc.code} {detail})",
                                  limit)


def _transport_failure(url: str, exc: BaseException, timeout: float, expired: bool, slow: bool) -> LLMError:
    """What a request that got no HTTP status failed with (``expired``: its deadline shut it;
    ``slow``: it was a completion the server had received, so a timeout is a slow answer)."""
    failure = _transport_cause(url, exc, timeout, expired)
    return _SlowAnswer(str(failure)) if slow and isinstance(failure, LLMTimeout) else failure


def _transport_cause(url: str, exc: BaseException, timeout: float, expired: bool) -> LLMError:
    if expired or isinstance(exc, TimeoutError):
        return LLMTimeout(f"{url}: no {'whole ' if expired else ''}answer within {timeout:g}s")
    if isinstance(exc, urllib.error.URLError):
        return _transport_error(url, exc.reason, timeout)
    if isinstance(exc, (http.client.HTTPException, ConnectionError)):
        return LLMError(f"{url}: not an HTTP answer ({type(exc).__name__}: {exc})")
    return _transport_error(url, exc, timeout)


class _SlowAnswer(LLMTimeout):
    """A timeout of a request the server had received: it is there, but slower than the timeout."""


class _HTTPStatus(LLMError):
    """An HTTP error status; the caller decides whether it refuses a parameter or is a failure."""

    def __init__(self, message: str, status: int, detail: str):
        super().__init__(message)
        self.status = status
        self.detail = detail


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


def _without_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with Qwen3's switch at the end of the last user message (other models read
    it as a word of no consequence)."""
    out = [dict(m) for m in messages]
    last_user = next((m for m in reversed(out) if m.get("role") == "user"), None)
    if last_user is not None and not str(last_user.get("content") or "").rstrip().endswith(NO_THINK):
        last_user["content"] = f"{last_user.get('content') or ''}\n{NO_THINK}"
    return out


def _reasoned(message: Any, content: str) -> bool:
    """Whether a reply holds thoughts: a non-blank ``reasoning_content`` (llama.cpp's and vLLM's
    reasoning parsers), a think block opening it with something in it (an empty one is Qwen3 told
    not to), or thoughts the template opened, closed at the reply's first ``</think>``. A reply
    that only mentions the tags is none."""
    if isinstance(message, dict) and any(isinstance(message.get(k), str) and message[k].strip()
                                         for k in ("reasoning_content", "reasoning")):
        return True
    head = content.lstrip()
    closed = _THINK_CLOSE.search(head)
    if _THINK_OPEN.match(head):
        return bool(head[len("<think>"):closed.start() if closed else len(head)].strip())
    # A template-opened block ends its line ("...\n</think>\n\nanswer"); a mention runs on ("the </think> tag").
    return (closed is not None and _THINK_OPEN.search(head) is None and bool(head[:closed.start()].strip())
            and head[closed.end():closed.end() + 1] in ("", "\n", "\r"))


def _completion(data: Any) -> Completion:
    try:
        choice = data["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"reply is not a chat completion: {str(data)[:120]}") from exc
    if content is None:
        content = ""  # reasoning models may answer with reasoning only
    if not isinstance(content, str):
        raise LLMError(f"reply content is a {type(content).__name__}, not text")
    content = without_surrogates(content)  # escaped in the reply's JSON: no store can write one
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return Completion(strip_think(content), finish if isinstance(finish, str) else None,
                      _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                      _reasoned(choice.get("message"), content))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _props_context(data: Any) -> int | None:
    """llama.cpp's ``/props``: ``default_generation_settings.n_ctx`` (or ``n_ctx`` at the top)."""
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    for holder in (settings, data):
        if isinstance(holder, dict) and _count(holder.get("n_ctx")):
            return int(holder["n_ctx"])
    return None


def _models_context(data: Any) -> int | None:
    """vLLM's ``/models``: ``data[].max_model_len`` of the first model that has one."""
    items = data.get("data") if isinstance(data, dict) else None
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and _count(item.get("max_model_len")):
            return int(item["max_model_len"])
    return None


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
