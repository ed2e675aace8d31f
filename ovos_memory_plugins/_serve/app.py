"""The Starlette application of ``ovos-memory serve``: the page, and the JSON API it uses.

Imported only by the ``serve`` command (it needs the ``[serve]`` extra). Every request passes
:class:`Guard` first:

* with a token, every ``/api/`` request carries ``Authorization: Bearer <token>`` (401 without
  it, 403 with another); the page itself holds no memory and asks for the token;
* without a token (loopback only, the command insists), a request must name a loopback host or
  the one served: a web page on another site whose name points at 127.0.0.1 (DNS rebinding)
  is refused;
* a request that changes something (anything but GET and HEAD) must carry
  ``X-Requested-With: ovos-memory`` and must not come from another site (``Origin``,
  ``Sec-Fetch-Site``): a page elsewhere cannot make the browser forget anything; an API read a
  browser says another site asked for (``Sec-Fetch-Site: cross-site`` or ``same-site``) is
  refused too;
* nothing of the memory is logged: each request is one line with its method, its path with the
  ids left out (``/api/sessions/*``), its status and time; a failure logs its type only.
"""
from __future__ import annotations

import hmac
import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._cli.commands import _import_items
from .._cli.output import CLIError
from ..errors import NotSupported, StorageError, StoreUnavailable
from . import views

__all__ = ["LOG_NAME", "STATIC", "create_app"]

#: The logger of the request lines (never any memory content).
LOG_NAME = "ovos_memory_plugins.serve"
STATIC = Path(__file__).with_name("static")
#: The header a request that changes something must carry (a cross-site form cannot set it).
CSRF_HEADER, CSRF_VALUE = "x-requested-with", "ovos-memory"
#: The largest import accepted, in bytes.
MAX_BODY = 64 * 1024 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
#: Path segments logged as they are; any other (an id, a name) is logged as ``*``.
_PLAIN_SEGMENTS = frozenset({"", "api", "info", "status", "sessions", "people", "export", "facts", "documents",
                             "search", "import", "jobs", "static", "app.js", "app.css", "favicon.ico"})
_SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",  # what a memory holds is never kept in a browser's or a proxy's cache
}
class _TooLarge(ValueError):
    """A request body over :data:`MAX_BODY` (413)."""


#: What a failure is answered with. Any other (a store that failed: StorageError) is a 500 naming
#: its type only, since its message may quote a path or what the store holds.
# First match wins: a store's own errors (a malformed record is a ValueError too) are never a 400.
_STATUS = ((StoreUnavailable, 503), (StorageError, 500), (views.NotFound, 404), (views.Unsupported, 400),
           (NotSupported, 400), (CLIError, 400), (TypeError, 400), (_TooLarge, 413), (ValueError, 400))

log = logging.getLogger(LOG_NAME)


def logged_path(path: str) -> str:
    """``path`` with every segment that may name something of the memory replaced by ``*``.

    >>> logged_path("/api/sessions/alice-kitchen/documents/alice-kitchen_3")
    '/api/sessions/*/documents/*'
    """
    return "/".join(s if s in _PLAIN_SEGMENTS else "*" for s in path.split("/"))


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8765`` -> ``::1``); "" for a
    header of no valid shape (``[::1]evil.com``, ``[::1``, ``host:port:more``): no host allowed."""
    name, port = host_header, ""
    if host_header.startswith("["):
        name, bracket, rest = host_header[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return ""
        port = rest[1:] if rest else ""
    elif ":" in host_header:
        name, _, port = host_header.partition(":")
        if ":" in port:
            return ""
    if (port and not port.isdigit()) or host_header.endswith(":"):
        return ""
    return name


# -- the guard -----------------------------------------------------------------------------------
class Guard:
    """Token, host and cross-site checks, security headers, request lines and failures (see the module doc)."""

    def __init__(self, app: ASGIApp, token: str | None, hosts: frozenset[str]):
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), [0]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = MutableHeaders(scope=message)
                for key, value in _SECURITY_HEADERS.items():
                    headers.setdefault(key, value)
            await send(message)

        try:
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send_with_headers)
            else:
                await self.app(scope, receive, send_with_headers)
        except Exception as exc:  # noqa: BLE001 - answered here, so no traceback (it may quote memory) is logged
            code = next((c for kind, c in _STATUS if isinstance(exc, kind)), 500)
            if code == 500:
                log.error("%s %s failed: %s", scope["method"], logged_path(scope["path"]), type(exc).__name__)
            elif code == 503:  # its message names the file and what SQLite said, nothing the store holds
                log.warning("%s %s: a store is busy: %s", scope["method"], logged_path(scope["path"]), exc)
            if status[0]:
                raise  # the response had started: nothing else can be sent
            message = str(exc) if code != 500 else f"the memory failed ({type(exc).__name__}); see the server's log"
            busy = code == 503 and ("locked" in str(exc) or "busy" in str(exc))
            if code == 503:
                message = (f"another process holds the store, so this gave up waiting ({exc}); try again" if busy
                           else f"a store is unavailable ({exc})")
            await _error(code, message, {"retry-after": "5"} if busy else None)(scope, receive, send_with_headers)
        finally:
            log.info("%s %s %d %.0f ms", scope["method"], logged_path(scope["path"]), status[0],
                     1000 * (time.monotonic() - started))

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to a request that may not go further, or None."""
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if self.token is None and host_name(host).lower() not in self.hosts:
            return _error(400, "this server answers only to its own address (DNS rebinding is refused)")
        if scope["path"].startswith("/api/") and self.token is not None:
            given = headers.get("authorization", "")
            if given[:7].lower() != "bearer ":  # the scheme's name is case-insensitive (RFC 9110)
                return _error(401, "this server needs its token: Authorization: Bearer <token>",
                              {"www-authenticate": 'Bearer realm="ovos-memory"'})
            if not hmac.compare_digest(given[7:].strip().encode(), self.token.encode()):
                return _error(403, "wrong token")
        if scope["path"].startswith("/api/") and headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            # A page elsewhere cannot read the answer, but a search's timing says something, and in
            # person scope reading a session moves it: the API is the page's own.
            return _error(403, "the API answers the page it serves, not another site's")
        raw = scope.get("raw_path") or b""
        if b"%" in raw and not raw.startswith(_ID_PATHS):
            # Routed on the decoded path, "/api%2Fsessions" would answer as "/api/sessions": a path
            # is read as sent, and only an id (after /api/sessions/ or /api/people/) is encoded.
            return _error(404, "no such resource (spell the path without percent-encoding; only an id may hold it)")
        if scope["method"] not in ("GET", "HEAD"):
            if headers.get(CSRF_HEADER) != CSRF_VALUE:
                return _error(403, f"a request that changes the memory must carry '{CSRF_HEADER}: {CSRF_VALUE}'")
            origin = headers.get("origin")
            own = {f"{scheme}://{host}" for scheme in ("http", "https")}
            if (origin is not None and origin not in own) or \
                    headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
                return _error(403, "a request from another site may not change the memory")
        return None


#: The paths whose rest is ids, percent-encoded as any id may need.
_ID_PATHS = (b"/api/sessions/", b"/api/people/")


def _error(code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=code, headers=headers)


# -- import jobs ---------------------------------------------------------------------------------
class Jobs:
    """Imports running in the background, with their progress: the page polls ``/api/jobs/{id}``.

    A job is ``{"id", "phase", "done", "total", "sessions", "error"}``: ``phase`` "importing"
    (``done`` of ``total`` sessions), then "indexing" (``done`` of ``total`` documents), then
    "done" (all sessions of ``total``), or "failed" with ``error``; ``sessions`` is how many the file held.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, work: Callable[[dict[str, Any]], None], total: int) -> dict[str, Any]:
        job_id = str(next(self._ids))
        job: dict[str, Any] = {"id": job_id, "phase": "importing", "done": 0, "total": total, "sessions": total,
                               "error": None}
        with self._lock:
            self._jobs[job_id] = job

        def run() -> None:
            try:
                work(job)
                # Done counts the sessions again: after an import with nothing to index, 0 of 0
                # read as nothing imported.
                job.update(phase="done", done=job["sessions"], total=job["sessions"])
            except Exception as exc:  # noqa: BLE001 - told to the page; only the type is logged
                log.error("import failed: %s", type(exc).__name__)
                job.update(phase="failed", error=f"{type(exc).__name__}: {exc}")

        threading.Thread(target=run, name="ovos-memory-import", daemon=True).start()
        return dict(job)

    def get(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise views.NotFound("no such job")
        return dict(job)


def _import_work(memory: Any, items: list[Any], session_id: str | None) -> Callable[[dict[str, Any]], None]:
    def work(job: dict[str, Any]) -> None:
        views.as_listed(memory, views.import_sessions, memory, items, session_id, lambda done: job.update(done=done))
        _wait_for_index(memory, job)

    return work


def _wait_for_index(memory: Any, job: dict[str, Any], poll: float = 0.25) -> None:
    """Show the index catching up (embedding what was imported) as the job's second phase."""
    waiting = views.backlog(memory) or 0
    job.update(phase="indexing", done=0, total=waiting)
    while waiting:
        if callable(getattr(memory, "flush", None)) and memory.flush(poll):
            break
        waiting = views.backlog(memory) or 0
        job.update(done=max(0, job["total"] - waiting), total=max(job["total"], waiting))
    job.update(done=job["total"])


# -- the application -----------------------------------------------------------------------------
Handler = Callable[[Request], Awaitable[Response]]


def create_app(memory: Any, token: str | None = None, host: str = "127.0.0.1") -> Starlette:
    """The page and the API over ``memory``; see the module doc for what guards them."""
    jobs = Jobs()

    def run(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        return run_in_threadpool(views.as_listed, memory, fn, *args)

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def info(request: Request) -> Response:
        return JSONResponse({**await run(views.memory_info, memory), "token": token is not None})

    async def status(request: Request) -> Response:
        return JSONResponse({"backlog": await run(views.backlog, memory)})

    async def sessions(request: Request) -> Response:
        ids = await run(views.session_ids, memory)
        return JSONResponse({"sessions": [{"id": sid} for sid in ids]})

    async def session(request: Request) -> Response:
        """``/api/sessions/{id}[/export|/facts|/documents/{doc_id}]``, the ids percent-encoded
        (a session id may hold any character, "/" too)."""
        sid, *rest = _path_ids(request, "sessions")
        method = _method(request)
        if not rest and method == "GET":
            return JSONResponse(await run(views.session_view, memory, sid))
        if not rest and method == "DELETE":
            return JSONResponse(await run(views.forget_session, memory, sid))
        if rest == ["export"] and method == "GET":
            data = await run(views.export_session, memory, sid)
            return JSONResponse(data, headers={"content-disposition": f'attachment; filename="{_file_name(sid)}"'})
        if rest == ["facts"] and method == "DELETE":
            body = await _json_body(request)
            return JSONResponse(await run(views.forget_fact, memory, sid, body.get("text")))
        if len(rest) == 2 and rest[0] == "documents" and method == "DELETE":
            member = request.query_params.get("member")
            return JSONResponse(await run(views.forget_exchange, memory, sid, rest[1], member))
        shapes = {(): "GET, HEAD, DELETE", ("export",): "GET, HEAD", ("facts",): "DELETE"}
        allowed = "DELETE" if len(rest) == 2 and rest[0] == "documents" else shapes.get(tuple(rest))
        return _not_allowed(allowed)

    async def search(request: Request) -> Response:
        q = request.query_params
        if not q.get("q", "").strip():
            raise ValueError("'q' must hold the words to search for")
        k = q.get("k", "10")
        if not (k.isascii() and k.isdigit()):
            raise ValueError(f"'k' must be a whole number of hits, not {k!r}")
        # An empty ``session=`` is the session named "" (any id works): only an absent one means all.
        hits = await run(views.search, memory, q["q"], q.get("session"), q.get("mode", "all"), int(k))
        return JSONResponse({"hits": hits})

    async def people(request: Request) -> Response:
        found = await run(views.people, memory)  # none: no person scope (or no people in it)
        return JSONResponse({"supported": bool(found), "people": found})

    async def person(request: Request) -> Response:
        name, *rest = _path_ids(request, "people")
        method = _method(request)
        if not rest and method == "GET":
            return JSONResponse(await run(views.person_view, memory, name))
        if not rest and method == "DELETE":
            return JSONResponse(await run(views.forget_person, memory, name))
        if rest == ["export"] and method == "GET":
            data = await run(views.export_person, memory, name)
            return JSONResponse(data, headers={"content-disposition": f'attachment; filename="{_file_name(name)}"'})
        return _not_allowed({(): "GET, HEAD, DELETE", ("export",): "GET, HEAD"}.get(tuple(rest)))

    async def start_import(request: Request) -> Response:
        items = _import_items(await _json_body(request, (dict, list)), "the uploaded file")
        sid = request.query_params.get("session")
        if sid is not None and len(items) != 1:
            raise ValueError("'session' only applies to a file holding one session")
        return JSONResponse(jobs.start(_import_work(memory, items, sid), len(items)), status_code=202)

    async def job(request: Request) -> Response:
        return JSONResponse(jobs.get(request.path_params["job_id"]))

    routes = [
        Route("/", page),
        Route("/api/info", info),
        Route("/api/status", status),
        Route("/api/sessions", sessions),
        _any_id(Route("/api/sessions/{rest:path}", session, methods=["GET", "DELETE", "POST"])),
        Route("/api/search", search),
        Route("/api/people", people),
        _any_id(Route("/api/people/{rest:path}", person, methods=["GET", "DELETE"])),
        Route("/api/import", start_import, methods=["POST"]),
        Route("/api/jobs/{job_id}", job),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Guard, token=token, hosts=LOOPBACK_NAMES | {host.strip("[]").lower()})  # type: ignore[arg-type]
    return app


def _any_id(route: Route) -> Route:
    """``route`` matching a path that holds a line break too (a session id may: ``%0A``); the
    ``path`` convertor's ``.*`` stops at one, and the id's session could not be opened or forgotten."""
    route.path_regex = re.compile(route.path_regex.pattern, re.DOTALL)
    return route


def _path_ids(request: Request, collection: str) -> list[str]:
    """The segments after ``/api/<collection>/``, each percent-decoded on its own (so an id may
    hold "/"; the server's decoded path would have split it). The path as sent must spell
    ``/api/<collection>/`` itself: routed on the decoded path, ``/api%2Fsessions/x/y`` would
    otherwise name session "y" where the router read session "x/y"."""
    raw = (request.scope.get("raw_path") or request.url.path.encode()).decode("latin-1").split("?")[0]
    prefix = f"/api/{collection}/"
    if not raw.startswith(prefix):  # "/api/sessions/" itself names the session "" (any id works)
        raise views.NotFound("no such resource (spell the path's '/api/...' part without percent-encoding)")
    return [unquote(p) for p in raw[len(prefix):].split("/")]


def _method(request: Request) -> str:
    """The request's method, HEAD read as GET (the server sends no body for it)."""
    return "GET" if request.method == "HEAD" else request.method


def _not_allowed(allowed: str | None) -> Response:
    """404 for a path naming nothing here; 405, with the methods it takes, for a wrong method."""
    if allowed is None:
        return _error(404, "no such resource")
    return _error(405, f"this resource takes {allowed}", {"allow": allowed})


async def _json_body(request: Request, kinds: tuple[type, ...] = (dict,)) -> Any:
    """The request's JSON body (bounded), which must be one of ``kinds``."""
    too_large = f"the request body is larger than {MAX_BODY // (1024 * 1024)} MiB"
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY:
        raise _TooLarge(too_large)
    chunks, received = [], 0
    async for chunk in request.stream():  # read as it comes: a chunked upload has no length to check first
        received += len(chunk)
        if received > MAX_BODY:
            raise _TooLarge(too_large)
        chunks.append(chunk)
    try:
        data = json.loads(b"".join(chunks) or b"{}")
    except RecursionError:
        raise ValueError("the request body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: say what the body should be
        raise ValueError(f"the request body is not JSON ({exc})") from None
    if not isinstance(data, kinds):
        raise ValueError("the request body must be a JSON object")
    return data


def _file_name(name: str) -> str:
    """A download's file name: the id with anything outside ``[A-Za-z0-9._-]`` as ``_``."""
    return (re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "memory") + ".json"

