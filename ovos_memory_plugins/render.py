"""Turning recalled hits into the context block, within an optional token budget.

Recalled text is what somebody said: it goes in as quoted data (``_core/untrusted.py``), and a
recalled question stays on one line, so it cannot forge the answer or another chunk after it.

With ``show_dates: older``, a hit said on an earlier day than the turn's carries that day
("- (3 May 2026) Q: ..."): a model told the user lives in Bordeaux, and shown an exchange about
Lyon, can tell which is older. Today's hits carry none (the date would cost characters and say
nothing), so a memory used within one day renders as without the option.

Under a token budget the best-ranked hits come first. When they do not all fit whole, a recalled
exchange is cut to its side that shares more words with the query (the user's words on a tie),
the lowest-ranked first, before any hit is left out: a long exchange then costs half its
characters instead of pushing out a hit, or being dropped itself. The best hit is never cut to
make room for others, only when it does not fit alone.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from ._core.tokens import estimate_tokens
from ._core.untrusted import breaks_lines, one_line, quote_untrusted
from ._index.stopwords import StopWords, term_set
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
    text = quote_untrusted(_flat_exchange(hit))
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


def _stored_exchange(hit: MemoryHit) -> tuple[str, str | None] | None:
    """``(question, answer)`` when ``hit``'s text is the stored exchange its metadata names."""
    question, answer = hit.metadata.get("question"), hit.metadata.get("answer")
    if not isinstance(question, str) or not (answer is None or isinstance(answer, str)):
        return None
    return (question, answer) if hit.content == format_exchange(question, answer) else None


def _flat_exchange(hit: MemoryHit) -> str:
    """The hit's text, each side on one line when it is a stored exchange, and on one line when
    it is anything else (a note, an imported document): none can forge the lines after it (an
    answer, another recalled chunk with a source of its own)."""
    exchange = _stored_exchange(hit)
    if exchange is None:
        return one_line(hit.content) if breaks_lines(hit.content) and not _one_exchange(hit.content) else hit.content
    if not any(breaks_lines(side) for side in exchange if side):
        return hit.content
    question, answer = exchange
    return format_exchange(one_line(question), None if answer is None else one_line(answer))


def _one_exchange(text: str) -> bool:
    """Whether ``text`` is one exchange of one line a side (``Q: ...\nA: ...``, as another
    retriever may return one): its shape stays, and it forges nothing."""
    lines = text.split("\n")
    return len(lines) == 2 and lines[0].startswith("Q: ") and lines[1].startswith("A: ") and not any(
        breaks_lines(line) for line in lines)


def render_hits(hits: Sequence[MemoryHit], style: ContextStyle, max_tokens: int | None = None,
                query: str = "") -> str:
    """Join the hits as chunks; with ``max_tokens``, keep the best-ranked chunks that fit, after
    cutting exchanges to their side nearer ``query`` (the lowest-ranked first) while all do not;
    the best hit stays whole when it fits alone.

    >>> render_hits([MemoryHit("Q: a\\nA: b", "s_1"), MemoryHit("c")], ContextStyle(include_sources=True))
    '- [s_1] Q: a\\nA: b\\n\\n- c'
    """
    today = _day(time.time()) if style.show_dates == "older" else ""
    chunks = [render_chunk(hit, style, today) for hit in hits]
    if max_tokens is None:
        return style.chunk_separator.join(chunks)
    costs = [estimate_tokens(chunk) for chunk in chunks]
    if sum(costs) > max_tokens:
        asked = frozenset(StopWords().query_words(query))

        def cut(i: int) -> None:
            side = _nearer_side(hits[i], asked)
            if side is not None:
                chunks[i] = render_chunk(side, style, today)
                costs[i] = estimate_tokens(chunks[i])

        for i in reversed(range(1, len(hits))):
            if sum(costs) <= max_tokens:
                break
            cut(i)
        if costs[0] > max_tokens:
            cut(0)  # the best hit is cut only when it does not fit alone: others never cost it its words
    kept, used = [], 0
    for chunk, cost in zip(chunks, costs):
        if used + cost > max_tokens:
            continue  # a shorter, lower-ranked chunk may still fit
        used += cost
        kept.append(chunk)
    return style.chunk_separator.join(kept)


def _nearer_side(hit: MemoryHit, asked: frozenset[str]) -> MemoryHit | None:
    """``hit`` as the side of its exchange sharing more of the words ``asked`` (the question on
    a tie); None when it is not a stored exchange with both sides."""
    question, answer = _stored_exchange(hit) or ("", None)
    if not question or not answer:
        return None
    if len(asked & term_set(answer)) > len(asked & term_set(question)):
        text = f"A: {one_line(answer)}"
    else:
        text = format_exchange(one_line(question), None)
    return dataclasses.replace(hit, content=text)
