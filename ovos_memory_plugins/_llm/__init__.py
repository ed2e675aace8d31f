"""Work done through a language model: the OpenAI-compatible client, rolling summaries, facts
about the user, and the base of the memories that use them.

``chat_complete`` and ``resolve_model`` stay importable from here, where the reference package
had them.
"""
from __future__ import annotations

from .client import chat_complete, resolve_model

__all__ = ["chat_complete", "resolve_model"]
