"""The endpoint keys every LLM-backed memory reads, and the one factory of its chat client."""
from __future__ import annotations

import dataclasses

from ..config import option
from .client import ChatClient

__all__ = ["LOCAL_MODEL_TIMEOUT_S", "EndpointConfig", "chat_client"]

#: A small model on a busy CPU took up to 95 s for one summary call and 83 s for one extraction
#: (docs/design-notes.md); the calls run in the background, so waiting costs no turn anything,
#: while a timeout that fires wastes the whole generation and then repeats it.
LOCAL_MODEL_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    api_url: str | None = option("http://localhost:8000/v1", "OpenAI-compatible endpoint (a local llama.cpp or "
                                 "Ollama); null or empty: no model, the offline fallback only", kind=str,
                                 nullable=True)
    model: str = option("", "model name; empty: the first model the server lists")
    api_key: str | None = option(None, "bearer token for servers that require one", kind=str)
    request_timeout: float = option(LOCAL_MODEL_TIMEOUT_S, "seconds one LLM request may take (background work: "
                                    "generous for small local models)", minimum=0.1)
    max_prompt_tokens: int | None = option(
        None, "the model's context size in tokens; null: asked of the server (llama.cpp, vLLM), else learnt "
              "from its first overflow error, else 2048", kind=int, minimum=256, nullable=True)


def chat_client(settings: EndpointConfig, owner: str = "") -> ChatClient:
    """The client for ``settings``; with no ``api_url`` it is never ``available``."""
    return ChatClient(settings.api_url, settings.model, settings.request_timeout, settings.api_key,
                      max_prompt_tokens=settings.max_prompt_tokens, owner=owner)
