"""Turning recalled hits into the context block, within an optional token budget.

Recalled text is what somebody said: it goes in as quoted data (``_core/untrusted.py``), and a
recalled question stays on one line, so it cannot forge the answer or another chunk after it.

With ``show_dates: older``, a hit said on an earlier day than the turn's carries that day
("- (3 May 2026) Q: ..."): a model told the user lives in Bordeaux, and shown an exchange about
Lyon, can tell which is older. Today's hits carry none (the date would cost characters and say
nothing), so a memory used within one day renders as without the option.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from ._core.tokens import estimate_tokens
from ._core.untrusted import one_line, quote_untrusted
from .common import MemoryHit
from .storage.documents import format_exchange

__all__ = [
    "ContextStyle",
    "DATE_MODES",
    "render_hits",
]

#: When a recalled hit shows the day it was said: never (the reference's shape), or when older than today.
DATE_MODES = ("never", "older")

DEFAULT_HEADER = (
    "Use the following recalled context to answer the user's question. "
    "If the answer is not in the context, rely on the conversation instead."
)


@dataclasses.dataclass(frozen=True)
class ContextStyle:
    chunk_prefix: str = "- "
    chunk_separator: str = "\n\n"
    include_sources: bool = False
    show_dates: str = "never"


def render_chunk(hit: MemoryHit, style: ContextStyle, today: str = "") -> str:
    text = quote_untrusted(_flat_question(hit))
    said = _said_on(hit, today) if style.show_dates == "older" else ""
    if said:
        text = f"({said}) {text}"
    if style.include_sources and hit.source:
        return f"{style.chunk_prefix}[{hit.source}] {text}"
    return f"{style.chunk_prefix}{text}"


def _day(ts: float) -> str:
    """``"3 May 2026"``: the local day of ``ts``, in English whatever the locale."""
    when = time.localtime(ts)
    return f"{when.tm_mday} {_MONTHS[when.tm_mon - 1]} {when.tm_year}"


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _said_on(hit: MemoryHit, today: str) -> str:
    """The day ``hit`` was stored, when it has a time and that day is not ``today``; else ""."""
    ts = hit.metadata.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return ""
    day = _day(float(ts))
    return "" if day == today else day


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
    today = _day(time.time()) if style.show_dates == "older" else ""
    for hit in hits:
        chunk = render_chunk(hit, style, today)
        if max_tokens is not None:
            cost = estimate_tokens(chunk)
            if used + cost > max_tokens:
                continue  # a shorter, lower-ranked chunk may still fit
            used += cost
        chunks.append(chunk)
    return style.chunk_separator.join(chunks)
