"""Checks a model-written summary must pass before it replaces what it folds.

A small model asked to summarise sometimes answers the conversation instead ("Hi Marta, I'm here
to help you with your new conversation. What's your name?"), copies the transcript, returns
nothing, or repeats the old summary and drops what was just said. Committing that would replace
the turns it folds with nothing useful; the memory keeps its old state instead and tries again
later. The checks are cheap and need no model:

* :func:`check_piece`: a newly written part of a summary is not empty (a short one is fine: the
  reference kept any text), not a greeting or an assistant's reply, not a transcript, holds no
  control characters nor an instruction to the model (what a fact may not hold), is not JSON
  nor mostly symbols, and does not name mostly what nobody
  said in the turns it summarises (a model inventing "the user is Bob, in Tokyo" must not
  replace them); :func:`is_about` tells whether it shares a word with them at all;
* :func:`check_summary`: the new summary is not empty, keeps most of the names (people, places)
  of the old summary and of what the user said in the folded turns (at most ten of the latter
  are required: a bounded summary of a long backlog cannot name everything; one of one or two),
  counting a value the user changed as kept (it is in the history).

    >>> check_piece("Hi Marta, I'm here to help you with your new conversation. What's your name?")
    'reads like a greeting or an assistant reply'
    >>> sorted(named_entities("The user moved from Lisbon to Porto on October 3rd."))
    ['3rd', 'lisbon', 'october', 'porto']
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..._core.untrusted import steers
from ..facts.kinds import wordset
from .text import role_content

__all__ = ["check_piece", "check_summary", "is_about", "named_entities", "names_in", "names_required", "names_said",
           "trim_to_sentence", "user_statements", "without_preamble"]


# Capitalised words that open sentences without naming anything.
_OPENERS = wordset("""
I I'm I've I'd I'll The A An She He They It This That These Those We You Your My Our Her His Their User Users
Assistant Hi Hello Hey Thanks Thank Yes No Okay Ok Oh And But So Then Now Also Today Tomorrow Good Great Nice Sure
Well Facts Conversation Summary Honestly Funny Cool Pretty Big Is Can What How Where When Why Who Please Let There
Here Haha After Before During While If In On At For With From To Of As By Any Some Every All One Maybe Just
Actually Really Perfect Awesome Right Got Love Like Not Do Does Did Could Would Should Will Are Was Were Have Has Had
Tell Give Show Remind Suggest Recommend Sounds Yeah Yep Nope Also Sorry Wow Sure Okay
""")
#: "I" and its contractions are capitalised anywhere in a sentence.
_I_WORDS = frozenset(("I", "I'm", "I've", "I'd", "I'll", "I\u2019m", "I\u2019ve", "I\u2019d", "I\u2019ll"))
#: The sides a summary names ("the User said"): never a name of what was said.
_ROLES = frozenset(("User", "Assistant"))
_TOKEN = re.compile(r"[^\W_][\w'\u2019-]*|[.!?:\n]", re.UNICODE)
# An assistant's reply opens like one, or speaks as the assistant ("how can I help") anywhere; a
# summary may report such words in the third person ("the assistant said nice to meet you").
_GREETING = re.compile(
    r"^\W*(hi|hello|hey|good (morning|evening|night)|ol[áa]|greetings|dear|nice to meet you|i'?m sorry|"
    r"sure|certainly|of course|here is|here's|i can|absolutely)\b|"
    r"how (can|may) i (help|assist)|what'?s your name\?|i'?m here to help|let me know if you|as an ai\b",
    re.IGNORECASE)
_TRANSCRIPT = re.compile(r"(?im)^\s*(user|assistant|system)\s*:|^\s*(new conversation|previous summary|"
                         r"old memory|new messages)\s*:")
_SENTENCE_END = re.compile(r"[.!?\"')\]]$")
#: A new summary must keep at least this share of the names it should (when there are 3 or more)...
MIN_KEPT = 0.5
#: ...and of the names the user said in the folded turns, never more than this many.
MAX_REQUIRED = 10


def named_entities(text: str) -> set[str]:
    """Named things, cheaply: capitalised words and numbers, case-folded (possessive 's removed).

    A capitalised word opening a sentence counts unless it is a common opener ("The", "She").
    """
    return _capitalised(text, _OPENERS, numbers=True)


def _inner_names(text: str) -> set[str]:
    """Capitalised words inside sentences, case-folded: the names a summary gives, without the
    words capitalised only because they open a sentence ("Afterwards", "Cats")."""
    return _capitalised(text, None, numbers=False)


def _capitalised(text: str, openers: frozenset[str] | None, numbers: bool) -> set[str]:
    """Capitalised words (and numbers, if asked), case-folded, possessive 's removed; one opening
    a sentence counts when ``openers`` is given and does not hold it."""
    found: set[str] = set()
    start = True
    for token in _TOKEN.findall(text or ""):
        if token in ".!?:\n":
            start = True
            continue
        if token[0].isdigit():
            if numbers:
                found.add(token.casefold())
        elif token[0].isupper() and token not in _I_WORDS and token not in _ROLES \
                and not (start and (openers is None or token in openers)):
            word = token.casefold()
            found.add(word[:-2] if word.endswith(("'s", "\u2019s")) else word)
        start = False
    return found


def user_statements(messages: Iterable[Any]) -> list[str]:
    """What the user said in ``messages`` that states something (questions and small talk excluded)."""
    from ..facts.extraction import Exchange, worth_reading

    return [text for role, text in map(role_content, messages) if role == "user" and worth_reading(Exchange(text))]


def check_piece(piece: str, source: str = "") -> str | None:
    """Why a newly written part of a summary must not be used, or None if it may.

    ``source``: the turns it summarises, as sent to the model ("" skips the check against them).

        >>> check_piece("The user said their name is Bob and they live in Tokyo.",
        ...             "user: My cousin Lukas moved to Berlin last year.")
        'names what the turns it summarises do not'
        >>> check_piece("The user's cousin Lukas moved to Berlin.", "user: My cousin Lukas moved to Berlin last year.")
    """
    text = (piece or "").strip()
    if not text:
        return "empty"
    if _GREETING.search(text[:200]):
        return "reads like a greeting or an assistant reply"
    if _TRANSCRIPT.search(text):
        return "copies the prompt or the transcript"
    if _CONTROL.search(text):
        return "holds control characters"
    if steers(text):  # as a fact would be refused: it would sit in every turn's system message
        return "holds an instruction to the model"
    if _is_json(text):
        return "is JSON, not sentences"
    visible = sum(not c.isspace() for c in text)
    if sum(c.isalnum() for c in text) * 2 < visible:  # "[[[[" (a word or a number is no symbol)
        return "is mostly symbols, not sentences"
    # A piece naming nothing is not refused on its own: the facts kept beside it carry the names,
    # and :func:`check_summary` refuses a whole summary that loses most of them. One naming mostly
    # what nobody said is refused: a model inventing "the user is Bob, in Tokyo" would be kept
    # and sent with every turn.
    if source.strip():
        known = _stems(source)
        named = _inner_names(text)
        invented = {n for n in named if _stem(n) not in known}
        if len(invented) >= 2 and 2 * len(invented) > len(named):
            return "names what the turns it summarises do not"
    return None


def _is_json(text: str) -> bool:
    """``text`` is a JSON value other than a string ("null", an object, a list): a reply in the
    shape of the facts request, or junk, never a summary. A plain word ("SUMMARY") is not JSON."""
    if text[:1] not in ("{", "[") and text not in ("null", "true", "false"):
        return False
    try:
        return not isinstance(json.loads(text), str)
    except (ValueError, RecursionError):
        return False


def is_about(piece: str, source: str) -> bool:
    """Whether ``piece`` shares a word with the turns it summarises (``source``), besides the
    words any summary uses ("the user said"): one that shares none (junk from a server, a
    placeholder) may still be kept, but it covers none of them.

        >>> is_about("asdkj qwe zxc 123", "user: My cousin Lukas moved to Berlin.")
        False
        >>> is_about("The user talked about family moves.", "user: My cousin Lukas moved to Berlin.")
        True
    """
    known = _stems(source)
    return any(_stem(w) in known for w in _words(piece) if w not in _SUMMARY_WORDS)


# Control characters other than line breaks and tabs: a model never writes them in prose.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
#: The words a summary uses about any conversation: sharing only these says nothing of the turns.
_SUMMARY_WORDS = wordset("""
user users assistant said says say told tells asked asks talked talks mentioned mentions shared shares
conversation discussed discusses about the and that this they their them with for was were has have had
""")


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _stems(text: str) -> set[str]:
    return {_stem(w) for w in _words(text)}


def _stem(word: str) -> str:
    # The first four letters: "moves" and "moved", "Lisboa" and "Lisbon" match; enough for a check.
    return word.casefold()[:4]


def check_summary(new: str, old: str, messages: Sequence[Any], changed: Iterable[str] = ()) -> str | None:
    """Why ``new`` must not replace ``old`` after folding ``messages``, or None if it may.

    ``changed``: old values the user changed (superseded facts); losing them is no loss.
    """
    text = (new or "").strip()
    if not text:
        return "empty"
    have = named_entities(text) | set().union(*(named_entities(c) for c in changed))
    old_names = _names(named_entities(old))
    if len(old_names) >= 3 and len(old_names & have) < MIN_KEPT * len(old_names):
        return f"keeps {len(old_names & have)} of the {len(old_names)} names of the old summary"
    said = names_said(messages)
    if len(said & have) < names_required(said):
        return f"keeps {len(said & have)} of the {len(said)} names the user said"
    return None


def names_said(messages: Sequence[Any]) -> set[str]:
    """The names in what the user stated in ``messages`` (see :func:`user_statements`)."""
    return names_in("\n".join(user_statements(messages)))


def names_required(said: set[str]) -> float:
    """How many of the names the user said a summary of their turns must keep: half of them, at
    most :data:`MAX_REQUIRED`, and one of one or two (a model's "The user said some things." must
    not replace six turns about Tavira)."""
    return min(MIN_KEPT * len(said), MAX_REQUIRED) if len(said) >= 3 else min(len(said), 1)


def names_in(text: str) -> set[str]:
    """The names of ``text`` without numbers: "day 294" of a long backlog is nothing a summary must keep."""
    return _names(named_entities(text))


def _names(found: set[str]) -> set[str]:
    return {n for n in found if not n[:1].isdigit()}


# What a model may put before the summary it was asked for: an announcement ("Sure thing! Here is a
# two-sentence summary of the conversation:") or a heading ("## Summary", "**Updated Conversation
# Summary:**", "Summary so far:", "The summary of the conversation is:"). Said to the reader, not
# part of the summary; a sentence that opens with the word ("Summary of the trip was sent") stays.
_SUMMARY_WORD = r"(?:summary|recap|overview|r[ée]sum[ée]|zusammenfassung|resumen|resumo|riassunto|samenvatting)"
_PREAMBLE = re.compile(
    r"^(?:[^\n.!?:]{0,40}[.!?][ \t]+){0,2}"
    r"(?:here(?:\s+is|'s|\u2019s)|below\s+is|voici|hier\s+ist|aqu[íi]\s+est[áa]|ecco)\s+[^\n:]{0,40}?\b"
    rf"{_SUMMARY_WORD}\b[^\n:]{{0,120}}:[*_]*(?=\s|$)"
    r"|^[#*_ \t]*(?:the\s+)?(?:(?:updated|new|current|conversation|brief|short)\s+){0,3}"
    rf"{_SUMMARY_WORD}\b(?:\s+so far|\s+of (?:the|our|this) (?:conversation|chat|discussion)(?: so far)?)?"
    r"(?:\s*\([^)\n]{0,30}\))?(?:\s+is)?[*_ \t]*(?::[*_]*(?=\s|$)|\n)"
    r"|^[#*_ \t]*in summary\s*:",
    re.IGNORECASE)


def without_preamble(text: str) -> str:
    """``text`` without what announces the summary before it ("Here is the summary:", a heading)."""
    text = text.strip()
    for _ in range(2):  # an announcement, then a heading
        text = _PREAMBLE.sub("", text, count=1).strip()
    return text


def trim_to_sentence(text: str) -> str:
    """A reply cut by ``max_tokens``, ended at its last complete sentence (whole if it has none)."""
    text = text.strip()
    if not text or _SENTENCE_END.search(text):
        return text
    cut = max(text.rfind(". "), text.rfind("! "), text.rfind("? "))
    return text[:cut + 1] if cut > 0 else text
