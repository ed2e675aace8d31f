"""The endpoint keys every LLM-backed memory reads, and the one factory of its chat client."""
from __future__ import annotations

import dataclasses

from ..config import option
from .client import ChatClient

__all__ = ["EndpointConfig", "chat_client"]


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    api_url: str | None = option("http://localhost:8000/v1", "OpenAI-compatible endpoint (a local llama.cpp or "
                                 "Ollama); null or empty: no model, the offline fallback only", kind=str,
                                 nullable=True)
    model: str = option("", "model name; empty: the first model the server lists")
    api_key: str | None = option(None, "bearer token for servers that require one", kind=str)
    request_timeout: float = option(30.0, "seconds one LLM request may take", minimum=0.1)


def chat_client(settings: EndpointConfig) -> ChatClient:
    """The client for ``settings``; with no ``api_url`` it is never ``available``."""
    return ChatClient(settings.api_url, settings.model, settings.request_timeout, settings.api_key)
