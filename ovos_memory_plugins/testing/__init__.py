"""Test helpers for this package and for third-party backends.

* :func:`check_backend` runs the memory-plugin contract (the two rules of every context, session
  isolation, input handling) against any ``AgentContextManager`` factory; :func:`check_person_scope`
  the rules of ``scope: person`` (a person's sessions share a memory, guests see none of it).
* :class:`FakeEmbedder`: a deterministic text embedder for unit tests of retrieval logic.
* :class:`FakeLLMServer`: a real HTTP server on 127.0.0.1 speaking the OpenAI chat API, with
  switchable failures (slow, 500, malformed, closed), for tests of summaries and facts.
"""
from __future__ import annotations

from .contract import CONTRACT_CHECKS, PERSON_SCOPE_CHECKS, check_backend, check_person_scope
from .embeddings import FakeEmbedder
from .llm import FakeLLMServer, LoggedRequest, closed_port_url, free_port

__all__ = ["check_backend", "check_person_scope", "closed_port_url", "CONTRACT_CHECKS", "FakeEmbedder", "FakeLLMServer",
           "free_port", "LoggedRequest", "PERSON_SCOPE_CHECKS"]
