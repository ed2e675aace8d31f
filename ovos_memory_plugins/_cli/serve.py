"""``ovos-memory serve``: the web page and JSON API over a memory (``_serve/``), on loopback by default.

The web framework is imported here only when the command runs, so ``import ovos_memory_plugins``
and every other command stay as light as they were; without the ``[serve]`` extra the command
says what to install.
"""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from .commands import _backend
from .output import EXIT_ERROR, UI, CLIError, escape

__all__ = ["DEFAULT_PORT", "TOKEN_ENV", "check_exposure", "cmd_serve", "is_loopback", "page_address"]

DEFAULT_PORT = 8765
#: Where the token may be given instead of ``--token`` (a command line is visible to every user of the machine).
TOKEN_ENV = "OVOS_MEMORY_SERVE_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` reaches this computer only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve a memory beyond this computer without a token."""
    if token is None and not is_loopback(host):
        raise CLIError(f"--host {host} makes the memory reachable from other computers: give a --token (or set "
                       f"{TOKEN_ENV}), which every request must then carry")
    if token is not None and (len(token) < 8 or token != token.strip()):
        raise CLIError("the token must have at least 8 characters and no spaces around it")
    if token is not None and not (token.isascii() and token.isprintable()):
        # An HTTP header carries it: a browser or curl would send other characters in another encoding.
        raise CLIError("the token must be printable ASCII characters (letters, digits, punctuation)")


def cmd_serve(args: argparse.Namespace, ui: UI) -> int:
    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_exposure(args.host, token)
    try:
        import uvicorn

        from .._serve.app import create_app
    except ImportError as exc:
        raise CLIError(f"'serve' needs the [serve] extra ({exc.name} is missing): "
                       "pip install 'ovos-memory-plugins[serve]'", EXIT_ERROR) from None
    sock = _listen(args.host, args.port)
    with sock, _request_lines(), _stop_on_sigterm(), _backend(args) as memory:
        app = create_app(memory, token, args.host)
        port = sock.getsockname()[1]
        name = getattr(memory, "plugin_name", type(memory).__name__)
        ui.err.print(f"serving {escape(name)} on {page_address(args.host, port)} "
                     f"({'every request needs the token' if token else 'no token: only this computer can open it'}"
                     "; Ctrl-C stops)", soft_wrap=True)
        server = uvicorn.Server(uvicorn.Config(app, access_log=False, log_level="warning", server_header=False,
                                               lifespan="off", proxy_headers=False))
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass  # stopped by Ctrl-C or SIGTERM: the memory is closed on the way out
    return 0


def page_address(host: str, port: int) -> str:
    """The page's address as a browser takes it (an IPv6 host in brackets, once).

    >>> [page_address(h, 8765) for h in ("127.0.0.1", "::1", "[::1]")]
    ['http://127.0.0.1:8765/', 'http://[::1]:8765/', 'http://[::1]:8765/']
    """
    bare = host.strip("[]")
    return f"http://[{bare}]:{port}/" if ":" in bare else f"http://{bare}:{port}/"


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one), or one line saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise CLIError(f"cannot listen on {host}:{port}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise CLIError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def _request_lines() -> Iterator[None]:
    """One line per request on stderr (method, path without ids, status, time): nothing of the memory."""
    from .._serve.app import LOG_NAME

    logger = logging.getLogger(LOG_NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM stops the server as Ctrl-C does, so the memory is closed (its work finished)."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
