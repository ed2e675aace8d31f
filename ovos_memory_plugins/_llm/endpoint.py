"""The endpoint keys every LLM-backed memory reads, the endpoint it uses, and the one factory of its chat client.

Which endpoint a memory uses, in order: its own ``api_url``; else the persona's chat endpoint
(the persona wiring passes it under the private key ``_persona_endpoint``: the ``api_url``,
``model`` and key of the persona's OpenAI-compatible handler, so a persona whose chat points at a
local server has its memory use that server too); else the default. Each memory says once in the
log which one it uses.
"""
from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .._core.log import LOG
from ..config import option
from .client import ChatClient

__all__ = ["DEFAULT_API_URL", "DEFAULT_REQUEST_TIMEOUT_S", "PERSONA_ENDPOINT_KEY", "EndpointConfig", "chat_client",
           "endpoint_url_problem", "with_endpoint"]

DEFAULT_API_URL = "http://localhost:8000/v1"
#: The private config key under which the persona wiring passes the persona's chat endpoint.
PERSONA_ENDPOINT_KEY = "_persona_endpoint"

#: The public package's ``request_timeout``. A small model on a busy CPU took up to 95 s for one
#: summary call and 83 s for one extraction (docs/design-notes.md): the client gives a server
#: that is slower than this more time after each timeout (``SLOW_SERVER_PATIENCE``), since the
#: calls run in the background and a timeout wastes a whole generation.
DEFAULT_REQUEST_TIMEOUT_S = 30.0


def endpoint_url_problem(url: str | None) -> str | None:
    """What keeps ``url`` from being an LLM endpoint's address (a phrase), or None (None or ""
    is no endpoint)."""
    url = (url or "").strip()
    if url and urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
        return f"an endpoint URL starts with http:// or https:// (http://{url.split('://')[-1]}?)"
    return None


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    api_url: str | None = option(DEFAULT_API_URL, "OpenAI-compatible endpoint (a local llama.cpp or "
                                 "Ollama); null or empty: no model, the offline fallback only", kind=str,
                                 nullable=True)
    model: str = option("", "model name; empty: the first model the server lists")
    api_key: str | None = option(None, "bearer token for servers that require one", kind=str)
    request_timeout: float = option(DEFAULT_REQUEST_TIMEOUT_S, "seconds one LLM request may take; a server that "
                                    "answers, but slower, is asked again with twice as long, up to 4 times "
                                    "this", minimum=0.1)
    max_prompt_tokens: int | None = option(
        None, "the model's context size in tokens; null: asked of the server (llama.cpp, vLLM), else learnt "
              "from its first overflow error, else 2048", kind=int, minimum=256, nullable=True)


def chat_client(settings: EndpointConfig, owner: str = "") -> ChatClient:
    """The client for ``settings``; with no ``api_url`` it is never ``available``."""
    return ChatClient(settings.api_url, settings.model, settings.request_timeout, settings.api_key,
                      max_prompt_tokens=settings.max_prompt_tokens, owner=owner)


def with_endpoint(settings: Any, config: Mapping[str, Any] | None, owner: str) -> Any:
    """``settings`` with the endpoint this memory uses (see the module docstring), logged once."""
    config = config or {}
    persona = config.get(PERSONA_ENDPOINT_KEY)
    if "api_url" not in config and isinstance(persona, Mapping) and persona.get("api_url"):
        changes = {"api_url": str(persona["api_url"])}
        for key in ("model", "api_key"):
            if key not in config and persona.get(key):
                changes[key] = str(persona[key])
        settings = dataclasses.replace(settings, **changes)
        source = f"the persona's chat handler '{persona.get('handler') or '?'}'"
    else:
        source = "api_url" if "api_url" in config else "the default: set api_url to your model server"
    base = _without_route(settings.api_url)
    if base != settings.api_url:
        LOG.warning(f"{owner}: 'api_url' {settings.api_url!r} names the chat route; using its base {base!r} "
                    "(requests go to <api_url>/chat/completions)")
        settings = dataclasses.replace(settings, api_url=base)
    said = (f"{owner}: LLM endpoint {settings.api_url} ({source})" if settings.api_url
            else f"{owner}: no LLM endpoint (api_url is empty): offline fallback only")
    if said not in _SAID:  # once per process: a member tried again while its store is down is built often
        _SAID.add(said)
        LOG.info(said)
    return settings


_SAID: set[str] = set()
# A common paste: the full route of the chat call, where the base URL is meant.
_ROUTE = re.compile(r"/(?:chat/completions|completions|models)/*$", re.IGNORECASE)


def _without_route(url: str | None) -> str | None:
    """``url`` without a trailing ``/chat/completions`` (or ``/completions``, ``/models``).

        >>> _without_route("http://localhost:8080/v1/chat/completions")
        'http://localhost:8080/v1'
    """
    return _ROUTE.sub("", url.strip()) if url and _ROUTE.search(url.strip()) else url
