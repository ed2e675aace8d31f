"""Turning recalled hits into the context block, within an optional token budget.

Recalled text is what somebody said: it goes in as quoted data (``_core/untrusted.py``), and a
recalled question stays on one line, so it cannot forge the answer or another chunk after it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ._core.tokens import estimate_tokens
from ._core.untrusted import one_line, quote_untrusted
from .common import MemoryHit
from .storage.documents import format_exchange

__all__ = ["ContextStyle", "render_hits"]

DEFAULT_HEADER = (
    "Use the following recalled context to answer the user's question. "
    "If the answer is not in the context, rely on the conversation instead."
)


@dataclasses.dataclass(frozen=True)
class ContextStyle:
    chunk_prefix: str = "- "
    chunk_separator: str = "\n\n"
    include_sources: bool = False


def render_chunk(hit: MemoryHit, style: ContextStyle) -> str:
    text = quote_untrusted(_flat_question(hit))
    if style.include_sources and hit.source:
        return f"{style.chunk_prefix}[{hit.source}] {text}"
    return f"{style.chunk_prefix}{text}"


def _flat_question(hit: MemoryHit) -> str:
    """The hit's text, its question on one line when it is a stored exchange."""
    question, answer = hit.metadata.get("question"), hit.metadata.get("answer")
    if isinstance(question, str) and "\n" in question and hit.content == format_exchange(question, answer):
        return format_exchange(one_line(question), answer)
    return hit.content


def render_hits(hits: Sequence[MemoryHit], style: ContextStyle, max_tokens: int | None = None) -> str:
    """Join the hits as chunks; with ``max_tokens``, keep the best-ranked chunks that fit.

    >>> render_hits([MemoryHit("Q: a\\nA: b", "s_1"), MemoryHit("c")], ContextStyle(include_sources=True))
    '- [s_1] Q: a\\nA: b\\n\\n- c'
    """
    chunks, used = [], 0
    for hit in hits:
        chunk = render_chunk(hit, style)
        if max_tokens is not None:
            cost = estimate_tokens(chunk)
            if used + cost > max_tokens:
                continue  # a shorter, lower-ranked chunk may still fit
            used += cost
        chunks.append(chunk)
    return style.chunk_separator.join(chunks)
