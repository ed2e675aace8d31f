"""Recall that agrees with the current facts: a recalled exchange the facts contradict goes last.

The user said "I live in Lyon", later "I moved to Bordeaux": the facts say Bordeaux, and the
old exchange still matches "where do I live?" as well as ever. Sent first, a small model answers
from it. So before the best hits are taken, an exchange whose *user* turn states a one-valued
fact (name, home city, job, workplace, birthday) that a line of the facts block states with
another value is moved behind every other hit: the facts block holds the newer value (the facts
store supersedes the old one), so the exchange is the older word. The assistant's own earlier
answers count the same way: "Where do I live?" answered "You live in Lyon" is an old claim about
the user, never evidence over the facts (its "you" is read as the user's "I").

    >>> facts = facts_stated(["Known facts about the user:\\n- User lives in Bordeaux"])
    >>> contradicts("I live in Lyon, by the river.", facts), contradicts("I live in Bordeaux.", facts)
    (True, False)
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from .._llm.facts.kinds import SINGLE_VALUED, statement
from .._llm.facts.rules import extract_facts
from ..common import MemoryHit

__all__ = ["contradicts", "facts_stated", "put_contradicted_last"]

#: The words each one-valued attribute's fact opens with, up to its value ("User lives in "). Age
#: is left out: its opening, "User is ", also opens "User is a teacher".
_OPENINGS = {attribute: statement(attribute, "\0").split("\0", 1)[0] for attribute in SINGLE_VALUED
             if attribute != "age"}


#: The assistant's "you" about the user, as the user would say it: "you live" -> "I live".
_SECOND_PERSON = ((re.compile(r"\byou(?:'| a)re\b", re.IGNORECASE), "I am"),
                  (re.compile(r"\byour\b", re.IGNORECASE), "my"),
                  (re.compile(r"\byou\b", re.IGNORECASE), "I"))


def facts_stated(blocks: Iterable[str]) -> frozenset[str]:
    """The bullet lines of ``blocks`` ("- User lives in Bordeaux" -> "User lives in Bordeaux")."""
    return frozenset(line.strip()[2:].strip() for block in blocks for line in block.split("\n")
                     if line.strip().startswith("- "))


@functools.lru_cache(maxsize=4096)  # the same exchanges come back turn after turn
def _one_valued(user_text: str) -> tuple[tuple[str, str], ...]:
    """``(attribute, fact sentence)`` of each one-valued fact the user's words state."""
    return tuple((f.attribute, f.text) for f in extract_facts(user_text)
                 if f.attribute in _OPENINGS and not f.negated)


def contradicts(user_text: str, facts: frozenset[str]) -> bool:
    """Whether ``user_text`` states a one-valued fact that ``facts`` state with another value."""
    for attribute, sentence in _one_valued(user_text):
        opening = _OPENINGS[attribute]
        if sentence not in facts and any(f.startswith(opening) for f in facts):
            return True
    return False


def put_contradicted_last(hits: Sequence[MemoryHit], blocks: Iterable[str]) -> list[MemoryHit]:
    """``hits`` in order, those whose question the facts of ``blocks`` contradict moved last."""
    facts = facts_stated(blocks)
    if not facts:
        return list(hits)
    stale = [contradicts(_question(h), facts) or contradicts(_as_user(_answer(h)), facts) for h in hits]
    return [h for h, old in zip(hits, stale) if not old] + [h for h, old in zip(hits, stale) if old]


def _as_user(answer: str) -> str:
    """What the assistant said about the user, in the user's first person."""
    for pattern, replacement in _SECOND_PERSON:
        answer = pattern.sub(replacement, answer)
    return answer


def _answer(hit: MemoryHit) -> str:
    """The assistant's words of a recalled exchange ("" for a question never answered)."""
    answer = hit.metadata.get("answer")
    if isinstance(answer, str):
        return answer
    return hit.content.split("\nA: ", 1)[1] if "\nA: " in hit.content else ""


def _question(hit: MemoryHit) -> str:
    """The user's words of a recalled exchange (its ``question``; else what precedes ``A:``)."""
    question = hit.metadata.get("question")
    if isinstance(question, str):
        return question
    return hit.content.removeprefix("Q: ").split("\nA: ", 1)[0]
